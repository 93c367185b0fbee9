"""The design note's per-example interface, the curated public API, and generated docs."""

from __future__ import annotations

from math import log2
from pathlib import Path

import pytest

import rankgate
from rankgate import (
    EvalResult,
    InputError,
    MetricThreshold,
    RetrievalMetricsEvaluator,
    SpecError,
)
from rankgate.report.metric_docs import render_metrics_markdown

ROOT = Path(__file__).resolve().parents[2]


def test_public_api_is_exactly_what_is_intended() -> None:
    assert sorted(rankgate.__all__) == sorted(
        [
            "DEFAULT_METRICS",
            "Comparison",
            "ConfigError",
            "DocIdMapping",
            "EvalResult",
            "Evaluation",
            "FieldMap",
            "Gate",
            "GateOutcome",
            "GatePolicy",
            "InputError",
            "MetricSpec",
            "MetricThreshold",
            "RankgateError",
            "RetrievalMetricsEvaluator",
            "ServedDepth",
            "Settings",
            "Significance",
            "SpecError",
            "Summary",
            "UsageError",
            "Variant",
            "__version__",
            "baseline_options",
            "compare",
            "evaluate",
            "make_metric",
            "parse_gate",
            "parse_metric",
            "parse_metric_list",
            "save_baseline",
        ]
    )
    for name in rankgate.__all__:
        assert hasattr(rankgate, name), name


EXAMPLE = {
    "input": {
        "retrieved_ids": ["d3", "d9", "d1"],
        "relevant_ids": ["d1", "d4"],
        "relevance_scores": {"d1": 3, "d4": 1, "d9": 0},
    }
}


def test_per_example_reason_keywords_and_score() -> None:
    evaluator = RetrievalMetricsEvaluator(
        [
            MetricThreshold(name="ndcg", k=10, threshold=0.7),
            MetricThreshold(name="recall", k=20, threshold=0.4),
            MetricThreshold(name="mrr", k=0, threshold=0.9),
        ]
    )
    result = evaluator.evaluate(EXAMPLE)
    ndcg = (7 / log2(4)) / (7 + 1 / log2(3))  # d1 (grade 3) at rank 3; ideal d1, d4
    recall = 1 / 2
    mrr = 1 / 3
    assert isinstance(result, EvalResult)
    assert result.passed is False
    assert result.reason == f"ndcg@10={ndcg:.3f} < 0.700; mrr={mrr:.3f} < 0.900"
    assert result.keywords == [f"ndcg@10={ndcg:.3f} < 0.700", f"mrr={mrr:.3f} < 0.900"]
    assert result.score == pytest.approx((ndcg + recall + mrr) / 3)


def test_per_example_all_pass_gives_empty_reason() -> None:
    evaluator = RetrievalMetricsEvaluator([MetricThreshold("precision", 1, 0.0)])
    result = evaluator.evaluate({"retrieved_ids": ["a"], "relevant_ids": ["a"]})
    assert (result.passed, result.reason, result.keywords, result.score) == (True, "", [], 1.0)


def test_per_example_errors_at_construction() -> None:
    with pytest.raises(SpecError, match="at least one"):
        RetrievalMetricsEvaluator([])
    with pytest.raises(SpecError, match="unknown metric 'ndgc'"):
        RetrievalMetricsEvaluator([MetricThreshold("ndgc", 10, 0.5)])


def test_per_example_unlabeled_and_no_relevant() -> None:
    evaluator = RetrievalMetricsEvaluator([MetricThreshold("mrr", None, 0.5)])
    with pytest.raises(InputError, match="unlabeled"):
        evaluator.evaluate({"retrieved_ids": ["a"]})
    with pytest.raises(InputError, match="no relevant document"):
        evaluator.evaluate({"retrieved_ids": ["a"], "relevant_ids": []})
    zero = RetrievalMetricsEvaluator([MetricThreshold("mrr", None, 0.5)], empty_relevant="zero")
    assert zero.evaluate({"retrieved_ids": ["a"], "relevant_ids": []}).score == 0.0


def test_per_example_bad_record_names_field() -> None:
    evaluator = RetrievalMetricsEvaluator([MetricThreshold("mrr", None, 0.5)])
    with pytest.raises(InputError, match="field 'retrieved_ids': expected a list"):
        evaluator.evaluate({"retrieved_ids": "d1"})


def test_docs_metrics_page_is_generated_from_the_registry() -> None:
    """docs/metrics.md must be what `make docs` writes; regenerate it after changing a metric."""
    assert (ROOT / "docs" / "metrics.md").read_text(encoding="utf-8") == render_metrics_markdown()


def test_evaluation_tables_convert() -> None:
    records = [
        {"query_id": "a", "retrieved_ids": ["x"], "relevant_ids": ["x"], "query_type": "factual"},
        {"query_id": "b", "retrieved_ids": ["y"], "relevant_ids": ["x"], "query_type": "multi_hop"},
    ]
    evaluation = rankgate.evaluate(records, ["mrr"])
    table = evaluation.to_arrow()
    assert table.column_names == ["query_id", "mrr", "query_type"]
    assert table.column("mrr").to_pylist() == [1.0, 0.0]
    assert evaluation.to_pandas()["query_type"].tolist() == ["factual", "multi_hop"]
    assert evaluation.to_polars()["mrr"].to_list() == [1.0, 0.0]
    assert evaluation.per_query() == [{"query_id": "a", "mrr": 1.0}, {"query_id": "b", "mrr": 0.0}]


@pytest.mark.parametrize(
    ("threshold", "message"),
    [
        (MetricThreshold("ndcg", 2.5, 0.5), "k must be a whole number"),  # type: ignore[arg-type]
        (MetricThreshold("ndcg", True, 0.5), "k must be a whole number"),
        (MetricThreshold("ndcg", -1, 0.5), "k must be a whole number"),
        (MetricThreshold("ndcg", 10, "x"), "not a number"),  # type: ignore[arg-type]
        (MetricThreshold("ndcg", 10, 70), "outside [0, 1]"),
        (MetricThreshold("precision", 0, 0.5), "precision needs a cutoff k >= 1"),
        (MetricThreshold("ndcg", None, 0.5), "ndcg needs a cutoff k >= 1"),
        (MetricThreshold("P_5", 0, 0.5), None),  # the alias carries its own cutoff
    ],
)
def test_per_example_thresholds_are_checked_when_built(
    threshold: MetricThreshold, message: str | None
) -> None:
    if message is None:
        RetrievalMetricsEvaluator([threshold])
        return
    with pytest.raises(SpecError) as caught:
        RetrievalMetricsEvaluator([threshold])
    assert message in str(caught.value)


@pytest.mark.parametrize("value", [0, -1, "1", float("nan")])
def test_per_example_relevance_threshold_is_checked(value: object) -> None:
    with pytest.raises(rankgate.ConfigError, match="relevance threshold must be a number > 0"):
        RetrievalMetricsEvaluator([MetricThreshold("mrr", 0, 0.5)], relevance_threshold=value)  # type: ignore[arg-type]


def test_k_zero_means_no_cutoff_for_mrr_and_map() -> None:
    evaluator = RetrievalMetricsEvaluator(
        [MetricThreshold("mrr", 0, 0.0), MetricThreshold("map", None, 0.0)]
    )
    example = {"retrieved_ids": [f"x{i}" for i in range(30)] + ["a"], "relevant_ids": ["a"]}
    assert evaluator.evaluate(example).score == pytest.approx(1 / 31)


def test_reason_never_prints_a_miss_as_equal_to_its_threshold() -> None:
    evaluator = RetrievalMetricsEvaluator([MetricThreshold("precision", 3, 0.667)])
    result = evaluator.evaluate({"retrieved_ids": ["a", "b", "x"], "relevant_ids": ["a", "b"]})
    # 2/3 = 0.66666... rounds to 0.667 at three places, yet misses 0.667: show enough digits.
    assert result.reason == "precision@3=0.6667 < 0.667"
