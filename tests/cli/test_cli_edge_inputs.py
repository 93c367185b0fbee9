"""Inputs and option combinations from the independent review: each once crashed, misread or was
silently ignored, and must now work or exit 2 with one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

GOOD = {"query_id": "q1", "retrieved_ids": ["a", "b"], "relevant_ids": ["a"]}


def test_closed_stdin_is_a_usage_error(run_cli) -> None:  # type: ignore[no-untyped-def]
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; sys.stdin.close(); sys.stdin = None; "
            "from rankgate.cli import main; sys.exit(main(['eval', '-']))",
        ],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "standard input is closed" in proc.stderr


def test_a_pipe_named_as_a_path_is_read_whole(tmp_path: Path) -> None:
    """`rankgate eval <(cat traces.jsonl)` and `/dev/stdin`: nothing may be lost to a format probe."""
    text = json.dumps(GOOD) + "\n"
    proc = subprocess.run(
        [sys.executable, "-m", "rankgate", "eval", "/dev/stdin", "--format", "json", "-m", "mrr"],
        input=text,
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["summary"]["read"] == 1
    assert report["metrics"]["mrr"] == 1.0


def test_parquet_map_with_a_repeated_key_is_a_located_invalid_record(tmp_path: Path, cli) -> None:  # type: ignore[no-untyped-def]
    grades = pa.array(
        [[("a", 1)], [("a", 1), ("a", 2)], [("b", 3)]], type=pa.map_(pa.string(), pa.int64())
    )
    table = pa.table(
        {
            "query_id": ["q1", "q2", "q3"],
            "retrieved_ids": [["a"], ["a"], ["b"]],
            "relevance_scores": grades,
        }
    )
    path = tmp_path / "t.parquet"
    pq.write_table(table, path)
    failed = cli("eval", path)
    failed.assert_one_line_error(f"{path} row 2", "repeats the key 'a'")
    skipped = cli("eval", path, "--on-invalid", "skip", "--format", "json")
    summary = json.loads(skipped.out)["summary"]
    assert (summary["read"], summary["scored"], summary["skipped"]["invalid"]) == (3, 2, 1)


def test_corrupt_parquet_pages_exit_2(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "t.parquet"
    pq.write_table(
        pa.table({"retrieved_ids": [["a"] * 50] * 200, "relevant_ids": [["a"]] * 200}),
        path,
        compression="snappy",
        use_dictionary=False,
    )
    data = bytearray(path.read_bytes())
    middle = len(data) // 3
    data[middle : middle + 64] = b"\xff" * 64  # damage the pages, keep the footer readable
    path.write_bytes(bytes(data))
    result = run_cli("eval", path)
    result.assert_one_line_error(str(path))


def test_csv_with_a_very_long_cell(tmp_path: Path, cli) -> None:  # type: ignore[no-untyped-def]
    """A ranking of 20,000 IDs is longer than the csv module's default cell limit."""
    ids = [f"doc-{i:06d}" for i in range(20_000)]
    path = tmp_path / "t.csv"
    cell = json.dumps(ids).replace('"', '""')
    path.write_text(f'query_id,retrieved_ids,relevant_ids\nq1,"{cell}","[""doc-019999""]"\n')
    result = cli("eval", path, "-m", "recall@20000", "-m", "mrr", "--format", "json")
    assert result.code == 0, result.err
    metrics = json.loads(result.out)["metrics"]
    assert metrics == {"recall@20000": 1.0, "mrr": 1 / 20_000}


def test_json_text_in_a_native_json_field_is_not_a_list(write_jsonl, run_cli) -> None:  # type: ignore[no-untyped-def]
    path = write_jsonl(['{"retrieved_ids": "[\\"d1\\"]", "relevant_ids": ["d1"]}'])
    run_cli("eval", path).assert_one_line_error(f"{path}:1", "retrieved_ids", "got string")


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        (["--config", "x.toml", "--no-config"], "--config and --no-config"),
        (["--per-query"], "--per-query applies to --format json"),
        (["-g", "mrr>=0.5", "-g", "mrr>=0.6"], "repeats --gate"),
    ],
    ids=["config-and-no-config", "per-query-with-table", "same-gate-twice"],
)
def test_contradictory_options_are_refused(write_jsonl, run_cli, extra, fragment) -> None:  # type: ignore[no-untyped-def]
    run_cli("eval", write_jsonl([GOOD]), *extra).assert_one_line_error(fragment)


def test_input_format_does_not_apply_to_trec_files(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    run = tmp_path / "run.txt"
    qrels = tmp_path / "qrels.txt"
    run.write_text("q1 Q0 a 1 1.0 t\n")
    qrels.write_text("q1 0 a 1\n")
    result = run_cli("eval", "--run", run, "--qrels", qrels, "--input-format", "csv")
    result.assert_one_line_error("--input-format does not apply")


def test_qrels_that_is_a_folder_says_so(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    run = tmp_path / "run.txt"
    run.write_text("q1 Q0 a 1 1.0 t\n")
    run_cli("eval", "--run", run, "--qrels", tmp_path).assert_one_line_error("is a folder")


def test_fractional_qrels_grades_are_truncated_like_trec_eval(tmp_path: Path, cli) -> None:  # type: ignore[no-untyped-def]
    run = tmp_path / "run.txt"
    qrels = tmp_path / "qrels.txt"
    run.write_text("q1 Q0 a 1 2.0 t\nq1 Q0 b 2 1.0 t\n")
    qrels.write_text("q1 0 a 0.9\nq1 0 b 1.7\n")  # atol: a -> 0 (not relevant), b -> 1
    result = cli("eval", "--run", run, "--qrels", qrels, "-m", "mrr", "--format", "json")
    assert json.loads(result.out)["metrics"]["mrr"] == 1 / 2


def test_unicode_digit_cutoff_exits_2(write_jsonl, run_cli) -> None:  # type: ignore[no-untyped-def]
    run_cli("eval", write_jsonl([GOOD]), "-m", "ndcg@²").assert_one_line_error("cutoff")
