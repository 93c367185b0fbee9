"""The compiled string hash (``_join.hash_strings``) equals the numpy definition it replaces
(``store.columns.string_hashes`` without the extension), on both offset widths and on slices."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rankgate import fast
from rankgate.store import columns

pytestmark = pytest.mark.skipif(not fast.available(), reason="built without the C extensions")


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.none() | st.text(max_size=40), max_size=40),
    st.booleans(),
    st.integers(0, 5),
)
def test_compiled_hashes_equal_the_numpy_definition(texts, large, cut):
    array = pa.array(texts, pa.large_string() if large else pa.string())
    array = array.slice(min(cut, len(texts)))
    compiled = fast.compiled_string_hashes(array)
    saved, fast._join = fast._join, None
    try:
        reference = columns.string_hashes(array)
    finally:
        fast._join = saved
    assert compiled is not None
    assert compiled.tolist() == reference.tolist()


def test_offsets_outside_the_data_are_refused():
    import numpy as np

    out = np.empty(1, dtype=np.uint64)
    offsets = np.array([0, 99], dtype=np.int64).tobytes()
    with pytest.raises(ValueError):
        fast._join.hash_strings(offsets, b"abc", 1, True, out)
