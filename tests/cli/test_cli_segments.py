"""The segment, interval, coverage and stale-label options end to end through the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


def _records(segment: str, count: int, hit: bool, **extra: object) -> list[dict[str, object]]:
    """``count`` queries of one segment whose one relevant document is at rank 1 (hit) or absent."""
    return [
        {
            "query_id": f"{segment}-{i}",
            "query_type": segment,
            "retrieved_ids": ["rel" if hit else "x", "y"],
            "relevant_ids": ["rel"],
            **extra,
        }
        for i in range(count)
    ]


@pytest.fixture
def regressed(write_jsonl) -> Path:  # type: ignore[no-untyped-def]
    """90 easy queries that all hit, 35 rare ones that all miss: overall mrr 90/125 = 0.72."""
    return write_jsonl(_records("easy", 90, True) + _records("rare", 35, False))


def test_segment_regression_fails_and_is_named(cli, regressed) -> None:  # type: ignore[no-untyped-def]
    result = cli("eval", regressed, "-m", "mrr", "-g", "mrr>=0.7", "--segment-by", "query_type")
    assert result.code == 1
    assert "query_type=rare: mrr = 0.0000, needs >= 0.7" in result.out
    overall = cli("eval", regressed, "-m", "mrr", "-g", "mrr>=0.7")
    assert overall.code == 0  # without segments the overall mean (0.72) hides it


def test_segments_in_json(cli, regressed) -> None:  # type: ignore[no-untyped-def]
    report = cli(
        "eval",
        regressed,
        "-m",
        "mrr",
        "-g",
        "mrr>=0.7",
        "--segment-by",
        "query_type",
        "--format",
        "json",
    ).json()
    by_value = {s["segment"]["value"]: s for s in report["segments"]}
    assert (by_value["easy"]["scored"], by_value["easy"]["metrics"]["mrr"]) == (90, 1.0)
    assert (by_value["rare"]["scored"], by_value["rare"]["metrics"]["mrr"]) == (35, 0.0)
    failed = [g for g in report["gates"] if not g["passed"]]
    assert [(g["segment"], g["metric"], g["status"]) for g in failed] == [
        ({"field": "query_type", "value": "rare"}, "mrr", "fail")
    ]


def test_small_segment_is_insufficient_unless_strict(cli, write_jsonl) -> None:  # type: ignore[no-untyped-def]
    path = write_jsonl(_records("easy", 40, True) + _records("rare", 5, False))
    lenient = cli("eval", path, "-m", "mrr", "-g", "mrr>=0.5", "--segment-by", "query_type")
    assert lenient.code == 0
    assert "insufficient data" in lenient.out
    strict = cli(
        "eval",
        path,
        "-m",
        "mrr",
        "-g",
        "mrr>=0.5",
        "--segment-by",
        "query_type",
        "--strict-segments",
    )
    assert strict.code == 1
    relaxed = cli(
        "eval",
        path,
        "-m",
        "mrr",
        "-g",
        "mrr>=0.5",
        "--segment-by",
        "query_type",
        "--min-queries",
        "5",
    )
    assert relaxed.code == 1  # five queries are now enough to judge, and they all miss


def test_coverage_minimum_names_coverage_as_the_problem(cli, write_jsonl) -> None:  # type: ignore[no-untyped-def]
    unlabeled = [{"query_id": f"u{i}", "retrieved_ids": ["a"]} for i in range(10)]
    path = write_jsonl(_records("easy", 10, True) + unlabeled)
    result = cli("eval", path, "-m", "mrr", "--min-coverage", "0.8")
    assert result.code == 1
    assert "annotation coverage 50.0% is below the minimum 80%" in result.out
    assert "coverage problem, not a quality one" in result.out


def test_corpus_removes_stale_labels(cli, write_jsonl, tmp_path) -> None:  # type: ignore[no-untyped-def]
    records = [
        {"query_id": "q1", "retrieved_ids": ["a", "b"], "relevant_ids": ["a", "gone"]},
        {"query_id": "q2", "retrieved_ids": ["a"], "relevant_ids": ["gone"]},
    ]
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("a\nb\n")
    report = cli(
        "eval", write_jsonl(records), "-m", "recall@2", "--corpus", corpus, "--format", "json"
    ).json()
    summary = report["summary"]
    assert (summary["labels_removed_stale"], summary["lost_all_relevant"]) == (2, 1)
    assert summary["skipped"]["no_relevant"] == 1
    assert report["metrics"]["recall@2"] == 1.0  # q1: a found, "gone" no longer counts


def test_label_max_age(cli, write_jsonl) -> None:  # type: ignore[no-untyped-def]
    records = [
        {
            "query_id": "q1",
            "retrieved_ids": ["a", "b"],
            "relevant_ids": ["a", "b"],
            "labeled_at": {"a": "2026-11-01T00:00:00Z", "b": "2025-01-01T00:00:00Z"},
        }
    ]
    report = cli(
        "eval",
        write_jsonl(records),
        "-m",
        "recall@1",
        "--label-max-age",
        "180d",
        "--as-of",
        "2026-12-01T00:00:00Z",
        "--format",
        "json",
    ).json()
    assert report["summary"]["labels_removed_expired"] == 1
    assert report["metrics"]["recall@1"] == 1.0  # only "a" is still a label


def test_interval_gate_and_seed(cli, write_jsonl) -> None:  # type: ignore[no-untyped-def]
    # 20 hits and 20 misses: mean mrr 0.5, its lower bound well below.
    path = write_jsonl(_records("a", 20, True) + _records("b", 20, False))
    on_mean = cli("eval", path, "-m", "mrr", "-g", "mrr>=0.45")
    on_lower = cli("eval", path, "-m", "mrr", "-g", "mrr>=0.45", "--gate-on", "lower_bound")
    assert (on_mean.code, on_lower.code) == (0, 1)
    first = cli("eval", path, "-m", "mrr", "--format", "json", "--seed", "7").json()
    again = cli("eval", path, "-m", "mrr", "--format", "json", "--seed", "7").json()
    assert first["intervals"] == again["intervals"]
    low, high = first["intervals"]["mrr"]
    assert low < 0.5 < high


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--corpus", "nope.txt"], "no such corpus file"),
        (["--label-max-age", "six months"], "expected a number and a unit"),
        (["--as-of", "yesterday", "--label-max-age", "1d"], "expected an ISO 8601 time"),
        (["--min-queries", "0"], "min_queries must be a whole number >= 1"),
        (["--min-coverage", "1.5"], "min_coverage must be a number in [0, 1]"),
    ],
)
def test_bad_segment_options_exit_2(run_cli, write_jsonl, args, fragment) -> None:  # type: ignore[no-untyped-def]
    path = write_jsonl(_records("a", 3, True))
    run_cli("eval", path, *args).assert_one_line_error(fragment)


def test_config_segment_overrides(cli, regressed, tmp_path) -> None:  # type: ignore[no-untyped-def]
    config = tmp_path / "gates.toml"
    config.write_text(
        'segment_by = ["query_type"]\n[gates]\n"mrr" = 0.7\n'
        '[segments.query_type.rare.gates]\n"mrr" = 0.0\n'
    )
    result = cli("eval", regressed, "-m", "mrr", "--config", config, "--format", "json")
    assert result.code == 0
    rare = [
        g
        for g in json.loads(result.out)["gates"]
        if g["segment"] == {"field": "query_type", "value": "rare"}
    ]
    assert [(g["threshold"], g["passed"]) for g in rare] == [(0.0, True)]


def test_judged_share_is_reported_at_the_deepest_cutoff(cli, write_jsonl) -> None:  # type: ignore[no-untyped-def]
    records = [
        # 4 retrieved, 2 of them labeled (one grade 0): judged@20 = 2 / min(20, 4) = 0.5
        {
            "query_id": "q1",
            "query_type": "t",
            "retrieved_ids": ["a", "b", "c", "d"],
            "relevance_scores": {"a": 1, "c": 0},
        },
        # 2 retrieved, both labeled: 1.0
        {
            "query_id": "q2",
            "query_type": "t",
            "retrieved_ids": ["a", "b"],
            "relevance_scores": {"a": 1, "b": 0},
        },
    ]
    report = cli(
        "eval",
        write_jsonl(records),
        "-m",
        "ndcg@5,20",
        "--segment-by",
        "query_type",
        "--format",
        "json",
    ).json()
    assert report["judged"] == {"metric": "judged@20", "mean": 0.75}
    assert report["segments"][0]["judged"] == {"metric": "judged@20", "mean": 0.75}
    assert list(report["metrics"]) == ["ndcg@5", "ndcg@20"]  # judged is reported apart
    table = cli("eval", write_jsonl(records), "-m", "ndcg@5,20")
    assert "75% of the top 20 judged (judged@20)" in table.out
