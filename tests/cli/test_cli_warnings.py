"""The evaluation's warnings reach every report format, so a config rule that never applied is seen."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from conftest import RunCli
from rankgate.report.json_report import comparison_schema, eval_schema

RECORDS = [
    {
        "query_id": f"q{i}",
        "retrieved_ids": ["a", "b", "c"],
        "relevance_scores": {"a" if i % 2 else "c": 2},
        "query_type": "factual" if i % 3 else "howto",
    }
    for i in range(12)
]
# A rule for a value no record has: its gate never applies, which the user must be told.
CONFIG = '[segments.query_type.FAQ.gates]\n"ndcg@10" = 0.99\n'
WARNING = "[segments.query_type.FAQ] matched no record"


def _unescaped(text: str) -> str:
    """Markdown escapes brackets and underscores; the words are what the reader sees."""
    return text.replace("\\", "")


@pytest.fixture
def project(tmp_path: Path) -> tuple[Path, Path]:
    traces = tmp_path / "traces.jsonl"
    traces.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    config = tmp_path / "rankgate.toml"
    config.write_text(CONFIG)
    return traces, config


@pytest.mark.parametrize("report_format", ["table", "markdown", "json"])
def test_eval_reports_show_the_warnings(
    cli: RunCli, project: tuple[Path, Path], report_format: str
) -> None:
    traces, config = project
    result = cli("eval", traces, "--config", config, "--format", report_format, "-m", "ndcg@10")
    assert result.code == 0, result.err
    if report_format == "json":
        report = result.json()
        jsonschema.validate(report, eval_schema())
        assert any(WARNING in warning for warning in report["warnings"])
    else:
        assert _unescaped(WARNING) in _unescaped(result.out)


@pytest.mark.parametrize("report_format", ["table", "markdown", "json"])
def test_compare_reports_show_the_warnings(
    cli: RunCli, project: tuple[Path, Path], report_format: str
) -> None:
    traces, config = project
    other = traces.with_name("candidate.jsonl")
    other.write_text(traces.read_text())
    result = cli(
        "compare", traces, other, "--config", config, "--format", report_format, "-m", "ndcg@10"
    )
    assert result.code == 0, result.err
    if report_format == "json":
        report = result.json()
        jsonschema.validate(report, comparison_schema())
        assert any(WARNING in warning for warning in report["warnings"])
    else:
        assert _unescaped(WARNING) in _unescaped(result.out)


def test_a_clean_run_has_no_warnings(cli: RunCli, project: tuple[Path, Path]) -> None:
    traces, _ = project
    # Cut within the 3 IDs each ranking holds: ndcg@10 would warn that k passes the median depth.
    result = cli("eval", traces, "--no-config", "--format", "json", "-m", "ndcg@3")
    assert result.json()["warnings"] == []
