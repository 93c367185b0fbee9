"""The worst-queries selection: the same queries as a full sort, whatever the batch boundaries."""

from __future__ import annotations

import importlib
import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rankgate import evaluate
from rankgate.errors import UsageError
from rankgate.spec import parse_metric
from rankgate.worst import RELEVANT_SHOWN, WorstQueries

# The package re-exports the function under the module's name, so reach the module itself.
evaluate_module = importlib.import_module("rankgate.evaluate")
NDCG, MRR = parse_metric("ndcg@10"), parse_metric("mrr")


def brute_force(values: list[float], count: int) -> list[int]:
    """Indices of the ``count`` lowest values, earlier index first on ties, NaN never."""
    finite = [(v, i) for i, v in enumerate(values) if not np.isnan(v)]
    return [i for _, i in sorted(finite)[:count]]


@settings(max_examples=200, deadline=None)
@given(
    first=st.lists(st.sampled_from([0.0, 0.25, 0.5, 1.0, float("nan")]), max_size=60),
    second=st.lists(st.floats(0, 1), max_size=60),
    count=st.integers(0, 8),
    cuts=st.lists(st.integers(0, 60), max_size=4),
)
def test_selection_matches_a_full_sort(first, second, count, cuts):
    n = min(len(first), len(second))
    columns = {NDCG: first[:n], MRR: second[:n]}
    tracker = WorstQueries([NDCG, MRR], count, depth=3, threshold=1)
    bounds = sorted({0, n, *(c for c in cuts if c <= n)})
    for start, stop in itertools.pairwise(bounds):
        for i in range(start, stop):
            tracker.hold(f"q{i}", ["a", "b"], {"a": 1.0}, {})
        tracker.settle({m: np.array(v[start:stop], dtype=np.float64) for m, v in columns.items()})
    expected = set(brute_force(columns[NDCG], count)) | set(brute_force(columns[MRR], count))
    assert [e.index for e in tracker.examples()] == sorted(expected)
    assert all(e.query_id == f"q{e.index}" for e in tracker.examples())


def test_example_shows_ranks_to_depth_with_grades_and_relevant_best_first():
    tracker = WorstQueries([MRR], 1, depth=3, threshold=2)
    grades = {"b": 0.0, "c": 3.0, "x": 2.0, "y": 1.0}
    tracker.hold("q1", ["a", "b", "a", "c", "d"], grades, {"query_text": "why", "query": 7})
    tracker.settle({MRR: np.array([0.3])})
    (example,) = tracker.examples()
    # Duplicates drop out as in scoring; unjudged documents carry None, judged ones their grade.
    assert example.ranked == (("a", None), ("b", 0.0), ("c", 3.0))
    assert example.retrieved_count == 4
    # Only grades at or above the threshold count as relevant; "query" is not text here.
    assert example.relevant == (("c", 3.0), ("x", 2.0))
    assert example.relevant_count == 2
    assert example.text == "why"


def test_long_relevant_lists_are_capped_but_counted():
    tracker = WorstQueries([MRR], 1, depth=3, threshold=1)
    grades = {f"d{i}": 1.0 for i in range(RELEVANT_SHOWN + 7)}
    tracker.hold("q", ["z"], grades, {})
    tracker.settle({MRR: np.array([0.0])})
    (example,) = tracker.examples()
    assert len(example.relevant) == RELEVANT_SHOWN
    assert example.relevant_count == RELEVANT_SHOWN + 7


def test_evaluate_keeps_the_same_worst_queries_across_batch_sizes(monkeypatch):
    rng = np.random.default_rng(4)
    rows = []
    for i in range(300):
        relevant = [f"d{j}" for j in rng.choice(40, 2, replace=False)]
        rows.append(
            {
                "query_id": f"q{i}",
                "retrieved_ids": [f"d{j}" for j in rng.choice(40, 10, replace=False)],
                "relevant_ids": relevant,
            }
        )
    whole = evaluate(rows, ["ndcg@10", "mrr"], worst=7)
    monkeypatch.setattr(evaluate_module, "BATCH_QUERIES_HOLDING", 13)
    batched = evaluate(rows, ["ndcg@10", "mrr"], worst=7)
    assert whole.examples == batched.examples
    for spec in whole.metrics:
        kept = {e.index for e in whole.examples}
        assert set(brute_force(whole.values[spec].tolist(), 7)) <= kept
    # Depth is the deepest cutoff requested (10 here).
    assert all(len(e.ranked) == 10 for e in whole.examples)
    assert evaluate(rows, ["mrr"]).examples == ()


@pytest.mark.parametrize("bad", [-1, 1.5, True, "3"])
def test_worst_must_be_a_count(bad):
    with pytest.raises(UsageError):
        evaluate([], ["mrr"], worst=bad)
