"""``rankgate.power`` against statsmodels' ``TTestPower`` (paired: a one-sample t-test on the
per-query differences) and ``TTestIndPower`` (two samples), on per-query values generated from
seeded generators: the queries a change needs, the minimum detectable effect, and compare's cell
MDE, each equal to the oracle to 1e-6 (relative; they agree to ~1e-13)."""

from __future__ import annotations

import math
import warnings
from typing import Literal

import numpy as np
import pytest
from power_oracles import paired_oracle, solved, two_sample_oracle
from statsmodels.stats.power import TTestIndPower, TTestPower

from rankgate.compare_cells import Significance, cells_from_values, flag_cells
from rankgate.power import (
    Spread,
    check_request,
    combined_sd,
    detectable_paired,
    detectable_two_sample,
    effect_size_paired,
    plan,
    power_paired,
    power_two_sample,
    queries_paired,
    queries_two_sample,
)
from rankgate.segments import SegmentKey
from rankgate.spec import parse_metric

REL = 1e-6
NDCG = parse_metric("ndcg@10")


def _per_query(rng: np.random.Generator, queries: int, shift: float = 0.0) -> np.ndarray:
    """Bounded metric-like values: a beta draw per query (most mass high, a long low tail)."""
    return np.clip(rng.beta(4.0, 2.0, size=queries) + shift, 0.0, 1.0)


def _paired_values(seed: int, queries: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    baseline = _per_query(rng, queries)
    # A candidate that moves some queries up, some down, and leaves many tied (as rankers do).
    moved = rng.random(queries) < 0.6
    candidate = np.clip(baseline + moved * rng.normal(0.01, 0.12, size=queries), 0.0, 1.0)
    return baseline, candidate


def _oracle_power(
    oracle: TTestPower | TTestIndPower, effect: float, queries: int, alpha: float, **kwargs: float
) -> float:
    """statsmodels' two-sided power; where scipy's noncentral t CDF returns NaN for the far lower
    tail (large noncentrality), the upper tail alone (one-sided ``larger`` at alpha / 2): the
    lower one is then below 1e-13, and rankgate computes it as the mirrored survival function."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        both = float(oracle.power(effect, queries, alpha, **kwargs))
        if math.isnan(both):
            return float(oracle.power(effect, queries, alpha / 2, **kwargs, alternative="larger"))
    return both


@pytest.mark.parametrize("effect", [0.0, 0.1, 0.35, 0.8, 1.5])
@pytest.mark.parametrize("queries", [2, 5, 30, 400])
@pytest.mark.parametrize("alpha", [0.001, 0.05, 0.2])
def test_power_functions_equal_statsmodels(effect: float, queries: int, alpha: float) -> None:
    assert power_paired(effect, queries, alpha) == pytest.approx(
        _oracle_power(paired_oracle(), effect, queries, alpha), rel=1e-12, abs=1e-13
    )
    for ratio in (0.5, 1.0, 2.5):
        assert power_two_sample(effect, queries, alpha, ratio) == pytest.approx(
            _oracle_power(two_sample_oracle(), effect, queries, alpha, ratio=ratio),
            rel=1e-12,
            abs=1e-13,
        )


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("queries", [25, 120, 900])
@pytest.mark.parametrize("delta", [0.01, 0.03, 0.08])
@pytest.mark.parametrize(("alpha", "power"), [(0.05, 0.8), (0.01, 0.9), (0.1, 0.8)])
def test_paired_plan_equals_ttestpower(
    seed: int, queries: int, delta: float, alpha: float, power: float
) -> None:
    baseline, candidate = _paired_values(seed, queries)
    deltas = candidate - baseline
    sd = float(np.std(deltas, ddof=1))
    spread = Spread(
        None,
        queries,
        queries,
        float(np.std(baseline, ddof=1)),
        float(np.std(candidate, ddof=1)),
        sd,
    )
    found = plan([spread], NDCG, delta=delta, power=power, alpha=alpha)
    paired = found.rows[0]
    assert paired.design == "paired"
    needed = solved(paired_oracle(), effect_size=delta / sd, alpha=alpha, power=power)
    assert paired.queries_needed_exact == pytest.approx(needed, rel=REL)
    assert paired.queries_needed == math.ceil(needed)
    # The rounded-up size reaches the power; one query fewer does not.
    oracle = paired_oracle()
    assert oracle.power(delta / sd, paired.queries_needed, alpha) >= power
    if paired.queries_needed > 2:
        assert oracle.power(delta / sd, paired.queries_needed - 1, alpha) < power
    effect = solved(paired_oracle(), nobs=queries, alpha=alpha, power=power)
    assert paired.detectable == pytest.approx(effect * sd, rel=REL)
    assert oracle.power(paired.detectable / sd, queries, alpha) == pytest.approx(power, abs=1e-9)


@pytest.mark.parametrize("seed", [4, 5])
@pytest.mark.parametrize(
    ("baseline_queries", "candidate_queries"), [(30, 30), (120, 75), (800, 1100)]
)
@pytest.mark.parametrize("delta", [0.01, 0.04])
@pytest.mark.parametrize("alpha", [0.01, 0.05])
def test_unpaired_plan_equals_ttestindpower(
    seed: int, baseline_queries: int, candidate_queries: int, delta: float, alpha: float
) -> None:
    rng = np.random.default_rng(seed)
    baseline = _per_query(rng, baseline_queries)
    # Arms with different spreads, as two rankers on different queries have.
    candidate = np.clip(rng.beta(2.0, 2.0, size=candidate_queries), 0.0, 1.0)
    sd_b, sd_c = float(np.std(baseline, ddof=1)), float(np.std(candidate, ddof=1))
    spread = Spread(None, baseline_queries, candidate_queries, sd_b, sd_c)
    found = plan([spread], NDCG, delta=delta, alpha=alpha)
    (row,) = found.rows
    assert row.design == "unpaired"
    # Equal arms: statsmodels' pooled sd is the mean of the two variances.
    equal = math.sqrt((sd_b**2 + sd_c**2) / 2)
    assert row.sd == pytest.approx(equal, rel=1e-12)
    needed = solved(two_sample_oracle(), effect_size=delta / equal, alpha=alpha, power=0.8)
    assert row.queries_needed_exact == pytest.approx(needed, rel=REL)
    assert row.queries_needed == math.ceil(needed)
    # At the observed arms: statsmodels' effect size with Welch's variance of the difference.
    ratio = candidate_queries / baseline_queries
    welch = math.sqrt(
        (sd_b**2 / baseline_queries + sd_c**2 / candidate_queries)
        * baseline_queries
        * candidate_queries
        / (baseline_queries + candidate_queries)
    )
    effect = solved(
        two_sample_oracle(), nobs1=baseline_queries, ratio=ratio, alpha=alpha, power=0.8
    )
    assert row.detectable == pytest.approx(effect * welch, rel=REL)
    assert combined_sd(sd_b, sd_c, baseline_queries, candidate_queries) == pytest.approx(
        welch, rel=1e-12
    )


@pytest.mark.parametrize("queries", [10, 64, 500])
def test_a_fixed_number_of_queries_gives_its_own_mde(queries: int) -> None:
    spread = Spread(None, 200, 180, 0.2, 0.25, 0.1)
    found = plan([spread], NDCG, queries=queries, alpha=0.05)
    paired, unpaired = found.rows
    assert paired.detectable_baseline_queries == paired.detectable_candidate_queries == queries
    assert paired.detectable == pytest.approx(
        solved(paired_oracle(), nobs=queries, alpha=0.05, power=0.8) * 0.1, rel=REL
    )
    assert unpaired.detectable == pytest.approx(
        solved(two_sample_oracle(), nobs1=queries, ratio=1.0, alpha=0.05, power=0.8)
        * math.sqrt((0.2**2 + 0.25**2) / 2),
        rel=REL,
    )


@pytest.mark.parametrize("design", ["paired", "unpaired"])
@pytest.mark.parametrize("alpha", [0.05, 0.1])
def test_compare_cells_carry_the_statsmodels_mde_at_the_per_cell_level(
    design: Literal["paired", "unpaired"], alpha: float
) -> None:
    """Every cell that is not flagged: MDE = oracle effect size at alpha / (cells in the run),
    times the cell's sd (paired: of the deltas; unpaired: Welch's combination of the arms)."""
    baseline, candidate = _paired_values(7, 300)
    if design == "unpaired":
        candidate = candidate[:240]
    segments = {"kind": ["a" if i % 3 else "b" for i in range(300)]}
    metrics = [NDCG, parse_metric("mrr")]
    values_b = {NDCG: baseline, metrics[1]: np.sqrt(baseline)}
    values_c = {NDCG: candidate, metrics[1]: np.sqrt(candidate)}
    significance = Significance(alpha=alpha)
    raw = cells_from_values(
        "c",
        metrics,
        values_b,
        values_c,
        design=design,
        segments=[SegmentKey("kind", "a"), SegmentKey("kind", "b")],
        baseline_segments=segments,
        candidate_segments={"kind": segments["kind"][: len(candidate)]},
        significance=significance,
        resamples=10,
    )
    (cells,) = flag_cells([raw], significance)
    level = alpha / len(cells)
    checked = 0
    for cell in cells:
        assert cell.detectable_alpha == pytest.approx(level)
        if cell.flag is not None:
            assert cell.minimum_detectable_effect is None
            continue
        assert cell.minimum_detectable_effect is not None
        n_b, n_c = cell.baseline_queries, cell.candidate_queries
        assert n_b is not None and n_c is not None
        if design == "paired":
            assert cell.delta_sd is not None
            effect = solved(paired_oracle(), nobs=n_b, alpha=level, power=0.8)
            expected = effect * cell.delta_sd
        else:
            assert cell.baseline_sd is not None and cell.candidate_sd is not None
            effect = solved(two_sample_oracle(), nobs1=n_b, ratio=n_c / n_b, alpha=level, power=0.8)
            expected = effect * combined_sd(cell.baseline_sd, cell.candidate_sd, n_b, n_c)
        assert cell.minimum_detectable_effect == pytest.approx(expected, rel=REL)
        checked += 1
    assert checked >= 3


def test_detectable_is_none_without_spread_or_queries() -> None:
    assert detectable_paired(0.0, 50, power=0.8, alpha=0.05) is None
    assert detectable_paired(0.1, 1, power=0.8, alpha=0.05) is None
    assert detectable_two_sample(0.0, 0.0, 40, 40, power=0.8, alpha=0.05) is None
    assert detectable_two_sample(0.1, 0.1, 1, 40, power=0.8, alpha=0.05) is None
    # One arm without spread still has a variance of the difference.
    assert detectable_two_sample(0.0, 0.2, 40, 40, power=0.8, alpha=0.05) is not None


def test_tiny_and_huge_plans() -> None:
    # A change far larger than the spread: the smallest test there is.
    assert queries_paired(0.5, 0.01, power=0.8, alpha=0.05) == 2.0
    # A change far below it: past MAX_QUERIES.
    assert queries_paired(1e-7, 0.3, power=0.8, alpha=0.05) is None
    assert queries_two_sample(1e-7, 0.3, 0.3, power=0.8, alpha=0.05) is None
    # Large samples stay finite where the CDF's far lower tail is NaN in scipy.
    assert 0 < effect_size_paired(10**7, power=0.8, alpha=0.05) < 1e-3


@pytest.mark.parametrize(
    ("delta", "power", "alpha", "queries", "message"),
    [
        (0.0, 0.8, 0.05, None, "delta must be a number > 0"),
        (-0.01, 0.8, 0.05, None, "delta must be a number > 0"),
        (0.02, 1.0, 0.05, None, "power must be a number between 0 and 1"),
        (0.02, 0.0, 0.05, None, "power must be a number between 0 and 1"),
        (0.02, 0.8, 0.0, None, "alpha must be a number between 0 and 1"),
        (0.02, 0.04, 0.05, None, "must be above alpha"),
        (0.02, 0.8, 0.05, 1, "queries must be a whole number from 2"),
        (math.nan, 0.8, 0.05, None, "delta must be a number > 0"),
    ],
)
def test_bad_requests_are_refused(
    delta: float, power: float, alpha: float, queries: int | None, message: str
) -> None:
    from rankgate.errors import ConfigError

    with pytest.raises(ConfigError, match=message):
        check_request(delta, power, alpha, queries)
