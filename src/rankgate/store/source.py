"""Reading a trace store as a trace source: a time window, variants, a seeded sample, or SQL.

``StoreSource`` yields the same raw records a JSONL file would, with each query's labels joined from
the labels table, so everything after the reader (validation, batches, metrics, gates) is shared
and the numbers are the file's numbers.

It is read two ways. The columnar path (``io/columnar.py``) takes it as an ``ArrowSource``: a
window arrives as Arrow record batches of the fields it asks for (``batches``, built by the
database and the compiled scanner, see ``columns.py``), and rows it must explain are read again by
their key (``reread``). Iterating gives the records one by one (``__iter__``), for the stale-label
filter, separately kept labels and a user's own ``--sql``; both give the same records.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
import numpy.typing as npt

from rankgate.errors import InputError, Location, UsageError
from rankgate.io.tables import BATCH_ROWS, ArrowSource
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


class StoreSource(ArrowSource):
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
        self._url = url
        self._backend = connect(url, read_only=True, require_store=sql is None)
        super().__init__(self.name, total=self._backend.count(self.window) if sql is None else None)
        # What the columnar read has passed on, block by block: each kept row's key, and its row
        # number among all rows read (with a sample, kept rows skip numbers), for ``reread``.
        self._block_starts: list[int] = []
        self._block_keys: list[npt.NDArray[np.int64]] = []
        self._block_rows: list[npt.NDArray[np.int64] | None] = []

    def done(self) -> int:
        return self.stats.rows

    def schema(self) -> Any:
        """What the columnar path may ask ``batches`` for, or None when only records will do: a
        user's own query (its columns are anyone's guess), and a sample of a query ID that lives in
        the attributes. Without the compiled scanner the record path reads everything too."""
        from rankgate.io import jsonl_arrow
        from rankgate.store.columns import StoreColumns

        if self.sql is not None or not jsonl_arrow.available():
            return None
        if self.sample is not None and self.fields.query_id != "query_id":
            return None
        return StoreColumns(self.fields)

    def batches(self, rows: int = BATCH_ROWS, columns: list[str] | None = None) -> Iterator[Any]:
        """The window as record batches of ``columns`` (trace fields with the scanner's types,
        anything else as text, as ``segment_value`` gives it); a row the scanner is unsure of has
        a null ranking, which sends it to the validator through ``reread``."""
        from rankgate.store.columns import line_blocks

        paths = self.fields.paths()
        wanted = list(dict.fromkeys(columns if columns is not None else paths))
        segments = [name for name in wanted if name not in paths]
        # A name a line does not carry (labeled_at): every row goes to the validator.
        unsure = "labeled_at" in wanted
        scanned = [*paths, *segments]
        kept = 0
        lines: list[bytes] = []
        keys: list[int] = []
        numbers: list[int] = []
        try:
            for block in line_blocks(self._backend, self.window, query_ids=self.sample is not None):
                first_number = self.stats.rows + 1
                self.stats.rows += len(block.keys)
                if self.sample is None:
                    lines.extend(block.lines)
                    keys.extend(block.keys)
                else:
                    assert block.query_ids is not None
                    for offset, (key, query_id, line) in enumerate(
                        zip(block.keys, block.query_ids, block.lines, strict=True)
                    ):
                        text = query_id.decode() if isinstance(query_id, bytes) else query_id
                        if sampled(text, self.sample, self.seed):
                            lines.append(line)
                            keys.append(key)
                            numbers.append(first_number + offset)
                        else:
                            self.stats.sampled_out += 1
                while len(lines) >= rows:
                    yield self._batch(
                        lines[:rows], keys[:rows], numbers[:rows], kept, scanned, wanted, unsure
                    )
                    kept += rows
                    del lines[:rows], keys[:rows], numbers[:rows]
            if lines:
                yield self._batch(lines, keys, numbers, kept, scanned, wanted, unsure)
        finally:
            self._backend.close()

    def _batch(
        self,
        lines: list[bytes],
        keys: list[int],
        numbers: list[int],
        first: int,
        scanned: list[str],
        wanted: list[str],
        unsure: bool,
    ) -> Any:
        """One record batch of ``wanted`` columns from these lines; remembers the rows' keys."""
        import pyarrow as pa

        from rankgate.store.columns import parse_lines

        paths = self.fields.paths()
        segments = scanned[len(paths) :]
        table, slow = parse_lines(lines, self.fields, segments, first + 1)
        if unsure:
            slow[:] = True
        self._block_keys.append(np.asarray(keys, dtype=np.int64))
        self._block_rows.append(np.asarray(numbers, dtype=np.int64) if numbers else None)
        self._block_starts.append(first)
        by_name = dict(zip(scanned, table.columns, strict=True))
        retrieved = by_name[self.fields.retrieved_ids]
        if slow.any():
            # A null ranking is what the columnar path sends to the validator.
            by_name[self.fields.retrieved_ids] = pa.LargeListArray.from_arrays(
                retrieved.offsets, retrieved.values, mask=pa.array(slow)
            )
        self._rows_done = first + len(lines)
        return pa.record_batch([by_name[name] for name in wanted], names=wanted)

    def reread(self, rows: Any, prepare: Callable[[Any], Any] | None = None) -> list[RawRecord]:
        """The records at these 0-based positions among the rows ``batches`` passed on, read
        again by key on a connection of their own, exactly as iterating gives them (``prepare``
        reshapes an Arrow table's rows; a store's are records already)."""
        positions = np.asarray(rows, dtype=np.int64)
        starts = np.asarray(self._block_starts, dtype=np.int64)
        blocks = np.searchsorted(starts, positions, side="right") - 1
        keys = np.empty(len(positions), dtype=np.int64)
        numbers = positions + 1
        for block in np.unique(blocks).tolist():
            members = blocks == block
            offsets = positions[members] - starts[block]
            keys[members] = self._block_keys[block][offsets]
            block_rows = self._block_rows[block]
            if block_rows is not None:
                numbers[members] = block_rows[offsets]
        backend = connect(self._url, read_only=True)
        try:
            found = backend.read_keys(keys.tolist())
            records = []
            for key, number, position in zip(
                keys.tolist(), numbers.tolist(), positions.tolist(), strict=True
            ):
                row = found.get(key)
                if row is None:
                    raise InputError(self.name, None, "the store changed while it was read")
                records.append(
                    RawRecord(Location(self.name, row=number), backend.decode(row), position + 1)
                )
            return records
        finally:
            backend.close()

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
