"""statsmodels' power solvers as test oracles, with their root finders held to a tight tolerance.

``solve_power`` brackets and bisects with ``brentq_expanding`` at ``xtol=1e-5`` by default, which
leaves its solutions ~1e-6 (relative) from the root of its own power function; the oracles here
ask the same solver for ``xtol=1e-14`` (effect sizes) and ``1e-12`` (sample sizes), so a difference
from rankgate's figures is a difference in the formula, not in the stopping rule.
"""

from __future__ import annotations

import warnings

from statsmodels.stats.power import TTestIndPower, TTestPower


def paired_oracle() -> TTestPower:
    oracle = TTestPower()
    oracle.start_bqexp["effect_size"] = {"low": 1e-9, "start_upp": 1.0, "xtol": 1e-14}
    oracle.start_bqexp["nobs"] = {"low": 2.0, "start_upp": 50.0, "xtol": 1e-12}
    return oracle


def two_sample_oracle() -> TTestIndPower:
    oracle = TTestIndPower()
    oracle.start_bqexp["effect_size"] = {"low": 1e-9, "start_upp": 1.0, "xtol": 1e-14}
    oracle.start_bqexp["nobs1"] = {"low": 2.0, "start_upp": 50.0, "xtol": 1e-12}
    return oracle


def solved(oracle: TTestPower | TTestIndPower, **known: float) -> float:
    """``oracle.solve_power(**known)`` as a float; statsmodels' own warnings (a NaN it met while
    bracketing, where scipy's noncentral t CDF underflows) are its business, not the test's."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        value = float(oracle.solve_power(**known))
    return value
