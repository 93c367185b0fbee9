"""PPI on a case small enough to work out by hand, an exhaustive check of the finite-population
variance, the paired difference against scipy's one-sample t-test, and the refusals.

The hand case (N = 8 queries, the first n = 4 labeled):

    judge j = 0.5 0.7 0.9 0.7 | 0.6 0.8 0.4 0.8     mean_N(j) = 5.4 / 8 = 0.675
    human h = 0.2 0.4 0.7 0.7                        mean_n(h) = 0.5, mean_n(j) = 0.7
    f = n / N = 0.5, so the finite-population correction 1 - f = 0.5

Deviations on the sample: j - 0.7 = -0.2 0 0.2 0, h - 0.5 = -0.3 -0.1 0.2 0.2;
sum (j - j̄)^2 = 0.08, sum (j - j̄)(h - h̄) = 0.06 + 0 + 0.04 + 0 = 0.10, sum (h - h̄)^2 = 0.18.

Classic PPI (lambda = 1): r = h - j = -0.3 -0.3 -0.2 0.0, rectifier mean(r) = -0.2,
theta = 0.675 - 0.2 = 0.475; sum (r - r̄)^2 = 0.01 + 0.01 + 0 + 0.04 = 0.06, s_r^2 = 0.06 / 3 = 0.02,
Var = 0.5 * 0.02 / 4 = 0.0025, se = 0.05; t(3, 0.975) = 3.182446 (any t table), half-width
0.1591223.

PPI++ (tuned): lambda = 0.10 / 0.08 = 1.25; r = h - 1.25 j = -0.425 -0.475 -0.425 -0.175,
rectifier = -1.5 / 4 = -0.375, theta = 1.25 * 0.675 - 0.375 = 0.46875 (= 0.5 - 1.25 * (0.7 -
0.675)); r - r̄ = -0.05 -0.1 -0.05 0.2, sum of squares 0.055, s_e^2 = 0.055 / (n - 2) = 0.0275,
Var = 0.5 * 0.0275 / 4 = 0.0034375, se = 0.0586302; t(2, 0.975) = 4.302653, half-width 0.2522657.

Human-only: 0.5, s_h^2 = 0.18 / 3 = 0.06, Var = 0.5 * 0.06 / 4 = 0.0075, se = 0.0866025,
half-width 3.182446 * 0.0866025 = 0.2756079.

Judge-only: 0.675, deviations from 0.675 squared sum to 0.195, s_j^2 = 0.195 / 7, Var = s_j^2 / 8 =
0.00348214, se = 0.0590097; t(7, 0.975) = 2.364624, half-width 0.1395357.

Effective queries 1 / (1/N + Var_ppi / s_h^2): classic 1 / (0.125 + 0.0025 / 0.06) = 1 / (1/6) = 6;
tuned 1 / (0.125 + 0.0034375 / 0.06) = 1 / (24/192 + 11/192) = 192 / 35 = 5.4857.

Estimand "population", classic: Var = s_h^2 / N + 0.0025 = 0.0075 + 0.0025 = 0.01, se = 0.1,
half-width 0.3182446; effective queries s_h^2 / Var = 6 (the same as above, as it must be).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats as scipy_stats

from rankgate.ppi import (
    DeltaEstimate,
    Estimate,
    PPIDeltaResult,
    PPIResult,
    ppi_mean,
    ppi_paired_delta,
)
from rankgate.stats import paired_t_test

JUDGE = [0.5, 0.7, 0.9, 0.7, 0.6, 0.8, 0.4, 0.8]
LABELED = [0, 1, 2, 3]
HUMAN = [0.2, 0.4, 0.7, 0.7]
TOL = 1e-6  # the t quantiles above are table values to 7 significant figures


def _interval(estimate: Estimate, mean: float, std_error: float, half: float) -> None:
    assert estimate.mean == pytest.approx(mean, abs=1e-12)
    assert estimate.std_error == pytest.approx(std_error, abs=1e-7)
    assert estimate.low == pytest.approx(mean - half, abs=TOL)
    assert estimate.high == pytest.approx(mean + half, abs=TOL)


def test_classic_ppi_by_hand() -> None:
    result = ppi_mean(JUDGE, LABELED, HUMAN, tune=False)
    assert isinstance(result, PPIResult)
    assert result.lambda_ == 1.0
    assert result.rectifier == pytest.approx(-0.2, abs=1e-12)
    _interval(result.ppi, 0.475, 0.05, 0.1591223)
    assert result.ppi.degrees_of_freedom == 3
    assert result.ppi.queries == 8
    _interval(result.human_only, 0.5, 0.0866025, 0.2756079)
    assert (result.human_only.queries, result.human_only.degrees_of_freedom) == (4, 3)
    _interval(result.judge_only, 0.675, 0.0590097, 0.1395357)
    assert (result.judge_only.queries, result.judge_only.degrees_of_freedom) == (8, 7)
    assert result.effective_queries == pytest.approx(6.0, abs=1e-9)
    assert (result.labeled, result.total, result.confidence) == (4, 8, 0.95)
    assert result.estimand == "evaluated"


def test_tuned_ppi_by_hand() -> None:
    result = ppi_mean(JUDGE, LABELED, HUMAN)
    assert result.lambda_ == pytest.approx(1.25, abs=1e-12)
    assert result.rectifier == pytest.approx(-0.375, abs=1e-12)
    _interval(result.ppi, 0.46875, 0.0586302, 0.2522657)
    assert result.ppi.degrees_of_freedom == 2
    assert result.effective_queries == pytest.approx(192 / 35, abs=1e-9)
    # The human-only and judge-only estimates do not depend on lambda.
    _interval(result.human_only, 0.5, 0.0866025, 0.2756079)


def test_population_estimand_by_hand() -> None:
    result = ppi_mean(JUDGE, LABELED, HUMAN, tune=False, estimand="population")
    _interval(result.ppi, 0.475, 0.1, 0.3182446)
    _interval(result.human_only, 0.5, math.sqrt(0.06 / 4), 3.182446 * math.sqrt(0.015))
    assert result.effective_queries == pytest.approx(6.0, abs=1e-9)


def test_a_mask_and_indices_in_any_order_give_the_same_result() -> None:
    by_index = ppi_mean(JUDGE, LABELED, HUMAN)
    by_mask = ppi_mean(JUDGE, np.arange(8) < 4, HUMAN)
    order = [2, 0, 3, 1]
    shuffled = ppi_mean(JUDGE, [LABELED[i] for i in order], [HUMAN[i] for i in order])
    for other in (by_mask, shuffled):
        assert other.ppi.mean == pytest.approx(by_index.ppi.mean, abs=1e-14)
        assert other.ppi.low == pytest.approx(by_index.ppi.low, abs=1e-14)
        assert other.lambda_ == pytest.approx(by_index.lambda_, abs=1e-14)


def test_the_finite_population_variance_is_exact_over_every_sample() -> None:
    """Over all C(8, 4) = 70 samples of a population whose human values are all known, classic
    PPI's estimate averages to the human mean exactly (it is unbiased) and its estimated variance
    averages to the actual variance of the estimate across samples: (1 - n/N) s_r^2 / n is
    unbiased for Var(theta) under simple random sampling without replacement (Cochran 1977,
    theorems 2.1, 2.2 and 2.4). Without the correction it would average to twice the variance."""
    human_all = np.array([0.2, 0.4, 0.7, 0.7, 0.5, 0.6, 0.3, 0.9])
    thetas, variances = [], []
    for sample in itertools.combinations(range(8), 4):
        picked = list(sample)
        result = ppi_mean(JUDGE, picked, human_all[picked], tune=False)
        thetas.append(result.ppi.mean)
        variances.append(result.ppi.std_error**2)
    assert np.mean(thetas) == pytest.approx(human_all.mean(), abs=1e-12)
    assert np.mean(variances) == pytest.approx(np.var(thetas), rel=1e-9)


def test_every_query_labeled_gives_the_human_mean_exactly() -> None:
    human_all = [0.2, 0.4, 0.7, 0.7, 0.5, 0.6, 0.3, 0.9]
    result = ppi_mean(JUDGE, np.ones(8, dtype=bool), human_all)
    assert result.ppi.mean == result.human_only.mean == np.mean(human_all)
    assert result.ppi.low == result.ppi.high == result.ppi.mean
    assert result.human_only.low == result.human_only.high
    assert result.effective_queries == 8.0
    # The population's mean is still uncertain when every evaluated query is labeled.
    population = ppi_mean(JUDGE, np.ones(8, dtype=bool), human_all, estimand="population")
    assert population.ppi.low < population.ppi.mean < population.ppi.high


def test_a_judge_constant_on_the_sample_gets_no_weight() -> None:
    judge = [0.5, 0.5, 0.5, 0.5, 0.9, 0.1, 0.3, 0.7]
    result = ppi_mean(judge, LABELED, HUMAN)
    assert result.lambda_ == 0.0
    assert result.ppi.mean == pytest.approx(result.human_only.mean, abs=1e-15)
    assert result.ppi.degrees_of_freedom == 3


def test_a_perfect_judge_leaves_no_sampling_error() -> None:
    result = ppi_mean(JUDGE, LABELED, JUDGE[:4], tune=False)
    assert result.rectifier == 0.0
    assert result.ppi.mean == pytest.approx(np.mean(JUDGE), abs=1e-15)
    assert result.ppi.low == result.ppi.high
    assert result.effective_queries == 8.0


def _delta_inputs() -> tuple[list[float], list[float], list[float], list[float]]:
    """Two systems whose differences b - a are JUDGE (judge) and HUMAN (human) above."""
    judge_a = [0.25] * 8
    judge_b = [0.25 + value for value in JUDGE]
    human_a = [0.125] * 4
    human_b = [0.125 + value for value in HUMAN]
    return judge_a, judge_b, human_a, human_b


def test_the_paired_delta_is_ppi_on_the_differences() -> None:
    judge_a, judge_b, human_a, human_b = _delta_inputs()
    result = ppi_paired_delta(
        judge_a, judge_b, LABELED, human_a, human_b, tune=False, estimand="evaluated"
    )
    assert isinstance(result, PPIDeltaResult)
    assert isinstance(result.ppi, DeltaEstimate)
    _interval(result.ppi, 0.475, 0.05, 0.1591223)
    # t = 0.475 / 0.05 = 9.5 on 3 degrees of freedom.
    assert result.ppi.p_value == pytest.approx(2 * scipy_stats.t.sf(9.5, 3), rel=1e-6)
    assert result.effective_queries == pytest.approx(6.0, abs=1e-9)
    assert result.estimand == "evaluated"


def test_the_delta_p_values_are_one_sample_t_tests_where_they_should_be() -> None:
    """With the population estimand the human-only test is the one-sample t-test on the labeled
    differences, and the judge-only test is compare's paired t-test on every query."""
    rng = np.random.default_rng(11)
    judge_a, judge_b = rng.uniform(0, 1, 200), rng.uniform(0, 1, 200) + 0.05
    labeled = rng.choice(200, 40, replace=False)
    human_a = judge_a[labeled] + rng.normal(0, 0.2, 40)
    human_b = judge_b[labeled] + rng.normal(0, 0.2, 40)
    result = ppi_paired_delta(judge_a, judge_b, labeled, human_a, human_b)
    assert result.estimand == "population"
    human = scipy_stats.ttest_1samp(human_b - human_a, 0.0)
    judge = scipy_stats.ttest_1samp(judge_b - judge_a, 0.0)
    assert result.human_only.p_value == pytest.approx(human.pvalue, rel=1e-9)
    assert result.judge_only.p_value == pytest.approx(judge.pvalue, rel=1e-9)
    assert result.judge_only.p_value == pytest.approx(paired_t_test(judge_b - judge_a), rel=1e-9)
    low, high = human.confidence_interval(0.95)
    assert (result.human_only.low, result.human_only.high) == pytest.approx((low, high), rel=1e-9)
    # PPI's estimate is consistent with its interval and its p-value.
    assert (result.ppi.p_value < 0.05) == (not result.ppi.low <= 0.0 <= result.ppi.high)


def test_no_difference_at_all_gives_p_one() -> None:
    values = [0.1, 0.4, 0.3, 0.8, 0.6]
    result = ppi_paired_delta(values, values, [0, 2, 4], [0.2, 0.3, 0.5], [0.2, 0.3, 0.5])
    for estimate in (result.judge_only, result.human_only, result.ppi):
        assert (estimate.mean, estimate.p_value) == (0.0, 1.0)
        assert estimate.low == estimate.high == 0.0


@pytest.mark.parametrize(
    ("judge", "labeled", "human", "options", "message"),
    [
        (JUDGE, [0], [0.2], {}, "at least 2 human-labeled queries to estimate a variance, got 1"),
        (JUDGE, [], [], {}, "at least 2 human-labeled queries to estimate a variance, got 0"),
        (JUDGE, [0, 1], [0.2, 0.4], {}, "tuning lambda needs at least 3"),
        (JUDGE, LABELED, [0.2, 0.4, float("nan"), 0.7], {}, "human_values must be finite, got nan"),
        ([math.inf, *JUDGE[1:]], LABELED, HUMAN, {}, "judge_values must be finite, got inf"),
        (JUDGE, LABELED, HUMAN[:3], {}, "4 labeled, got 3 human values"),
        (JUDGE, [True] * 4, HUMAN, {}, "one entry per query (8), got 4"),
        (JUDGE, [0, 1, 2, 8], HUMAN, {}, "must be in 0..7 (one per query), got 8"),
        (JUDGE, [0, 1, 2, -1], HUMAN, {}, "got -1"),
        (JUDGE, [0, 1, 1, 3], HUMAN, {}, "must be distinct (a sample without replacement), got 1"),
        (JUDGE, [0.0, 1.0, 2.0, 3.0], HUMAN, {}, "boolean mask or integer indices"),
        ([JUDGE], LABELED, HUMAN, {}, "judge_values must be one value per query (1-D)"),
        (JUDGE, LABELED, HUMAN, {"confidence": 1.0}, "confidence must be a number in (0, 1)"),
        (JUDGE, LABELED, HUMAN, {"estimand": "queries"}, "estimand must be one of"),
        (["a", *JUDGE[1:]], LABELED, HUMAN, {}, "judge_values must be numbers"),
    ],
)
def test_refusals(
    judge: object, labeled: object, human: object, options: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError) as raised:
        ppi_mean(judge, labeled, human, **options)  # type: ignore[arg-type]
    assert message in str(raised.value)


def test_two_labeled_queries_are_enough_without_tuning() -> None:
    result = ppi_mean(JUDGE, [0, 1], [0.2, 0.4], tune=False)
    assert result.ppi.degrees_of_freedom == 1
    assert math.isfinite(result.ppi.low)


def test_paired_refusals_name_the_arguments() -> None:
    judge_a, judge_b, human_a, human_b = _delta_inputs()
    with pytest.raises(ValueError, match=r"judge_a and judge_b .* got 8 and 7"):
        ppi_paired_delta(judge_a, judge_b[:7], LABELED, human_a, human_b)
    with pytest.raises(ValueError, match=r"human_a and human_b .* got 4 and 3"):
        ppi_paired_delta(judge_a, judge_b, LABELED, human_a, human_b[:3])
    with pytest.raises(ValueError, match="human_b must be finite"):
        ppi_paired_delta(judge_a, judge_b, LABELED, human_a, [*human_b[:3], math.nan])
