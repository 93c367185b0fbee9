"""Synthetic A/B trace pairs with a known change, for the comparison tests.

Every query has 40 retrieved documents and 4 relevant ones (grades 1-3), all within the baseline's
top 20, so recall@20 is 1 on every baseline query. A candidate is built from the baseline:

* *noise* (every segment, both pairs): with probability 1/2 two neighbouring documents at ranks
  2-19 swap places, a change with no direction;
* *the injected regression* (segment ``multi_hop`` only, regressed pair): every relevant document
  in the top 10 except the first is moved to ranks 11-20. The first relevant document keeps its
  rank, so reciprocal rank does not change, and none leaves the top 20, so recall@20 does not
  change: only the NDCG family (ndcg@5, ndcg@10) can drop.
"""

from __future__ import annotations

import random
from typing import Any

SEGMENT_SHARES = (("factual", 45), ("navigational", 40), ("multi_hop", 15))
AB_METRICS = ["ndcg@5,10", "mrr", "recall@20"]


def _segments(count: int) -> list[str]:
    pattern = [name for name, share in SEGMENT_SHARES for _ in range(share)]
    return [pattern[i % len(pattern)] for i in range(count)]


def ab_traces(
    queries: int = 600, seed: int = 11
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """(baseline, regressed candidate, control candidate) records; candidates carry no labels."""
    rng = random.Random(seed)
    baseline, regressed, control = [], [], []
    for number, segment in enumerate(_segments(queries)):
        docs = [f"q{number}-d{i}" for i in range(40)]
        relevant_ranks = sorted(rng.sample(range(20), 4))
        relevant = [docs[rank] for rank in relevant_ranks]
        grades = {doc: rng.choice((1, 2, 3)) for doc in relevant}
        baseline.append(
            {
                "query_id": f"q{number}",
                "query_type": segment,
                "retrieved_ids": docs,
                "relevance_scores": grades,
            }
        )
        control.append({"query_id": f"q{number}", "retrieved_ids": _noisy(docs, rng)})
        changed = _noisy(docs, rng)
        if segment == "multi_hop":
            changed = _demoted(changed, set(relevant))
        regressed.append({"query_id": f"q{number}", "retrieved_ids": changed})
    return baseline, regressed, control


def _noisy(docs: list[str], rng: random.Random) -> list[str]:
    ranking = list(docs)
    if rng.random() < 0.5:
        position = rng.randrange(1, 18)
        ranking[position], ranking[position + 1] = ranking[position + 1], ranking[position]
    return ranking


def _demoted(ranking: list[str], relevant: set[str]) -> list[str]:
    """Relevant documents in the top 10, but the first, moved just below rank 10 (in order)."""
    top = ranking[:10]
    first = next((doc for doc in top if doc in relevant), None)
    moved = [doc for doc in top if doc in relevant and doc != first]
    kept = [doc for doc in top if doc not in moved]
    rest = ranking[10:]
    # Fill the top 10 back up from below, then put the moved documents right after it.
    refill = [doc for doc in rest if doc not in relevant][: len(moved)]
    remainder = [doc for doc in rest if doc not in refill]
    return kept + refill + moved + remainder
