"""``rankgate eval --ppi``: the judge-only, human-only and corrected estimates of the report are the
ones pytrec_eval's per-query values give (an independent scorer) through the PPI formulas, gates
are decided on the corrected estimate, and a sample nobody declared random is refused."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import pytrec_eval

from rankgate.cli import main
from rankgate.ppi import ppi_mean, ppi_paired_delta

QUERIES = 120
SAMPLED = 30
DEPTH = 10
# trec_eval's ndcg_cut_10, which pytrec_eval computes independently.
METRIC = "ndcg(gain=linear)@10"


def _write(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Traces, true grades on every pair, a judge that over-rates by about half a grade, and a
    random sample of queries graded by humans (the file `labels todo --sample-queries` writes,
    filled in)."""
    rng = random.Random(7)
    folder = tmp_path_factory.mktemp("ppi")
    query_ids = [f"q{index:03d}" for index in range(QUERIES)]
    sample = rng.sample(query_ids, SAMPLED)
    traces, human, judge = [], [], []
    truth: dict[str, dict[str, int]] = {}
    judged: dict[str, dict[str, int]] = {}
    for query_id in query_ids:
        documents = [f"{query_id}-d{rank}" for rank in range(DEPTH)]
        traces.append({"query_id": query_id, "retrieved_ids": documents})
        truth[query_id], judged[query_id] = {}, {}
        for document in documents:
            grade = rng.choice((0, 0, 0, 1, 2, 3))
            by_judge = min(3, max(0, round(grade + 0.5 + rng.gauss(0, 0.7))))
            truth[query_id][document], judged[query_id][document] = grade, by_judge
            judge.append({"query_id": query_id, "document_id": document, "grade": by_judge,
                          "source": "judge:m1@umbrela-1"})  # fmt: skip
    for query_id in sample:
        for document, grade in truth[query_id].items():
            human.append({"query_id": query_id, "document_id": document, "grade": grade,
                          "reason": "sampled query", "sample": "stratified random, seed 0"})  # fmt: skip
    return {
        "folder": folder,
        "traces": _write(folder / "traces.jsonl", traces),
        "human": _write(folder / "human.jsonl", human),
        "judge": _write(folder / "judge.jsonl", judge),
        "query_ids": query_ids,
        "sample": sample,
        "truth": truth,
        "judged": judged,
        "runs": {t["query_id"]: _ranked(t["retrieved_ids"]) for t in traces},
    }


def _ranked(documents: list[str]) -> dict[str, float]:
    """A run entry: scores falling with rank, so trec_eval ranks the documents as listed."""
    return {document: float(DEPTH - rank) for rank, document in enumerate(documents)}


def _per_query(qrels: dict[str, dict[str, int]], run: dict[str, Any]) -> dict[str, float]:
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut"})
    return {query: values["ndcg_cut_10"] for query, values in evaluator.evaluate(run).items()}


def _eval(capsys: pytest.CaptureFixture[str], world: dict[str, Any], *extra: Any) -> Any:
    capsys.readouterr()
    try:
        code = main(["eval", str(world["traces"]), "--labels", str(world["human"]), "--labels",
                     str(world["judge"]), "--ppi", str(world["human"]), "-m", METRIC,
                     "--no-config", "--no-progress", *map(str, extra)])  # fmt: skip
    except SystemExit as stop:
        code = stop.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_the_three_estimates_match_an_independent_scorer(
    capsys: pytest.CaptureFixture[str], world: dict[str, Any]
) -> None:
    code, out, err = _eval(capsys, world, "--format", "json", "-g", f"{METRIC}>=0.1")
    assert code == 0, err
    report = json.loads(out)
    [row] = report["ppi"]["estimates"]
    query_ids, sample = world["query_ids"], world["sample"]
    judge_values = _per_query(world["judged"], world["runs"])
    human_values = _per_query({q: world["truth"][q] for q in sample}, world["runs"])
    judge_column = np.array([judge_values[q] for q in query_ids])
    labeled = np.array([query_ids.index(q) for q in sample])
    expected = ppi_mean(judge_column, labeled, np.array([human_values[q] for q in sample]),
                        tune=False)  # fmt: skip
    assert row["sampled"] == SAMPLED and row["queries"] == QUERIES
    assert row["judge_only"]["mean"] == pytest.approx(judge_column.mean(), abs=1e-12)
    assert row["human_only"]["mean"] == pytest.approx(
        np.mean([human_values[q] for q in sample]), abs=1e-12
    )
    assert row["judge_weight"] == 1.0
    for key in ("mean", "low", "high"):
        assert row["ppi"][key] == pytest.approx(getattr(expected.ppi, key), abs=1e-12)
        assert row["human_only"][key] == pytest.approx(getattr(expected.human_only, key), abs=1e-12)
    # The report's mean is the corrected one, and the gate read it.
    assert report["metrics"][row["metric"]] == pytest.approx(expected.ppi.mean, abs=1e-12)
    assert report["gates"][0]["value"] == pytest.approx(expected.ppi.mean, abs=1e-12)
    # The judge over-rates: its mean is above the corrected one.
    assert row["judge_offset"] > 0
    assert report["ppi"]["judge_labels"] == QUERIES * DEPTH  # the judge pass reads every one
    assert report["ppi"]["human_labels"] == SAMPLED * DEPTH


def test_the_gate_is_decided_on_the_corrected_estimate(
    capsys: pytest.CaptureFixture[str], world: dict[str, Any]
) -> None:
    judge_mean = float(np.mean(list(_per_query(world["judged"], world["runs"]).values())))
    # A threshold the biased judge alone would clear, but the corrected estimate does not.
    code, out, err = _eval(capsys, world, "-g", f"{METRIC}>={judge_mean - 0.005:.4f}")
    assert code == 1, err
    assert "prediction-powered estimates" in out and "judge only" in out


def test_a_sample_nobody_declared_random_is_refused(
    capsys: pytest.CaptureFixture[str], world: dict[str, Any]
) -> None:
    undeclared = _write(world["folder"] / "chosen.jsonl", [
        {"query_id": q, "document_id": f"{q}-d0", "grade": 1} for q in world["sample"]
    ])  # fmt: skip
    capsys.readouterr()
    with pytest.raises(SystemExit) as stop:
        main(["eval", str(world["traces"]), "--labels", str(undeclared), "--labels",
              str(world["judge"]), "--ppi", str(undeclared), "--no-config"])  # fmt: skip
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "random sample" in err[0] and "--sample-queries" in err[0]


def test_sampled_queries_not_graded_yet_are_counted_and_said(
    capsys: pytest.CaptureFixture[str], world: dict[str, Any]
) -> None:
    records = [json.loads(line) for line in world["human"].read_text().splitlines()]
    ungraded = set(world["sample"][:5])
    partial = _write(world["folder"] / "partial.jsonl", [
        {**record, "grade": None} if record["query_id"] in ungraded else record
        for record in records
    ])  # fmt: skip
    capsys.readouterr()
    code = main(["eval", str(world["traces"]), "--labels", str(partial), "--labels",
                 str(world["judge"]), "--ppi", str(partial), "-m", METRIC, "--format", "json",
                 "--no-config", "--no-progress"])  # fmt: skip
    assert code == 0
    report = json.loads(capsys.readouterr().out)["ppi"]
    assert report["sampled"] == SAMPLED - 5
    assert report["dropped"] == {"no human label yet": 5}
    assert any("no human label yet" in note for note in report["notes"])


@pytest.mark.parametrize(
    ("options", "words"),
    [
        (["--format", "html"], "--ppi does not combine with --format html"),
        (["--gate-on", "pessimistic"], "--gate-on pessimistic"),
        (["--save-baseline", "x.rgb"], "--save-baseline"),
    ],
)
def test_what_ppi_does_not_combine_with_is_one_line(
    capsys: pytest.CaptureFixture[str], world: dict[str, Any], options: list[str], words: str
) -> None:
    code, out, err = _eval(capsys, world, *options)
    assert code == 2
    assert words in err and len(err.strip().splitlines()) == 1 and out == ""


def test_compare_reports_the_prediction_powered_delta(
    capsys: pytest.CaptureFixture[str], world: dict[str, Any]
) -> None:
    # The candidate ranks each list backwards.
    reversed_traces = [
        {"query_id": query_id, "retrieved_ids": list(reversed(list(world["runs"][query_id])))}
        for query_id in world["query_ids"]
    ]
    candidate = _write(world["folder"] / "candidate.jsonl", reversed_traces)
    capsys.readouterr()
    code = main(["compare", str(world["traces"]), str(candidate), "--labels", str(world["human"]),
                 "--labels", str(world["judge"]), "--ppi", str(world["human"]), "-m", METRIC,
                 "--format", "json", "--no-config", "--no-progress"])  # fmt: skip
    assert code in (0, 1)
    report = json.loads(capsys.readouterr().out)["ppi"]
    [row] = report["deltas"]
    query_ids, sample = world["query_ids"], world["sample"]
    candidate_run = {
        trace["query_id"]: _ranked(trace["retrieved_ids"]) for trace in reversed_traces
    }
    human_qrels = {q: world["truth"][q] for q in sample}

    def column(qrels: dict[str, Any], run: dict[str, Any], ids: list[str]) -> np.ndarray:
        values = _per_query(qrels, run)
        return np.array([values[q] for q in ids])

    order = sorted(query_ids)
    labeled_ids = sorted(sample)
    expected = ppi_paired_delta(
        column(world["judged"], world["runs"], order),
        column(world["judged"], candidate_run, order),
        np.array([order.index(q) for q in labeled_ids]),
        column(human_qrels, world["runs"], labeled_ids),
        column(human_qrels, candidate_run, labeled_ids),
        tune=False,
    )
    assert report["sampled"] == {str(candidate): SAMPLED}
    for kind in ("judge_only", "human_only", "ppi"):
        for key in ("mean", "low", "high", "p_value"):
            assert row[kind][key] == pytest.approx(getattr(getattr(expected, kind), key), abs=1e-12)


def _refused(capsys: pytest.CaptureFixture[str], *args: Any) -> str:
    capsys.readouterr()
    with pytest.raises(SystemExit) as stop:
        main([str(arg) for arg in args])
    assert stop.value.code == 2
    captured = capsys.readouterr()
    [line] = captured.err.strip().splitlines()
    assert captured.out == ""
    return line


def test_a_sample_the_labels_do_not_reach_is_an_error_not_a_verdict(
    capsys: pytest.CaptureFixture[str], world: dict[str, Any]
) -> None:
    traces, human, judge = world["traces"], world["human"], world["judge"]
    records = [json.loads(line) for line in human.read_text().splitlines()]
    sampled = set(world["sample"])
    # The judge graded none of the sampled queries (run with the graded sample as --labels).
    others = _write(world["folder"] / "judge_others.jsonl", [
        json.loads(line) for line in judge.read_text().splitlines()
        if json.loads(line)["query_id"] not in sampled
    ])  # fmt: skip
    line = _refused(capsys, "eval", traces, "--labels", human, "--labels", others, "--ppi", human,
                    "-m", METRIC, "--no-config", "--no-progress")  # fmt: skip
    assert "the judge graded none of the 30 sampled queries" in line
    # The graded sample is not among --labels.
    line = _refused(capsys, "eval", traces, "--labels", judge, "--ppi", human, "-m", METRIC,
                    "--no-config", "--no-progress")  # fmt: skip
    assert "hold no human label; give the graded sample file as --labels too" in line
    # Three graded queries: an interval from three differences could have no width at all.
    three = set(world["sample"][:3])
    few = _write(world["folder"] / "few.jsonl", [
        {**record, "grade": None} if record["query_id"] not in three else record
        for record in records
    ])  # fmt: skip
    line = _refused(capsys, "eval", traces, "--labels", few, "--labels", judge, "--ppi", few,
                    "-m", METRIC, "--no-config", "--no-progress")  # fmt: skip
    assert "3 sampled queries carry both" in line and "at least 10" in line


def test_fewer_sampled_queries_than_min_queries_leave_the_gate_undecided(
    capsys: pytest.CaptureFixture[str], world: dict[str, Any]
) -> None:
    code, out, err = _eval(capsys, world, "-g", f"{METRIC}>=0.0", "--min-queries", "31")
    assert code == 0, err
    assert "insufficient data" in out and "overall" in out
    code, out, err = _eval(capsys, world, "-g", f"{METRIC}>=0.0", "--min-queries", "31",
                           "--strict-segments")  # fmt: skip
    assert code == 1


def test_a_label_source_none_of_the_labels_has_is_an_error(
    capsys: pytest.CaptureFixture[str], world: dict[str, Any]
) -> None:
    line = _refused(capsys, "eval", world["traces"], "--labels", world["human"],
                    "--label-source", "judge", "--no-config")  # fmt: skip
    assert "none of the labels in" in line and "is a model judge's" in line
    copy = world["folder"] / "copy.jsonl"
    copy.write_bytes(world["traces"].read_bytes())
    line = _refused(capsys, "compare", world["traces"], copy, "--labels",
                    world["judge"], "--label-source", "human", "--no-config")  # fmt: skip
    assert "is a human's" in line
