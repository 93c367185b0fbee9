"""The stated power holds: 1,000 seeded experiments at the planned size (or with a true change of
the minimum detectable effect) detect the change 80% +/- 3% of the time, under the tests compare
runs (the paired t-test; Welch's t-test unpaired).

Each experiment is one row of a matrix drawn from a seeded ``numpy.random.Generator``, and the
tests are computed for all rows at once; the first rows are checked against ``rankgate.stats``'
own tests, so the rates are those of compare's tests and not of a re-implementation. With 1,000
experiments the binomial standard error at 80% is 1.3 points, so +/- 3 points is a 2.4-sigma band;
the seeds are fixed, so the rates are the same on every run and machine.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
from scipy import special

from rankgate.power import (
    detectable_paired,
    detectable_two_sample,
    queries_paired,
    queries_two_sample,
)
from rankgate.stats import paired_t_test, welch_t_test

EXPERIMENTS = 1000
TARGET = 0.8
BAND = 0.03
CHECKED_AGAINST_LIBRARY = 25

Draw = Callable[[np.random.Generator, tuple[int, int]], np.ndarray]


def _paired_detection(draw: Draw, queries: int, alpha: float, seed: int) -> float:
    """Share of experiments whose paired t-test rejects at ``alpha`` in the direction of the change."""
    rng = np.random.default_rng(seed)
    deltas = draw(rng, (EXPERIMENTS, queries))
    mean = deltas.mean(axis=1)
    spread = deltas.std(axis=1, ddof=1)
    t = mean / (spread / math.sqrt(queries))
    p = np.minimum(1.0, 2.0 * special.stdtr(queries - 1, -np.abs(t)))
    for row in range(CHECKED_AGAINST_LIBRARY):
        assert p[row] == pytest.approx(paired_t_test(deltas[row]), rel=1e-9, abs=1e-15)
    return float(np.mean((p < alpha) & (mean > 0)))


def _welch_detection(
    baseline_queries: int,
    candidate_queries: int,
    baseline_sd: float,
    candidate_sd: float,
    delta: float,
    alpha: float,
    seed: int,
) -> float:
    rng = np.random.default_rng(seed)
    baseline = rng.normal(0.5, baseline_sd, (EXPERIMENTS, baseline_queries))
    candidate = rng.normal(0.5 + delta, candidate_sd, (EXPERIMENTS, candidate_queries))
    share_b = baseline.var(axis=1, ddof=1) / baseline_queries
    share_c = candidate.var(axis=1, ddof=1) / candidate_queries
    difference = candidate.mean(axis=1) - baseline.mean(axis=1)
    t = difference / np.sqrt(share_b + share_c)
    df = (share_b + share_c) ** 2 / (
        share_b**2 / (baseline_queries - 1) + share_c**2 / (candidate_queries - 1)
    )
    p = np.minimum(1.0, 2.0 * special.stdtr(df, -np.abs(t)))
    for row in range(CHECKED_AGAINST_LIBRARY):
        assert p[row] == pytest.approx(
            welch_t_test(baseline[row], candidate[row]), rel=1e-9, abs=1e-15
        )
    return float(np.mean((p < alpha) & (difference > 0)))


def _normal(delta: float, sd: float) -> Draw:
    return lambda rng, shape: rng.normal(delta, sd, shape)


def _mostly_ties(delta: float, moved: float, sd: float) -> Draw:
    """Deltas as rankers give them: most queries tied (delta 0 before the shift), the rest spread."""

    def draw(rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
        changed = rng.random(shape) < moved
        return np.where(changed, rng.normal(0.0, sd, shape), 0.0) + delta

    return draw


@pytest.mark.parametrize(
    ("name", "draw", "sd", "delta", "alpha", "seed"),
    [
        ("normal deltas", _normal(0.03, 0.15), 0.15, 0.03, 0.05, 1),
        ("normal deltas, alpha 0.01", _normal(0.05, 0.2), 0.2, 0.05, 0.01, 2),
        # 60% ties: sd = sqrt(0.4) * 0.2; the t-test's power rests on the variance alone.
        ("mostly ties", _mostly_ties(0.03, 0.4, 0.2), math.sqrt(0.4) * 0.2, 0.03, 0.05, 3),
    ],
)
def test_paired_plan_detects_the_change_at_the_stated_power(
    name: str, draw: Draw, sd: float, delta: float, alpha: float, seed: int
) -> None:
    exact = queries_paired(delta, sd, power=TARGET, alpha=alpha)
    assert exact is not None
    queries = math.ceil(exact)
    rate = _paired_detection(draw, queries, alpha, seed)
    assert abs(rate - TARGET) <= BAND, f"{name}: {queries} queries detected {rate:.1%}"


@pytest.mark.parametrize(
    ("baseline_sd", "candidate_sd", "delta", "alpha", "seed"),
    [(0.2, 0.3, 0.04, 0.05, 4), (0.25, 0.25, 0.06, 0.01, 5)],
)
def test_unpaired_plan_detects_the_change_at_the_stated_power(
    baseline_sd: float, candidate_sd: float, delta: float, alpha: float, seed: int
) -> None:
    exact = queries_two_sample(delta, baseline_sd, candidate_sd, power=TARGET, alpha=alpha)
    assert exact is not None
    per_arm = math.ceil(exact)
    rate = _welch_detection(per_arm, per_arm, baseline_sd, candidate_sd, delta, alpha, seed)
    assert abs(rate - TARGET) <= BAND, f"{per_arm} per arm detected {rate:.1%}"


def test_a_true_change_of_the_paired_mde_is_detected_at_the_stated_power() -> None:
    effect = detectable_paired(0.15, 60, power=TARGET, alpha=0.05)
    assert effect is not None
    rate = _paired_detection(_normal(effect, 0.15), 60, 0.05, seed=6)
    assert abs(rate - TARGET) <= BAND, f"MDE {effect:.4f} on 60 queries detected {rate:.1%}"


def test_a_true_change_of_the_unpaired_mde_is_detected_at_the_stated_power() -> None:
    # Unequal arms and variances, at a per-cell level such as compare's alpha / m.
    effect = detectable_two_sample(0.2, 0.3, 150, 90, power=TARGET, alpha=0.01)
    assert effect is not None
    rate = _welch_detection(150, 90, 0.2, 0.3, effect, 0.01, seed=7)
    assert abs(rate - TARGET) <= BAND, f"MDE {effect:.4f} on 150+90 queries detected {rate:.1%}"


def test_half_the_planned_queries_fall_well_short() -> None:
    """The band is not trivially wide: half the planned size detects far less often."""
    exact = queries_paired(0.03, 0.15, power=TARGET, alpha=0.05)
    assert exact is not None
    rate = _paired_detection(_normal(0.03, 0.15), math.ceil(exact) // 2, 0.05, seed=8)
    assert rate < TARGET - 0.2
