"""PostgreSQL's separator-joined rankings (``store.columns.split_rankings``) equal a plain Python
oracle, on both offset widths and on slices: an ID holding the separator, a null element or a
damaged length makes the row the validator's, never a ranking with other IDs."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rankgate.store import columns

SEP = columns.RANKING_SEPARATOR

ids = st.text(alphabet=st.sampled_from(["a", "é", "🦀", SEP, ",", '"', "\\", " "]), max_size=6)


def oracle(texts: list[str | None], lengths: list[int | None]) -> tuple[list, list[bool]]:
    """A row reads when its text splits into exactly its length's pieces (an empty text with
    length 0 is an empty ranking); any other row is unread and holds no IDs."""
    rankings: list = []
    unread: list[bool] = []
    for text, length in zip(texts, lengths, strict=True):
        if text is None or length is None:
            rankings.append([])
            unread.append(True)
        elif length == 0:
            rankings.append([])
            unread.append(text != "")
        else:
            pieces = text.split(SEP)
            ok = len(pieces) == length
            rankings.append(pieces if ok else [])
            unread.append(not ok)
    return rankings, unread


# The compiled cut that runs where the extension is built, and pyarrow's, which runs without it.
CUTS = {
    "compiled": columns.split_rankings,
    "arrow": columns._split_rankings_with_arrow,
}


@pytest.mark.parametrize("cut_with", CUTS.values(), ids=list(CUTS))
@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.none(),
            st.lists(ids, max_size=5).map(lambda row: (SEP.join(row), len(row))),
        ),
        max_size=30,
    ),
    st.lists(st.integers(-1, 2), max_size=30),
    st.booleans(),
    st.integers(0, 4),
)
def test_the_compiled_cut_and_the_fallback_equal_the_oracle(cut_with, rows, nudges, large, cut):
    texts = [None if row is None else row[0] for row in rows]
    # Some lengths are off by a little, as an ID holding the separator makes them.
    lengths = [
        None if row is None else max(row[1] + (nudges[i] if i < len(nudges) else 0), 0)
        for i, row in enumerate(rows)
    ]
    text_array = pa.array(texts, pa.large_string() if large else pa.string()).slice(cut)
    length_array = pa.array(lengths, pa.int32()).slice(cut)
    expected = oracle(texts[cut:], lengths[cut:])
    rankings, unread = cut_with(text_array, length_array)
    rankings.validate(full=True)
    assert unread.tolist() == expected[1]
    assert [row or [] for row in rankings.to_pylist()] == expected[0]


def test_the_cut_runs_compiled_where_the_extension_is_built() -> None:
    """Without this, losing the compiled cut (it returns None and pyarrow cuts) would pass."""
    from rankgate import fast

    if not fast.available():
        pytest.skip("built without the compiled extension")
    cut = fast.cut_rankings(pa.array([f"a{SEP}b", None]), pa.array([2, 1]))
    assert cut is not None
    assert cut[0].to_pylist() == [["a", "b"], []]
    assert cut[1].tolist() == [False, True]
