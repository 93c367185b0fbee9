"""Confidence intervals for means over queries.

A mean over a few dozen queries moves a lot from one sample of traffic to the next; an interval says
how much. The interval here is the percentile bootstrap over queries (Efron & Tibshirani, *An
Introduction to the Bootstrap*, 1993, ch. 13): resample the per-query values with replacement,
take each resample's mean, and read the 2.5th and 97.5th percentiles. Randomness comes only from a
``numpy.random.Generator`` seeded by the caller, and resamples are drawn in a fixed order, so the same
values and seed give the same interval on every run and thread count.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["DEFAULT_CONFIDENCE", "DEFAULT_RESAMPLES", "bootstrap_interval"]

DEFAULT_RESAMPLES = 1000
DEFAULT_CONFIDENCE = 0.95
# Resample in chunks so that memory stays near this many drawn indices, whatever the query count.
_INDICES_PER_CHUNK = 4_000_000


def bootstrap_interval(
    values: npt.NDArray[np.float64],
    seed: int,
    resamples: int = DEFAULT_RESAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
) -> tuple[float, float]:
    """Percentile-bootstrap interval of the mean of ``values``.

    Edge cases: no values gives (nan, nan); a single value, or values that are all equal, give the
    degenerate interval (v, v): there is no spread to resample.

    >>> bootstrap_interval(np.array([0.5, 0.5, 0.5]), seed=1)
    (0.5, 0.5)
    """
    n = len(values)
    if n == 0:
        return (float("nan"), float("nan"))
    if np.all(values == values[0]):
        return (float(values[0]), float(values[0]))
    rng = np.random.default_rng(seed)
    means = np.empty(resamples, dtype=np.float64)
    chunk = max(1, _INDICES_PER_CHUNK // n)
    for start in range(0, resamples, chunk):
        stop = min(start + chunk, resamples)
        picks = rng.integers(0, n, size=(stop - start, n))
        means[start:stop] = values[picks].mean(axis=1)
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(means, [tail, 1.0 - tail])
    return (float(low), float(high))
