"""Prediction-powered inference: a metric's mean from judge labels on every query, corrected by a
small random sample of queries that humans labeled.

An LLM judge grades every query, but its grades are biased, so the metric computed with them (the
*judge values*) has a mean that is off by the judge's bias however many queries there are. Humans
grade a uniform random sample of ``n`` of the ``N`` queries (the *human values*). Prediction-powered
inference (PPI) estimates the human-label mean as the judge mean plus the judge's error measured on
the sample:

    theta = lambda * mean_N(j) + mean_n(h - lambda * j)
          = mean_n(h) - lambda * (mean_n(j) - mean_N(j))

where ``j`` is the judge value and ``h`` the human value of a query, ``mean_N`` is over all ``N``
queries and ``mean_n`` over the ``n`` human-labeled ones. ``lambda = 1`` is the classic PPI
estimator (Angelopoulos et al. 2023); PPI++ (Angelopoulos, Duchi & Zrnic 2023) picks the
``lambda`` that minimises the variance ("power tuning"); ``lambda = 0`` is the human-only mean.
In survey sampling the same estimator is the difference estimator (fixed ``lambda``) and the
regression estimator (``lambda`` the fitted slope) with ``mean_N(j)`` as the known auxiliary mean
(Cochran, *Sampling Techniques*, 3rd ed., 1977, ch. 7), and that is the frame used here.

**The estimand.** Two are offered, by ``estimand=``:

* ``"evaluated"``: the mean over the ``N`` evaluated queries of the metric with human labels --
  what the mean would be had humans labeled every one of them. The ``N`` judge values are all
  known, so ``mean_N(j)`` is a constant, not an estimate, and the only randomness is which ``n``
  queries were drawn. With ``r = h - lambda * j``, ``theta = lambda * mean_N(j) + mean_n(r)`` and
  ``mean_n(r)`` is the mean of a simple random sample drawn without replacement from the ``N``
  values of ``r``, so (Cochran 1977, theorem 2.2)

      Var(theta) = (1 - n/N) * S_r^2 / n

  where ``S_r^2`` is the variance of ``r`` over the ``N`` queries, estimated without bias by the
  sample variance of ``r`` on the labeled ones. The labeled queries being part of the ``N`` is
  what makes ``mean_N(j)`` exact; PPI's own variance, ``sigma_r^2/n + lambda^2 sigma_j^2/N``, is
  for labeled and unlabeled samples drawn independently from an infinite population, and it is
  too wide here. When ``n = N`` the variance is 0: every query was labeled, theta is the exact
  human mean, and the interval has zero width.
* ``"population"``: the mean over the distribution of queries the ``N`` were drawn from (the
  question a comparison of two systems usually asks: is B better on queries like these?). Then
  ``mean_N(h)`` itself varies around it, with variance ``S_h^2/N``, independently of the sampling
  error above (whose conditional mean is 0), so

      Var(theta) = S_h^2 / N + (1 - n/N) * S_r^2 / n.

**Power tuning.** Neither ``S_h^2/N`` nor the factor ``(1 - n/N)/n`` depends on ``lambda``, so
under both estimands the variance is smallest at the regression slope of ``h`` on ``j``,

    lambda = Cov(h, j) / Var(j)     (on the labeled sample).

(PPI++'s ``Cov/((1 + n/N) Var)`` has the extra factor because its unlabeled mean is itself random;
here it is not.) The slope is not clipped to [0, 1]: any fixed ``lambda`` gives an unbiased
estimator, and a slope above 1 is what a judge whose metric is compressed (an upward grade bias
saturating at the top grade) calls for; clipping it would give that efficiency away. Estimating the
slope spends one degree of freedom: the residual variance is divided by ``n - 2`` and the interval
uses a t quantile with ``n - 2`` degrees of freedom (Cochran 1977, section 7.3), so tuning needs
``n >= 3``. When the judge values on the sample are all equal the slope is undefined; ``lambda`` is
then 0 (the judge carries no information about the sampled queries) and theta is the human-only
mean.

**Intervals.** theta ± t_{q, df} · sqrt(Var), with ``df = n - 1`` (``lambda`` fixed) or ``n - 2``
(fitted). A t quantile rather than the normal one because at the ``n`` of a human sample (30-200)
the variance is estimated from the sample itself, and the normal quantile under-covers by about one
point at n = 30 (a nominal 95% interval covers 94.0%) and 0.3 at n = 100; as ``n`` grows the two
coincide.

**Sampling design.** The human sample is treated as a simple random sample of the ``N`` queries,
drawn without replacement. A stratified sample (by segment) is not accounted for: its interval
from these formulas is conservative when strata were allocated proportionally and can be wrong
otherwise.

References:
    Anastasios N. Angelopoulos, Stephen Bates, Clara Fannjiang, Michael I. Jordan, Tijana Zrnic.
    Prediction-powered inference. Science 382(6671), 669-674, 2023.
    Anastasios N. Angelopoulos, John C. Duchi, Tijana Zrnic. PPI++: Efficient prediction-powered
    inference. arXiv:2311.01453, 2023.
    Jon Saad-Falcon, Omar Khattab, Christopher Potts, Matei Zaharia. ARES: An automated evaluation
    framework for retrieval-augmented generation systems. NAACL 2024.
    William G. Cochran. Sampling Techniques, 3rd ed. Wiley, 1977 (ch. 2: simple random sampling;
    ch. 7: the difference and regression estimators).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

__all__ = [
    "DeltaEstimate",
    "Estimand",
    "Estimate",
    "PPIDeltaResult",
    "PPIResult",
    "ppi_mean",
    "ppi_paired_delta",
]

Estimand = Literal["evaluated", "population"]
ESTIMANDS: tuple[Estimand, ...] = ("evaluated", "population")

Values = npt.NDArray[np.float64]
ArrayLike = npt.ArrayLike

# A standard error this small relative to the estimate is no spread at all (sums of the same values
# in another order differ in the last bits); the same tolerance as rankgate.stats' tests.
_TIE_TOLERANCE = 100 * np.finfo(np.float64).eps


@dataclass(frozen=True)
class Estimate:
    """A mean with its interval.

    Attributes:
        mean: the point estimate.
        low, high: the two-sided interval at the result's ``confidence`` (equal to ``mean`` when
            ``std_error`` is 0).
        queries: how many queries' values went into it (judge-only: ``N``; human-only: ``n``;
            PPI: ``N``, the judge values of all of them and the human values of ``n``).
        std_error: the estimated standard deviation of ``mean``.
        degrees_of_freedom: of the t quantile the interval uses.
    """

    mean: float
    low: float
    high: float
    queries: int
    std_error: float
    degrees_of_freedom: int


@dataclass(frozen=True)
class DeltaEstimate(Estimate):
    """An :class:`Estimate` of a mean difference, with the two-sided p-value of the t-test of a
    zero difference: ``p = 2 · P(T_df > |mean / std_error|)``. As in ``rankgate.stats``, no spread
    gives p = 1 when the mean is 0 and 0 otherwise.
    """

    p_value: float


@dataclass(frozen=True)
class PPIResult:
    """The mean of a metric by three estimators; see :func:`ppi_mean`.

    Attributes:
        judge_only: the mean of the judge values over all ``N`` queries, with the usual interval
            ``mean ± t_{N-1} · s_j / sqrt(N)``. That interval is about the judge's metric, not the
            human one: it shrinks with ``N`` while the judge's bias does not, which is why it
            misses the human mean more often the more queries there are.
        human_only: the mean of the ``n`` human values; its interval is ``mean ± t_{n-1} ·
            sqrt((1 - n/N) · s_h^2 / n)`` (estimand "evaluated", with the finite-population
            correction) or ``sqrt(s_h^2 / n)`` ("population").
        ppi: the prediction-powered estimate (module docstring).
        lambda_: the weight of the judge: 1 for classic PPI (``tune=False``), the fitted slope
            ``Cov(h, j) / Var(j)`` on the labeled queries for PPI++ (``tune=True``).
        effective_queries: how many human-labeled queries (drawn the same way, with the same
            spread ``s_h``) a human-only estimate would need for the PPI estimate's variance:
            ``m`` solving ``Var_human_only(m) = Var_ppi``, that is ``1 / (1/N + Var_ppi / s_h^2)``
            for both estimands (at most ``N``). The judge was worth ``effective_queries - n`` extra
            human labels. Without the finite-population correction this is the ratio ``n · s_h^2
            / s_r^2`` of the two variances at ``n``. It is ``n`` when the human values have no
            spread, and ``N`` when the judge leaves no sampling error (``h - lambda · j``
            constant on the sample, or ``n = N``). It compares variances, not interval
            widths, so the t quantiles' slightly different degrees of freedom are left out.
        rectifier: ``mean_n(h - lambda · j)``, the judge's error measured on the labeled queries
            (with ``lambda = 1``, minus the judge's bias in the metric).
        labeled: ``n``, the human-labeled queries.
        total: ``N``, the evaluated queries.
        confidence: of the intervals.
        estimand: "evaluated" or "population" (module docstring).
    """

    judge_only: Estimate
    human_only: Estimate
    ppi: Estimate
    lambda_: float
    effective_queries: float
    rectifier: float
    labeled: int
    total: int
    confidence: float
    estimand: Estimand


@dataclass(frozen=True)
class PPIDeltaResult:
    """The mean per-query difference b - a of two systems on the same queries by three
    estimators, each with a p-value for a zero difference; see :func:`ppi_paired_delta`. The
    fields mean what they mean in :class:`PPIResult`, for the per-query differences. The
    judge-only p-value is that of the paired t-test on the judge differences (as compare's).
    """

    judge_only: DeltaEstimate
    human_only: DeltaEstimate
    ppi: DeltaEstimate
    lambda_: float
    effective_queries: float
    rectifier: float
    labeled: int
    total: int
    confidence: float
    estimand: Estimand


@dataclass(frozen=True)
class _Parts:
    """The three estimators' means, variances and degrees of freedom, before intervals."""

    judge_mean: float
    judge_variance: float
    human_mean: float
    human_variance: float
    ppi_mean: float
    ppi_variance: float
    ppi_df: int
    lambda_: float
    effective_queries: float
    rectifier: float
    labeled: int
    total: int


def ppi_mean(
    judge_values: ArrayLike,
    labeled: ArrayLike,
    human_values: ArrayLike,
    *,
    confidence: float = 0.95,
    tune: bool = True,
    estimand: Estimand = "evaluated",
) -> PPIResult:
    """The mean of a per-query metric with human labels, from judge values on every query and
    human values on a uniform random sample of them (prediction-powered inference).

    theta = lambda · mean_N(judge) + mean_n(human - lambda · judge), with
    Var(theta) = (1 - n/N) · s_r^2 / n for the mean over the ``N`` evaluated queries
    (``estimand="evaluated"``, the default), or s_h^2 / N + (1 - n/N) · s_r^2 / n for the mean
    over the query population they were drawn from (``"population"``), where s_r^2 is the
    variance of human - lambda · judge on the labeled queries (module docstring for the
    derivation). The interval is theta ± t_{df} · sqrt(Var).

    Args:
        judge_values: the metric computed with the judge's labels, one value per query (``N``).
        labeled: which queries humans labeled: a boolean mask of length ``N``, or an array of
            distinct indices into ``judge_values``. Treated as a simple random sample drawn
            without replacement (a stratified sample is not accounted for).
        human_values: the metric computed with human labels on the labeled queries, in the order
            of ``labeled`` (ascending for a mask).
        confidence: of the intervals, in (0, 1).
        tune: True for PPI++'s variance-minimising ``lambda = Cov(h, j) / Var(j)`` (needs
            ``n >= 3``; not clipped), False for classic PPI (``lambda = 1``).
        estimand: "evaluated" or "population".

    Raises:
        ValueError: fewer than two labeled queries (three when tuning), a non-finite value,
            lengths that do not match, indices out of range or repeated, a confidence outside
            (0, 1), or an unknown estimand. Every query labeled (``n = N``) is not an error: PPI is
            then the human mean, with a zero-width interval for the "evaluated" estimand.

    References:
        Angelopoulos, Bates, Fannjiang, Jordan & Zrnic, "Prediction-powered inference", Science
        382, 2023; Angelopoulos, Duchi & Zrnic, "PPI++: Efficient prediction-powered inference",
        2023; Cochran, Sampling Techniques, 1977, ch. 2 and 7.

    >>> result = ppi_mean([0.5, 0.7, 0.9, 0.7], [True] * 4, [0.3, 0.4, 0.7, 0.6], tune=False)
    >>> result.ppi.mean == result.human_only.mean, result.ppi.low == result.ppi.high
    (True, True)
    """
    _check_options(confidence, estimand)
    judge = _finite_values(judge_values, "judge_values")
    picked = _labeled_indices(labeled, len(judge))
    human = _finite_values(human_values, "human_values")
    parts = _estimate(judge, picked, human, tune, estimand)
    return PPIResult(
        judge_only=_estimate_of(
            parts.judge_mean, parts.judge_variance, parts.total - 1, parts.total, confidence
        ),
        human_only=_estimate_of(
            parts.human_mean, parts.human_variance, parts.labeled - 1, parts.labeled, confidence
        ),
        ppi=_estimate_of(parts.ppi_mean, parts.ppi_variance, parts.ppi_df, parts.total, confidence),
        lambda_=parts.lambda_,
        effective_queries=parts.effective_queries,
        rectifier=parts.rectifier,
        labeled=parts.labeled,
        total=parts.total,
        confidence=confidence,
        estimand=estimand,
    )


def ppi_paired_delta(
    judge_a: ArrayLike,
    judge_b: ArrayLike,
    labeled: ArrayLike,
    human_a: ArrayLike,
    human_b: ArrayLike,
    *,
    confidence: float = 0.95,
    tune: bool = True,
    estimand: Estimand = "population",
) -> PPIDeltaResult:
    """The mean per-query difference b - a of two systems scored on the same queries, by
    prediction-powered inference on the differences, with a t-test of a zero difference.

    :func:`ppi_mean` applied to d_judge = judge_b - judge_a (every query) and d_human = human_b -
    human_a (the labeled queries), with one ``lambda`` for the difference: theta =
    lambda · mean_N(d_judge) + mean_n(d_human - lambda · d_judge), p = 2 · P(T_df > |theta| / se).
    A judge that over-rates one system's documents more than the other's biases d_judge; the
    rectifier measures and removes that bias.

    The default estimand here is "population" (where :func:`ppi_mean`'s is "evaluated"): a
    comparison asks whether b beats a on queries like these, as compare's paired t-test does.
    Two systems equally good on that population still differ by chance on any ``N`` queries, and
    a test of "no difference on exactly these ``N`` queries" (``estimand="evaluated"``) rejects
    such pairs well above its level once the judge makes the PPI interval narrow.

    Args:
        judge_a, judge_b: the metric with judge labels, one value per query, for systems a and b.
        labeled: which queries humans labeled (as in :func:`ppi_mean`).
        human_a, human_b: the metric with human labels on the labeled queries, in that order.
        confidence, tune, estimand: as in :func:`ppi_mean`.

    Raises:
        ValueError: as :func:`ppi_mean`, and when a's and b's values differ in length.

    References:
        Angelopoulos et al., Science 382, 2023; Angelopoulos, Duchi & Zrnic, 2023; Cochran 1977,
        ch. 7.
    """
    _check_options(confidence, estimand)
    before = _finite_values(judge_a, "judge_a")
    after = _finite_values(judge_b, "judge_b")
    if len(before) != len(after):
        raise ValueError(
            f"judge_a and judge_b must hold one value per query each, got {len(before)} and "
            f"{len(after)} values"
        )
    picked = _labeled_indices(labeled, len(before))
    human_before = _finite_values(human_a, "human_a")
    human_after = _finite_values(human_b, "human_b")
    if len(human_before) != len(human_after):
        raise ValueError(
            f"human_a and human_b must hold one value per labeled query each, got "
            f"{len(human_before)} and {len(human_after)} values"
        )
    parts = _estimate(after - before, picked, human_after - human_before, tune, estimand)
    return PPIDeltaResult(
        judge_only=_delta_estimate_of(
            parts.judge_mean, parts.judge_variance, parts.total - 1, parts.total, confidence
        ),
        human_only=_delta_estimate_of(
            parts.human_mean, parts.human_variance, parts.labeled - 1, parts.labeled, confidence
        ),
        ppi=_delta_estimate_of(
            parts.ppi_mean, parts.ppi_variance, parts.ppi_df, parts.total, confidence
        ),
        lambda_=parts.lambda_,
        effective_queries=parts.effective_queries,
        rectifier=parts.rectifier,
        labeled=parts.labeled,
        total=parts.total,
        confidence=confidence,
        estimand=estimand,
    )


# --- validation at the boundary ---


def _check_options(confidence: float, estimand: str) -> None:
    if not (isinstance(confidence, int | float) and 0.0 < float(confidence) < 1.0):
        raise ValueError(f"confidence must be a number in (0, 1), got {confidence!r}")
    if estimand not in ESTIMANDS:
        raise ValueError(f"estimand must be one of {', '.join(ESTIMANDS)}, got {estimand!r}")


def _finite_values(values: ArrayLike, name: str) -> Values:
    try:
        array = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{name} must be numbers, got {values!r:.80}: {error}") from None
    if array.ndim != 1:
        raise ValueError(f"{name} must be one value per query (1-D), got shape {array.shape}")
    bad = np.flatnonzero(~np.isfinite(array))
    if len(bad):
        raise ValueError(
            f"{name} must be finite, got {array[bad[0]]} at position {int(bad[0])} "
            f"({len(bad)} non-finite value{'s' if len(bad) > 1 else ''})"
        )
    return array


def _labeled_indices(labeled: ArrayLike, total: int) -> npt.NDArray[np.intp]:
    """The labeled queries' indices, in the order their human values are given."""
    array = np.asarray(labeled)
    if array.ndim != 1:
        raise ValueError(f"labeled must be a mask or an index array (1-D), got shape {array.shape}")
    if array.dtype == np.bool_:
        if len(array) != total:
            raise ValueError(
                f"labeled as a mask must have one entry per query ({total}), got {len(array)}"
            )
        return np.flatnonzero(array)
    if len(array) == 0:
        return np.empty(0, dtype=np.intp)
    if not np.issubdtype(array.dtype, np.integer):
        raise ValueError(
            f"labeled must be a boolean mask or integer indices, got dtype {array.dtype}"
        )
    outside = np.flatnonzero((array < 0) | (array >= total))
    if len(outside):
        raise ValueError(
            f"labeled indices must be in 0..{total - 1} (one per query), got {int(array[outside[0]])}"
        )
    indices = array.astype(np.intp)
    if len(np.unique(indices)) != len(indices):
        values, counts = np.unique(indices, return_counts=True)
        raise ValueError(
            "labeled indices must be distinct (a sample without replacement), got "
            f"{int(values[counts > 1][0])} more than once"
        )
    return indices


# --- the estimators ---


def _estimate(
    judge: Values, picked: npt.NDArray[np.intp], human: Values, tune: bool, estimand: Estimand
) -> _Parts:
    total, labeled = len(judge), len(picked)
    if len(human) != labeled:
        raise ValueError(
            f"human values must be one per labeled query: {labeled} labeled, got {len(human)} "
            "human values"
        )
    if labeled < 2:
        raise ValueError(
            f"PPI needs at least 2 human-labeled queries to estimate a variance, got {labeled}"
        )
    if tune and labeled < 3:
        raise ValueError(
            f"tuning lambda needs at least 3 human-labeled queries (one degree of freedom goes to "
            f"the fitted slope), got {labeled}; pass tune=False for classic PPI (lambda = 1)"
        )
    sampled = judge[picked]
    judge_mean = float(np.mean(judge))
    human_mean = float(np.mean(human))
    fitted = False
    lambda_ = 1.0
    if tune:
        judge_spread = sampled - np.mean(sampled)
        squares = float(np.sum(judge_spread * judge_spread))
        if squares > 0.0:
            lambda_ = float(np.sum(judge_spread * (human - human_mean))) / squares
            fitted = True
        else:
            lambda_ = 0.0  # the judge is constant on the sample: nothing to regress on
    residuals = human - lambda_ * sampled
    rectifier = float(np.mean(residuals))
    residual_df = labeled - 1 - int(fitted)
    residual_variance = float(np.sum((residuals - rectifier) ** 2)) / residual_df
    human_variance = float(np.var(human, ddof=1))
    unsampled = 1.0 - labeled / total  # the finite-population correction, 1 - n/N
    ppi_variance = unsampled * residual_variance / labeled
    if estimand == "population":
        ppi_variance += human_variance / total
        human_only_variance = human_variance / labeled
    else:
        human_only_variance = unsampled * human_variance / labeled
    if human_variance == 0.0:
        effective = float(labeled)
    else:
        # Var_human_only(m) = Var_ppi solved for m; the same expression under both estimands.
        sampling_variance = unsampled * residual_variance / labeled
        effective = 1.0 / (1.0 / total + sampling_variance / human_variance)
    # theta = mean_n(h) - lambda * (mean_n(j) - mean_N(j)); with every query labeled the bracket is
    # 0 up to rounding, and the human mean is returned exactly.
    theta = human_mean if labeled == total else lambda_ * judge_mean + rectifier
    return _Parts(
        judge_mean=judge_mean,
        judge_variance=float(np.var(judge, ddof=1)) / total if total > 1 else 0.0,
        human_mean=human_mean,
        human_variance=human_only_variance,
        ppi_mean=theta,
        ppi_variance=ppi_variance,
        ppi_df=residual_df,
        lambda_=lambda_,
        effective_queries=effective,
        rectifier=rectifier,
        labeled=labeled,
        total=total,
    )


def _quantile(df: int, confidence: float) -> float:
    from scipy.special import stdtrit  # imported when used: scipy adds ~0.2 s to start-up

    return float(stdtrit(df, 0.5 + confidence / 2.0))


def _no_spread(mean: float, std_error: float) -> bool:
    return bool(std_error <= _TIE_TOLERANCE * max(abs(mean), 1.0))


def _estimate_of(
    mean: float, variance: float, df: int, queries: int, confidence: float
) -> Estimate:
    std_error = math.sqrt(variance)
    if _no_spread(mean, std_error):
        return Estimate(mean, mean, mean, queries, std_error, df)
    half = _quantile(df, confidence) * std_error
    return Estimate(mean, mean - half, mean + half, queries, std_error, df)


def _delta_estimate_of(
    mean: float, variance: float, df: int, queries: int, confidence: float
) -> DeltaEstimate:
    interval = _estimate_of(mean, variance, df, queries, confidence)
    if _no_spread(mean, interval.std_error):
        p_value = 1.0 if mean == 0.0 else 0.0
    else:
        from scipy.special import stdtr

        p_value = float(min(1.0, 2.0 * stdtr(df, -abs(mean) / interval.std_error)))
    return DeltaEstimate(
        interval.mean,
        interval.low,
        interval.high,
        interval.queries,
        interval.std_error,
        interval.degrees_of_freedom,
        p_value,
    )
