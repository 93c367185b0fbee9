"""The two databases a trace store can live in, and everything in which their SQL differs.

The schema (version 1) is the same in both; only the column types differ:

``rankgate_traces``: one row per logged retrieval.

============== ==================== ============================== =================================
column         SQLite               PostgreSQL                     meaning
============== ==================== ============================== =================================
trace_id       TEXT primary key     TEXT primary key               unique per request (UUID default)
query_id       TEXT not null        TEXT not null                  joins traces to labels
recorded_at    TEXT not null        TIMESTAMPTZ not null           when it was served (UTC)
variant        TEXT                 TEXT                           retrieval configuration / arm
retrieved_ids  TEXT (JSON array)    TEXT[]                         document IDs, best first
attributes     TEXT (JSON object)   JSONB                          anything else: segments, text
============== ==================== ============================== =================================

``rankgate_labels``: one row per judged (query, document), newest judgment wins.

============== ==================== ============================== =================================
query_id       TEXT                 TEXT                           primary key with document_id
document_id    TEXT                 TEXT
grade          REAL not null        DOUBLE PRECISION not null      0 = judged not relevant
labeled_at     TEXT                 TIMESTAMPTZ                    when it was judged (UTC)
source         TEXT                 TEXT                           annotation batch, tool, person
============== ==================== ============================== =================================

Traces are read back in time order, ties in the order they were recorded (SQLite's rowid; a
``seq`` identity column in PostgreSQL). ``rankgate_schema`` holds the schema version, so a later release can migrate an older store.

SQLite keeps times as fixed-width ISO-8601 text (``2026-11-30T00:06:12.000000Z``), which sorts in
time order, so window queries use the index. Every value from a caller is a bound parameter.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from rankgate.errors import InputError, UsageError
from rankgate.store.urls import (
    CONTROL,
    SCHEME,
    SCHEMES,
    credentials_problem,
    describe_error,
    is_store_url,
    redact_url,
    sqlite_url_for,
)
from rankgate.times import format_time

__all__ = [
    "LOCK_WAIT_SECONDS",
    "SCHEMA_VERSION",
    "SCHEMES",
    "Backend",
    "LabelRow",
    "StoreError",
    "StoreUnavailable",
    "TraceRow",
    "Window",
    "connect",
    "describe_error",
    "is_store_url",
    "redact_url",
    "sqlite_url_for",
]

SCHEMA_VERSION = 1
FETCH_ROWS = 5000
_KEYS_PER_QUERY = 500  # under SQLite's oldest limit on bound parameters (999)
#: How long a writer waits, by default, for a lock another process holds (SQLite's busy timeout,
#: PostgreSQL's lock_timeout) before the write fails with ``StoreUnavailable``.
LOCK_WAIT_SECONDS = 10.0


class StoreError(UsageError):
    """A trace store cannot be opened, read or written; the message names the store (its
    password masked) and says why, on one line."""


class StoreUnavailable(StoreError):
    """The store is there but cannot take the call now: another process holds the lock past the
    wait, the server is unreachable, or the disk is full. The same call may succeed later."""


@dataclass(frozen=True, slots=True)
class TraceRow:
    trace_id: str
    query_id: str
    recorded_at: datetime
    variant: str | None
    retrieved_ids: list[str]
    attributes: dict[str, Any]


@dataclass(frozen=True, slots=True)
class LabelRow:
    query_id: str
    document_id: str
    grade: float
    labeled_at: datetime | None
    source: str | None


@dataclass(frozen=True, slots=True)
class Window:
    """Which stored traces to read: a time range (``since`` inclusive, ``until`` exclusive) and
    the variants to keep (all when empty)."""

    since: datetime | None = None
    until: datetime | None = None
    variants: tuple[str, ...] = ()


class Backend:
    """One connection to a store, with the dialect's SQL. Not shared between threads."""

    dialect = ""

    def __init__(self, url: str, lock_wait: float) -> None:
        self.url = url
        self.name = redact_url(url)  # the URL as given, password masked: for every message
        self.lock_wait = lock_wait

    # --- what each dialect supplies ---
    def close(self) -> None:
        raise NotImplementedError

    def _execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        raise NotImplementedError

    def _executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> int:
        """Run ``sql`` for each row; returns the number of rows changed."""
        raise NotImplementedError

    def commit(self) -> None:
        raise NotImplementedError

    def rollback(self) -> None:
        raise NotImplementedError

    def begin_write(self, lock_wait: float) -> None:
        """Wait at most ``lock_wait`` seconds for locks in the writes that follow, up to the next
        commit or rollback."""
        raise NotImplementedError

    def _ddl(self) -> list[str]:
        raise NotImplementedError

    def _trace_params(self, row: TraceRow) -> tuple[Any, ...]:
        raise NotImplementedError

    def _label_params(self, row: LabelRow) -> tuple[Any, ...]:
        raise NotImplementedError

    def _labels_join(self) -> tuple[str, str]:
        """The columns and the join that bring each trace its query's labels."""
        raise NotImplementedError

    def _stream(self, sql: str, params: Sequence[Any] | dict[str, Any]) -> Iterator[dict[str, Any]]:
        raise NotImplementedError

    def _decode_trace(self, row: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    placeholder = "?"

    # --- shared logic ---
    def ensure_schema(self) -> None:
        """Create the tables on first use; refuse a store written by a newer release."""
        for statement in self._ddl():
            self._execute(statement)
        found = self._execute("SELECT version FROM rankgate_schema").fetchall()
        if not found:
            self._execute(
                f"INSERT INTO rankgate_schema (version) VALUES ({self.placeholder})",
                (SCHEMA_VERSION,),
            )
        else:
            self._schema_version(found)
        # Older versions would be migrated here, one step at a time.
        self.commit()

    def check_schema(self) -> None:
        """Before reading: this is a rankgate store, and not one from a newer release."""
        if not all(self._has_table(name) for name in ("rankgate_schema", "rankgate_traces")):
            raise StoreError(
                f"{self.name}: not a rankgate trace store (no rankgate_schema or "
                "rankgate_traces table): record traces into it first, run rankgate store init, "
                "or read your own tables with --sql"
            )
        found = self._execute("SELECT version FROM rankgate_schema").fetchall()
        if found:
            self._schema_version(found)

    def _has_table(self, name: str) -> bool:
        raise NotImplementedError

    def _schema_version(self, found: list[Any]) -> int:
        """The one schema version a store's ``rankgate_schema`` holds; anything else is refused,
        since a later migration must know for sure which version it starts from."""
        versions = [row[0] for row in found]
        if len(versions) != 1:
            shown = ", ".join(repr(version) for version in versions[:5])
            raise StoreError(
                f"{self.name}: rankgate_schema holds {len(versions)} versions ({shown}), "
                "expected exactly one: the store was written by two tools or edited by hand"
            )
        version = versions[0]
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            raise StoreError(
                f"{self.name}: rankgate_schema holds version {version!r}, expected a whole "
                f"number from 1 to {SCHEMA_VERSION}"
            )
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"{self.name}: store schema version {version} is newer than this rankgate "
                f"understands ({SCHEMA_VERSION}); upgrade rankgate"
            )
        return version

    def insert_traces(self, rows: Sequence[TraceRow]) -> int:
        """Insert traces; a trace ID already stored is left as it is (replays are harmless).
        Returns how many were new."""
        p = self.placeholder
        return self._executemany(
            "INSERT INTO rankgate_traces (trace_id, query_id, recorded_at, variant, retrieved_ids, "
            f"attributes) VALUES ({p}, {p}, {p}, {p}, {p}, {p}) ON CONFLICT (trace_id) DO NOTHING",
            [self._trace_params(row) for row in rows],
        )

    def upsert_labels(self, rows: Sequence[LabelRow]) -> int:
        """Insert labels; a judgment of the same (query, document) replaces the stored one unless
        the stored one is newer, or dated while the new one is not."""
        p = self.placeholder
        return self._executemany(
            "INSERT INTO rankgate_labels (query_id, document_id, grade, labeled_at, source) "
            f"VALUES ({p}, {p}, {p}, {p}, {p}) ON CONFLICT (query_id, document_id) DO UPDATE SET "
            "grade = excluded.grade, labeled_at = excluded.labeled_at, source = excluded.source "
            "WHERE rankgate_labels.labeled_at IS NULL "
            "OR excluded.labeled_at >= rankgate_labels.labeled_at",
            [self._label_params(row) for row in rows],
        )

    def _window_where(self, window: Window) -> tuple[str, list[Any]]:
        p = self.placeholder
        clauses, params = [], []
        if window.since is not None:
            clauses.append(f"t.recorded_at >= {p}")
            params.append(self._time_param(window.since))
        if window.until is not None:
            clauses.append(f"t.recorded_at < {p}")
            params.append(self._time_param(window.until))
        if window.variants:
            clauses.append(f"t.variant IN ({', '.join([p] * len(window.variants))})")
            params.extend(window.variants)
        return (" WHERE " + " AND ".join(clauses)) if clauses else "", params

    def _time_param(self, moment: datetime) -> Any:
        return moment

    # Traces come back in time order, ties in the order they were recorded, as a log file keeps
    # them: the bootstrap sees the sequence it would see in the file they were imported from, and
    # the time index delivers the rows already in that order (no sort of the whole window).
    _arrival = "t.recorded_at, t.seq"

    def count(self, window: Window) -> int:
        where, params = self._window_where(window)
        return int(
            self._execute(f"SELECT count(*) FROM rankgate_traces t{where}", params).fetchone()[0]
        )

    def store_size(self) -> int:
        """The number of traces in the store, or an estimate of it where the database keeps one
        (PostgreSQL's statistics): a count of a year of traces reads every row."""
        return self.count(Window())

    def read(self, window: Window) -> Iterator[dict[str, Any]]:
        """Traces in the window, oldest first, each with its query's labels joined."""
        where, params = self._window_where(window)
        columns, join = self._labels_join()
        sql = (
            "SELECT t.trace_id, t.query_id, t.recorded_at, t.variant, t.retrieved_ids, "
            f"t.attributes, {columns} FROM rankgate_traces t {join}{where} "
            f"ORDER BY {self._arrival}"
        )
        for row in self._stream(sql, params):
            yield self._decode_trace(row)

    def read_sql(self, sql: str, params: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """Rows of the user's own read-only query, as dicts by column name."""
        yield from self._stream(sql, params)

    # The column that names a trace for ``read_keys``: SQLite's rowid, PostgreSQL's seq.
    _key = "t.seq"

    def read_keys(self, keys: Sequence[int]) -> dict[int, dict[str, Any]]:
        """The undecoded rows of ``read`` for these trace keys (see ``decode``), by key; a key no
        longer stored is absent."""
        columns, join = self._labels_lookup()
        found: dict[int, dict[str, Any]] = {}
        for start in range(0, len(keys), _KEYS_PER_QUERY):
            part = list(keys[start : start + _KEYS_PER_QUERY])
            marks = ", ".join([self.placeholder] * len(part))
            sql = (
                f"SELECT {self._key} AS rankgate_key, t.trace_id, t.query_id, t.recorded_at, "
                f"t.variant, t.retrieved_ids, t.attributes, {columns} FROM rankgate_traces t "
                f"{join} WHERE {self._key} IN ({marks})"
            )
            for row in self._stream(sql, part):
                found[int(row.pop("rankgate_key"))] = row
        return found

    def _labels_lookup(self) -> tuple[str, str]:
        """``_labels_join`` for a few traces picked by key: the same columns, looked up per trace
        rather than aggregated over the whole labels table."""
        return self._labels_join()

    def decode(self, row: dict[str, Any]) -> dict[str, Any]:
        """A row of ``read_keys`` as the record ``read`` gives for it."""
        return self._decode_trace(row)

    def summary(self) -> dict[str, Any]:
        traces, first, last = self._execute(
            "SELECT count(*), min(recorded_at), max(recorded_at) FROM rankgate_traces"
        ).fetchone()
        labels, queries = self._execute(
            "SELECT count(*), count(DISTINCT query_id) FROM rankgate_labels"
        ).fetchone()
        variants = self._execute(
            "SELECT variant, count(*) FROM rankgate_traces GROUP BY variant ORDER BY variant"
        ).fetchall()
        return {
            "schema_version": SCHEMA_VERSION,
            "traces": traces,
            "first": first,
            "last": last,
            "labels": labels,
            "labeled_queries": queries,
            "variants": {variant: count for variant, count in variants},
        }


def _record(
    row: dict[str, Any], attributes: Any, ids: Any, grades: Any, stamps: Any
) -> dict[str, Any]:
    """A store row as a trace record: attributes first, so the store's own columns win."""
    record: dict[str, Any] = dict(attributes) if isinstance(attributes, dict) else {}
    record.update(
        trace_id=row["trace_id"],
        query_id=row["query_id"],
        retrieved_ids=ids,
        timestamp=row["recorded_at"],
    )
    if row["variant"] is not None:
        record["variant"] = row["variant"]
    if grades is not None:
        record["relevance_scores"] = grades
        if isinstance(stamps, dict) and any(v is not None for v in stamps.values()):
            record["labeled_at"] = stamps
    return record


_READ_ACTIONS = frozenset(
    getattr(sqlite3, name)
    for name in ("SQLITE_SELECT", "SQLITE_READ", "SQLITE_FUNCTION", "SQLITE_RECURSIVE")
    if hasattr(sqlite3, name)
)


def _read_only_authorizer(action: int, *_: object) -> int:
    return sqlite3.SQLITE_OK if action in _READ_ACTIONS else sqlite3.SQLITE_DENY


# SQLite's primary result codes for "try again later": the lock (BUSY, LOCKED), and a file that
# cannot be written for now (IOERR, FULL, CANTOPEN, READONLY); the rest say the SQL or a row is bad.
_SQLITE_LOCK_CODES = frozenset({5, 6})
_SQLITE_UNAVAILABLE_CODES = frozenset({8, 10, 13, 14})


def _sqlite_problem(
    name: str, problem: BaseException, lock_wait: float, doing: str = ""
) -> StoreError:
    """A driver error as a one-line ``StoreError`` naming the store; a lock or a file that cannot
    take writes now is ``StoreUnavailable``."""
    code = getattr(problem, "sqlite_errorcode", None)
    primary = None if code is None else code & 0xFF
    text = describe_error(problem)
    if primary in _SQLITE_LOCK_CODES or (primary is None and "locked" in text):
        return StoreUnavailable(
            f"{name}: locked by another process; gave up after waiting {lock_wait:g} s"
        )
    if primary in _SQLITE_UNAVAILABLE_CODES:
        return StoreUnavailable(f"{name}: unavailable ({text})")
    return StoreError(f"{name}: {doing}{text}")


# SQLite's JSON writes a REAL with 15 significant digits, which does not always give the stored
# double back; 17 digits do (the columnar read, through ADBC, reads the double itself). Infinity,
# which no JSON number can hold, stays as SQLite writes it, and the decoder refuses it.
_EXACT_GRADE = (
    "CASE WHEN typeof(grade) = 'real' AND abs(grade) <= 1.7976931348623157e308 "
    "THEN json(printf('%!.17g', grade)) ELSE grade END"
)


class SQLiteBackend(Backend):
    dialect = "sqlite"
    _arrival = "t.recorded_at, t.rowid"  # rowid: SQLite's own insertion counter
    _key = "t.rowid"

    def __init__(self, url: str, path: Path, *, read_only: bool, lock_wait: float) -> None:
        super().__init__(url, lock_wait)
        self.path = path
        try:
            if read_only:
                if not path.is_file():
                    raise StoreError(f"{self.name}: no such store file ({path})")
                # mode=ro: the engine itself refuses writes. as_uri() percent-encodes the path, so
                # a '#' or '?' in a file name cannot cut the mode off.
                uri = path.resolve().as_uri() + "?mode=ro"
                self.connection = sqlite3.connect(uri, uri=True, check_same_thread=False)
                self._busy_timeout(lock_wait)
                self.connection.execute("PRAGMA query_only=ON")
                # Beyond read-only: a user's --sql may read and call functions, nothing else
                # (no ATTACH, which would create files, no PRAGMA).
                self.connection.set_authorizer(_read_only_authorizer)
            else:
                if not path.parent.is_dir():
                    raise StoreError(f"{self.name}: folder {path.parent} does not exist")
                self.connection = sqlite3.connect(path, check_same_thread=False)
                self._busy_timeout(lock_wait)
                # WAL lets readers work while services write; processes may write in turn.
                self.connection.execute("PRAGMA journal_mode=WAL")
        except sqlite3.Error as problem:
            raise _sqlite_problem(
                self.name, problem, lock_wait, "cannot open as a SQLite store: "
            ) from None
        except (OSError, ValueError) as problem:  # an unreadable folder, a NUL in the path
            raise StoreError(f"{self.name}: cannot open as a SQLite store ({problem})") from None

    def _has_table(self, name: str) -> bool:
        found = self._execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)
        ).fetchall()
        return bool(found)

    def _busy_timeout(self, seconds: float) -> None:
        # At least 1 ms: a busy timeout of 0 would turn the wait off altogether.
        self.connection.execute(f"PRAGMA busy_timeout={max(int(seconds * 1000), 1)}")

    def close(self) -> None:
        self.connection.close()

    def _problem(self, problem: Exception, doing: str = "") -> StoreError:
        return _sqlite_problem(self.name, problem, self.lock_wait, doing)

    def _execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        try:
            return self.connection.execute(sql, params)
        except sqlite3.Error as problem:
            raise self._problem(problem) from None

    def _executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> int:
        before = self.connection.total_changes
        try:
            self.connection.executemany(sql, rows)
        except sqlite3.Error as problem:
            raise self._problem(problem) from None
        return self.connection.total_changes - before

    def commit(self) -> None:
        try:
            self.connection.commit()
        except sqlite3.Error as problem:
            raise self._problem(problem) from None

    def rollback(self) -> None:
        try:
            self.connection.rollback()
        except sqlite3.Error as problem:
            raise self._problem(problem) from None

    def begin_write(self, lock_wait: float) -> None:
        self.lock_wait = lock_wait
        try:
            self._busy_timeout(lock_wait)
        except sqlite3.Error as problem:
            raise self._problem(problem) from None

    def _ddl(self) -> list[str]:
        return [
            "CREATE TABLE IF NOT EXISTS rankgate_schema (version INTEGER NOT NULL)",
            "CREATE TABLE IF NOT EXISTS rankgate_traces (trace_id TEXT PRIMARY KEY, "
            "query_id TEXT NOT NULL, recorded_at TEXT NOT NULL, variant TEXT, "
            "retrieved_ids TEXT NOT NULL, attributes TEXT NOT NULL DEFAULT '{}')",
            "CREATE INDEX IF NOT EXISTS rankgate_traces_time ON rankgate_traces (recorded_at)",
            "CREATE INDEX IF NOT EXISTS rankgate_traces_query ON rankgate_traces (query_id)",
            "CREATE TABLE IF NOT EXISTS rankgate_labels (query_id TEXT NOT NULL, "
            "document_id TEXT NOT NULL, grade REAL NOT NULL, labeled_at TEXT, source TEXT, "
            "PRIMARY KEY (query_id, document_id))",
        ]

    def _time_param(self, moment: datetime) -> Any:
        return format_time(moment)

    def _trace_params(self, row: TraceRow) -> tuple[Any, ...]:
        return (
            row.trace_id,
            row.query_id,
            format_time(row.recorded_at),
            row.variant,
            json.dumps(row.retrieved_ids, ensure_ascii=False),
            json.dumps(row.attributes, ensure_ascii=False, default=str),
        )

    def _label_params(self, row: LabelRow) -> tuple[Any, ...]:
        stamp = None if row.labeled_at is None else format_time(row.labeled_at)
        return (row.query_id, row.document_id, row.grade, stamp, row.source)

    def _labels_join(self) -> tuple[str, str]:
        return "l.grades, l.stamps", (
            f"LEFT JOIN (SELECT query_id, json_group_object(document_id, {_EXACT_GRADE}) AS grades, "
            "json_group_object(document_id, labeled_at) AS stamps "
            "FROM rankgate_labels GROUP BY query_id) l ON l.query_id = t.query_id"
        )

    def _labels_lookup(self) -> tuple[str, str]:
        # Through the labels' primary key, in the same (document) order as the GROUP BY's; NULL
        # for a query without labels, as the LEFT JOIN gives.
        def aggregate(value: str) -> str:
            return (
                f"(SELECT CASE WHEN count(*) THEN json_group_object(document_id, {value}) END "
                "FROM rankgate_labels WHERE query_id = t.query_id)"
            )

        return f"{aggregate(_EXACT_GRADE)} AS grades, {aggregate('labeled_at')} AS stamps", ""

    def _stream(self, sql: str, params: Sequence[Any] | dict[str, Any]) -> Iterator[dict[str, Any]]:
        try:
            cursor = self.connection.execute(sql, params)
        except (sqlite3.Error, OverflowError) as problem:  # OverflowError: a huge bound integer
            raise self._problem(problem, "query failed: ") from None
        names = [column[0] for column in cursor.description or ()]
        while True:
            try:
                rows = cursor.fetchmany(FETCH_ROWS)
            except (sqlite3.Error, OverflowError) as problem:
                raise self._problem(problem, "query failed: ") from None
            if not rows:
                return
            for values in rows:
                yield dict(zip(names, values, strict=True))

    def _decode_trace(self, row: dict[str, Any]) -> dict[str, Any]:
        where = f"{self.name}: trace {row['trace_id']!r}"
        try:
            ids = json.loads(row["retrieved_ids"])
            attributes = json.loads(row["attributes"]) if row["attributes"] else {}
            grades = None if row["grades"] is None else json.loads(row["grades"])
            stamps = None if row["stamps"] is None else json.loads(row["stamps"])
        except (TypeError, ValueError, RecursionError) as problem:
            # ValueError: malformed JSON, or an integer past Python's digit limit; RecursionError:
            # nesting deeper than the decoder's recursion allows. A hand-edited store may hold any.
            reason = str(problem)
            if isinstance(problem, RecursionError):
                reason = "nested too deeply"
            elif "digits" in reason and not isinstance(problem, json.JSONDecodeError):
                reason = "a number with too many digits"
            raise InputError(where, None, f"stored JSON is damaged ({reason})") from None
        return _record(row, attributes, ids, grades, stamps)


class PostgresBackend(Backend):
    dialect = "postgresql"
    placeholder = "%s"

    def __init__(self, url: str, *, read_only: bool, lock_wait: float) -> None:
        super().__init__(url, lock_wait)
        try:
            import psycopg
        except ImportError:
            raise StoreError(
                "a PostgreSQL store needs psycopg: pip install 'rankgate[postgres]'"
            ) from None
        self._psycopg = psycopg
        misread = credentials_problem(url)
        if misread is not None:
            raise StoreError(f"{self.name}: {misread}")
        try:
            self.connection = psycopg.connect(url, connect_timeout=max(2, min(10, int(lock_wait))))
        except psycopg.Error as problem:
            failure = self._problem(problem)
            raise type(failure)(
                f"{self.name}: cannot connect ({describe_error(problem, url)})"
            ) from None
        except (ValueError, UnicodeError) as problem:  # an unencodable character, say
            raise StoreError(
                f"{self.name}: cannot connect ({describe_error(problem, url)})"
            ) from None
        self._cursors = 0
        try:
            # Writers wait this long for a lock (LOCK TABLE, a concurrent insert of the same key)
            # and then fail, instead of hanging; readers keep the server's default.
            if not read_only:
                self._execute(
                    "SELECT set_config('lock_timeout', %s, false)", (_milliseconds(lock_wait),)
                )
                self.commit()
            # Read-only sessions: the server refuses any write a custom --sql might attempt.
            self.connection.read_only = read_only
        except BaseException:
            self.close()
            raise

    def _problem(self, problem: Exception, doing: str = "") -> StoreError:
        """A driver error as a one-line ``StoreError``; a lock not granted in time, a lost
        connection, a full disk or a server shutting down is ``StoreUnavailable``."""
        text = describe_error(problem, self.url)
        errors = self._psycopg.errors
        if isinstance(problem, errors.LockNotAvailable):
            return StoreUnavailable(
                f"{self.name}: locked by another session; gave up after waiting {self.lock_wait:g} s"
            )
        if isinstance(problem, self._psycopg.OperationalError):
            return StoreUnavailable(f"{self.name}: unavailable ({text})")
        return StoreError(f"{self.name}: {doing}{text}")

    def store_size(self) -> int:
        # The planner's estimate, kept by ANALYZE and autovacuum; -1 (or 0 pages) before the
        # table was ever analyzed, when the count is made.
        found = self._execute(
            "SELECT reltuples, relpages FROM pg_class WHERE oid = 'rankgate_traces'::regclass"
        ).fetchone()
        if found is None or found[0] < 0 or found[1] == 0:
            return super().store_size()
        return int(found[0])

    def close(self) -> None:
        with contextlib.suppress(self._psycopg.Error):  # a broken connection closes anyway
            self.connection.close()

    def _execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        try:
            return self.connection.execute(sql, params)
        except self._psycopg.Error as problem:
            self._rollback_quietly()
            raise self._problem(problem) from None

    def _has_table(self, name: str) -> bool:
        # to_regclass follows the search_path, as the queries that read the table will.
        (found,) = self._execute("SELECT to_regclass(%s) IS NOT NULL", (name,)).fetchone()
        return bool(found)

    def _rollback_quietly(self) -> None:
        with contextlib.suppress(self._psycopg.Error):  # the connection may be gone
            self.connection.rollback()

    def _executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> int:
        try:
            with self.connection.cursor() as cursor:
                cursor.executemany(sql, list(rows))
                return max(cursor.rowcount, 0)
        except self._psycopg.Error as problem:
            self._rollback_quietly()
            raise self._problem(problem) from None

    def commit(self) -> None:
        try:
            self.connection.commit()
        except self._psycopg.Error as problem:
            self._rollback_quietly()
            raise self._problem(problem) from None

    def rollback(self) -> None:
        try:
            self.connection.rollback()
        except self._psycopg.Error as problem:
            raise self._problem(problem) from None

    def begin_write(self, lock_wait: float) -> None:
        # SET LOCAL: the wait applies to this transaction only, and costs no separate commit.
        self.lock_wait = lock_wait
        self._execute("SELECT set_config('lock_timeout', %s, true)", (_milliseconds(lock_wait),))

    def _ddl(self) -> list[str]:
        return [
            "CREATE TABLE IF NOT EXISTS rankgate_schema (version INTEGER NOT NULL)",
            "CREATE TABLE IF NOT EXISTS rankgate_traces (trace_id TEXT PRIMARY KEY, "
            "query_id TEXT NOT NULL, recorded_at TIMESTAMPTZ NOT NULL, variant TEXT, "
            "retrieved_ids TEXT[] NOT NULL, attributes JSONB NOT NULL DEFAULT '{}', "
            "seq BIGINT GENERATED ALWAYS AS IDENTITY)",
            "CREATE INDEX IF NOT EXISTS rankgate_traces_time ON rankgate_traces (recorded_at, seq)",
            "CREATE INDEX IF NOT EXISTS rankgate_traces_query ON rankgate_traces (query_id)",
            "CREATE TABLE IF NOT EXISTS rankgate_labels (query_id TEXT NOT NULL, "
            "document_id TEXT NOT NULL, grade DOUBLE PRECISION NOT NULL, labeled_at TIMESTAMPTZ, "
            "source TEXT, PRIMARY KEY (query_id, document_id))",
        ]

    def ensure_schema(self) -> None:
        # Two processes creating the tables at once would race on the catalog: serialise them.
        self._execute("SELECT pg_advisory_xact_lock(7215080)")
        super().ensure_schema()

    def _trace_params(self, row: TraceRow) -> tuple[Any, ...]:
        from psycopg.types.json import Jsonb

        return (
            row.trace_id,
            row.query_id,
            row.recorded_at,
            row.variant,
            row.retrieved_ids,
            Jsonb(row.attributes, dumps=_dumps),
        )

    def _label_params(self, row: LabelRow) -> tuple[Any, ...]:
        return (row.query_id, row.document_id, row.grade, row.labeled_at, row.source)

    def _labels_join(self) -> tuple[str, str]:
        # Per trace, an index lookup of its query's labels (LATERAL): the time index then
        # streams traces in order, with no aggregate over the whole labels table and no sort of the
        # window. Arrays, unlike JSON, arrive decoded by the driver.
        return "l.documents, l.grades, l.stamps", (
            "LEFT JOIN LATERAL (SELECT array_agg(document_id) AS documents, "
            "array_agg(grade) AS grades, array_agg(labeled_at) AS stamps "
            "FROM rankgate_labels WHERE query_id = t.query_id) l ON true"
        )

    def _stream(self, sql: str, params: Sequence[Any] | dict[str, Any]) -> Iterator[dict[str, Any]]:
        # A named (server-side) cursor streams rows in batches instead of loading the result.
        self._cursors += 1
        # Binary results: arrays and JSONB arrive without text parsing on either side.
        cursor = self.connection.cursor(name=f"rankgate_read_{self._cursors}", binary=True)
        cursor.itersize = FETCH_ROWS
        try:
            cursor.execute(sql, params or None)
            names = None
            while True:
                rows = cursor.fetchmany(FETCH_ROWS)
                if names is None:
                    names = [column.name for column in cursor.description or ()]
                if not rows:
                    break
                for values in rows:
                    yield dict(zip(names, values, strict=True))
        except self._psycopg.Error as problem:
            self._rollback_quietly()
            raise self._problem(problem, "query failed: ") from None
        finally:
            if not cursor.closed:
                with contextlib.suppress(self._psycopg.Error):
                    cursor.close()
        # Reads end in a rollback: nothing a read-only session still managed to do (a large
        # object, say) outlives it.
        self.connection.rollback()

    def _decode_trace(self, row: dict[str, Any]) -> dict[str, Any]:
        grades = stamps = None
        documents = row["documents"]
        if documents is not None:
            grades = dict(zip(documents, row["grades"], strict=True))
            stamps = {
                doc: None if stamp is None else format_time(stamp)
                for doc, stamp in zip(documents, row["stamps"], strict=True)
            }
        row = {**row, "recorded_at": format_time(row["recorded_at"])}
        return _record(row, row["attributes"], list(row["retrieved_ids"]), grades, stamps)


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _milliseconds(seconds: float) -> str:
    # At least 1 ms: PostgreSQL reads a lock_timeout of 0 as "wait forever".
    return f"{max(int(seconds * 1000), 1)}ms"


def connect(
    url: str,
    *,
    read_only: bool = False,
    lock_wait: float = LOCK_WAIT_SECONDS,
    require_store: bool = True,
) -> Backend:
    """A connection to the store at ``url``; its tables are created when writing.

    ``lock_wait`` is how long a write waits for a lock another process holds before it fails with
    ``StoreUnavailable``. A read-only connection checks that ``url`` is a rankgate store unless
    ``require_store`` is False (a user's own ``--sql`` may read any database). Every failure is a
    ``StoreError`` with a one-line message naming the store, its password masked.
    """
    name = redact_url(url)
    match = SCHEME.match(url)
    scheme = match.group(1).lower() if match else ""
    if CONTROL.search(url):
        raise StoreError(f"{name}: a store URL cannot hold control characters")
    if scheme == "sqlite":
        rest = url[len("sqlite://") :]
        if not rest.startswith("/") or rest in ("/", "/:memory:"):
            raise StoreError(
                f"{name}: write sqlite:///relative/path.db or sqlite:////absolute/path.db"
            )
        path = Path(unquote(rest[1:]))
        backend: Backend = SQLiteBackend(url, path, read_only=read_only, lock_wait=lock_wait)
    elif scheme in ("postgresql", "postgres"):
        backend = PostgresBackend(url, read_only=read_only, lock_wait=lock_wait)
    elif scheme:
        raise StoreError(
            f"{name}: unsupported scheme {scheme!r}; stores are sqlite:///FILE.db, "
            "postgresql://USER@HOST/DB or postgres://USER@HOST/DB"
        )
    else:
        raise StoreError(
            f"{name}: not a store URL; write sqlite:///FILE.db or postgresql://USER@HOST/DB"
        )
    try:
        if not read_only:
            backend.ensure_schema()
        elif require_store:
            backend.check_schema()
    except BaseException:
        backend.close()
        raise
    return backend
