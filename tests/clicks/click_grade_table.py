"""NDCG@10 of each simulated ranker under true, debiased-click and raw-CTR labels, with trec_eval
(pytrec_eval) as the metric: the figures of the click-grade test and of ``bench/click_grades.py``.

Setup (the "popular queries" of the click tests): ``click_simulator.simulate`` with 150 queries of
20 documents, 120 result lists per query from three rankers of different quality (true grade plus
Gaussian noise of standard deviation 1, 4 and 10: good, medium, nearly random), examination
``1/k``. Debiased labels use the propensities ``harvest`` estimates (the CLI's default); raw-CTR
labels are the same ``click_labels`` call with every propensity 1, so both go through the same
grading, smoothing and ``min_examinations``.

A ranker's NDCG@10 is the mean over every list it served. Each list is scored against all the
labels of its query: the true grades of the whole pool, or the click labels of every pair that
earned one (a pair without a label is not relevant, as in trec_eval; a query without a relevant
label scores 0). Gains are exponential (``2^g - 1``, rankgate's ``ndcg@10``): the qrels carry the
gains and trec_eval's ``ndcg_cut_10`` sums them as given. ``judged="list"`` restricts every set of
labels to the documents of the list scored, the other common reading.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytrec_eval
from click_simulator import Simulation, simulate
from scipy.stats import spearmanr

from rankgate.clicks import (
    ClickLabels,
    ClickLog,
    Propensities,
    click_labels,
    estimate_propensities,
    read_click_log,
)

SEEDS = (1, 2, 3, 4, 5)
RANKERS = (1.0, 4.0, 10.0)
QUALITY = ("good", "medium", "poor")
QUERIES = 150
LISTS_PER_QUERY = 120
JUDGED = ("pool", "list")


@dataclass(frozen=True)
class RankerRow:
    quality: str
    true: float
    debiased: float
    raw: float

    @property
    def debiased_error(self) -> float:
        return abs(self.debiased - self.true)

    @property
    def raw_error(self) -> float:
        return abs(self.raw - self.true)


@dataclass(frozen=True)
class SeedFigures:
    rows: tuple[RankerRow, ...]
    spearman_score: tuple[float, float]  # (debiased, raw CTR) click scores against true grades
    spearman_grade: tuple[float, float]  # the same for the grades written


def raw_ctr_labels(
    log: ClickLog, *, max_rank: int = 10, thresholds: tuple[float, ...] | None = None
) -> ClickLabels:
    """Clicks over impressions, graded the way the debiased scores are."""
    return click_labels(log, Propensities(np.ones(max_rank), "none"), thresholds=thresholds)


def ndcg_at_10(
    lists: list[tuple[str, list[str]]], grades: dict[tuple[str, str], int], judged: str
) -> float:
    """Mean trec_eval ndcg_cut_10 over ``lists`` (query, ranking), exponential gain."""
    by_query: dict[str, dict[str, int]] = {}
    for (query, document), grade in grades.items():
        by_query.setdefault(query, {})[document] = 2**grade - 1
    qrels: dict[str, dict[str, int]] = {}
    run: dict[str, dict[str, float]] = {}
    for number, (query, ranking) in enumerate(lists):
        topic = f"{query}#{number}"
        labels = by_query.get(query, {})
        if judged == "list":
            labels = {d: labels[d] for d in ranking if d in labels}
        if labels:
            qrels[topic] = labels
        # Falling scores in rank order: trec_eval sorts by score, so the order is the ranker's.
        run[topic] = {document: float(len(ranking) - i) for i, document in enumerate(ranking)}
    scored = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"}).evaluate(run)
    # A list whose query has no label at all is absent from trec_eval's answer: it scores 0.
    return sum(m["ndcg_cut_10"] for m in scored.values()) / len(lists)


@dataclass(frozen=True)
class Labeled:
    """One simulated log with its debiased and raw-CTR labels."""

    sim: Simulation
    log: ClickLog
    debiased: ClickLabels
    raw: ClickLabels


def simulated(
    seed: int, *, queries: int = QUERIES, lists_per_query: int = LISTS_PER_QUERY
) -> tuple[Simulation, ClickLog]:
    sim = simulate(seed, queries=queries, lists_per_query=lists_per_query, rankers=RANKERS)
    log, skipped = read_click_log(sim.records)
    if skipped:
        raise AssertionError(f"the simulator wrote invalid records: {skipped}")
    return sim, log


def labeled(
    sim: Simulation, log: ClickLog, *, thresholds: tuple[float, ...] | None = None
) -> Labeled:
    """Debiased (harvested propensities) and raw-CTR labels of one log, graded alike: by the
    default fitted levels, or by ``thresholds`` for both."""
    debiased = click_labels(log, estimate_propensities(log, "harvest"), thresholds=thresholds)
    return Labeled(sim, log, debiased, raw_ctr_labels(log, thresholds=thresholds))


def figures(run: Labeled, judged: str = "pool") -> SeedFigures:
    """NDCG@10 per ranker with each set of labels, and the rank correlations."""
    sim, log, debiased, raw = run.sim, run.log, run.debiased, run.raw
    debiased_grades, raw_grades = debiased.grades_by_pair(), raw.grades_by_pair()
    rows = []
    for index, quality in enumerate(QUALITY):
        served = [(q, ranking) for q, ranker, ranking in sim.lists if ranker == f"ranker-{index}"]
        rows.append(
            RankerRow(
                quality,
                ndcg_at_10(served, sim.grades, judged),
                ndcg_at_10(served, debiased_grades, judged),
                ndcg_at_10(served, raw_grades, judged),
            )
        )
    # Rank correlation on the pairs the debiased labels grade (raw CTR grades nearly all).
    mask = debiased.grade >= 0
    truth = [
        sim.grades[(log.query_ids[q], log.document_ids[d])]
        for q, d in zip(
            debiased.query[mask].tolist(), debiased.document[mask].tolist(), strict=True
        )
    ]

    def rho(values: np.ndarray) -> float:
        return float(spearmanr(truth, values[mask]).statistic)

    return SeedFigures(
        tuple(rows),
        (rho(debiased.score), rho(raw.score)),
        (rho(debiased.grade), rho(raw.grade)),
    )
