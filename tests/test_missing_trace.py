"""Labeled queries without a trace: counted as ``missing_trace``, listed, and under
``missing_trace="zero"`` scored 0 on every metric, as trec_eval's ``-c`` does.

The oracle is trec_eval's own test case (``tests/data/trec_eval``, copied with NIST's notice):
``out.test.aqc`` is ``trec_eval -m all_trec -q -c qrels.test results.trunc`` (query 302 is judged
but absent from the run) and ``out.test.aq`` the same measures without ``-c`` over the full run.
"""

from __future__ import annotations

import csv
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from rankgate import Settings, evaluate
from rankgate.cli import main
from rankgate.errors import UsageError
from rankgate.io import TrecSource
from rankgate.spec import parse_metric

DATA = Path(__file__).parent / "data" / "trec_eval"
QRELS = DATA / "qrels.test"
TRUNC = DATA / "results.trunc"
FULL = DATA / "results.test"
# trec_eval prints 4 decimals.
PRINTED = 5e-5

CUTOFFS = (5, 10, 15, 20, 30, 100, 200, 500, 1000)


def _shared_measures() -> dict[str, str]:
    """trec_eval measure -> rankgate metric, for every measure both compute."""
    measures = {"map": "map", "recip_rank": "mrr", "Rprec": "r_precision"}
    for k in CUTOFFS:
        measures[f"P_{k}"] = f"precision@{k}"
        measures[f"recall_{k}"] = f"recall@{k}"
        measures[f"ndcg_cut_{k}"] = f"ndcg(gain=linear)@{k}"
        measures[f"map_cut_{k}"] = f"map@{k}"
    try:
        parse_metric("bpref")
    except Exception:  # another helper adds bpref; without it the measure is left out
        pass
    else:
        measures["bpref"] = "bpref"
    return {name: str(parse_metric(metric)) for name, metric in measures.items()}


SHARED = _shared_measures()


def read_trec_eval(path: Path) -> dict[str, dict[str, float]]:
    """``measure -> query (or 'all') -> value`` from trec_eval's ``-q`` output."""
    found: dict[str, dict[str, float]] = {}
    for line in path.read_text().splitlines():
        name, query, value = re.split(r"\s+", line.strip())
        if name in SHARED:
            found.setdefault(name, {})[query] = float(value)
    return found


@dataclass
class Run:
    code: int
    out: str
    err: str


@pytest.fixture
def rankgate(capsys: pytest.CaptureFixture[str]) -> Callable[..., Run]:
    """Run ``rankgate ARGS`` in-process; a SystemExit becomes the exit code."""

    def run(*args: object) -> Run:
        capsys.readouterr()
        try:
            code = main([str(arg) for arg in args])
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else 2
        captured = capsys.readouterr()
        return Run(code, captured.out, captured.err)

    return run


def _metric_args() -> list[str]:
    args = []
    for metric in SHARED.values():
        args += ["-m", metric]
    return args


def _check_against(expected: dict[str, dict[str, float]], report: dict[str, Any]) -> None:
    rows = {row["query_id"]: row for row in report["per_query"]}
    queries = {q for values in expected.values() for q in values if q != "all"}
    assert set(rows) == queries
    for measure, metric in SHARED.items():
        for query, value in expected[measure].items():
            got = report["metrics"][metric] if query == "all" else rows[query][metric]
            assert abs(got - value) <= PRINTED, (measure, query, got, value)


# ---------------------------------------------------------------------------------------------
# trec_eval's own -c case


def test_cli_reproduces_trec_eval_dash_c(rankgate: Callable[..., Run]) -> None:
    expected = read_trec_eval(DATA / "out.test.aqc")
    assert "302" in expected["map"] and expected["map"]["302"] == 0
    run = rankgate(
        "eval", "--run", TRUNC, "--qrels", QRELS, "--missing-trace", "zero",
        *_metric_args(), "--format", "json", "--per-query", "--no-config", "--no-progress",
    )  # fmt: skip
    assert run.code == 0, run.err
    report = json.loads(run.out)
    _check_against(expected, report)
    summary = report["summary"]
    assert summary["read"] == 2 and summary["scored"] == 2
    assert summary["missing_trace"] == 1 and summary["missing_examples"] == ["302"]
    assert summary["missing_scored"] == 1 and summary["in_means"] == 3
    assert summary["expected_queries"] == 3
    assert summary["read"] == summary["scored"] + sum(summary["skipped"].values())


def test_python_api_reproduces_trec_eval_dash_c() -> None:
    expected = read_trec_eval(DATA / "out.test.aqc")
    evaluation = evaluate(
        TrecSource(TRUNC, QRELS), list(SHARED.values()), settings=Settings(missing_trace="zero")
    )
    report = json.loads(evaluation.to_json(per_query=True))
    _check_against(expected, report)
    assert list(evaluation.query_ids) == ["301", "303", "302"]


def test_default_matches_trec_eval_without_dash_c(rankgate: Callable[..., Run]) -> None:
    # Every judged query has a trace in the full run: nothing is missing, and the default
    # reproduces out.test.aq.
    run = rankgate(
        "eval", "--run", FULL, "--qrels", QRELS, *_metric_args(),
        "--format", "json", "--per-query", "--no-config", "--no-progress",
    )  # fmt: skip
    report = json.loads(run.out)
    _check_against(read_trec_eval(DATA / "out.test.aq"), report)
    assert report["summary"]["missing_trace"] == 0


def test_default_leaves_the_missing_query_out_and_says_so(rankgate: Callable[..., Run]) -> None:
    per_query = read_trec_eval(DATA / "out.test.aqc")
    run = rankgate(
        "eval", "--run", TRUNC, "--qrels", QRELS, *_metric_args(),
        "--format", "json", "--no-config", "--no-progress",
    )  # fmt: skip
    report = json.loads(run.out)
    for measure, metric in SHARED.items():
        # Without -c the mean is over the two queries with a trace.
        mean = (per_query[measure]["301"] + per_query[measure]["303"]) / 2
        assert abs(report["metrics"][metric] - mean) <= PRINTED, measure
    summary = report["summary"]
    assert summary["missing_trace"] == 1 and summary["missing_scored"] == 0
    assert summary["in_means"] == summary["scored"] == 2
    assert any("no trace" in warning for warning in report["warnings"])


# ---------------------------------------------------------------------------------------------
# Labels kept apart, a store, an explicit query set


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


TRACES = [
    {"query_id": "a", "retrieved_ids": ["d1", "d2"], "tier": "gold"},
    {"query_id": "b", "retrieved_ids": ["d3", "d4", "d5"], "tier": "free"},
]
JUDGMENTS = [
    {"query_id": "a", "document_id": "d1", "grade": 1},  # P@2 = 1/2, RR = 1
    {"query_id": "b", "document_id": "d4", "grade": 1},  # P@2 = 1/2, RR = 1/2
    {"query_id": "c", "document_id": "d9", "grade": 2},  # no trace
    {"query_id": "e", "document_id": "d9", "grade": 0},  # no trace, nothing relevant
]


def test_labels_apart_count_and_zero(tmp_path: Path) -> None:
    traces = _write_jsonl(tmp_path / "traces.jsonl", TRACES)
    labels = _write_jsonl(tmp_path / "labels.jsonl", JUDGMENTS)
    skipped = evaluate(traces, ["mrr", "precision@2"], labels=labels)
    assert skipped.summary.missing_trace == 2
    assert skipped.summary.missing_examples == ("c", "e")
    assert skipped.mean("mrr") == pytest.approx(0.75)
    zero = evaluate(
        traces,
        ["mrr", "precision@2"],
        labels=labels,
        settings=Settings(missing_trace="zero", segment_by=("tier",)),
    )
    # Query e has nothing relevant: under empty_relevant="skip" its trace would be skipped too.
    assert zero.summary.missing_scored == 1 and zero.summary.in_means == 3
    assert zero.mean("mrr") == pytest.approx(1.5 / 3)
    assert zero.mean("precision@2") == pytest.approx(1.0 / 3)
    missing = zero.segment("tier", "(missing)")
    assert missing.scored == 1 and missing.means[parse_metric("mrr")] == 0
    assert zero.summary.read == zero.summary.scored + sum(zero.summary.skipped.values())
    # Missing queries lack every field by construction: no "field most queries lack" warning.
    assert not any("is missing on" in warning for warning in zero.warnings)
    both = evaluate(
        traces,
        ["mrr"],
        labels=labels,
        settings=Settings(missing_trace="zero", empty_relevant="zero"),
    )
    assert both.summary.missing_scored == 2 and both.mean("mrr") == pytest.approx(1.5 / 4)


def test_store_labels_define_the_set_only_without_a_time_window(
    tmp_path: Path, rankgate: Callable[..., Run]
) -> None:
    from rankgate.store import TraceRecorder

    url = f"sqlite:///{tmp_path / 'traces.db'}"
    labels = _write_jsonl(tmp_path / "labels.jsonl", JUDGMENTS)
    assert rankgate("label", "import", labels, "--store", url).code == 0
    recorder = TraceRecorder(url)
    recorder.record("a", ["d1", "d2"], recorded_at="2026-03-01T00:00:00Z")
    recorder.record("b", ["d3", "d4", "d5"], recorded_at="2026-03-02T00:00:00Z")
    recorder.close()
    common = ["-m", "mrr", "--format", "json", "--no-config", "--no-progress"]
    report = json.loads(rankgate("eval", url, *common, "--missing-trace", "zero").out)
    assert report["summary"]["missing_trace"] == 2
    assert report["summary"]["missing_examples"] == ["c", "e"]
    assert report["metrics"]["mrr"] == pytest.approx(1.5 / 3)
    # A day's window: labels for all time do not make the queries not asked that day missing.
    window = ["--since", "2026-03-01T00:00:00Z", "--until", "2026-03-02T00:00:00Z"]
    day = json.loads(rankgate("eval", url, *common, *window).out)
    assert day["summary"]["query_set"] is None and day["summary"]["missing_trace"] == 0
    refused = rankgate("eval", url, *common, *window, "--missing-trace", "zero")
    assert refused.code == 2 and "--queries" in refused.err and "Traceback" not in refused.err
    golden = tmp_path / "golden.txt"
    golden.write_text("a\nb\n# not asked today\n\n")
    within = rankgate("eval", url, *common, *window, "--queries", golden, "--missing-trace", "zero")
    summary = json.loads(within.out)["summary"]
    assert summary["read"] == 1 and summary["missing_trace"] == 1
    assert summary["missing_examples"] == ["b"] and summary["in_means"] == 2


def test_query_set_without_labels_apart(tmp_path: Path, rankgate: Callable[..., Run]) -> None:
    rows = [
        {"query_id": "a", "retrieved_ids": ["d1", "d2"], "relevant_ids": ["d2"]},
        {"query_id": "b", "retrieved_ids": ["d3"], "relevant_ids": ["d3"]},
        {"query_id": "x", "retrieved_ids": ["d3"], "relevant_ids": ["d3"]},
    ]
    traces = _write_jsonl(tmp_path / "traces.jsonl", rows)
    golden = tmp_path / "golden.csv"
    with golden.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerows([["query_id", "note"], ["a", ""], ["b", ""], ["m1", ""], ["m2", ""]])
    common = ["-m", "mrr", "--format", "json", "--no-config", "--no-progress", "--queries", golden]
    summary = json.loads(rankgate("eval", traces, *common).out)["summary"]
    assert summary["query_set"] == "queries" and summary["expected_queries"] == 4
    assert summary["missing_trace"] == 2 and summary["missing_examples"] == ["m1", "m2"]
    # x is outside the set: scored as the rest, and counted.
    assert summary["outside_set"] == 1 and summary["scored"] == 3
    zero = json.loads(rankgate("eval", traces, *common, "--missing-trace", "zero").out)
    # a: RR 1/2, b: 1, x: 1, m1 and m2: 0 (a bare set says nothing of relevance: all scored 0).
    assert zero["metrics"]["mrr"] == pytest.approx(2.5 / 5)
    assert zero["summary"]["in_means"] == 5
    # The same set from Python, as a list of IDs.
    evaluation = evaluate(traces, ["mrr"], queries=["a", "b", "m1", "m2"])
    assert evaluation.summary.missing_trace == 2 and evaluation.summary.outside_set == 1


def test_zero_without_a_query_set_is_a_usage_error(tmp_path: Path) -> None:
    traces = _write_jsonl(tmp_path / "traces.jsonl", TRACES)
    with pytest.raises(UsageError, match="known query set"):
        evaluate(traces, ["mrr"], settings=Settings(missing_trace="zero"))


def test_a_query_set_file_error_is_one_line(tmp_path: Path, rankgate: Callable[..., Run]) -> None:
    traces = _write_jsonl(tmp_path / "traces.jsonl", TRACES)
    golden = _write_jsonl(tmp_path / "golden.jsonl", [{"query_id": "a"}, {"qid": "b"}])
    run = rankgate("eval", traces, "--queries", golden, "--no-config", "--no-progress")
    assert run.code == 2 and "golden.jsonl" in run.err and "query_id" in run.err
    assert len(run.err.strip().splitlines()) == 1


# ---------------------------------------------------------------------------------------------
# Every report names the missing queries, escaped


HOSTILE = "<script>alert(1)</script>|*`\n\x1b[31m"


@pytest.mark.parametrize("report_format", ["table", "json", "markdown", "html"])
def test_reports_list_missing_queries_escaped(
    tmp_path: Path, rankgate: Callable[..., Run], report_format: str
) -> None:
    traces = _write_jsonl(tmp_path / "traces.jsonl", TRACES)
    judgments = [*JUDGMENTS[:2], {"query_id": HOSTILE, "document_id": "d1", "grade": 1}]
    labels = _write_jsonl(tmp_path / "labels.jsonl", judgments)
    run = rankgate(
        "eval", traces, "--labels", labels, "-m", "mrr", "--format", report_format,
        "--no-config", "--no-progress", "--color", "never",
    )  # fmt: skip
    assert run.code == 0, run.err
    out = run.out
    if report_format == "json":
        summary = json.loads(out)["summary"]
        assert summary["missing_examples"] == [HOSTILE] and summary["missing_trace"] == 1
        return
    # No raw line break or terminal escape from the ID reaches any report.
    assert "\x1b[31m" not in out
    if report_format == "html":
        assert "<script>alert" not in out
    if report_format == "table":
        assert "missing_trace, first 1 of 1: '<script>" in out
    elif report_format == "markdown":
        line = next(x for x in out.splitlines() if x.startswith("- missing_trace, first"))
        # Inside a code span, with no backtick or line break left to end it.
        assert line.count("`") == 2 and "'<script>alert(1)</script>|*'" in line
    else:
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in out
        assert "Queries without a trace" in out


def test_table_says_missing_queries_are_outside_read(tmp_path: Path) -> None:
    from rankgate.report.console import Style, render_table

    evaluation = evaluate(
        TrecSource(TRUNC, QRELS), ["map"], settings=Settings(missing_trace="zero")
    )
    text = render_table(evaluation, ["run"], Style(False))
    assert "1 without a trace (missing_trace; not records, so outside 'read')" in text
    assert "means cover 3 queries" in text
    assert math.isclose(evaluation.mean("map"), 0.1016, abs_tol=PRINTED)


def test_a_missing_query_scores_as_an_empty_ranking(tmp_path: Path) -> None:
    """Scored 0 on every quality metric, but its rbp residual is 1 (Moffat & Zobel: with nothing
    retrieved, nothing is known), not 0: a missing trace must not narrow the uncertainty."""
    traces = _write_jsonl(tmp_path / "t.jsonl", [{"query_id": "q1", "retrieved_ids": ["a", "b"]}])
    labels = _write_jsonl(
        tmp_path / "l.jsonl",
        [
            {"query_id": "q1", "relevance_scores": {"a": 1}},
            {"query_id": "q4", "relevance_scores": {"z": 2}},
        ],
    )
    result = evaluate(
        traces,
        ["rbp_residual@3", "ndcg@3", "mrr", "recall@3"],
        settings=Settings(missing_trace="zero"),
        labels=labels,
    )
    assert list(result.query_ids) == ["q1", "q4"]
    row = {str(spec): column[1] for spec, column in result.values.items()}
    # By hand for q1: a judged at rank 1, b unjudged at rank 2, ranks past 2 unread (p = 0.8).
    assert result.values[parse_metric("rbp_residual@3")][0] == pytest.approx(0.2 * 0.8 + 0.8**2)
    assert row["rbp_residual@3"] == 1.0
    assert row["ndcg@3"] == row["mrr"] == row["recall@3"] == 0.0
