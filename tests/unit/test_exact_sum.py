"""``stats.exact_sum`` against ``math.fsum`` (Shewchuk's exact summation, correctly rounded): the
two must agree bit for bit on any finite input whose sum is a finite double. Every test runs twice:
with the compiled per-exponent bins (``_join.exact_bins``) and with numpy's, the fallback of an
install without the extension."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rankgate import stats
from rankgate.stats import exact_sum


@pytest.fixture(autouse=True, params=["compiled", "numpy"])
def summing(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "numpy":
        monkeypatch.setattr(stats, "_compiled", None)
    elif stats._compiled is None:
        pytest.skip("the compiled kernels were not built")
    return str(request.param)


FINITE = st.floats(allow_nan=False, allow_infinity=False, width=64)
# Magnitudes that cancel and differ by hundreds of binary orders, subnormals included.
SPREAD = st.builds(
    lambda sign, mantissa, power: sign * mantissa * 2.0**power,
    st.sampled_from([-1.0, 0.0, 1.0]),
    st.floats(0.5, 1.0),
    st.integers(-1074, 1000),
)


def _fsum(values: list[float]) -> float:
    try:
        return math.fsum(values)
    except OverflowError:  # fsum refuses a sum past the largest double; exact_sum says inf
        return math.nan


@settings(max_examples=500, deadline=None)
@given(st.lists(st.one_of(FINITE, SPREAD), max_size=60))
def test_equals_fsum_bit_for_bit(values: list[float]) -> None:
    expected = _fsum(values)
    if math.isnan(expected) or math.isinf(expected):
        return
    found = exact_sum(np.array(values, dtype=np.float64))
    # A zero sum is +0.0 here (fsum keeps the sign of a sum of negative zeros: "-0.0000").
    assert found.hex() == expected.hex() if expected else found.hex() == "0x0.0p+0"


def test_a_million_metric_values_and_their_cancellation() -> None:
    values = np.random.default_rng(3).random(1_000_000)
    assert exact_sum(values) == math.fsum(values.tolist())
    both = np.concatenate([values, -values[::-1]])
    assert exact_sum(both) == 0.0


def test_edges() -> None:
    assert exact_sum(np.array([])) == 0.0
    assert exact_sum(np.zeros(7)) == 0.0
    assert math.copysign(1.0, exact_sum(np.array([-0.0, -0.0]))) == 1.0
    assert exact_sum(np.array([5e-324, 5e-324])) == 1e-323
    assert exact_sum(np.array([1e308, 1e308, -1e308])) == 1e308  # fsum overflows midway
    assert exact_sum(np.array([-1e308, -1e308])) == -math.inf
    assert exact_sum(np.array([math.inf, 1.0])) == math.inf
    assert math.isnan(exact_sum(np.array([math.nan, 1.0])))


def test_blocks_of_any_size_give_the_one_correctly_rounded_sum(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Blocks are summed apart and combined as integers: a later block with a smaller lowest
    # exponent (tiny values after large ones) shifts the running total, and cancellation across
    # blocks must leave the exact remainder.
    import rankgate.stats

    rng = np.random.default_rng(5)
    values = np.concatenate(
        [
            rng.random(50) * 1e300,
            rng.random(50) * 1e-300,
            -rng.random(50),
            np.array([5e-324, -1e300, 1e300, 3.0]),
        ]
    )
    rng.shuffle(values)
    expected = math.fsum(values.tolist())
    for block in (1, 2, 7, 64, 1 << 20):
        monkeypatch.setattr(rankgate.stats, "_EXACT_BLOCK", block)
        assert exact_sum(values) == expected, block
