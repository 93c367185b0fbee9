"""Scoring a comparison's side while it is read, so that a side too large to hold its rankings is
not read a second time to be scored.

A side whose rankings pass ``compare_read.HELD_RANKING_BYTES`` lets them go; it used to be read
again from its source to be scored, once both sides' labels were joined. On a file of a million
traces that second read is a third of the comparison's time. Instead, from the chunk where the
side lets its rankings go (the chunks held so far first), each valid row is handed, with its
ranking, to ``evaluate`` running in a thread of its own, with the labels and attributes the
comparison will score it with, as far as they are known at that point:

* the baseline (read first): its own labels and attributes, every row. That is what the
  comparison scores when every baseline query is paired, and what an unpaired one scores;
* a candidate: the rows whose query the baseline has (the paired rows, in the candidate's order),
  with the baseline's attributes and the labels the label book holds once the baseline is in it.

What is known then can change afterwards: a later side labels a query no source labeled (the book
grows), a query ID is repeated (its later rows are invalid), the validator reads a row (it joins
the side out of order), not every baseline query is paired, a row needs reading back while it is
scored. ``compare`` then drops the early evaluation and scores the side from a second read, as
before; these checks are in ``compare._Scorer.ahead_for``. Each early evaluation is the one the
second read would give: the same rows in the same order with the same labels and attributes.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from rankgate import fast
from rankgate.compare_labels import LabelBook
from rankgate.compare_read import RELEVANT, SCORES, SideTable
from rankgate.id_index import IdIndex
from rankgate.io.columnar import SEGMENT_PREFIX
from rankgate.io.tables import ArrowSource
from rankgate.io.validate import FieldMap

__all__ = ["ScoredAhead", "paired_columns", "whole_columns"]

# Tables waiting for the scoring thread; each is one reading chunk (8,192 rows with rankings).
WAITING_TABLES = 2
_END = object()


class NotReadBack(Exception):
    """The evaluation asked for rows back before the comparison could say what they are."""


class _FedSource(ArrowSource):
    """The rows handed over by the reader, one pass, as a source ``evaluate`` reads. Rows read
    back (attributes, examples) come from ``bind``'s source: the side read again, by ordinal."""

    normalised = True  # rows read and validated by the comparison's reader

    def __init__(
        self,
        name: str,
        schema: Any,
        waiting: queue.Queue[Any],
        stopped: threading.Event,
        total: int | None = None,
    ) -> None:
        # ``total``: about how many rows will come, so that the evaluation sizes its arrays once
        # (grown a quarter at a time, a million queries' 19 value columns were copied over and
        # over in the scoring thread, compare's slowest).
        super().__init__(name, total=total)
        self._schema = schema
        self._waiting = waiting
        self._stopped = stopped
        self._passes = 0
        self._bind: Callable[[], Any] | None = None
        self._bound: Any = None

    def schema(self) -> Any:
        return self._schema

    def bind(self, source: Callable[[], Any]) -> None:
        """Where rows are read back from from now on: ``source()``, built on first use."""
        self._bind = source

    def batches(self, rows: int = 0, columns: list[str] | None = None) -> Iterator[Any]:
        self._passes += 1
        if self._passes > 1:
            raise NotReadBack(f"{self.name}: a second pass over rows handed over once")
        done = 0
        while True:
            try:
                table = self._waiting.get(timeout=0.05)
            except queue.Empty:
                # Stopped without its end handed over (an interrupt while the queue was full):
                # the evaluation ends here rather than wait for ever.
                if self._stopped.is_set():
                    raise NotReadBack(f"{self.name}: stopped") from None
                continue
            if table is _END:
                return
            if columns is not None:
                table = table.select(columns)
            done += table.num_rows
            self._rows_done = done
            # Whole, as the reader cut it (a JSON Lines chunk of ``CHUNK_BYTES``, as ``eval``
            # scores it), not in ``rows``: at 2,048 rows a block, the evaluation's work per block
            # made it the comparison's slowest thread.
            yield from table.to_batches()

    def reread(self, positions: Any, prepare: Callable[[Any], Any] | None = None) -> Any:
        if self._bound is None:
            if self._bind is None:
                raise NotReadBack(f"{self.name}: rows asked for while the side was being read")
            self._bound = self._bind()
        return self._bound.reread(positions, prepare)


class ScoredAhead:
    """A side's rows, handed over by ``compare_read.Reader`` as it reads them, scored by
    ``evaluate`` in a thread; ``result`` is the evaluation, or None when it could not be made.

    ``columns`` turns a piece of the side's table (with rankings) into the table ``evaluate``
    reads (query ID, labels, attributes, ranking under the field map's names); ``score`` runs
    ``evaluate`` on a source.
    """

    def __init__(
        self,
        name: str,
        columns: Callable[[Any], Any],
        score: Callable[[Any], Any],
    ) -> None:
        self.name = name
        self._columns = columns
        self._score = score
        self._waiting: queue.Queue[Any] = queue.Queue(maxsize=WAITING_TABLES)
        self._pool: ThreadPoolExecutor | None = None
        self._future: Future[Any] | None = None
        self._closed = False
        self._stopped = threading.Event()
        self.source: _FedSource | None = None
        #: Rows handed to the evaluation; ``compare`` checks them against the rows it scores.
        self.rows = 0
        #: Why the evaluation cannot be used, once that is known.
        self.spoiled: str | None = None

    def feed(self, piece: Any, expected_rows: int | None = None) -> None:
        """Hand over a piece of the side's table (valid rows, with their rankings);
        ``expected_rows``, with the first piece: about how many rows the side holds."""
        if self.spoiled is not None or self._closed:
            return
        try:
            table = self._columns(piece)
        except NotReadBack as problem:
            self.spoil(str(problem))
            return
        if self._future is None:
            self.source = _FedSource(
                self.name, table.schema, self._waiting, self._stopped, expected_rows
            )
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="rankgate-ahead")
            self._future = self._pool.submit(self._score, self.source)
        if not table.num_rows:
            return
        self.rows += table.num_rows
        self._put(table)

    def spoil(self, reason: str) -> None:
        """The evaluation will not be used (a row joins the side out of order, the read
        failed): no more rows, and it stops at its next batch; ``stop`` waits for it."""
        if self.spoiled is None:
            self.spoiled = reason
        self._stopped.set()
        self._closed = True

    def stop(self) -> None:
        """Spoiled if not yet used, and its thread done when this returns (the comparison is
        over, or failed)."""
        if self._future is None or not self._future.done():
            self.spoil("stopped")
        self._shutdown()

    def result(self) -> Any:
        """The evaluation of every row handed over, or None (spoiled, never started, failed:
        the side is then scored from a second read, which meets any error again)."""
        self.close()
        if self._future is None or self.spoiled is not None:
            return None
        try:
            return self._future.result()
        except Exception as problem:  # the second read scores again and words the error
            self.spoiled = f"{type(problem).__name__}: {problem}"
            return None
        finally:
            self._shutdown()

    def _put(self, item: Any) -> None:
        future = self._future
        assert future is not None
        while True:
            try:
                self._waiting.put(item, timeout=0.05)
                return
            except queue.Full:
                if future.done() or self._stopped.is_set():  # nothing reads any more
                    self.spoiled = self.spoiled or "the evaluation stopped"
                    return

    def close(self) -> None:
        """No more rows: the evaluation finishes (its means, segments and gates) while the
        caller goes on."""
        if self._closed:
            return
        if self._future is not None:
            self._put(_END)
        # Only once the end is handed over: interrupted before, ``stop`` still ends the thread.
        self._closed = True

    def _shutdown(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


def whole_columns(fields: FieldMap, segment_fields: Sequence[str]) -> Callable[[Any], Any]:
    """Pieces of a side as ``evaluate`` reads the whole side: its own labels and attributes."""

    def columns(piece: Any) -> Any:
        import pyarrow as pa

        built: dict[str, Any] = {
            fields.query_id: piece.column("query_id"),
            fields.relevant_ids: piece.column(RELEVANT),
            fields.relevance_scores: piece.column(SCORES),
        }
        for name in segment_fields:
            built[name] = piece.column(SEGMENT_PREFIX + name)
        built[fields.retrieved_ids] = piece.column("retrieved_ids")
        return pa.table(built)

    return columns


def paired_columns(
    fields: FieldMap,
    segment_fields: Sequence[str],
    base: SideTable,
    book: LabelBook,
    index_of: Callable[[SideTable], IdIndex | None],
) -> Callable[[Any], Any]:
    """Pieces of a candidate as the paired comparison reads it: the rows whose query the
    baseline has, with the baseline's attributes and the book's labels (which must hold the
    baseline's by now)."""
    import pyarrow as pa

    found: list[tuple[IdIndex, dict[str, Any]]] = []

    def lookup() -> tuple[IdIndex, dict[str, Any]]:
        # Built when the candidate first lets its rankings go (a small one never does).
        if not found:
            index = index_of(base)
            if index is None:
                raise NotReadBack(f"{base.name}: query IDs that cannot be looked up by hash")
            attributes = {
                name: base.attribute(name).combine_chunks()
                for name in segment_fields
                if base.table.num_rows
            }
            found.append((index, attributes))
        return found[0]

    def columns(piece: Any) -> Any:
        index, attributes = lookup()
        at = index.find(piece.column("query_id").combine_chunks())
        keep = at >= 0
        rows = piece if bool(keep.all()) else piece.filter(fast.mask_array(keep))
        taken = fast.index_array(at[keep])
        relevant, scores, _ = book.labels_for(rows.column("query_id"), rows)
        built: dict[str, Any] = {
            fields.query_id: rows.column("query_id"),
            fields.relevant_ids: relevant,
            fields.relevance_scores: scores,
        }
        for name in segment_fields:
            built[name] = (
                attributes[name].take(taken)
                if name in attributes
                else pa.nulls(len(taken), pa.large_string())
            )
        built[fields.retrieved_ids] = rows.column("retrieved_ids")
        return pa.table(built)

    return columns
