"""A SQLite file of LLM judge grades, so a pair is paid for once.

Judging costs money and minutes per pair, and the same pool is judged again and again: a rerun
after a crash, a second arm sharing documents with the first, tomorrow's pool overlapping today's.
The cache makes a rerun free: ``rankgate.judge_client.judge_pairs`` looks every pair up here first
and sends only the misses.

A grade is reused only under the exact conditions it was given, so the key is
(endpoint, model, prompt version, query text, SHA-256 of the document text). Another model, another
prompt wording (``rankgate.judge_prompt.PROMPT_VERSION``) or an edited document is a miss. The
document is keyed by its hash rather than its text: documents are large, and a digest is enough to
notice an edit.

**Credentials never enter the file.** The API key is not part of the key at all. The endpoint goes
in with its user-info (``user:password@``), query string and fragment stripped
(``endpoint_for_key``), and with a lower-cased scheme and host and no trailing slash: a token
passed in the URL stays out of the file, and rotating it does not invalidate the cached grades.

The file is a plain SQLite database (stdlib ``sqlite3``): WAL journaling so readers do not block
the writer, a busy timeout so two processes sharing a cache wait for each other instead of
failing at once, and a ``judge_cache_schema`` table naming the application and schema version, so
a file that is not a rankgate judge cache is refused (``InputError``) rather than written into.
"""

from __future__ import annotations

import hashlib
import sqlite3
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from os import PathLike, fspath
from types import TracebackType
from typing import Self
from urllib.parse import urlsplit, urlunsplit

from rankgate.errors import InputError, UsageError

__all__ = [
    "APPLICATION",
    "DEFAULT_BUSY_TIMEOUT_SECONDS",
    "SCHEMA_VERSION",
    "CacheKey",
    "JudgeCache",
    "cache_key",
    "endpoint_for_key",
]

#: Written in the schema table; a SQLite file without it is not a judge cache.
APPLICATION = "rankgate-judge-cache"
#: The layout of the ``judgments`` table; a file of another version is refused, not migrated.
SCHEMA_VERSION = 1
#: How long a statement waits for another connection's lock before giving up.
DEFAULT_BUSY_TIMEOUT_SECONDS = 10.0

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS judge_cache_schema (
        application TEXT NOT NULL,
        version INTEGER NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS judgments (
        endpoint TEXT NOT NULL,
        model TEXT NOT NULL,
        prompt_version TEXT NOT NULL,
        query TEXT NOT NULL,
        document_sha256 TEXT NOT NULL,
        grade INTEGER NOT NULL CHECK (grade BETWEEN 0 AND 3),
        prompt_tokens INTEGER NOT NULL,
        completion_tokens INTEGER NOT NULL,
        judged_at TEXT NOT NULL,
        PRIMARY KEY (endpoint, model, prompt_version, query, document_sha256)
    )""",
)

# SQLite's primary result codes for the failures a user can cause (sqlite3.Error carries them).
_SQLITE_BUSY = 5
_SQLITE_LOCKED = 6
_SQLITE_CANTOPEN = 14
_SQLITE_NOTADB = 26


@dataclass(frozen=True, slots=True)
class CacheKey:
    """What a cached grade was given under. Build it with ``cache_key``, which strips credentials
    from the endpoint and hashes the document."""

    endpoint: str
    model: str
    prompt_version: str
    query: str
    document_sha256: str


def endpoint_for_key(endpoint: str) -> str:
    """``endpoint`` without user-info, query string or fragment, with a lower-case scheme and host
    and no trailing slash: the form that is stored, and safe to print.

    >>> endpoint_for_key("HTTPS://alice:s3cret@API.example.com/v1/?token=abc")
    'https://api.example.com/v1'
    """
    try:
        parts = urlsplit(endpoint.strip())
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        # Unparseable: keep nothing of it rather than risk storing a credential.
        return "(invalid endpoint)"
    if ":" in host:  # an IPv6 literal needs its brackets back
        host = f"[{host}]"
    netloc = host if port is None else f"{host}:{port}"
    return urlunsplit((parts.scheme.lower(), netloc, parts.path.rstrip("/"), "", ""))


def cache_key(
    endpoint: str, model: str, prompt_version: str, query: str, document_text: str
) -> CacheKey:
    """The key a grade of (``query``, ``document_text``) is stored under."""
    digest = hashlib.sha256(document_text.encode("utf-8", "surrogatepass")).hexdigest()
    return CacheKey(endpoint_for_key(endpoint), model, prompt_version, query, digest)


class JudgeCache:
    """Grades by ``CacheKey`` in one SQLite file, created if missing.

    One connection, guarded by a lock, serves every thread: the judge's worker threads are
    waiting on HTTP, not on the cache, so one writer at a time costs nothing. Use it as a context
    manager or call ``close``.
    """

    def __init__(
        self,
        path: str | PathLike[str],
        *,
        busy_timeout_seconds: float = DEFAULT_BUSY_TIMEOUT_SECONDS,
    ) -> None:
        self.path = fspath(path)
        self._lock = threading.Lock()
        self._connection: sqlite3.Connection | None = None
        try:
            # isolation_level=None: autocommit; the one multi-statement step (creating the schema)
            # opens its own transaction. check_same_thread=False: the lock serialises access.
            connection = sqlite3.connect(
                self.path,
                timeout=busy_timeout_seconds,
                isolation_level=None,
                check_same_thread=False,
            )
        except sqlite3.Error as error:
            raise self._error(error, "open") from None
        try:
            _prepare(connection, self.path)
        except sqlite3.Error as error:
            connection.close()
            raise self._error(error, "open") from None
        except BaseException:
            connection.close()
            raise
        self._connection = connection

    def get(self, key: CacheKey) -> int | None:
        """The cached grade for ``key``, or None when it was never judged."""
        with self._lock:
            try:
                row = (
                    self._open()
                    .execute(
                        "SELECT grade FROM judgments WHERE endpoint = ? AND model = ? AND "
                        "prompt_version = ? AND query = ? AND document_sha256 = ?",
                        (
                            key.endpoint,
                            key.model,
                            key.prompt_version,
                            key.query,
                            key.document_sha256,
                        ),
                    )
                    .fetchone()
                )
            except sqlite3.Error as error:
                raise self._error(error, "read") from None
        if row is None:
            return None
        grade = row[0]
        # The CHECK constraint keeps 0-3 in; a row outside it was written by something else.
        if not isinstance(grade, int) or isinstance(grade, bool) or not 0 <= grade <= 3:
            raise InputError(self.path, "grade", f"expected a cached grade 0-3, got {grade!r}")
        return grade

    def put(self, key: CacheKey, grade: int, prompt_tokens: int, completion_tokens: int) -> None:
        """Store ``grade`` for ``key`` (replacing any earlier grade), with the tokens it cost."""
        if isinstance(grade, bool) or not isinstance(grade, int) or not 0 <= grade <= 3:
            raise ValueError(f"grade: expected an integer 0-3, got {grade!r}")
        judged_at = datetime.now(UTC).isoformat(timespec="seconds")
        with self._lock:
            try:
                self._open().execute(
                    "INSERT OR REPLACE INTO judgments (endpoint, model, prompt_version, query, "
                    "document_sha256, grade, prompt_tokens, completion_tokens, judged_at) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        key.endpoint,
                        key.model,
                        key.prompt_version,
                        key.query,
                        key.document_sha256,
                        grade,
                        max(0, int(prompt_tokens)),
                        max(0, int(completion_tokens)),
                        judged_at,
                    ),
                )
            except sqlite3.Error as error:
                raise self._error(error, "write") from None

    def close(self) -> None:
        """Close the file; later calls to ``close`` do nothing, later reads or writes raise."""
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "open" if self._connection is not None else "closed"
        return f"JudgeCache({self.path!r}, {state})"

    def _open(self) -> sqlite3.Connection:
        if self._connection is None:
            raise UsageError(f"{self.path}: the judge cache is closed")
        return self._connection

    def _error(self, error: sqlite3.Error, doing: str) -> InputError | UsageError:
        """A one-line error naming the file, for a SQLite failure while ``doing`` something."""
        code = getattr(error, "sqlite_errorcode", None)
        primary = code & 0xFF if isinstance(code, int) else None
        if primary in (_SQLITE_BUSY, _SQLITE_LOCKED):
            return UsageError(
                f"{self.path}: the judge cache is locked by another process "
                f"(could not {doing} it within the busy timeout)"
            )
        if primary == _SQLITE_NOTADB:
            return InputError(self.path, None, "not a SQLite database, so not a judge cache")
        if primary == _SQLITE_CANTOPEN:
            return InputError(
                self.path, None, "cannot open the judge cache (is its folder there and writable?)"
            )
        return InputError(self.path, None, f"cannot {doing} the judge cache: {error}")


def _prepare(connection: sqlite3.Connection, path: str) -> None:
    """Check ``connection`` holds a judge cache of this schema version, creating one in an empty
    database; refuse any other database."""
    # WAL lets a second process read while this one writes. Some file systems cannot do WAL;
    # SQLite then keeps its rollback journal, which is still correct, only less concurrent.
    connection.execute("PRAGMA journal_mode=WAL").fetchone()
    tables = _table_names(connection)
    if not tables:
        # BEGIN IMMEDIATE takes the write lock first, so two processes creating the same new
        # cache do not both write a schema row; the loser then sees the winner's tables.
        connection.execute("BEGIN IMMEDIATE")
        try:
            if not _table_names(connection):
                for statement in _SCHEMA:
                    connection.execute(statement)
                connection.execute(
                    "INSERT INTO judge_cache_schema (application, version) VALUES (?, ?)",
                    (APPLICATION, SCHEMA_VERSION),
                )
            connection.execute("COMMIT")
        except BaseException:
            connection.execute("ROLLBACK")
            raise
        tables = _table_names(connection)
    if "judge_cache_schema" not in tables or "judgments" not in tables:
        raise InputError(path, None, "a SQLite database, but not a rankgate judge cache")
    rows = connection.execute("SELECT application, version FROM judge_cache_schema").fetchall()
    if len(rows) != 1 or rows[0][0] != APPLICATION:
        raise InputError(path, None, "a SQLite database, but not a rankgate judge cache")
    version = rows[0][1]
    if version != SCHEMA_VERSION:
        raise InputError(
            path,
            None,
            f"judge cache schema version {version!r}, this rankgate reads version "
            f"{SCHEMA_VERSION}: use another cache file",
        )


def _table_names(connection: sqlite3.Connection) -> set[str]:
    rows = connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    return {str(row[0]) for row in rows}
