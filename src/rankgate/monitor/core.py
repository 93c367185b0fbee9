"""The monitor itself, usable in-process: events in, windowed metrics and alert states out.

``Monitor`` takes trace records as they happen (``ingest``) and labels when they arrive
(``label``). A sampled, labeled trace is scored with the same metric kernels as ``rankgate eval``
(in small batches, so thousands of events a second cost little) and added to the time bucket of
its event time, per metric and per group (overall, each variant, each segment value). A trace that
is still unlabeled when its wait runs out counts as skipped (``unlabeled``), so coverage is known.
``tick`` closes finished buckets and feeds them to the alert engine.

Group labels are bounded sets (variants and configured segment fields), never query or document IDs,
so the number of series stays small whatever the traffic.
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from rankgate.batch import BatchBuilder
from rankgate.errors import ConfigError, InputError, Location
from rankgate.io.validate import FieldMap, RawRecord, Trace, validate_record
from rankgate.segments import segment_value
from rankgate.spec import MetricSpec, parse_metric_list
from rankgate.stale import parse_age
from rankgate.times import parse_time

__all__ = ["Monitor", "MonitorConfig", "parse_monitor_table"]

DEFAULT_METRICS = ("mrr", "precision@5")
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
# Retrieved IDs per event, at most: bounds what a waiting trace can hold.
MAX_RETRIEVED = 10_000
VARIANT_FIELD = "variant"
DEFAULT_VARIANT = "default"
# Unlabeled traces held for their labels at once, at most.
MAX_WAITING = 200_000
# Distinct values kept per group field (variant, each segment field); the rest become OTHER_VALUE.
DEFAULT_MAX_VALUES = 50
OTHER_VALUE = "(other)"


@dataclass(frozen=True)
class MonitorConfig:
    """What the monitor scores and how it windows it (the ``[monitor]`` table of rankgate.toml)."""

    metrics: tuple[MetricSpec, ...] = field(
        default_factory=lambda: tuple(parse_metric_list(DEFAULT_METRICS))
    )
    bucket: timedelta = timedelta(minutes=5)
    views: tuple[timedelta, ...] = (timedelta(hours=1), timedelta(hours=24))
    segment_by: tuple[str, ...] = ()
    sample: Mapping[str, float] = field(default_factory=lambda: {"*": 1.0})
    seed: int = 0
    label_wait: timedelta = timedelta(hours=1)
    relevance_threshold: float = 1.0
    fields: FieldMap = field(default_factory=FieldMap)
    max_values: int = DEFAULT_MAX_VALUES
    empty_relevant: str = "skip"

    @property
    def retention(self) -> timedelta:
        return max(self.views)


def parse_monitor_table(table: Mapping[str, Any], where: str = "[monitor]") -> MonitorConfig:
    """A ``MonitorConfig`` from a TOML table; ``ConfigError`` names the key on any problem."""
    known = {
        "metrics",
        "bucket",
        "views",
        "segment_by",
        "sample",
        "seed",
        "label_wait",
        "max_values",
    }
    unknown = sorted(set(table) - known)
    if unknown:
        raise ConfigError(
            f"{where}: unknown key {unknown[0]!r} (known: {', '.join(sorted(known))})"
        )
    values: dict[str, Any] = {}
    if "metrics" in table:
        metrics = table["metrics"]
        if not isinstance(metrics, list) or not all(isinstance(m, str) for m in metrics):
            raise ConfigError(f"{where}: metrics must be a list of metric strings")
        values["metrics"] = tuple(parse_metric_list(metrics))
    for key in ("bucket", "label_wait"):
        if key in table:
            values[key] = _duration(table[key], f"{where} {key}")
    if "views" in table:
        views = table["views"]
        if not isinstance(views, list) or not views:
            raise ConfigError(f'{where}: views must be a list of durations, e.g. ["1h", "24h"]')
        values["views"] = tuple(_duration(v, f"{where} views") for v in views)
    if "segment_by" in table:
        fields = table["segment_by"]
        if not isinstance(fields, list) or not all(isinstance(f, str) and f for f in fields):
            raise ConfigError(f"{where}: segment_by must be a list of field names")
        values["segment_by"] = tuple(fields)
    if "sample" in table:
        values["sample"] = _sample(table["sample"], where)
    if "max_values" in table:
        limit = table["max_values"]
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ConfigError(f"{where}: max_values must be a whole number >= 1")
        values["max_values"] = limit
    if "seed" in table:
        if isinstance(table["seed"], bool) or not isinstance(table["seed"], int):
            raise ConfigError(f"{where}: seed must be an integer")
        values["seed"] = table["seed"]
    config = MonitorConfig(**values)
    if any(view < config.bucket for view in config.views):
        raise ConfigError(f"{where}: every view must be at least one bucket long")
    return config


def _duration(value: Any, where: str) -> timedelta:
    if not isinstance(value, str):
        raise ConfigError(f'{where}: expected a duration such as "5m", got {value!r}')
    try:
        span = parse_age(value)
    except ConfigError:
        raise ConfigError(f'{where}: expected a duration such as "5m", got {value!r}') from None
    if span <= timedelta(0):
        raise ConfigError(f"{where}: must be longer than zero")
    return span


def _sample(value: Any, where: str) -> dict[str, float]:
    """A sample rate for all traffic (a number), or per segment value with "*" for the rest."""
    rates = {"*": value} if isinstance(value, (int, float)) else value
    if not isinstance(rates, dict):
        raise ConfigError(f"{where}: sample is a rate (0.1) or a table of rates by segment value")
    checked = {}
    for key, rate in rates.items():
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 <= rate <= 1:
            raise ConfigError(f"{where}: sample {key!r} must be a rate between 0 and 1")
        checked[str(key)] = float(rate)
    checked.setdefault("*", 1.0)
    return checked


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


@dataclass(slots=True)
class _Pending:
    trace: Trace
    groups: tuple[str, ...]
    bucket: int
    deadline: datetime
    labels: dict[str, str]


class Monitor:
    """Windowed retrieval metrics over sampled live traffic, with alerting.

    Thread-safe: one lock guards the state. ``on_score`` (if given) is called with each scored
    query's values, for exporters; ``on_alert`` with each alert state change.
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
        self._lock = threading.RLock()
        self._buckets: dict[tuple[int, str, str], _Stats] = {}
        self._closed_through = -1  # last bucket index handed to the alert engine
        self._pending: dict[str, list[_Pending]] = {}
        self._waiting = 0
        self._labels: OrderedDict[str, dict[str, float]] = OrderedDict()
        self._queue: list[tuple[Trace, tuple[str, ...], int, dict[str, str]]] = []
        self._ordinal = 0
        self._values: dict[str, set[str]] = {}
        self.recent_alerts: list[Any] = []

    # --- input ----------------------------------------------------------------------------------

    def ingest(self, record: Any, *, source: str = "event") -> str:
        """Take one trace record; returns what became of it (``scored``, ``waiting``, ``unlabeled``,
        ``sampled_out``). A malformed record raises ``InputError`` and is counted ``invalid``."""
        with self._lock:
            self._ordinal += 1
            self.counts["received"] += 1
            try:
                trace = validate_record(
                    RawRecord(Location(source, row=self._ordinal), record, self._ordinal),
                    self.config.fields,
                    require_query_id=True,
                )
                moment = self._event_time(trace)
                if len(trace.retrieved_ids) > MAX_RETRIEVED:
                    raise InputError(
                        trace.location,
                        self.config.fields.retrieved_ids,
                        f"{len(trace.retrieved_ids):,} IDs; the monitor takes at most "
                        f"{MAX_RETRIEVED:,} per event",
                    )
            except InputError:
                self.counts["invalid"] += 1
                raise
            now = self.clock()
            if not now - self.config.retention <= moment <= now + CLOCK_SKEW:
                # Outside every window: it could only pollute one (a future date) or be dropped
                # at the next tick (a past one), so it is counted and left out.
                self.counts["out_of_range"] += 1
                return "out_of_range"
            variant = self._bounded(
                VARIANT_FIELD, str(trace.attributes.get(VARIANT_FIELD) or DEFAULT_VARIANT)
            )
            segments = {
                name: self._bounded(name, segment_value(trace.attributes, name))
                for name in self.config.segment_by
            }
            if not self._sampled(trace.query_id, segments):
                self.counts["sampled_out"] += 1
                return "sampled_out"
            groups = self._groups(variant, segments)
            bucket = self._bucket_index(moment)
            labels = {"variant": variant, **segments}
            if trace.grades is None:
                known = self._labels.get(trace.query_id)
                if known is None:
                    if self._waiting >= MAX_WAITING:
                        # Memory stays bounded however much unlabeled traffic arrives: past the
                        # limit an unlabeled trace is counted at once instead of waiting.
                        self.counts["unlabeled"] += 1
                        return "unlabeled"
                    deadline = self.clock() + self.config.label_wait
                    self._pending.setdefault(trace.query_id, []).append(
                        _Pending(trace, groups, bucket, deadline, labels)
                    )
                    self._waiting += 1
                    return "waiting"
                trace = Trace(
                    trace.location, trace.query_id, trace.retrieved_ids, known, trace.attributes
                )
            self._enqueue(trace, groups, bucket, labels)
            return "scored"

    def label(self, query_id: str, grades: Mapping[str, float]) -> int:
        """Labels for a query arrived: score its waiting traces (returns how many) and remember the
        labels for its later traces."""
        with self._lock:
            clean = {str(doc): float(grade) for doc, grade in grades.items()}
            self._labels[str(query_id)] = clean
            self._labels.move_to_end(str(query_id))
            while len(self._labels) > LABELS_REMEMBERED:
                self._labels.popitem(last=False)
            waiting = self._pending.pop(str(query_id), [])
            self._waiting -= len(waiting)
            for item in waiting:
                trace = item.trace
                labeled = Trace(
                    trace.location, trace.query_id, trace.retrieved_ids, clean, trace.attributes
                )
                self._enqueue(labeled, item.groups, item.bucket, item.labels)
            return len(waiting)

    def count_unreadable(self) -> None:
        """An event that could not even be decoded (not JSON) still counts, as invalid."""
        with self._lock:
            self.counts["received"] += 1
            self.counts["invalid"] += 1

    def ingest_label_record(self, record: Any, *, source: str = "label") -> int:
        """A label record as ``rankgate eval`` reads labels: ``query_id`` with ``relevant_ids``
        and/or ``relevance_scores``."""
        with self._lock:
            self._ordinal += 1
            trace = validate_record(
                RawRecord(Location(source, row=self._ordinal), record, self._ordinal),
                self.config.fields,
                require_query_id=True,
                require_ranking=False,
            )
        if trace.grades is None:
            raise InputError(
                Location(source, row=self._ordinal),
                "relevance_scores",
                "a label needs relevant_ids or relevance_scores",
            )
        return self.label(trace.query_id, trace.grades)

    # --- time -----------------------------------------------------------------------------------

    def tick(self, now: datetime | None = None) -> list[Any]:
        """Expire traces whose labels did not come, score what is queued, and close the buckets
        that have ended; returns the alert state changes this caused."""
        with self._lock:
            now = now or self.clock()
            for query_id in list(self._pending):
                kept = [p for p in self._pending[query_id] if p.deadline > now]
                expired = len(self._pending[query_id]) - len(kept)
                self.counts["unlabeled"] += expired
                self._waiting -= expired
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
            self._closed_through = max(self._closed_through, settled - 1)
            self._forget_before(current - self._buckets_kept())
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

    # --- persistence ----------------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """Everything a restart needs, JSON-serialisable: buckets, counters, alert state."""
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
                        p.trace.query_id,
                        p.trace.retrieved_ids,
                        list(p.groups),
                        p.bucket,
                        p.deadline.isoformat(),
                        p.labels,
                    ]
                    for waiting in self._pending.values()
                    for p in waiting
                ],
                "values": {name: sorted(values) for name, values in self._values.items()},
            }

    def restore(self, state: Mapping[str, Any]) -> None:
        with self._lock:
            if state.get("version") != 1:
                raise ConfigError("monitor state was written by another rankgate version")
            self.counts.update(state.get("counts", {}))
            self._closed_through = int(state.get("closed_through", -1))
            self._buckets = {
                (int(b), str(m), str(g)): _Stats(int(c), float(mean), float(m2))
                for b, m, g, c, mean, m2 in state.get("buckets", [])
            }
            if self.alerts is not None and state.get("alerts") is not None:
                self.alerts = type(self.alerts).from_dict(self.alerts.rules, state["alerts"])
            self._values = {name: set(values) for name, values in state.get("values", {}).items()}
            self._pending = {}
            self._waiting = 0
            for query_id, ids, groups, bucket, deadline, labels in state.get("waiting", []):
                trace = Trace(Location("saved state"), str(query_id), list(ids), None, {})
                self._pending.setdefault(str(query_id), []).append(
                    _Pending(
                        trace,
                        tuple(groups),
                        int(bucket),
                        parse_time(deadline, "deadline"),
                        dict(labels),
                    )
                )
                self._waiting += 1

    # --- internals ------------------------------------------------------------------------------

    def _event_time(self, trace: Trace) -> datetime:
        stamp = trace.attributes.get("timestamp")
        if stamp is None:
            return self.clock()
        try:
            return parse_time(stamp, "timestamp")
        except Exception:
            raise InputError(
                trace.location, "timestamp", f"expected an ISO 8601 time, got {stamp!r}"
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

    def _enqueue(
        self, trace: Trace, groups: tuple[str, ...], bucket: int, labels: dict[str, str]
    ) -> None:
        self._queue.append((trace, groups, bucket, labels))
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
            trace = item[0]
            assert trace.grades is not None
            has_relevant = any(grade >= threshold for grade in trace.grades.values())
            if not has_relevant and self.config.empty_relevant == "skip":
                self.counts["no_relevant"] += 1
                continue
            builder.add(trace.retrieved_ids, trace.grades)
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
        for row, (_, groups, bucket, labels) in enumerate(kept):
            per_query = {name: float(column[row]) for name, column in values.items()}
            for name, value in per_query.items():
                for group in groups:
                    self._buckets.setdefault((bucket, name, group), _Stats()).add_many((value,))
            if self.on_score is not None:
                self.on_score(labels.get("variant", DEFAULT_VARIANT), labels, per_query)


def to_json(state: Mapping[str, Any]) -> str:
    return json.dumps(state, separators=(",", ":"))
