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

import json
import re
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from rankgate.errors import InputError, UsageError
from rankgate.times import format_time

__all__ = [
    "SCHEMA_VERSION",
    "Backend",
    "LabelRow",
    "TraceRow",
    "Window",
    "connect",
    "describe_error",
    "is_store_url",
    "redact_url",
]

SCHEMA_VERSION = 1
SCHEMES = ("sqlite", "postgresql", "postgres")
FETCH_ROWS = 5000
# How long a SQLite writer waits for another process's write lock before giving up.
SQLITE_BUSY_MS = 10_000


def is_store_url(text: object) -> bool:
    """True for ``sqlite:///...``, ``postgresql://...`` and ``postgres://...``."""
    return isinstance(text, str) and text.split("://", 1)[0].lower() in SCHEMES and "://" in text


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

    def __init__(self, url: str) -> None:
        self.url = url

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
        elif found[0][0] > SCHEMA_VERSION:
            raise UsageError(
                f"{redact_url(self.url)}: store schema version {found[0][0]} is newer than this "
                "rankgate "
                f"understands ({SCHEMA_VERSION}); upgrade rankgate"
            )
        # Older versions would be migrated here, one step at a time.
        self.commit()

    def check_schema(self) -> None:
        """Before reading: this is a rankgate store, and not one from a newer release."""
        try:
            found = self._execute("SELECT version FROM rankgate_schema").fetchall()
        except UsageError:
            self.rollback()
            raise UsageError(
                f"{redact_url(self.url)}: not a rankgate trace store (no rankgate_schema or "
                "rankgate_traces table): record traces into it first, or run rankgate store init"
            ) from None
        if found and found[0][0] > SCHEMA_VERSION:
            raise UsageError(
                f"{redact_url(self.url)}: store schema version {found[0][0]} is newer than this "
                f"rankgate understands ({SCHEMA_VERSION}); upgrade rankgate"
            )

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


class SQLiteBackend(Backend):
    dialect = "sqlite"
    _arrival = "t.recorded_at, t.rowid"  # rowid: SQLite's own insertion counter

    def __init__(self, url: str, path: Path, *, read_only: bool) -> None:
        super().__init__(url)
        try:
            if read_only:
                if not path.is_file():
                    raise UsageError(f"{url}: no such store file ({path})")
                # mode=ro: the engine itself refuses writes. as_uri() percent-encodes the path, so
                # a '#' or '?' in a file name cannot cut the mode off.
                uri = path.resolve().as_uri() + "?mode=ro"
                self.connection = sqlite3.connect(uri, uri=True, check_same_thread=False)
                self.connection.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_MS}")
                self.connection.execute("PRAGMA query_only=ON")
                # Beyond read-only: a user's --sql may read and call functions, nothing else
                # (no ATTACH, which would create files, no PRAGMA).
                self.connection.set_authorizer(_read_only_authorizer)
            else:
                if not path.parent.is_dir():
                    raise UsageError(f"{url}: folder {path.parent} does not exist")
                self.connection = sqlite3.connect(path, check_same_thread=False)
                self.connection.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_MS}")
                # WAL lets readers work while services write; processes may write in turn.
                self.connection.execute("PRAGMA journal_mode=WAL")
        except sqlite3.Error as problem:
            raise UsageError(f"{url}: cannot open as a SQLite store ({problem})") from None

    def close(self) -> None:
        self.connection.close()

    def _execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        try:
            return self.connection.execute(sql, params)
        except sqlite3.Error as problem:
            raise UsageError(f"{self.url}: {problem}") from None

    def _executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> int:
        before = self.connection.total_changes
        self.connection.executemany(sql, rows)
        return self.connection.total_changes - before

    def commit(self) -> None:
        self.connection.commit()

    def rollback(self) -> None:
        self.connection.rollback()

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
            "LEFT JOIN (SELECT query_id, json_group_object(document_id, grade) AS grades, "
            "json_group_object(document_id, labeled_at) AS stamps "
            "FROM rankgate_labels GROUP BY query_id) l ON l.query_id = t.query_id"
        )

    def _stream(self, sql: str, params: Sequence[Any] | dict[str, Any]) -> Iterator[dict[str, Any]]:
        try:
            cursor = self.connection.execute(sql, params)
        except sqlite3.Error as problem:
            raise UsageError(f"{self.url}: query failed: {problem}") from None
        names = [column[0] for column in cursor.description or ()]
        while True:
            try:
                rows = cursor.fetchmany(FETCH_ROWS)
            except sqlite3.Error as problem:
                raise UsageError(f"{self.url}: query failed: {problem}") from None
            if not rows:
                return
            for values in rows:
                yield dict(zip(names, values, strict=True))

    def _decode_trace(self, row: dict[str, Any]) -> dict[str, Any]:
        where = f"{self.url}: trace {row['trace_id']!r}"
        try:
            ids = json.loads(row["retrieved_ids"])
            attributes = json.loads(row["attributes"]) if row["attributes"] else {}
            grades = None if row["grades"] is None else json.loads(row["grades"])
            stamps = None if row["stamps"] is None else json.loads(row["stamps"])
        except (TypeError, json.JSONDecodeError) as problem:
            raise InputError(where, None, f"stored JSON is damaged ({problem})") from None
        return _record(row, attributes, ids, grades, stamps)


class PostgresBackend(Backend):
    dialect = "postgresql"
    placeholder = "%s"

    def __init__(self, url: str, *, read_only: bool) -> None:
        super().__init__(url)
        try:
            import psycopg
        except ImportError:
            raise UsageError(
                "a PostgreSQL store needs psycopg: pip install 'rankgate[postgres]'"
            ) from None
        self._psycopg = psycopg
        try:
            self.connection = psycopg.connect(url, connect_timeout=10)
        except psycopg.Error as problem:
            raise UsageError(
                f"{redact_url(url)}: cannot connect ({describe_error(problem)})"
            ) from None
        # Read-only sessions: the server refuses any write a custom --sql might attempt.
        self.connection.read_only = read_only
        self._cursors = 0

    def close(self) -> None:
        self.connection.close()

    def _execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        try:
            return self.connection.execute(sql, params)
        except self._psycopg.Error as problem:
            self.connection.rollback()
            raise UsageError(f"{redact_url(self.url)}: {describe_error(problem)}") from None

    def _executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> int:
        with self.connection.cursor() as cursor:
            cursor.executemany(sql, list(rows))
            return max(cursor.rowcount, 0)

    def commit(self) -> None:
        self.connection.commit()

    def rollback(self) -> None:
        self.connection.rollback()

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
            self.connection.rollback()
            raise UsageError(
                f"{redact_url(self.url)}: query failed: {describe_error(problem)}"
            ) from None
        finally:
            if not cursor.closed:
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


def describe_error(problem: BaseException) -> str:
    """A driver's message, one line, with any password it quotes masked."""
    text = str(problem).strip()
    line = text.splitlines()[0] if text else type(problem).__name__
    line = re.sub(r"(://[^:/@\s\"']*:)[^@\s\"']*@", r"\1***@", line)
    return re.sub(r"(?i)(password=)[^&\s\"']*", r"\1***", line)


def redact_url(url: str) -> str:
    """The URL without its password (in the user part or a ``password=`` parameter), for
    messages; a URL too broken to take apart shows only its scheme."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return url.split("://", 1)[0] + "://***"
    netloc = parts.netloc if password is None else parts.netloc.replace(f":{password}@", ":***@")
    query = re.sub(r"(?i)(^|&)(password=)[^&]*", r"\1\2***", parts.query)
    return parts._replace(netloc=netloc, query=query).geturl()


def connect(url: str, *, read_only: bool = False) -> Backend:
    """A connection to the store at ``url``; its tables are created when writing."""
    scheme = url.split("://", 1)[0].lower()
    if scheme == "sqlite":
        rest = url.split("://", 1)[1]
        if not rest.startswith("/") or rest in ("/", "/:memory:"):
            raise UsageError(
                f"{url}: write sqlite:///relative/path.db or sqlite:////absolute/path.db"
            )
        path = Path(unquote(rest[1:]))
        backend: Backend = SQLiteBackend(url, path, read_only=read_only)
    elif scheme in ("postgresql", "postgres"):
        backend = PostgresBackend(url, read_only=read_only)
    else:
        raise UsageError(f"{url}: unknown store (use sqlite:///path.db or postgresql://...)")
    try:
        if read_only:
            backend.check_schema()
        else:
            backend.ensure_schema()
    except BaseException:
        backend.close()
        raise
    return backend
