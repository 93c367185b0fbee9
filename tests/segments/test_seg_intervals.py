"""95% bootstrap intervals on every mean, their reproducibility, and gating on a bound (issue 4,
part 4).

The intervals are not recomputed with rankgate's own resampling scheme; they are checked for what
any correct percentile bootstrap must satisfy: determinism under a seed, sensitivity to the seed,
containing the mean, degeneracy on constant data, and a width close to the normal approximation
2 * 1.96 * sd / sqrt(n) on many iid values.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from seg_reference import make_records, ranked

import rankgate
from rankgate.gates import GatePolicy, SegmentRule
from rankgate.segments import SegmentKey
from rankgate.spec import unjudged_variants
from rankgate.stats import bootstrap_interval

METRICS = ["ndcg@10", "mrr", "recall@3"]
NDCG = rankgate.parse_metric("ndcg@10")
MRR = rankgate.parse_metric("mrr")


def _records() -> list[dict[str, Any]]:
    return make_records(11, {"factual": (60, 0.85), "multi_hop": (45, 0.6), "rare": (35, 0.5)})


def _run(seed: int, resamples: int = 300, records: list[dict[str, Any]] | None = None) -> Any:
    return rankgate.evaluate(
        records if records is not None else _records(),
        METRICS,
        settings=rankgate.Settings(segment_by=("query_type",), seed=seed, resamples=resamples),
    )


def _all_intervals(evaluation: Any) -> dict[tuple[str, str], tuple[float, float]]:
    return {
        (group.name, str(spec)): interval
        for group in (evaluation.overall, *evaluation.segments)
        for spec, interval in group.intervals.items()
    }


def test_every_mean_overall_and_per_segment_has_an_interval_around_it() -> None:
    evaluation = _run(seed=1)
    assert len(evaluation.segments) == 3
    requested = {rankgate.parse_metric(m) for m in METRICS}
    for group in (evaluation.overall, *evaluation.segments):
        # Each group also carries judged@K, the coverage companion computed with every evaluation,
        # and each metric with unjudged documents counted relevant (the optimistic end of the
        # range reports show; the pessimistic end is the metric itself under the default policy).
        optimistic = {unjudged_variants(spec)["relevant"] for spec in requested}
        assert (
            set(group.intervals)
            == set(group.means)
            == (requested | {evaluation.judged} | optimistic)
        )
        for spec in requested:
            low, high = group.intervals[spec]
            mean = group.means[spec]
            assert math.isfinite(low) and math.isfinite(high), (group.name, spec)
            assert low <= mean <= high, (group.name, spec, low, mean, high)
            assert low < high, (group.name, spec)  # this data is not constant
            assert low >= 0.0 and high <= 1.0
    assert evaluation.intervals == {spec: evaluation.overall.intervals[spec] for spec in requested}


def test_same_input_and_seed_give_bit_identical_intervals() -> None:
    first = _all_intervals(_run(seed=42))
    second = _all_intervals(_run(seed=42))
    assert first.keys() == second.keys()
    for key in first:
        assert [x.hex() for x in first[key]] == [x.hex() for x in second[key]], key


def test_a_different_seed_gives_different_intervals() -> None:
    first = _all_intervals(_run(seed=1))
    second = _all_intervals(_run(seed=2))
    # Degenerate intervals (a constant column, such as mrr with unjudged documents counted
    # relevant when every query's first document is relevant or unjudged) cannot move.
    spread = [key for key in first if first[key][0] < first[key][1]]
    differing = [key for key in spread if first[key] != second[key]]
    # Every non-degenerate interval moves (a tie on both bounds is astronomically unlikely for all).
    assert len(spread) >= len(first) - 4
    assert len(differing) >= len(spread) - 1, differing


def test_group_means_do_not_depend_on_the_seed() -> None:
    a, b = _run(seed=1), _run(seed=99)
    for ga, gb in zip((a.overall, *a.segments), (b.overall, *b.segments), strict=True):
        assert ga.means == gb.means


def test_more_resamples_change_the_interval_but_not_its_scale() -> None:
    few = _run(seed=5, resamples=200).overall.intervals[NDCG]
    many = _run(seed=5, resamples=2000).overall.intervals[NDCG]
    assert few != many
    assert (few[1] - few[0]) == pytest.approx(many[1] - many[0], rel=0.3)


def test_constant_segment_gets_a_degenerate_interval() -> None:
    records = [ranked(f"a{i}", 1, query_type="perfect") for i in range(20)]
    records += [ranked(f"b{i}", 3, query_type="half") for i in range(20)]
    records += [ranked(f"c{i}", 1 + i % 4, query_type="mixed") for i in range(20)]
    evaluation = rankgate.evaluate(
        records, ["ndcg@10", "mrr"], settings=rankgate.Settings(segment_by=("query_type",), seed=3)
    )
    assert evaluation.segment("query_type", "perfect").intervals[NDCG] == (1.0, 1.0)
    assert evaluation.segment("query_type", "half").intervals[NDCG] == (0.5, 0.5)
    # mrr for rank 3: 1/3 every time.
    third = evaluation.segment("query_type", "half").intervals[MRR]
    assert third[0] == third[1] == pytest.approx(1 / 3)
    low, high = evaluation.segment("query_type", "mixed").intervals[MRR]
    assert low < high


def test_bootstrap_interval_edge_cases() -> None:
    assert bootstrap_interval(np.array([0.25, 0.25, 0.25]), seed=9) == (0.25, 0.25)
    assert bootstrap_interval(np.array([0.7]), seed=9) == (0.7, 0.7)
    low, high = bootstrap_interval(np.zeros(0), seed=9)
    assert math.isnan(low) and math.isnan(high)


def test_bootstrap_interval_reproducible_and_seed_sensitive() -> None:
    values = np.random.default_rng(0).uniform(size=300)
    a = bootstrap_interval(values, seed=123, resamples=500)
    b = bootstrap_interval(values, seed=123, resamples=500)
    c = bootstrap_interval(values, seed=124, resamples=500)
    assert a == b
    assert a != c
    assert a[0] < float(np.mean(values)) < a[1]


@pytest.mark.parametrize("distribution", ["uniform", "bernoulli", "exponential"])
def test_bootstrap_width_matches_normal_approximation(distribution: str) -> None:
    rng = np.random.default_rng(2024)
    n = 2000
    values = {
        "uniform": lambda: rng.uniform(size=n),
        "bernoulli": lambda: (rng.uniform(size=n) < 0.3).astype(np.float64),
        "exponential": lambda: rng.exponential(size=n),
    }[distribution]()
    low, high = bootstrap_interval(values, seed=77, resamples=2000)
    expected = 2 * 1.96 * float(np.std(values)) / math.sqrt(n)
    assert high - low == pytest.approx(expected, rel=0.15)
    # Centred on the mean (within a tenth of the width).
    assert (low + high) / 2 == pytest.approx(float(np.mean(values)), abs=0.1 * expected)


def test_pipeline_interval_width_matches_normal_approximation() -> None:
    """Through evaluate: 2000 queries with the relevant document at a random rank 1-4 (mrr 1/rank)."""
    rng = np.random.default_rng(7)
    ranks = rng.integers(1, 5, size=2000)
    records = [ranked(f"q{i}", int(r)) for i, r in enumerate(ranks)]
    evaluation = rankgate.evaluate(records, ["mrr"], settings=rankgate.Settings(seed=11))
    reference = 1.0 / ranks
    low, high = evaluation.intervals[MRR]
    expected = 2 * 1.96 * float(np.std(reference)) / math.sqrt(len(reference))
    assert evaluation.means[MRR] == pytest.approx(float(np.mean(reference)), rel=1e-12)
    assert high - low == pytest.approx(expected, rel=0.15)
    assert low < evaluation.means[MRR] < high


def test_zero_resamples_gives_nan_intervals() -> None:
    evaluation = _run(seed=1, resamples=0)
    for group in (evaluation.overall, *evaluation.segments):
        for low, high in group.intervals.values():
            assert math.isnan(low) and math.isnan(high)


@pytest.mark.parametrize("resamples", [-1, 1.5, True])
def test_bad_resamples_are_refused(resamples: Any) -> None:
    with pytest.raises(rankgate.ConfigError):
        rankgate.Settings(resamples=resamples)


# --- gating on an interval bound -----------------------------------------------------------------
#
# 40 queries, half with the relevant document at rank 1 (mrr 1) and half at rank 2 (mrr 0.5):
# mean 0.75, sd 0.25, standard error 0.25/sqrt(40) = 0.0395. The bootstrap distribution of the mean
# is 0.5 + 0.5 * Binomial(40, 1/2) / 40, whose 2.5% and 97.5% points are 0.675 and 0.825 (+- one
# step of 0.0125). So against 0.7 the mean passes and the lower bound fails; against 0.8 the mean
# fails and the upper bound passes.


def _split_records(**extra: Any) -> list[dict[str, Any]]:
    return [ranked(f"q{i}", 1 + i % 2, **extra) for i in range(40)]


def _gate(threshold: float, gate_on: str, seed: int = 0) -> Any:
    evaluation = rankgate.evaluate(
        _split_records(),
        ["mrr"],
        [f"mrr>={threshold}"],
        settings=rankgate.Settings(seed=seed),
        policy=GatePolicy(gate_on=gate_on),
    )
    (outcome,) = evaluation.gates
    return evaluation, outcome


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_interval_of_the_constructed_data_is_where_the_binomial_says(seed: int) -> None:
    _, outcome = _gate(0.7, "mean", seed)
    assert outcome.mean == pytest.approx(0.75)
    low, high = outcome.interval
    assert 0.65 <= low <= 0.69
    assert 0.81 <= high <= 0.85


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_mean_passes_but_lower_bound_fails(seed: int) -> None:
    evaluation, outcome = _gate(0.7, "mean", seed)
    assert (outcome.passed, outcome.statistic, outcome.value) == (True, "mean", pytest.approx(0.75))
    assert evaluation.passed is True
    evaluation, outcome = _gate(0.7, "lower_bound", seed)
    assert outcome.statistic == "lower_bound"
    assert outcome.value == outcome.interval[0]
    assert outcome.value < 0.7
    assert (outcome.passed, outcome.status) == (False, "fail")
    assert outcome.margin == pytest.approx(outcome.interval[0] - 0.7)
    assert evaluation.passed is False


def test_lower_bound_that_clears_the_threshold_passes() -> None:
    evaluation, outcome = _gate(0.6, "lower_bound")
    assert outcome.value == outcome.interval[0] > 0.6
    assert outcome.passed is True and evaluation.passed is True


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_mean_fails_but_upper_bound_passes(seed: int) -> None:
    evaluation, outcome = _gate(0.8, "mean", seed)
    assert (outcome.passed, outcome.status) == (False, "fail")
    evaluation, outcome = _gate(0.8, "upper_bound", seed)
    assert outcome.statistic == "upper_bound"
    assert outcome.value == outcome.interval[1] > 0.8
    assert (outcome.passed, outcome.status) == (True, "pass")
    assert evaluation.passed is True


def test_upper_bound_that_misses_fails() -> None:
    evaluation, outcome = _gate(0.9, "upper_bound")
    assert outcome.value == outcome.interval[1] < 0.9
    assert outcome.passed is False and evaluation.passed is False


def test_segment_rule_gate_on_overrides_the_policy_for_that_segment() -> None:
    records = _split_records(query_type="a") + [
        {**r, "query_id": "b" + r["query_id"], "query_type": "b"} for r in _split_records()
    ]
    policy = GatePolicy(
        gate_on="lower_bound",
        rules=(SegmentRule(key=SegmentKey("query_type", "b"), gate_on="mean"),),
    )
    evaluation = rankgate.evaluate(
        records,
        ["mrr"],
        ["mrr>=0.7"],
        settings=rankgate.Settings(segment_by=("query_type",)),
        policy=policy,
    )
    by_segment = {o.segment: o for o in evaluation.gates}
    assert by_segment[SegmentKey("query_type", "a")].statistic == "lower_bound"
    assert by_segment[SegmentKey("query_type", "a")].passed is False
    assert by_segment[SegmentKey("query_type", "b")].statistic == "mean"
    assert by_segment[SegmentKey("query_type", "b")].passed is True
    assert by_segment[None].statistic == "lower_bound"


def test_adding_a_metric_or_a_segment_field_leaves_other_intervals_unchanged() -> None:
    records = _records()
    for record in records:
        record["tier"] = "gold" if record["query_id"].endswith(("0", "5")) else "silver"
    base = rankgate.evaluate(
        records, ["ndcg@10"], settings=rankgate.Settings(segment_by=("query_type",), seed=8)
    )
    more = rankgate.evaluate(
        records,
        ["mrr", "ndcg@10", "recall@3"],
        settings=rankgate.Settings(segment_by=("tier", "query_type"), seed=8),
    )
    assert more.overall.intervals[NDCG] == base.overall.intervals[NDCG]
    for group in base.segments:
        assert (
            more.segment(group.key.field, group.key.value).intervals[NDCG] == group.intervals[NDCG]
        )
