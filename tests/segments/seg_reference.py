"""Plain-Python reference code for the segment tests: metric formulas written from their textbook
definitions (not from rankgate's kernels), and seeded dataset builders.

Conventions (README): a document is relevant when its grade >= 1; NDCG uses gain 2^g - 1 and a
log2(rank + 1) discount, its ideal DCG built from all labeled documents cut at k; recall divides by
all relevant documents; MRR is 1 / rank of the first relevant document (0 when none).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Sequence
from typing import Any


def grades_of(record: dict[str, Any]) -> dict[str, float] | None:
    """The record's labels as document -> grade (relevance_scores overriding relevant_ids)."""
    relevant = record.get("relevant_ids")
    scores = record.get("relevance_scores")
    if relevant is None and scores is None:
        return None
    grades = dict.fromkeys(relevant or (), 1.0)
    grades.update({doc: float(g) for doc, g in (scores or {}).items()})
    return grades


def ref_ndcg(retrieved: Sequence[str], grades: dict[str, float], k: int) -> float:
    dcg = sum(
        (2.0 ** grades.get(doc, 0.0) - 1.0) / math.log2(rank + 1)
        for rank, doc in enumerate(retrieved[:k], start=1)
    )
    ideal_grades = sorted(grades.values(), reverse=True)[:k]
    idcg = sum((2.0**g - 1.0) / math.log2(rank + 1) for rank, g in enumerate(ideal_grades, start=1))
    return dcg / idcg


def ref_recall(retrieved: Sequence[str], grades: dict[str, float], k: int) -> float:
    relevant = {doc for doc, g in grades.items() if g >= 1}
    return len(relevant & set(retrieved[:k])) / len(relevant)


def ref_mrr(retrieved: Sequence[str], grades: dict[str, float]) -> float:
    for rank, doc in enumerate(retrieved, start=1):
        if grades.get(doc, 0.0) >= 1:
            return 1.0 / rank
    return 0.0


REFERENCE = {
    "ndcg@10": lambda r, g: ref_ndcg(r, g, 10),
    "recall@20": lambda r, g: ref_recall(r, g, 20),
    "recall@3": lambda r, g: ref_recall(r, g, 3),
    "mrr": ref_mrr,
}


def is_scorable(record: dict[str, Any]) -> bool:
    """Labeled with at least one relevant document (so scored under the default settings)."""
    grades = grades_of(record)
    return grades is not None and any(g >= 1 for g in grades.values())


def ref_values(records: Iterable[dict[str, Any]], metric: str) -> list[float]:
    """Reference per-query values of the records that would be scored, in input order."""
    fn = REFERENCE[metric]
    out = []
    for record in records:
        grades = grades_of(record)
        if grades is not None and any(g >= 1 for g in grades.values()):
            out.append(fn(record["retrieved_ids"], grades))
    return out


def plain_mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values)


def lookup(record: dict[str, Any], path: str) -> Any:
    """A dotted path's value in a record, or None."""
    value: Any = record
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def segment_of(record: dict[str, Any], path: str) -> str:
    value = lookup(record, path)
    return "(missing)" if value is None else str(value)


def make_query(
    rng: random.Random, qid: str, quality: float, n_relevant: int = 3, depth: int = 10
) -> tuple[list[str], dict[str, int]]:
    """A ranking of ``depth`` documents and graded labels. With probability ``quality`` each
    relevant document is placed near the top, otherwise it is left out of the ranking."""
    relevant = [f"{qid}-r{i}" for i in range(n_relevant)]
    grades = {doc: rng.choice((1, 2, 3)) for doc in relevant}
    noise = [f"{qid}-n{i}" for i in range(depth)]
    placed = sorted((doc for doc in relevant if rng.random() < quality), key=lambda d: -grades[d])
    ranking = noise[: depth - len(placed)]
    for index, doc in enumerate(placed):
        if quality >= 0.5:  # a good retriever: best first, one in four a place lower
            position = index + (1 if rng.random() < 0.25 else 0)
        else:  # a poor one: rank 4 or lower
            position = rng.randrange(3, len(ranking) + 1)
        ranking.insert(position, doc)
    return ranking, grades


def make_records(
    seed: int, spec: dict[str, tuple[int, float]], extra: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """Labeled records: ``spec`` maps query_type -> (count, quality)."""
    rng = random.Random(seed)
    records = []
    for query_type, (count, quality) in spec.items():
        for i in range(count):
            qid = f"{query_type}-{i}"
            ranking, grades = make_query(rng, qid, quality)
            record = {
                "query_id": qid,
                "retrieved_ids": ranking,
                "relevance_scores": grades,
                "query_type": query_type,
            }
            record.update(extra or {})
            records.append(record)
    rng.shuffle(records)
    return records


def ranked(qid: str, rank: int | None, depth: int = 10, **extra: Any) -> dict[str, Any]:
    """A record with one relevant document (grade 1) at ``rank`` (1-based), or absent when None.

    Its hand-computed values: ndcg@10 = 1/log2(rank+1), mrr = 1/rank, recall@k = [rank <= k]."""
    ranking = [f"{qid}-n{i}" for i in range(depth)]
    if rank is not None:
        ranking.insert(rank - 1, f"{qid}-rel")
        ranking = ranking[:depth]
    record = {"query_id": qid, "retrieved_ids": ranking, "relevant_ids": [f"{qid}-rel"]}
    record.update(extra)
    return record


def unlabeled(qid: str, **extra: Any) -> dict[str, Any]:
    record = {"query_id": qid, "retrieved_ids": [f"{qid}-a", f"{qid}-b"]}
    record.update(extra)
    return record


def no_relevant(qid: str, **extra: Any) -> dict[str, Any]:
    """Labeled, but every label is grade 0: skipped as no_relevant under the defaults."""
    record = {
        "query_id": qid,
        "retrieved_ids": [f"{qid}-a", f"{qid}-b"],
        "relevance_scores": {f"{qid}-a": 0, f"{qid}-z": 0},
    }
    record.update(extra)
    return record
