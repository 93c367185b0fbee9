"""A store window as Arrow columns, with no Python object per document ID.

The database itself writes each trace as one line of JSON: the object the record path builds from
the row (``backends._record``: the attributes first, the store's own columns over them, the query's
labels as ``relevance_scores``). The compiled JSON Lines scanner (``io/jsonl_arrow.py``) turns a
block of such lines into the columnar path's Arrow columns, the way it reads a JSON Lines file.

A row the database cannot vouch for (stored JSON that does not parse, a value of an unexpected
type) becomes the line ``!``, which the scanner flags slow like any line it is unsure of. Slow rows
are read again by their key through the record path (``StoreSource.reread``), so their value or
message is the record path's to the letter.

Only the SQL differs between the dialects: SQLite keeps lists and attributes as JSON text, which is
checked with ``json_valid`` and spliced; PostgreSQL renders its arrays and JSONB with ``to_json``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from rankgate.io.validate import FieldMap
from rankgate.store.backends import FETCH_ROWS, Backend, Window

__all__ = ["LINE_FIELDS", "LineBlock", "StoreColumns", "line_blocks", "parse_lines"]

#: The record keys a line carries besides the attributes; any other requested name is looked up
#: in the attributes, as ``lookup_path`` does on the record. ``labeled_at`` is left out: only the
#: stale-label filter reads it, and that filter keeps to the record path.
LINE_FIELDS = ("trace_id", "query_id", "timestamp", "variant", "relevance_scores", "retrieved_ids")
_UNSURE = "!"  # not JSON: the scanner flags the row slow

# SQLite: every column must hold the type the record path expects, and the JSON text must be
# valid on its own, so that splicing it cannot change what the line means (a damaged list such as
# '["a"],"query_id":"x"' would otherwise override a key). The ranking goes last: printf builds the
# line in one allocation, and nothing after the list can be reinterpreted.
_SQLITE_LINE = """coalesce(CASE WHEN typeof(t.trace_id) = 'text' AND typeof(t.query_id) = 'text'
 AND typeof(t.recorded_at) = 'text' AND (t.variant IS NULL OR typeof(t.variant) = 'text')
 AND typeof(t.retrieved_ids) = 'text' AND json_valid(t.retrieved_ids)
 AND (t.attributes IS NULL OR t.attributes = ''
      OR (typeof(t.attributes) = 'text' AND json_valid(t.attributes)))
 AND (l.grades IS NULL OR json_valid(l.grades))
THEN printf('{%s"trace_id":%s,"query_id":%s,"timestamp":%s%s%s,"retrieved_ids":%s}',
 CASE WHEN t.attributes IS NULL OR t.attributes = '' THEN ''
      WHEN json_type(t.attributes) <> 'object' OR json(t.attributes) = '{}' THEN ''
      ELSE substr(json(t.attributes), 2, length(json(t.attributes)) - 2) || ',' END,
 json_quote(t.trace_id), json_quote(t.query_id), json_quote(t.recorded_at),
 coalesce(',"variant":' || json_quote(t.variant), ''),
 coalesce(',"relevance_scores":' || l.grades, ''),
 t.retrieved_ids) END, '!')"""

_SQLITE_LABELS = (
    "LEFT JOIN (SELECT query_id, json_group_object(document_id, grade) AS grades "
    "FROM rankgate_labels GROUP BY query_id) l ON l.query_id = t.query_id"
)

# PostgreSQL: JSONB attributes render as an object's text; arrays and texts through to_json. Grades
# are aggregated as json, not jsonb: json keeps float8's shortest exact digits, as psycopg's binary
# float reaches the record path. format_time's text for the time, for years it can write.
_POSTGRES_LINE = """CASE WHEN extract(year FROM t.recorded_at AT TIME ZONE 'UTC') BETWEEN 1000 AND 9999
THEN concat(
 CASE WHEN t.attributes IS NULL OR jsonb_typeof(t.attributes) <> 'object'
      OR t.attributes = '{}'::jsonb THEN '{'
      ELSE left(t.attributes::text, -1) || ',' END,
 '"trace_id":', to_json(t.trace_id)::text,
 ',"query_id":', to_json(t.query_id)::text,
 ',"timestamp":"',
 to_char(t.recorded_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'), '"',
 ',"variant":' || to_json(t.variant)::text,
 ',"relevance_scores":' || l.grades::text,
 ',"retrieved_ids":', to_json(t.retrieved_ids)::text, '}')
ELSE '!' END"""

_POSTGRES_LABELS = (
    "LEFT JOIN LATERAL (SELECT json_object_agg(document_id, grade) AS grades "
    "FROM rankgate_labels WHERE query_id = t.query_id) l ON true"
)


class LineBlock:
    """Consecutive rows of a window: each row's key (SQLite's rowid, PostgreSQL's seq), its query
    ID when asked for (for sampling), and its line."""

    __slots__ = ("keys", "lines", "query_ids")

    def __init__(self, keys: list[int], query_ids: list[Any] | None, lines: list[bytes]) -> None:
        self.keys = keys
        self.query_ids = query_ids
        self.lines = lines


def line_blocks(backend: Backend, window: Window, *, query_ids: bool) -> Iterator[LineBlock]:
    """The window's traces as JSON lines, in the record path's order, a block at a time."""
    where, params = backend._window_where(window)
    if backend.dialect == "sqlite":
        key, line, join = "t.rowid", _SQLITE_LINE, _SQLITE_LABELS
    else:
        key, line, join = "t.seq", _POSTGRES_LINE, _POSTGRES_LABELS
    sql = (
        f"SELECT {key}, {'t.query_id' if query_ids else 'NULL'}, {line} "
        f"FROM rankgate_traces t {join}{where} ORDER BY {backend._arrival}"
    )
    for rows in backend.stream_blocks(sql, params, FETCH_ROWS):
        keys = [row[0] for row in rows]
        ids = [row[1] for row in rows] if query_ids else None
        texts = [row[2] for row in rows]
        # SQLite hands bytes (see stream_blocks); psycopg decodes text.
        lines = [text.encode() for text in texts] if texts and isinstance(texts[0], str) else texts
        yield LineBlock(keys, ids, lines)


def parse_lines(
    lines: Sequence[bytes], fields: FieldMap, segment_names: Sequence[str], first_line: int
) -> tuple[Any, npt.NDArray[np.bool_]]:
    """The scanner's columns of these lines and which rows it left to the validator."""
    from rankgate.io import jsonl_arrow

    data = b"\n".join(lines)
    if data.count(b"\n") != len(lines) - 1:
        # A line break inside stored JSON (legal between tokens, SQLite keeps the text as written)
        # would split a row in two: such rows go to the validator whole.
        lines = [line if b"\n" not in line else _UNSURE.encode() for line in lines]
        data = b"\n".join(lines)
    keys = (fields.query_id, fields.retrieved_ids, fields.relevant_ids, fields.relevance_scores)
    parsed = jsonl_arrow.parse_chunk(data, keys, tuple(segment_names), first_line)
    if len(parsed) != len(lines):  # cannot happen: every line is non-blank
        raise RuntimeError("the store's lines and the scanner's rows disagree")
    return parsed.table, parsed.slow.copy()


class StoreColumns:
    """The schema ``io/columnar.py`` sees for a store: the trace fields with the scanner's types,
    and, since any attribute may be a segment, every other name as text.

    ``names`` iterates over the trace fields but contains every name, so that the columnar reader
    asks ``StoreSource.batches`` for each segment field it needs (see ``_arrow_chunks``).
    """

    def __init__(self, fields: FieldMap) -> None:
        import pyarrow as pa

        from rankgate.io import jsonl_arrow

        scanned = jsonl_arrow.schema()
        self._types = {path: scanned.field(index).type for index, path in enumerate(fields.paths())}
        self._text = pa.large_string()
        self.names = _EveryName(fields.paths())

    def field(self, name: str) -> Any:
        import pyarrow as pa

        return pa.field(name, self._types.get(name, self._text))


class _EveryName(list[str]):
    """A list of names that claims to contain every name: a store row may carry any attribute."""

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str)
