"""A store's label rows grouped by query (``store.columns.group_labels``) equal a plain Python
grouping, whether each query's rows come together (a store's usual order, grouped by runs), in a
few runs (a label written for a query after other queries': runs joined), or interleaved, in one
chunk or several; and where two IDs share a hash (every ID hashed)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from rankgate.store import columns

QUERIES = st.sampled_from(["q1", "q2", "q10", "é", "🦀", "", "q1 "])


@st.composite
def label_rows(draw: Any) -> list[tuple[str, str, float]]:
    shape = draw(st.sampled_from(["runs", "split runs", "interleaved"]))
    queries = draw(st.lists(QUERIES, max_size=6, unique=shape == "runs"))
    rows = []
    for run, query in enumerate(queries):
        for number in range(draw(st.integers(1, 4))):
            rows.append((query, f"d{run}-{number}", float(draw(st.integers(0, 3)))))
    if shape == "interleaved":
        return draw(st.permutations(rows))
    return rows


def oracle(rows: list[tuple[str, str, float]]) -> dict[str, list[tuple[str, float]]]:
    groups: dict[str, list[tuple[str, float]]] = {}
    for query, document, grade in rows:
        groups.setdefault(query, []).append((document, grade))
    return groups


@settings(max_examples=300, deadline=None)
@given(label_rows(), st.integers(1, 4))
def test_groups_equal_a_plain_grouping(rows: list[tuple[str, str, float]], chunks: int) -> None:
    size = max(1, -(-len(rows) // chunks))
    pieces = [rows[i : i + size] for i in range(0, len(rows), size)] or [[]]
    query_ids = pa.chunked_array([[r[0] for r in piece] for piece in pieces], pa.string())
    documents = pa.array([r[1] for r in rows], pa.large_string())
    grades = pa.array([r[2] for r in rows], pa.float64())
    groups = columns.group_labels(query_ids, documents, grades, ordered=False)
    expected = oracle(rows)
    assert groups.table().to_pylist() == [
        {"query_id": query, "relevance_scores": expected[query]}
        for query in sorted(expected, key=str.encode)
    ]
    found, unsure = groups.lookup(pa.array([*expected, "absent"], pa.string()))
    assert found[-1] == -1 and (found[:-1] >= 0).all()
    assert not unsure.any()
    assert groups.take(found[:-1]).to_pylist() == list(expected.values())


@settings(max_examples=100, deadline=None)
@given(label_rows())
def test_sorted_rows_keep_their_order(rows: list[tuple[str, str, float]]) -> None:
    """Rows the server sorted by query ID (``ordered``) list their groups in that order."""
    rows = sorted(rows, key=lambda row: row[0].encode())
    query_ids = pa.array([r[0] for r in rows], pa.string())
    documents = pa.array([r[1] for r in rows], pa.large_string())
    grades = pa.array([r[2] for r in rows], pa.float64())
    groups = columns.group_labels(query_ids, documents, grades, ordered=True)
    expected = oracle(rows)
    assert groups.table().column("query_id").to_pylist() == list(expected)
    assert groups.table().column("relevance_scores").to_pylist() == list(expected.values())


def test_two_ids_sharing_a_hash_are_grouped_apart(monkeypatch: Any) -> None:
    """Runs whose IDs share a hash but differ are not joined: every ID is hashed instead."""
    rows = [("a", "d1", 1.0), ("b", "d2", 2.0), ("a", "d3", 3.0), ("c", "d4", 0.0)]
    monkeypatch.setattr(
        columns, "string_hashes", lambda strings: np.zeros(len(strings), dtype=np.uint64)
    )
    query_ids = pa.array([r[0] for r in rows], pa.string())
    documents = pa.array([r[1] for r in rows], pa.large_string())
    grades = pa.array([r[2] for r in rows], pa.float64())
    groups = columns.group_labels(query_ids, documents, grades, ordered=False)
    assert groups.joined is None
    assert groups.table().to_pylist() == [
        {"query_id": "a", "relevance_scores": [("d1", 1.0), ("d3", 3.0)]},
        {"query_id": "b", "relevance_scores": [("d2", 2.0)]},
        {"query_id": "c", "relevance_scores": [("d4", 0.0)]},
    ]
