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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import numpy as np
import numpy.typing as npt

from rankgate import fast
from rankgate.errors import InputError, Location, UsageError
from rankgate.io.columnar import prefetched
from rankgate.io.tables import BATCH_ROWS, ArrowSource
from rankgate.io.validate import FieldMap, RawRecord, lookup_path
from rankgate.store.backends import Window, connect, redact_url
from rankgate.times import format_time

__all__ = ["ReadStats", "StoreSource", "sampled"]


#: Rows a store's batch is cut to at least, whatever the caller asks: a store's block then costs
#: what a JSON Lines chunk costs (about 6,000 rows), where the 2,048 rows that suit a Parquet file
#: made the per-block work of the lines, the label join and the evaluation the SQLite eval's
#: slowest part (5.5 s against 5.25 s at 1M traces, 2026-12-07).
STORE_ROWS = 8192


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
        #: Columns whose text the compiled scanner wrote, for the batches being read (``batches``).
        #: Whether batches carry the labels table's grades (a reader that takes only the
        #: rankings, such as compare reading a side's rankings again, turns it off).
        self.join_labels = True
        self.verified_columns: frozenset[str] = frozenset()
        #: Columns whose text is known to be UTF-8 (``batches``): a PostgreSQL ranking in UTF8.
        self.utf8_columns: frozenset[str] = frozenset()
        # A user's own query may read any database the URL opens, rankgate's tables or not.
        self._url = url
        self._backend = connect(url, read_only=True, require_store=sql is None)
        self._closed = False
        # The window's size is counted when first asked for (``total``): with a variant filter the
        # count reads every row of the window (the time index does not cover the variant), 0.6 s
        # at 1M traces, which a run without a progress bar that sizes nothing by it never needs.
        self._counted = sql is not None
        self._total: int | None = None
        super().__init__(self.name, total=None)
        # What the columnar read has passed on, block by block: each kept row's key, and its row
        # number among all rows read (with a sample, kept rows skip numbers), for ``reread``.
        self._block_starts: list[int] = []
        self._block_keys: list[npt.NDArray[np.int64]] = []
        self._block_rows: list[npt.NDArray[np.int64] | None] = []
        #: Label groups read so far, by (narrow, listed): see ``_label_groups``.
        self._read_labels: dict[tuple[bool, bool], Any] = {}

    def done(self) -> int:
        return self.stats.rows

    @property
    def total(self) -> int | None:
        """The number of traces in the window (None for a user's own query), counted once, on a
        connection of its own, when first asked for."""
        if not self._counted:
            backend = connect(self._url, read_only=True)
            try:
                self._total = backend.count(self.window)
            finally:
                backend.close()
            self._counted = True
        return self._total

    @total.setter
    def total(self, value: int | None) -> None:
        self._total = value

    def schema(self) -> Any:
        """What the columnar path may ask ``batches`` for, or None when only records will do: a
        user's own query (its columns are anyone's guess), and a sample of a query ID that lives in
        the attributes. Without the compiled scanner or the store's ADBC driver the record path
        reads everything too."""
        from rankgate.io import jsonl_arrow
        from rankgate.store.columns import StoreColumns, available

        if self.sql is not None or not jsonl_arrow.available():
            return None
        if not available(self._backend.dialect):
            return None
        if self.sample is not None and self.fields.query_id != "query_id":
            return None
        return StoreColumns(self.fields)

    def labels(self) -> Any:
        """The labels of the window's queries as an Arrow table: ``query_id`` (string) and
        ``relevance_scores`` (``map<string, float64>``), one row per labeled query."""
        return self._label_groups(listed=True).table()

    def expected_queries(self) -> tuple[str, Any] | None:
        """The query set the read is expected to cover, as a label table, or None when the read
        defines none.

        A store's labels are for all time, while its traces are for the moments queries were
        asked: a labeled query with no trace in a day's window was most often just not asked that
        day. So a time window (``--since``/``--until``) or a user's own ``--sql`` defines no query
        set, and only an explicit ``--queries`` set names queries as missing there. Without a
        time window every labeled query is expected (per variant under ``--variant``); under
        ``--sample``, every labeled query the same seeded sample keeps.
        """
        import pyarrow as pa

        if self.sql is not None or self.window.since is not None or self.window.until is not None:
            return None
        from rankgate.store.columns import available

        if available(self._backend.dialect):
            table = self._label_groups(narrow=False, listed=True).table()
        else:
            from rankgate.labels import label_table

            table = label_table(self._url)
        if self.sample is not None and table.num_rows:
            keep = [
                sampled(query_id, self.sample, self.seed)
                for query_id in table.column("query_id").to_pylist()
            ]
            table = table.filter(pa.array(keep, pa.bool_()))
        return f"labels of {self.name}", table

    def _label_groups(self, narrow: bool = True, listed: bool = False) -> Any:
        """The labels grouped by query (``StoreReader.labels``), read once per source: without a
        time window the query set (``expected_queries``) and the join (``batches``) both want
        all of them, ten million rows at 1M queries. Groups in the store's order serve a caller
        that does not need that order too."""
        for (was_narrow, was_listed), groups in list(self._read_labels.items()):
            if was_narrow == narrow and (was_listed or not listed):
                return groups
        reader = self._reader()
        try:
            groups = reader.labels(self.window, narrow=narrow, listed=listed)
        finally:
            reader.close()
        self._read_labels[(narrow, listed)] = groups
        return groups

    def _narrow_labels(self) -> bool:
        """Whether to read only the labels of the window's queries: it costs a second pass over
        the window's traces, worth it when the window holds under half of the store."""
        window = self.window
        if window.since is None and window.until is None and not window.variants:
            return False
        backend = self._live_backend()
        # The window's size when known; else its time range alone (the time index counts it at
        # once), an upper bound: at worst a superset of the labels is read. The store's size may
        # be an estimate: either answer reads every label the window needs.
        size = self._total if self._counted else backend.count(replace(window, variants=()))
        return bool((size or 0) * 2 < backend.store_size())

    def _live_backend(self) -> Any:
        """The source's connection, opened again when an earlier read closed it: a source may be
        read more than once (an unpaired compare reads its labels, then its traces)."""
        if self._closed:
            self._backend = connect(self._url, read_only=True, require_store=self.sql is None)
            self._closed = False
        return self._backend

    def _close_backend(self) -> None:
        self._backend.close()
        self._closed = True

    def _reader(self) -> Any:
        from rankgate.store.columns import StoreReader

        backend = self._backend
        return StoreReader(
            self._url,
            self.name,
            backend.dialect,
            getattr(backend, "path", None),
            backend.lock_wait,
        )

    def batches(self, rows: int = BATCH_ROWS, columns: list[str] | None = None) -> Iterator[Any]:
        """The window as record batches of ``columns`` (trace fields with the scanner's types,
        anything else as text, as ``segment_value`` gives it); a row the scanner is unsure of has
        a null ranking, which sends it to the validator through ``reread``."""

        rows = max(rows, STORE_ROWS)
        fields = self.fields
        paths = fields.paths()
        wanted = list(dict.fromkeys(columns if columns is not None else paths))
        segments = [name for name in wanted if name not in paths]
        others = [fields.query_id, fields.relevant_ids, fields.relevance_scores, *segments]
        # The ranking travels as a column of its own (PostgreSQL's array, SQLite's JSON text)
        # when only the ranking's role reads it.
        apart = fields.retrieved_ids == "retrieved_ids" and "retrieved_ids" not in others
        # The record's ``relevance_scores`` are the table's labels over the attributes' own; read
        # in any other role (or ``labeled_at``, which lines do not carry) every row goes to the
        # validator.
        label_roles = [name for name in [*paths, *segments] if name == "relevance_scores"]
        unsure = (
            "labeled_at" in wanted
            or (bool(label_roles) and fields.relevance_scores != "relevance_scores")
            or len(label_roles) > 1
        )
        join_labels = (
            self.join_labels and fields.relevance_scores == "relevance_scores" and not unsure
        )
        # Text the scanner wrote is valid UTF-8 within the ID limits: the columnar reader need not
        # check it again. The labels joined from the table, and PostgreSQL's decoded ranking,
        # are checked there as any Arrow column is.
        verified = {fields.query_id, fields.relevant_ids, *segments}
        if not apart or self._backend.dialect == "sqlite":
            verified.add(fields.retrieved_ids)
        self.verified_columns = frozenset(verified)
        scanned = [*paths, *segments]
        kept = 0
        # The labels are read on a second connection while the traces start to stream: the
        # database works on both at once, and the first block waits only for what is left. The
        # counts that decide which labels to read run there too (0.5 s of a 1M-trace window).
        pending = ThreadPoolExecutor(1, thread_name_prefix="rankgate-labels")
        grouped = (
            pending.submit(lambda: self._label_groups(self._narrow_labels()))
            if join_labels
            else None
        )
        labels = None
        traces: Any = None
        streamed: Any = None
        reader = self._reader()
        try:
            if apart and reader.text_is_utf8():
                # PostgreSQL in UTF8 holds no other text: its ranking needs no UTF-8 check.
                self.utf8_columns = frozenset({fields.retrieved_ids})
            # The database's work (SQLite's lines, PostgreSQL's COPY decoded by the driver and
            # its rankings split) runs in a thread of its own, apart from the scanner's: both
            # release the GIL.
            traces = reader.traces(self.window, scanned, ranking_apart=apart)
            streamed = prefetched(_decoded_rankings(traces), depth=6)
            for batch in streamed:
                if grouped is not None and labels is None:
                    labels = grouped.result()
                count = batch.num_rows
                first_number = self.stats.rows + 1
                self.stats.rows += count
                numbers = None
                if self.sample is not None:
                    keep = np.fromiter(
                        (
                            sampled(query_id, self.sample, self.seed)
                            for query_id in batch.column("query_id").to_pylist()
                        ),
                        dtype=np.bool_,
                        count=count,
                    )
                    self.stats.sampled_out += count - int(np.count_nonzero(keep))
                    numbers = first_number + np.flatnonzero(keep).astype(np.int64)
                    batch = batch.filter(fast.mask_array(keep))
                # A batch larger than ``rows`` (PostgreSQL's driver sizes them in bytes) is cut
                # into equal pieces, not into full ones and a small remainder.
                if not batch.num_rows:
                    continue
                pieces = -(-batch.num_rows // rows)
                size = -(-batch.num_rows // pieces)
                for start in range(0, batch.num_rows, size):
                    piece = batch.slice(start, size)
                    piece_numbers = None if numbers is None else numbers[start : start + size]
                    yield self._batch(
                        piece, piece_numbers, kept, scanned, wanted, unsure, labels, apart
                    )
                    kept += piece.num_rows
        finally:
            # The producing thread is stopped and joined before its cursor and connection close.
            for stream in (streamed, traces):
                if stream is not None:
                    stream.close()
            reader.close()
            # The labels' thread may be counting on the source's connection: it ends first.
            if grouped is not None:
                grouped.cancel()
            pending.shutdown(wait=True)
            self._close_backend()

    def _batch(
        self,
        piece: Any,
        numbers: npt.NDArray[np.int64] | None,
        first: int,
        scanned: list[str],
        wanted: list[str],
        unsure: bool,
        labels: Any,
        apart: bool,
    ) -> Any:
        """One record batch of ``wanted`` columns from rows of the store's reader; remembers the
        rows' keys."""
        import pyarrow as pa

        from rankgate.io.jsonl_arrow import parse_rankings
        from rankgate.store.columns import parse_lines

        fields = self.fields
        segments = scanned[len(fields.paths()) :]
        table, slow = parse_lines(piece.column("line"), fields, segments, first + 1)
        count = piece.num_rows
        if unsure:
            slow[:] = True
        # A copy: a view would keep the driver's whole batch (every line) alive to the end.
        keys = fast.numpy_of(piece.column("key"))
        self._block_keys.append(np.array(keys, dtype=np.int64, copy=True))
        self._block_rows.append(numbers)
        self._block_starts.append(first)
        by_name = dict(zip(scanned, table.columns, strict=True))
        if apart:
            ranking = piece.column("ranking")
            if "ranking_unread" in piece.schema.names:
                # PostgreSQL's, split by ``_decoded_rankings`` in the reading thread.
                slow |= fast.numpy_of(piece.column("ranking_unread"))
            else:
                # SQLite's JSON text, each value one array or the validator's to word. Scanned
                # here: decoded in the reading thread, the six batches it reads ahead took 0.4 GB
                # more at 1M traces, for no time saved.
                ranking, unread = parse_rankings(ranking)
                slow |= unread
            by_name[fields.retrieved_ids] = ranking
        if labels is not None:
            groups, collided = labels.lookup(piece.column("query_id"))
            slow |= collided
            found = groups >= 0
            if found.any():
                joined = labels.take(np.where(found, groups, 0))
                if not found.all():
                    # Rows without labels in the table keep the grades of their attributes.
                    own = by_name[fields.relevance_scores]
                    choice = np.arange(count, dtype=np.int64)
                    choice[~found] += count
                    joined = pa.concat_arrays([joined, own]).take(fast.index_array(choice))
                by_name[fields.relevance_scores] = joined
        retrieved = by_name[fields.retrieved_ids]
        if slow.any():
            # A null ranking is what the columnar path sends to the validator.
            by_name[fields.retrieved_ids] = type(retrieved).from_arrays(
                retrieved.offsets, retrieved.values, mask=fast.mask_array(slow)
            )
        self._rows_done = first + count
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
        backend = self._live_backend()
        rows = (
            backend.read(self.window)
            if self.sql is None
            else backend.read_sql(self.sql, self.params)
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
            self._close_backend()


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


def _decoded_rankings(batches: Iterator[Any]) -> Iterator[Any]:
    """The reader's batches with PostgreSQL's separator-joined ranking split into a list column,
    and a ``ranking_unread`` column flagging the rows the validator must read. Run by the reading
    thread, so that the splitting overlaps the scoring of earlier batches."""
    import pyarrow as pa

    from rankgate.store.columns import split_rankings

    for batch in batches:
        names = batch.schema.names
        if "ranking_length" not in names:
            yield batch
            continue
        ranking, unread = split_rankings(batch.column("ranking"), batch.column("ranking_length"))
        kept = [name for name in names if name not in ("ranking", "ranking_length")]
        yield pa.record_batch(
            [*(batch.column(name) for name in kept), ranking, fast.mask_array(unread)],
            names=[*kept, "ranking", "ranking_unread"],
        )
