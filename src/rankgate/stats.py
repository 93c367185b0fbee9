"""Statistics over queries: intervals of means, paired tests, and multiple-comparison corrections.

A mean over a few dozen queries moves a lot from one sample of traffic to the next; an interval says
how much, and a paired test says whether a difference between two systems on the same queries is
more than that noise. Randomness comes only from a ``numpy.random.Generator`` seeded by the caller,
and random draws are made in a fixed order and summed with numpy's pairwise summation (no BLAS), so
the same values and seed give the same result on every run and thread count.

References:

* Efron & Tibshirani, *An Introduction to the Bootstrap*, 1993: the percentile interval (ch. 13)
  and the bias-corrected and accelerated (BCa) interval (ch. 14.3, eq. 14.9-14.15).
* Smucker, Allan & Carterette, "A comparison of statistical significance tests for information
  retrieval evaluation", CIKM 2007: the paired t-test and the randomization (sign-flip) test agree
  on IR data and are the ones to use.
* Phipson & Smyth, "Permutation p-values should never be zero", 2010: p = (b + 1) / (B + 1) for a
  Monte Carlo test.
* Holm, "A simple sequentially rejective multiple test procedure", 1979; Benjamini & Hochberg,
  "Controlling the false discovery rate", 1995.
* Welch, "The generalization of 'Student's' problem when several different population variances
  are involved", Biometrika 34, 1947: the unequal-variance t-test and its degrees of freedom.
* Cohen, *Statistical Power Analysis for the Behavioral Sciences*, 2nd ed., 1988: d with the
  pooled standard deviation (eq. 2.5.2) and d_z for paired differences (eq. 2.3.5).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import NormalDist
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = [
    "DEFAULT_CONFIDENCE",
    "DEFAULT_PERMUTATIONS",
    "DEFAULT_RESAMPLES",
    "NORMAL_FROM_QUERIES",
    "adjust_pvalues",
    "bca_interval",
    "bootstrap_interval",
    "cohens_d",
    "cohens_dz",
    "derived_seed",
    "difference_interval",
    "exact_sum",
    "normal_interval",
    "paired_t_test",
    "sign_flip_test",
    "welch_t_test",
]

DEFAULT_RESAMPLES = 1000
# From this many queries on, intervals of a mean use the normal approximation instead of resampling.
# Resampling costs resamples x n draws (1000 x 1M = 10^9 per metric and group, most of a nightly
# job's time), while at this size the percentile bootstrap and the normal interval differ by far
# less than the bootstrap's own Monte Carlo error (Efron & Tibshirani 1993, ch. 13: both converge to
# the same interval as n grows).
NORMAL_FROM_QUERIES = 100_000
DEFAULT_PERMUTATIONS = 10_000
DEFAULT_CONFIDENCE = 0.95
CORRECTIONS = ("holm", "bh")
# Resample in chunks so that memory stays near this many drawn indices, whatever the query count.
_INDICES_PER_CHUNK = 4_000_000
# Null statistics this close to the observed one (relative to its size) count as equal to it:
# sums of the same values in another order differ in the last bits, and a tie must stay a tie.
_TIE_TOLERANCE = 100 * np.finfo(np.float64).eps

Values = npt.NDArray[np.float64]


def derived_seed(*parts: object) -> int:
    """A 64-bit seed from a run's seed and names (a group, a metric): the same on every run and
    machine, unlike ``hash()``, so that adding a metric or a segment leaves the others' draws alone.
    """
    # FNV-1a over the parts' text. It starts from 0 rather than FNV's offset basis: changing that
    # now would move every interval users have already recorded.
    digest = 0
    # surrogatepass: a segment value may hold a lone surrogate from a trace; it still needs a seed.
    for byte in "|".join(map(str, parts)).encode("utf-8", "surrogatepass"):
        digest = ((digest ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return digest


def bootstrap_interval(
    values: Values,
    seed: int,
    resamples: int = DEFAULT_RESAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
) -> tuple[float, float]:
    """Percentile-bootstrap interval of the mean of ``values`` (the normal approximation from
    ``NORMAL_FROM_QUERIES`` values on).

    Edge cases: no values gives (nan, nan); a single value, or values that are all equal, give the
    degenerate interval (v, v): there is no spread to resample.

    >>> bootstrap_interval(np.array([0.5, 0.5, 0.5]), seed=1)
    (0.5, 0.5)
    """
    if len(values) == 0:
        return (math.nan, math.nan)
    if np.all(values == values[0]):
        return (float(values[0]), float(values[0]))
    if len(values) >= NORMAL_FROM_QUERIES:
        return normal_interval(values, confidence)
    means = _bootstrap_means(values, np.random.default_rng(seed), resamples)
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(means, [tail, 1.0 - tail])
    return (float(low), float(high))


def bca_interval(
    values: Values,
    seed: int,
    resamples: int = DEFAULT_RESAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
) -> tuple[float, float]:
    """Bias-corrected and accelerated bootstrap interval of the mean of ``values``.

    BCa moves the percentile interval's cut points to correct for the bootstrap distribution's bias
    (``z0``, from the share of resampled means below the observed mean) and skew (the acceleration
    ``a``, from the jackknife). Per-query metric deltas are bounded and often skewed, which is where
    the plain percentile interval under-covers.

    Edge cases: no values gives (nan, nan); all-equal values (one value included) give (v, v).
    When the correction is undefined (every resampled mean on one side of the observed one, or no
    jackknife spread) the percentile interval is returned instead, so the result is always finite.

    >>> bca_interval(np.array([0.25, 0.25]), seed=3)
    (0.25, 0.25)
    """
    n = len(values)
    if n == 0:
        return (math.nan, math.nan)
    if np.all(values == values[0]):
        return (float(values[0]), float(values[0]))
    if n >= NORMAL_FROM_QUERIES:
        # Bias and skew corrections vanish at this size (both are O(1/sqrt(n))).
        return normal_interval(values, confidence)
    from scipy.special import ndtr, ndtri  # imported when used: scipy adds ~0.2 s to start-up

    means = _bootstrap_means(values, np.random.default_rng(seed), resamples)
    observed = float(np.mean(values))
    tail = (1.0 - confidence) / 2.0
    # Share of resampled means below the observed mean, counting equal ones as half.
    below = (np.count_nonzero(means < observed) + np.count_nonzero(means <= observed)) / (
        2.0 * resamples
    )
    z0 = float(ndtri(below))
    # Acceleration from the jackknife means (each leaves one query out).
    jackknife = (float(np.sum(values)) - values) / (n - 1)
    spread = (n - 1) * (np.mean(jackknife) - jackknife)
    squares = float(np.sum(spread**2)) / n**2
    accel = float(np.sum(spread**3)) / n**3 / (6.0 * squares**1.5) if squares > 0 else math.nan
    cut_points = []
    for z_tail in (float(ndtri(tail)), -float(ndtri(tail))):
        shifted = z0 + z_tail
        cut_points.append(float(ndtr(z0 + shifted / (1.0 - accel * shifted))))
    if not all(math.isfinite(p) for p in cut_points):
        cut_points = [tail, 1.0 - tail]
    low, high = np.quantile(means, cut_points)
    return (float(low), float(high))


def exact_sum(values: Values) -> float:
    """The sum of ``values`` correctly rounded (as ``math.fsum`` gives it), whatever their order of
    magnitude or order.

    Every finite double is an integer mantissa M (|M| < 2**53) times a power of two. The mantissas
    are split into two halves of at most 27 bits and summed per power of two with ``np.bincount``:
    a float64 sum of integers stays exact while it stays below 2**53, which 2**26 halves of 2**27
    cannot pass. The per-power totals are then combined as Python integers, and the one division
    at the end rounds correctly. More than twice as fast as ``math.fsum`` on a million values,
    which a comparison sums dozens of times; a sum past the largest double is an infinity (where
    fsum raises).
    """
    array = np.asarray(values, dtype=np.float64).ravel()
    if not len(array):
        return 0.0
    if not bool(np.isfinite(array).all()):
        return math.fsum(array.tolist())  # its rules for inf and nan
    total = 0
    lowest: int | None = None
    integer_sum, block = (
        (_integer_sum, _EXACT_BLOCK) if _compiled is None else (_compiled_integer_sum, 1 << 35)
    )
    for start in range(0, len(array), block):
        block_total, block_lowest = integer_sum(array[start : start + block])
        if block_lowest is None:
            continue
        if lowest is None:
            total, lowest = block_total, block_lowest
        elif block_lowest < lowest:
            total = (total << (lowest - block_lowest)) + block_total
            lowest = block_lowest
        else:
            total += block_total << (block_lowest - lowest)
    if lowest is None or total == 0:
        return 0.0
    # total * 2**lowest, rounded once (int / int and int -> float round correctly in Python).
    try:
        return float(total << lowest) if lowest >= 0 else total / (1 << -lowest)
    except OverflowError:  # finite values whose sum is past the largest double
        return math.copysign(math.inf, total)


# Values summed in one bincount. Up to 2**26 would stay exact (2**26 halves below 2**27 each
# stay below 2**53); blocks of 2**20 bound the temporaries (about 40 bytes a value: fractions,
# exponents, halves, bins) to some 40 MB, where one block of ten million queries' values took
# 0.4 GB at the end of an evaluation, its peak. The sum is exact either way.
_EXACT_BLOCK = 1 << 20
_HALF_BITS = 26
_EXACT_BINS = 2046  # exponent bins of the compiled sum: every finite double's, subnormals in 0

_compiled: Any
try:
    import rankgate._join as _compiled
except ImportError:  # built without a C compiler: numpy sums it
    _compiled = None


def _compiled_integer_sum(block: Values) -> tuple[int, int | None]:
    """``_integer_sum`` in one compiled pass (``_join.exact_bins``: each value's integer mantissa
    halves summed per exponent as 64-bit integers, exact below 2**36 values), then the bins
    combined here as Python integers."""
    assert _compiled is not None
    high = np.empty(_EXACT_BINS, dtype=np.int64)
    low = np.empty(_EXACT_BINS, dtype=np.int64)
    if not _compiled.exact_bins(np.ascontiguousarray(block, dtype=np.float64), high, low):
        raise ValueError("exact_bins takes finite values")  # exact_sum sends the rest to fsum
    used = np.flatnonzero((high != 0) | (low != 0)).tolist()
    if not used:
        return 0, None
    first = used[0]
    total = 0
    for power in used:
        total += ((int(high[power]) << _HALF_BITS) + int(low[power])) << (power - first)
    # Bin b holds integers M times 2**(b - 1074).
    return total, first - 1074


def _integer_sum(block: Values) -> tuple[int, int | None]:
    """``block``'s exact sum as (integer, exponent): the sum is integer * 2**exponent (None when
    every value is zero)."""
    fractions, exponents = np.frexp(block)
    if not bool(fractions.any()):
        return 0, None
    # value = M * 2**(exponent - 53) with M = fraction * 2**53 an integer below 2**53 in
    # magnitude; its halves are computed in floats, exactly: the high one is floor(M / 2**26)
    # (products by powers of two and floor are exact), the low one a difference of two exact
    # integers that is itself an integer below 2**26.
    high = np.floor(fractions * float(1 << (53 - _HALF_BITS)))
    low = fractions * float(1 << 53) - high * float(1 << _HALF_BITS)
    lowest = int(exponents.min())  # a zero's exponent is 0, and its halves add nothing anywhere
    bins = exponents - lowest
    high_sums = np.bincount(bins, weights=high)
    low_sums = np.bincount(bins, weights=low)
    total = 0
    for power in np.flatnonzero((high_sums != 0) | (low_sums != 0)).tolist():
        total += ((int(high_sums[power]) << _HALF_BITS) + int(low_sums[power])) << power
    return total, lowest - 53


def normal_interval(values: Values, confidence: float = DEFAULT_CONFIDENCE) -> tuple[float, float]:
    """mean ± z · s / sqrt(n): the interval of a mean by the central limit theorem.

    >>> normal_interval(np.array([0.0, 1.0] * 50))
    (0.4015081039495562, 0.5984918960504437)
    """
    n = len(values)
    if n < 2:
        return (math.nan, math.nan) if n == 0 else (float(values[0]), float(values[0]))
    mean = float(np.mean(values))
    half = (
        NormalDist().inv_cdf(0.5 + confidence / 2.0) * float(np.std(values, ddof=1)) / math.sqrt(n)
    )
    return (mean - half, mean + half)


def _bootstrap_means(values: Values, rng: np.random.Generator, resamples: int) -> Values:
    """Means of ``resamples`` resamples of ``values`` drawn with replacement, one row at a time in
    a fixed order (drawing in chunks gives the same indices as one big draw)."""
    n = len(values)
    means = np.empty(resamples, dtype=np.float64)
    chunk = max(1, _INDICES_PER_CHUNK // n)
    for start in range(0, resamples, chunk):
        stop = min(start + chunk, resamples)
        picks = rng.integers(0, n, size=(stop - start, n))
        means[start:stop] = values[picks].mean(axis=1)
    return means


def paired_t_test(deltas: Values) -> float:
    """Two-sided p-value of the paired t-test on per-query differences (H0: mean difference 0).

    t = mean(d) / (sd(d) / sqrt(n)) with n - 1 degrees of freedom (Student, 1908).

    Edge cases, so that every input gives a number: fewer than two queries give 1 (no evidence);
    zero spread gives 1 when every difference is 0 and 0 otherwise (every query moved by the same
    amount: the limit of t as the spread goes to 0).

    >>> paired_t_test(np.array([0.0, 0.0, 0.0]))
    1.0
    """
    n = len(deltas)
    if n < 2:
        return 1.0
    mean = float(np.mean(deltas))
    spread = float(np.std(deltas, ddof=1))
    if spread <= _TIE_TOLERANCE * max(abs(mean), 1.0):
        return 1.0 if mean == 0.0 else 0.0
    t = mean / (spread / math.sqrt(n))
    from scipy.special import stdtr

    return float(min(1.0, 2.0 * stdtr(n - 1, -abs(t))))


def sign_flip_test(
    deltas: Values, seed: int, permutations: int = DEFAULT_PERMUTATIONS
) -> tuple[float, bool]:
    """Two-sided p-value of the paired randomization test, and whether it was exact.

    Under H0 (the two systems are exchangeable on every query) each difference is as likely to
    have either sign. The statistic is the mean difference; the null distribution is its value
    under sign flips: all 2^n of them when 2^n <= ``permutations`` (an exact test), otherwise
    ``permutations`` random ones, with p = (b + 1) / (B + 1) per side. The two-sided p is twice
    the smaller one-sided p, capped at 1.

    Edge cases: no queries, or every difference 0, give p = 1.

    >>> sign_flip_test(np.array([0.5, 0.5, 0.5]), seed=0)
    (0.25, True)
    """
    n = len(deltas)
    if n == 0 or not np.any(deltas):
        return (1.0, n <= 62 and 2**n <= permutations)
    observed = float(np.mean(deltas))
    tolerance = _TIE_TOLERANCE * abs(observed)
    exact = n <= 62 and 2**n <= permutations
    at_most = at_least = 0
    if exact:
        total = 2**n
        chunk = max(1, _INDICES_PER_CHUNK // n)
        bits = np.arange(n, dtype=np.int64)
        for start in range(0, total, chunk):
            codes = np.arange(start, min(start + chunk, total), dtype=np.int64)
            signs = 1.0 - 2.0 * ((codes[:, None] >> bits) & 1)
            null = (signs * deltas).mean(axis=1)
            at_most += int(np.count_nonzero(null <= observed + tolerance))
            at_least += int(np.count_nonzero(null >= observed - tolerance))
        p_low, p_high = at_most / total, at_least / total
    else:
        rng = np.random.default_rng(seed)
        chunk = max(1, _INDICES_PER_CHUNK // n)
        for start in range(0, permutations, chunk):
            rows = min(chunk, permutations - start)
            signs = 1.0 - 2.0 * rng.integers(0, 2, size=(rows, n))
            null = (signs * deltas).mean(axis=1)
            at_most += int(np.count_nonzero(null <= observed + tolerance))
            at_least += int(np.count_nonzero(null >= observed - tolerance))
        p_low = (at_most + 1) / (permutations + 1)
        p_high = (at_least + 1) / (permutations + 1)
    return (min(1.0, 2.0 * min(p_low, p_high)), exact)


def cohens_dz(deltas: Values) -> float | None:
    """Standardised effect size of paired differences: mean(d) / sd(d) (Cohen's d_z).

    None when it is undefined: fewer than two queries, or no spread while the mean is not 0.
    0 when every difference is 0.
    """
    if len(deltas) == 0 or not np.any(deltas):
        return 0.0
    if len(deltas) < 2:
        return None
    mean = float(np.mean(deltas))
    spread = float(np.std(deltas, ddof=1))
    if spread <= _TIE_TOLERANCE * max(abs(mean), 1.0):
        return None
    return mean / spread


def adjust_pvalues(pvalues: Sequence[float], method: str) -> list[float]:
    """P-values adjusted for testing them all at once.

    ``holm`` (Holm 1979) controls the family-wise error rate: the i-th smallest p is multiplied by
    (m - i + 1), then made non-decreasing. ``bh`` (Benjamini & Hochberg 1995) controls the false
    discovery rate: the i-th smallest is multiplied by m / i, then made non-increasing from the
    largest down. Both are capped at 1 and returned in the input's order.

    >>> adjust_pvalues([0.01, 0.04, 0.03], "holm")
    [0.03, 0.06, 0.06]
    """
    if method not in CORRECTIONS:
        raise ValueError(f"correction must be one of {', '.join(CORRECTIONS)}, got {method!r}")
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    adjusted = [0.0] * m
    if method == "holm":
        running = 0.0
        for rank, index in enumerate(order):
            running = max(running, min(1.0, (m - rank) * pvalues[index]))
            adjusted[index] = running
    else:
        running = 1.0
        for rank in range(m - 1, -1, -1):
            index = order[rank]
            running = min(running, m / (rank + 1) * pvalues[index])
            adjusted[index] = min(1.0, running)
    return adjusted


# --- two independent samples (a traffic-split A/B test: each variant served its own queries) ---


def welch_t_test(baseline: Values, candidate: Values) -> float:
    """Two-sided p-value of Welch's t-test of equal means in two independent samples.

    t = (mean(c) - mean(b)) / sqrt(s_b^2 / n_b + s_c^2 / n_c), with the Welch-Satterthwaite degrees
    of freedom (s_b^2/n_b + s_c^2/n_c)^2 / ((s_b^2/n_b)^2 / (n_b - 1) + (s_c^2/n_c)^2 / (n_c - 1))
    (Welch 1947). It does not assume the two variances are equal, which they rarely are when two
    rankers are scored on different queries. Equal to ``scipy.stats.ttest_ind(b, c,
    equal_var=False)`` wherever that is defined.

    Edge cases, so that every input gives a number: fewer than two values on a side give 1 (no
    estimate of its spread); no spread on either side gives 1 when the means are equal and 0
    otherwise (the limit of t as the spread goes to 0), where scipy gives nan.

    >>> welch_t_test(np.array([0.5, 0.5]), np.array([0.5, 0.5, 0.5]))
    1.0
    """
    n_b, n_c = len(baseline), len(candidate)
    if n_b < 2 or n_c < 2:
        return 1.0
    mean_b, mean_c = float(np.mean(baseline)), float(np.mean(candidate))
    share_b = float(np.var(baseline, ddof=1)) / n_b
    share_c = float(np.var(candidate, ddof=1)) / n_c
    squared_error = share_b + share_c
    difference = mean_c - mean_b
    scale = max(abs(mean_b), abs(mean_c), 1.0)
    if math.sqrt(squared_error) <= _TIE_TOLERANCE * scale:
        return 1.0 if difference == 0.0 else 0.0
    t = difference / math.sqrt(squared_error)
    freedom = squared_error**2 / (share_b**2 / (n_b - 1) + share_c**2 / (n_c - 1))
    from scipy.special import stdtr

    return float(min(1.0, 2.0 * stdtr(freedom, -abs(t))))


def difference_interval(
    baseline: Values,
    candidate: Values,
    seed: int,
    resamples: int = DEFAULT_RESAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
) -> tuple[float, float]:
    """Interval of mean(candidate) - mean(baseline) for two independent samples.

    A percentile bootstrap that resamples each side on its own (the two-sample bootstrap of Efron
    & Tibshirani 1993, ch. 8.3 and 13): the baseline's ``resamples`` means are drawn first, then
    the candidate's, from one generator seeded with ``seed``. From ``NORMAL_FROM_QUERIES`` values on
    the smaller side it is the normal interval d ± z · sqrt(s_b^2/n_b + s_c^2/n_c), as for the
    means of ``bootstrap_interval``.

    Edge cases: an empty side gives (nan, nan); no spread on either side gives (d, d).

    >>> difference_interval(np.array([0.25, 0.25]), np.array([0.5]), seed=1)
    (0.25, 0.25)
    """
    n_b, n_c = len(baseline), len(candidate)
    if n_b == 0 or n_c == 0:
        return (math.nan, math.nan)
    difference = float(np.mean(candidate)) - float(np.mean(baseline))
    if np.all(baseline == baseline[0]) and np.all(candidate == candidate[0]):
        return (difference, difference)
    if min(n_b, n_c) >= NORMAL_FROM_QUERIES:
        spread = math.sqrt(
            float(np.var(baseline, ddof=1)) / n_b + float(np.var(candidate, ddof=1)) / n_c
        )
        half = NormalDist().inv_cdf(0.5 + confidence / 2.0) * spread
        return (difference - half, difference + half)
    rng = np.random.default_rng(seed)
    before = _bootstrap_means(baseline, rng, resamples)
    after = _bootstrap_means(candidate, rng, resamples)
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(after - before, [tail, 1.0 - tail])
    return (float(low), float(high))


def cohens_d(baseline: Values, candidate: Values) -> float | None:
    """Standardised difference of two independent means: (mean(c) - mean(b)) / s_pooled, where
    s_pooled^2 = ((n_b - 1) s_b^2 + (n_c - 1) s_c^2) / (n_b + n_c - 2) (Cohen 1988, eq. 2.5.2).

    None when it is undefined: fewer than two values in all, or no spread while the means differ.
    0 when the means are equal and there is no spread.
    """
    n_b, n_c = len(baseline), len(candidate)
    if n_b == 0 or n_c == 0 or n_b + n_c < 3:
        return None
    difference = float(np.mean(candidate)) - float(np.mean(baseline))
    pooled = (
        (n_b - 1) * float(np.var(baseline, ddof=1) if n_b > 1 else 0.0)
        + (n_c - 1) * float(np.var(candidate, ddof=1) if n_c > 1 else 0.0)
    ) / (n_b + n_c - 2)
    spread = math.sqrt(pooled)
    if spread <= _TIE_TOLERANCE * max(abs(difference), 1.0):
        return 0.0 if difference == 0.0 else None
    return difference / spread
