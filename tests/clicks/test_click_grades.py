"""Click grades that give the right metric (issue 18, item 3).

On the seeded simulator (``click_grade_table``: three rankers from good to nearly random, seeds
1-5), NDCG@10 computed with the debiased click labels must land closer to NDCG@10 with the true
grades than NDCG@10 with raw-CTR labels graded the same way, for every ranker and every seed; the
debiased click scores must keep ranking pairs better than raw CTR; and the grade levels fitted to
the logs must be the simulator's own click rates, found without its truth. NDCG@10 comes from
trec_eval (pytrec_eval), not from rankgate.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click_grade_table import JUDGED, SEEDS, Labeled, figures, labeled, ndcg_at_10, simulated
from click_simulator import CLICK_GIVEN_GRADE
from test_clicks import run, write_jsonl

from rankgate.clicks import (
    DEFAULT_THRESHOLDS,
    FIT_MIN_PAIRS,
    Propensities,
    click_labels,
    read_click_log,
)
from rankgate.errors import ConfigError, UsageError


@pytest.fixture(scope="module")
def runs() -> dict[int, Labeled]:
    return {seed: labeled(*simulated(seed)) for seed in SEEDS}


def test_the_oracle_scores_a_hand_worked_list() -> None:
    grades = {("q", "a"): 0, ("q", "b"): 3, ("q", "c"): 1, ("q", "d"): 2}
    # Gains 2^g - 1: b 7 at rank 2, c 1 at rank 3; ideal 7, 3, 1 (d is judged, not retrieved).
    dcg = 7 / math.log2(3) + 1 / math.log2(4)
    ideal = 7 + 3 / math.log2(3) + 1 / math.log2(4)
    assert ndcg_at_10([("q", ["a", "b", "c"])], grades, "pool") == pytest.approx(dcg / ideal)
    # Judged on the list alone, d leaves the ideal: b first (7), c third (1); ideal 7, 1.
    assert ndcg_at_10([("q", ["b", "a", "c"])], grades, "list") == pytest.approx(
        (7 + 1 / math.log2(4)) / (7 + 1 / math.log2(3))
    )
    # A list whose query has no label scores 0.
    assert ndcg_at_10([("q", ["b"]), ("unlabeled", ["x"])], grades, "pool") == pytest.approx(
        7 / ideal / 2
    )


@pytest.mark.parametrize("judged", JUDGED)
@pytest.mark.parametrize("seed", SEEDS)
def test_debiased_grades_give_ndcg_closer_to_the_truth_than_raw_ctr(
    runs: dict[int, Labeled], seed: int, judged: str
) -> None:
    result = figures(runs[seed], judged)
    for row in result.rows:
        assert row.debiased_error < row.raw_error, (
            f"{row.quality} ranker, seed {seed}: true {row.true:.3f}, debiased "
            f"{row.debiased:.3f}, raw CTR {row.raw:.3f}"
        )


@pytest.mark.parametrize("seed", SEEDS)
def test_debiased_labels_keep_ranking_pairs_better_than_raw_ctr(
    runs: dict[int, Labeled], seed: int
) -> None:
    result = figures(runs[seed])
    # Measured over seeds 1-5: scores 0.895-0.907 against 0.869-0.879, grades 0.922-0.934
    # against 0.862-0.878.
    ours, naive = result.spearman_score
    assert ours > 0.885 and ours > naive + 0.02, result.spearman_score
    ours, naive = result.spearman_grade
    assert ours > 0.91 and ours > naive + 0.04, result.spearman_grade


@pytest.mark.parametrize("seed", SEEDS)
def test_fitted_levels_are_the_simulators_click_rates(runs: dict[int, Labeled], seed: int) -> None:
    labels = runs[seed].debiased
    assert labels.levels is not None and labels.levels.converged
    assert labels.grading == "fitted levels" and labels.thresholds == ()
    # Measured over seeds 1-5: within 0.024 of each rate (0.007-0.024), in 37-46 iterations.
    assert np.abs(labels.levels.rates - CLICK_GIVEN_GRADE).max() < 0.03, labels.levels.rates
    assert labels.levels.shares.sum() == pytest.approx(1.0)
    probability = labels.grade_probability
    assert probability is not None
    graded = labels.grade >= 0
    assert np.all(probability[graded] >= 0.25) and np.all(np.isnan(probability[~graded]))


def test_fixed_thresholds_fail_the_same_check(runs: dict[int, Labeled]) -> None:
    """The check is not met by any grading: the old fixed thresholds, applied to both, put the
    debiased NDCG of the nearly random ranker further from the truth on every seed."""
    for seed in SEEDS:
        old = labeled(runs[seed].sim, runs[seed].log, thresholds=DEFAULT_THRESHOLDS)
        poor = figures(old).rows[2]
        assert poor.debiased_error > poor.raw_error, (seed, poor)


# --- the fit on logs worked out by hand ----------------------------------------------------------


def two_level_log(
    pairs: int, clicks_low: int, clicks_high: int, *, rank: int = 1, shown: int = 20
) -> list[dict[str, Any]]:
    """``pairs`` pairs, each shown ``shown`` times at ``rank``: half clicked ``clicks_low`` times,
    half ``clicks_high`` times."""
    rows = []
    for p in range(pairs):
        clicks = clicks_low if p % 2 else clicks_high
        for n in range(shown):
            rows.append(
                {
                    "query_id": f"q{p}",
                    "document_id": "d",
                    "rank": rank,
                    "clicked": n < clicks,
                    "list_id": f"q{p}-{rank}-{n}",
                }
            )
    return rows


def test_two_clear_levels_are_found_exactly() -> None:
    log, _ = read_click_log(two_level_log(60, 2, 16))
    labels = click_labels(log, Propensities(np.ones(1), "given"), grades=2)
    assert labels.levels is not None
    # Two separate groups: each level is its group's clicks over impressions, 2/20 and 16/20.
    assert labels.levels.rates == pytest.approx([0.1, 0.8], abs=1e-6)
    assert labels.levels.shares == pytest.approx([0.5, 0.5], abs=1e-6)
    expected = [0 if clicks == 2 else 1 for clicks in labels.clicks.tolist()]
    assert labels.grade.tolist() == expected


def test_levels_are_corrected_for_examination() -> None:
    # Pairs at rank 2, examined half as often: half the clicks for the same levels. (Shown 60
    # times, so that no pair could belong to the other level: with 20 impressions, one click in
    # 20 is a thousandth as likely at the high level as at the low one, and the thousandths of
    # 30 pairs would pull the high level down by 0.001.)
    log, _ = read_click_log(two_level_log(60, 3, 24, rank=2, shown=60))
    labels = click_labels(log, Propensities(np.array([1.0, 0.5]), "given"), grades=2)
    assert labels.levels is not None
    assert labels.levels.rates == pytest.approx([0.1, 0.8], abs=1e-6)


@pytest.mark.parametrize(("clicks", "grade"), [(0, 0), (20, 3)])
def test_logs_without_contrast_grade_alike_without_warnings(clicks: int, grade: int) -> None:
    log, _ = read_click_log(two_level_log(60, clicks, clicks))
    labels = click_labels(log, Propensities(np.ones(1), "given"))
    assert labels.levels is not None
    assert set(labels.grade.tolist()) == {grade}


def test_too_few_pairs_fall_back_to_fixed_thresholds_and_say_so() -> None:
    log, _ = read_click_log(two_level_log(FIT_MIN_PAIRS - 1, 2, 16))
    given = Propensities(np.ones(1), "given")
    labels = click_labels(log, given)
    assert labels.levels is None and labels.thresholds == DEFAULT_THRESHOLDS
    assert labels.grading.startswith("default thresholds (too few pairs")
    with pytest.raises(UsageError, match=f"at least {FIT_MIN_PAIRS}"):
        click_labels(log, given, grades=4)


@pytest.mark.parametrize("grades", [1, 11, 2.5, True])
def test_grades_out_of_range_are_refused(grades: Any) -> None:
    log, _ = read_click_log(two_level_log(60, 2, 16))
    with pytest.raises(ConfigError, match="grades"):
        click_labels(log, Propensities(np.ones(1), "given"), grades=grades)


def test_cli_fits_the_grades_asked_for(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sim, _ = simulated(2, queries=60, lists_per_query=40)
    clicks = write_jsonl(tmp_path / "clicks.jsonl", sim.records)
    out = tmp_path / "labels.jsonl"
    code, text, err = run(capsys, "labels", "from-clicks", clicks, "-o", out, "--grades", "3")
    assert code == 0, err
    line = next(line for line in text.splitlines() if line.startswith("grades fitted"))
    assert "2: " in line and "3: " not in line.split("·")[0]
    written = {
        grade
        for line in out.read_text().splitlines()
        for grade in json.loads(line)["relevance_scores"].values()
    }
    assert written == {0, 1, 2}


@pytest.mark.parametrize(
    ("option", "fragment"),
    [
        (["--grades", "1"], "--grades"),
        (["--grades", "x"], "--grades"),
        (["--grades", "3", "--thresholds", "0.1,0.5"], "--grades"),
        (["--grades", "3", "--calibrate", "human.jsonl"], "--grades"),
    ],
)
def test_cli_refuses_bad_grades_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: list[str], fragment: str
) -> None:
    sim, _ = simulated(1, queries=20, lists_per_query=10)
    clicks = write_jsonl(tmp_path / "c.jsonl", sim.records)
    code, _, err = run(capsys, "labels", "from-clicks", clicks, "-o", tmp_path / "o.jsonl", *option)
    assert code == 2 and err.startswith("rankgate: error:") and err.count("\n") == 1, err
    assert fragment in err and "Traceback" not in err
