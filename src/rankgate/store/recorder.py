"""Recording traces and labels from a production service.

``TraceRecorder.record`` is called on the request path, so it only checks its arguments and puts a
row on a queue; one background thread writes queued rows to the store in batches, each batch in
one transaction. The queue is bounded: if the store falls far behind, ``record`` waits at most
``block_seconds`` and then gives the row up, rather than stalling the service. ``close`` (also run
at interpreter exit and by ``with``) writes everything still queued, so a clean shutdown loses
nothing.

A batch the store cannot take now (another process holds SQLite's write lock or a PostgreSQL lock,
the server is down, the disk is full) waits and is retried for at most ``retry_seconds``: the
lock wait (SQLite's busy timeout, PostgreSQL's lock_timeout) and the retries together stay within
that bound. Rows still unwritten then are given up.

Nothing is given up silently: each row lost is counted in ``stats`` by its reason (``queue_full``,
``refused`` by the store as malformed, ``unwritten`` because the store stayed unavailable), and
``stats.dropped`` is their sum. The first loss of each reason is logged once, as a warning naming
the store and the counter, so a store locked for an hour costs one log line, not one per row.

Many threads may share one recorder; many processes may each have their own recorder on the same
store (SQLite serialises writers with its file lock, PostgreSQL with row locks).
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import json
import logging
import math
import queue
import threading
import time
import uuid
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from rankgate.store.backends import (
    Backend,
    LabelRow,
    StoreError,
    StoreUnavailable,
    TraceRow,
    connect,
    describe_error,
    redact_url,
)
from rankgate.times import parse_time

__all__ = ["RecorderStats", "TraceRecorder"]

log = logging.getLogger("rankgate.recorder")

MAX_GRADE = 1000.0
# Pauses between attempts at a store that could not take a batch; the last repeats, and the
# recorder's retry_seconds bounds the whole.
_RETRY_PAUSES = (0.05, 0.2, 1.0, 2.0, 5.0)


@dataclass(slots=True)
class RecorderStats:
    """Counts since the recorder started.

    Rows not stored are counted by why: ``queue_full`` (``record`` found no room within
    ``block_seconds``), ``refused`` (the store rejected the row itself, e.g. text it cannot hold),
    ``unwritten`` (the store stayed locked or unreachable past ``retry_seconds``, or still held
    rows at ``close``). ``dropped`` is their sum. ``write_errors`` counts failed attempts,
    including those a retry then got through.
    """

    traces_queued: int = 0
    labels_queued: int = 0
    traces_written: int = 0
    labels_written: int = 0
    dropped: int = 0
    queue_full: int = 0
    refused: int = 0
    unwritten: int = 0
    write_errors: int = 0


class _Flush:
    """A marker on the queue: set once every row queued before it has been written."""

    def __init__(self) -> None:
        self.done = threading.Event()


_STOP = object()


class _Unreachable(Exception):
    """The store could not be reached at all; its cause is the driver's error."""


class TraceRecorder:
    """Batched, thread-safe writes of traces and labels to a trace store.

    Args:
        url: ``sqlite:///path.db`` or ``postgresql://user@host/db``; tables are created on first use.
        batch_size: rows written per transaction at most.
        flush_interval: seconds a row may wait for its batch to fill before it is written anyway.
        max_queued: rows held in memory before ``record`` starts to wait.
        block_seconds: how long ``record`` waits for room before giving the row up.
        retry_seconds: how long one batch may wait for a store that cannot take it now (locked
            by another process, unreachable), lock waits and retries together, before its rows
            are given up and counted in ``stats.unwritten``.

    Raises ``StoreError`` (a ``RankgateError``) when the store cannot be opened, and
    ``StoreUnavailable`` when it stays locked past ``retry_seconds`` while its tables are made.
    """

    def __init__(
        self,
        url: str,
        *,
        batch_size: int = 500,
        flush_interval: float = 0.5,
        max_queued: int = 100_000,
        block_seconds: float = 1.0,
        retry_seconds: float = 30.0,
    ) -> None:
        if batch_size < 1 or max_queued < 1:
            raise ValueError("batch_size and max_queued must be at least 1")
        if not retry_seconds > 0:
            raise ValueError("retry_seconds must be more than 0")
        self.url = url
        self.batch_size = batch_size
        self.flush_interval = flush_interval
        self.block_seconds = block_seconds
        self.retry_seconds = retry_seconds
        self.stats = RecorderStats()
        self._logged: set[str] = set()  # the reasons of loss already logged
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=max_queued)
        self._lock = threading.Lock()  # guards stats
        # Orders puts against close(): nothing can be queued after the stop marker.
        self._gate = threading.Lock()
        self._closed = False
        # Connect now, so a wrong URL fails in the caller rather than later in the thread.
        backend = connect(url, lock_wait=retry_seconds)
        self._writer = threading.Thread(
            target=self._run, args=(backend,), name="rankgate-recorder", daemon=True
        )
        self._writer.start()
        # At exit, write what is queued (until close() unregisters this).
        self._exit_hook = _exit_hook(weakref.ref(self))
        atexit.register(self._exit_hook)

    # --- the request path ---------------------------------------------------------------------

    def record(
        self,
        query_id: str | int,
        retrieved_ids: Sequence[str | int],
        *,
        variant: str | None = None,
        attributes: Mapping[str, Any] | None = None,
        trace_id: str | None = None,
        recorded_at: datetime | str | None = None,
    ) -> str:
        """Queue one retrieval: what was asked and what came back, best first. Returns its trace ID
        (a new UUID unless given). Raises ``ValueError``/``TypeError`` on malformed arguments."""
        query = _identifier(query_id, "query_id")
        if isinstance(retrieved_ids, (str, bytes)) or not isinstance(retrieved_ids, Sequence):
            raise TypeError("retrieved_ids must be a list of document IDs")
        ids = [_identifier(doc, "retrieved_ids item") for doc in retrieved_ids]
        if variant is not None and not isinstance(variant, str):
            raise TypeError("variant must be a string")
        moment = (
            datetime.now(UTC) if recorded_at is None else parse_time(recorded_at, "recorded_at")
        )
        if variant is not None:
            _text(variant, "variant")
        try:
            # What the store would refuse later (NaN, objects JSON cannot hold) is refused now,
            # in the caller, instead of costing a batch in the writer.
            dumped = json.dumps(dict(attributes or {}), allow_nan=False)
        except (TypeError, ValueError) as problem:
            raise ValueError(f"attributes cannot be stored as JSON: {problem}") from None
        if "\\u0000" in dumped:  # how JSON writes a NUL character
            raise ValueError("attributes must not contain a NUL character")
        row = TraceRow(
            trace_id=trace_id or uuid.uuid4().hex,
            query_id=query,
            recorded_at=moment,
            variant=variant,
            retrieved_ids=ids,
            attributes=dict(attributes or {}),
        )
        if self._put(row):
            with self._lock:
                self.stats.traces_queued += 1
        return row.trace_id

    def label(
        self,
        query_id: str | int,
        document_id: str | int,
        grade: float,
        *,
        labeled_at: datetime | str | None = None,
        source: str | None = None,
    ) -> None:
        """Queue one judgment: ``grade`` (0 = judged not relevant) of a document for a query. It
        applies to every trace of the query, past and future; a newer judgment replaces it."""
        if isinstance(grade, bool) or not isinstance(grade, (int, float)):
            raise TypeError("grade must be a number")
        if not math.isfinite(grade) or not 0 <= grade <= MAX_GRADE:
            raise ValueError(f"grade must be between 0 and {MAX_GRADE:g}, not {grade}")
        row = LabelRow(
            query_id=_identifier(query_id, "query_id"),
            document_id=_identifier(document_id, "document_id"),
            grade=float(grade),
            labeled_at=datetime.now(UTC)
            if labeled_at is None
            else parse_time(labeled_at, "labeled_at"),
            source=None if source is None else _text(source, "source"),
        )
        if self._put(row):
            with self._lock:
                self.stats.labels_queued += 1

    def _put(self, row: Any) -> bool:
        try:
            with self._gate:
                if self._closed:
                    raise RuntimeError("this TraceRecorder is closed")
                self._queue.put(row, timeout=self.block_seconds)
        except queue.Full:
            self._lose(
                "queue_full",
                1,
                f"the queue stayed full for {self.block_seconds:g} s (the store is behind)",
            )
            return False
        return True

    @property
    def unwritten(self) -> int:
        """Rows queued but never stored because the store stayed unavailable (``stats.unwritten``)."""
        return self.stats.unwritten

    def _lose(self, reason: str, count: int, why: str) -> None:
        """Count ``count`` rows given up for ``reason`` (a ``RecorderStats`` field); the first
        loss of each reason is logged, later ones are only counted."""
        with self._lock:
            setattr(self.stats, reason, getattr(self.stats, reason) + count)
            self.stats.dropped += count
            first = reason not in self._logged
            self._logged.add(reason)
        if first:
            log.warning(
                "rankgate recorder gave up %d row(s) for %s: %s; further losses are counted in "
                "stats.%s without another log line",
                count,
                redact_url(self.url),
                why,
                reason,
            )

    # --- shutdown -----------------------------------------------------------------------------

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every row queued so far is written; False if ``timeout`` ran out first."""
        marker = _Flush()
        with self._gate:
            if self._closed:
                return True
            self._queue.put(marker)
        return marker.done.wait(timeout)

    def close(self, timeout: float | None = 30.0) -> None:
        """Write everything queued, then stop the writer. Safe to call twice.

        If the writer has not emptied the queue within ``timeout`` (the store locked or
        unreachable), what is still queued is counted in ``stats.unwritten`` (and ``dropped``),
        never lost silently. A batch the writer holds at that moment is still written if the store
        frees up within ``retry_seconds``."""
        with self._gate:
            if self._closed:
                return
            self._closed = True
            self._queue.put(_STOP)
        self._writer.join(timeout)
        atexit.unregister(self._exit_hook)
        if self._writer.is_alive():
            self._abandon()

    def _abandon(self) -> None:
        """Count and release what the writer will not get to."""
        left = 0
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if isinstance(item, _Flush):
                item.done.set()
            elif item is not _STOP:
                left += 1
        if left:
            self._lose("unwritten", left, "closed while the store had not taken them")

    def __enter__(self) -> TraceRecorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- the writer thread --------------------------------------------------------------------

    def _run(self, backend: Backend) -> None:
        self._backend: Backend | None = backend
        try:
            stopping = False
            while not stopping:
                batch, markers, stopping = self._collect()
                if batch:
                    self._write(batch)
                for marker in markers:
                    marker.done.set()
        finally:
            if self._backend is not None:
                self._backend.close()

    def _collect(self) -> tuple[list[Any], list[_Flush], bool]:
        """Rows for one batch: wait for the first, then take more until the batch is full, the
        interval has passed, a flush is asked for, or the recorder stops."""
        batch: list[Any] = []
        markers: list[_Flush] = []
        item = self._queue.get()
        deadline = time.monotonic() + self.flush_interval
        while True:
            if item is _STOP:
                # Everything put before the stop marker is already out of the queue.
                return batch, markers, True
            if isinstance(item, _Flush):
                markers.append(item)
                return batch, markers, False
            batch.append(item)
            if len(batch) >= self.batch_size:
                return batch, markers, False
            remaining = deadline - time.monotonic()
            try:
                item = (
                    self._queue.get(timeout=max(remaining, 0))
                    if remaining > 0
                    else self._queue.get_nowait()
                )
            except queue.Empty:
                return batch, markers, False

    def _write(self, batch: list[Any]) -> None:
        """Write a batch within ``retry_seconds``; rows the store refuses while it is available
        are found by halving and given up alone."""
        self._write_part(batch, time.monotonic() + self.retry_seconds)

    def _write_part(self, rows: list[Any], deadline: float) -> None:
        for attempt in itertools.count():
            try:
                self._write_rows(rows, deadline)
                return
            except StoreUnavailable as problem:
                with self._lock:
                    self.stats.write_errors += 1
                self._disconnect()
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    self._lose(
                        "unwritten",
                        len(rows),
                        f"the store stayed unavailable for {self.retry_seconds:g} s ({problem})",
                    )
                    return
                pause = _RETRY_PAUSES[min(attempt, len(_RETRY_PAUSES) - 1)]
                time.sleep(min(pause, remaining))
            except Exception as problem:  # available, but it refused something in these rows
                with self._lock:
                    self.stats.write_errors += 1
                self._disconnect()
                if len(rows) == 1:
                    self._lose(
                        "refused",
                        1,
                        f"it refused a {type(rows[0]).__name__} "
                        f"({describe_error(problem, self.url)})",
                    )
                    return
                middle = len(rows) // 2
                self._write_part(rows[:middle], deadline)
                self._write_part(rows[middle:], deadline)
                return

    def _write_rows(self, rows: list[Any], deadline: float) -> None:
        """Write rows in one transaction, waiting for locks no later than ``deadline``. Raises
        ``StoreUnavailable`` when the store cannot take them now, anything else when it refuses
        them."""
        lock_wait = max(deadline - time.monotonic(), 0.05)
        if self._backend is None:
            try:
                self._backend = connect(self.url, lock_wait=lock_wait)
            except StoreError as problem:
                # The store, not these rows, is what fails (a schema another tool changed, say):
                # retried within the bound, then counted unwritten, never blamed on each row.
                if isinstance(problem, StoreUnavailable):
                    raise
                raise StoreUnavailable(str(problem)) from None
        traces = [row for row in rows if isinstance(row, TraceRow)]
        labels = [row for row in rows if isinstance(row, LabelRow)]
        self._backend.begin_write(lock_wait)
        if traces:
            self._backend.insert_traces(traces)
        if labels:
            self._backend.upsert_labels(labels)
        self._backend.commit()
        with self._lock:
            self.stats.traces_written += len(traces)
            self.stats.labels_written += len(labels)

    def _disconnect(self) -> None:
        """Drop a connection that failed; the next attempt opens a fresh one."""
        backend, self._backend = self._backend, None
        if backend is not None:
            with contextlib.suppress(Exception):  # it may already be broken
                backend.rollback()
            with contextlib.suppress(Exception):
                backend.close()


def _exit_hook(reference: weakref.ref[TraceRecorder]) -> Any:
    def close_at_exit() -> None:
        recorder = reference()
        if recorder is not None:
            recorder.close()

    return close_at_exit


def _identifier(value: object, what: str) -> str:
    """An ID as text: strings as they are, integers in decimal (7 and "7" are one ID)."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise TypeError(f"{what} must be a string or an integer, not {type(value).__name__}")
    text = str(value)
    if not text:
        raise ValueError(f"{what} must not be empty")
    return _text(text, what)


def _text(text: str, what: str) -> str:
    """Text the databases can hold: no NUL character (PostgreSQL refuses it in text and JSON)."""
    if "\x00" in text:
        raise ValueError(f"{what} must not contain a NUL character")
    return text
