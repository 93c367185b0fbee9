"""Metric options, --output, colour, standard input, field mapping and nested records."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import HAND_RECORDS, clean_env

ANSI = "\x1b["
L3 = math.log2(3)


# --------------------------------------------------------------------------------------------------
# --metric
# --------------------------------------------------------------------------------------------------


def test_several_cutoffs_in_one_option(cli, hand) -> None:
    report = cli("eval", hand.path, "--format", "json", "--metric", "ndcg@5,10,20").json()
    assert list(report["metrics"]) == ["ndcg@5", "ndcg@10", "ndcg@20"]
    # No graded document sits below rank 3 and no query has more than 3 labels, so the three
    # cutoffs all give the ndcg@3 values worked out in cli_helpers.
    q1 = (7 + 1 / 2) / (7 + 3 / L3 + 1 / 2)
    q2 = 1 / 2  # g at rank 3 after dropping the repeated e
    q3 = 1 / (1 + 1 / L3)
    for value in report["metrics"].values():
        assert value == pytest.approx((q1 + q2 + q3) / 3)


def test_repeated_metric_options_and_duplicates(cli, hand) -> None:
    report = cli(
        "eval", hand.path, "--format", "json", "-m", "mrr", "-m", "ndcg@3", "-m", "mrr"
    ).json()
    assert list(report["metrics"]) == ["mrr", "ndcg@3"]


@pytest.mark.parametrize(
    ("spelling", "canonical"),
    [
        pytest.param("P_5", "precision@5", id="trec-P_5"),
        pytest.param("p@5", "precision@5", id="p@5"),
        pytest.param("P@5", "precision@5", id="P@5"),
        pytest.param("ndcg(gain=exponential)@5", "ndcg@5", id="default-param"),
        pytest.param("ndcg_cut_10", "ndcg(gain=linear)@10", id="trec-ndcg_cut_10"),
        pytest.param("ndcg_cut.10", "ndcg(gain=linear)@10", id="trec-ndcg_cut.10"),
        pytest.param("recip_rank", "mrr", id="recip_rank"),
        pytest.param("Rprec", "r_precision", id="Rprec"),
        pytest.param("success_1", "hit_rate@1", id="success_1"),
        pytest.param("map_cut_10", "map@10", id="map_cut_10"),
    ],
)
def test_aliases_appear_under_canonical_names(cli, hand, spelling: str, canonical: str) -> None:
    report = cli("eval", hand.path, "--format", "json", "--metric", spelling).json()
    assert list(report["metrics"]) == [canonical]


def test_aliases_of_one_metric_collapse_and_give_hand_values(cli, hand) -> None:
    report = cli(
        "eval", hand.path, "--format", "json", "-m", "P_5", "-m", "p@5", "-m", "ndcg_cut_3"
    ).json()
    assert list(report["metrics"]) == ["precision@5", "ndcg(gain=linear)@3"]
    assert report["metrics"]["precision@5"] == pytest.approx((2 / 5 + 1 / 5 + 1 / 5) / 3)
    assert report["metrics"]["ndcg(gain=linear)@3"] == pytest.approx(
        hand.mean("ndcg(gain=linear)@3")
    )


# --------------------------------------------------------------------------------------------------
# --output
# --------------------------------------------------------------------------------------------------


def test_output_json_file_and_verdict_on_terminal(run_cli, hand, tmp_path) -> None:
    out = tmp_path / "report.json"
    result = run_cli("eval", hand.path, "--format", "json", "-o", out, "-g", "mrr>=0.7")
    assert result.code == 0, result.err
    report = json.loads(out.read_text(encoding="utf-8"))
    assert report["passed"] is True
    assert report["metrics"]["mrr"] == pytest.approx(7 / 9)
    assert result.out.splitlines()[0].startswith("PASS")
    assert "{" not in result.out  # the report itself went to the file
    assert str(out) in result.out


def test_output_table_file_failing_gate(run_cli, hand, tmp_path) -> None:
    out = tmp_path / "report.txt"
    result = run_cli("eval", hand.path, "-o", out, "-g", "mrr>=0.8", "--color", "always")
    assert result.code == 1
    assert result.out.splitlines()[0].startswith(f"{ANSI}31;1mFAIL")  # the terminal may be coloured
    text = out.read_text(encoding="utf-8")
    assert "6 records read: 3 scored" in text
    assert text.rstrip().splitlines()[-1].startswith("FAIL")
    assert ANSI not in text  # a report file never carries colour codes


# --------------------------------------------------------------------------------------------------
# Colour
# --------------------------------------------------------------------------------------------------


def test_no_colour_on_a_pipe(run_cli, hand) -> None:
    result = run_cli("eval", hand.path, "-g", "mrr>=0.5")
    assert result.code == 0
    assert ANSI not in result.out


def test_no_colour_on_a_pipe_even_when_forced_off_twice(run_cli, hand) -> None:
    result = run_cli(
        "eval", hand.path, "-g", "mrr>=0.5", "--color", "never", env=clean_env(NO_COLOR="1")
    )
    assert ANSI not in result.out


def test_colour_always(run_cli, hand) -> None:
    result = run_cli("eval", hand.path, "-g", "mrr>=0.5", "--color", "always")
    assert ANSI in result.out
    assert f"{ANSI}32mPASS" in result.out


def test_colour_always_beats_no_color(run_cli, hand) -> None:
    result = run_cli(
        "eval", hand.path, "-g", "mrr>=0.5", "--color", "always", env=clean_env(NO_COLOR="1")
    )
    assert ANSI in result.out


def run_on_tty(args: list[str], env: dict[str, str], cwd: Path) -> tuple[int, str]:
    """Run rankgate with stdout on a pseudo-terminal; returns (exit code, what it printed)."""
    pty = pytest.importorskip("pty")
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "rankgate", *args],
            stdin=subprocess.DEVNULL,
            stdout=slave,
            stderr=subprocess.PIPE,
            env=env,
            cwd=cwd,
        )
        os.close(slave)
        chunks = []
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: the terminal's other side closed
                break
            if not chunk:
                break
            chunks.append(chunk)
        proc.wait(timeout=60)
        assert proc.stderr is not None
        proc.stderr.close()
    finally:
        os.close(master)
    return proc.returncode, b"".join(chunks).decode("utf-8")


@pytest.mark.parametrize(
    ("extra_env", "args", "coloured"),
    [
        pytest.param({}, [], True, id="terminal"),
        pytest.param({"NO_COLOR": "1"}, [], False, id="terminal-NO_COLOR"),
        pytest.param({"TERM": "dumb"}, [], False, id="terminal-TERM-dumb"),
        pytest.param({}, ["--color", "never"], False, id="terminal-color-never"),
    ],
)
def test_colour_on_a_terminal(hand, tmp_path, extra_env, args, coloured: bool) -> None:
    code, out = run_on_tty(
        ["eval", str(hand.path), "-g", "mrr>=0.5", *args], clean_env(**extra_env), tmp_path
    )
    assert code == 0
    assert "PASS" in out
    assert (ANSI in out) is coloured


# --------------------------------------------------------------------------------------------------
# Standard input
# --------------------------------------------------------------------------------------------------


def test_json_lines_on_stdin(run_cli) -> None:
    text = "".join(json.dumps(record) + "\n" for record in HAND_RECORDS)
    result = run_cli("eval", "-", "--format", "json", "-m", "mrr,recall@3", input=text)
    assert result.code == 0, result.err
    report = result.json()
    assert report["summary"]["read"] == 6
    assert report["summary"]["scored"] == 3
    assert report["metrics"]["mrr"] == pytest.approx(7 / 9)
    assert report["metrics"]["recall@3"] == pytest.approx(13 / 18)


def test_json_array_on_stdin_with_gate(run_cli) -> None:
    result = run_cli("eval", "-", "-g", "mrr>=0.8", input=json.dumps(HAND_RECORDS))
    assert result.code == 1
    assert "FAIL" in result.out


def test_empty_stdin(run_cli) -> None:
    result = run_cli("eval", "-", "--format", "json", input="")
    assert result.code == 0, result.err
    assert result.json()["summary"]["read"] == 0


# --------------------------------------------------------------------------------------------------
# Field mapping and nested records
# --------------------------------------------------------------------------------------------------


def test_field_dotted_path(cli, write_jsonl) -> None:
    path = write_jsonl(
        [
            {"id": "a", "meta": {"ids": ["x", "y", "z"]}, "relevant_ids": ["z"]},
            {"id": "b", "meta": {"ids": ["y", "x"]}, "relevant_ids": ["y"]},
        ]
    )
    result = cli(
        "eval", path, "--field", "retrieved_ids=meta.ids", "--field", "query_id=id",
        "--format", "json", "--per-query", "-m", "mrr",
    )  # fmt: skip
    assert result.code == 0, result.err
    report = result.json()
    assert {row["query_id"]: row["mrr"] for row in report["per_query"]} == {"a": 1 / 3, "b": 1.0}


def test_field_path_missing_names_the_path(run_cli, write_jsonl) -> None:
    path = write_jsonl([{"meta": {"ids": ["x"]}, "relevant_ids": ["x"]}, {"meta": {}}], "m.jsonl")
    result = run_cli("eval", path, "--field", "retrieved_ids=meta.ids")
    result.assert_one_line_error("m.jsonl:2", "meta.ids")


def test_deeper_field_path_for_labels(cli, write_jsonl) -> None:
    path = write_jsonl([{"retrieved_ids": ["x", "y"], "labels": {"graded": {"y": 3, "x": 0}}}])
    report = cli(
        "eval",
        path,
        "--field",
        "relevance_scores=labels.graded",
        "--format",
        "json",
        "-m",
        "ndcg@2",
    ).json()
    # DCG = 0 + 7/log2(3); IDCG = 7/1
    assert report["metrics"]["ndcg@2"] == pytest.approx((7 / L3) / 7)


def test_records_nested_under_input(cli, write_jsonl) -> None:
    path = write_jsonl(
        [
            {
                "input": {"query_id": "n1", "retrieved_ids": ["a", "b"], "relevant_ids": ["b"]},
                "note": "x",
            },
            {"input": {"query_id": "n2", "retrieved_ids": ["c"], "relevance_scores": {"c": 2}}},
            {"input": {"query_id": "n3", "retrieved_ids": ["d"]}},
        ]
    )
    result = cli("eval", path, "--format", "json", "--per-query", "-m", "mrr")
    assert result.code == 0, result.err
    report = result.json()
    assert report["summary"]["read"] == 3
    assert report["summary"]["skipped"]["unlabeled"] == 1
    assert {row["query_id"]: row["mrr"] for row in report["per_query"]} == {"n1": 0.5, "n2": 1.0}


def test_bad_nested_record_names_the_nested_field(run_cli, write_jsonl) -> None:
    path = write_jsonl(
        [{"input": {"retrieved_ids": ["a"], "relevance_scores": {"a": -1}}}], "nested.jsonl"
    )
    run_cli("eval", path).assert_one_line_error("nested.jsonl:1", "input.relevance_scores.a")
