"""A store window as Arrow columns, with no Python object per ID: a SQLite store read through
SQLite's C API (``rankgate._sqlite_read``; through ADBC where it is not built), PostgreSQL through
ADBC.

The columnar read of a store has three parts, each done where it is cheapest:

* **The ranking.** PostgreSQL sends ``retrieved_ids`` (``TEXT[]``) as one text per row, its IDs
  joined by the unit separator (U+001F), with the array's length beside it; ``split_rankings``
  cuts the text into an Arrow ``list<string>`` in C++, and a row whose pieces do not number the
  array's length (an ID holding the separator, a null element) is the validator's. The driver's
  decoding of the binary array format appended each ID to its buffers one at a time, twice the
  client's time of the whole read; ``to_json`` on the server cost more than everything else
  together. SQLite keeps the ranking as JSON text, which comes as a column of its own, as stored, and
  the compiled scanner reads each value as one bare array (``jsonl_arrow.parse_rankings``): text
  that is anything more or less is the validator's. (Spliced into the line below, the ranking
  would need SQLite's ``json_valid`` of every row to keep a damaged list from adding a key, which
  took a third of the read.)
* **Everything else of the record** (attributes, the store's own columns over them): one short
  JSON line per trace, in the order ``backends._record`` builds the record, which the compiled JSON
  Lines scanner (``io/jsonl_arrow.py``) decodes in bulk, as it reads a file. PostgreSQL writes the
  lines in SQL, as does SQLite through ADBC; through ``_sqlite_read`` SQLite hands over the raw
  columns and ``_sqlite_read.store_lines`` writes the same lines in C (in SQL the JSON checks and
  concatenations took two thirds of the read on the system's SQLite). The lines arrive as one
  Arrow string column whose data buffer, each line ending in a newline, is handed to the scanner
  as it is.
* **The labels** (the newest judgment per query and document, which the table's key guarantees)
  are read once, grouped by query into a ``map<string, float64>`` column, and joined to each block
  of traces by query ID: a vectorised hash of the IDs, a binary search, and an exact comparison of
  the matched IDs. A query without labels in the table keeps the ``relevance_scores`` of its
  attributes, as the record does. SQLite's C API (``rankgate._sqlite_read``) reads a SQLite
  store's label rows about twice as fast as ADBC: a function of its own, called by the statement
  for each row, appends the row to the Arrow buffers.

A row the database cannot vouch for (SQLite JSON that does not parse or holds a line break, a value
of an unexpected type, a PostgreSQL time with a year outside 1000-9999, a ranking with more than one
dimension) becomes the line ``!``, which the scanner flags slow like any line it is unsure of. Slow
rows are read again by key through the record path (``StoreSource.reread``), so their value or
message is the record path's to the letter.

ADBC's PostgreSQL driver streams a result through COPY only when the query binds no parameters, so
the window's ends and variants reach the query as settings of the session (``set_config``, itself
bound), read back by ``current_setting``: values are never spliced into the SQL.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from rankgate import fast
from rankgate.io.validate import FieldMap
from rankgate.store.backends import StoreError, StoreUnavailable, Window, _sqlite_problem
from rankgate.store.urls import describe_error
from rankgate.times import format_time

__all__ = [
    "LabelGroups",
    "StoreColumns",
    "StoreReader",
    "available",
    "parse_lines",
    "split_rankings",
]

_UNSURE = "!"  # not JSON: the scanner flags the row slow
#: Rows per ADBC batch from SQLite (its driver's default is 1024), and the byte size PostgreSQL's
#: driver aims a batch at: about a chunk of the columnar path either way. PostgreSQL's batches are
#: split in the reading thread, six ahead (``StoreSource.batches``): at 64 MB those took 0.7 GB
#: more at 1M traces than at 16 MB, for no measurable time. SQLite's at 32,768 rows (about 40 MB
#: of lines and rankings) were each new memory the kernel had to map and clear: at 8,192 the
#: 1M-trace eval took 5.0 s and 1.03 GB instead of 5.2 s and 1.26 GB (2026-12-07).
_SQLITE_BATCH_ROWS = 8192
#: Rows per ADBC batch of the labels (each row is short).
_SQLITE_LABEL_BATCH_ROWS = 65_536
#: Label tables spanning this many rowids or more are read in two halves at once.
_SPLIT_LABELS_FROM = 1 << 20
_POSTGRES_BATCH_BYTES = 16 << 20
#: PostgreSQL label tables of this many pages (8 kB each by default) or more are read in two
#: halves at once (``StoreReader._label_pages``).
_SPLIT_LABEL_PAGES = 1024
#: Joins a PostgreSQL ranking's IDs on the wire (``split_rankings``).
RANKING_SEPARATOR = "\x1f"

# SQLite: every column must hold the type the record path expects, and the JSON text must be
# valid on its own, so that splicing it cannot change what the line means (a damaged list such as
# '["a"],"query_id":"x"' would otherwise override a key). Valid JSON is spliced as written: the
# attributes' object without its braces (whitespace between tokens is the scanner's to skip), the
# ranking last, where nothing after it can be reinterpreted. Text with a line break would split
# the line: such a row goes to the validator whole, as does any row of unexpected types, and text
# holding a NUL byte (json_valid and substr read text only up to one: '{"a":1}' then anything).
# Attributes as the recorder writes them (no white space around the braces) skip the trims, five
# per row and a quarter of the line's cost: valid JSON that opens and closes with a brace is an
# object, and an object with no '"' in it has no member.
_SQLITE_SPACE = "' ' || char(9, 13)"
_SQLITE_OBJECT = f"trim(t.attributes, {_SQLITE_SPACE})"
_SQLITE_INSIDE = f"substr({_SQLITE_OBJECT}, 2, length({_SQLITE_OBJECT}) - 2)"
_SQLITE_LINE = (
    """coalesce(CASE WHEN typeof(t.trace_id) = 'text' AND typeof(t.query_id) = 'text'
 AND typeof(t.recorded_at) = 'text' AND (t.variant IS NULL OR typeof(t.variant) = 'text')
 {ranking_checks}
 AND (t.attributes IS NULL OR t.attributes = ''
      OR (typeof(t.attributes) = 'text' AND json_valid(t.attributes)
          AND instr(t.attributes, char(10)) = 0 AND instr(t.attributes, char(0)) = 0))
THEN '{{' || CASE WHEN t.attributes IS NULL THEN ''
      WHEN substr(t.attributes, 1, 1) = '{{' AND substr(t.attributes, -1) = '}}'
      THEN CASE WHEN instr(t.attributes, '"') = 0 THEN '' ELSE
           substr(t.attributes, 2, length(t.attributes) - 2) || ',' END
      WHEN substr(OBJECT, 1, 1) <> '{{' OR trim(INSIDE, SPACE) = '' THEN ''
      ELSE INSIDE || ',' END
 || '"query_id":' || json_quote(t.query_id) || {trace_id} || {timestamp} || {variant}
 || ',"retrieved_ids":' || {ranking} || '}}' END, '!') || char(10)""".replace(
        "OBJECT", _SQLITE_OBJECT
    )
    .replace("INSIDE", _SQLITE_INSIDE.replace("{", "{{").replace("}", "}}"))
    .replace("SPACE", _SQLITE_SPACE)
)
# The ranking in the line (only when a field map reads another key as the ranking): valid JSON on a
# line of its own. Otherwise it travels as a column of its own, which the scanner reads as a bare
# array (``jsonl_arrow.parse_rankings``): no JSON check of a thousand bytes a row in SQL, and no
# splice to guard.
_SQLITE_RANKING_IN_LINE = {
    "ranking": "t.retrieved_ids",
    "ranking_checks": "AND typeof(t.retrieved_ids) = 'text' AND json_valid(t.retrieved_ids)\n"
    " AND instr(t.retrieved_ids, char(10)) = 0 AND instr(t.retrieved_ids, char(0)) = 0",
}
_SQLITE_RANKING_APART = {"ranking": "'[]'", "ranking_checks": ""}
_SQLITE_RANKING_COLUMN = (
    "CASE WHEN typeof(t.retrieved_ids) = 'text' THEN t.retrieved_ids END AS ranking"
)
# The store's columns other than the query ID and the ranking, each in the line only when a field
# or segment reads it by name (the scanner looks at nothing else, and rendering costs time).
_SQLITE_CARRIED = {
    "trace_id": "',\"trace_id\":' || json_quote(t.trace_id)",
    "timestamp": "',\"timestamp\":' || json_quote(t.recorded_at)",
    "variant": "coalesce(',\"variant\":' || json_quote(t.variant), '')",
}

# SQLite through ``_sqlite_read``: the raw columns, and whether their types are the record path's
# (``plain``); ``_sqlite_read.store_lines`` then writes the line above in C, checking the JSON
# itself. In SQL the checks and concatenations took two thirds of SQLite's time for a window
# (2.2 s of the 1M-trace bench window, against 0.7 s for the raw columns alone, 2026-12-07).
_SQLITE_PLAIN = (
    "CASE WHEN typeof(t.trace_id) = 'text' AND typeof(t.query_id) = 'text' "
    "AND typeof(t.recorded_at) = 'text' AND (t.variant IS NULL OR typeof(t.variant) = 'text') "
    "AND (t.attributes IS NULL OR typeof(t.attributes) = 'text'){ranking} THEN 1 ELSE 0 END"
)
# The store's columns a field or segment may read by name: (column, the line's prefix).
_SQLITE_MEMBERS = {
    "trace_id": ("t.trace_id", ',"trace_id":'),
    "timestamp": ("t.recorded_at", ',"timestamp":'),
    "variant": ("t.variant", ',"variant":'),
}

# PostgreSQL: JSONB attributes render as an object's text, texts through to_json; the ranking
# travels as the array itself (``{ranking}`` is ``[]`` then, and the column replaces it).
# format_time's text for the time, for years it can write.
_POSTGRES_LINE = """CASE WHEN extract(year FROM t.recorded_at AT TIME ZONE 'UTC') BETWEEN 1000 AND 9999
 AND coalesce(array_ndims(t.retrieved_ids), 1) = 1
THEN concat(
 CASE WHEN t.attributes IS NULL OR jsonb_typeof(t.attributes) <> 'object'
      OR t.attributes = '{{}}'::jsonb THEN '{{'
      ELSE left(t.attributes::text, -1) || ',' END,
 '"query_id":', to_json(t.query_id)::text, {trace_id}, {timestamp}, {variant},
 ',"retrieved_ids":', {ranking}, '}}', chr(10))
ELSE '!' || chr(10) END"""
# PostgreSQL with ``_sqlite_read.store_lines``: the raw columns, and whether the row is one the
# line above would write (``plain``). The server's concatenations and JSON renderings were 1.5 of
# its 5.5 CPU-s for the 1M-trace bench window, against 0.3 s for the raw columns (2026-12-08).
# A time in years 1000-9999 of UTC is one between these two instants.
_POSTGRES_PLAIN = (
    "CASE WHEN t.recorded_at >= '1000-01-01 00:00:00+00'::timestamptz "
    "AND t.recorded_at < '10000-01-01 00:00:00+00'::timestamptz "
    "AND coalesce(array_ndims(t.retrieved_ids), 1) = 1 THEN 1::int8 ELSE 0::int8 END"
)
_POSTGRES_MEMBERS = {
    "trace_id": ("t.trace_id", ',"trace_id":'),
    "timestamp": (
        "to_char(t.recorded_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')",
        ',"timestamp":',
    ),
    "variant": ("t.variant", ',"variant":'),
}
_POSTGRES_RANKING_COLUMNS = (
    "cardinality(t.retrieved_ids) AS ranking_length, "
    f"array_to_string(t.retrieved_ids, chr({ord(RANKING_SEPARATOR)})) AS ranking"
)
_POSTGRES_CARRIED = {
    "trace_id": "',\"trace_id\":' || to_json(t.trace_id)::text",
    "timestamp": '\',"timestamp":"\' || '
    "to_char(t.recorded_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"') || '\"'",
    "variant": "',\"variant\":' || to_json(t.variant)::text",
}

# Labels of the right types only (a hand-edited SQLite table may hold others); a grade that is not
# a number is a null, which sends the rows of its query to the validator, as does a NULL document
# (an empty ID then), which the record path reports as damaged labels.
_SQLITE_LABELS = (
    "SELECT query_id, coalesce(CAST(document_id AS TEXT), '') AS document_id, "
    "CASE WHEN document_id IS NOT NULL AND typeof(grade) IN ('real', 'integer') "
    "THEN CAST(grade AS REAL) END AS grade "
    "FROM rankgate_labels WHERE typeof(query_id) = 'text'"
)
_POSTGRES_LABELS = "SELECT query_id, document_id, grade FROM rankgate_labels"
# The same rows without the per-value casts, a sixth less time (10M rows: 2.36 s against 2.78 s
# on one thread). The columns' affinities (TEXT, TEXT, REAL) leave a value of another type only
# where a caller wrote a BLOB, or text that is no number as a grade; the driver types each column
# by its first batch and refuses a later value of another type. So the bare read is kept only
# when its columns came out as text, text and float64 with no missing document, and is read
# again with the casts otherwise (or when it failed: the guarded read meets a real error again).
# A BLOB document ID in a later batch becomes its bytes as text, as the cast makes it. Only for
# ID columns declared TEXT (``StoreReader._labels_declared_as_text``).
_SQLITE_LABELS_BARE = (
    "SELECT query_id, document_id, grade FROM rankgate_labels WHERE typeof(query_id) = 'text'"
)
# The same rows for ``_sqlite_read``, which converts each value as ``_SQLITE_LABELS`` does itself
# (the function appends the row it is called with; ``WHERE true`` takes the conditions that follow).
_SQLITE_LABELS_COMPILED = (
    "SELECT sum(rankgate_label(query_id, document_id, grade)) FROM rankgate_labels WHERE true"
)


try:  # built where SQLite's headers were found (setup.py); else a SQLite store is read through ADBC
    import rankgate._sqlite_read as _sqlite_read
except ImportError:  # pragma: no cover - the build without SQLite's headers
    _sqlite_read = None  # type: ignore[assignment]
#: Whether a SQLite store is read through ``_sqlite_read`` (SQLite's C API) when it is built, every
#: query of the columnar read included; else through ADBC. Never both in one read: ADBC's driver
#: carries a copy of SQLite of its own, and POSIX locks belong to the process, so a connection one
#: copy closes drops the locks the other copy's open connections hold on the same file (SQLite's
#: "How To Corrupt An SQLite Database File", 2.2.1). ``_sqlite_read`` links the system's SQLite,
#: the one Python's ``sqlite3`` (the record path's ``StoreSource.reread``, the recorder) links.
#: The tests turn it off to hold the ADBC read equal to the record path as well.
SQLITE_C_API = True

try:  # built where libpq's headers were found (setup.py); else the labels are read through ADBC
    import rankgate._pg_read as _pg_read
except ImportError:  # pragma: no cover - the build without libpq's headers
    _pg_read = None  # type: ignore[assignment]
#: Whether a PostgreSQL store is read with rankgate's compiled helpers where they are built: its
#: labels by ``_pg_read`` (libpq's COPY, parsed in C: 0.9 CPU-s against ADBC's 1.9 for 10M label
#: rows, and no copies of the rows after), its trace lines written by ``_sqlite_read.store_lines``
#: from the raw columns (``_POSTGRES_PLAIN``). The tests turn it off to hold the SQL of the
#: ADBC-only read equal to the record path as well.
POSTGRES_C_API = True


class _SQLiteReadError(Exception):
    """An error of ``_sqlite_read``, with SQLite's (extended) result code as the drivers give it."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.sqlite_errorcode = code


def available(dialect: str) -> bool:
    """Whether a store of this dialect can be read as columns: SQLite's through ``_sqlite_read``
    or ADBC's driver, PostgreSQL's through ADBC's (``rankgate[postgres]`` brings it; SQLite's is a
    dependency of rankgate)."""
    try:
        if dialect == "sqlite":
            if _sqlite_read is not None and SQLITE_C_API:
                return True
            import adbc_driver_sqlite  # noqa: F401
        else:
            import adbc_driver_postgresql  # type: ignore[import-untyped]  # noqa: F401
    except ImportError:
        return False
    return True


@dataclass(frozen=True, slots=True)
class LabelGroups:
    """The labels table grouped by query: ``query_ids[i]`` has the labels ``grades[i]``; ``hashes``
    holds the query IDs' hashes sorted, ``order`` the group of each sorted hash."""

    query_ids: Any  # pa.LargeStringArray
    grades: Any  # pa.MapArray, map<large_string, float64>
    hashes: npt.NDArray[np.uint64]
    order: npt.NDArray[np.int64]
    #: Whether the groups are in the store's order of query IDs (else in order of appearance).
    ordered: bool = True
    #: The labels of queries whose rows came in several runs, joined: group ``len(grades) + i``
    #: (``query_ids`` holds their IDs after the runs'). Their runs are in no group ``order`` holds.
    joined: Any = None

    def take(self, groups: npt.NDArray[np.int64]) -> Any:
        """The label maps of these groups, as one array."""
        import pyarrow as pa

        if self.joined is None:
            return self.grades.take(fast.index_array(groups))
        base = len(self.grades)
        in_runs = groups < base
        first = self.grades.take(fast.index_array(np.where(in_runs, groups, 0)))
        second = self.joined.take(fast.index_array(np.where(in_runs, 0, groups - base)))
        choice = np.arange(len(groups), dtype=np.int64) + np.where(in_runs, 0, len(groups))
        return pa.concat_arrays([first, second]).take(fast.index_array(choice))

    def table(self) -> Any:
        """The labels as an Arrow table: ``query_id`` and ``relevance_scores``, one row per query
        in the store's order of query IDs (SQLite's: their bytes)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        if self.joined is None:
            table = pa.table({"query_id": self.query_ids, "relevance_scores": self.grades})
        else:
            groups = np.sort(self.order)
            table = pa.table(
                {
                    "query_id": self.query_ids.take(fast.index_array(groups)),
                    "relevance_scores": self.take(groups),
                }
            )
        if self.ordered:
            return table
        return table.take(pc.sort_indices(table.column("query_id")))

    def lookup(self, query_ids: Any) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
        """For each query ID, its group (-1 without labels), and which IDs could not be told
        apart from another by their hash (the caller leaves those rows to the validator)."""
        import pyarrow.compute as pc

        count = len(query_ids)
        groups = np.full(count, -1, dtype=np.int64)
        unsure = np.zeros(count, dtype=np.bool_)
        if not len(self.hashes) or not count:
            return groups, unsure
        wanted = string_hashes(query_ids)
        at = np.searchsorted(self.hashes, wanted)
        at[at == len(self.hashes)] = 0
        hit = self.hashes[at] == wanted
        if query_ids.null_count:
            hit &= fast.numpy_of(query_ids.is_valid())
        candidates = np.flatnonzero(hit)
        if not len(candidates):
            return groups, unsure
        group = self.order[at[candidates]]
        # The hash only finds a candidate; the IDs themselves must be equal.
        same = pc.equal(
            query_ids.take(fast.index_array(candidates)),
            self.query_ids.take(fast.index_array(group)),
        )
        same_rows = fast.numpy_filled(same, False)
        groups[candidates[same_rows]] = group[same_rows]
        # Another group may share the hash (a collision): such rows are not trusted either way.
        unsure[candidates[~same_rows]] = True
        return groups, unsure


def string_hashes(strings: Any) -> npt.NDArray[np.uint64]:
    """A 64-bit polynomial hash of each string's bytes (and length), computed over the Arrow
    buffers at once; a null hashes like the empty string."""
    import pyarrow as pa

    count = len(strings)
    compiled = fast.compiled_string_hashes(strings)
    if compiled is not None:
        return compiled
    if not pa.types.is_large_string(strings.type):
        strings = strings.cast(pa.large_string())
    offsets = np.frombuffer(strings.buffers()[1], dtype=np.int64)[
        strings.offset : strings.offset + count + 1
    ]
    lengths = np.diff(offsets).astype(np.uint64)
    hashes = lengths * np.uint64(0x9E3779B97F4A7C15)
    start, end = int(offsets[0]), int(offsets[-1])
    if end == start:
        return hashes
    data = np.frombuffer(strings.buffers()[2], dtype=np.uint8)[start:end].astype(np.uint64)
    ends = offsets[1:] - start
    owner = np.repeat(np.arange(count), lengths.astype(np.int64))
    from_end = ends[owner] - 1 - np.arange(end - start)
    longest = int(lengths.max())
    powers = np.ones(longest, dtype=np.uint64)
    with np.errstate(over="ignore"):
        if longest > 1:
            powers[1:] = np.uint64(1099511628211)
            powers = np.cumprod(powers, dtype=np.uint64)
        weighted = (data + np.uint64(1)) * powers[from_end]
        present = np.flatnonzero(lengths)
        hashes[present] += np.add.reduceat(weighted, (offsets[:-1] - start)[present])
    return hashes


def _bare_labels_fit(table: Any) -> bool:
    """Whether a read of ``_SQLITE_LABELS_BARE`` gave what the guarded read would: ``None``
    (the read failed) does not."""
    import pyarrow as pa

    if table is None:
        return False
    kinds = table.schema.types
    return (
        len(kinds) == 3
        and all(pa.types.is_string(kind) or pa.types.is_large_string(kind) for kind in kinds[:2])
        and pa.types.is_float64(kinds[2])
        and table.column(1).null_count == 0
    )


class StoreReader:
    """One window of a store read on a read-only connection of its own (``_sqlite_read`` or
    ADBC, see ``SQLITE_C_API``).

    ``labels()`` reads the labels table grouped by query; ``traces()`` then yields record batches
    of ``key`` (SQLite's rowid, PostgreSQL's seq), ``query_id``, ``line`` (text, each ending in a
    newline) and, for PostgreSQL, ``ranking`` (the stored array). Errors are ``StoreError`` lines
    naming the store, its password masked.
    """

    def __init__(
        self, url: str, name: str, dialect: str, path: Path | None, lock_wait: float
    ) -> None:
        self.url = url
        self.name = name
        self.dialect = dialect
        self._path = path
        self._lock_wait = lock_wait
        self._database: Any = None
        self._connection: Any = None
        #: SQLite's C API (``_sqlite_read.Connection``), which then serves every query here.
        self._native: Any = None
        if dialect == "sqlite" and _sqlite_read is not None and SQLITE_C_API:
            assert path is not None
            # mode=ro: the engine refuses writes; as_uri() percent-encodes the path.
            uri = path.resolve().as_uri() + "?mode=ro"
            self._native = self._call(
                _sqlite_read.Connection,
                uri,
                max(int(lock_wait * 1000), 1),
                doing="cannot connect: ",
            )
            return
        try:
            # The drivers' low-level API: their DB-API layer imports pandas, polars and
            # pyarrow.dataset when installed, a third of a second for nothing used here.
            import adbc_driver_manager

            self._errors: Any = adbc_driver_manager.Error
            self._unavailable: Any = adbc_driver_manager.OperationalError
            if dialect == "sqlite":
                import adbc_driver_sqlite

                assert path is not None
                # mode=ro: the engine refuses writes; as_uri() percent-encodes the path.
                uri = path.resolve().as_uri() + "?mode=ro"
                self._database = adbc_driver_sqlite.connect(uri)
            else:
                import adbc_driver_postgresql

                self._database = adbc_driver_postgresql.connect(url)
            self._connection = adbc_driver_manager.AdbcConnection(self._database)
            if dialect == "sqlite":
                self._run(f"PRAGMA busy_timeout={max(int(lock_wait * 1000), 1)}")
                self._run("PRAGMA query_only=ON")
            else:
                self._run("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")
        except self._errors_or_import() as problem:
            self.close()
            raise self._problem(problem, "cannot connect: ") from None

    def _call(self, work: Any, *args: Any, doing: str = "query failed: ") -> Any:
        """``work(*args)`` of ``_sqlite_read``, its SQLite error as the store's one-line error."""
        assert _sqlite_read is not None
        try:
            return work(*args)
        except _sqlite_read.Error as problem:
            code, message = problem.args
            raise self._problem(_SQLiteReadError(code, message), doing) from None

    def _native_batches(self, sql: str, params: Sequence[Any], kinds: str) -> Iterator[Any]:
        """The rows of ``sql`` through SQLite's C API, as record batches: ``kinds`` holds a letter
        per column, 'i' for int64 and 't' for text (``_sqlite_read``). The first item is the
        schema (a query without rows has one too)."""
        import pyarrow as pa

        cursor = self._call(self._native.query, sql, tuple(params), kinds)
        try:
            types = {"i": pa.int64(), "t": pa.large_string()}
            schema = pa.schema(
                [(name, types[kind]) for name, kind in zip(cursor.names, kinds, strict=True)]
            )
            yield schema
            while (found := self._call(cursor.fetch, _SQLITE_BATCH_ROWS)) is not None:
                rows, columns = found
                arrays = []
                for kind, column in zip(kinds, columns, strict=True):
                    validity = None if column[0] is None else pa.py_buffer(column[0])
                    buffers = [validity, *(pa.py_buffer(block) for block in column[2:])]
                    kind_type = types[kind]
                    arrays.append(
                        pa.Array.from_buffers(kind_type, rows, buffers, null_count=column[1])
                    )
                yield pa.record_batch(arrays, schema=schema)
        finally:
            cursor.close()

    def _native_traces(
        self, window: Window, names: Sequence[str], *, ranking_apart: bool
    ) -> Iterator[Any]:
        """``traces`` of a SQLite store through ``_sqlite_read``: its raw columns, each batch's
        lines written by ``store_lines`` as ``_SQLITE_LINE`` writes them."""

        assert _sqlite_read is not None
        members = [("t.query_id", '"query_id":', False)]
        members += [(*_SQLITE_MEMBERS[name], False) for name in _SQLITE_MEMBERS if name in names]
        if not ranking_apart:
            members.append(("t.retrieved_ids", ',"retrieved_ids":', True))
        plain = _SQLITE_PLAIN.format(
            ranking="" if ranking_apart else " AND typeof(t.retrieved_ids) = 'text'"
        )
        # The text of a query ID the line refuses (a number, say) is what sampling hashes.
        columns = ["t.rowid AS key", "CAST(t.query_id AS TEXT) AS query_id", f"{plain} AS plain"]
        columns += ["t.attributes"] + [
            f"{column} AS m{i}" for i, (column, _, _) in enumerate(members)
        ]
        if ranking_apart:
            columns.append(_SQLITE_RANKING_COLUMN)
        where, params = self._where(window)
        sql = (
            f"SELECT {', '.join(columns)} FROM rankgate_traces t{where} "
            "ORDER BY t.recorded_at, t.rowid"
        )
        kinds = "iti" + "t" * (1 + len(members)) + ("t" if ranking_apart else "")
        suffix = ',"retrieved_ids":[]' if ranking_apart else ""
        batches = self._native_batches(sql, params, kinds)
        next(batches)  # the schema
        for batch in batches:
            texts = [_text_buffers(batch.column(3 + i)) for i in range(1 + len(members))]
            lines = _store_lines(
                batch,
                batch.column(2).buffers()[1],
                texts[0],
                [(prefix, texts[1 + i], raw) for i, (_, prefix, raw) in enumerate(members)],
                suffix,
            )
            ranking = ["ranking"] if ranking_apart else []
            yield _with_lines(batch, lines, ranking, [batch.num_columns - 1] if ranking else [])

    def _errors_or_import(self) -> tuple[type[BaseException], ...]:
        errors: list[type[BaseException]] = [ImportError]
        if hasattr(self, "_errors"):
            errors.append(self._errors)
        return tuple(errors)

    def _problem(self, problem: BaseException, doing: str) -> StoreError:
        text = describe_error(problem, self.url)
        if isinstance(problem, ImportError):
            return StoreError(f"{self.name}: {doing}{text}")
        if self.dialect != "sqlite" and isinstance(problem, self._unavailable):
            return StoreUnavailable(f"{self.name}: unavailable ({text})")
        if self.dialect == "sqlite":
            # The same words as the record path's (a lock, a file that cannot be read now).
            return _sqlite_problem(self.name, problem, self._lock_wait, doing)
        return StoreError(f"{self.name}: {doing}{text}")

    def _query(self, sql: str, params: Sequence[Any] | None = None, **options: str) -> Any:
        """Run ``sql``; its statement (to close) and a ``pyarrow.RecordBatchReader`` of its rows."""
        import adbc_driver_manager
        import pyarrow as pa

        statement = adbc_driver_manager.AdbcStatement(self._connection)
        try:
            statement.set_sql_query(sql)
            if options:
                statement.set_options(**options)
            if params:
                values = [_parameter_array(value) for value in params]
                statement.bind(pa.record_batch(values, names=[f"p{i}" for i in range(len(values))]))
            stream, _ = statement.execute_query()
            return statement, pa.RecordBatchReader._import_from_c(stream.address)
        except BaseException:
            statement.close()
            raise

    def _run(self, sql: str, params: Sequence[Any] | None = None) -> None:
        statement, reader = self._query(sql, params)
        try:
            reader.read_all()
        finally:
            statement.close()

    def text_is_utf8(self) -> bool:
        """Whether every text the database holds is valid UTF-8: a PostgreSQL database whose
        encoding is UTF8 (the server checks text on the way in). SQLite checks nothing."""
        if self.dialect == "sqlite":
            return False
        try:
            found = self._fetch_table("SELECT current_setting('server_encoding') AS e", [])
        except StoreError:
            return False
        return bool(found.column(0)[0].as_py() == "UTF8")

    def close(self) -> None:
        if self._native is not None:
            self._native.close()
            self._native = None
        for handle in (self._connection, self._database):
            if handle is not None:
                with contextlib.suppress(Exception):  # a broken connection closes anyway
                    handle.close()
        self._connection = self._database = None

    # --- the window ---

    def _where(self, window: Window, *, apply: bool = True) -> tuple[str, list[Any]]:
        """The window's conditions and SQLite's bound values. PostgreSQL's values become
        settings of the session, bound in ``set_config`` (see the module's docstring), on this
        reader's connection when ``apply``; ``_settings`` names them."""
        clauses = []
        values = self._settings(window)
        if window.since is not None:
            clauses.append(f"t.recorded_at >= {self._value('since', time=True)}")
        if window.until is not None:
            clauses.append(f"t.recorded_at < {self._value('until', time=True)}")
        if window.variants:
            if self.dialect == "sqlite":
                marks = ", ".join("?" * len(window.variants))
                clauses.append(f"t.variant IN ({marks})")
            else:
                clauses.append(
                    "t.variant IN (SELECT jsonb_array_elements_text("
                    f"{self._value('variants')}::jsonb))"
                )
        where = (" WHERE " + " AND ".join(clauses)) if clauses else ""
        if self.dialect == "sqlite":
            return where, [value for _, value in values] + list(window.variants)
        for key, value in values if apply else []:
            try:
                self._run(f"SELECT set_config('rankgate.{key}', $1, false)", (value,))
            except (self._errors, OSError) as problem:
                raise self._problem(problem, "query failed: ") from None
        return where, []

    def _settings(self, window: Window) -> list[tuple[str, str]]:
        """The window's values by name: SQLite binds them, PostgreSQL reads them as settings
        ``rankgate.<name>`` (its variants as one JSON list; SQLite binds each)."""
        values: list[tuple[str, str]] = []
        if window.since is not None:
            values.append(("since", format_time(window.since)))
        if window.until is not None:
            values.append(("until", format_time(window.until)))
        if window.variants and self.dialect != "sqlite":
            values.append(("variants", json.dumps(list(window.variants))))
        return values

    def _value(self, key: str, *, time: bool = False) -> str:
        if self.dialect == "sqlite":
            return "?"
        read = f"current_setting('rankgate.{key}')"
        return f"{read}::timestamptz" if time else read

    # --- reading ---

    def labels(self, window: Window, *, narrow: bool = True, listed: bool = False) -> LabelGroups:
        """The labels grouped by query: of the window's queries when ``narrow`` (worth it for
        a window that holds a small part of the store), else all of them (a superset: labels of
        queries outside the window are never looked up). ``listed``: the groups will be listed
        (``LabelGroups.table``), in the store's order of query IDs."""
        import pyarrow as pa

        sql = _SQLITE_LABELS if self.dialect == "sqlite" else _POSTGRES_LABELS
        bounded = window.since is not None or window.until is not None or bool(window.variants)
        native = self.dialect != "sqlite" and _pg_read is not None and POSTGRES_C_API
        condition = ""
        params: list[Any] = []
        if narrow and bounded:
            where, params = self._where(window, apply=not native)
            condition = f"query_id IN (SELECT t.query_id FROM rankgate_traces t{where})"
            sql += (" AND " if self.dialect == "sqlite" else " WHERE ") + condition
        if self.dialect == "sqlite":
            # In the table's own order (SQLite walks its primary-key index four times slower than
            # the table), grouped here; the groups are put in the order of SQLite's BINARY
            # collation (bytes) only when a caller wants them listed (``LabelGroups.table``).
            if self._native is not None:
                compiled = sql.replace(_SQLITE_LABELS, _SQLITE_LABELS_COMPILED)
                table = self._sqlite_labels(compiled, params, compiled=True)
            else:
                table = self._adbc_sqlite_labels(sql, params)
        else:
            # The server sorts PostgreSQL's, in its collation, when they are to be listed.
            grouped = self._postgres_labels(condition, window, listed) if native else None
            if grouped is not None:
                return grouped
            where, params = self._where(window) if narrow and bounded else ("", [])
            table = self._fetch_table(sql + (" ORDER BY query_id" if listed else ""), params)
        query_ids = table.column(0)  # encoded as it is, chunks and all (group_labels)
        documents = _one_array(table.column(1)).cast(pa.large_string())
        grades = _one_array(table.column(2)).cast(pa.float64())
        ordered = listed and self.dialect != "sqlite"
        return group_labels(query_ids, documents, grades, ordered=ordered)

    def _postgres_labels(self, condition: str, window: Window, listed: bool) -> LabelGroups | None:
        """The label rows meeting ``condition`` (SQL, or "" for all) read by ``_pg_read``, the
        window's settings applied on its connections, grouped by query (sorted by query ID when
        ``listed``); None when they are not of the shape it converts (a column altered to
        another type), for ADBC's general read to take them."""
        import pyarrow as pa

        assert _pg_read is not None
        order = " ORDER BY query_id" if listed else ""
        sqls = []
        for part in [""] if listed else self._label_pages():
            where = " AND ".join(text for text in (condition, part) if text)
            sqls.append(
                "SELECT query_id::text, document_id::text, grade FROM rankgate_labels"
                + (f" WHERE {where}" if where else "")
                + order
            )
        try:
            found = _pg_read.copy_labels(
                self.url,
                tuple((f"rankgate.{key}", value) for key, value in self._settings(window)),
                tuple(sqls),
            )
        except _pg_read.Unsupported:
            return None
        except _pg_read.Error as problem:
            state, message, connected = problem.args
            raise self._postgres_problem(state, message, connected) from None
        rows, runs, starts, query_offsets, query_data, offsets, data, grades = found
        heads = pa.LargeStringArray.from_buffers(
            runs, pa.py_buffer(query_offsets), pa.py_buffer(query_data)
        )
        table = _label_table(rows, offsets, data, grades)
        documents, numbers = table.column(0).chunk(0), table.column(1).chunk(0)
        starts_array = np.frombuffer(starts, dtype=np.int64)
        grouped = _label_runs(starts_array, heads, documents, numbers, ordered=listed)
        if grouped is not None:
            return grouped
        # Two different IDs share a hash: group by every ID.
        run_of_row = np.repeat(np.arange(runs), np.diff(np.append(starts_array, rows)))
        query_ids = heads.take(fast.index_array(run_of_row))
        return group_labels(query_ids, documents, numbers, ordered=listed)

    def _label_pages(self) -> list[str]:
        """The labels table as two halves of its pages (conditions on ``ctid``), read at once on
        two connections in one snapshot: the server's work for 10M label rows took 1.1 s of wall
        time so against 1.75 s whole (2026-12-08). One part for a small table, or a server before
        PostgreSQL 14 (no scan by a range of ``ctid``: each half would read the whole table)."""
        found = self._fetch_table(
            "SELECT current_setting('server_version_num')::int AS version, "
            "pg_relation_size('rankgate_labels') / current_setting('block_size')::int AS pages",
            [],
        ).to_pylist()[0]
        pages = int(found["pages"] or 0)
        if int(found["version"]) < 140000 or pages < _SPLIT_LABEL_PAGES:
            return [""]
        middle = pages // 2
        return [f"ctid < '({middle},0)'::tid", f"ctid >= '({middle},0)'::tid"]

    def _postgres_problem(self, state: str, message: str, connected: bool) -> StoreError:
        """A ``_pg_read`` error as the store's one-line error: unavailable when no connection
        was made, or it was lost, or the server could not serve the read now (SQLSTATE classes
        08, 53, 57, and a lock not granted), as ADBC's ``OperationalError`` is."""
        text = describe_error(RuntimeError(message), self.url)
        if not connected:
            return StoreUnavailable(f"{self.name}: unavailable ({text})")
        if state[:2] in {"08", "53", "57"} or state == "55P03":
            return StoreUnavailable(f"{self.name}: unavailable ({text})")
        return StoreError(f"{self.name}: query failed: {text}")

    def _adbc_sqlite_labels(self, sql: str, params: list[Any]) -> Any:
        """The label rows of the guarded ``sql`` through ADBC, where ``_sqlite_read`` is not
        built: without casts first when the columns allow it (``_SQLITE_LABELS_BARE``)."""
        import pyarrow as pa

        table: Any = None
        try:
            if self._labels_declared_as_text():
                table = self._sqlite_labels(
                    sql.replace(_SQLITE_LABELS, _SQLITE_LABELS_BARE), params
                )
        except StoreUnavailable:  # a lock or a full disk: the guarded read would wait again
            raise
        except (StoreError, pa.ArrowInvalid):  # a value of another type; halves unlike
            table = None
        if not _bare_labels_fit(table):
            table = self._sqlite_labels(sql, params)
        return table

    def _compiled_sqlite_labels(self, sql: str, params: list[Any]) -> Any:
        """The label rows of ``sql`` (``_SQLITE_LABELS_COMPILED`` and its conditions) read by
        SQLite's C API (``_sqlite_read``) into a table of query ID, document ID and grade,
        converted as ``_SQLITE_LABELS`` converts them. One statement on a connection of its own:
        one state of the table."""
        import pyarrow as pa

        found = self._call(self._native.read_labels, sql, tuple(params))
        rows, query_offsets, query_data, offsets, data, grades, valid, missing = found
        bitmap = None
        if missing:  # a grade that is no number: a null, as the guarded SQL's CASE gives
            present = np.frombuffer(valid, dtype=np.uint8)
            bitmap = pa.py_buffer(np.packbits(present, bitorder="little"))
        query_ids = pa.LargeStringArray.from_buffers(
            rows, pa.py_buffer(query_offsets), pa.py_buffer(query_data)
        )
        table = _label_table(rows, offsets, data, grades, bitmap, missing)
        return table.add_column(0, "query_id", query_ids)

    def _sqlite_labels(self, sql: str, params: list[Any], *, compiled: bool = False) -> Any:
        """The label rows of ``sql``, in rowid order, through ADBC or (``compiled``)
        ``_sqlite_read``. A large table is read in two halves by rowid, on this connection and
        on a second one at once (the conversion of the rows, not SQLite, was most of the
        driver's time, and even without it SQLite's walk runs in two threads). Both halves come
        from one state of the table only if no other connection committed while they were read
        (``PRAGMA data_version``); otherwise it is read again on this connection alone."""
        import threading

        import pyarrow as pa

        options = {"adbc.sqlite.query.batch_rows": str(_SQLITE_LABEL_BATCH_ROWS)}

        def fetch(reader: StoreReader, query: str, values: list[Any]) -> Any:
            if compiled:
                return reader._compiled_sqlite_labels(query, values)
            return reader._fetch_table(query, values, options)

        ends = self._fetch_table(
            "SELECT (SELECT min(rowid) FROM rankgate_labels) AS low, "
            "(SELECT max(rowid) FROM rankgate_labels) AS high",
            [],
            kinds="ii",
        ).to_pylist()[0]
        low, high = ends["low"], ends["high"]
        if low is None or high - low < _SPLIT_LABELS_FROM:
            return fetch(self, sql, params)
        middle = low + (high - low) // 2
        before = self._data_version()
        helper = StoreReader(self.url, self.name, self.dialect, self._path, self._lock_wait)
        found: dict[str, Any] = {}

        def first_half() -> None:
            try:
                found["first"] = fetch(helper, f"{sql} AND rowid <= ?", [*params, middle])
            except BaseException as problem:  # raised in this thread, below
                found["problem"] = problem

        thread = threading.Thread(target=first_half, name="rankgate-labels-half")
        try:
            thread.start()
            second = fetch(self, f"{sql} AND rowid > ?", [*params, middle])
        finally:
            thread.join()
            helper.close()
        if "problem" in found:
            raise found["problem"]
        if self._data_version() != before:  # a writer committed meanwhile: one state only
            return fetch(self, sql, params)
        first = found["first"]
        # A half with no rows (a narrow window's queries all in the other half) comes back with
        # the driver's default column types, which do not concatenate with the other half's.
        if not first.num_rows:
            return second
        if not second.num_rows:
            return first
        return pa.concat_tables([first, second])

    def _labels_declared_as_text(self) -> bool:
        """Whether the labels' ID columns are declared TEXT, as rankgate creates them. Without
        TEXT affinity a table can hold a REAL document ID, which the driver writes as ``%e``
        text ('1.500000e+00') where a cast gives '1.5': the bare read is for TEXT columns only."""
        found = self._fetch_table(
            "SELECT name, upper(type) AS type FROM pragma_table_info('rankgate_labels') "
            "WHERE name IN ('query_id', 'document_id')",
            [],
        ).to_pylist()
        return len(found) == 2 and all(row["type"] == "TEXT" for row in found)

    def _data_version(self) -> int:
        found = self._fetch_table("PRAGMA data_version", [], kinds="i")
        return int(found.column(0)[0].as_py())

    def _fetch_table(
        self,
        sql: str,
        params: list[Any],
        options: dict[str, str] | None = None,
        *,
        kinds: str = "",
    ) -> Any:
        """All rows of ``sql`` as an Arrow table; through SQLite's C API, ``kinds`` types its
        columns (``_native_batches``), and ``options`` (ADBC's) do not apply."""
        if self._native is not None:
            import pyarrow as pa

            schema, *batches = self._native_batches(sql, params, kinds)
            return pa.Table.from_batches(batches, schema)
        try:
            statement, reader = self._query(sql, params, **(options or {}))
            try:
                return reader.read_all()
            finally:
                statement.close()
        except (self._errors, OSError) as problem:  # OSError: pyarrow's wrapping of a driver's
            raise self._problem(problem, "query failed: ") from None

    def traces(self, window: Window, names: Sequence[str], *, ranking_apart: bool) -> Iterator[Any]:
        """The window's traces in the record path's order, a record batch at a time; the lines
        carry the attributes, the query ID and those of the store's other columns ``names``
        holds."""
        if self.dialect == "sqlite":
            if self._native is not None:
                yield from self._native_traces(window, names, ranking_apart=ranking_apart)
                return
            where_ranking = _SQLITE_RANKING_APART if ranking_apart else _SQLITE_RANKING_IN_LINE
            line = _SQLITE_LINE.format(**where_ranking, **_carried(_SQLITE_CARRIED, names))
            # The text of a query ID the line refuses (a number, say) is what sampling hashes.
            columns = f"t.rowid AS key, CAST(t.query_id AS TEXT) AS query_id, {line} AS line"
            if ranking_apart:
                columns += ", " + _SQLITE_RANKING_COLUMN
            where, params = self._where(window)
            sql = f"SELECT {columns} FROM rankgate_traces t{where} ORDER BY t.recorded_at, t.rowid"
            options = {"adbc.sqlite.query.batch_rows": str(_SQLITE_BATCH_ROWS)}
            yield from self._adbc_batches(sql, params, options)
            return
        if _sqlite_read is not None and POSTGRES_C_API:
            yield from self._postgres_traces(window, names, ranking_apart=ranking_apart)
            return
        ranking = "'[]'" if ranking_apart else "to_json(t.retrieved_ids)::text"
        line = _POSTGRES_LINE.format(ranking=ranking, **_carried(_POSTGRES_CARRIED, names))
        columns = f"t.seq AS key, t.query_id, {line} AS line"
        if ranking_apart:
            columns += ", " + _POSTGRES_RANKING_COLUMNS
        yield from self._postgres_batches(self._postgres_window_sql(columns, window))

    def _postgres_window_sql(self, columns: str, window: Window) -> str:
        """The query of ``columns`` of the window's traces in arrival order (the window's
        values set on this connection)."""
        where, _ = self._where(window)
        return f"SELECT {columns} FROM rankgate_traces t{where} ORDER BY t.recorded_at, t.seq"

    def _postgres_traces(
        self, window: Window, names: Sequence[str], *, ranking_apart: bool
    ) -> Iterator[Any]:
        """``traces`` of a PostgreSQL store: its raw columns through ADBC, each batch's lines
        written by ``store_lines`` as ``_POSTGRES_LINE`` writes them (a null variant is JSON's
        null there, which the scanner reads as the key's absence, as it does SQLite's)."""

        assert _sqlite_read is not None
        members = [
            (column, prefix, False)
            for name, (column, prefix) in _POSTGRES_MEMBERS.items()
            if name in names
        ]
        if not ranking_apart:
            members.append(("to_json(t.retrieved_ids)::text", ',"retrieved_ids":', True))
        # store_lines writes the attributes' members only when they are a non-empty object.
        columns = ["t.seq AS key", "t.query_id", f"{_POSTGRES_PLAIN} AS plain"]
        columns += ["t.attributes::text AS attributes"]
        columns += [f"{column} AS m{i}" for i, (column, _, _) in enumerate(members)]
        if ranking_apart:
            columns.append(_POSTGRES_RANKING_COLUMNS)
        sql = self._postgres_window_sql(", ".join(columns), window)
        suffix = ',"retrieved_ids":[]' if ranking_apart else ""
        for batch in self._postgres_batches(sql):
            query_id, attributes, *values = (
                _wide_text_buffers(batch.column(i)) for i in [1, *range(3, 4 + len(members))]
            )
            carried = zip(members, values, strict=True)
            lines = _store_lines(
                batch,
                _int64_data(batch.column(2)),
                attributes,
                [('"query_id":', query_id, False)]
                + [(prefix, value, raw) for (_, prefix, raw), value in carried],
                suffix,
            )
            ranking = ["ranking_length", "ranking"] if ranking_apart else []
            yield _with_lines(batch, lines, ranking, ranking)

    def _postgres_batches(self, sql: str) -> Iterator[Any]:
        """The rows of ``sql`` from PostgreSQL, streamed by COPY, a record batch at a time."""
        # Walk the (recorded_at, seq) index rather than sort the window: rows then stream from
        # the first, while the client decodes and scores, where a sort of a whole window held
        # the client idle for seconds (and spilled to disk at the default work_mem). This
        # connection reads the traces only.
        self._run("SET enable_sort = off")
        options = {"adbc.postgresql.batch_size_hint_bytes": str(_POSTGRES_BATCH_BYTES)}
        yield from self._adbc_batches(sql, [], options)

    def _adbc_batches(self, sql: str, params: list[Any], options: dict[str, str]) -> Iterator[Any]:
        """The non-empty record batches of ``sql`` through ADBC's driver."""
        statement = None
        try:
            statement, reader = self._query(sql, params, **options)
            while True:
                try:
                    batch = reader.read_next_batch()
                except StopIteration:
                    return
                if batch.num_rows:
                    yield batch
        except (self._errors, OSError) as problem:  # OSError: pyarrow's wrapping, mid-stream
            raise self._problem(problem, "query failed: ") from None
        finally:
            if statement is not None:
                statement.close()


def _parameter_array(value: str | int) -> Any:
    """A bound value as an Arrow array of one, built from its bytes: ``pa.array`` of a Python
    list makes pyarrow import pandas, 0.3 s of a store read's start."""
    import pyarrow as pa

    if isinstance(value, int):
        return pa.Array.from_buffers(pa.int64(), 1, [None, pa.py_buffer(np.array([value]))])
    encoded = value.encode()
    offsets = np.array([0, len(encoded)], dtype=np.int32)
    return pa.Array.from_buffers(
        pa.string(), 1, [None, pa.py_buffer(offsets), pa.py_buffer(encoded)]
    )


def _one_array(column: Any) -> Any:
    """A chunked column as one array: its only chunk as it is (``combine_chunks`` copies even
    one: 0.2 s of 10M label rows)."""
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


def _label_table(
    rows: int, offsets: Any, data: Any, grades: Any, bitmap: Any = None, missing: int = 0
) -> Any:
    """A compiled reader's label buffers (the documents' int64 offsets and their data, float64
    grades, a validity bitmap of the grades or None) as a table of document ID and grade."""
    import pyarrow as pa

    documents = pa.LargeStringArray.from_buffers(rows, pa.py_buffer(offsets), pa.py_buffer(data))
    numbers = pa.Array.from_buffers(
        pa.float64(), rows, [bitmap, pa.py_buffer(grades)], null_count=missing
    )
    return pa.table({"document_id": documents, "grade": numbers})


def _store_lines(batch: Any, plain: Any, attributes: Any, members: list[Any], suffix: str) -> Any:
    """``_sqlite_read.store_lines`` of a batch's raw columns, as a large_string column."""
    import pyarrow as pa

    assert _sqlite_read is not None
    offsets, data = _sqlite_read.store_lines(batch.num_rows, plain, attributes, members, suffix)
    return pa.LargeStringArray.from_buffers(
        batch.num_rows, pa.py_buffer(offsets), pa.py_buffer(data)
    )


def _with_lines(batch: Any, lines: Any, names: list[str], columns: list[Any]) -> Any:
    """The batch the traces' readers pass on: its key and query ID, the lines, and the ranking's
    ``columns`` (indices or names of the batch's) as ``names``."""
    import pyarrow as pa

    kept = [batch.column(0), batch.column(1), lines, *(batch.column(c) for c in columns)]
    return pa.record_batch(kept, names=["key", "query_id", "line", *names])


def _wide_text_buffers(column: Any) -> tuple[Any, Any, Any]:
    """``_text_buffers`` of a string or large_string column (a driver's, never sliced): a
    string column's offsets widened to int64, its data as it is."""
    import pyarrow as pa

    if pa.types.is_large_string(column.type):
        return _text_buffers(column)
    if column.offset:
        return _text_buffers(column.cast(pa.large_string()))
    validity, offsets, data = column.buffers()
    wide = np.frombuffer(offsets, dtype=np.int32, count=len(column) + 1).astype(np.int64)
    return wide, data if data is not None else b"", validity if column.null_count else None


def _int64_data(column: Any) -> Any:
    """The values buffer of an int64 column with no nulls (a driver's, never sliced)."""
    assert column.offset == 0 and not column.null_count
    return column.buffers()[1]


def _text_buffers(column: Any) -> tuple[Any, Any, Any]:
    """A large_string column of ``_native_batches`` (never sliced) as its offsets, data and
    validity bitmap (or None)."""
    validity, offsets, data = column.buffers()
    return offsets, data if data is not None else b"", validity if column.null_count else None


def _carried(columns: dict[str, str], names: Sequence[str]) -> dict[str, str]:
    return {name: text if name in names else "''" for name, text in columns.items()}


def group_labels(query_ids: Any, documents: Any, grades: Any, *, ordered: bool) -> LabelGroups:
    """Label rows as one map per query (``ordered``: the rows are sorted by query ID, and the
    groups keep that order). Rows already grouped by query, as a store mostly holds them, are
    not moved; the runs of a query with several are copied together (``LabelGroups.joined``)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    count = len(query_ids)
    runs = _grouped_runs(query_ids)
    if runs is not None:
        grouped = _label_runs(*runs, documents, grades, ordered=ordered)
        if grouped is not None:
            return grouped
        # Two different IDs share a hash: group by every ID below.
    unique = pa.array([], pa.large_string())
    codes = np.zeros(0, dtype=np.int64)
    if count:
        encoded = pc.dictionary_encode(query_ids)
        pieces = encoded.chunks if isinstance(encoded, pa.ChunkedArray) else [encoded]
        # Arrow encodes the chunks of a column with one dictionary, the last chunk's.
        unique = pieces[-1].dictionary
        if any(len(piece.dictionary) != len(unique) for piece in pieces):
            encoded = pc.dictionary_encode(query_ids.combine_chunks())
            pieces, unique = [encoded], encoded.dictionary
        codes = np.concatenate([np.asarray(piece.indices) for piece in pieces]).astype(np.int64)
        unique = unique.cast(pa.large_string())
    if count > 1 and not bool(np.all(codes[1:] >= codes[:-1])):
        order = fast.index_array(np.argsort(codes, kind="stable"))
        documents, grades = documents.take(order), grades.take(order)
    sizes = np.bincount(codes, minlength=len(unique))
    offsets = np.zeros(len(unique) + 1, dtype=np.int32)
    np.cumsum(sizes, out=offsets[1:])
    maps = pa.MapArray.from_arrays(fast.int32_array(offsets), documents, grades)
    hashes = string_hashes(unique)
    by_hash = np.argsort(hashes, kind="stable").astype(np.int64)
    return LabelGroups(unique, maps, hashes[by_hash], by_hash, ordered)


def _grouped_runs(query_ids: Any) -> tuple[npt.NDArray[np.int64], Any] | None:
    """Where each run of equal query IDs starts, and each run's ID (``large_string``); None when
    an ID is null."""
    import pyarrow as pa
    import pyarrow.compute as pc

    pieces = query_ids.chunks if isinstance(query_ids, pa.ChunkedArray) else [query_ids]
    pieces = [piece for piece in pieces if len(piece)]
    if not pieces or any(piece.null_count for piece in pieces):
        return None
    starts: list[npt.NDArray[np.int64]] = []
    firsts: list[Any] = []
    first = 0
    last: Any = None
    for piece in pieces:
        changed = np.flatnonzero(fast.numpy_of(pc.not_equal(piece[1:], piece[:-1]))) + 1
        if last is None or piece[0].as_py() != last:
            changed = np.concatenate([[0], changed])
        # Each piece's own (a take of the chunked column would first join every chunk's IDs).
        firsts.append(piece.take(fast.index_array(changed)).cast(pa.large_string()))
        starts.append(changed.astype(np.int64) + first)
        first += len(piece)
        last = piece[-1].as_py()
    heads = firsts[0] if len(firsts) == 1 else pa.concat_arrays(firsts)
    return np.concatenate(starts), heads


def _label_runs(
    starts: npt.NDArray[np.int64], heads: Any, documents: Any, grades: Any, *, ordered: bool
) -> LabelGroups | None:
    """Label rows grouped by their runs of one query ID each (``starts``: each run's first row,
    ``heads``: its ID). Each query's rows together in a run (a store holds them so, in the order
    they were written) or a few (a label written for a query after others'): the groups are the
    runs, joined where a query has several, and no ID is hashed but the first of each. None
    when two different IDs share a hash."""
    import pyarrow as pa

    offsets = np.append(starts, len(documents)).astype(np.int32)
    maps = pa.MapArray.from_arrays(fast.int32_array(offsets), documents, grades)
    hashes = string_hashes(heads)
    by_hash = np.argsort(hashes, kind="stable").astype(np.int64)
    grouped = LabelGroups(heads, maps, hashes[by_hash], by_hash, ordered)
    if not bool(np.any(grouped.hashes[1:] == grouped.hashes[:-1])):
        return grouped
    return _joined_runs(grouped, starts, documents, grades)


def _joined_runs(
    runs: LabelGroups, starts: npt.NDArray[np.int64], documents: Any, grades: Any
) -> LabelGroups | None:
    """``runs`` (one group per run, ``hashes`` and ``order`` over every run) with the runs of a
    query that has several joined into one group of ``LabelGroups.joined``; the runs themselves
    are left out of the hash index. None when two different IDs share a hash."""
    import pyarrow as pa
    import pyarrow.compute as pc

    heads, by_hash, hashes = runs.query_ids, runs.order, runs.hashes
    shared = hashes[1:] == hashes[:-1]
    later = np.flatnonzero(shared)
    if len(later):
        one, other = fast.index_array(by_hash[later]), fast.index_array(by_hash[later + 1])
        if not bool(pc.all(pc.equal(heads.take(one), heads.take(other))).as_py()):
            return None
    # Blocks of equal hashes in sorted order; a block of several runs is a query to join. Within
    # a block the runs are in the rows' order (the sort is stable).
    opens = np.concatenate([[True], ~shared])
    block = np.cumsum(opens) - 1
    several = np.zeros(int(block[-1]) + 1, dtype=np.bool_)
    several[block[1:][shared]] = True
    split = several[block]
    split_runs = by_hash[split]
    ends = np.append(starts[1:], len(documents))
    lengths = (ends - starts)[split_runs]
    placed = np.cumsum(lengths) - lengths
    rows = np.repeat(starts[split_runs] - placed, lengths) + np.arange(int(lengths.sum()))
    firsts = np.flatnonzero(np.concatenate([[True], np.diff(block[split]) != 0]))
    sizes = np.add.reduceat(lengths, firsts)
    offsets = np.zeros(len(firsts) + 1, dtype=np.int32)
    np.cumsum(sizes, out=offsets[1:])
    taken = fast.index_array(rows)
    joined = pa.MapArray.from_arrays(
        fast.int32_array(offsets), documents.take(taken), grades.take(taken)
    )
    joined_heads = heads.take(fast.index_array(split_runs[firsts]))
    live = by_hash[~split]
    groups = np.concatenate([live, len(heads) + np.arange(len(firsts), dtype=np.int64)])
    keys = np.concatenate([hashes[~split], hashes[split][firsts]])
    order = np.argsort(keys, kind="stable")
    return LabelGroups(
        pa.concat_arrays([heads, joined_heads]),
        runs.grades,
        keys[order],
        groups[order],
        ordered=False,
        joined=joined,
    )


def line_data(lines: Any) -> Any:
    """The bytes of an Arrow string column of newline-ended lines, as one buffer (no copy)."""
    import pyarrow as pa

    width: Any = np.int64 if pa.types.is_large_string(lines.type) else np.int32
    offsets = np.frombuffer(lines.buffers()[1], dtype=width)[
        lines.offset : lines.offset + len(lines) + 1
    ]
    start, end = int(offsets[0]), int(offsets[-1])
    buffer = lines.buffers()[2]
    if buffer is None or end == start:
        return b""
    return memoryview(buffer)[start:end]


def split_rankings(texts: Any, lengths: Any) -> tuple[Any, npt.NDArray[np.bool_]]:
    """PostgreSQL's rankings sent as separator-joined text (see the module's docstring), as a
    list column, and which rows the validator must read: nulls, and those whose pieces do not
    number the array's ``lengths``. Splitting at U+001F cannot cut a UTF-8 character (an ASCII
    byte is never part of one). Cut in C when the extension is built (``fast.cut_rankings``):
    Arrow's ``split_pattern`` appends each ID through a builder, and took as long as the driver's
    whole decoding of the rows."""
    compiled = fast.cut_rankings(texts, lengths)
    if compiled is not None:
        return compiled
    return _split_rankings_with_arrow(texts, lengths)


def _split_rankings_with_arrow(texts: Any, lengths: Any) -> tuple[Any, npt.NDArray[np.bool_]]:
    """``split_rankings`` without the extension, through pyarrow's ``split_pattern``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    wanted = np.array(lengths.fill_null(-1), dtype=np.int64)
    lists = pc.split_pattern(texts, RANKING_SEPARATOR)
    pieces = np.asarray(pc.list_value_length(lists).fill_null(-1), dtype=np.int64)
    # An empty array joins to "", which splits into one empty piece: it is an empty ranking.
    empty = (wanted == 0) & (np.asarray(pc.binary_length(texts).fill_null(-1)) == 0)
    unread = ((pieces != wanted) & ~empty) | (wanted < 0) | (pieces < 0)
    if not (empty.any() or unread.any()):
        return lists, unread
    # The rows kept hold their pieces; the others none (an unread row is the validator's).
    keep = np.where(unread | empty, 0, pieces)
    offsets = np.zeros(len(keep) + 1, dtype=np.int32)
    np.cumsum(keep, out=offsets[1:])
    values = lists.flatten().filter(pa.array(np.repeat(keep > 0, np.maximum(pieces, 0))))
    return pa.ListArray.from_arrays(pa.array(offsets), values), unread


def parse_lines(
    lines: Any, fields: FieldMap, segment_names: Sequence[str], first_line: int
) -> tuple[Any, npt.NDArray[np.bool_]]:
    """The scanner's columns of these newline-ended lines (an Arrow string column) and which
    rows it left to the validator."""
    from rankgate.io import jsonl_arrow

    keys = (fields.query_id, fields.retrieved_ids, fields.relevant_ids, fields.relevance_scores)
    parsed = jsonl_arrow.parse_chunk(line_data(lines), keys, tuple(segment_names), first_line)
    if len(parsed) != len(lines):
        # A line break inside a line (the SQL lets none through that it can see) split a row:
        # rows holding one go to the validator whole.
        texts = [
            text if text is not None and text.count("\n") == 1 else _UNSURE + "\n"
            for text in lines.to_pylist()
        ]
        data = "".join(texts).encode()
        parsed = jsonl_arrow.parse_chunk(data, keys, tuple(segment_names), first_line)
    if len(parsed) != len(lines):  # cannot happen: every line is now one non-blank line
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
