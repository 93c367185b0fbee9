"""The unjudged-document policies as batch transformations, against their definitions spelled out
query by query in plain Python (an oracle that shares no code with ``batch.py``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rankgate import fast
from rankgate.batch import BatchBuilder, RankedBatch

GRADES = st.sampled_from([0.0, 1.0, 2.0, 3.0])


@st.composite
def queries(draw: Any) -> list[tuple[list[str], dict[str, float]]]:
    """Rankings over a small document pool (so IDs repeat and labels hit and miss) with labels."""
    found = []
    for _ in range(draw(st.integers(0, 8))):
        pool = [f"d{i}" for i in range(draw(st.integers(1, 12)))]
        ranking = draw(st.lists(st.sampled_from(pool), max_size=15))
        labels = draw(st.dictionaries(st.sampled_from(pool), GRADES, max_size=10))
        found.append((ranking, labels))
    return found


def _per_query(batch: RankedBatch) -> list[tuple[list[float], list[bool], list[float]]]:
    rows = []
    for q in range(batch.n_queries):
        ranked = slice(int(batch.ranked_offsets[q]), int(batch.ranked_offsets[q + 1]))
        labels = slice(int(batch.label_offsets[q]), int(batch.label_offsets[q + 1]))
        rows.append(
            (
                batch.ranked_grades[ranked].tolist(),
                batch.ranked_judged[ranked].tolist(),
                batch.label_grades[labels].tolist(),
            )
        )
    return rows


# The definition (numpy, batch.py) and the compiled pass that scoring uses (fast.py).
BUILDS: dict[str, Callable[[RankedBatch, float], RankedBatch]] = {
    "definition": RankedBatch.with_unjudged_relevant,
    "compiled": fast.with_unjudged_relevant,
}


@pytest.mark.parametrize("build", BUILDS.values(), ids=list(BUILDS))
@settings(max_examples=300, deadline=None)
@given(found=queries(), grade=GRADES)
def test_unjudged_relevant_labels_each_unjudged_document_at_its_rank_and_among_the_ideal(
    build: Callable[[RankedBatch, float], RankedBatch],
    found: list[tuple[list[str], dict[str, float]]],
    grade: float,
) -> None:
    builder = BatchBuilder()
    for ranking, labels in found:
        builder.add(ranking, labels)
    batch = builder.build()
    expected = []
    for ranking, labels in found:
        distinct = list(dict.fromkeys(ranking))
        as_judged = {doc: labels.get(doc, grade) for doc in distinct} | labels
        expected.append(
            (
                [as_judged[doc] for doc in distinct],
                [True] * len(distinct),
                sorted(as_judged.values(), reverse=True),
            )
        )
    assert _per_query(build(batch, grade)) == expected


@settings(max_examples=300, deadline=None)
@given(
    found=queries(),
    grade=st.floats(-2.0, 4.0, allow_nan=False),
    odd=st.lists(st.floats(-1.0, 4.0, allow_nan=False), max_size=40),
)
def test_the_compiled_pass_equals_the_definition_to_the_bit(
    found: list[tuple[list[str], dict[str, float]]], grade: float, odd: list[float]
) -> None:
    """Any grades (fractions, negatives, a policy grade between or equal to label grades): the
    arrays are equal element for element, not only per query's values."""
    builder = BatchBuilder()
    for number, (ranking, labels) in enumerate(found):
        swapped = {
            doc: odd[(number + i) % len(odd)] if odd else g
            for i, (doc, g) in enumerate(labels.items())
        }
        builder.add(ranking, swapped)
    batch = builder.build()
    expected, got = batch.with_unjudged_relevant(grade), fast.with_unjudged_relevant(batch, grade)
    for name in (
        "ranked_offsets",
        "ranked_grades",
        "ranked_judged",
        "label_offsets",
        "label_grades",
    ):
        assert np.array_equal(getattr(got, name), getattr(expected, name)), name
        assert getattr(got, name).dtype == getattr(expected, name).dtype, name


def test_the_compiled_pass_refuses_arrays_that_disagree() -> None:
    """The compiled pass checks what it is handed before touching memory: a caller's mistake is
    a ValueError, never a read or write past an array."""
    from rankgate import _join

    offsets = np.array([0, 3], dtype=np.int64)
    grades = np.zeros(3)
    judged = np.zeros(3, dtype=np.uint8)
    labels = np.array([0, 1], dtype=np.int64)
    label_grades = np.ones(1)
    good = (np.empty(3), np.empty(2, dtype=np.int64), np.empty(4))
    _join.unjudged_relevant(offsets, grades, judged, labels, label_grades, 1.0, *good)
    assert good[2].tolist() == [1.0, 1.0, 1.0, 1.0]
    too_short = (np.empty(3), np.empty(2, dtype=np.int64), np.empty(3))
    beyond = np.array([0, 4], dtype=np.int64)
    for args in (
        (offsets, grades, judged, labels, label_grades, 1.0, *too_short),
        (beyond, grades, judged, labels, label_grades, 1.0, *good),
        (offsets, grades, judged[:2], labels, label_grades, 1.0, *good),
    ):
        with pytest.raises(ValueError, match="unjudged_relevant"):
            _join.unjudged_relevant(*args)


@settings(max_examples=300, deadline=None)
@given(queries())
def test_condensed_drops_unjudged_documents_and_keeps_the_labels(
    found: list[tuple[list[str], dict[str, float]]],
) -> None:
    builder = BatchBuilder()
    for ranking, labels in found:
        builder.add(ranking, labels)
    expected = []
    for ranking, labels in found:
        judged = [doc for doc in dict.fromkeys(ranking) if doc in labels]
        expected.append(
            (
                [labels[doc] for doc in judged],
                [True] * len(judged),
                sorted(labels.values(), reverse=True),
            )
        )
    assert _per_query(builder.build().condensed()) == expected


def test_a_batch_with_every_document_judged_is_returned_as_it_is() -> None:
    builder = BatchBuilder()
    builder.add(["a", "b"], {"a": 1.0, "b": 0.0})
    batch = builder.build()
    assert batch.with_unjudged_relevant(1.0) is batch
    assert fast.with_unjudged_relevant(batch, 1.0) is batch
    assert batch.condensed() is batch
    assert np.array_equal(batch.label_grades, [1.0, 0.0])
