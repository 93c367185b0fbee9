"""Alert rules over windowed metric means: sustained thresholds and drift detectors.

The monitor scores sampled queries, groups the per-query values into time buckets (5 minutes, say)
per metric and group (``overall``, ``query_type=faq``, ``variant=b`` ...), and hands each closed
bucket to :class:`AlertEngine` as a :class:`BucketStats` (count, mean and Welford's ``m2``). The
engine is pure logic: no clock, no I/O. It turns buckets into alert states and returns the state
transitions, which the service delivers to its webhook and log.

States
------
Every (rule, group) pair is ``inactive``, ``pending`` or ``firing``. Transitions are reported as
:class:`AlertEvent` with ``state`` ``"pending"``, ``"firing"`` or ``"resolved"`` and the state they
left in ``previous``: a pending alert that goes away before firing is reported as ``resolved`` with
``previous == "pending"``, so a deliverer can drop those if it only pages on firing.

Quiet buckets (``count < min_queries``) carry too little evidence: they neither start, continue,
nor clear anything, and they never enter a baseline. Durations (``for``, ``clear_for``) add up the
lengths of the informative buckets only, so a quiet night neither fires nor resolves an alert.
A bucket that ends no later than the last bucket already seen for that rule and group is ignored,
so re-feeding buckets after a restore is harmless.

Configuration: the ``[alerts]`` table of ``rankgate.toml``
-----------------------------------------------------------
Each sub-table is one rule, named by its key. Keys every rule accepts:

``metric`` (required)
    A metric as ``rankgate metrics`` spells it (``"mrr"``, ``"precision@5"``).
``groups`` (default: every group seen)
    Restrict the rule to these groups, e.g. ``["overall", "variant=b"]``.
``min_queries`` (default 30)
    Buckets with fewer scored queries are quiet (see above).
``for`` (default ``"0m"``)
    How long the condition must hold before the alert fires; meanwhile it is pending. With
    ``"0m"`` it fires on the first bucket that meets the condition. Durations are a whole number and
    a unit: ``30s``, ``30m``, ``2h``, ``7d``, ``1w``.
``detector`` (default ``"threshold"``)
    ``"threshold"``, ``"cusum"`` or ``"ewma"``.

Threshold rules (``detector = "threshold"``)::

    [alerts.mrr_low]
    metric = "mrr"
    below = 0.6          # or: above = ... (exactly one of the two)
    for = "30m"
    clear = 0.62         # default: below + 0.02, or above - 0.02
    clear_for = "10m"    # default: one bucket

A bucket breaches when its mean is strictly past the threshold. The breach must last ``for`` to
fire; one informative bucket that does not breach ends a pending alert. A firing alert resolves
only once the mean is back at or past ``clear`` for ``clear_for``: the band between threshold and
``clear`` is the hysteresis that stops a mean hovering at the threshold from flapping. The default
margin, 0.02, is about one standard error of a 200-query MRR bucket (per-query SD about 0.3-0.45),
and is in the metric's own units because every rankgate metric lies in [0, 1].

Drift rules (``detector = "cusum"`` or ``"ewma"``) compare each bucket with a baseline learnt from
the trailing buckets of the same group::

    [alerts.mrr_drop]
    metric = "mrr"
    detector = "cusum"
    baseline = "7d"        # or baseline_buckets = 2016; default "7d"
    k = 0.5                # default 0.5: half the shift (in standard errors) tuned for
    h = 8.0                # default 8.0: decision interval
    clear_level = 4.0      # default h / 2

    [alerts.mrr_drop_ewma]
    metric = "mrr"
    detector = "ewma"
    lambda = 0.2           # default 0.2: weight of the newest bucket
    L = 3.8                # default 3.8: control limit in standard deviations of the EWMA
    clear_level = 1.9      # default L / 2

Both also take ``direction`` (``"down"``, the default, watches for drops; ``"up"`` for rises),
``min_baseline`` (default 24 buckets), ``baseline_lag`` (default 6 buckets) and
``overdispersion`` (default true).

The baseline: a bucket joins it ``baseline_lag`` buckets after it was observed, and only if the
alert was not pending or firing at any point in between; a drop therefore does not drag its own
baseline down, not even through the few buckets before the detector crossed its limit. The
baseline mean ``mu0`` is the count-weighted mean of the baseline buckets; the per-query variance
``sigma0**2`` is pooled within buckets (sum of ``m2`` over ``N - B``). Real traffic varies from
bucket to bucket more than independent queries would (the query mix changes through the day), so
with ``overdispersion`` the between-bucket variance ``tau0**2`` is estimated by the method of
moments (as in DerSimonian & Laird 1986) and each bucket's standard error is
``se = sqrt(sigma0**2 / count + tau0**2)``; without it, ``se = sigma0 / sqrt(count)``. On
independent queries ``tau0**2`` is near 0 and the two agree. Each informative bucket gives
``z = (mean - mu0) / se`` (negated for ``direction = "up"``). Until the baseline holds
``min_baseline`` buckets, a drift rule neither fires nor updates its statistic.

CUSUM (Page 1954, "Continuous inspection schemes", Biometrika 41:100-115), one-sided lower::

    S_t = max(0, S_{t-1} - z_t - k)      fires when S_t > h

While firing, S is held at most h, so that the time to resolve does not grow with the length of the
incident; the alert resolves when ``S <= clear_level`` and the bucket's ``z >= -k``. Once the mean
is back at the baseline, S falls by about k per bucket: about ``(h - clear_level) / k`` = 8 buckets
at the defaults. S is not reset on resolving, which gives a relapse the head start of Lucas &
Crosier's (1982) fast initial response. Average run lengths (simulated, independent normal z):
h = 8, k = 0.5 gives about 17,800 buckets between false alarms (62 days of 5-minute buckets, per
rule and group) and detects a 1-standard-error drop in about 16 buckets, a 2.5-SE drop in about 5.
The often quoted h = 5 gives only about 920 buckets (3 days) between false alarms.

EWMA (Roberts 1959, "Control chart tests based on geometric moving averages", Technometrics
1:239-250; limits as in Lucas & Saccucci 1990, Technometrics 32:1-12), one-sided lower::

    E_t = lambda * z_t + (1 - lambda) * E_{t-1},  E_0 = 0
    sd_t = sqrt(lambda / (2 - lambda) * (1 - (1 - lambda) ** (2 t)))
    fires when E_t < -L * sd_t;  resolves when E_t >= -clear_level * sd_t

t counts informative buckets since the baseline became ready. lambda = 0.2, L = 3.8 gives about
16,900 buckets between false alarms, a 1-SE drop detected in about 20 buckets and a 2.5-SE drop in
about 3 (simulated).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from rankgate.errors import ConfigError, InputError, SpecError, UsageError
from rankgate.spec import parse_metric
from rankgate.stale import parse_age
from rankgate.times import format_time

__all__ = [
    "AlertEngine",
    "AlertEvent",
    "AlertRule",
    "AlertState",
    "BucketStats",
    "CusumRule",
    "EwmaRule",
    "ThresholdRule",
    "parse_rules",
]

INACTIVE = "inactive"
PENDING = "pending"
FIRING = "firing"
RESOLVED = "resolved"

DEFAULT_MIN_QUERIES = 30
DEFAULT_CLEAR_MARGIN = 0.02
DEFAULT_BASELINE = timedelta(days=7)
DEFAULT_MIN_BASELINE = 24
DEFAULT_BASELINE_LAG = 6
DEFAULT_CUSUM_K = 0.5
DEFAULT_CUSUM_H = 8.0
DEFAULT_EWMA_LAMBDA = 0.2
DEFAULT_EWMA_L = 3.8
STATE_VERSION = 1
# A baseline whose values never vary would make every difference infinitely significant; this floor
# keeps z finite (and JSON-serialisable) while still treating any real change as a large one.
_MIN_STANDARD_ERROR = 1e-9


@dataclass(frozen=True, slots=True)
class BucketStats:
    """One closed time bucket of per-query values of one metric in one group.

    ``m2`` is the sum of squared deviations from the bucket mean (Welford), so the per-query sample
    variance is ``m2 / (count - 1)``. Times without a zone are taken as UTC. An empty bucket may
    carry any ``mean`` (NaN is usual).
    """

    metric: str
    group: str
    start: datetime
    end: datetime
    count: int
    mean: float
    m2: float

    def __post_init__(self) -> None:
        for name in ("start", "end"):
            moment: datetime = getattr(self, name)
            if moment.tzinfo is None:
                object.__setattr__(self, name, moment.replace(tzinfo=UTC))
        where = f"bucket {self.metric} {self.group}"
        if self.end <= self.start:
            raise UsageError(f"{where}: end {self.end} is not after start {self.start}")
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 0:
            raise UsageError(f"{where}: count must be an integer >= 0, got {self.count!r}")
        if self.count > 0 and not math.isfinite(self.mean):
            raise UsageError(f"{where}: mean must be finite, got {self.mean!r}")
        if self.count > 0 and not (math.isfinite(self.m2) and self.m2 >= 0):
            raise UsageError(f"{where}: m2 must be a finite number >= 0, got {self.m2!r}")


@dataclass(frozen=True, kw_only=True)
class AlertRule:
    """What every rule has: a name, the metric it watches, where it applies and its sustain time."""

    name: str
    metric: str
    groups: tuple[str, ...] | None = None
    min_queries: int = DEFAULT_MIN_QUERIES
    sustain: timedelta = timedelta(0)

    def applies_to(self, group: str) -> bool:
        """Whether the rule watches ``group`` (every group unless ``groups`` restricts it)."""
        return self.groups is None or group in self.groups


@dataclass(frozen=True, kw_only=True)
class ThresholdRule(AlertRule):
    """Fires when the bucket mean stays past ``threshold`` for ``sustain``; clears past ``clear``."""

    direction: Literal["below", "above"]
    threshold: float
    clear: float
    clear_for: timedelta | None = None

    def breaches(self, mean: float) -> bool:
        return mean < self.threshold if self.direction == "below" else mean > self.threshold

    def clears(self, mean: float) -> bool:
        return mean >= self.clear if self.direction == "below" else mean <= self.clear


@dataclass(frozen=True, kw_only=True)
class DriftRule(AlertRule):
    """Shared by the detectors that compare each bucket with a learnt baseline."""

    direction: Literal["down", "up"] = "down"
    baseline: timedelta | None = DEFAULT_BASELINE
    baseline_buckets: int | None = None
    min_baseline: int = DEFAULT_MIN_BASELINE
    baseline_lag: int = DEFAULT_BASELINE_LAG
    overdispersion: bool = True
    clear_level: float


@dataclass(frozen=True, kw_only=True)
class CusumRule(DriftRule):
    """One-sided CUSUM on standardised bucket means (Page 1954)."""

    k: float = DEFAULT_CUSUM_K
    h: float = DEFAULT_CUSUM_H


@dataclass(frozen=True, kw_only=True)
class EwmaRule(DriftRule):
    """One-sided EWMA chart on standardised bucket means (Roberts 1959)."""

    lam: float = DEFAULT_EWMA_LAMBDA
    limit: float = DEFAULT_EWMA_L


@dataclass(frozen=True, slots=True)
class AlertEvent:
    """A state transition. ``value`` is the bucket mean; ``threshold`` is the rule's threshold, or
    the baseline mean for a drift rule; ``statistic`` is the CUSUM sum or EWMA (None for
    thresholds)."""

    rule: str
    metric: str
    group: str
    state: str
    previous: str
    at: datetime
    value: float | None
    threshold: float | None
    statistic: float | None
    message: str


@dataclass(frozen=True, slots=True)
class AlertState:
    """The current state of one rule in one group, for gauges and the status page."""

    rule: str
    metric: str
    group: str
    state: str
    since: datetime | None
    value: float | None
    statistic: float | None
    baseline_mean: float | None
    baseline_buckets: int


# --------------------------------------------------------------------------------------- config

_COMMON_KEYS = frozenset({"metric", "groups", "min_queries", "for", "detector"})
_THRESHOLD_KEYS = _COMMON_KEYS | {"below", "above", "clear", "clear_for"}
_DRIFT_KEYS = _COMMON_KEYS | {
    "direction",
    "baseline",
    "baseline_buckets",
    "min_baseline",
    "baseline_lag",
    "overdispersion",
    "clear_level",
}
_KEYS = {
    "threshold": _THRESHOLD_KEYS,
    "cusum": _DRIFT_KEYS | {"k", "h"},
    "ewma": _DRIFT_KEYS | {"lambda", "L"},
}


class _Table:
    """One rule's table, read key by key so that every error names the rule and the key."""

    def __init__(self, name: str, data: Mapping[str, Any]) -> None:
        self.name = name
        self.data = data

    def fail(self, key: str | None, problem: str) -> ConfigError:
        where = f"[alerts.{self.name}]" + (f" {key}" if key else "")
        return ConfigError(f"{where}: {problem}")

    def number(self, key: str, default: float) -> float:
        found = self.optional_number(key)
        return default if found is None else found

    def optional_number(self, key: str) -> float | None:
        value = self.data.get(key)
        if value is None:
            return None
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            raise self.fail(key, f"must be a number, got {value!r}")
        return float(value)

    def integer(self, key: str, default: int, minimum: int) -> int:
        found = self.optional_integer(key, minimum)
        return default if found is None else found

    def optional_integer(self, key: str, minimum: int) -> int | None:
        value = self.data.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.fail(key, f"must be an integer >= {minimum}, got {value!r}")
        return value

    def duration(self, key: str, allow_zero: bool) -> timedelta | None:
        value = self.data.get(key)
        if value is None:
            return None
        try:
            if not isinstance(value, str):
                raise ConfigError("not a string")
            span = parse_age(value)
        except ConfigError:
            raise self.fail(
                key, f"must be a duration such as '30m', '2h' or '7d', got {value!r}"
            ) from None
        if not allow_zero and span <= timedelta(0):
            raise self.fail(key, f"must be longer than 0, got {value!r}")
        return span

    def choice(self, key: str, choices: tuple[str, ...], default: str) -> str:
        value = self.data.get(key, default)
        if value not in choices:
            raise self.fail(key, f"must be one of {', '.join(choices)}, got {value!r}")
        return str(value)


def parse_rules(config: Mapping[str, Any]) -> list[AlertRule]:
    """Rules from the ``[alerts]`` table (see the module docstring for the keys and defaults).

    Raises:
        ConfigError: on the first bad rule, naming the rule and the key.
    """
    if not isinstance(config, Mapping):
        raise ConfigError(f"[alerts] must be a table of rules, got {config!r}")
    rules: list[AlertRule] = []
    for name, data in config.items():
        if not isinstance(data, Mapping):
            raise ConfigError(
                f"[alerts] {name}: each rule must be a table such as [alerts.{name}], got {data!r}"
            )
        rules.append(_parse_rule(_Table(str(name), data)))
    return rules


def _parse_rule(table: _Table) -> AlertRule:
    data = table.data
    detector = table.choice("detector", tuple(_KEYS), "threshold")
    unknown = sorted(set(data) - _KEYS[detector])
    if unknown:
        known = ", ".join(sorted(_KEYS[detector]))
        raise table.fail(unknown[0], f"unknown key for a {detector} rule (known: {known})")
    metric = data.get("metric")
    if metric is None:
        raise table.fail("metric", 'is required, e.g. metric = "mrr"')
    if not isinstance(metric, str):
        raise table.fail("metric", f"must be a metric name such as 'mrr', got {metric!r}")
    try:
        metric = str(parse_metric(metric))
    except SpecError as problem:
        raise table.fail("metric", str(problem)) from None
    groups = data.get("groups")
    if groups is not None and (
        not isinstance(groups, list)
        or not groups
        or not all(isinstance(group, str) and group for group in groups)
    ):
        raise table.fail("groups", f"must be a non-empty list of group names, got {groups!r}")
    common: dict[str, Any] = {
        "name": table.name,
        "metric": metric,
        "groups": tuple(groups) if groups is not None else None,
        "min_queries": table.integer("min_queries", DEFAULT_MIN_QUERIES, 1),
        "sustain": table.duration("for", allow_zero=True) or timedelta(0),
    }
    if detector == "threshold":
        return _threshold_rule(table, common)
    drift = _drift_common(table)
    if detector == "cusum":
        k = table.number("k", DEFAULT_CUSUM_K)
        h = table.number("h", DEFAULT_CUSUM_H)
        if k < 0:
            raise table.fail("k", f"must be >= 0, got {k!r}")
        if h <= 0:
            raise table.fail("h", f"must be > 0, got {h!r}")
        clear_level = table.number("clear_level", h / 2)
        if not 0 <= clear_level < h:
            raise table.fail(
                "clear_level", f"must be >= 0 and below h ({h:g}), got {clear_level!r}"
            )
        return CusumRule(**common, **drift, k=k, h=h, clear_level=clear_level)
    lam = table.number("lambda", DEFAULT_EWMA_LAMBDA)
    limit = table.number("L", DEFAULT_EWMA_L)
    if not 0 < lam <= 1:
        raise table.fail("lambda", f"must be in (0, 1], got {lam!r}")
    if limit <= 0:
        raise table.fail("L", f"must be > 0, got {limit!r}")
    clear_level = table.number("clear_level", limit / 2)
    if not -limit < clear_level < limit:
        raise table.fail(
            "clear_level", f"must be between -L and L ({limit:g}), got {clear_level!r}"
        )
    return EwmaRule(**common, **drift, lam=lam, limit=limit, clear_level=clear_level)


def _threshold_rule(table: _Table, common: dict[str, Any]) -> ThresholdRule:
    below = table.optional_number("below")
    above = table.optional_number("above")
    if below is None and above is None:
        raise table.fail(
            "below",
            'set below or above (a threshold), or detector = "cusum" or "ewma" for a drop',
        )
    if below is not None and above is not None:
        raise table.fail("above", "set below or above, not both")
    direction: Literal["below", "above"] = "below" if below is not None else "above"
    threshold = below if below is not None else above
    if threshold is None:  # pragma: no cover - ruled out above; narrows the type
        raise table.fail("below", "set below or above")
    margin = DEFAULT_CLEAR_MARGIN if direction == "below" else -DEFAULT_CLEAR_MARGIN
    clear = table.number("clear", threshold + margin)
    if (direction == "below" and clear < threshold) or (direction == "above" and clear > threshold):
        side = "at or above" if direction == "below" else "at or below"
        raise table.fail("clear", f"must be {side} the threshold {threshold:g}, got {clear!r}")
    return ThresholdRule(
        **common,
        direction=direction,
        threshold=threshold,
        clear=clear,
        clear_for=table.duration("clear_for", allow_zero=False),
    )


def _drift_common(table: _Table) -> dict[str, Any]:
    if "baseline" in table.data and "baseline_buckets" in table.data:
        raise table.fail("baseline_buckets", "set baseline or baseline_buckets, not both")
    min_baseline = table.integer("min_baseline", DEFAULT_MIN_BASELINE, 2)
    baseline_buckets = table.optional_integer("baseline_buckets", 2)
    if baseline_buckets is not None and baseline_buckets < min_baseline:
        raise table.fail(
            "baseline_buckets",
            f"{baseline_buckets} is below min_baseline ({min_baseline}); the rule could never start",
        )
    overdispersion = table.data.get("overdispersion", True)
    if not isinstance(overdispersion, bool):
        raise table.fail("overdispersion", f"must be true or false, got {overdispersion!r}")
    return {
        "direction": table.choice("direction", ("down", "up"), "down"),
        "baseline": None
        if baseline_buckets is not None
        else table.duration("baseline", allow_zero=False) or DEFAULT_BASELINE,
        "baseline_buckets": baseline_buckets,
        "min_baseline": min_baseline,
        "baseline_lag": table.integer("baseline_lag", DEFAULT_BASELINE_LAG, 0),
        "overdispersion": overdispersion,
    }


# --------------------------------------------------------------------------------------- engine


@dataclass(slots=True)
class _Window:
    """The sufficient statistics of one informative bucket, as the baseline keeps them."""

    start: datetime
    end: datetime
    count: int
    mean: float
    m2: float


@dataclass(slots=True)
class _Baseline:
    mean: float
    variance: float  # sigma0**2, per query, pooled within buckets
    between_buckets: float  # tau0**2


@dataclass(slots=True)
class _Track:
    """Mutable state of one rule in one group."""

    status: str = INACTIVE
    since: datetime | None = None
    last_end: datetime | None = None
    last_value: float | None = None
    run: timedelta = timedelta(0)  # time the condition has held while pending (or firing)
    clear_run: timedelta = timedelta(0)  # time the clear condition has held while firing
    statistic: float = 0.0
    steps: int = 0
    baseline: deque[_Window] = field(default_factory=deque)
    probation: deque[tuple[_Window, bool]] = field(default_factory=deque)


class AlertEngine:
    """Alert states for a set of rules, fed one closed bucket at a time.

    Example:
        >>> from datetime import datetime, timedelta, UTC
        >>> rules = parse_rules({"low": {"metric": "mrr", "below": 0.6}})
        >>> engine = AlertEngine(rules)
        >>> t = datetime(2026, 12, 1, tzinfo=UTC)
        >>> bucket = BucketStats("mrr", "overall", t, t + timedelta(minutes=5), 200, 0.5, 40.0)
        >>> [event.message for event in engine.observe(bucket)]
        ['mrr overall 0.500 < 0.6 for 5m (firing)']
    """

    def __init__(self, rules: Sequence[AlertRule]) -> None:
        names = [rule.name for rule in rules]
        duplicated = sorted({name for name in names if names.count(name) > 1})
        if duplicated:
            raise ConfigError(f"[alerts.{duplicated[0]}]: rule defined twice")
        self._rules = tuple(rules)
        self._tracks: dict[tuple[str, str], _Track] = {}
        self._metric_names: dict[str, str] = {}

    @property
    def rules(self) -> tuple[AlertRule, ...]:
        return self._rules

    def observe(self, stats: BucketStats) -> list[AlertEvent]:
        """Feed one closed bucket (in time order); return the transitions it causes."""
        metric = self._canonical(stats.metric)
        events: list[AlertEvent] = []
        for rule in self._rules:
            if rule.metric != metric or not rule.applies_to(stats.group):
                continue
            track = self._tracks.setdefault((rule.name, stats.group), _Track())
            if track.last_end is not None and stats.end <= track.last_end:
                continue  # already seen: replays after a restore change nothing
            track.last_end = stats.end
            if stats.count < rule.min_queries:
                continue  # quiet: no evidence either way
            track.last_value = stats.mean
            if isinstance(rule, ThresholdRule):
                event = _step_threshold(rule, track, stats)
            elif isinstance(rule, CusumRule | EwmaRule):
                event = _step_drift(rule, track, stats)
            else:  # pragma: no cover - parse_rules only makes the kinds above
                raise UsageError(f"rule {rule.name}: unknown rule kind {type(rule).__name__}")
            if event is not None:
                events.append(event)
        return events

    def states(self) -> list[AlertState]:
        """The current state of every (rule, group) seen so far, in rule order, then by group."""
        order = {rule.name: index for index, rule in enumerate(self._rules)}
        by_name = {rule.name: rule for rule in self._rules}
        result: list[AlertState] = []
        for (name, group), track in sorted(
            self._tracks.items(), key=lambda item: (order[item[0][0]], item[0][1])
        ):
            rule = by_name[name]
            baseline = _estimate(rule, track) if isinstance(rule, DriftRule) else None
            result.append(
                AlertState(
                    rule=name,
                    metric=rule.metric,
                    group=group,
                    state=track.status,
                    since=track.since,
                    value=track.last_value,
                    statistic=track.statistic if isinstance(rule, DriftRule) else None,
                    baseline_mean=baseline.mean if baseline else None,
                    baseline_buckets=len(track.baseline),
                )
            )
        return result

    def to_dict(self) -> dict[str, Any]:
        """The engine's state as JSON-serialisable data, for :meth:`from_dict` after a restart."""
        by_name = {rule.name: rule for rule in self._rules}
        return {
            "version": STATE_VERSION,
            "tracks": [
                {
                    "rule": name,
                    "fingerprint": repr(by_name[name]),
                    "group": group,
                    "status": track.status,
                    "since": _time_text(track.since),
                    "last_end": _time_text(track.last_end),
                    "last_value": track.last_value,
                    "run_us": track.run // _MICROSECOND,
                    "clear_run_us": track.clear_run // _MICROSECOND,
                    "statistic": track.statistic,
                    "steps": track.steps,
                    "baseline": [_window_row(window) for window in track.baseline],
                    "probation": [
                        [*_window_row(window), tainted] for window, tainted in track.probation
                    ],
                }
                for (name, group), track in self._tracks.items()
            ],
        }

    @classmethod
    def from_dict(cls, rules: Sequence[AlertRule], data: Mapping[str, Any]) -> AlertEngine:
        """An engine for ``rules`` carrying on from :meth:`to_dict` output.

        State saved for a rule that no longer exists, or whose definition has changed, is dropped:
        that rule starts afresh, as it would on first deploy.

        Raises:
            InputError: the data is not what :meth:`to_dict` writes.
        """
        engine = cls(rules)
        by_name = {rule.name: rule for rule in rules}
        try:
            if data["version"] != STATE_VERSION:
                raise InputError(
                    "alert state", "version", f"expected {STATE_VERSION}, got {data['version']!r}"
                )
            for row in data["tracks"]:
                rule = by_name.get(row["rule"])
                if rule is None or repr(rule) != row["fingerprint"]:
                    continue
                if row["status"] not in (INACTIVE, PENDING, FIRING):
                    raise ValueError(f"unknown status {row['status']!r}")
                engine._tracks[(rule.name, str(row["group"]))] = _Track(
                    status=row["status"],
                    since=_parse_time_text(row["since"]),
                    last_end=_parse_time_text(row["last_end"]),
                    last_value=None if row["last_value"] is None else float(row["last_value"]),
                    run=int(row["run_us"]) * _MICROSECOND,
                    clear_run=int(row["clear_run_us"]) * _MICROSECOND,
                    statistic=float(row["statistic"]),
                    steps=int(row["steps"]),
                    baseline=deque(_window_from_row(item) for item in row["baseline"]),
                    probation=deque(
                        (_window_from_row(item[:5]), bool(item[5])) for item in row["probation"]
                    ),
                )
        except InputError:
            raise
        except (KeyError, TypeError, ValueError, IndexError) as problem:
            raise InputError(
                "alert state", None, f"not state written by AlertEngine.to_dict ({problem})"
            ) from None
        return engine

    def _canonical(self, metric: str) -> str:
        """The metric's canonical spelling, so that ``MRR`` in a bucket meets ``mrr`` in a rule."""
        known = self._metric_names.get(metric)
        if known is None:
            try:
                known = str(parse_metric(metric))
            except SpecError:
                known = metric
            self._metric_names[metric] = known
        return known


_MICROSECOND = timedelta(microseconds=1)


def _step_threshold(rule: ThresholdRule, track: _Track, stats: BucketStats) -> AlertEvent | None:
    span = stats.end - stats.start
    if track.status == FIRING:
        if not rule.clears(stats.mean):
            track.clear_run = timedelta(0)
            return None
        track.clear_run += span
        if rule.clear_for is not None and track.clear_run < rule.clear_for:
            return None
        back = ">=" if rule.direction == "below" else "<="
        message = f"{stats.mean:.3f} {back} clear {rule.clear:g} for {_span_text(track.clear_run)}"
        return _transition(rule, track, stats, INACTIVE, rule.threshold, None, message)
    if not rule.breaches(stats.mean):
        if track.status == PENDING:
            message = f"{stats.mean:.3f} back past {rule.threshold:g} before firing"
            return _transition(rule, track, stats, INACTIVE, rule.threshold, None, message)
        return None
    track.run = track.run + span if track.status == PENDING else span
    target = FIRING if track.run >= rule.sustain else PENDING
    if target == track.status:
        return None
    op = "<" if rule.direction == "below" else ">"
    message = f"{stats.mean:.3f} {op} {rule.threshold:g} for {_span_text(track.run)}"
    return _transition(rule, track, stats, target, rule.threshold, None, message)


def _step_drift(rule: CusumRule | EwmaRule, track: _Track, stats: BucketStats) -> AlertEvent | None:
    baseline = _estimate(rule, track)
    event: AlertEvent | None = None
    if baseline is not None:
        se = math.sqrt(baseline.variance / stats.count + baseline.between_buckets)
        z = (stats.mean - baseline.mean) / max(se, _MIN_STANDARD_ERROR)
        if rule.direction == "up":
            z = -z
        if isinstance(rule, CusumRule):
            track.statistic = max(0.0, track.statistic - z - rule.k)
            signal = track.statistic > rule.h
            if track.status == FIRING:
                track.statistic = min(track.statistic, rule.h)
            recovered = track.statistic <= rule.clear_level and z >= -rule.k
            detail = f"z {z:+.2f}, cusum {track.statistic:.2f}, h {rule.h:g}"
        else:
            track.steps += 1
            track.statistic = rule.lam * z + (1 - rule.lam) * track.statistic
            spread = math.sqrt(
                rule.lam / (2 - rule.lam) * (1 - (1 - rule.lam) ** (2 * track.steps))
            )
            signal = track.statistic < -rule.limit * spread
            recovered = track.statistic >= -rule.clear_level * spread
            detail = f"z {z:+.2f}, ewma {track.statistic / spread:+.2f} sd, L {rule.limit:g}"
        message = f"{stats.mean:.3f} vs baseline {baseline.mean:.3f} ({detail})"
        event = _drift_transition(rule, track, stats, signal, recovered, baseline.mean, message)
    _admit(rule, track, stats)
    return event


def _drift_transition(
    rule: CusumRule | EwmaRule,
    track: _Track,
    stats: BucketStats,
    signal: bool,
    recovered: bool,
    mu0: float,
    message: str,
) -> AlertEvent | None:
    if track.status == FIRING:
        if recovered:
            return _transition(rule, track, stats, INACTIVE, mu0, track.statistic, message)
        return None
    if not signal:
        if track.status == PENDING:
            return _transition(rule, track, stats, INACTIVE, mu0, track.statistic, message)
        return None
    span = stats.end - stats.start
    track.run = track.run + span if track.status == PENDING else span
    target = FIRING if track.run >= rule.sustain else PENDING
    if target == track.status:
        return None
    if target == FIRING and isinstance(rule, CusumRule):
        track.statistic = min(track.statistic, rule.h)
    # The buckets that led up to the signal belong to the drop, not to the baseline.
    track.probation = deque((window, True) for window, _ in track.probation)
    return _transition(rule, track, stats, target, mu0, track.statistic, message)


def _admit(rule: DriftRule, track: _Track, stats: BucketStats) -> None:
    """Queue the bucket for the baseline; admit those that left probation untainted; trim."""
    window = _Window(stats.start, stats.end, stats.count, stats.mean, stats.m2)
    track.probation.append((window, track.status != INACTIVE))
    while len(track.probation) > rule.baseline_lag:
        queued, tainted = track.probation.popleft()
        if not tainted:
            track.baseline.append(queued)
    if rule.baseline_buckets is not None:
        while len(track.baseline) > rule.baseline_buckets:
            track.baseline.popleft()
    elif rule.baseline is not None:
        oldest = stats.end - rule.baseline
        while track.baseline and track.baseline[0].start < oldest:
            track.baseline.popleft()


def _estimate(rule: DriftRule, track: _Track) -> _Baseline | None:
    """Baseline mean, pooled within-bucket variance and between-bucket variance, once ready."""
    windows = track.baseline
    buckets = len(windows)
    if buckets < rule.min_baseline:
        return None
    total = sum(window.count for window in windows)
    mu0 = sum(window.count * window.mean for window in windows) / total
    within = sum(window.m2 for window in windows) / max(total - buckets, 1)
    between = 0.0
    if rule.overdispersion:
        excess = sum((window.mean - mu0) ** 2 - within / window.count for window in windows)
        between = max(0.0, excess / (buckets - 1))
    return _Baseline(mean=mu0, variance=within, between_buckets=between)


def _transition(
    rule: AlertRule,
    track: _Track,
    stats: BucketStats,
    target: str,
    threshold: float | None,
    statistic: float | None,
    detail: str,
) -> AlertEvent:
    previous = track.status
    state = RESOLVED if target == INACTIVE else target
    track.status = target
    track.since = stats.end
    if target == INACTIVE:
        track.run = timedelta(0)
    track.clear_run = timedelta(0)
    return AlertEvent(
        rule=rule.name,
        metric=rule.metric,
        group=stats.group,
        state=state,
        previous=previous,
        at=stats.end,
        value=stats.mean,
        threshold=threshold,
        statistic=statistic,
        message=f"{rule.metric} {stats.group} {detail} ({state})",
    )


def _span_text(span: timedelta) -> str:
    """``35m``, ``2h5m``, ``1d2h``, ``30s``: short durations for one-line messages."""
    seconds = int(span.total_seconds())
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        amount, seconds = divmod(seconds, size)
        if amount:
            parts.append(f"{amount}{unit}")
    return "".join(parts) or "0s"


def _time_text(moment: datetime | None) -> str | None:
    return None if moment is None else format_time(moment)


def _parse_time_text(text: str | None) -> datetime | None:
    return None if text is None else datetime.fromisoformat(text.replace("Z", "+00:00"))


def _window_row(window: _Window) -> list[Any]:
    return [
        format_time(window.start),
        format_time(window.end),
        window.count,
        window.mean,
        window.m2,
    ]


def _window_from_row(row: Sequence[Any]) -> _Window:
    start, end, count, mean, m2 = row
    return _Window(
        start=datetime.fromisoformat(str(start).replace("Z", "+00:00")),
        end=datetime.fromisoformat(str(end).replace("Z", "+00:00")),
        count=int(count),
        mean=float(mean),
        m2=float(m2),
    )
