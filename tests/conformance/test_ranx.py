"""Metrics trec_eval lacks (mrr@k, dcg@k, exponential NDCG, hit_rate@k) checked against ranx.

ranx compiles its numba kernels on first use (30-60 s) and again whenever the longest document ID
changes length, so this module builds a few data sets of one fixed shape: IDs of a fixed width,
seeded numpy generation, one ranx call per data set. ranx is fed plain dicts (its DataFrame loader
breaks on pandas 3), integer grades and float scores.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

import rankgate

ranx = pytest.importorskip("ranx")

TOLERANCE = 1e-9
CUTOFFS = (1, 3, 5, 10, 20, 40)

# rankgate metric template | ranx metric template
PAIRS = [
    ("mrr@{k}", "mrr@{k}"),
    ("hit_rate@{k}", "hit_rate@{k}"),
    ("dcg@{k}", "dcg_burges@{k}"),
    ("dcg(gain=linear)@{k}", "dcg@{k}"),
    ("ndcg@{k}", "ndcg_burges@{k}"),
    ("ndcg(gain=linear)@{k}", "ndcg@{k}"),
    ("precision@{k}", "precision@{k}"),
    ("recall@{k}", "recall@{k}"),
    ("map@{k}", "map@{k}"),
]
UNCUT = [("mrr", "mrr"), ("map", "map"), ("r_precision", "r-precision")]


def _dataset(seed: int, queries: int = 60) -> list[dict[str, Any]]:
    """Seeded traces: 1-30 retrieved of a 400-document pool, 1-8 labels with grades 0-3."""
    rng = np.random.default_rng(seed)
    records = []
    for index in range(queries):
        pool = rng.choice(400, size=60, replace=False)
        retrieved = [f"d{doc:04d}" for doc in pool[: rng.integers(1, 31)]]
        # Labels drawn from the same pool, so some are retrieved and some are not.
        labeled = rng.choice(pool, size=rng.integers(1, 9), replace=False)
        grades = {f"d{doc:04d}": int(rng.integers(0, 4)) for doc in labeled}
        grades[f"d{labeled[0]:04d}"] = int(rng.integers(1, 4))  # at least one relevant document
        records.append(
            {"query_id": f"q{index:03d}", "retrieved_ids": retrieved, "relevance_scores": grades}
        )
    return records


@pytest.mark.parametrize("seed", [11, 12, 13])
def test_metrics_equal_ranx(seed: int) -> None:
    records = _dataset(seed)
    pairs = [(ours.format(k=k), theirs.format(k=k)) for ours, theirs in PAIRS for k in CUTOFFS]
    pairs += UNCUT

    qrels = ranx.Qrels({r["query_id"]: r["relevance_scores"] for r in records})
    run = ranx.Run(
        {
            r["query_id"]: {
                doc: float(len(r["retrieved_ids"]) - i) for i, doc in enumerate(r["retrieved_ids"])
            }
            for r in records
        }
    )
    theirs = ranx.evaluate(qrels, run, [m for _, m in pairs], return_mean=False)
    evaluation = rankgate.evaluate(records, [m for m, _ in pairs])

    assert evaluation.summary.scored == len(records)
    order = {query_id: i for i, query_id in enumerate(sorted(r["query_id"] for r in records))}
    for metric, measure in pairs:
        expected = np.asarray(theirs[measure])
        ours = evaluation.values[rankgate.parse_metric(metric)]
        for position, query_id in enumerate(evaluation.query_ids):
            want = float(expected[order[query_id]])
            got = float(ours[position])
            assert math.isclose(got, want, rel_tol=0, abs_tol=TOLERANCE), (
                f"seed {seed} {query_id} {metric}: rankgate {got!r} != ranx {measure} {want!r}"
            )
