"""Vectorised building blocks shared by the metric definitions.

Each function takes a whole ``RankedBatch`` and returns one value per query (or per ranked position).
Per-query sums go through ``np.bincount`` with weights, which adds in array order, so a query's value
does not depend on what else is in the batch: per-query values are reproducible bit for bit.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from rankgate.batch import RankedBatch

Floats = npt.NDArray[np.float64]
Bools = npt.NDArray[np.bool_]
Ints = npt.NDArray[np.int64]


def within_cutoff(batch: RankedBatch, k: int | None) -> Bools:
    """True for ranked positions inside the top k (every position when k is None)."""
    if k is None:
        return np.ones(len(batch.ranked_grades), dtype=np.bool_)
    return batch.ranked_rank < k


def relevant_hits(batch: RankedBatch, k: int | None, rel: float) -> Bools:
    """True for ranked positions in the top k whose document's grade reaches ``rel``."""
    return (batch.ranked_grades >= rel) & within_cutoff(batch, k)


def per_query_count(batch: RankedBatch, positions: Bools) -> Floats:
    """How many of the marked ranked positions each query has."""
    return np.bincount(batch.ranked_query[positions], minlength=batch.n_queries).astype(np.float64)


def per_query_sum(batch: RankedBatch, weights: Floats) -> Floats:
    """Sum of a per-position value over each query's ranked positions."""
    # bincount with weights already returns float64; astype without a copy only informs the checker.
    summed = np.bincount(batch.ranked_query, weights=weights, minlength=batch.n_queries)
    return summed.astype(np.float64, copy=False)


def relevant_total(batch: RankedBatch, rel: float) -> Floats:
    """R: how many labeled documents of each query have a grade reaching ``rel``."""
    relevant = batch.label_grades >= rel
    return np.bincount(batch.label_query[relevant], minlength=batch.n_queries).astype(np.float64)


def ratio(numerator: Floats, denominator: Floats) -> Floats:
    """numerator / denominator, and 0.0 where the denominator is 0 (nothing to find scores 0)."""
    out = np.zeros_like(numerator)
    np.divide(numerator, denominator, out=out, where=denominator != 0)
    return out


def gain(grades: Floats, kind: str) -> Floats:
    """Gain of a grade: ``exponential`` is 2^g - 1, ``linear`` is g. A grade of 0 gains nothing."""
    if kind == "linear":
        return grades.copy()
    return np.exp2(grades) - 1.0


def dcg(batch: RankedBatch, k: int | None, kind: str) -> Floats:
    """Discounted cumulative gain of each query's ranking, cut at k; discount log2(rank + 1)."""
    inside = within_cutoff(batch, k)
    # Divide (rather than multiply by a reciprocal) as trec_eval does, so values agree to the bit
    # in most cases rather than to 1e-16.
    weights = np.where(
        inside, gain(batch.ranked_grades, kind) / np.log2(batch.ranked_rank + 2.0), 0.0
    )
    return per_query_sum(batch, weights)


def ideal_dcg(batch: RankedBatch, k: int | None, kind: str) -> Floats:
    """DCG of the ideal ranking: every labeled document by grade, highest first, cut at k.

    The ideal is built from all labels, not from what was retrieved, so a system that returns
    one relevant document when five exist cannot score 1.
    """
    inside = np.ones(len(batch.label_grades), dtype=np.bool_) if k is None else batch.label_rank < k
    weights = np.where(
        inside, gain(batch.label_grades, kind) / np.log2(batch.label_rank + 2.0), 0.0
    )
    summed = np.bincount(batch.label_query, weights=weights, minlength=batch.n_queries)
    return summed.astype(np.float64, copy=False)


def first_hit_rank(batch: RankedBatch, hits: Bools) -> Floats:
    """1-based rank of each query's first marked position; 0.0 for queries with none."""
    positions = np.flatnonzero(hits)
    first = np.zeros(batch.n_queries, dtype=np.float64)
    if positions.size == 0:
        return first
    # Positions are sorted by query then rank, so the first occurrence of each query is its best.
    queries, index = np.unique(batch.ranked_query[positions], return_index=True)
    first[queries] = batch.ranked_rank[positions[index]] + 1.0
    return first


def hits_so_far(batch: RankedBatch, hits: Bools) -> Ints:
    """For each ranked position, how many marked positions its query has up to and including it."""
    running: Ints = np.cumsum(hits, dtype=np.int64)
    before_query: Ints = np.concatenate(([0], running))[batch.ranked_offsets[:-1]]
    counts: Ints = running - np.repeat(before_query, batch.ranked_lengths)
    return counts
