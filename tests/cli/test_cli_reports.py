"""Markdown and JUnit reports of ``eval`` and ``compare``: valid, escaped, same numbers as JSON."""

from __future__ import annotations

from pathlib import Path

import pytest
from lxml import etree

from ab_data import ab_traces
from conftest import RunCli, WriteJsonl

SCHEMA = etree.XMLSchema(etree.parse(str(Path(__file__).parents[1] / "schemas" / "junit.xsd")))
EVIL = "<img src=x onerror=alert(1)></script>\x01|*"
GATED = ["--segment-by", "query_type", "-g", "ndcg@10>=0.42", "-g", "mrr>=0.3"]


def parse_junit(text: str) -> etree._Element:
    root = etree.fromstring(text.encode("utf-8"))
    SCHEMA.assertValid(root)
    return root


@pytest.fixture
def traces(write_jsonl: WriteJsonl) -> Path:
    baseline, _, _ = ab_traces(queries=400)
    rows = [{**row, "query_type": EVIL} if i % 10 == 0 else row for i, row in enumerate(baseline)]
    return write_jsonl(rows, "traces.jsonl")


def test_eval_junit_has_a_case_per_check_with_the_json_numbers(cli: RunCli, traces: Path) -> None:
    report = cli("eval", traces, *GATED, "--min-coverage", "0.5", "--format", "json").json()
    junit = cli("eval", traces, *GATED, "--min-coverage", "0.5", "--format", "junit")
    assert junit.code == (0 if report["passed"] else 1)
    root = parse_junit(junit.out)
    cases = root.findall(".//testcase")
    assert len(cases) == len(report["gates"]) + len(report["coverage_checks"])
    failed_gates = [g for g in report["gates"] if not g["passed"]]
    failures = root.findall(".//failure")
    assert (
        int(root.get("failures"))
        == len(failures)
        == len(failed_gates) + sum(not c["passed"] for c in report["coverage_checks"])
    )
    assert failed_gates, "the fixture is meant to miss some gates"
    messages = [f.get("message") for f in failures]
    for gate in failed_gates:
        segment = gate["segment"]
        expected = (
            f"{gate['metric']} = {gate['value']:.4f}, needs {gate['op']} {gate['threshold']:g}"
        )
        matching = [
            m for m in messages if m.startswith(expected) and f"margin {gate['margin']:+.4f}" in m
        ]
        assert matching, (segment, expected, messages)
    # The untrusted segment value survives as text, markup and control character neutralised.
    names = {suite.get("name") for suite in root.findall("testsuite")}
    assert "query_type=<img src=x onerror=alert(1)></script>\ufffd|*" in names


def test_eval_junit_marks_insufficient_segments_skipped_or_failed(
    cli: RunCli, traces: Path
) -> None:
    lenient = parse_junit(
        cli("eval", traces, *GATED, "--min-queries", "45", "--format", "junit").out
    )
    skipped = lenient.findall(".//skipped")
    assert skipped and int(lenient.get("skipped")) == len(skipped)
    strict = cli(
        "eval", traces, *GATED, "--min-queries", "45", "--strict-segments", "--format", "junit"
    )
    assert strict.code == 1
    root = parse_junit(strict.out)
    assert not root.findall(".//skipped")
    assert any(f.get("type") == "insufficient_data" for f in root.findall(".//failure"))


def test_eval_markdown_carries_verdict_gates_and_means(cli: RunCli, traces: Path) -> None:
    report = cli("eval", traces, *GATED, "--format", "json").json()
    result = cli("eval", traces, *GATED, "--format", "markdown")
    text = result.out
    assert text.startswith("### rankgate eval")
    assert ("**PASS**" if report["passed"] else "**FAIL**") in text
    assert "<img" not in text.replace(r"\<img", "")
    assert "</script>" not in text
    for metric, mean in report["metrics"].items():
        assert f"| {metric} | {mean:.4f} |" in text
    gate_rows = [line for line in text.splitlines() if line.startswith(("| ✅", "| ❌", "| ➖"))]
    assert len(gate_rows) == len(report["gates"])
    assert gate_rows[0].startswith("| ❌")  # failures first, worst first
    assert "<details><summary>Every segment</summary>" in text


def test_compare_junit_fails_exactly_the_regressions(cli: RunCli, write_jsonl: WriteJsonl) -> None:
    baseline, regressed, _ = ab_traces()
    base = write_jsonl(baseline, "b.jsonl")
    cand = write_jsonl(regressed, "c.jsonl")
    args = ("compare", base, cand, "-m", "ndcg@5,10,mrr", "--segment-by", "query_type")
    report = cli(*args, "--format", "json").json()
    result = cli(*args, "--format", "junit")
    assert result.code == 1
    root = parse_junit(result.out)
    assert len(root.findall(".//testcase")) == len(report["cells"])
    failures = [f.get("message") for f in root.findall(".//failure")]
    regressions = [c for c in report["cells"] if c["flag"] == "regression"]
    assert len(failures) == len(regressions) == report["regressions"]
    for cell in regressions:
        assert any(
            m.startswith(
                f"{cell['metric']} {cell['baseline_mean']:.4f} -> {cell['candidate_mean']:.4f}, delta {cell['delta']:+.4f}"
            )
            for m in failures
        )
