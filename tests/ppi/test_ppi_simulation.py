"""The acceptance test of PPI: over 1,000 seeded experiments (``ppi_world``: 1,000 queries of ten
ranked documents, a judge over-rating by half a grade with noise 0.7, a uniform random 10% of the
queries labeled by humans), the judge-only interval misses the true mean NDCG@10 in most
experiments, the PPI interval covers it 95% +/- 2% of the time, and it is narrower than the
human-only interval. And for two equally good systems whose documents the judge over-rates by
different amounts (0.3 and 0.8 grades), PPI's paired test keeps its 5% level while the judge-only
test does not.

With 1,000 experiments the binomial standard error of a 95% coverage is 0.69 points, so 93-97% is a
2.9-sigma band, and 6.5% is 2.2 sigma above a 5% rejection rate. The seeds are fixed: the rates are
the same on every run and machine. The figures (also printed by ``bench/ppi_simulation.py``) are in
each assertion's message.
"""

from __future__ import annotations

import numpy as np
import pytest
from ppi_world import DeltaRuns, MeanRuns, ndcg_at_10, simulate_deltas, simulate_means

EXPERIMENTS = 1000
ALPHA = 0.05


@pytest.fixture(scope="module")
def means() -> MeanRuns:
    return simulate_means(EXPERIMENTS)


@pytest.fixture(scope="module")
def deltas() -> DeltaRuns:
    return simulate_deltas(EXPERIMENTS)


def test_the_judge_only_interval_misses_the_true_mean(means: MeanRuns) -> None:
    missed = 1.0 - means.coverage(means.judge_low, means.judge_high)
    assert missed > 0.5, f"judge-only interval missed the true mean in {missed:.1%}"


def test_the_ppi_interval_covers_the_true_mean_95_percent_of_the_time(means: MeanRuns) -> None:
    tuned = means.coverage(means.ppi_low, means.ppi_high)
    classic = means.coverage(means.classic_low, means.classic_high)
    human = means.coverage(means.human_low, means.human_high)
    figures = f"PPI++ {tuned:.1%}, classic PPI {classic:.1%}, human-only {human:.1%}"
    assert 0.93 <= tuned <= 0.97, figures
    assert 0.93 <= classic <= 0.97, figures
    assert 0.93 <= human <= 0.97, figures


def test_the_ppi_interval_is_narrower_than_the_human_only_one(means: MeanRuns) -> None:
    ppi = means.ppi_high - means.ppi_low
    human = means.human_high - means.human_low
    narrower = float(np.mean(ppi < human))
    figures = (
        f"mean width PPI {ppi.mean():.4f}, human-only {human.mean():.4f}; PPI narrower in "
        f"{narrower:.1%}; mean effective queries {means.effective_queries.mean():.1f} "
        f"for {means.labeled} labeled; mean lambda {means.lambdas.mean():.2f}"
    )
    assert ppi.mean() < human.mean(), figures
    assert narrower > 0.5, figures
    assert means.effective_queries.mean() > means.labeled, figures


def test_the_ppi_paired_test_keeps_its_level_where_the_judge_only_one_does_not(
    deltas: DeltaRuns,
) -> None:
    ppi = float(np.mean(deltas.ppi_p < ALPHA))
    human = float(np.mean(deltas.human_p < ALPHA))
    judge = float(np.mean(deltas.judge_p < ALPHA))
    figures = (
        f"false positives at alpha {ALPHA}: PPI {ppi:.1%}, human-only {human:.1%}, "
        f"judge-only {judge:.1%}"
    )
    assert ppi <= 0.065, figures
    assert human <= 0.065, figures
    assert judge > 0.2, figures


def test_the_ndcg_oracle_is_trec_evals() -> None:
    """The simulation's own NDCG@10 equals trec_eval's ndcg_cut_10 (pytrec_eval) when the qrels
    hold exactly the ten ranked documents' grades."""
    pytrec_eval = pytest.importorskip("pytrec_eval")
    rng = np.random.default_rng(3)
    grades = rng.integers(0, 4, (40, 10)).astype(np.float64)
    grades[0] = 0.0  # nothing relevant: 0 by both conventions
    qrels = {
        f"q{q}": {f"d{rank}": int(grade) for rank, grade in enumerate(row)}
        for q, row in enumerate(grades)
    }
    run = {f"q{q}": {f"d{rank}": float(10 - rank) for rank in range(10)} for q in range(40)}
    scored = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"}).evaluate(run)
    expected = [scored.get(f"q{q}", {}).get("ndcg_cut_10", 0.0) for q in range(40)]
    assert ndcg_at_10(grades) == pytest.approx(expected, abs=1e-12)
