"""``--format json``: schema, documented keys, and numbers checked against hand-computed values
(see ``cli_helpers`` for the worked example), plus the counting rules."""

from __future__ import annotations

import json
import math

import pytest
from cli_helpers import HAND_METRICS, assert_accounting
from jsonschema import Draft202012Validator

from rankgate.report.json_report import eval_schema


@pytest.fixture(scope="module")
def validator() -> Draft202012Validator:
    schema = eval_schema()
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def metric_args() -> list[str]:
    return ["--metric", ",".join(HAND_METRICS)]


def test_report_matches_hand_computed_means(cli, hand, validator) -> None:
    result = cli("eval", hand.path, "--format", "json", *metric_args())
    assert result.code == 0, result.err
    report = result.json()
    validator.validate(report)
    assert list(report["metrics"]) == HAND_METRICS
    for metric in HAND_METRICS:
        assert report["metrics"][metric] == pytest.approx(hand.mean(metric), abs=1e-12), metric
    # a few of the means written out as fractions, as worked out by hand
    assert report["metrics"]["precision@3"] == pytest.approx(4 / 9)
    assert report["metrics"]["recall@3"] == pytest.approx(13 / 18)
    assert report["metrics"]["mrr"] == pytest.approx(7 / 9)
    assert report["metrics"]["map"] == pytest.approx(25 / 54)
    assert report["metrics"]["r_precision"] == pytest.approx(7 / 18)
    assert report["metrics"]["hit_rate@1"] == pytest.approx(2 / 3)


def test_summary_counts(cli, hand, validator) -> None:
    report = cli("eval", hand.path, "--format", "json").json()
    validator.validate(report)
    summary = report["summary"]
    assert summary["read"] == 6
    assert summary["scored"] == 3
    assert summary["skipped"] == {"unlabeled": 1, "no_relevant": 2, "invalid": 0}
    assert summary["labeled"] == 5
    assert summary["coverage"] == pytest.approx(5 / 6)
    assert summary["duplicates_dropped"] == 1
    assert summary["invalid_examples"] == []
    assert_accounting(summary)


def test_documented_top_level_keys(cli, hand) -> None:
    report = cli("eval", hand.path, "--format", "json", "--gate", "mrr>=0.5").json()
    assert {"summary", "metrics", "gates", "passed"} <= set(report)
    assert "per_query" not in report
    assert set(report["summary"]["skipped"]) == {"unlabeled", "no_relevant", "invalid"}
    [gate] = report["gates"]
    assert set(gate) == {
        "metric",
        "op",
        "threshold",
        "value",
        "margin",
        "passed",
        "segment",
        "statistic",
        "mean",
        "interval",
        "scored",
        "status",
    }
    assert (gate["segment"], gate["statistic"], gate["status"]) == (None, "mean", "pass")
    assert report["passed"] is True
    assert report["settings"] == {
        "relevance_threshold": 1.0,
        "empty_relevant": "skip",
        "on_invalid": "fail",
        "segment_by": [],
        "gate_on": "mean",
        "min_queries": 30,
        "strict_segments": False,
        "min_coverage": None,
        "seed": 0,
        "resamples": 1000,
        "missing_trace": "skip",
        "served_k": None,
        "label_source": "all",
    }
    assert report["sources"] == [str(hand.path)]


def test_default_metrics(cli, hand) -> None:
    report = cli("eval", hand.path, "--format", "json").json()
    assert list(report["metrics"]) == ["ndcg@10", "mrr", "precision@5", "recall@20", "map"]
    assert report["metrics"]["precision@5"] == pytest.approx(hand.mean("precision@5"))


def test_per_query(cli, hand, validator) -> None:
    result = cli("eval", hand.path, "--format", "json", "--per-query", *metric_args())
    report = result.json()
    validator.validate(report)
    rows = report["per_query"]
    assert [row["query_id"] for row in rows] == ["q1", "q2", "q3"]
    assert len(rows) == report["summary"]["scored"]
    for row in rows:
        expected = hand.per_query[row["query_id"]]
        assert set(row) == {"query_id", *expected}
        for metric, value in expected.items():
            assert row[metric] == pytest.approx(value, abs=1e-12), (row["query_id"], metric)


def test_per_query_names_records_without_an_id(cli, write_jsonl) -> None:
    path = write_jsonl(
        [
            {"retrieved_ids": ["a"], "relevant_ids": ["a"]},
            {"retrieved_ids": ["b", "a"], "relevant_ids": ["a"]},
        ]
    )
    rows = cli("eval", path, "--format", "json", "--per-query", "-m", "mrr").json()["per_query"]
    assert len(rows) == 2
    assert len({row["query_id"] for row in rows}) == 2
    assert [row["mrr"] for row in rows] == [1.0, 0.5]


def test_empty_relevant_zero(cli, hand, validator) -> None:
    result = cli(
        "eval",
        hand.path,
        "--format",
        "json",
        "--per-query",
        "--empty-relevant",
        "zero",
        *metric_args(),
    )
    assert result.code == 0, result.err
    report = result.json()
    validator.validate(report)
    summary = report["summary"]
    assert summary["read"] == 6
    assert summary["scored"] == 5
    assert summary["skipped"] == {"unlabeled": 1, "no_relevant": 0, "invalid": 0}
    assert summary["labeled"] == 5
    assert summary["coverage"] == pytest.approx(5 / 6)
    assert_accounting(summary)
    assert report["settings"]["empty_relevant"] == "zero"
    for metric in HAND_METRICS:
        assert report["metrics"][metric] == pytest.approx(hand.mean(metric, scored=5)), metric
    assert report["metrics"]["mrr"] == pytest.approx((7 / 3) / 5)
    zeros = [row for row in report["per_query"] if row["query_id"] in ("q5", "q6")]
    assert len(zeros) == 2
    assert all(row[m] == 0.0 for row in zeros for m in HAND_METRICS)


def test_empty_relevant_zero_from_config(cli, hand, tmp_path) -> None:
    config = tmp_path / "c.toml"
    config.write_text('empty_relevant = "zero"\nmetrics = ["mrr"]\n', encoding="utf-8")
    report = cli("eval", hand.path, "--format", "json", "--config", config).json()
    assert report["summary"]["scored"] == 5
    assert report["metrics"] == {"mrr": pytest.approx((7 / 3) / 5)}


def test_relevance_threshold_moves_queries_to_no_relevant(cli, hand) -> None:
    """With --rel 2 only q1 (grades 3 and 2) has a relevant document; q2 and q3 (grade 1) do not."""
    report = cli("eval", hand.path, "--format", "json", "--rel", "2", "-m", "mrr,recall@3").json()
    summary = report["summary"]
    assert summary["scored"] == 1
    assert summary["skipped"] == {"unlabeled": 1, "no_relevant": 4, "invalid": 0}
    assert_accounting(summary)
    # q1: a (3) at rank 1 is relevant; x (2) is never retrieved -> R = 2, one of them in the top 3
    assert report["metrics"]["mrr"] == 1.0
    assert report["metrics"]["recall@3"] == pytest.approx(1 / 2)
    assert report["settings"]["relevance_threshold"] == 2.0


def test_duplicates_are_dropped_keeping_the_first_rank(cli, write_jsonl) -> None:
    path = write_jsonl(
        [
            {"query_id": "a", "retrieved_ids": ["x", "x", "x", "y"], "relevant_ids": ["y"]},
            {"query_id": "b", "retrieved_ids": ["y", "z", "y"], "relevant_ids": ["y"]},
        ]
    )
    report = cli("eval", path, "--format", "json", "--per-query", "-m", "mrr,precision@2").json()
    assert report["summary"]["duplicates_dropped"] == 3
    rows = {row["query_id"]: row for row in report["per_query"]}
    # a: x y -> y at rank 2; b: y z -> y at rank 1, counted once
    assert rows["a"]["mrr"] == 0.5
    assert rows["b"]["mrr"] == 1.0
    assert rows["b"]["precision@2"] == 0.5


def test_unlabeled_and_empty_labels(cli, write_jsonl) -> None:
    path = write_jsonl(
        [
            {"retrieved_ids": ["a"]},  # unlabeled
            {"retrieved_ids": ["a"], "relevant_ids": []},  # labeled, nothing relevant
            {"retrieved_ids": ["a"], "relevance_scores": {}},  # labeled, nothing relevant
            {"retrieved_ids": ["a"], "relevance_scores": {"a": 0, "b": 0}},  # only grade 0
            {"retrieved_ids": ["a"], "relevant_ids": [], "relevance_scores": {"a": 2}},  # relevant
        ]
    )
    summary = cli("eval", path, "--format", "json").json()["summary"]
    assert summary["skipped"] == {"unlabeled": 1, "no_relevant": 3, "invalid": 0}
    assert summary["scored"] == 1
    assert summary["labeled"] == 4
    assert summary["coverage"] == pytest.approx(4 / 5)


def test_nothing_read(cli, write_jsonl, validator) -> None:
    result = cli("eval", write_jsonl([]), "--format", "json", "--gate", "ndcg@10>=0.5")
    assert result.code == 1
    report = result.json()
    validator.validate(report)
    assert report["summary"]["read"] == 0
    assert report["summary"]["coverage"] is None
    assert all(value is None for value in report["metrics"].values())
    assert report["gates"] == [
        {
            "metric": "ndcg@10",
            "op": ">=",
            "threshold": 0.5,
            "segment": None,
            "statistic": "mean",
            "value": None,
            "margin": None,
            "mean": None,
            "interval": None,
            "scored": 0,
            "status": "fail",
            "passed": False,
        }
    ]
    assert report["passed"] is False


def test_json_array_input(cli, hand, tmp_path) -> None:
    """The same records as one JSON array score the same."""
    path = tmp_path / "hand.json"
    path.write_text(
        json.dumps([json.loads(line) for line in hand.path.read_text().splitlines()], indent=2)
    )
    report = cli("eval", path, "--format", "json", "-m", "mrr,map").json()
    assert report["summary"]["read"] == 6
    assert report["metrics"]["mrr"] == pytest.approx(7 / 9)
    assert report["metrics"]["map"] == pytest.approx(25 / 54)


def test_report_never_contains_nan(cli, write_jsonl) -> None:
    text = cli(
        "eval", write_jsonl([{"retrieved_ids": ["a"]}]), "--format", "json", "--per-query"
    ).out
    assert "NaN" not in text and "Infinity" not in text


def test_large_grade_gives_a_defined_ndcg_or_is_refused(run_cli, write_jsonl) -> None:
    # One document, the only labeled one, at rank 1: DCG == IDCG, so NDCG is 1 whatever the grade.
    path = write_jsonl([{"retrieved_ids": ["d1"], "relevance_scores": {"d1": 1100}}], "big.jsonl")
    result = run_cli("eval", path, "--format", "json", "-m", "ndcg@10")
    assert "Traceback" not in result.err
    if result.code == 2:
        result.assert_one_line_error("big.jsonl:1", "relevance_scores.d1")
    else:
        assert result.code == 0
        value = result.json()["metrics"]["ndcg@10"]
        assert value is not None and math.isclose(value, 1.0)
        assert result.err == ""
