"""Reading a trace store as a trace source: a time window, variants, a seeded sample, or SQL.

``StoreSource`` yields the same raw records a JSONL file would, with each query's labels joined from
the labels table, so everything after the reader (validation, batches, metrics, gates) is shared
and the numbers are the file's numbers.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from rankgate.errors import Location, UsageError
from rankgate.io.validate import FieldMap, RawRecord, lookup_path
from rankgate.store.backends import Window, connect, redact_url
from rankgate.times import format_time

__all__ = ["ReadStats", "StoreSource", "sampled"]


def sampled(query_id: object, fraction: float, seed: int) -> bool:
    """Whether a query is in a seeded sample of ``fraction`` of all queries.

    The choice hashes the query ID with the seed, so every trace of a query, in every variant and on
    every run, is in or out together: a sampled A/B comparison still pairs.
    """
    digest = hashlib.blake2b(f"{seed}\x00{query_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") < fraction * 2**64


@dataclass(slots=True)
class ReadStats:
    """What the reader passed over: rows the database returned and rows the sample left out."""

    rows: int = 0
    sampled_out: int = 0


class StoreSource:
    """Traces from a store URL, read in batches on a read-only connection."""

    def __init__(
        self,
        url: str,
        window: Window | None = None,
        *,
        sample: float | None = None,
        seed: int = 0,
        sql: str | None = None,
        params: dict[str, Any] | None = None,
        fields: FieldMap | None = None,
    ) -> None:
        if sample is not None and not 0 < sample <= 1:
            raise UsageError(f"sample must be a fraction in (0, 1], not {sample}")
        if sql is not None and window is not None and window.variants:
            raise UsageError("--variant filters the store's own table; with --sql, filter in SQL")
        self.name = redact_url(url)
        self.window = window or Window()
        self.sample = sample
        self.seed = seed
        self.sql = sql
        self.params = dict(params or {})
        if sql is not None:
            # The window's ends are offered to the query as :since / :until (or %(since)s); a
            # query that does not use them would silently read everything, so it is refused.
            used = _named_parameters(sql, postgres=_is_postgres(url))
            for key, moment in (("since", self.window.since), ("until", self.window.until)):
                if moment is None:
                    continue
                if key not in used:
                    marker = f"%({key})s" if _is_postgres(url) else f":{key}"
                    raise UsageError(
                        f"--{key} with --sql binds {marker}, which the query does not use: "
                        f"filter by time in the query with {marker}, or leave --{key} out"
                    )
                if key in self.params:
                    raise UsageError(f"--{key} and --param {key}=... both set {key}: give one")
                self.params[key] = _bound_time(url, moment)
        self.fields = fields or FieldMap()
        self.stats = ReadStats()
        # A user's own query may read any database the URL opens, rankgate's tables or not.
        self._backend = connect(url, read_only=True, require_store=sql is None)
        self.total = self._backend.count(self.window) if sql is None else None

    def done(self) -> int:
        return self.stats.rows

    def __iter__(self) -> Iterator[RawRecord]:
        rows = (
            self._backend.read(self.window)
            if self.sql is None
            else self._backend.read_sql(self.sql, self.params)
        )
        ordinal = 0
        try:
            for record in rows:
                self.stats.rows += 1
                if self.sample is not None:
                    query_id = lookup_path(record, self.fields.query_id)
                    if not sampled(query_id, self.sample, self.seed):
                        self.stats.sampled_out += 1
                        continue
                ordinal += 1
                yield RawRecord(
                    Location(self.name, row=self.stats.rows),
                    record,
                    ordinal,
                    # Rows of a user's own query may carry lists as JSON text, like a CSV cell.
                    from_table=self.sql is not None,
                )
        finally:
            self._backend.close()


def _is_postgres(url: str) -> bool:
    return url.lower().startswith(("postgresql://", "postgres://"))


def _bound_time(url: str, moment: datetime) -> Any:
    # SQLite stores times as ISO-8601 text (see backends.py); PostgreSQL binds a timestamptz.
    return moment if _is_postgres(url) else format_time(moment)


# What a query holds besides its words: quoted strings and identifiers, and comments, where a
# ':since' is text rather than a parameter.
_QUOTED_OR_COMMENT = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|--[^\n]*|/\*.*?\*/", re.DOTALL)
# SQLite's named parameters (:name, @name, $name; not PostgreSQL's ::type casts) and psycopg's
# (%(name)s).
_SQLITE_PARAMETER = re.compile(r"(?<![:\w])[:@$]([A-Za-z_]\w*)")
_PSYCOPG_PARAMETER = re.compile(r"%\(([^)]+)\)[sbt]")


def _named_parameters(sql: str, *, postgres: bool) -> set[str]:
    """The names of the parameters a query binds, in its dialect's style."""
    words = _QUOTED_OR_COMMENT.sub(" ", sql)
    pattern = _PSYCOPG_PARAMETER if postgres else _SQLITE_PARAMETER
    return {match.group(1) for match in pattern.finditer(words)}
