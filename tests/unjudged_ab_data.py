"""A seeded A/B simulation where labels are incomplete, for the label-limited comparison tests.

Every query has 30 retrieved documents. The hidden truth: three documents of the baseline's top 10
are relevant (grade 1 or 2), and three documents the baseline ranks 11-30 are highly relevant
(grade 3). Annotators judged the baseline's top 10 only (a depth-10 pool of the system in
production), so the grade-3 documents are relevant and unjudged.

* ``surfacing``: on most queries the candidate puts one to three of those unjudged grade-3
  documents first and keeps the baseline's order below them. It is better (truth), but under
  ``unjudged=nonrelevant`` it only pushes judged relevant documents down: today's compare calls it
  a regression.
* ``regressed`` with ``control_labels``: the candidate moves the baseline's relevant documents out
  of the top 10; both arms' top 10 are judged (the pool is their union), so both are equally
  judged and the regression is real.

``reveal(labels, pairs)`` returns the labels with the truth added for the listed pairs, as an
annotator would after judging them.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

TOPICS = ("news", "docs")
DEPTH = 10


@dataclass(frozen=True)
class UnjudgedAB:
    baseline: list[dict[str, Any]]  # traces, with the topic attribute, without labels
    surfacing: list[dict[str, Any]]
    regressed: list[dict[str, Any]]
    labels: dict[str, dict[str, float]]  # judged: the baseline's top 10, by query
    control_labels: dict[str, dict[str, float]]  # judged: both arms' top 10 (regressed)
    truth: dict[str, dict[str, float]]  # every relevant document, by query


def unjudged_ab(queries: int = 240, seed: int = 17) -> UnjudgedAB:
    rng = random.Random(seed)
    baseline, surfacing, regressed = [], [], []
    labels: dict[str, dict[str, float]] = {}
    control: dict[str, dict[str, float]] = {}
    truth: dict[str, dict[str, float]] = {}
    for number in range(queries):
        query_id = f"q{number}"
        topic = TOPICS[number % len(TOPICS)]
        docs = [f"{query_id}-d{i}" for i in range(30)]
        known = rng.sample(range(DEPTH), 3)
        hidden = rng.sample(range(DEPTH, 30), 3)
        grades = {docs[i]: float(rng.choice((1, 2))) for i in known}
        grades.update({docs[i]: 3.0 for i in hidden})
        truth[query_id] = grades
        labels[query_id] = {doc: grades.get(doc, 0.0) for doc in docs[:DEPTH]}
        baseline.append({"query_id": query_id, "topic": topic, "retrieved_ids": docs})

        ranking = list(docs)
        if rng.random() < 0.8:
            lifted = [docs[i] for i in hidden[: rng.randint(1, 3)]]
            ranking = lifted + [doc for doc in docs if doc not in lifted]
        surfacing.append({"query_id": query_id, "topic": topic, "retrieved_ids": ranking})

        relevant_top = [doc for doc in docs[:DEPTH] if grades.get(doc, 0.0) > 0]
        others = [doc for doc in docs if doc not in relevant_top and doc not in grades]
        worse = (
            others[:DEPTH]
            + relevant_top
            + [d for d in docs if d not in others[:DEPTH] and d not in relevant_top]
        )
        regressed.append({"query_id": query_id, "topic": topic, "retrieved_ids": worse})
        pool = dict.fromkeys([*docs[:DEPTH], *worse[:DEPTH]])
        control[query_id] = {doc: grades.get(doc, 0.0) for doc in pool}
    return UnjudgedAB(baseline, surfacing, regressed, labels, control, truth)


def label_records(labels: dict[str, dict[str, float]]) -> list[dict[str, Any]]:
    """One label record per query: ``{"query_id", "relevance_scores"}``."""
    return [
        {"query_id": query, "relevance_scores": dict(grades)} for query, grades in labels.items()
    ]


def with_labels(
    traces: list[dict[str, Any]], labels: dict[str, dict[str, float]]
) -> list[dict[str, Any]]:
    """The traces carrying their query's labels."""
    return [{**trace, "relevance_scores": dict(labels[trace["query_id"]])} for trace in traces]


def reveal(
    labels: dict[str, dict[str, float]],
    truth: dict[str, dict[str, float]],
    pairs: Iterable[tuple[str, str]],
) -> dict[str, dict[str, float]]:
    """``labels`` with the true grade of each (query, document) pair added (0 when not relevant)."""
    revealed = {query: dict(grades) for query, grades in labels.items()}
    for query, doc in pairs:
        revealed[query][doc] = truth[query].get(doc, 0.0)
    return revealed


def unjudged_in_top(
    traces: list[dict[str, Any]], labels: dict[str, dict[str, float]], depth: int
) -> dict[str, set[str]]:
    """Per query, the documents of the top ``depth`` that carry no label: counted here directly
    from the records, independently of rankgate."""
    found = {}
    for trace in traces:
        top = list(dict.fromkeys(trace["retrieved_ids"]))[:depth]
        found[trace["query_id"]] = {doc for doc in top if doc not in labels[trace["query_id"]]}
    return found
