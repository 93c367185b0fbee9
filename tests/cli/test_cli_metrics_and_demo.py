"""``rankgate metrics`` and the bundled demo (examples/README.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
ALL_METRICS = [
    "ndcg",
    "dcg",
    "precision",
    "recall",
    "mrr",
    "map",
    "hit_rate",
    "r_precision",
    "judged",
    "bpref",
    "rbp",
    "rbp_residual",
]


def test_metrics_text_lists_every_metric(run_cli) -> None:
    result = run_cli("metrics")
    assert result.code == 0, result.err
    headings = [
        line.split("(")[0].split("@")[0]
        for line in result.out.splitlines()
        if line and not line[0].isspace()
    ]
    assert headings == ALL_METRICS


def test_metrics_json(cli) -> None:
    result = cli("metrics", "--format", "json")
    assert result.code == 0
    listing = json.loads(result.out)
    assert [entry["name"] for entry in listing] == ALL_METRICS
    by_name = {entry["name"]: entry for entry in listing}
    assert by_name["r_precision"]["cutoff"] is False
    assert by_name["ndcg"]["cutoff"] is True
    assert by_name["dcg"]["bounded"] is False
    assert "P" in by_name["precision"]["aliases"]
    assert all(entry["formula"] and entry["summary"] for entry in listing)


def test_metrics_markdown(cli) -> None:
    result = cli("metrics", "--format", "markdown")
    assert result.code == 0
    assert result.out.startswith("# Metrics")
    for name in ALL_METRICS:
        assert f"`{name}" in result.out


def test_version(run_cli) -> None:
    result = run_cli("--version")
    assert result.code == 0
    assert result.out.strip().startswith("rankgate ")


# --------------------------------------------------------------------------------------------------
# The demo
# --------------------------------------------------------------------------------------------------


def test_demo_passes(run_cli) -> None:
    result = run_cli(
        "eval", "examples/traces.jsonl", "--config", "examples/rankgate.toml", cwd=REPO
    )
    assert result.code == 0, result.err
    assert result.err == ""
    assert (
        "400 records read: 343 scored, 57 skipped (unlabeled 48, no_relevant 9, invalid 0)"
        in result.out
    )
    assert result.out.rstrip().splitlines()[-1].startswith("PASS · 28 of 28 checks passed")


def test_demo_numbers_match_the_readme(cli) -> None:
    result = cli(
        "eval",
        EXAMPLES / "traces.jsonl",
        "--config",
        EXAMPLES / "rankgate.toml",
        "--format",
        "json",
    )
    assert result.code == 0
    report = result.json()
    summary = report["summary"]
    assert summary["read"] == 400
    assert summary["scored"] == 343
    assert summary["skipped"] == {"unlabeled": 48, "no_relevant": 9, "invalid": 0}
    assert summary["labeled"] == 352
    assert summary["coverage"] == pytest.approx(352 / 400)
    # examples/README.md: "all (343)" row, three decimals
    readme = {"ndcg@10": 0.750, "mrr": 0.765, "recall@20": 0.895, "precision@5": 0.334}
    for metric, value in readme.items():
        assert report["metrics"][metric] == pytest.approx(value, abs=5e-4), metric
    # the config's overall gates, then every segment's (multi_hop and troubleshooting looser)
    overall = [g for g in report["gates"] if g["segment"] is None]
    assert [(g["metric"], g["op"], g["threshold"]) for g in overall] == [
        ("ndcg@10", ">=", 0.7),
        ("recall@20", ">=", 0.85),
        ("mrr", ">=", 0.7),
    ]
    multi_hop = {
        g["metric"]: g["threshold"]
        for g in report["gates"]
        if g["segment"] == {"field": "query_type", "value": "multi_hop"}
    }
    assert multi_hop == {"ndcg@10": 0.45, "recall@20": 0.6, "mrr": 0.55}
    assert report["passed"] is True
    # the config's metrics, in order
    assert list(report["metrics"]) == [
        "ndcg@5", "ndcg@10", "mrr", "precision@5", "recall@10", "recall@20", "map"
    ]  # fmt: skip


def test_demo_with_zero_for_empty_relevant(cli) -> None:
    report = cli(
        "eval", EXAMPLES / "traces.jsonl", "--no-config", "--empty-relevant", "zero",
        "--format", "json", "-m", "mrr",
    ).json()  # fmt: skip
    assert report["summary"]["scored"] == 352
    assert report["summary"]["skipped"] == {"unlabeled": 48, "no_relevant": 0, "invalid": 0}
    # the 9 queries with nothing relevant now add 0 to the sum: mean scales by 343/352
    assert report["metrics"]["mrr"] == pytest.approx(0.765 * 343 / 352, abs=5e-4)
