"""Hypothesis strategies for random trace sets, shared by the conformance and property tests.

Traces are drawn to hit every awkward case the issue names: ties of grade, duplicate IDs in a
ranking, empty rankings, unicode and integer IDs (with ``1`` and ``"1"`` naming one document),
cutoffs beyond the list, labels only of grade 0, and ``relevant_ids`` overridden by grades.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

# A small pool, so rankings and labels overlap often; 7 and "7" are the same document.
DOCUMENT_POOL: list[Any] = [
    "a",
    "b",
    "c",
    "d",
    "e",
    "f",
    "g",
    "h",
    "i",
    "j",
    7,
    "7",
    12,
    "ü-doc",
    "文档",
    "🦀",
    "d 1",
    "D",
    "x:y",
    "0",
]
CUTOFFS = [1, 2, 3, 5, 10, 30]


@st.composite
def trace_records(draw: st.DrawFn, max_queries: int = 6) -> list[dict[str, Any]]:
    """A list of labeled trace records with unique query IDs."""
    count = draw(st.integers(min_value=1, max_value=max_queries))
    records = []
    for index in range(count):
        retrieved = draw(st.lists(st.sampled_from(DOCUMENT_POOL), max_size=15))
        labeled = draw(
            st.dictionaries(
                st.sampled_from(DOCUMENT_POOL).map(str),
                st.integers(min_value=0, max_value=3),
                max_size=8,
            )
        )
        record: dict[str, Any] = {"query_id": f"q{index}", "retrieved_ids": retrieved}
        style = draw(st.sampled_from(["scores", "ids", "both"]))
        if style == "scores":
            record["relevance_scores"] = labeled
        elif style == "ids":
            record["relevant_ids"] = [doc for doc, grade in labeled.items() if grade > 0]
        else:
            # relevant_ids says grade 1; a grade in relevance_scores overrides it.
            record["relevant_ids"] = draw(st.lists(st.sampled_from(DOCUMENT_POOL), max_size=4))
            record["relevance_scores"] = labeled
        records.append(record)
    return records


def effective_grades(record: dict[str, Any]) -> dict[str, int]:
    """The grades a record means, worked out independently of rankgate's validator."""
    grades = {str(doc): 1 for doc in record.get("relevant_ids", [])}
    grades.update({str(doc): grade for doc, grade in record.get("relevance_scores", {}).items()})
    return grades


def distinct_ranking(record: dict[str, Any]) -> list[str]:
    """The ranking as string IDs, each kept at its first rank."""
    return list(dict.fromkeys(str(doc) for doc in record["retrieved_ids"]))
