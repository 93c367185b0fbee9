"""``rankgate.labels_todo`` on hand-made traces: the pool, its order, the forecast, the sample."""

from __future__ import annotations

from collections import Counter

import pytest

from rankgate.compare import Significance, Variant
from rankgate.errors import ConfigError, UsageError
from rankgate.evaluate import Settings
from rankgate.gates import GatePolicy
from rankgate.labels_todo import BY_RANK, DECIDES, SAMPLED, labels_todo


def _trace(
    query_id: str, ranking: list[str], grades: dict[str, float] | None, **extra: str
) -> dict:
    record = {"query_id": query_id, "retrieved_ids": ranking, **extra}
    if grades is not None:
        record["relevance_scores"] = grades
    return record


def test_one_source_pools_its_unjudged_top_k_by_rank_repeats_dropped() -> None:
    traces = [
        # d2 is repeated: the repeat is dropped, so the top 3 is d1, d2, d3 (d4 is 4th).
        _trace("a", ["d1", "d2", "d2", "d3", "d4"], {"d1": 1.0, "d3": 0.0}),
        _trace("b", ["e1", "e2", "e3"], {"e2": 2.0}),
        _trace("c", ["f1", "f2"], None, query="what is f"),  # no labels yet
    ]
    todo = labels_todo(traces, depth=3)
    got = [(p.query_id, p.document_id, p.rank, p.reason) for p in todo.pairs]
    # rank 1 first (query order among equals), then rank 2, then rank 3
    assert got == [
        ("b", "e1", 1, BY_RANK),
        ("c", "f1", 1, BY_RANK),
        ("a", "d2", 2, BY_RANK),
        ("c", "f2", 2, BY_RANK),
        ("b", "e3", 3, BY_RANK),
    ]
    assert todo.pairs[1].query_text == "what is f"
    assert todo.pooled == 5
    (side,) = todo.sides
    # judged@3 over the labeled queries a and b: a 2/3 (d1, d3), b 1/3 (e2); after: both 3/3.
    assert side.judged_before == pytest.approx((2 / 3 + 1 / 3) / 2)
    assert side.judged_after == pytest.approx(1.0)
    assert side.first_labels == 1  # c gets its first labels

    budgeted = labels_todo(traces, depth=3, budget=2)
    assert [(p.query_id, p.document_id) for p in budgeted.pairs] == [("b", "e1"), ("c", "f1")]
    assert budgeted.sides[0].judged_after == pytest.approx(((2 / 3) + (2 / 3)) / 2)


def test_segments_short_of_their_minimum_come_first_among_equal_ranks() -> None:
    traces = [
        _trace(f"n{i}", [f"n{i}-a", f"n{i}-b"], {f"n{i}-b": 1.0}, topic="news") for i in range(4)
    ] + [_trace("r0", ["r0-a", "r0-b"], {"r0-b": 1.0}, topic="rare")]
    settings = Settings(segment_by=("topic",))
    todo = labels_todo(traces, depth=1, settings=settings, policy=GatePolicy(min_queries=3))
    assert todo.short_segments == ("topic=rare",)
    assert [p.query_id for p in todo.pairs] == ["r0", "n0", "n1", "n2", "n3"]
    assert todo.pairs[0].short_segment


def test_a_comparison_lists_the_deciding_pairs_first() -> None:
    # Baseline top 2 judged; the candidate lifts an unjudged document x (decides), and both rank
    # an unjudged y at rank 3 (shared: decides nothing, but it is in the pool).
    baseline, candidate = [], []
    for i in range(40):
        q = f"q{i}"
        base = [f"{q}-r", f"{q}-s", f"{q}-y", f"{q}-x"]
        cand = [f"{q}-x", f"{q}-r", f"{q}-y", f"{q}-s"] if i % 2 == 0 else list(base)
        grades = {f"{q}-r": 1.0, f"{q}-s": 1.0}
        baseline.append(_trace(q, base, grades))
        candidate.append(_trace(q, cand, grades))
    todo = labels_todo(
        Variant("base", baseline),
        Variant("cand", candidate),
        metrics=["ndcg@3"],
        depth=3,
        significance=Significance(),
    )
    assert todo.comparison is not None
    (cell,) = todo.cells
    assert cell.resolved  # the whole pool is listed: no unjudged document is left in either top 3
    deciding = [p for p in todo.pairs if p.reason == DECIDES]
    assert {(p.query_id, p.document_id) for p in deciding} == {
        (f"q{i}", f"q{i}-x") for i in range(0, 40, 2)
    }
    assert todo.pairs[: len(deciding)] == tuple(deciding)
    assert all(p.ranks == {"cand": 1} for p in deciding)
    rest = todo.pairs[len(deciding) :]
    assert {p.document_id.split("-")[1] for p in rest} == {"y"}
    # y on an even query: rank 3 in both arms, weight 2 / log2(4)
    assert rest[0].weight == pytest.approx(2 / 2.0)
    assert cell.candidate_judged == pytest.approx(((20 * (1 / 3) + 20 * (2 / 3)) / 40, 1.0))
    assert cell.baseline_judged == pytest.approx((2 / 3, 1.0))
    # Only the deciding pairs: the shared y stays unjudged, so the cell is not sure to resolve,
    # but the arms are judged alike again.
    (partial,) = labels_todo(
        Variant("base", baseline),
        Variant("cand", candidate),
        metrics=["ndcg@3"],
        depth=3,
        budget=len(deciding),
    ).cells
    assert not partial.resolved
    assert partial.candidate_judged[1] == pytest.approx(2 / 3)
    assert partial.gap_after == pytest.approx(0.0)


def test_a_stratified_sample_keeps_the_strata_proportions_and_the_seed() -> None:
    traces = [
        _trace(f"q{i}", [f"q{i}-a"], None, kind="head" if i < 60 else "tail") for i in range(80)
    ]
    settings = Settings(segment_by=("kind",), seed=7)
    todo = labels_todo(traces, sample_queries=20, settings=settings)
    assert todo.sample_strata == {"head": 15, "tail": 5}
    assert len(todo.sampled_queries or ()) == 20
    kinds = Counter("head" if int(q[1:]) < 60 else "tail" for q in todo.sampled_queries or ())
    assert kinds == {"head": 15, "tail": 5}
    assert all(p.reason == SAMPLED for p in todo.pairs)
    again = labels_todo(traces, sample_queries=20, settings=settings)
    assert again.sampled_queries == todo.sampled_queries
    other = labels_todo(traces, sample_queries=20, settings=Settings(segment_by=("kind",), seed=8))
    assert other.sampled_queries != todo.sampled_queries
    # A budget takes whole queries: every sampled query here has one pair.
    assert len(labels_todo(traces, sample_queries=20, budget=4, settings=settings).pairs) == 4


def test_a_small_stratum_still_gets_one_query() -> None:
    traces = [_trace(f"q{i}", ["d"], None, kind="big") for i in range(99)]
    traces.append(_trace("lonely", ["d"], None, kind="small"))
    todo = labels_todo(traces, sample_queries=10, settings=Settings(segment_by=("kind",)))
    assert todo.sample_strata == {"big": 9, "small": 1}
    assert "lonely" in (todo.sampled_queries or ())


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"depth": 0}, ConfigError),
        ({"budget": -1}, ConfigError),
        ({"sample_queries": True}, ConfigError),
    ],
)
def test_bad_numbers_are_refused(options: dict, error: type[Exception]) -> None:
    with pytest.raises(error):
        labels_todo([_trace("q", ["d"], None)], **options)


def test_standard_input_cannot_be_one_of_several_sides() -> None:
    with pytest.raises(UsageError, match="standard input"):
        labels_todo("-", [_trace("q", ["d"], None)])
