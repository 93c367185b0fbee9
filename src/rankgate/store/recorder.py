"""Recording traces and labels from a production service.

``TraceRecorder.record`` is called on the request path, so it only checks its arguments and puts a
row on a queue; one background thread writes queued rows to the store in batches, each batch in
one transaction. The queue is bounded: if the store falls far behind, ``record`` waits at most
``block_seconds`` and then drops the row, counts it in ``stats.dropped`` and logs a warning, rather
than stalling the service. ``close`` (also run at interpreter exit and by ``with``) writes
everything still queued, so a clean shutdown loses nothing.

A failed write is retried with backoff; rows stay queued meanwhile. Many threads may share one
recorder; many processes may each have their own recorder on the same store (SQLite serialises
writers with its file lock, PostgreSQL with row locks).
"""

from __future__ import annotations

import atexit
import contextlib
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
    TraceRow,
    connect,
    describe_error,
    redact_url,
)
from rankgate.times import parse_time

__all__ = ["RecorderStats", "TraceRecorder"]

log = logging.getLogger("rankgate.recorder")

MAX_GRADE = 1000.0
_RETRY_SECONDS = (0.05, 0.2, 1.0, 2.0, 5.0)


@dataclass(slots=True)
class RecorderStats:
    """Counts since the recorder started: accepted, written, and dropped because the queue was full
    (or, at close, because the store stayed unreachable)."""

    traces_queued: int = 0
    labels_queued: int = 0
    traces_written: int = 0
    labels_written: int = 0
    dropped: int = 0
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
        block_seconds: how long ``record`` waits for room before dropping the row.
    """

    def __init__(
        self,
        url: str,
        *,
        batch_size: int = 500,
        flush_interval: float = 0.5,
        max_queued: int = 100_000,
        block_seconds: float = 1.0,
    ) -> None:
        if batch_size < 1 or max_queued < 1:
            raise ValueError("batch_size and max_queued must be at least 1")
        self.url = url
        self.batch_size = batch_size
        self.flush_interval = flush_interval
        self.block_seconds = block_seconds
        self.stats = RecorderStats()
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=max_queued)
        self._lock = threading.Lock()  # guards stats
        # Orders puts against close(): nothing can be queued after the stop marker.
        self._gate = threading.Lock()
        self._closed = False
        # Connect now, so a wrong URL fails in the caller rather than later in the thread.
        backend = connect(url)
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
            with self._lock:
                self.stats.dropped += 1
            log.warning("rankgate recorder queue full; a %s was dropped", type(row).__name__)
            return False
        return True

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

        If the store stays unreachable past ``timeout``, what is still queued is counted in
        ``stats.dropped`` and logged, never lost silently."""
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
            with self._lock:
                self.stats.dropped += left
            log.error(
                "rankgate recorder closed with %d rows unwritten: %s did not take them in time",
                left,
                redact_url(self.url),
            )

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
        """Write a batch; retry with backoff while the store is unreachable, and when it is
        reachable but refuses the batch, find and drop only the rows it refuses."""
        for attempt, pause in enumerate((*_RETRY_SECONDS, None)):
            try:
                self._write_rows(batch)
                return
            except _Unreachable as problem:
                with self._lock:
                    self.stats.write_errors += 1
                if pause is None:
                    with self._lock:
                        self.stats.dropped += len(batch)
                    log.error(
                        "rankgate recorder could not write %d rows to %s after %d attempts: %s",
                        len(batch),
                        redact_url(self.url),
                        attempt + 1,
                        describe_error(problem.__cause__ or problem),
                    )
                    return
                time.sleep(pause)

    def _write_rows(self, rows: list[Any]) -> None:
        """Write rows in one transaction; if the store refuses them while reachable, split them
        until the refused rows are alone, and drop those (counted and logged)."""
        try:
            if self._backend is None:
                self._backend = connect(self.url)
            traces = [row for row in rows if isinstance(row, TraceRow)]
            labels = [row for row in rows if isinstance(row, LabelRow)]
            if traces:
                self._backend.insert_traces(traces)
            if labels:
                self._backend.upsert_labels(labels)
            self._backend.commit()
        except Exception as problem:  # any driver error: the connection, or the rows?
            self._disconnect()
            try:
                self._backend = connect(self.url)
            except Exception as unreachable:
                raise _Unreachable from unreachable
            if len(rows) == 1:
                with self._lock:
                    self.stats.write_errors += 1
                    self.stats.dropped += 1
                log.error(
                    "rankgate recorder dropped a %s that %s refused: %s",
                    type(rows[0]).__name__,
                    redact_url(self.url),
                    describe_error(problem),
                )
                return
            middle = len(rows) // 2
            self._write_rows(rows[:middle])
            self._write_rows(rows[middle:])
            return
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
