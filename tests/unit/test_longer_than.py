"""The ID length check of the columnar reader (``io.columnar._longer_than``) against a plain
count of UTF-8 bytes, on both offset widths, slices, and nulls whose slots span bytes."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import given, settings
from hypothesis import strategies as st

from rankgate.io import columnar

texts = st.one_of(st.none(), st.text(alphabet=st.sampled_from(["a", "é", "🦀"]), max_size=6))


@settings(max_examples=300, deadline=None)
@given(
    st.lists(texts, max_size=30),
    st.integers(0, 8),
    st.booleans(),
    st.integers(0, 5),
    st.booleans(),
)
def test_longer_than_counts_bytes_of_each_present_string(values, limit, large, cut, masked):
    kind = pa.large_string() if large else pa.string()
    array = pa.array(values, kind)
    if masked and len(array):
        # Nulls over slots that keep their bytes (Arrow allows it), as some writers leave them.
        filled = pa.array([v if v is not None else "éé" for v in values], kind)
        array = pc.if_else(
            pa.array([v is not None for v in values]), filled, pa.nulls(len(values), kind)
        )
        array = pa.Array.from_buffers(
            kind, len(filled), [array.buffers()[0], *filled.buffers()[1:]]
        )
    array = array.slice(cut)
    expected = [v is not None and len(v.encode()) > limit for v in values[cut:]]
    assert columnar._longer_than(array, limit).tolist() == expected
