"""The comparison statistics against scipy (same data, same seeds) and hand-computed cases."""

from __future__ import annotations

import math
import os
import subprocess
import sys

import numpy as np
import pytest
import scipy.stats as st

from rankgate.stats import (
    adjust_pvalues,
    bca_interval,
    bootstrap_interval,
    cohens_dz,
    paired_t_test,
    sign_flip_test,
)

SIZES = [2, 3, 5, 12, 40, 250]


def deltas_for(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    # Rounded like metric deltas, so ties and repeated values occur.
    return np.round(rng.normal(0.02, 0.2, n), 3)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("seed", [1, 29])
def test_t_test_matches_scipy_ttest_rel(n: int, seed: int) -> None:
    before = np.random.default_rng(seed).uniform(0, 1, n)
    after = before + deltas_for(n, seed)
    expected = st.ttest_rel(after, before).pvalue
    assert paired_t_test(after - before) == pytest.approx(expected, rel=1e-9, abs=1e-15)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("method", ["BCa", "percentile"])
def test_bootstrap_intervals_match_scipy_bootstrap(n: int, method: str) -> None:
    values = deltas_for(n, 7)
    ours = (bca_interval if method == "BCa" else bootstrap_interval)(values, 123, 2000)
    theirs = st.bootstrap(
        (values,),
        np.mean,
        n_resamples=2000,
        method=method,
        rng=np.random.default_rng(123),
        vectorized=True,
    ).confidence_interval
    assert ours == pytest.approx((theirs.low, theirs.high), rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("n", [2, 3, 5, 8, 13])
def test_exact_sign_flip_test_matches_scipy_permutation_test(n: int) -> None:
    values = deltas_for(n, 3)
    p, exact = sign_flip_test(values, seed=0, permutations=10_000)
    theirs = st.permutation_test(
        (values,), np.mean, permutation_type="samples", n_resamples=10_000, vectorized=True
    ).pvalue
    assert exact
    assert p == pytest.approx(min(1.0, theirs), rel=1e-12)


@pytest.mark.parametrize("n", [20, 60, 300])
def test_random_sign_flip_test_agrees_with_scipy_within_monte_carlo_error(n: int) -> None:
    values = deltas_for(n, 5) + 0.01
    permutations = 40_000
    p, exact = sign_flip_test(values, seed=9, permutations=permutations)
    theirs = st.permutation_test(
        (values,),
        np.mean,
        permutation_type="samples",
        n_resamples=permutations,
        vectorized=True,
        rng=np.random.default_rng(9),
    ).pvalue
    assert not exact
    # Two independent Monte Carlo estimates of the same p; 5 standard errors of their difference.
    error = 5 * math.sqrt(2 * 4 * theirs * (1 - theirs) / permutations) + 1e-4
    assert abs(p - theirs) < error


def test_hand_computed_sign_flip_test() -> None:
    # d = (1, 2, 3): mean 2. Of the 8 sign patterns only +++ reaches a mean >= 2, and only ---
    # reaches <= -2. One-sided p = 1/8, two-sided 2/8.
    assert sign_flip_test(np.array([1.0, 2.0, 3.0]), seed=0) == (0.25, True)
    # d = (1, -1, 2): mean 2/3; patterns with mean >= 2/3: (+,-,+), (+,+,+)... count by hand:
    # sums s1*1 + s2*(-1) + s3*2 >= 2: (+,+,+)=2, (+,-,+)=4, (-,-,+)=2 -> 3 of 8; two-sided 6/8.
    assert sign_flip_test(np.array([1.0, -1.0, 2.0]), seed=0) == (0.75, True)


def test_hand_computed_t_test() -> None:
    # d = (1, 2, 3): mean 2, sd 1, t = 2 / (1 / sqrt 3) = 2 sqrt 3 with 2 degrees of freedom.
    # For 2 df the t distribution has a closed form: P(|T| > t) = 1 - t / sqrt(t^2 + 2).
    t = 2 * math.sqrt(3)
    assert paired_t_test(np.array([1.0, 2.0, 3.0])) == pytest.approx(1 - t / math.sqrt(t * t + 2))


@pytest.mark.parametrize(
    "deltas",
    [
        np.zeros(0),
        np.zeros(1),
        np.zeros(50),
        np.array([0.3]),
        np.full(7, -0.25),
        np.full(40, 0.1),
    ],
    ids=["empty", "one zero", "identical runs", "one query", "all equal small", "all equal"],
)
def test_every_input_gives_finite_numbers(deltas: np.ndarray) -> None:
    p_t = paired_t_test(deltas)
    p_r, _ = sign_flip_test(deltas, seed=1, permutations=1000)
    assert 0.0 <= p_t <= 1.0 and 0.0 <= p_r <= 1.0
    if len(deltas):
        low, high = bca_interval(deltas, seed=1)
        assert math.isfinite(low) and math.isfinite(high)
        assert low == high == deltas[0]  # no spread to resample
    if not np.any(deltas):
        assert p_t == 1.0 and p_r == 1.0  # nothing differs
        assert cohens_dz(deltas) == 0.0


def test_zero_spread_conventions() -> None:
    assert paired_t_test(np.full(10, 0.2)) == 0.0  # every query moved by the same amount
    assert paired_t_test(np.array([0.2])) == 1.0  # one query is no evidence
    assert cohens_dz(np.full(10, 0.2)) is None
    # Exact sign flips: only the two all-same-sign patterns are as extreme: p = 2 * 2^-n.
    assert sign_flip_test(np.full(10, 0.2), seed=0, permutations=2**10)[0] == pytest.approx(
        2 / 2**10
    )


def test_bca_falls_back_to_percentile_when_undefined() -> None:
    # Two values: every resampled mean is one of three values; with n = 2 the jackknife spread is
    # defined, but a heavy skew can push the BCa cut points to 0 or 1; the result stays finite.
    for values in ([0.0, 1.0], [0.0, 0.0, 0.0, 1.0], [1e-9, 0.0]):
        low, high = bca_interval(np.array(values), seed=2, resamples=50)
        assert math.isfinite(low) and math.isfinite(high) and low <= high


def test_cohens_dz_hand_computed() -> None:
    # d = (1, 2, 3): mean 2, sd 1.
    assert cohens_dz(np.array([1.0, 2.0, 3.0])) == pytest.approx(2.0)


def test_holm_hand_computed() -> None:
    # Sorted 0.01, 0.02, 0.03, 0.5 with m = 4: 0.04, 0.06, 0.06 (made monotone), 0.5.
    assert adjust_pvalues([0.03, 0.5, 0.01, 0.02], "holm") == pytest.approx([0.06, 0.5, 0.04, 0.06])
    assert adjust_pvalues([0.4, 0.5], "holm") == pytest.approx([0.8, 0.8])
    assert adjust_pvalues([], "holm") == []


@pytest.mark.parametrize("seed", range(5))
def test_benjamini_hochberg_matches_scipy(seed: int) -> None:
    pvalues = np.random.default_rng(seed).uniform(0, 0.2, 25).tolist()
    expected = st.false_discovery_control(pvalues, method="bh")
    assert adjust_pvalues(pvalues, "bh") == pytest.approx(list(expected), rel=1e-12)


def test_unknown_correction_is_refused() -> None:
    with pytest.raises(ValueError, match="correction"):
        adjust_pvalues([0.1], "bonferroni")


_DETERMINISM_SCRIPT = """
import numpy as np
from rankgate.stats import bca_interval, sign_flip_test
d = np.round(np.random.default_rng(4).normal(0, 0.2, 3000), 3)
print(repr(bca_interval(d, 77, 2000)), repr(sign_flip_test(d, 78, 5000)))
"""


def test_results_are_identical_across_runs_and_thread_counts() -> None:
    outputs = set()
    for threads in ("1", "2", "8"):
        env = dict(os.environ)
        for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            env[name] = threads
        for _ in range(2):
            run = subprocess.run(
                [sys.executable, "-c", _DETERMINISM_SCRIPT],
                capture_output=True,
                text=True,
                env=env,
                check=True,
                timeout=120,
            )
            outputs.add(run.stdout)
    assert len(outputs) == 1
