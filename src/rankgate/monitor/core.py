"""The monitor itself, usable in-process: events in, windowed metrics and alert states out.

``Monitor`` takes trace records as they happen (``ingest``) and labels when they arrive
(``label``). A sampled, labeled trace is scored with the same metric kernels as ``rankgate eval``
(in small batches, so thousands of events a second cost little) and added to the time bucket of
its event time, per metric and per group (overall, each variant, each segment value). A trace that
is still unlabeled when its wait runs out counts as skipped (``unlabeled``), so coverage is known.
``tick`` closes finished buckets and feeds them to the alert engine.

Group labels are bounded sets (variants and configured segment fields), never query or document IDs,
so the number of series stays small whatever the traffic. Every string kept is checked first
(``rankgate.monitor.bounds``): text only, and bounded in bytes, as is what the monitor holds in all.
"""

from __future__ import annotations

import hashlib
import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from rankgate.batch import BatchBuilder
from rankgate.errors import ConfigError, InputError, Location, RankgateError
from rankgate.io.limits import MAX_ID_BYTES
from rankgate.io.validate import RawRecord, validate_record
from rankgate.monitor.bounds import (
    MAX_GROUP_VALUE_BYTES,
    MAX_LABEL_BYTES,
    MAX_WAITING_BYTES,
    check_ids,
    check_text,
    clean_text,
    ids_cost,
)
from rankgate.monitor.settings import MonitorConfig, duration_name, parse_monitor_table
from rankgate.segments import segment_value
from rankgate.times import parse_time

# MonitorConfig and parse_monitor_table live in settings; they are named here too, where callers
# have always found them.
__all__ = ["Event", "Monitor", "MonitorConfig", "duration_name", "parse_monitor_table"]

SCORE_BATCH = 512
# Queries whose labels are remembered, so a later trace of the same query is scored at once.
LABELS_REMEMBERED = 100_000
OUTCOMES = (
    "received",
    "invalid",
    "out_of_range",
    "sampled_out",
    "scored",
    "unlabeled",
    "no_relevant",
)
# How far in the future an event's timestamp may be (clocks disagree a little).
CLOCK_SKEW = timedelta(minutes=5)
VARIANT_FIELD = "variant"
DEFAULT_VARIANT = "default"
# Unlabeled traces held for their labels at once, at most.
MAX_WAITING = 200_000
OTHER_VALUE = "(other)"


@dataclass(slots=True)
class _Stats:
    """Count, mean and sum of squared deviations (Welford), mergeable across buckets."""

    count: int = 0
    mean: float = 0.0
    m2: float = 0.0

    def add_many(self, values: Iterable[float]) -> None:
        for value in values:
            self.count += 1
            delta = value - self.mean
            self.mean += delta / self.count
            self.m2 += delta * (value - self.mean)

    def merge(self, other: _Stats) -> None:
        if not other.count:
            return
        total = self.count + other.count
        delta = other.mean - self.mean
        self.mean += delta * other.count / total
        self.m2 += other.m2 + delta * delta * self.count * other.count / total
        self.count = total


@dataclass(frozen=True, slots=True)
class Event:
    """An accepted trace, reduced to what the monitor keeps of it: what the intake journal
    writes, so that replaying it after a crash has exactly the effect it had.

    ``variant`` and ``segments`` are the values the event carried (checked, before any pooling
    into ``(other)``); ``grades`` is None for an unlabeled trace.
    """

    query_id: str
    retrieved_ids: list[str]
    grades: dict[str, float] | None
    moment: datetime
    variant: str
    segments: dict[str, str]

    def to_row(self) -> list[Any]:
        return [
            self.query_id,
            self.retrieved_ids,
            self.grades,
            self.moment.isoformat(),
            self.variant,
            self.segments,
        ]

    @classmethod
    def from_row(cls, row: list[Any]) -> Event:
        query_id, ids, grades, moment, variant, segments = row
        return cls(
            str(query_id),
            [str(item) for item in ids],
            None if grades is None else {str(k): float(v) for k, v in grades.items()},
            parse_time(moment, "moment"),
            str(variant),
            {str(k): str(v) for k, v in segments.items()},
        )


@dataclass(slots=True)
class _Pending:
    retrieved_ids: list[str]
    groups: tuple[str, ...]
    bucket: int
    deadline: datetime
    labels: dict[str, str]


# A trace queued for scoring: retrieved IDs, grades, groups, bucket and group labels.
_Queued = tuple[list[str], dict[str, float], tuple[str, ...], int, dict[str, str]]


class Monitor:
    """Windowed retrieval metrics over sampled live traffic, with alerting.

    Thread-safe: one lock guards the state. ``on_score`` (if given) is called with each scored
    query's values, for exporters; ``on_alert`` with each alert state change. ``changes`` grows
    with every change of state, so a saver can skip saving what it already saved.
    """

    def __init__(
        self,
        config: MonitorConfig | None = None,
        alerts: Any = None,
        *,
        on_score: Callable[[str, Mapping[str, str], Mapping[str, float]], None] | None = None,
        on_alert: Callable[[Any], None] | None = None,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.config = config or MonitorConfig()
        self.alerts = alerts
        self.on_score = on_score
        self.on_alert = on_alert
        self.clock = clock or (lambda: datetime.now(UTC))
        self.counts = dict.fromkeys(OUTCOMES, 0)
        self.changes = 0
        self._lock = threading.RLock()
        self._buckets: dict[tuple[int, str, str], _Stats] = {}
        self._closed_through = -1  # last bucket index handed to the alert engine
        self._pending: dict[str, list[_Pending]] = {}
        self._waiting = 0
        self._waiting_bytes = 0
        self._labels: OrderedDict[str, dict[str, float]] = OrderedDict()
        self._label_bytes = 0
        self._queue: list[_Queued] = []
        self._ordinal = 0
        self._values: dict[str, set[str]] = {}
        self.recent_alerts: list[Any] = []

    # --- input ----------------------------------------------------------------------------------

    def ingest(
        self,
        record: Any,
        *,
        source: Location | str = "event",
        received_at: datetime | None = None,
    ) -> str:
        """Take one trace record; returns what became of it (``scored``, ``waiting``, ``unlabeled``,
        ``sampled_out``, ``out_of_range``). A malformed record raises ``InputError`` naming
        ``source`` and the field, and is counted ``invalid``."""
        return self.accept(record, source=source, received_at=received_at)[0]

    def accept(
        self,
        record: Any,
        *,
        source: Location | str = "event",
        received_at: datetime | None = None,
    ) -> tuple[str, Event]:
        """``ingest``, also returning the event as kept."""
        with self._lock:
            now = received_at or self.clock()
            try:
                event = self.read_event(record, source=source, received_at=now)
            except InputError:
                self.take([], invalid=1, received_at=now)
                raise
            return self.take([event], received_at=now)[0], event

    def read_event(
        self,
        record: Any,
        *,
        source: Location | str = "event",
        received_at: datetime | None = None,
    ) -> Event:
        """The event a trace record stands for, every string it keeps checked; ``InputError``
        naming ``source`` and the field when there is none. Changes nothing: ``take`` does."""
        with self._lock:
            self._ordinal += 1
            ordinal = self._ordinal
        return self._read_event(record, source, received_at or self.clock(), ordinal)

    def take(
        self, events: list[Event], *, invalid: int = 0, received_at: datetime | None = None
    ) -> list[str]:
        """Take events read by ``read_event`` (and count ``invalid`` records that were not), as
        received at ``received_at``; returns what became of each. Replaying the same call on the
        state from before it has the same effect, which is what the intake journal relies on."""
        with self._lock:
            now = received_at or self.clock()
            self.counts["received"] += len(events) + invalid
            self.counts["invalid"] += invalid
            self.changes += 1
            return [self._place(event, now) for event in events]

    def read_label(
        self, record: Any, *, source: Location | str = "label"
    ) -> tuple[str, dict[str, float]]:
        """(query ID, grades) of a label record as ``rankgate eval`` reads labels: ``query_id``
        with ``relevant_ids`` and/or ``relevance_scores``; ``InputError`` when it is not one."""
        with self._lock:
            self._ordinal += 1
            ordinal = self._ordinal
        location = source if isinstance(source, Location) else Location(source)
        trace = validate_record(
            RawRecord(location, record, ordinal),
            self.config.fields,
            require_query_id=True,
            require_ranking=False,
        )
        if trace.grades is None:
            raise InputError(
                location, "relevance_scores", "a label needs relevant_ids or relevance_scores"
            )
        check_text(trace.query_id, location, self.config.fields.query_id, MAX_ID_BYTES, "IDs")
        check_ids(list(trace.grades), location, self.config.fields.relevance_scores)
        return trace.query_id, trace.grades

    def ingest_label_record(self, record: Any, *, source: Location | str = "label") -> int:
        """Take a label record (see ``read_label``); returns how many waiting traces it scored."""
        query_id, grades = self.read_label(record, source=source)
        return self.label(query_id, grades)

    def label(self, query_id: str, grades: Mapping[str, float]) -> int:
        """Labels for a query arrived: score its waiting traces (returns how many) and remember the
        labels for its later traces."""
        with self._lock:
            self.changes += 1
            clean = {str(doc): float(grade) for doc, grade in grades.items()}
            key = str(query_id)
            self._remember(key, clean)
            waiting = self._pending.pop(key, [])
            self._waiting -= len(waiting)
            for item in waiting:
                self._waiting_bytes -= ids_cost(item.retrieved_ids)
                self._enqueue((item.retrieved_ids, clean, item.groups, item.bucket, item.labels))
            return len(waiting)

    def count_unreadable(self) -> None:
        """An event that could not even be decoded (not JSON) still counts, as invalid."""
        with self._lock:
            self.counts["received"] += 1
            self.counts["invalid"] += 1
            self.changes += 1

    # --- time -----------------------------------------------------------------------------------

    def tick(self, now: datetime | None = None) -> list[Any]:
        """Expire traces whose labels did not come, score what is queued, and close the buckets
        that have ended; returns the alert state changes this caused."""
        with self._lock:
            now = now or self.clock()
            before = (self.counts["unlabeled"], self.counts["scored"], len(self._buckets))
            for query_id in list(self._pending):
                kept = [p for p in self._pending[query_id] if p.deadline > now]
                expired = len(self._pending[query_id]) - len(kept)
                if not expired:
                    continue
                self.counts["unlabeled"] += expired
                self._waiting -= expired
                for item in self._pending[query_id]:
                    if item.deadline <= now:
                        self._waiting_bytes -= ids_cost(item.retrieved_ids)
                if kept:
                    self._pending[query_id] = kept
                else:
                    del self._pending[query_id]
            self._score_queue()
            current = self._bucket_index(now)
            # A bucket is judged once its traces have had their whole label wait: labels from
            # clicks or feedback come after the trace, and an early verdict would see none.
            settled = self._bucket_index(now - self.config.label_wait)
            events: list[Any] = []
            # Only buckets that hold data can be observed; an empty bucket says nothing.
            finished = sorted(
                {key[0] for key in self._buckets if self._closed_through < key[0] < settled}
            )
            for index in finished:
                events += self._close(index)
            closed_through = max(self._closed_through, settled - 1)
            self._forget_before(current - self._buckets_kept())
            after = (self.counts["unlabeled"], self.counts["scored"], len(self._buckets))
            if events or finished or before != after or closed_through != self._closed_through:
                self.changes += 1
            self._closed_through = closed_through
            return events

    def _close(self, index: int) -> list[Any]:
        if self.alerts is None:
            return []
        from rankgate.monitor.alerts import BucketStats

        start = self._bucket_start(index)
        end = start + self.config.bucket
        events = []
        closing = sorted((key, stats) for key, stats in self._buckets.items() if key[0] == index)
        for (_, metric, group), stats in closing:
            events += self.alerts.observe(
                BucketStats(metric, group, start, end, stats.count, stats.mean, stats.m2)
            )
        for event in events:
            self.recent_alerts.append(event)
            if self.on_alert is not None:
                self.on_alert(event)
        del self.recent_alerts[:-100]
        return events

    # --- output ---------------------------------------------------------------------------------

    def window(
        self, view: timedelta, now: datetime | None = None
    ) -> dict[tuple[str, str], tuple[int, float]]:
        """(metric, group) -> (scored queries, mean) over the last ``view``, closed and open
        buckets alike."""
        with self._lock:
            self._score_queue()
            now = now or self.clock()
            first = self._bucket_index(now - view) + 1
            last = self._bucket_index(now)
            merged: dict[tuple[str, str], _Stats] = {}
            for (bucket, metric, group), stats in self._buckets.items():
                if first <= bucket <= last:
                    merged.setdefault((metric, group), _Stats()).merge(stats)
            return {key: (s.count, s.mean) for key, s in sorted(merged.items())}

    def alert_states(self) -> list[Any]:
        """The alert engine's current states, read under the lock."""
        with self._lock:
            return [] if self.alerts is None else list(self.alerts.states())

    def flush(self) -> None:
        """Score everything queued now (reads call this themselves)."""
        with self._lock:
            self._score_queue()

    @property
    def held_bytes(self) -> tuple[int, int]:
        """Estimated bytes held by (waiting traces, remembered labels), each within its budget."""
        with self._lock:
            return self._waiting_bytes, self._label_bytes

    # --- persistence ----------------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """Everything a restart needs, JSON-serialisable: buckets, counters, alert state, traces
        waiting for labels and the labels remembered for later traces."""
        with self._lock:
            self._score_queue()
            return {
                "version": 1,
                "counts": dict(self.counts),
                "closed_through": self._closed_through,
                "buckets": [
                    [bucket, metric, group, s.count, s.mean, s.m2]
                    for (bucket, metric, group), s in self._buckets.items()
                ],
                "alerts": None if self.alerts is None else self.alerts.to_dict(),
                # Traces still waiting for labels, so a restart neither loses nor miscounts them.
                "waiting": [
                    [
                        query_id,
                        p.retrieved_ids,
                        list(p.groups),
                        p.bucket,
                        p.deadline.isoformat(),
                        p.labels,
                    ]
                    for query_id, waiting in self._pending.items()
                    for p in waiting
                ],
                "values": {name: sorted(values) for name, values in self._values.items()},
                # Least recently labeled first, so a restore keeps the same order of forgetting.
                "labels": [[query_id, grades] for query_id, grades in self._labels.items()],
            }

    def restore(self, state: Mapping[str, Any]) -> None:
        """Carry on from ``state()`` output. Text is cleaned on the way in (state written before
        intake checked text may hold what the exporters cannot encode); ``ConfigError`` when the
        state is not one rankgate wrote."""
        try:
            with self._lock:
                self._restore(state)
        except ConfigError:
            raise
        except (
            KeyError,
            TypeError,
            ValueError,
            IndexError,
            AttributeError,
            RankgateError,
        ) as problem:
            reason = str(problem)
            reason = reason if len(reason) <= 120 else reason[:117] + "..."
            raise ConfigError(f"not a monitor state rankgate wrote ({reason})") from None

    def _restore(self, state: Mapping[str, Any]) -> None:
        if not isinstance(state, Mapping) or state.get("version") != 1:
            raise ConfigError("monitor state was written by another rankgate version")
        counts = state.get("counts", {})
        for outcome in OUTCOMES:
            self.counts[outcome] = int(counts.get(outcome, 0))
        self._closed_through = int(state.get("closed_through", -1))
        self._buckets = {}
        for b, m, g, c, mean, m2 in state.get("buckets", []):
            key = (int(b), _clean_label(m), _clean_label(g))
            self._buckets.setdefault(key, _Stats()).merge(_Stats(int(c), float(mean), float(m2)))
        if self.alerts is not None and state.get("alerts") is not None:
            self.alerts = type(self.alerts).from_dict(self.alerts.rules, state["alerts"])
        self._values = {
            _clean_label(name): {_clean_label(value) for value in values}
            for name, values in state.get("values", {}).items()
        }
        self._pending = {}
        self._waiting = 0
        self._waiting_bytes = 0
        for query_id, ids, groups, bucket, deadline, labels in state.get("waiting", []):
            kept_ids = [clean_text(str(item), MAX_ID_BYTES) for item in ids]
            if self._waiting_bytes + ids_cost(kept_ids) > MAX_WAITING_BYTES:
                self.counts["unlabeled"] += 1
                continue
            self._pending.setdefault(clean_text(str(query_id), MAX_ID_BYTES), []).append(
                _Pending(
                    kept_ids,
                    tuple(_clean_label(group) for group in groups),
                    int(bucket),
                    parse_time(deadline, "deadline"),
                    {_clean_label(k): _clean_label(v) for k, v in dict(labels).items()},
                )
            )
            self._waiting += 1
            self._waiting_bytes += ids_cost(kept_ids)
        self._labels = OrderedDict()
        self._label_bytes = 0
        for query_id, grades in state.get("labels", []):
            clean = {clean_text(str(doc), MAX_ID_BYTES): float(g) for doc, g in grades.items()}
            self._remember(clean_text(str(query_id), MAX_ID_BYTES), clean)

    # --- internals ------------------------------------------------------------------------------

    def _read_event(
        self, record: Any, source: Location | str, now: datetime, ordinal: int
    ) -> Event:
        location = source if isinstance(source, Location) else Location(source)
        fields = self.config.fields
        trace = validate_record(RawRecord(location, record, ordinal), fields, require_query_id=True)
        check_text(trace.query_id, location, fields.query_id, MAX_ID_BYTES, "IDs")
        check_ids(trace.retrieved_ids, location, fields.retrieved_ids)
        if trace.grades is not None:
            check_ids(list(trace.grades), location, fields.relevance_scores)
        moment = self._event_time(trace.attributes, location, now)
        variant = str(trace.attributes.get(VARIANT_FIELD) or DEFAULT_VARIANT)
        check_text(variant, location, VARIANT_FIELD, MAX_GROUP_VALUE_BYTES, "group values")
        segments = {}
        for name in self.config.segment_by:
            value = segment_value(trace.attributes, name)
            check_text(value, location, name, MAX_GROUP_VALUE_BYTES, "segment values")
            segments[name] = value
        return Event(trace.query_id, trace.retrieved_ids, trace.grades, moment, variant, segments)

    def _place(self, event: Event, now: datetime) -> str:
        """Window, sample and queue (or hold for labels) an event taken at ``now``."""
        if not now - self.config.retention <= event.moment <= now + CLOCK_SKEW:
            # Outside every window: it could only pollute one (a future date) or be dropped
            # at the next tick (a past one), so it is counted and left out.
            self.counts["out_of_range"] += 1
            return "out_of_range"
        variant = self._bounded(VARIANT_FIELD, event.variant)
        segments = {name: self._bounded(name, value) for name, value in event.segments.items()}
        if not self._sampled(event.query_id, segments):
            self.counts["sampled_out"] += 1
            return "sampled_out"
        groups = self._groups(variant, segments)
        bucket = self._bucket_index(event.moment)
        labels = {"variant": variant, **segments}
        grades = event.grades
        if grades is None:
            grades = self._labels.get(event.query_id)
            if grades is None:
                cost = ids_cost(event.retrieved_ids)
                if self._waiting >= MAX_WAITING or self._waiting_bytes + cost > MAX_WAITING_BYTES:
                    # Memory stays bounded however much unlabeled traffic arrives: past the
                    # limits an unlabeled trace is counted at once instead of waiting.
                    self.counts["unlabeled"] += 1
                    return "unlabeled"
                deadline = now + self.config.label_wait
                self._pending.setdefault(event.query_id, []).append(
                    _Pending(event.retrieved_ids, groups, bucket, deadline, labels)
                )
                self._waiting += 1
                self._waiting_bytes += cost
                return "waiting"
        self._enqueue((event.retrieved_ids, grades, groups, bucket, labels))
        return "scored"

    def _remember(self, query_id: str, grades: dict[str, float]) -> None:
        """Keep a query's labels for its later traces, forgetting the least recently labeled
        past ``LABELS_REMEMBERED`` queries or ``MAX_LABEL_BYTES``."""
        previous = self._labels.pop(query_id, None)
        if previous is not None:
            self._label_bytes -= ids_cost(list(previous)) + len(query_id)
        self._labels[query_id] = grades
        self._label_bytes += ids_cost(list(grades)) + len(query_id)
        while self._labels and (
            len(self._labels) > LABELS_REMEMBERED or self._label_bytes > MAX_LABEL_BYTES
        ):
            forgotten, old = self._labels.popitem(last=False)
            self._label_bytes -= ids_cost(list(old)) + len(forgotten)

    def _event_time(
        self, attributes: Mapping[str, Any], location: Location, now: datetime
    ) -> datetime:
        stamp = attributes.get("timestamp")
        if stamp is None:
            return now
        try:
            return parse_time(stamp, "timestamp")
        except Exception:
            raise InputError(
                location, "timestamp", f"expected an ISO 8601 time, got {_short(stamp)}"
            ) from None

    def _sampled(self, query_id: str, segments: Mapping[str, str]) -> bool:
        rates = self.config.sample
        rate = min(
            (rates[value] for value in segments.values() if value in rates), default=rates["*"]
        )
        if rate >= 1:
            return True
        digest = hashlib.blake2b(f"{self.config.seed}\x00{query_id}".encode(), digest_size=8)
        return int.from_bytes(digest.digest(), "big") < rate * 2**64

    def _bounded(self, field_name: str, value: str) -> str:
        """The value as a group label, or ``(other)`` once the field has ``max_values`` distinct
        values: labels come from events, and an unbounded set would grow every series without
        limit (and let any client inflate the monitor's memory)."""
        known = self._values.setdefault(field_name, set())
        if value in known:
            return value
        if len(known) >= self.config.max_values:
            return OTHER_VALUE
        known.add(value)
        return value

    def _groups(self, variant: str, segments: Mapping[str, str]) -> tuple[str, ...]:
        return ("overall", f"variant={variant}", *(f"{k}={v}" for k, v in segments.items()))

    def _bucket_index(self, moment: datetime) -> int:
        seconds = self.config.bucket.total_seconds()
        return math.floor(moment.timestamp() / seconds)

    def _bucket_start(self, index: int) -> datetime:
        return datetime.fromtimestamp(index * self.config.bucket.total_seconds(), UTC)

    def _buckets_kept(self) -> int:
        return math.ceil(self.config.retention / self.config.bucket) + 1

    def _forget_before(self, index: int) -> None:
        for key in [k for k in self._buckets if k[0] < index]:
            del self._buckets[key]

    def _enqueue(self, item: _Queued) -> None:
        self._queue.append(item)
        if len(self._queue) >= SCORE_BATCH:
            self._score_queue()

    def _score_queue(self) -> None:
        if not self._queue:
            return
        queue, self._queue = self._queue, []
        threshold = self.config.relevance_threshold
        kept = []
        forced_zero: list[bool] = []
        builder = BatchBuilder()
        for item in queue:
            retrieved_ids, grades = item[0], item[1]
            has_relevant = any(grade >= threshold for grade in grades.values())
            if not has_relevant and self.config.empty_relevant == "skip":
                self.counts["no_relevant"] += 1
                continue
            builder.add(retrieved_ids, grades)
            kept.append(item)
            forced_zero.append(not has_relevant)
        if not kept:
            return
        batch = builder.build()
        defaults = {"rel": threshold}
        values = {str(spec): spec.compute(batch, defaults) for spec in self.config.metrics}
        zero = np.asarray(forced_zero, dtype=np.bool_)
        for column in values.values():
            column[zero] = 0.0  # as eval does under empty_relevant = "zero"
        self.counts["scored"] += len(kept)
        for row, (_, _, groups, bucket, labels) in enumerate(kept):
            per_query = {name: float(column[row]) for name, column in values.items()}
            for name, value in per_query.items():
                for group in groups:
                    self._buckets.setdefault((bucket, name, group), _Stats()).add_many((value,))
            if self.on_score is not None:
                self.on_score(labels.get("variant", DEFAULT_VARIANT), labels, per_query)


def _clean_label(value: Any) -> str:
    # Group names are "field=value": room for a field name beside the longest value.
    return clean_text(str(value), 2 * MAX_GROUP_VALUE_BYTES)


def _short(value: Any) -> str:
    """A value for a one-line message: its repr (which escapes what is not printable), clipped."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
