"""The design note's per-example interface, for harnesses that score one example at a time.

``RetrievalMetricsEvaluator([MetricThreshold("ndcg", 10, 0.7)]).evaluate(example)`` scores a single
example (a dict with the trace fields at the top level or under ``input``) with the same kernels as
``rankgate.evaluate`` and returns an ``EvalResult``. It keeps the seed's shape (and its ``k=0`` meaning
"no cutoff"), but not its definition bugs: see the metric docs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rankgate.batch import BatchBuilder
from rankgate.errors import ConfigError, InputError, Location, SpecError
from rankgate.io.validate import FieldMap, RawRecord, validate_record
from rankgate.spec import MetricSpec, make_metric

__all__ = ["EvalResult", "MetricThreshold", "RetrievalMetricsEvaluator"]


@dataclass(frozen=True, slots=True)
class MetricThreshold:
    """A metric by name (any alias), an optional cutoff (0 or None: none) and its minimum."""

    name: str
    k: int | None
    threshold: float


@dataclass(frozen=True, slots=True)
class EvalResult:
    """Outcome for one example.

    ``reason`` joins the failures with ``"; "`` (``"ndcg@10=0.512 < 0.700"``), empty when all pass;
    ``keywords`` lists the same failure strings; ``score`` is the mean of the metrics' values.
    """

    passed: bool
    score: float
    reason: str
    keywords: list[str] = field(default_factory=list)


class RetrievalMetricsEvaluator:
    """Scores single examples against per-metric minimums."""

    name = "retrieval_metrics"

    def __init__(
        self,
        thresholds: Sequence[MetricThreshold],
        *,
        relevance_threshold: float = 1.0,
        empty_relevant: str = "error",
        fields: FieldMap | None = None,
    ) -> None:
        """Check every threshold now, so a typo fails when the evaluator is built.

        ``empty_relevant`` decides what an example with no relevant document gets: ``"error"``
        (raise ``InputError``, the default: a per-example harness has nowhere to count a skip) or
        ``"zero"`` (every metric scores 0).
        """
        if not thresholds:
            raise SpecError("RetrievalMetricsEvaluator needs at least one MetricThreshold")
        if empty_relevant not in ("error", "zero"):
            raise ConfigError(f"empty_relevant must be 'error' or 'zero', got {empty_relevant!r}")
        self._checks: list[tuple[MetricSpec, float]] = []
        for threshold in thresholds:
            k = threshold.k if threshold.k else None
            spec = make_metric(threshold.name, k)
            self._checks.append((spec, float(threshold.threshold)))
        self._relevance_threshold = relevance_threshold
        self._empty_relevant = empty_relevant
        self._fields = fields or FieldMap()

    def evaluate(self, example: Mapping[str, Any]) -> EvalResult:
        """Score one example; raises ``InputError`` for a malformed or unlabeled example."""
        trace = validate_record(RawRecord(Location("<example>"), dict(example), 1), self._fields)
        if trace.grades is None:
            raise InputError(
                "<example>",
                self._fields.relevant_ids,
                "unlabeled: needs relevant_ids or relevance_scores",
            )
        has_relevant = any(g >= self._relevance_threshold for g in trace.grades.values())
        if not has_relevant and self._empty_relevant == "error":
            raise InputError(
                "<example>",
                self._fields.relevant_ids,
                "no relevant document, so recall and NDCG are undefined "
                "(empty_relevant='zero' scores such examples 0)",
            )
        builder = BatchBuilder()
        builder.add(trace.retrieved_ids, trace.grades)
        batch = builder.build()

        failures: list[str] = []
        total = 0.0
        for spec, minimum in self._checks:
            value = (
                float(spec.compute(batch, {"rel": self._relevance_threshold})[0])
                if has_relevant
                else 0.0
            )
            total += value
            if value < minimum:
                failures.append(f"{spec}={value:.3f} < {minimum:.3f}")
        return EvalResult(
            passed=not failures,
            score=total / len(self._checks),
            reason="; ".join(failures),
            keywords=failures,
        )
