"""Gates: a threshold on a metric's mean, and the verdict of checking it.

A gate is written ``ndcg@10>=0.7`` on the command line; in ``rankgate.toml`` it is a ``[gates]``
entry, ``"ndcg@10" = 0.7`` (meaning ``>=``) or ``"ndcg@10" = ">= 0.7"``. The margin of a verdict is
always value - threshold, so it reads the same way whatever the operator.

What a gate compares with its threshold (``gate_on``): the mean, a bound of the mean's 95%
interval, or the ``pessimistic`` mean, the metric with every unjudged retrieved document counted
non-relevant (``unjudged=nonrelevant``, which ``evaluate`` computes beside each metric). For a
metric under the default policy that is its mean; for ``ndcg(unjudged=condensed)@10`` it is the
value the labels guarantee, for teams that want one. There is no ``optimistic`` choice: a gate
that passes only if every unjudged document were relevant guarantees nothing (gate on
``ndcg(unjudged=relevant)@10`` by name to see that number checked).
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rankgate.errors import ConfigError, SpecError
from rankgate.segments import Group, SegmentKey
from rankgate.spec import MAX_SPEC_LENGTH, MetricSpec, parse_metric, unjudged_variants

__all__ = [
    "CoverageOutcome",
    "Gate",
    "GateOutcome",
    "GatePolicy",
    "SegmentRule",
    "check_gates",
    "decide",
    "gates_from_table",
    "make_gate",
    "merge_gates",
    "parse_gate",
    "pessimistic_spec",
]

OPERATORS: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge,
    ">": operator.gt,
    "<=": operator.le,
    "<": operator.lt,
}
# A threshold cannot start with "=", so "ndcg@10>=" is a parse error, not a threshold of "=".
_GATE = re.compile(r"^(?P<metric>.+?)\s*(?P<op>>=|<=|>|<)\s*(?P<threshold>[^=\s]\S*)$")
# A metric spec (at most MAX_SPEC_LENGTH characters), an operator and a number.
MAX_GATE_LENGTH = MAX_SPEC_LENGTH + 100
_CONDITION = re.compile(r"^\s*(?P<op>>=|<=|>|<)?\s*(?P<threshold>[^=\s]\S*)\s*$")


@dataclass(frozen=True, slots=True)
class Gate:
    """A pass condition on the mean of one metric over the scored queries."""

    metric: MetricSpec
    op: str
    threshold: float

    def __str__(self) -> str:
        return f"{self.metric}{self.op}{self.threshold:g}"


GATE_ON = ("mean", "lower_bound", "upper_bound", "pessimistic")
#: The ``gate_on`` choices that read the bootstrap interval (and so need resamples).
INTERVAL_BOUNDS = ("lower_bound", "upper_bound")
STATUSES = ("pass", "fail", "insufficient")
DEFAULT_MIN_QUERIES = 30


@dataclass(frozen=True, slots=True)
class GateOutcome:
    """How a gate fared on one group of queries (``segment`` None: all of them).

    ``value`` is the statistic compared with the threshold: the mean, a bound of its 95% interval
    or the pessimistic mean (``statistic``; see the module docstring). It is None when no query was scored (the gate then fails). ``status`` is
    ``insufficient`` when a segment has fewer scored queries than its ``min_queries``: that is
    neither a pass nor a fail, unless segments are strict.
    """

    gate: Gate
    value: float | None
    passed: bool
    segment: SegmentKey | None = None
    status: str = "pass"
    statistic: str = "mean"
    mean: float | None = None
    interval: tuple[float, float] | None = None
    scored: int = 0

    @property
    def margin(self) -> float | None:
        return None if self.value is None else self.value - self.gate.threshold


@dataclass(frozen=True, slots=True)
class CoverageOutcome:
    """An annotation-coverage minimum checked on one group. A miss here means the evaluation sees
    too little labeled traffic to be trusted, not that retrieval got worse."""

    segment: SegmentKey | None
    coverage: float | None
    minimum: float
    passed: bool


@dataclass(frozen=True, slots=True)
class SegmentRule:
    """Overrides for one segment: gates replacing the defaults on the same metric and operator
    (or adding to them), and its own ``min_queries``, ``min_coverage`` and ``gate_on``."""

    key: SegmentKey
    gates: tuple[Gate, ...] = ()
    min_queries: int | None = None
    min_coverage: float | None = None
    gate_on: str | None = None
    min_detectable: float | None = None


@dataclass(frozen=True, slots=True)
class GatePolicy:
    """How gates decide: on the mean or an interval bound, how many queries a segment needs,
    whether too few is a failure, minimum coverage, and per-segment overrides.

    ``min_detectable`` (compare only): a cell that is not flagged passes only when the comparison
    had 80% power to detect a change of this size (its minimum detectable effect, in the metric's
    units, is at most this), so that an under-powered "no regression" fails instead of passing
    as safe; None (the default) asks nothing. A segment's rule may set its own.
    """

    gate_on: str = "mean"
    min_queries: int = DEFAULT_MIN_QUERIES
    strict_segments: bool = False
    min_coverage: float | None = None
    rules: tuple[SegmentRule, ...] = ()
    min_detectable: float | None = None

    def __post_init__(self) -> None:
        _check_policy_values(
            self.gate_on, self.min_queries, self.min_coverage, "policy", self.min_detectable
        )
        for rule in self.rules:
            _check_policy_values(
                rule.gate_on,
                rule.min_queries,
                rule.min_coverage,
                str(rule.key),
                rule.min_detectable,
            )

    def rule(self, key: SegmentKey) -> SegmentRule | None:
        return next((rule for rule in self.rules if rule.key == key), None)

    def detectable_for(self, key: SegmentKey | None) -> float | None:
        """The ``min_detectable`` in force on a group: its segment's own, else the policy's."""
        rule = None if key is None else self.rule(key)
        if rule is not None and rule.min_detectable is not None:
            return rule.min_detectable
        return self.min_detectable


def _check_policy_values(
    gate_on: str | None,
    min_queries: int | None,
    min_coverage: float | None,
    where: str,
    min_detectable: float | None = None,
) -> None:
    if gate_on is not None and gate_on not in GATE_ON:
        raise ConfigError(f"{where}: gate_on must be one of {', '.join(GATE_ON)}, got {gate_on!r}")
    if min_queries is not None and (
        isinstance(min_queries, bool) or not isinstance(min_queries, int) or min_queries < 1
    ):
        raise ConfigError(f"{where}: min_queries must be a whole number >= 1, got {min_queries!r}")
    if min_coverage is not None and (
        isinstance(min_coverage, bool)
        or not isinstance(min_coverage, (int, float))
        or not 0.0 <= min_coverage <= 1.0
    ):
        raise ConfigError(f"{where}: min_coverage must be a number in [0, 1], got {min_coverage!r}")
    if min_detectable is not None and (
        isinstance(min_detectable, bool)
        or not isinstance(min_detectable, (int, float))
        or not 0.0 < min_detectable < math.inf
    ):
        raise ConfigError(
            f"{where}: min_detectable must be a number > 0 (a change in the metric's units), "
            f"got {min_detectable!r}"
        )


def parse_gate(text: str) -> Gate:
    """Parse ``metric op threshold``, e.g. ``recall@20>=0.85``; anything else is a ``SpecError``."""
    if not isinstance(text, str):
        raise SpecError(f"a gate must be text such as 'ndcg@10>=0.7', got {text!r}")
    if len(text) > MAX_GATE_LENGTH:
        raise SpecError(
            f"gate {text[:40]!r}... is {len(text):,} characters long; at most {MAX_GATE_LENGTH}"
        )
    match = _GATE.match(text.strip())
    if not match:
        raise SpecError(f"cannot parse gate {text!r}: expected e.g. 'ndcg@10>=0.7'")
    return _make_gate(
        parse_metric(match.group("metric")), match.group("op"), match.group("threshold"), text
    )


def gates_from_table(table: Mapping[str, Any], where: str) -> list[Gate]:
    """Gates from a config table: ``{"ndcg@10": 0.7, "mrr": ">= 0.6"}``; ``where`` names the table."""
    gates = []
    for metric_text, condition in table.items():
        context = f"{where}: {metric_text!r}"
        metric = _metric_in(metric_text, context)
        if isinstance(condition, bool) or not isinstance(condition, (int, float, str)):
            raise SpecError(f"{context}: expected a threshold such as 0.7 or '>= 0.7'")
        if isinstance(condition, str):
            match = _CONDITION.match(condition)
            if not match:
                raise SpecError(f"{context}: cannot parse condition {condition!r}")
            gates.append(
                _make_gate(metric, match.group("op") or ">=", match.group("threshold"), context)
            )
        else:
            gates.append(_make_gate(metric, ">=", str(condition), context))
    return gates


def merge_gates(base: Iterable[Gate], overrides: Iterable[Gate]) -> list[Gate]:
    """``base`` with every gate on the same metric and operator replaced by the override."""
    merged = {(gate.metric, gate.op): gate for gate in base}
    for gate in overrides:
        merged[(gate.metric, gate.op)] = gate
    return list(merged.values())


def decide(
    gates: Sequence[Gate],
    policy: GatePolicy,
    overall: Group,
    segments: Sequence[Group],
    *,
    overall_minimum: bool = False,
) -> tuple[tuple[GateOutcome, ...], tuple[CoverageOutcome, ...]]:
    """Every gate on the overall group and on each segment, and every coverage minimum.

    ``overall_minimum`` holds the overall group to ``min_queries`` too, as segments always are
    (an estimate resting on a small sample, as ``eval --ppi``'s does).

    The default gates apply to every segment; a segment's rule replaces them metric by metric and
    may add its own. Outcomes come back in report order: overall first, then segments in order.
    """
    short = overall_minimum and overall.scored < policy.min_queries
    outcomes = [
        _outcome(gate, overall, policy.gate_on, policy.strict_segments if short else None)
        for gate in gates
    ]
    coverage = []
    if policy.min_coverage is not None:
        coverage.append(_coverage(overall, policy.min_coverage))
    for group in segments:
        assert group.key is not None  # segments always have a key; the overall group has none
        rule = policy.rule(group.key)
        own_gates = merge_gates(gates, rule.gates if rule else ())
        min_queries = rule.min_queries if rule and rule.min_queries else policy.min_queries
        gate_on = rule.gate_on if rule and rule.gate_on else policy.gate_on
        enough = group.scored >= min_queries
        for gate in own_gates:
            outcomes.append(
                _outcome(gate, group, gate_on, None if enough else policy.strict_segments)
            )
        minimum = (
            rule.min_coverage if rule and rule.min_coverage is not None else policy.min_coverage
        )
        if minimum is not None:
            coverage.append(_coverage(group, minimum))
    return tuple(outcomes), tuple(coverage)


def check_gates(
    gates: Sequence[Gate], means: Mapping[MetricSpec, float]
) -> tuple[GateOutcome, ...]:
    """Each gate on a plain table of means: no segments, no intervals, the default policy."""
    overall = Group(None, 0, 0, 0, {}, dict(means), {})
    return decide(gates, GatePolicy(), overall, ())[0]


def _outcome(gate: Gate, group: Group, gate_on: str, insufficient: bool | None) -> GateOutcome:
    """``insufficient`` is None when the group has enough queries, else whether that is a failure."""
    mean = group.means.get(gate.metric, math.nan)
    low, high = group.intervals.get(gate.metric, (math.nan, math.nan))
    # No fallback to the mean when a bound is missing: the report would say "(lower)" of a mean.
    # ``evaluate`` refuses a bound without resamples; a group with nothing scored has no bound.
    if gate_on == "pessimistic":
        value = group.means.get(pessimistic_spec(gate.metric), math.nan)
    else:
        value = {"mean": mean, "lower_bound": low, "upper_bound": high}[gate_on]

    def verdict(passed: bool, status: str) -> GateOutcome:
        return GateOutcome(
            gate,
            None if math.isnan(value) else value,
            passed,
            segment=group.key,
            status=status,
            statistic=gate_on,
            mean=None if math.isnan(mean) else mean,
            interval=None if math.isnan(low) else (low, high),
            scored=group.scored,
        )

    if insufficient is not None:
        # Too few queries to judge, possibly none at all: neither pass nor fail unless strict.
        return verdict(not insufficient, "insufficient")
    if math.isnan(value):
        return verdict(False, "fail")  # nothing scored: there is no value to clear the bar
    passed = OPERATORS[gate.op](value, gate.threshold)
    return verdict(passed, "pass" if passed else "fail")


def pessimistic_spec(metric: MetricSpec) -> MetricSpec:
    """The spec ``gate_on="pessimistic"`` reads: ``metric`` with ``unjudged=nonrelevant``, or the
    metric itself when it takes no unjudged policy (its value does not depend on one)."""
    variants = unjudged_variants(metric)
    return variants["nonrelevant"] if variants else metric


def _coverage(group: Group, minimum: float) -> CoverageOutcome:
    coverage = group.coverage
    return CoverageOutcome(
        group.key, coverage, minimum, coverage is not None and coverage >= minimum
    )


def _metric_in(text: str, context: str) -> MetricSpec:
    try:
        return parse_metric(text)
    except SpecError as problem:
        raise SpecError(f"{context}: {problem}") from None


def make_gate(metric: MetricSpec, op: str, threshold: object, context: str | None = None) -> Gate:
    """A checked gate: ``op`` one of >=, >, <=, <; ``threshold`` a finite number, within [0, 1] for
    a bounded metric. ``context`` names where the gate came from in error messages."""
    if op not in OPERATORS:
        raise SpecError(
            f"gate {context or metric}: operator must be one of >=, >, <=, <; got {op!r}"
        )
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float, str)):
        raise SpecError(f"gate {context or metric}: threshold {threshold!r} is not a number")
    return _make_gate(metric, op, str(threshold), context or str(metric))


def _make_gate(metric: MetricSpec, op: str, raw_threshold: str, context: str) -> Gate:
    try:
        threshold = float(raw_threshold)
    except ValueError:
        raise SpecError(f"gate {context}: threshold {raw_threshold!r} is not a number") from None
    if not math.isfinite(threshold):
        raise SpecError(f"gate {context}: threshold must be a finite number")
    # A threshold of 70 on NDCG is a percentage typed as a number; it could never pass or never fail.
    if metric.definition.bounded and not 0.0 <= threshold <= 1.0:
        raise SpecError(
            f"gate {context}: threshold {threshold:g} is outside [0, 1], the range of {metric}"
        )
    return Gate(metric, op, threshold)
