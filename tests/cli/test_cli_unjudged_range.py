"""``rankgate eval`` where labels are incomplete: every report shows the range between the
pessimistic and optimistic values, and gates may read the pessimistic one."""

from __future__ import annotations

import jsonschema
import pytest

from conftest import RunCli, WriteJsonl
from rankgate.report.json_report import eval_schema

# As in tests/unit/test_unjudged_range.py: mrr 0.75 (unjudged non-relevant) to 1.0 (relevant);
# mrr(unjudged=condensed) is 1.0; bpref takes no unjudged policy.
TRACES = [
    {
        "query_id": "q1",
        "kind": "k1",
        "retrieved_ids": ["a", "b", "c"],
        "relevance_scores": {"a": 1, "z": 1},
    },
    {"query_id": "q2", "kind": "k2", "retrieved_ids": ["x", "y"], "relevance_scores": {"y": 2}},
]
FULLY_JUDGED = [
    {"query_id": "q1", "retrieved_ids": ["a", "b"], "relevance_scores": {"a": 1, "b": 0}},
    {"query_id": "q2", "retrieved_ids": ["x", "y"], "relevance_scores": {"x": 0, "y": 2}},
]


@pytest.fixture
def traces(write_jsonl: WriteJsonl):
    return write_jsonl(TRACES)


def test_the_table_shows_the_range(cli: RunCli, traces) -> None:
    result = cli("eval", traces, "-m", "mrr,bpref", "--segment-by", "kind")
    assert result.code == 0, result.err
    assert "range over unjudged" in result.out
    mrr_row = next(line for line in result.out.splitlines() if line.strip().startswith("mrr"))
    assert "0.7500-1.0000" in mrr_row
    bpref_row = next(line for line in result.out.splitlines() if line.strip().startswith("bpref"))
    assert "-" not in bpref_row.split("]")[-1]  # no range for a metric without a policy
    k2_row = next(line for line in result.out.splitlines() if line.strip().startswith("k2"))
    assert "0.5000 (0.500-1.000)" in k2_row


def test_a_fully_judged_run_shows_no_range(cli: RunCli, write_jsonl: WriteJsonl) -> None:
    result = cli("eval", write_jsonl(FULLY_JUDGED), "-m", "mrr,precision@2")
    assert result.code == 0, result.err
    assert "range over unjudged" not in result.out


def test_json_carries_both_ends(cli: RunCli, traces) -> None:
    result = cli("eval", traces, "-m", "mrr,bpref", "--segment-by", "kind", "--format", "json")
    report = result.json()
    jsonschema.validate(report, eval_schema())
    assert report["unjudged_ranges"] == {
        "mrr": {"pessimistic": 0.75, "optimistic": 1.0},
        "bpref": None,
    }
    k2 = next(s for s in report["segments"] if s["segment"] == {"field": "kind", "value": "k2"})
    assert k2["unjudged_ranges"]["mrr"] == {"pessimistic": 0.5, "optimistic": 1.0}


def test_markdown_and_html_show_the_range(cli: RunCli, traces) -> None:
    markdown = cli("eval", traces, "-m", "mrr", "--segment-by", "kind", "--format", "markdown")
    assert "| range over unjudged documents |" in markdown.out
    assert "| mrr | 0.7500 |" in markdown.out and "0.7500-1.0000 |" in markdown.out
    assert "0.5000 (0.500-1.000)" in markdown.out
    html = cli("eval", traces, "-m", "mrr", "--segment-by", "kind", "--format", "html")
    assert "range over unjudged documents" in html.out
    assert "0.5000 (0.500-1.000 depending on unjudged documents)" in html.out


def test_gate_on_pessimistic_from_the_command_line(cli: RunCli, traces) -> None:
    gate = ["--gate", "mrr(unjudged=condensed)>=0.9", "--format", "json"]
    on_mean = cli("eval", traces, *gate)
    assert on_mean.code == 0, on_mean.err
    on_floor = cli("eval", traces, *gate, "--gate-on", "pessimistic", "--resamples", "0")
    assert on_floor.code == 1, on_floor.err
    [outcome] = on_floor.json()["gates"]
    assert (outcome["statistic"], outcome["value"], outcome["mean"]) == ("pessimistic", 0.75, 1.0)
    assert on_floor.json()["settings"]["gate_on"] == "pessimistic"


def test_gate_on_pessimistic_from_rankgate_toml(cli: RunCli, traces, tmp_path) -> None:
    config = tmp_path / "rankgate.toml"
    config.write_text(
        'gate_on = "pessimistic"\n[gates]\n"mrr(unjudged=condensed)" = 0.9\n', encoding="utf-8"
    )
    result = cli("eval", traces, "--config", config)
    assert result.code == 1, result.err
    assert "(pessimistic)" in result.out


def test_gate_on_optimistic_is_refused(cli: RunCli, traces) -> None:
    result = cli("eval", traces, "--gate", "mrr>=0.5", "--gate-on", "optimistic")
    assert result.code == 2
