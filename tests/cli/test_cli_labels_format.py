"""``--labels-format``: a label file read in the format the user names, for eval and compare."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import RunCli

# q1 finds its relevant document b at rank 2, q2 finds c at rank 1: MRR = (1/2 + 1) / 2.
TRACES = [
    {"query_id": "q1", "retrieved_ids": ["a", "b", "c"]},
    {"query_id": "q2", "retrieved_ids": ["c", "d"]},
]
QRELS = "q1 0 b 2\nq1 0 x 1\nq2 0 c 1\n"


def _write(tmp_path: Path) -> tuple[Path, Path]:
    traces = tmp_path / "traces.jsonl"
    traces.write_text("".join(json.dumps(r) + "\n" for r in TRACES))
    # Named .json, but TREC qrels inside: only the named format reads it as the user meant.
    labels = tmp_path / "judgments.json"
    labels.write_text(QRELS)
    return traces, labels


def test_eval_reads_labels_in_the_named_format(cli: RunCli, tmp_path: Path) -> None:
    traces, labels = _write(tmp_path)
    result = cli(
        "eval", traces, "--no-config", "--labels", labels, "--labels-format", "qrels",
        "-m", "mrr", "--format", "json",
    )  # fmt: skip
    assert result.code == 0, result.err
    assert result.json()["metrics"]["mrr"] == 0.75


def test_a_named_format_the_file_does_not_hold_is_one_line(cli: RunCli, tmp_path: Path) -> None:
    traces, labels = _write(tmp_path)
    result = cli("eval", traces, "--no-config", "--labels", labels, "--labels-format", "json")
    result.assert_one_line_error("judgments.json")


def test_compare_reads_labels_in_the_named_format(cli: RunCli, tmp_path: Path) -> None:
    traces, labels = _write(tmp_path)
    other = tmp_path / "other.jsonl"
    other.write_text("".join(json.dumps({**r, "retrieved_ids": ["z"]}) + "\n" for r in TRACES))
    result = cli(
        "compare", traces, other, "--no-config", "--labels", labels, "--labels-format", "qrels",
        "-m", "mrr", "--format", "json",
    )  # fmt: skip
    assert result.code in (0, 1), result.err
    report = result.json()
    cells = [c for c in report["cells"] if c["metric"] == "mrr" and c["segment"] is None]
    assert cells and cells[0]["baseline_mean"] == 0.75


def test_labels_format_without_labels_is_refused(cli: RunCli, tmp_path: Path) -> None:
    traces, _ = _write(tmp_path)
    cli("eval", traces, "--no-config", "--labels-format", "qrels").assert_one_line_error(
        "--labels-format", "--labels"
    )
