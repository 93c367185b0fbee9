# SQLite's C API reading a trace store's labels (src/rankgate/_sqlite_read.c); called only through
# rankgate.store.columns.StoreReader._compiled_sqlite_labels.
#
# read_labels(uri, sql, params, busy_ms) runs `sql`, which calls rankgate_label(query_id,
# document_id, grade) for each row, on a read-only connection of its own, with the GIL released.
# It returns (0, "", rows, query_offsets, query_data, document_offsets, document_data, grades,
# grade_valid, missing_grades): int64 Arrow offsets and their data, float64 grades, one uint8 per
# row (1: the grade is a number); or (code, message) with SQLite's extended result code.

from typing import Any

def read_labels(
    uri: str, sql: str, params: tuple[str | int, ...], busy_ms: int
) -> tuple[Any, ...]: ...
