"""The design note's per-example interface, for harnesses that score one example at a time.

``RetrievalMetricsEvaluator([MetricThreshold("ndcg", 10, 0.7)]).evaluate(example)`` scores a single
example (a dict with the trace fields at the top level or under ``input``) through the same pipeline
as ``rankgate.evaluate`` and returns an ``EvalResult``. It keeps the seed's shape, but not its
definition bugs (see docs/metrics.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rankgate.errors import ConfigError, InputError, SpecError
from rankgate.evaluate import Settings, evaluate
from rankgate.gates import Gate, make_gate
from rankgate.io.tables import RecordsSource
from rankgate.io.validate import FieldMap
from rankgate.report.numbers import format_against
from rankgate.spec import MetricSpec, make_metric, parse_metric

__all__ = ["EvalResult", "MetricThreshold", "RetrievalMetricsEvaluator"]

# In the seed, NDCG, precision and recall always took a k (k <= 0 silently scored 0), while MRR and
# MAP had none. So k = 0 or None means "no cutoff" for the metrics where the seed had none, and is
# refused for these three rather than quietly becoming a different metric (set precision, say).
_SEED_CUTOFF_REQUIRED = frozenset({"ndcg", "precision", "recall"})
_EXAMPLE = "<example>"


@dataclass(frozen=True, slots=True)
class MetricThreshold:
    """A metric by name (any alias), a cutoff (0 or None: none, where allowed) and its minimum."""

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
        """Check everything now, so a typo fails when the evaluator is built, not per example.

        ``empty_relevant`` decides what an example with no relevant document gets: ``"error"``
        (raise ``InputError``, the default: a per-example harness has nowhere to count a skip) or
        ``"zero"`` (every metric scores 0).
        """
        if not thresholds:
            raise SpecError("RetrievalMetricsEvaluator needs at least one MetricThreshold")
        if empty_relevant not in ("error", "zero"):
            raise ConfigError(f"empty_relevant must be 'error' or 'zero', got {empty_relevant!r}")
        self._settings = Settings(
            relevance_threshold=relevance_threshold,
            empty_relevant="zero" if empty_relevant == "zero" else "skip",
            fields=fields or FieldMap(),
        )
        self._gates: list[Gate] = [
            make_gate(_metric(threshold), ">=", threshold.threshold, context=repr(threshold))
            for threshold in thresholds
        ]

    def evaluate(self, example: Mapping[str, Any]) -> EvalResult:
        """Score one example; raises ``InputError`` for a malformed or unscorable example."""
        metrics = list(dict.fromkeys(gate.metric for gate in self._gates))
        evaluation = evaluate(
            RecordsSource([dict(example)], name=_EXAMPLE),
            metrics,
            self._gates,
            settings=self._settings,
        )
        skipped = evaluation.summary.skipped
        if skipped["unlabeled"]:
            raise InputError(
                _EXAMPLE,
                self._settings.fields.relevant_ids,
                "unlabeled: needs relevant_ids or relevance_scores",
            )
        if skipped["no_relevant"]:
            raise InputError(
                _EXAMPLE,
                self._settings.fields.relevant_ids,
                "no relevant document, so recall and NDCG are undefined "
                "(empty_relevant='zero' scores such examples 0)",
            )
        values = [evaluation.mean(gate.metric) for gate in self._gates]
        failures = [
            f"{outcome.gate.metric}={format_against(value, outcome.gate.threshold, 3)}"
            f" < {outcome.gate.threshold:.3f}"
            for outcome, value in zip(evaluation.gates, values, strict=True)
            if not outcome.passed
        ]
        return EvalResult(
            passed=not failures,
            score=sum(values) / len(values),
            reason="; ".join(failures),
            keywords=failures,
        )


def _metric(threshold: MetricThreshold) -> MetricSpec:
    k = threshold.k
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 0):
        raise SpecError(f"{threshold!r}: k must be a whole number >= 0, or None, got {k!r}")
    if "(" in threshold.name:
        # A name with parameters, e.g. "ndcg(unjudged=condensed)": read as the grammar writes it.
        return parse_metric(threshold.name if not k else f"{threshold.name}@{k}")
    if not k:
        spec = make_metric(threshold.name)
        if spec.name in _SEED_CUTOFF_REQUIRED and spec.k is None:
            raise SpecError(
                f"{threshold!r}: {spec.name} needs a cutoff k >= 1 (k = 0 scored 0 in the seed; "
                f"write e.g. MetricThreshold({threshold.name!r}, 10, {threshold.threshold!r}))"
            )
        return spec
    return make_metric(threshold.name, k)
