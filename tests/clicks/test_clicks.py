"""Click labels against a simulator with known truth: true grades, a known propensity curve,
several rankers of different quality and click noise (``click_simulator``).

The debiased labels must recover the true grades better than raw click-through rate on every seed
(rank correlation and NDCG of the labels' own ordering), the estimated propensities must follow the
true curve, and metrics computed with the debiased labels must land near those with true labels.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click_simulator import CLICK_GIVEN_GRADE, Simulation, simulate
from scipy.stats import kendalltau, spearmanr

from rankgate import Settings, evaluate
from rankgate.cli import main
from rankgate.clicks import (
    ClickLabels,
    ClickLog,
    Propensities,
    click_labels,
    estimate_propensities,
    power_law,
    read_click_log,
)
from rankgate.errors import UsageError

SEEDS = (1, 2, 3)
# A good production ranker, a mediocre one, and a nearly random one (exploration traffic).
RANKERS = (1.0, 4.0, 10.0)
NOT_A_POWER_LAW = np.array([1.0, 0.8, 0.62, 0.5, 0.36, 0.3, 0.22, 0.18, 0.15, 0.12])


def raw_ctr(log: ClickLog) -> ClickLabels:
    """Clicks over impressions: what a naive pipeline labels with."""
    return click_labels(
        log, Propensities(np.ones(10), "none"), prior_strength=0, min_examinations=0
    )


def true_grades(labels: ClickLabels, sim: Simulation, mask: np.ndarray) -> list[int]:
    log = labels.log
    return [
        sim.grades[(log.query_ids[q], log.document_ids[d])]
        for q, d in zip(labels.query[mask].tolist(), labels.document[mask].tolist(), strict=True)
    ]


def ndcg_of_labels(
    scores: np.ndarray, labels: ClickLabels, sim: Simulation, mask: np.ndarray
) -> float:
    """Per query, order the labeled documents by their estimated score; NDCG@10 of that order
    against the true grades, averaged over queries."""
    by_query: dict[int, list[tuple[float, int]]] = {}
    for index, grade in zip(
        np.flatnonzero(mask).tolist(), true_grades(labels, sim, mask), strict=True
    ):
        by_query.setdefault(int(labels.query[index]), []).append((float(scores[index]), grade))
    values = []
    for rows in by_query.values():
        gains = [2.0**g - 1 for _, g in sorted(rows, key=lambda r: -r[0])][:10]
        ideal = sorted((2.0**g - 1 for _, g in rows), reverse=True)[:10]
        discount = 1 / np.log2(np.arange(2, 12))
        best = float(np.dot(ideal, discount[: len(ideal)]))
        if best > 0:
            values.append(float(np.dot(gains, discount[: len(gains)])) / best)
    return float(np.mean(values))


def per_query_tau(
    scores: np.ndarray, labels: ClickLabels, sim: Simulation, mask: np.ndarray
) -> float:
    groups: dict[int, tuple[list[float], list[int]]] = {}
    for index, grade in zip(
        np.flatnonzero(mask).tolist(), true_grades(labels, sim, mask), strict=True
    ):
        estimated, truth = groups.setdefault(int(labels.query[index]), ([], []))
        estimated.append(float(scores[index]))
        truth.append(grade)
    taus = [kendalltau(a, b).statistic for a, b in groups.values() if len(set(b)) > 1]
    return float(np.nanmean(taus))


@pytest.fixture(scope="module")
def simulations() -> dict[int, tuple[Simulation, ClickLog]]:
    runs = {}
    for seed in SEEDS:
        sim = simulate(seed, rankers=RANKERS)
        log, skipped = read_click_log(sim.records)
        assert not skipped
        runs[seed] = (sim, log)
    return runs


@pytest.mark.parametrize("seed", SEEDS)
def test_debiased_labels_recover_true_grades_better_than_raw_ctr(
    simulations: dict[int, tuple[Simulation, ClickLog]], seed: int
) -> None:
    sim, log = simulations[seed]
    debiased = click_labels(log, estimate_propensities(log, "em"))
    raw = raw_ctr(log)
    mask = debiased.grade >= 0  # both judged on the same pairs: those the debiased labels keep
    assert mask.sum() > 1000
    truth = true_grades(debiased, sim, mask)
    figures = {
        "spearman": (
            spearmanr(truth, debiased.score[mask]).statistic,
            spearmanr(truth, raw.score[mask]).statistic,
        ),
        "per-query tau": (
            per_query_tau(debiased.score, debiased, sim, mask),
            per_query_tau(raw.score, raw, sim, mask),
        ),
        "ndcg of labels": (
            ndcg_of_labels(debiased.score, debiased, sim, mask),
            ndcg_of_labels(raw.score, raw, sim, mask),
        ),
    }
    # A clear win on both measures the issue names; per query the debiased order never loses.
    for name in ("spearman", "ndcg of labels"):
        ours, naive = figures[name]
        assert ours > naive + 0.015, f"{name}: debiased {ours:.3f} vs raw CTR {naive:.3f}"
    ours, naive = figures["per-query tau"]
    assert ours > naive, f"per-query tau: debiased {ours:.3f} vs raw CTR {naive:.3f}"


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("method", ["em", "harvest", "swap"])
@pytest.mark.parametrize("curve", ["power law", "table"])
def test_estimated_propensities_follow_the_true_curve(method: str, curve: str, seed: int) -> None:
    truth = power_law(1.0).values if curve == "power law" else NOT_A_POWER_LAW
    sim = simulate(
        seed, rankers=RANKERS, propensities=truth, swap_share=0.4 if method == "swap" else 0.0
    )
    log, _ = read_click_log(sim.records)
    estimated = estimate_propensities(log, method)
    assert estimated.method == method
    error = np.abs(estimated.values - truth)
    # Measured over seeds 1-4 and 7: EM and harvesting stay within 0.04 of the curve; swap
    # estimates rest on the few lists swapped at each rank and reach 0.107.
    tolerance = 0.12 if method == "swap" else 0.05
    assert error.max() < tolerance, f"{method}: {np.round(estimated.values, 3)} vs {truth}"


def scored(shown: dict[str, list[str]], grade: Any) -> dict[str, float]:
    """Means of ndcg@10 and precision@5 over the lists, with ``grade(query, doc)`` as labels."""
    traces = [
        {"query_id": q, "retrieved_ids": ids, "relevance_scores": {d: grade(q, d) for d in ids}}
        for q, ids in shown.items()
    ]
    result = evaluate(traces, ["ndcg@10", "precision@5"], settings=Settings(empty_relevant="zero"))
    return {str(spec): value for spec, value in result.means.items()}


@pytest.mark.parametrize("seed", SEEDS)
def test_metrics_with_debiased_labels_land_near_the_truth(seed: int) -> None:
    # Popular queries: enough impressions that most shown documents earn a label.
    sim = simulate(seed, queries=150, lists_per_query=120, rankers=RANKERS)
    log, _ = read_click_log(sim.records)
    debiased = click_labels(log, estimate_propensities(log, "em")).grades_by_pair()
    naive = click_labels(log, Propensities(np.ones(10), "none")).grades_by_pair()
    # The production ranker's first list per query, scored with each set of labels; a pair
    # left unlabeled counts as not relevant, as in trec_eval.
    shown: dict[str, list[str]] = {}
    for query, ranker, ranking in sim.lists:
        if ranker == "ranker-0":
            shown.setdefault(query, ranking)
    true = scored(shown, lambda q, d: sim.grades[(q, d)])
    ours = scored(shown, lambda q, d: debiased.get((q, d), 0))
    theirs = scored(shown, lambda q, d: naive.get((q, d), 0))
    for metric in true:
        assert abs(ours[metric] - true[metric]) < 0.04, (metric, ours, true)
    # Raw clicks undercount what the ranker showed lower down: precision is where it shows.
    gap = abs(ours["precision@5"] - true["precision@5"])
    assert gap < abs(theirs["precision@5"] - true["precision@5"]) - 0.03, (ours, theirs, true)


def test_both_log_shapes_give_the_same_labels(tmp_path: Path) -> None:
    sim = simulate(3, queries=60, rankers=RANKERS)
    lists: dict[str, dict[str, Any]] = {}
    for row in sim.records:
        entry = lists.setdefault(
            row["list_id"],
            {
                "query_id": row["query_id"],
                "ranker": row["ranker"],
                "retrieved_ids": [],
                "clicked_ids": [],
            },
        )
        entry["retrieved_ids"].append(row["document_id"])
        if row["clicked"]:
            entry["clicked_ids"].append(row["document_id"])
    by_impression, _ = read_click_log(sim.records)
    by_list, _ = read_click_log(list(lists.values()))
    a = click_labels(by_impression, power_law(1.0))
    b = click_labels(by_list, power_law(1.0))
    assert a.grades_by_pair() == b.grades_by_pair()
    assert np.allclose(np.sort(a.score), np.sort(b.score))


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def run(capsys: pytest.CaptureFixture[str], *args: object) -> tuple[int, str, str]:
    capsys.readouterr()
    try:
        code = main([str(a) for a in args])
    except SystemExit as stop:
        code = int(stop.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_writes_labels_eval_reads(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sim = simulate(5, queries=120, rankers=RANKERS)
    clicks = write_jsonl(tmp_path / "clicks.jsonl", sim.records)
    out = tmp_path / "labels.jsonl"
    code, text, err = run(capsys, "labels", "from-clicks", clicks, "--out", out)
    assert code == 0, err
    assert "propensities (harvest" in text and "left unlabeled" in text
    assert f"to {out}" in text
    records = [json.loads(line) for line in out.read_text().splitlines()]
    first = records[0]
    doc = next(iter(first["relevance_scores"]))
    confidence = first["label_confidence"][doc]
    assert set(confidence) == {"click_score", "examinations", "std_error", "grade_probability"}
    assert confidence["examinations"] >= 5
    # The grade is the most probable of four: its posterior is at least a quarter.
    assert 0.25 <= confidence["grade_probability"] <= 1
    assert "grades fitted to the logs" in text
    traces = write_jsonl(
        tmp_path / "traces.jsonl",
        [{"query_id": q, "retrieved_ids": ids} for q, r, ids in sim.lists if r == "ranker-0"][:120],
    )
    code, text, err = run(
        capsys, "eval", traces, "--labels", out, "--no-config", "--format", "json"
    )
    assert code == 0, err
    assert json.loads(text)["summary"]["labeled"] > 50

    # Given propensities and thresholds are used as given.
    table = tmp_path / "propensities.txt"
    table.write_text("# rank propensity\n1 1.0\n2 0.5\n3 0.33\n")
    code, text, _ = run(
        capsys, "labels", "from-clicks", clicks, "--out", out, "--propensity", str(table),
        "--thresholds", "0.2,0.4,0.7",
    )  # fmt: skip
    assert code == 0 and "given table" in text and "1: 0.2000" in text


def test_calibration_matches_the_human_grade_shares(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sim = simulate(6, queries=200, rankers=RANKERS)
    log, _ = read_click_log(sim.records)
    human = {key: grade for i, (key, grade) in enumerate(sim.grades.items()) if i % 4 == 0}
    labels = click_labels(log, estimate_propensities(log, "em"), calibration=human)
    assert list(labels.thresholds) == sorted(labels.thresholds) and len(labels.thresholds) == 3
    graded = labels.grades_by_pair()
    shared = [key for key in human if key in graded]
    ours = np.bincount([graded[k] for k in shared], minlength=4) / len(shared)
    theirs = np.bincount([human[k] for k in shared], minlength=4) / len(shared)
    assert np.abs(ours - theirs).max() < 0.03
    path = write_jsonl(
        tmp_path / "human.jsonl",
        [{"query_id": q, "document_id": d, "grade": g} for (q, d), g in human.items()],
    )
    clicks = write_jsonl(tmp_path / "clicks.jsonl", sim.records)
    code, _, err = run(
        capsys, "labels", "from-clicks", clicks, "--out", tmp_path / "l.jsonl", "--calibrate", path
    )
    assert code == 0, err


@pytest.mark.parametrize(
    ("row", "fragment"),
    [
        ({"query_id": "q", "document_id": "d", "rank": 0, "clicked": True}, "rank"),
        ({"query_id": "q", "document_id": "d", "rank": 1, "clicked": "yes"}, "clicked"),
        ({"query_id": "q", "retrieved_ids": ["a"], "clicked_ids": ["b"]}, "clicked_ids"),
        ({"document_id": "d", "rank": 1, "clicked": True}, "query_id"),
    ],
)
def test_bad_records_name_file_line_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], row: dict[str, Any], fragment: str
) -> None:
    good = {"query_id": "q", "document_id": "x", "rank": 1, "clicked": True}
    clicks = write_jsonl(tmp_path / "clicks.jsonl", [good, row])
    code, _, err = run(capsys, "labels", "from-clicks", clicks, "--out", tmp_path / "o.jsonl")
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert f"{clicks}:2" in err and fragment in err
    code, text, _ = run(
        capsys, "labels", "from-clicks", clicks, "--out", tmp_path / "o.jsonl",
        "--on-invalid", "skip", "--propensity", "power:1",
    )  # fmt: skip
    assert code == 0 and "skipped as invalid: 1 record" in text


def test_estimators_say_what_the_logs_lack() -> None:
    one_ranker = simulate(2, queries=50, rankers=(1.0,), lists_per_query=10)
    log, _ = read_click_log(one_ranker.records)
    with pytest.raises(UsageError, match="swap_rank"):
        estimate_propensities(log, "swap")
    single = [dict(row, rank=1) for row in one_ranker.records if row["rank"] == 1]
    log, _ = read_click_log(single)
    with pytest.raises(UsageError, match="several rankers"):
        estimate_propensities(log, "harvest")


def fixed_lists(queries: int, lists: int, *, skip_top: bool = False) -> list[dict[str, Any]]:
    """Every query always shows the same ranking: position and relevance cannot be told apart."""
    rows = []
    for q in range(queries):
        for n in range(lists):
            for rank in range(2 if skip_top else 1, 11):
                rows.append(
                    {
                        "query_id": f"q{q}",
                        "document_id": f"q{q}-d{rank}",
                        "rank": rank,
                        "clicked": (q + n + rank) % 7 == 0,
                        "list_id": f"q{q}-{n}",
                    }
                )
    return rows


def test_unidentifiable_logs_are_refused_not_guessed() -> None:
    log, _ = read_click_log(fixed_lists(30, 5))
    with pytest.raises(UsageError, match="harvesting"):
        estimate_propensities(log, "harvest")
    with pytest.raises(UsageError, match="cannot tell position from relevance"):
        estimate_propensities(log, "em")
    log, _ = read_click_log(fixed_lists(30, 5, skip_top=True))
    with pytest.raises(UsageError, match="rank 1"):
        estimate_propensities(log, "em")


def test_standard_errors_cover_the_truth() -> None:
    sim = simulate(4, rankers=RANKERS)
    log, _ = read_click_log(sim.records)
    labels = click_labels(log, power_law(1.0))
    mask = labels.grade >= 0
    truth = np.asarray(CLICK_GIVEN_GRADE)[true_grades(labels, sim, mask)]
    inside = np.abs(labels.score[mask] - truth) <= 1.96 * labels.std_error[mask]
    assert inside.mean() > 0.9, inside.mean()


def test_calibration_holds_on_pairs_it_did_not_see() -> None:
    sim = simulate(6, queries=200, rankers=RANKERS)
    log, _ = read_click_log(sim.records)
    pairs = list(sim.grades.items())
    fit = dict(pairs[0::4])
    held_out = dict(pairs[2::4])

    def agreement(propensities: Propensities) -> float:
        graded = click_labels(log, propensities, calibration=fit).grades_by_pair()
        shared = [key for key in held_out if key in graded]
        return float(np.mean([graded[k] == held_out[k] for k in shared]))

    good = agreement(estimate_propensities(log, "harvest"))
    wrong = agreement(Propensities(np.linspace(1.0, 10.0, 10), "wrong"))
    assert good > 0.65 and good > wrong + 0.05, (good, wrong)


@pytest.mark.parametrize(
    ("rows", "fragment"),
    [
        ([{"query_id": "q", "retrieved_ids": ["a", "a", "b"], "clicked_ids": []}], "twice"),
        (
            [
                {"query_id": "q", "document_id": "a", "rank": 1, "clicked": True, "list_id": 1},
                {"query_id": "q", "document_id": "a", "rank": 2, "clicked": True, "list_id": 1},
            ],
            "shown twice",
        ),
        ([{"query_id": "q", "document_id": "a", "rank": 1e300, "clicked": True}], "at most"),
        ([{"query_id": "q", "retrieved_ids": ["a"], "clicked_ids": [], "swap_rank": 1}], "swap"),
    ],
)
def test_impossible_logs_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], rows: list[dict[str, Any]], fragment: str
) -> None:
    clicks = write_jsonl(tmp_path / "c.jsonl", rows)
    code, _, err = run(capsys, "labels", "from-clicks", clicks, "--out", tmp_path / "o.jsonl")
    assert code == 2 and fragment in err and "Traceback" not in err and err.count("\n") == 1


@pytest.mark.parametrize(
    "option",
    [["--max-rank", "3000000000"], ["--prior-strength", "nan"], ["--thresholds", "nan,1,2"]],
)
def test_settings_out_of_range_are_usage_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: list[str]
) -> None:
    sim = simulate(1, queries=20, rankers=RANKERS, lists_per_query=10)
    clicks = write_jsonl(tmp_path / "c.jsonl", sim.records)
    code, _, err = run(
        capsys, "labels", "from-clicks", clicks, "--out", tmp_path / "o.jsonl",
        "--propensity", "power:1", *option,
    )  # fmt: skip
    assert code == 2 and "Traceback" not in err and err.startswith("rankgate: error:")
