"""Unpaired comparison (traffic-split A/B tests): Welch's t-test against scipy, flags only where a
difference was injected, the false-positive rate under no difference, ``auto``'s choice, the CLI."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from scipy import stats as scipy_stats

from rankgate import Settings, Significance, compare, parse_metric
from rankgate.compare import AUTO_PAIRED_SHARE, cells_from_values, flag_cells
from rankgate.segments import SegmentKey
from rankgate.stats import NORMAL_FROM_QUERIES, cohens_d, difference_interval, welch_t_test

KINDS = ("factual", "navigational", "how_to")


def variant_traces(
    rng: np.random.Generator, prefix: str, queries: int, worse_kind: str | None = None
) -> list[dict[str, Any]]:
    """Queries drawn from one distribution: the relevant document's rank is geometric (mean rank
    about 2.5); in ``worse_kind`` queries it sits five ranks lower. Each query has its own ID, so
    two variants share none (a traffic split)."""
    rows = []
    for number in range(queries):
        kind = KINDS[int(rng.integers(len(KINDS)))]
        rank = int(rng.geometric(0.4)) - 1
        if kind == worse_kind:
            rank += 5
        docs = [f"d{i}" for i in range(20)]
        relevant = docs[min(rank, 19)]
        rows.append(
            {
                "query_id": f"{prefix}{number}",
                "retrieved_ids": docs,
                "relevant_ids": [relevant],
                "kind": kind,
            }
        )
    return rows


SEGMENTED = Settings(segment_by=("kind",))


def test_injected_difference_is_flagged_in_its_segment_only() -> None:
    rng = np.random.default_rng(11)
    control = variant_traces(rng, "a", 900)
    treatment = variant_traces(rng, "b", 900, worse_kind="how_to")
    comparison = compare(
        control, treatment, metrics=["mrr", "ndcg@10"], settings=SEGMENTED, pairing="unpaired"
    )
    flagged = {(cell.group, str(cell.metric)) for cell in comparison.regressions}
    # The overall group holds the how_to queries, so it drops too; no other segment does.
    assert flagged == {
        ("kind=how_to", "mrr"),
        ("kind=how_to", "ndcg@10"),
        ("overall", "mrr"),
        ("overall", "ndcg@10"),
    }
    assert not comparison.improvements and not comparison.passed
    assert all(cell.design == "unpaired" and cell.wins is None for cell in comparison.cells)
    result = comparison.results[0]
    assert result.pairing.design == "unpaired" and result.pairing.paired == 0


def test_no_difference_flags_at_most_the_stated_false_positive_rate() -> None:
    # 200 A/A experiments: each overall MRR cell is one test at alpha 0.05 (one cell, so the
    # correction changes nothing). The flag count is Binomial(200, <= 0.05) when the test holds
    # its level; 20 or more has probability < 0.3% under 0.05.
    alpha = 0.05
    runs = 200
    flagged = 0
    pvalues = []
    for seed in range(runs):
        rng = np.random.default_rng(1000 + seed)
        before, after = variant_traces(rng, "a", 150), variant_traces(rng, "b", 150)
        comparison = compare(
            before,
            after,
            metrics=["mrr"],
            significance=Significance(alpha=alpha),
            settings=Settings(resamples=50),
            pairing="unpaired",
        )
        (cell,) = comparison.cells
        flagged += cell.flag is not None
        pvalues.append(cell.p_value)
    bound = int(scipy_stats.binom.ppf(0.997, runs, alpha))
    assert flagged <= bound
    # And the p-values are spread over (0, 1), as under the null, not piled at one end.
    assert 0.3 < float(np.median(pvalues)) < 0.7


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_welch_p_values_equal_scipy(seed: int) -> None:
    rng = np.random.default_rng(seed)
    before = rng.beta(2, 3, size=int(rng.integers(5, 300)))
    after = rng.beta(2.2, 3, size=int(rng.integers(5, 300))) * rng.uniform(0.5, 1.0)
    expected = scipy_stats.ttest_ind(before, after, equal_var=False).pvalue
    assert welch_t_test(before, after) == pytest.approx(expected, rel=1e-10, abs=1e-15)


def test_cell_p_values_equal_scipy_on_the_evaluated_values() -> None:
    rng = np.random.default_rng(5)
    comparison = compare(
        variant_traces(rng, "a", 300),
        variant_traces(rng, "b", 250, worse_kind="factual"),
        metrics=["mrr"],
        settings=SEGMENTED,
        pairing="unpaired",
    )
    result = comparison.results[0]
    spec = parse_metric("mrr")
    before, after = result.baseline.values[spec], result.candidate.values[spec]
    overall = comparison.cell("mrr")
    assert overall.p_value == pytest.approx(
        scipy_stats.ttest_ind(before, after, equal_var=False).pvalue, rel=1e-10
    )
    assert (overall.baseline_queries, overall.candidate_queries) == (300, 250)
    assert overall.queries == 550
    assert overall.delta == pytest.approx(after.mean() - before.mean())
    kinds_before = np.array(result.segments["kind"])
    kinds_after = np.array(result.candidate_segments["kind"])
    cell = comparison.cell("mrr", "kind=factual")
    expected = scipy_stats.ttest_ind(
        before[kinds_before == "factual"], after[kinds_after == "factual"], equal_var=False
    ).pvalue
    assert cell.p_value == pytest.approx(expected, rel=1e-10)
    assert cell.interval[0] <= cell.delta <= cell.interval[1]


def test_difference_interval_covers_and_switches_to_normal_at_size() -> None:
    rng = np.random.default_rng(3)
    before, after = rng.random(400), rng.random(300) + 0.05
    low, high = difference_interval(before, after, seed=1, resamples=2000)
    half = 1.96 * math.sqrt(before.var(ddof=1) / 400 + after.var(ddof=1) / 300)
    difference = after.mean() - before.mean()
    # The bootstrap interval agrees with the normal one to within its Monte Carlo error.
    assert low == pytest.approx(difference - half, abs=0.01)
    assert high == pytest.approx(difference + half, abs=0.01)
    big_before = rng.random(NORMAL_FROM_QUERIES)
    big_after = rng.random(NORMAL_FROM_QUERIES)
    low, high = difference_interval(big_before, big_after, seed=1)
    half = 1.959963984540054 * math.sqrt(
        big_before.var(ddof=1) / NORMAL_FROM_QUERIES + big_after.var(ddof=1) / NORMAL_FROM_QUERIES
    )
    middle = big_after.mean() - big_before.mean()
    assert (low, high) == pytest.approx((middle - half, middle + half), rel=1e-9)


def test_cohens_d_by_hand() -> None:
    # Means 1 and 2, both variances 1 (values 0,1,2 and 1,2,3): pooled sd 1, so d = 1.
    assert cohens_d(np.array([0.0, 1.0, 2.0]), np.array([1.0, 2.0, 3.0])) == pytest.approx(1.0)
    assert cohens_d(np.array([0.5, 0.5]), np.array([0.5, 0.5])) == 0.0


def test_cells_from_values_is_the_engine_neutral_entry() -> None:
    rng = np.random.default_rng(2)
    spec = parse_metric("mrr")
    before = {spec: rng.random(60)}
    after = {spec: rng.random(80) * 0.5}
    kinds_before = ["x" if i % 2 else "y" for i in range(60)]
    kinds_after = ["x" if i % 3 else "y" for i in range(80)]
    raw = cells_from_values(
        "cand",
        [spec],
        before,
        after,
        design="unpaired",
        segments=[SegmentKey("kind", "x"), SegmentKey("kind", "y")],
        baseline_segments={"kind": kinds_before},
        candidate_segments={"kind": kinds_after},
    )
    assert [cell.group for cell in raw] == ["overall", "kind=x", "kind=y"]
    x = raw[1]
    chosen_before = before[spec][np.array(kinds_before) == "x"]
    chosen_after = after[spec][np.array(kinds_after) == "x"]
    assert (x.baseline_queries, x.candidate_queries) == (30, 53)
    assert x.p_value == pytest.approx(
        scipy_stats.ttest_ind(chosen_before, chosen_after, equal_var=False).pvalue, rel=1e-10
    )
    (finished,) = flag_cells([raw], Significance())
    assert finished[0].flag == "regression"
    assert finished[0].p_adjusted == pytest.approx(min(1.0, 3 * raw[0].p_value))


def test_auto_pairs_shared_queries_and_explains_its_choice() -> None:
    rng = np.random.default_rng(8)
    base = variant_traces(rng, "q", 100)
    replay = [dict(row, retrieved_ids=row["retrieved_ids"][::-1]) for row in base]
    paired = compare(base, replay, metrics=["mrr"], pairing="auto").results[0].pairing
    assert paired.design == "paired" and paired.shared_share == 1.0
    assert "100% of the smaller side's queries are on both sides" in paired.reason
    split = variant_traces(rng, "other", 100)
    mixed = split[:60] + replay[:30]  # a third of the smaller side shared: below the threshold
    unpaired = compare(base, mixed, metrics=["mrr"], pairing="auto").results[0].pairing
    assert unpaired.design == "unpaired"
    assert unpaired.shared_share == pytest.approx(30 / 90)
    assert AUTO_PAIRED_SHARE > 30 / 90
    at_threshold = split[:40] + replay[:40]  # exactly half of 80: auto pairs
    assert compare(base, at_threshold, metrics=["mrr"], pairing="auto").results[0].design == (
        "paired"
    )
    assert f"auto pairs from {AUTO_PAIRED_SHARE:.0%}" in unpaired.reason


def test_a_variant_field_splits_one_source_into_unpaired_sides() -> None:
    rng = np.random.default_rng(4)
    rows = [dict(row, arm="control") for row in variant_traces(rng, "a", 200)]
    rows += [dict(row, arm="treatment") for row in variant_traces(rng, "b", 200, "factual")]
    comparison = compare(
        rows, "control", "treatment", variant_field="arm", metrics=["mrr"], pairing="auto"
    )
    result = comparison.results[0]
    assert result.pairing.design == "unpaired" and result.pairing.shared_share == 0.0
    assert comparison.read == {"control": 200, "treatment": 200}
    per_query = result.per_query()
    assert len(per_query) == 400 and {row["side"] for row in per_query} == {
        "baseline",
        "candidate",
    }
