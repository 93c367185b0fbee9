"""Metric values worked out by hand from the formulas, for the cases the issue calls out.

Each expected value is written as the arithmetic that produces it, so a reader can check it without
running anything.
"""

from __future__ import annotations

from math import isclose, log2
from typing import Any

import pytest

import rankgate
from rankgate import Settings


def score(record: dict[str, Any], metric: str, **options: Any) -> float:
    evaluation = rankgate.evaluate([record], [metric], settings=Settings(**options))
    assert evaluation.summary.scored == 1, evaluation.summary
    return evaluation.mean(metric)


def trace(retrieved: list[Any], grades: dict[str, float]) -> dict[str, Any]:
    return {"query_id": "q", "retrieved_ids": retrieved, "relevance_scores": grades}


def test_ndcg_worked_example_linear_gain() -> None:
    """The classic worked example (Järvelin & Kekäläinen's DCG, as on Wikipedia's NDCG page):
    grades 3, 2, 3, 0, 1, 2 in rank order give nDCG@6 = 6.861 / 7.141 = 0.961."""
    grades = {"d1": 3, "d2": 2, "d3": 3, "d4": 0, "d5": 1, "d6": 2}
    dcg = 3 + 2 / log2(3) + 3 / log2(4) + 0 + 1 / log2(6) + 2 / log2(7)
    ideal = 3 + 3 / log2(3) + 2 / log2(4) + 2 / log2(5) + 1 / log2(6)
    value = score(trace(list(grades), grades), "ndcg(gain=linear)@6")
    assert isclose(value, dcg / ideal, abs_tol=1e-12)
    assert round(value, 3) == 0.961


def test_ndcg_exponential_gain() -> None:
    grades = {"a": 1, "b": 3}
    dcg = (2**1 - 1) / log2(2) + (2**3 - 1) / log2(3)
    ideal = (2**3 - 1) / log2(2) + (2**1 - 1) / log2(3)
    assert isclose(score(trace(["a", "b"], grades), "ndcg@10"), dcg / ideal, abs_tol=1e-12)


def test_one_retrieved_of_five_relevant_is_not_perfect_ndcg() -> None:
    """The seed cut the ideal DCG at the number retrieved and scored this 1.0."""
    grades = {f"r{i}": 1 for i in range(5)}
    ideal = sum(1 / log2(rank + 1) for rank in range(1, 6))
    assert isclose(score(trace(["r0"], grades), "ndcg@10"), 1 / ideal, abs_tol=1e-12)


def test_precision_divides_by_k_even_when_fewer_were_retrieved() -> None:
    """The seed divided by min(k, retrieved) and scored this 1.0."""
    assert score(trace(["a", "b"], {"a": 1, "b": 1}), "precision@5") == 2 / 5


def test_precision_without_cutoff_divides_by_number_retrieved() -> None:
    assert score(trace(["a", "x", "y"], {"a": 1}), "precision") == 1 / 3


def test_recall_and_map_divide_by_all_relevant() -> None:
    record = trace(["a", "x", "b"], {"a": 1, "b": 2, "c": 1, "d": 3})
    assert score(record, "recall@2") == 1 / 4
    assert score(record, "recall@3") == 2 / 4
    assert isclose(score(record, "map"), (1 / 1 + 2 / 3) / 4, abs_tol=1e-15)
    assert score(record, "map@2") == (1 / 1) / 4


def test_grade_zero_is_judged_non_relevant() -> None:
    """The seed counted any labeled document as relevant for MRR, precision and recall."""
    record = trace(["zero", "one"], {"zero": 0, "one": 1})
    assert score(record, "mrr") == 1 / 2
    assert score(record, "precision@1") == 0.0
    assert score(record, "recall@1") == 0.0


def test_duplicates_count_once_and_later_documents_move_up() -> None:
    record = trace(["a", "a", "a", "b"], {"a": 1, "b": 1})
    # After de-duplication the ranking is a, b: both inside the top 2.
    assert score(record, "recall@2") == 1.0
    assert score(record, "precision@2") == 1.0
    # The seed's MAP summed a precision for every copy of "a": (1 + 2/2 + 3/3 + 4/4) / 2 = 2.0.
    assert score(record, "map") == 1.0
    evaluation = rankgate.evaluate([record], ["map"])
    assert evaluation.summary.duplicates_dropped == 2


def test_integer_and_string_ids_name_the_same_document() -> None:
    record = {"query_id": 5, "retrieved_ids": [1, "2", 3], "relevance_scores": {"1": 1, "3": 2}}
    evaluation = rankgate.evaluate([record], ["recall@3"])
    assert evaluation.query_ids == ("5",)
    assert evaluation.mean("recall@3") == 1.0
    assert (
        rankgate.evaluate(
            [{**record, "retrieved_ids": [1, "1"]}], ["map"]
        ).summary.duplicates_dropped
        == 1
    )


def test_mrr_with_cutoff_is_zero_when_first_relevant_is_below_k() -> None:
    record = trace(["w", "x", "y", "a"], {"a": 1})
    assert score(record, "mrr@3") == 0.0
    assert score(record, "mrr@4") == 1 / 4
    assert score(record, "mrr") == 1 / 4


def test_r_precision_divides_by_r_even_when_fewer_were_retrieved() -> None:
    record = trace(["a", "b"], {"a": 1, "b": 1, "c": 1, "d": 1})
    assert score(record, "r_precision") == 2 / 4


def test_hit_rate() -> None:
    record = trace(["x", "y", "a"], {"a": 2})
    assert score(record, "hit_rate@2") == 0.0
    assert score(record, "hit_rate@3") == 1.0


def test_dcg_is_unnormalised() -> None:
    record = trace(["a", "b"], {"a": 3, "b": 3})
    assert isclose(score(record, "dcg@2"), 7 / log2(2) + 7 / log2(3), abs_tol=1e-12)


def test_empty_ranking_scores_zero() -> None:
    record = trace([], {"a": 1})
    for metric in ("ndcg@10", "mrr", "precision@5", "recall@20", "map", "r_precision", "precision"):
        assert score(record, metric) == 0.0, metric


def test_k_beyond_the_list() -> None:
    record = trace(["a"], {"a": 1})
    assert score(record, "precision@1000") == 1 / 1000
    assert score(record, "recall@1000") == 1.0
    assert score(record, "ndcg@1000") == 1.0


def test_metric_rel_threshold_no_document_reaches_scores_zero() -> None:
    record = trace(["a", "b"], {"a": 1, "b": 1})
    assert score(record, "precision(rel=2)@5") == 0.0
    assert score(record, "recall(rel=2)@5") == 0.0
    assert score(record, "map(rel=2)") == 0.0


def test_fractional_grades_add_gain_but_stay_below_threshold() -> None:
    """A grade of 0.5 adds NDCG gain (every positive grade does) but is not relevant at rel=1."""
    record = trace(["half", "one"], {"half": 0.5, "one": 1})
    gain_half = 2**0.5 - 1
    dcg = gain_half / log2(2) + 1 / log2(3)
    ideal = 1 / log2(2) + gain_half / log2(3)
    assert isclose(score(record, "ndcg@2"), dcg / ideal, abs_tol=1e-12)
    assert score(record, "precision@1") == 0.0
    assert score(record, "precision(rel=0.5)@1") == 1.0


def test_run_wide_relevance_threshold_is_every_metrics_default() -> None:
    record = trace(["a", "b"], {"a": 1, "b": 2})
    assert score(record, "precision@2", relevance_threshold=2) == 1 / 2
    assert score(record, "precision@2") == 2 / 2


def test_a_metrics_own_rel_wins_over_the_run_threshold_even_at_one() -> None:
    record = trace(["a", "b"], {"a": 1, "b": 2})
    evaluation = rankgate.evaluate(
        [record],
        ["precision(rel=1)@2", "precision(rel=2)@2"],
        settings=Settings(relevance_threshold=2),
    )
    assert evaluation.mean("precision(rel=1)@2") == 2 / 2
    assert evaluation.mean("precision(rel=2)@2") == 1 / 2


@pytest.mark.parametrize(
    "record",
    [
        {"query_id": "q", "retrieved_ids": ["a"], "relevant_ids": []},
        {"query_id": "q", "retrieved_ids": ["a"], "relevance_scores": {"a": 0, "b": 0}},
        {
            "query_id": "q",
            "retrieved_ids": ["a"],
            "relevant_ids": ["a"],
            "relevance_scores": {"a": 0},
        },
    ],
    ids=["empty-relevant-ids", "only-grade-zero", "grade-overrides-relevant-ids"],
)
def test_query_with_no_relevant_document_is_skipped_or_zero(record: dict[str, Any]) -> None:
    skipped = rankgate.evaluate([record], ["ndcg@10", "recall@20"])
    assert skipped.summary.scored == 0
    assert skipped.summary.skipped == {"unlabeled": 0, "no_relevant": 1, "invalid": 0}
    zero = rankgate.evaluate(
        [record], ["ndcg@10", "recall@20"], settings=Settings(empty_relevant="zero")
    )
    assert zero.summary.scored == 1
    assert zero.mean("ndcg@10") == 0.0 and zero.mean("recall@20") == 0.0


def test_zero_policy_overrides_gain_below_the_threshold() -> None:
    """Under empty_relevant='zero' a query with nothing relevant scores 0 on every metric, even
    NDCG, which a grade of 0.5 would otherwise make positive."""
    record = trace(["a"], {"a": 0.5})
    zero = rankgate.evaluate([record], ["ndcg@10"], settings=Settings(empty_relevant="zero"))
    assert zero.mean("ndcg@10") == 0.0


def test_means_and_counts_over_mixed_records() -> None:
    records = [
        trace(["a"], {"a": 1}),  # precision@1 = 1
        trace(["x"], {"a": 1}),  # precision@1 = 0
        {"query_id": "u", "retrieved_ids": ["a"]},  # unlabeled
        trace(["a"], {"a": 0}),  # no relevant document
    ]
    evaluation = rankgate.evaluate(records, ["precision@1"])
    summary = evaluation.summary
    assert (summary.read, summary.scored, summary.labeled) == (4, 2, 3)
    assert summary.skipped == {"unlabeled": 1, "no_relevant": 1, "invalid": 0}
    assert summary.coverage == 3 / 4
    assert evaluation.mean("precision@1") == 0.5
    assert evaluation.mean("P_1") == 0.5  # any alias names the same metric


def test_judged_share_of_the_retrieved_top_k() -> None:
    record = trace(["a", "b", "c", "d"], {"a": 1, "c": 0})  # grade 0 is a label too
    assert score(record, "judged@2") == 1 / 2
    assert score(record, "judged@4") == 2 / 4
    assert score(record, "judged@10") == 2 / 4  # only four were retrieved
    assert score(record, "judged") == 2 / 4
    assert score(trace([], {"a": 1}), "judged@5") == 0.0
