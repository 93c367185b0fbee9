"""``rankgate compare`` on incompletely judged arms: label-limited cells, their exit codes, the
report fields, the unjudged-pairs file, and the re-run once the pairs are judged."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from conftest import RunCli, WriteJsonl
from rankgate.report.json_report import comparison_schema
from unjudged_ab_data import DEPTH, label_records, reveal, unjudged_ab, unjudged_in_top

METRICS = ["-m", "ndcg@10,precision@5"]


@pytest.fixture(scope="module")
def ab() -> Any:
    return unjudged_ab(queries=120)


@pytest.fixture
def files(write_jsonl: WriteJsonl, ab: Any) -> dict[str, Path]:
    return {
        "baseline": write_jsonl(ab.baseline, "baseline.jsonl"),
        "candidate": write_jsonl(ab.surfacing, "candidate.jsonl"),
        "regressed": write_jsonl(ab.regressed, "regressed.jsonl"),
        "labels": write_jsonl(label_records(ab.labels), "labels.jsonl"),
        "control_labels": write_jsonl(label_records(ab.control_labels), "control.jsonl"),
    }


def test_label_limited_cells_exit_0_and_the_table_says_what_to_do(
    cli: RunCli, files: dict[str, Path]
) -> None:
    result = cli(
        "compare", files["baseline"], files["candidate"], "--labels", files["labels"], *METRICS
    )
    assert result.code == 0, result.err
    rows = [line for line in result.out.splitlines() if "? label-limited" in line]
    assert len(rows) == 2
    assert all("100%/" in row for row in rows)  # judged@k of the baseline, then the candidate
    assert "next: 2 label-limited cell(s)" in result.out
    assert "--unjudged-pairs FILE" in result.out
    verdict = result.out.strip().splitlines()[-1]
    assert verdict.startswith("PASS") and "2 label-limited" in verdict


def test_fail_on_label_limited_exits_1(cli: RunCli, files: dict[str, Path]) -> None:
    result = cli(
        "compare",
        files["baseline"],
        files["candidate"],
        "--labels",
        files["labels"],
        *METRICS,
        "--fail-on-label-limited",
    )
    assert result.code == 1, result.err
    verdict = result.out.strip().splitlines()[-1]
    assert verdict == "FAIL · 2 label-limited cells (--fail-on-label-limited)"


def test_json_names_the_status_judged_and_pairs(
    cli: RunCli, files: dict[str, Path], ab: Any
) -> None:
    result = cli(
        "compare",
        files["baseline"],
        files["candidate"],
        "--labels",
        files["labels"],
        *METRICS,
        "--format",
        "json",
        "--unjudged-tolerance",
        "0.1",
    )
    assert result.code == 0, result.err
    report = result.json()
    jsonschema.validate(report, comparison_schema())
    assert report["settings"]["unjudged_tolerance"] == 0.1
    assert report["settings"]["fail_on_label_limited"] is False
    assert report["label_limited"] == 2 and report["regressions"] == 0
    assert report["next_step"].startswith("2 label-limited cell(s)")
    cell = next(c for c in report["cells"] if c["metric"] == "ndcg@10")
    assert cell["status"] == "label-limited" and cell["flag"] is None
    unjudged = unjudged_in_top(ab.surfacing, ab.labels, DEPTH)
    assert cell["unjudged_pairs"] == sum(len(docs) for docs in unjudged.values())
    assert cell["baseline_unjudged_pairs"] == 0
    assert cell["judged_depth"] == 10
    assert cell["baseline_judged"] == 1.0 and 0 < cell["candidate_judged"] < 1
    assert cell["delta_nonrelevant"] == cell["delta"] < 0 < cell["delta_relevant"]
    assert isinstance(cell["delta_condensed"], float)
    assert "less judged" in cell["label_limited_reason"]


def test_unjudged_pairs_file_then_judged_pairs_give_the_improvement(
    cli: RunCli, files: dict[str, Path], write_jsonl: WriteJsonl, tmp_path: Path, ab: Any
) -> None:
    pairs_file = tmp_path / "pairs.jsonl"
    first = cli(
        "compare",
        files["baseline"],
        files["candidate"],
        "--labels",
        files["labels"],
        *METRICS,
        "--unjudged-pairs",
        pairs_file,
    )
    assert first.code == 0, first.err
    pairs = [json.loads(line) for line in pairs_file.read_text().splitlines()]
    assert pairs and set(pairs[0]) == {"query_id", "doc_id", "rank", "side", "candidate"}
    expected = {
        (query, doc)
        for query, docs in unjudged_in_top(ab.surfacing, ab.labels, DEPTH).items()
        for doc in docs
    }
    assert {(p["query_id"], p["doc_id"]) for p in pairs} == expected
    assert f"the {len(expected):,} distinct pairs are listed" in first.out

    judged = reveal(ab.labels, ab.truth, [(p["query_id"], p["doc_id"]) for p in pairs])
    labels = write_jsonl(label_records(judged), "judged.jsonl")
    second = cli("compare", files["baseline"], files["candidate"], "--labels", labels, *METRICS)
    assert second.code == 0, second.err
    assert second.out.count("▲ improvement") == 2
    assert "label-limited" not in second.out


def test_equally_judged_regression_still_exits_1(cli: RunCli, files: dict[str, Path]) -> None:
    result = cli(
        "compare",
        files["baseline"],
        files["regressed"],
        "--labels",
        files["control_labels"],
        *METRICS,
    )
    assert result.code == 1, result.err
    assert result.out.count("▼ regression") == 2
    assert "label-limited" not in result.out


@pytest.mark.parametrize("report_format", ["markdown", "html", "junit"])
def test_every_format_shows_the_status_judged_and_pairs(
    cli: RunCli, files: dict[str, Path], report_format: str, ab: Any
) -> None:
    result = cli(
        "compare",
        files["baseline"],
        files["candidate"],
        "--labels",
        files["labels"],
        *METRICS,
        "--format",
        report_format,
    )
    assert result.code == 0, result.err
    pairs = sum(len(d) for d in unjudged_in_top(ab.surfacing, ab.labels, DEPTH).values())
    assert "label-limited" in result.out
    assert f"{pairs:,} pairs" in result.out or f"{pairs:,} unjudged pairs" in result.out
    if report_format == "junit":
        assert 'type="label-limited"' not in result.out  # skipped, not failed
        assert "<skipped" in result.out and "judged@10 baseline 100.0%" in result.out
    else:
        assert "judged b/c" in result.out and "100%/" in result.out


def test_junit_fails_label_limited_cells_when_asked(cli: RunCli, files: dict[str, Path]) -> None:
    result = cli(
        "compare",
        files["baseline"],
        files["candidate"],
        "--labels",
        files["labels"],
        *METRICS,
        "--format",
        "junit",
        "--fail-on-label-limited",
    )
    assert result.code == 1
    assert result.out.count('type="label-limited"') == 2


@pytest.mark.parametrize("value", ["-0.5", "2", "many"])
def test_a_bad_tolerance_is_a_usage_error(cli: RunCli, files: dict[str, Path], value: str) -> None:
    result = cli("compare", files["baseline"], files["candidate"], "--unjudged-tolerance", value)
    assert result.code == 2
    assert "Traceback" not in result.err


def test_spark_refuses_to_list_unjudged_pairs(cli: RunCli, files: dict[str, Path]) -> None:
    result = cli(
        "compare",
        files["baseline"],
        files["candidate"],
        "--engine",
        "spark",
        "--unjudged-pairs",
        "pairs.jsonl",
    )
    result.assert_one_line_error("--unjudged-pairs", "--engine local")
