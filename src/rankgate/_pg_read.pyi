# libpq's COPY reading a PostgreSQL store's label rows (src/rankgate/_pg_read.c); used only
# through rankgate.store.columns.StoreReader.labels.
#
# copy_labels(conninfo, settings, sqls) connects once per query of sqls (1-4; client encoding
# UTF8), makes the sessions read only, sets each (name, value) of settings with set_config, and
# runs COPY (sql) TO STDOUT in binary on each at once, in one snapshot, their rows in the order of
# sqls; each sql gives text, text and float8 columns. It returns (rows, runs, run_starts,
# query_offsets, query_data, document_offsets, document_data, grades): rows of one query that
# follow each other are a run, its first row in run_starts (int64) and its ID once in the query
# buffers; int64 Arrow offsets and their data, float64 grades.
# Errors raise Error(sqlstate or '', message, connected); rows of another shape (a NULL, another
# type or number of columns) raise Unsupported. The GIL is released while libpq works.

from typing import Any

class Error(Exception): ...
class Unsupported(Exception): ...

def copy_labels(
    conninfo: str, settings: tuple[tuple[str, str], ...], sqls: tuple[str, ...]
) -> tuple[int, int, Any, Any, Any, Any, Any, Any]: ...
