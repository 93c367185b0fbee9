# libpq's COPY reading a PostgreSQL store's label rows (src/rankgate/_pg_read.c); used only
# through rankgate.store.columns.StoreReader.labels.
#
# copy_labels(conninfo, settings, sql) connects (client encoding UTF8), makes the session read
# only, sets each (name, value) of settings with set_config, and runs COPY (sql) TO STDOUT in
# binary; sql gives text, text and float8 columns. It returns (rows, query_offsets, query_data,
# document_offsets, document_data, grades): int64 Arrow offsets and their data, float64 grades.
# Errors raise Error(sqlstate or '', message, connected); rows of another shape (a NULL, another
# type or number of columns) raise Unsupported. The GIL is released while libpq works.

from typing import Any

class Error(Exception): ...
class Unsupported(Exception): ...

def copy_labels(
    conninfo: str, settings: tuple[tuple[str, str], ...], sql: str
) -> tuple[int, Any, Any, Any, Any, Any]: ...
