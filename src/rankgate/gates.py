"""Gates: a threshold on a metric's mean, and the verdict of checking it.

A gate is written ``ndcg@10>=0.7`` on the command line; in ``rankgate.toml`` it is a ``[gates]``
entry, ``"ndcg@10" = 0.7`` (meaning ``>=``) or ``"ndcg@10" = ">= 0.7"``. The margin of a verdict is
always value - threshold, so it reads the same way whatever the operator.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rankgate.errors import SpecError
from rankgate.spec import MetricSpec, parse_metric

__all__ = [
    "Gate",
    "GateOutcome",
    "check_gates",
    "gates_from_table",
    "make_gate",
    "merge_gates",
    "parse_gate",
]

OPERATORS: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge,
    ">": operator.gt,
    "<=": operator.le,
    "<": operator.lt,
}
# A threshold cannot start with "=", so "ndcg@10>=" is a parse error, not a threshold of "=".
_GATE = re.compile(r"^(?P<metric>.+?)\s*(?P<op>>=|<=|>|<)\s*(?P<threshold>[^=\s]\S*)$")
_CONDITION = re.compile(r"^\s*(?P<op>>=|<=|>|<)?\s*(?P<threshold>[^=\s]\S*)\s*$")


@dataclass(frozen=True, slots=True)
class Gate:
    """A pass condition on the mean of one metric over the scored queries."""

    metric: MetricSpec
    op: str
    threshold: float

    def __str__(self) -> str:
        return f"{self.metric}{self.op}{self.threshold:g}"


@dataclass(frozen=True, slots=True)
class GateOutcome:
    """How a gate fared: ``value`` is None when no query was scored (the gate then fails)."""

    gate: Gate
    value: float | None
    passed: bool

    @property
    def margin(self) -> float | None:
        return None if self.value is None else self.value - self.gate.threshold


def parse_gate(text: str) -> Gate:
    """Parse ``metric op threshold``, e.g. ``recall@20>=0.85``."""
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


def check_gates(
    gates: Sequence[Gate], means: Mapping[MetricSpec, float]
) -> tuple[GateOutcome, ...]:
    """Verdict for each gate; a gate whose metric has no mean (nothing scored) fails."""
    outcomes = []
    for gate in gates:
        value = means.get(gate.metric, math.nan)
        if math.isnan(value):
            outcomes.append(GateOutcome(gate, None, False))
        else:
            outcomes.append(GateOutcome(gate, value, OPERATORS[gate.op](value, gate.threshold)))
    return tuple(outcomes)


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
