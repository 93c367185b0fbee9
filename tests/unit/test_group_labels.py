"""A store's label rows grouped by query (``store.columns.group_labels``) equal a plain Python
grouping, whether each query's rows come together (a store's usual order, grouped by runs) or
interleaved (grouped by hashing every ID), in one chunk or several."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from rankgate.store import columns

QUERIES = st.sampled_from(["q1", "q2", "q10", "é", "🦀", "", "q1 "])


@st.composite
def label_rows(draw: Any) -> list[tuple[str, str, float]]:
    grouped = draw(st.booleans())
    queries = draw(st.lists(QUERIES, max_size=6, unique=grouped))
    rows = []
    for query in queries:
        for number in range(draw(st.integers(1, 4))):
            rows.append((query, f"d{number}", float(draw(st.integers(0, 3)))))
    return rows if grouped else draw(st.permutations(rows))


def oracle(rows: list[tuple[str, str, float]]) -> dict[str, list[tuple[str, float]]]:
    groups: dict[str, list[tuple[str, float]]] = {}
    for query, document, grade in rows:
        groups.setdefault(query, []).append((document, grade))
    return groups


@settings(max_examples=300, deadline=None)
@given(label_rows(), st.integers(1, 4))
def test_groups_equal_a_plain_grouping_in_order_of_first_appearance(
    rows: list[tuple[str, str, float]], chunks: int
) -> None:
    size = max(1, -(-len(rows) // chunks))
    pieces = [rows[i : i + size] for i in range(0, len(rows), size)] or [[]]
    query_ids = pa.chunked_array([[r[0] for r in piece] for piece in pieces], pa.string())
    documents = pa.array([r[1] for r in rows], pa.large_string())
    grades = pa.array([r[2] for r in rows], pa.float64())
    groups = columns.group_labels(query_ids, documents, grades, ordered=False)
    expected = oracle(rows)
    assert groups.query_ids.to_pylist() == list(expected)
    assert groups.grades.to_pylist() == list(expected.values())
    found, unsure = groups.lookup(pa.array([*expected, "absent"], pa.string()))
    assert found.tolist() == [*range(len(expected)), -1]
    assert not unsure.any()
