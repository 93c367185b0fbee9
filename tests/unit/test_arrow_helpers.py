"""``fast``'s small Arrow helpers, which stand in for ``pa.array`` and ``pc.fill_null`` on hot paths
(those make pyarrow import pandas), against pyarrow's own conversions."""

from __future__ import annotations

import math
import subprocess
import sys
import warnings

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import given, settings
from hypothesis import strategies as st

from rankgate import fast


@settings(max_examples=200, deadline=None)
@given(st.lists(st.booleans(), max_size=70), st.integers(0, 9))
def test_mask_array_is_the_boolean_array_of_the_mask(flags: list[bool], start: int) -> None:
    mask = np.array(flags, dtype=np.bool_)[start:]
    assert fast.mask_array(mask).equals(pa.array(mask.tolist(), pa.bool_()))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-3, 50), max_size=70))
def test_indices_with_nulls_take_as_pyarrow_takes_them(indices: list[int]) -> None:
    values = np.array(indices, dtype=np.int64)
    expected = pa.array(indices, pa.int64(), mask=values < 0)
    found = fast.index_array_with_nulls(values)
    assert found.equals(expected)
    table = pa.table({"x": list(range(60))})
    assert table.take(found).equals(table.take(expected))


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.one_of(st.none(), st.integers(-5, 5)), max_size=40),
    st.integers(0, 5),
    st.integers(1, 3),
)
def test_numpy_filled_equals_fill_null(values: list[int | None], start: int, chunks: int) -> None:
    array = pa.array(values, pa.int64()).slice(min(start, len(values)))
    pieces = np.array_split(np.arange(len(array)), chunks)
    chunked = pa.chunked_array(
        [array.slice(int(p[0]), len(p)) for p in pieces if len(p)] or [array], pa.int64()
    )
    expected = pc.fill_null(array, -1).to_pylist()
    assert fast.numpy_filled(array, -1).tolist() == expected
    assert fast.numpy_filled(chunked, -1).tolist() == expected
    flags = pc.greater(array, 0)
    assert fast.numpy_filled(flags, False).tolist() == pc.fill_null(flags, False).to_pylist()
    # NaN is no integer: with nulls to fill the values become floats (no cast of NaN to int).
    as_floats = pc.fill_null(array.cast(pa.float64()), math.nan).to_numpy(zero_copy_only=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        filled = fast.numpy_filled(array, math.nan)
    assert filled.dtype == (np.float64 if array.null_count else np.int64)
    np.testing.assert_array_equal(filled.astype(np.float64), as_floats)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(-(2**31), 2**31 - 1), max_size=70))
def test_int32_array_is_pyarrows_int32_array(values: list[int]) -> None:
    assert fast.int32_array(np.array(values, dtype=np.int64)).equals(pa.array(values, pa.int32()))


def test_the_helpers_do_not_import_pandas() -> None:
    """What they replace does (``pa.scalar`` of any value, ``pa.array`` of numpy)."""
    code = (
        "import sys, numpy as np, pyarrow as pa, pyarrow.compute as pc\n"
        "from rankgate import fast\n"
        "fast.mask_array(np.array([True, False]))\n"
        "fast.int32_array(np.array([0, 2, 5]))\n"
        "fast.index_array_with_nulls(np.array([1, -1]))\n"
        "with_null = fast.index_array_with_nulls(np.array([1, -1]))\n"
        "same = pc.equal(with_null, fast.index_array(np.array([1, 2])))\n"
        "assert fast.numpy_filled(same, False).tolist() == [True, False]\n"
        "assert fast.numpy_filled(pa.chunked_array([with_null]), -1).tolist() == [1, -1]\n"
        "print('pandas' in sys.modules)\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert run.stdout.strip() == "False"
