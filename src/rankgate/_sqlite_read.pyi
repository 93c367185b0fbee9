# SQLite's C API reading a trace store (src/rankgate/_sqlite_read.c); used only through
# rankgate.store.columns.StoreReader, which serves every columnar read of a SQLite store with it.
#
# Connection(uri, busy_ms) opens the database read-only. read_labels(sql, params) runs `sql`,
# which calls rankgate_label(query_id, document_id, grade) for each row, and returns (rows,
# query_offsets, query_data, document_offsets, document_data, grades, grade_valid,
# missing_grades): int64 Arrow offsets and their data, float64 grades, one uint8 per row (1: the
# grade is a number). query(sql, params, kinds) returns a Cursor whose fetch(max_rows) gives
# (rows, columns) or None at the end: per column (validity bitmap or None, null count, data) for
# kind 'i' (int64) and (validity or None, null count, offsets, data) for kind 't' (large_string).
# store_lines(...) writes each trace's JSON line from the raw columns (see the C source). The GIL
# is released while SQLite works; SQLite's errors raise Error(extended_code, message).

from typing import Any

class Error(Exception): ...

class Cursor:
    names: tuple[str, ...]
    def fetch(self, max_rows: int) -> tuple[int, list[tuple[Any, ...]]] | None: ...
    def close(self) -> None: ...

class Connection:
    def __init__(self, uri: str, busy_ms: int) -> None: ...
    def read_labels(self, sql: str, params: tuple[str | int, ...]) -> tuple[Any, ...]: ...
    def query(self, sql: str, params: tuple[str | int, ...], kinds: str) -> Cursor: ...
    def close(self) -> None: ...

def store_lines(
    rows: int,
    plain: Any,
    attributes: tuple[Any, Any, Any],
    members: list[tuple[str, tuple[Any, Any, Any], bool]],
    suffix: str,
) -> tuple[Any, Any]: ...
