"""A seeded click simulator under the position-based model, for the click-label tests.

Each query has a pool of documents with true grades 0-3. Several rankers of different quality
order the pool (true grade plus Gaussian noise, a little fresh noise per list), so the same
(query, document) lands at different ranks; a share of lists can be randomized swap lists (rank 1
swapped with a random rank k). A user examines rank k with probability ``propensity[k]`` and
clicks an examined document with a probability set by its grade.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

# Probability that an examined document of each grade is clicked.
CLICK_GIVEN_GRADE = (0.03, 0.25, 0.55, 0.9)
GRADE_SHARES = (0.55, 0.2, 0.15, 0.1)


@dataclass
class Simulation:
    records: list[dict[str, Any]]
    grades: dict[tuple[str, str], int]
    propensities: np.ndarray
    lists: list[tuple[str, str, list[str]]]  # (query, ranker, ranking) of each list shown


def power_curve(eta: float, max_rank: int = 10) -> np.ndarray:
    return (1.0 / np.arange(1, max_rank + 1)) ** eta


def simulate(
    seed: int,
    *,
    queries: int = 300,
    pool: int = 20,
    lists_per_query: int = 40,
    rankers: tuple[float, ...] = (0.8, 1.6, 3.0),
    propensities: np.ndarray | None = None,
    swap_share: float = 0.0,
    shown: int = 10,
) -> Simulation:
    rng = np.random.default_rng(seed)
    curve = power_curve(1.0, shown) if propensities is None else np.asarray(propensities)
    records: list[dict[str, Any]] = []
    grades: dict[tuple[str, str], int] = {}
    lists = []
    list_number = 0
    for q in range(queries):
        query = f"q{q}"
        docs = [f"{query}-d{i}" for i in range(pool)]
        true = rng.choice(4, size=pool, p=GRADE_SHARES)
        for doc, grade in zip(docs, true.tolist(), strict=True):
            grades[(query, doc)] = grade
        base_scores = [true + rng.normal(0, sigma, pool) for sigma in rankers]
        for _ in range(lists_per_query):
            r = int(rng.integers(len(rankers)))
            scores = base_scores[r] + rng.normal(0, 0.3, pool)
            order = np.argsort(-scores, kind="stable")[:shown].tolist()
            swap = 0
            if swap_share and rng.random() < swap_share:
                swap = int(rng.integers(2, shown + 1))
                order[0], order[swap - 1] = order[swap - 1], order[0]
            examined = rng.random(shown) < curve[:shown]
            attracted = rng.random(shown) < np.asarray(CLICK_GIVEN_GRADE)[true[order]]
            clicks = examined & attracted
            list_number += 1
            ranking = [docs[i] for i in order]
            lists.append((query, f"ranker-{r}", ranking))
            for rank, (doc, click) in enumerate(zip(ranking, clicks.tolist(), strict=True), 1):
                record = {
                    "query_id": query,
                    "document_id": doc,
                    "rank": rank,
                    "clicked": bool(click),
                    "ranker": f"ranker-{r}",
                    "list_id": f"l{list_number}",
                }
                if swap:
                    record["swap_rank"] = swap
                records.append(record)
    return Simulation(records, grades, curve, lists)
