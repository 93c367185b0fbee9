"""Every metric trec_eval also defines must equal trec_eval's value, query by query, to 1e-9.

The oracle is pytrec_eval-terrier, which runs trec_eval's own C code. It is fed the same traces,
translated the way trec_eval needs them: string IDs, integer grades, rankings de-duplicated and
given strictly decreasing scores (trec_eval orders by score, so distinct scores keep our order).
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rankgate
from rankgate import Settings
from strategies import CUTOFFS, distinct_ranking, effective_grades, trace_records

pytrec_eval = pytest.importorskip("pytrec_eval")

TOLERANCE = 1e-9


def _with_cutoff(template: str, k: int) -> tuple[str, str]:
    """(rankgate metric, trec_eval measure) for a template such as 'precision@{k}|P_{k}'."""
    ours, theirs = template.split("|")
    return ours.format(k=k), theirs.format(k=k)


# rankgate metric | trec_eval measure name in pytrec_eval's output. NDCG with exponential gain is
# checked separately below (trec_eval's ndcg uses linear gain).
CUT_METRICS = [
    "ndcg(gain=linear)@{k}|ndcg_cut_{k}",
    "precision@{k}|P_{k}",
    "recall@{k}|recall_{k}",
    "map@{k}|map_cut_{k}",
    "hit_rate@{k}|success_{k}",
]
UNCUT_METRICS = [
    ("map", "map"),
    ("mrr", "recip_rank"),
    ("r_precision", "Rprec"),
    ("ndcg(gain=linear)", "ndcg"),
    ("precision", "set_P"),
    ("recall", "set_recall"),
]


def _trec_measures(names: list[str]) -> set[str]:
    """pytrec_eval's request syntax: 'P_5' is asked for as 'P.5'."""
    requested = set()
    for name in names:
        base, _, cutoff = name.rpartition("_")
        requested.add(f"{base}.{cutoff}" if cutoff.isdigit() else name)
    return requested


def _oracle(
    records: list[dict[str, Any]], measures: set[str], level: int = 1, exponential: bool = False
) -> dict[str, dict[str, float]]:
    qrels = {}
    for record in records:
        grades = effective_grades(record)
        qrels[record["query_id"]] = {
            doc: (2**grade - 1 if exponential else grade) for doc, grade in grades.items()
        }
    run = {}
    for record in records:
        ranking = distinct_ranking(record)
        run[record["query_id"]] = {doc: float(len(ranking) - i) for i, doc in enumerate(ranking)}
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, measures, relevance_level=level)
    result: dict[str, dict[str, float]] = evaluator.evaluate(run)
    return result


def _ours(
    records: list[dict[str, Any]], metrics: list[str], **options: Any
) -> dict[str, dict[str, float]]:
    evaluation = rankgate.evaluate(records, metrics, settings=Settings(**options))
    return {row.pop("query_id"): row for row in evaluation.per_query()}


def _assert_match(
    ours: dict[str, dict[str, float]],
    theirs: dict[str, dict[str, float]],
    pairs: list[tuple[str, str]],
    expected_queries: set[str],
) -> None:
    assert set(ours) == expected_queries
    for query_id in expected_queries:
        for metric, measure in pairs:
            # pytrec_eval leaves out a query whose qrels are empty; trec_eval would score it 0.
            expected = theirs.get(query_id, {}).get(measure, 0.0)
            got = ours[query_id][metric]
            assert math.isclose(got, expected, rel_tol=0, abs_tol=TOLERANCE), (
                f"{query_id} {metric}: rankgate {got!r} != trec_eval {measure} {expected!r}"
            )


def _has_relevant(record: dict[str, Any], level: int = 1) -> bool:
    return any(grade >= level for grade in effective_grades(record).values())


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=trace_records(), k=st.sampled_from(CUTOFFS))
def test_metrics_equal_trec_eval(records: list[dict[str, Any]], k: int) -> None:
    pairs = [_with_cutoff(t, k) for t in CUT_METRICS] + UNCUT_METRICS
    ours = _ours(records, [metric for metric, _ in pairs])
    theirs = _oracle(records, _trec_measures([measure for _, measure in pairs]))
    scored = {r["query_id"] for r in records if _has_relevant(r)}
    _assert_match(ours, theirs, pairs, scored)


@settings(max_examples=200, deadline=None)
@given(records=trace_records(), k=st.sampled_from(CUTOFFS))
def test_exponential_ndcg_equals_trec_eval_on_exponential_gains(
    records: list[dict[str, Any]], k: int
) -> None:
    # trec_eval's gain is the grade itself; giving it 2^g - 1 as the grade yields exponential NDCG.
    pairs = [(f"ndcg@{k}", f"ndcg_cut_{k}"), ("ndcg", "ndcg")]
    ours = _ours(records, [metric for metric, _ in pairs])
    theirs = _oracle(records, _trec_measures([m for _, m in pairs]), exponential=True)
    _assert_match(ours, theirs, pairs, {r["query_id"] for r in records if _has_relevant(r)})


@settings(max_examples=200, deadline=None)
@given(records=trace_records(), k=st.sampled_from(CUTOFFS), level=st.sampled_from([2, 3]))
def test_relevance_threshold_equals_trec_eval_level(
    records: list[dict[str, Any]], k: int, level: int
) -> None:
    """A metric's own rel=2 and a run-wide threshold of 2 both match trec_eval -l 2."""
    pairs = [
        (f"precision(rel={level})@{k}", f"P_{k}"),
        (f"recall(rel={level})@{k}", f"recall_{k}"),
        (f"map(rel={level})", "map"),
        (f"mrr(rel={level})", "recip_rank"),
        (f"r_precision(rel={level})", "Rprec"),
    ]
    theirs = _oracle(records, _trec_measures([m for _, m in pairs]), level=level)
    # Per-metric threshold, default run-wide threshold: queries with a grade >= 1 are scored.
    ours = _ours(records, [metric for metric, _ in pairs])
    _assert_match(ours, theirs, pairs, {r["query_id"] for r in records if _has_relevant(r)})
    # Run-wide threshold: the plain metric names take it as their default.
    plain = [(metric.replace(f"(rel={level})", ""), measure) for metric, measure in pairs]
    ours = _ours(records, [metric for metric, _ in plain], relevance_threshold=level)
    _assert_match(ours, theirs, plain, {r["query_id"] for r in records if _has_relevant(r, level)})


@settings(max_examples=100, deadline=None)
@given(records=trace_records(), k=st.sampled_from(CUTOFFS))
def test_empty_relevant_zero_scores_every_labeled_query_like_trec_eval(
    records: list[dict[str, Any]], k: int
) -> None:
    """With --empty-relevant zero every labeled query is scored; trec_eval gives 0 to those with no
    relevant document, and so must we."""
    pairs = [_with_cutoff(t, k) for t in CUT_METRICS] + UNCUT_METRICS
    ours = _ours(records, [metric for metric, _ in pairs], empty_relevant="zero")
    theirs = _oracle(records, _trec_measures([m for _, m in pairs]))
    no_relevant = {r["query_id"] for r in records if not _has_relevant(r)}
    for query_id in no_relevant:
        assert all(value == 0.0 for value in ours[query_id].values())
    _assert_match(ours, theirs, pairs, {r["query_id"] for r in records})
