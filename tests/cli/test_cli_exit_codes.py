"""Exit codes are a contract (0 pass / 1 gate failed / 2 usage or input error), checked on a real
subprocess so that a traceback (which exits 1, like a failed gate) cannot pass for either."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from cli_helpers import HAND_RECORDS

GOOD = {"query_id": "g", "retrieved_ids": ["a", "b"], "relevant_ids": ["a"]}  # mrr = 1 exactly


def test_no_gates_exits_0(run_cli, hand) -> None:
    result = run_cli("eval", hand.path)
    assert result.code == 0, result.err
    assert result.err == ""
    assert "no gates set" in result.out


def test_all_gates_pass_exits_0(run_cli, hand) -> None:
    # mrr = 7/9 = 0.778, precision@3 = 4/9 = 0.444 (hand-computed in cli_helpers)
    result = run_cli("eval", hand.path, "--gate", "mrr>=0.75", "--gate", "precision@3>0.44")
    assert result.code == 0, result.err
    assert "PASS" in result.out
    assert "FAIL" not in result.out


def test_one_failing_gate_exits_1(run_cli, hand) -> None:
    result = run_cli("eval", hand.path, "--gate", "mrr>=0.75", "--gate", "precision@3>=0.45")
    assert result.code == 1, result.err
    assert result.err == ""
    assert "FAIL" in result.out
    assert "precision@3" in result.out.splitlines()[-1]


def test_gate_with_nothing_scored_fails(run_cli, write_jsonl) -> None:
    unlabeled = write_jsonl([{"retrieved_ids": ["a"]}, {"retrieved_ids": ["b"]}])
    result = run_cli("eval", unlabeled, "--gate", "mrr>=0.1")
    assert result.code == 1
    assert "FAIL" in result.out


def test_empty_file_without_gates_exits_0(run_cli, write_jsonl) -> None:
    result = run_cli("eval", write_jsonl([]))
    assert result.code == 0, result.err
    assert "0 records read" in result.out


@pytest.mark.parametrize(
    "args",
    [
        pytest.param([], id="no-command"),
        pytest.param(["eval", "x.jsonl", "--format", "xml"], id="bad-format-choice"),
        pytest.param(["eval", "x.jsonl", "--on-invalid", "ignore"], id="bad-on-invalid"),
        pytest.param(["eval", "x.jsonl", "--rel", "high"], id="rel-not-a-number"),
        pytest.param(["frobnicate"], id="unknown-command"),
    ],
)
def test_argument_errors_exit_2_without_traceback(run_cli, args) -> None:
    result = run_cli(*args)
    assert result.code == 2
    assert "Traceback" not in result.err
    assert result.err.strip()


def test_gate_failure_and_bad_input_are_distinguished(run_cli, write_jsonl) -> None:
    """The same gate: 1 on good data that misses it, 2 when a record is broken."""
    good = write_jsonl([GOOD], "good.jsonl")
    broken = write_jsonl([GOOD, "{"], "broken.jsonl")
    assert run_cli("eval", good, "--gate", "mrr>1").code == 1
    assert run_cli("eval", broken, "--gate", "mrr>1").code == 2


# --------------------------------------------------------------------------------------------------
# Bad files, options and configs: exit 2 with one line naming what is wrong.
# --------------------------------------------------------------------------------------------------


def test_missing_file(run_cli, tmp_path: Path) -> None:
    run_cli("eval", tmp_path / "nope.jsonl").assert_one_line_error("nope.jsonl", "no such file")


def test_directory_instead_of_file(run_cli, tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    run_cli("eval", tmp_path / "logs").assert_one_line_error("logs")


@pytest.mark.parametrize(
    ("metric", "fragment"),
    [
        pytest.param("bogus@10", "bogus", id="unknown-metric"),
        pytest.param("ndcg@10,mrrr", "mrrr", id="unknown-in-list"),
        pytest.param("ndcg@0", "ndcg", id="cutoff-zero"),
        pytest.param("ndcg@ten", "ten", id="cutoff-not-a-number"),
        pytest.param("r_precision@5", "r_precision", id="cutoff-on-uncut-metric"),
        pytest.param("ndcg(gain=cubic)@10", "cubic", id="bad-parameter-value"),
        pytest.param("precision(foo=1)@5", "foo", id="unknown-parameter"),
    ],
)
def test_bad_metric_option(run_cli, write_jsonl, metric: str, fragment: str) -> None:
    result = run_cli("eval", write_jsonl([GOOD]), "--metric", metric)
    result.assert_one_line_error(fragment)


@pytest.mark.parametrize(
    ("gate", "fragment"),
    [
        pytest.param("ndcg@10=0.7", "ndcg@10=0.7", id="single-equals"),
        pytest.param("ndcg@10==0.7", "ndcg@10==0.7", id="double-equals"),
        pytest.param("ndcg@10", "ndcg@10", id="no-operator"),
        pytest.param(">=0.7", ">=0.7", id="no-metric"),
        pytest.param("ndcg@10>=abc", "abc", id="threshold-not-a-number"),
        pytest.param("ndcg@10>=", "ndcg@10>=", id="threshold-missing"),
        pytest.param("ndcg@10>=nan", "ndcg@10", id="threshold-nan"),
        pytest.param("ndcg@10>=70", "70", id="percent-on-bounded-metric"),
        pytest.param("recall@20>1.5", "1.5", id="above-1-on-bounded-metric"),
        pytest.param("mrr<-0.1", "-0.1", id="negative-on-bounded-metric"),
        pytest.param("bogus>=0.5", "bogus", id="unknown-metric"),
    ],
)
def test_bad_gate_option(run_cli, write_jsonl, gate: str, fragment: str) -> None:
    result = run_cli("eval", write_jsonl([GOOD]), "--gate", gate)
    result.assert_one_line_error(fragment)


def test_threshold_above_1_is_fine_on_unbounded_dcg(run_cli, write_jsonl) -> None:
    # dcg@10 of GOOD: grade 1 at rank 1 -> (2^1 - 1) / log2(2) = 1.0
    result = run_cli("eval", write_jsonl([GOOD]), "--gate", "dcg@10<70")
    assert result.code == 0, result.err


@pytest.mark.parametrize(
    ("text", "fragments"),
    [
        pytest.param('metric = ["mrr"]\n', ["'metric'"], id="unknown-key"),
        pytest.param("metrics = [\n", ["not valid TOML"], id="bad-toml"),
        pytest.param('[gates]\n"ndcg@10" = "=> 0.7"\n', ["ndcg@10", "=> 0.7"], id="bad-condition"),
        pytest.param('[gates]\n"ndcg@10" = 70\n', ["ndcg@10", "70"], id="gate-out-of-range"),
        pytest.param('[gates]\n"ndcgg@10" = 0.7\n', ["ndcgg"], id="gate-unknown-metric"),
        pytest.param('[gates]\n"mrr" = true\n', ["mrr"], id="gate-boolean"),
        pytest.param("gates = 0.7\n", ["gates"], id="gates-not-a-table"),
        pytest.param('empty_relevant = "drop"\n', ["empty_relevant", "drop"], id="bad-choice"),
        pytest.param("relevance_threshold = 0\n", ["relevance_threshold"], id="threshold-zero"),
        pytest.param("metrics = 5\n", ["metrics"], id="metrics-not-a-list"),
        pytest.param("[fields]\nretrieved_ids = 3\n", ["retrieved_ids"], id="field-not-a-string"),
    ],
)
def test_bad_config_file(run_cli, write_jsonl, tmp_path: Path, text: str, fragments) -> None:
    config = tmp_path / "gates.toml"
    config.write_text(text, encoding="utf-8")
    result = run_cli("eval", write_jsonl([GOOD]), "--config", config)
    result.assert_one_line_error("gates.toml", *fragments)


def test_bad_config_in_working_directory_is_reported(run_cli, write_jsonl, tmp_path) -> None:
    (tmp_path / "rankgate.toml").write_text("treshold = 1\n", encoding="utf-8")
    traces = write_jsonl([GOOD])
    run_cli("eval", traces, cwd=tmp_path).assert_one_line_error("rankgate.toml", "treshold")
    assert run_cli("eval", traces, "--no-config", cwd=tmp_path).code == 0


def test_missing_config_file(run_cli, write_jsonl, tmp_path: Path) -> None:
    result = run_cli("eval", write_jsonl([GOOD]), "--config", tmp_path / "nope.toml")
    result.assert_one_line_error("nope.toml")


def test_config_that_is_a_directory(run_cli, write_jsonl, tmp_path: Path) -> None:
    (tmp_path / "conf.d").mkdir()
    result = run_cli("eval", write_jsonl([GOOD]), "--config", tmp_path / "conf.d")
    result.assert_one_line_error("conf.d")


def test_config_that_is_not_utf8(run_cli, write_jsonl, tmp_path: Path) -> None:
    config = tmp_path / "latin1.toml"
    config.write_bytes("# caf\xe9\n[gates]\nmrr = 0.5\n".encode("latin-1"))
    result = run_cli("eval", write_jsonl([GOOD]), "--config", config)
    result.assert_one_line_error("latin1.toml")


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        pytest.param(["--run", "run.txt"], "--qrels", id="run-without-qrels"),
        pytest.param(["--qrels", "qrels.txt"], "--run", id="qrels-without-run"),
        pytest.param(
            ["t.jsonl", "--run", "run.txt", "--qrels", "qrels.txt"], "not both", id="both"
        ),
        pytest.param([], "trace file", id="nothing-to-read"),
        pytest.param(["t.jsonl", "--rel", "0"], "relevance threshold", id="rel-zero"),
        pytest.param(["t.jsonl", "--rel", "nan"], "relevance threshold", id="rel-nan"),
        pytest.param(
            ["t.jsonl", "--field", "retrieved_ids"], "retrieved_ids", id="field-no-equals"
        ),
        pytest.param(["t.jsonl", "--field", "ids=meta.ids"], "ids", id="field-unknown-name"),
        pytest.param(["t.jsonl", "--field", "retrieved_ids=a..b"], "a..b", id="field-bad-path"),
        pytest.param(
            ["t.jsonl", "-o", "no/such/dir/r.json"], "no/such/dir/r.json", id="output-dir"
        ),
        pytest.param(["-", "--input-format", "parquet"], "standard input", id="stdin-parquet"),
    ],
)
def test_usage_errors(run_cli, write_jsonl, tmp_path: Path, args, fragment: str) -> None:
    write_jsonl([GOOD], "t.jsonl")
    (tmp_path / "run.txt").write_text("q1 Q0 d1 1 1.0 t\n", encoding="utf-8")
    (tmp_path / "qrels.txt").write_text("q1 0 d1 1\n", encoding="utf-8")
    run_cli("eval", *args, cwd=tmp_path).assert_one_line_error(fragment)


def test_parquet_that_is_not_parquet(run_cli, tmp_path: Path) -> None:
    fake = tmp_path / "fake.parquet"
    fake.write_bytes(b"this is not parquet at all")
    run_cli("eval", fake).assert_one_line_error("fake.parquet")


def test_corrupt_gzip(run_cli, tmp_path: Path) -> None:
    broken = tmp_path / "traces.jsonl.gz"
    broken.write_bytes(b"\x1f\x8b" + b"this is no deflate stream" * 4)
    run_cli("eval", broken).assert_one_line_error("traces.jsonl.gz")


def test_truncated_gzip(run_cli, tmp_path: Path) -> None:
    whole = gzip.compress("".join(json.dumps(r) + "\n" for r in HAND_RECORDS).encode())
    truncated = tmp_path / "traces.jsonl.gz"
    truncated.write_bytes(whole[: len(whole) // 2])
    run_cli("eval", truncated).assert_one_line_error("traces.jsonl.gz")


def test_gzip_is_read(run_cli, tmp_path: Path) -> None:
    """The positive counterpart of the two tests above: a whole .gz file scores like the plain one."""
    path = tmp_path / "traces.jsonl.gz"
    path.write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in HAND_RECORDS).encode()))
    result = run_cli("eval", path, "--format", "json", "--metric", "mrr")
    assert result.code == 0, result.err
    assert result.json()["metrics"]["mrr"] == pytest.approx(7 / 9)
