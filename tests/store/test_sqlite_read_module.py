"""``rankgate._sqlite_read`` called the wrong way: one-line errors, never a crash or a hang.

The store's reader calls the module only as ``store/columns.py`` does; these hold the module's
own guards, found by fuzzing it (a label read while another statement is open, sizes that
overflow, buffers that lie about their length, a member whose flag runs Python code)."""

from __future__ import annotations

import os
import sqlite3
import struct
import sys
from pathlib import Path
from typing import Any

import pytest

try:
    import rankgate._sqlite_read as sqlite_read
except ImportError:  # built where SQLite's headers were found; CI requires it
    if os.environ.get("RANKGATE_REQUIRE_NATIVE"):
        raise
    pytest.skip("rankgate._sqlite_read is not built here", allow_module_level=True)


@pytest.fixture
def database(tmp_path: Path) -> str:
    path = tmp_path / "labels.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE rankgate_labels (query_id TEXT, document_id TEXT, grade REAL)")
    db.executemany(
        "INSERT INTO rankgate_labels VALUES (?, ?, ?)",
        [(f"q{n % 50}", f"d{n}", float(n % 4)) for n in range(2000)],
    )
    db.commit()
    db.close()
    return path.as_uri() + "?mode=ro"


def _column(texts: list[bytes]) -> tuple[bytes, bytes, None]:
    offsets = [0]
    for text in texts:
        offsets.append(offsets[-1] + len(text))
    return struct.pack(f"<{len(offsets)}q", *offsets), b"".join(texts), None


def test_a_label_read_while_a_cursor_is_open_leaves_nothing_behind(database: str) -> None:
    """``rankgate_label`` is registered once, with the connection: a label read while another
    statement is open works, and the function called afterwards outside a read is an error."""
    connection = sqlite_read.Connection(database, 1000)
    cursor = connection.query("SELECT rowid FROM rankgate_labels", (), "i")
    assert cursor.fetch(1)[0] == 1
    rows = connection.read_labels(
        "SELECT sum(rankgate_label(query_id, document_id, grade)) FROM rankgate_labels "
        "WHERE rowid < 5",
        (),
    )[0]
    assert rows == 4
    stray = connection.query("SELECT rankgate_label('q', 'd', 1.0) FROM rankgate_labels", (), "i")
    with pytest.raises(sqlite_read.Error) as refused:
        stray.fetch(10)
    assert "only by a label read" in refused.value.args[1]
    with pytest.raises(RuntimeError):  # a failed statement does not look like an end
        stray.fetch(10)
    cursor.close()
    connection.close()


def test_sizes_that_would_overflow_are_refused_or_capped(database: str) -> None:
    connection = sqlite_read.Connection(database, 1000)
    rows, _ = connection.query("SELECT rowid FROM rankgate_labels", (), "i").fetch(sys.maxsize)
    assert rows == 2000  # capped to a batch's worth, not a hang
    plain = struct.pack("<q", 1)
    for rows in (-1, 1 << 61, (1 << 60) + 1):
        with pytest.raises(ValueError):
            sqlite_read.store_lines(rows, plain, _column([b"{}"]), [], "")
    connection.close()


def test_store_lines_refuses_buffers_that_do_not_fit() -> None:
    plain = struct.pack("<q", 1)
    attributes = _column([b'{"a": 1}'])
    past_the_end = (struct.pack("<2q", 0, 1 << 40), b"{}", None)
    decreasing = (struct.pack("<2q", 2, 1), b"{}", None)
    for column in (past_the_end, decreasing):
        with pytest.raises(ValueError):
            sqlite_read.store_lines(1, plain, column, [], "")
        with pytest.raises(ValueError):
            sqlite_read.store_lines(1, plain, attributes, [('"q":', column, False)], "")
    with pytest.raises(ValueError):  # shorter than its rows
        sqlite_read.store_lines(2, plain * 2, attributes, [], "")

    class Evil:
        def __bool__(self) -> bool:
            members[0] = None
            return False

    members: list[Any] = [('"query_id":', _column([b"x"]), Evil())]
    with pytest.raises(TypeError):  # the flag must be a bool: no Python code runs meanwhile
        sqlite_read.store_lines(1, plain, attributes, members, "")
    _, data = sqlite_read.store_lines(
        1, plain, attributes, [('"query_id":', _column([b"x"]), False)], ""
    )
    assert bytes(data) == b'{"a": 1,"query_id":"x"}\n'


def test_no_statement_or_two_are_errors_not_empty_reads(database: str) -> None:
    connection = sqlite_read.Connection(database, 1000)
    for sql in ("", "  -- nothing", "SELECT 1; SELECT 2"):
        with pytest.raises(sqlite_read.Error) as refused:
            connection.query(sql, (), "i")
        assert refused.value.args[0] != 0 and refused.value.args[1]
        with pytest.raises(sqlite_read.Error):
            connection.read_labels(sql, ())
    connection.close()
