"""A seeded synthetic world for the PPI simulations (the tests in this folder and
``bench/ppi_simulation.py``): queries with ten ranked documents graded 0..3 by humans, an LLM judge
that over-rates them, and a uniform random tenth of the queries labeled by humans.

Each query has a richness ``a ~ U(-1.5, 1)``; each retrieved document a latent relevance
``z ~ N(a, 1)`` cut at 0.3, 1.1 and 1.8 into grades 0..3, so some queries have almost nothing
relevant and some almost everything. A system ranks the ten by ``grade + N(0, s^2)`` with a
per-query ``s ~ U(0.5, 3)`` (from a good ranking to a random one), which makes NDCG@10 vary from
query to query. The judge's grade is ``clip(round(true + bias + N(0, 0.7^2)), 0, 3)`` (round half
up), drawn independently per document.

NDCG@10 here is this module's own: linear gain (trec_eval's), discount log2(rank + 1), the ideal
from the same ten documents' grades sorted (with the judge's grades when scoring with the judge),
and 0 when nothing among them is relevant (trec_eval's convention for a zero ideal).

Every experiment is one row drawn from one seeded ``numpy.random.Generator``, in chunks of rows
(the draws of a chunk are vectorised), so the figures are the same on every run and machine.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from rankgate.ppi import ppi_mean, ppi_paired_delta

Array = npt.NDArray[np.float64]

DEPTH = 10
GRADE_CUTS = (0.3, 1.1, 1.8)
JUDGE_NOISE = 0.7
_DISCOUNT = 1.0 / np.log2(np.arange(2, DEPTH + 2))


def ndcg_at_10(grades: Array) -> Array:
    """NDCG@10 of each ranked list (last axis: grades in rank order), linear gain."""
    dcg = np.sum(grades * _DISCOUNT, axis=-1)
    ideal = np.sum(-np.sort(-grades, axis=-1) * _DISCOUNT, axis=-1)
    scores: Array = np.divide(dcg, ideal, out=np.zeros_like(dcg), where=ideal > 0)
    return scores


def ranked_grades(rng: np.random.Generator, richness: Array) -> Array:
    """True grades of ten documents per query, in a noisy system's rank order."""
    latent = rng.normal(size=(*richness.shape, DEPTH)) + richness[..., None]
    grades = np.digitize(latent, GRADE_CUTS).astype(np.float64)
    spread = rng.uniform(0.5, 3.0, (*richness.shape, 1))
    order = np.argsort(-(grades + spread * rng.normal(size=grades.shape)), axis=-1, kind="stable")
    return np.take_along_axis(grades, order, axis=-1)


def judge_grades(rng: np.random.Generator, true: Array, bias: float) -> Array:
    """The judge's grades: clip(round half up(true + bias + noise), 0, 3)."""
    noisy = true + bias + rng.normal(0.0, JUDGE_NOISE, true.shape)
    return np.clip(np.floor(noisy + 0.5), 0.0, 3.0)


def human_samples(
    rng: np.random.Generator, experiments: int, queries: int, share: float
) -> npt.NDArray[np.intp]:
    """Per experiment, the indices of a uniform random sample (without replacement) of the
    queries, ``round(share * queries)`` of them."""
    labeled = round(share * queries)
    picks: npt.NDArray[np.intp] = np.argsort(rng.random((experiments, queries)), axis=1)
    return picks[:, :labeled]


@dataclass(frozen=True)
class MeanRuns:
    """Per experiment: the true mean NDCG@10 over all queries and ``ppi_mean``'s three estimates
    (tuned), with classic PPI's (lambda = 1) interval alongside."""

    true_mean: Array
    judge_low: Array
    judge_high: Array
    human_low: Array
    human_high: Array
    ppi_low: Array
    ppi_high: Array
    classic_low: Array
    classic_high: Array
    lambdas: Array
    effective_queries: Array
    labeled: int

    def coverage(self, low: Array, high: Array) -> float:
        return float(np.mean((low <= self.true_mean) & (self.true_mean <= high)))


@dataclass(frozen=True)
class DeltaRuns:
    """Per experiment of two equally good systems: the p-values of ``ppi_paired_delta``'s three
    tests (estimand "population"), and of PPI's test for the evaluated queries only."""

    judge_p: Array
    human_p: Array
    ppi_p: Array
    ppi_evaluated_p: Array
    effective_queries: Array


def _chunks(experiments: int, chunk: int) -> Iterator[int]:
    done = 0
    while done < experiments:
        yield min(chunk, experiments - done)
        done += chunk


def simulate_means(
    experiments: int,
    *,
    queries: int = 1000,
    share: float = 0.1,
    bias: float = 0.5,
    seed: int = 20240,
    chunk: int = 100,
) -> MeanRuns:
    """``experiments`` worlds of ``queries`` queries, a judge over-rating by ``bias`` grades, and
    ``share`` of the queries labeled by humans; each estimated by ``ppi_mean``."""
    rng = np.random.default_rng(seed)
    rows: dict[str, list[float]] = {name: [] for name in MeanRuns.__dataclass_fields__}
    del rows["labeled"]
    labeled = 0
    for size in _chunks(experiments, chunk):
        true_grades = ranked_grades(rng, rng.uniform(-1.5, 1.0, (size, queries)))
        true = ndcg_at_10(true_grades)
        judge = ndcg_at_10(judge_grades(rng, true_grades, bias))
        picks = human_samples(rng, size, queries, share)
        labeled = picks.shape[1]
        for row in range(size):
            pick = picks[row]
            tuned = ppi_mean(judge[row], pick, true[row, pick])
            classic = ppi_mean(judge[row], pick, true[row, pick], tune=False)
            rows["true_mean"].append(float(np.mean(true[row])))
            for name, estimate in (
                ("judge", tuned.judge_only),
                ("human", tuned.human_only),
                ("ppi", tuned.ppi),
                ("classic", classic.ppi),
            ):
                rows[f"{name}_low"].append(estimate.low)
                rows[f"{name}_high"].append(estimate.high)
            rows["lambdas"].append(tuned.lambda_)
            rows["effective_queries"].append(tuned.effective_queries)
    arrays = {name: np.asarray(values) for name, values in rows.items()}
    return MeanRuns(**arrays, labeled=labeled)


def simulate_deltas(
    experiments: int,
    *,
    queries: int = 1000,
    share: float = 0.1,
    bias_a: float = 0.3,
    bias_b: float = 0.8,
    seed: int = 20241,
    chunk: int = 100,
) -> DeltaRuns:
    """``experiments`` worlds where systems a and b are equally good (the same grade distribution
    on the same queries, independent documents and rankings) but the judge over-rates b's
    documents by ``bias_b`` grades and a's by ``bias_a``; each compared by ``ppi_paired_delta``."""
    rng = np.random.default_rng(seed)
    judge_p: list[float] = []
    human_p: list[float] = []
    ppi_p: list[float] = []
    evaluated_p: list[float] = []
    effective: list[float] = []
    for size in _chunks(experiments, chunk):
        richness = rng.uniform(-1.5, 1.0, (size, queries))
        true_a = ranked_grades(rng, richness)
        true_b = ranked_grades(rng, richness)
        judge_a = ndcg_at_10(judge_grades(rng, true_a, bias_a))
        judge_b = ndcg_at_10(judge_grades(rng, true_b, bias_b))
        human_a, human_b = ndcg_at_10(true_a), ndcg_at_10(true_b)
        picks = human_samples(rng, size, queries, share)
        for row in range(size):
            pick = picks[row]
            args = (judge_a[row], judge_b[row], pick, human_a[row, pick], human_b[row, pick])
            result = ppi_paired_delta(*args)
            judge_p.append(result.judge_only.p_value)
            human_p.append(result.human_only.p_value)
            ppi_p.append(result.ppi.p_value)
            effective.append(result.effective_queries)
            evaluated_p.append(ppi_paired_delta(*args, estimand="evaluated").ppi.p_value)
    return DeltaRuns(
        judge_p=np.asarray(judge_p),
        human_p=np.asarray(human_p),
        ppi_p=np.asarray(ppi_p),
        ppi_evaluated_p=np.asarray(evaluated_p),
        effective_queries=np.asarray(effective),
    )
