"""The label digest over Arrow columns equals the one-query digest of the validator's grades,
whatever the order, repeats and overlap of ``relevant_ids`` and ``relevance_scores``."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from rankgate.label_digest import UNKNOWN, digest_of, digests_of_columns

IDS = st.text(min_size=0, max_size=6)
GRADES = st.sampled_from([0.0, 1.0, 2.0, 3.0, 0.5, -0.0])


def _grades(relevant: list[str] | None, scores: dict[str, float] | None) -> dict[str, float] | None:
    """What the validator reads (io.validate): relevant_ids at 1, overridden by a score."""
    if relevant is None and scores is None:
        return None
    grades = dict.fromkeys(relevant or (), 1.0)
    grades.update(scores or {})
    return grades


ROWS = st.lists(
    st.tuples(
        st.one_of(st.none(), st.lists(IDS, max_size=5)),
        st.one_of(st.none(), st.dictionaries(IDS, GRADES, max_size=5)),
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=200, deadline=None)
@given(ROWS)
def test_columns_digest_as_the_validator_reads(rows: list[tuple[Any, Any]]) -> None:
    relevant = pa.array([r for r, _ in rows], pa.large_list(pa.large_string()))
    scores = pa.array(
        [None if s is None else list(s.items()) for _, s in rows],
        pa.map_(pa.large_string(), pa.float64()),
    )
    got = digests_of_columns(relevant, scores).tolist()
    expected = [digest_of(_grades(r, s)) for r, s in rows]
    assert got == expected
    # A slice (an offset into the buffers) digests the same.
    if len(rows) > 2:
        assert digests_of_columns(relevant[1:], scores[1:]).tolist() == expected[1:]
    assert digests_of_columns(relevant, None).tolist() == [
        digest_of(_grades(r, None)) for r, _ in rows
    ]


def test_ids_that_differ_only_by_length_or_zero_bytes_stay_apart() -> None:
    rows = [(["", "\x00", "\x00\x00"], None)]
    relevant = pa.array([r for r, _ in rows], pa.large_list(pa.large_string()))
    assert digests_of_columns(relevant, None).tolist() == [digest_of(_grades(*rows[0]))]
    assert len({digest_of({doc: 1.0}) for doc in ("", "\x00", "\x00\x00", "\x01")}) == 4


def test_any_change_of_a_label_changes_the_digest_and_order_does_not() -> None:
    base = {"d1": 1.0, "d2": 3.0}
    assert digest_of(base) == digest_of({"d2": 3.0, "d1": 1.0})
    assert len({digest_of(base), digest_of({"d1": 1.0, "d2": 2.0}), digest_of({"d1": 1.0}),
                digest_of({"d1": 1.0, "d2": 3.0, "d3": 0.0}), digest_of({"d1": 1.0, "e2": 3.0})}) == 5  # fmt: skip
    assert digest_of(None) == UNKNOWN and digest_of({}) != UNKNOWN
