"""``rankgate eval --engine spark`` end to end: a real Spark (local mode) started by the CLI gives the
report the local engine gives, and options that Spark cannot honour are refused before it starts."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rankgate.cli import main

REQUIRED = os.environ.get("RANKGATE_REQUIRE_SPARK") == "1"


def _unavailable() -> str | None:
    try:
        import pyspark  # noqa: F401
    except ImportError:
        return "pyspark is not installed (pip install 'rankgate[spark]')"
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        return "no Java runtime"
    return None


def _traces(path: Path) -> Path:
    rows = []
    for i in range(400):
        ranked = [f"d{(i * 7 + j) % 50}" for j in range(20)]
        labels = None if i % 9 == 0 else [(f"d{(i + j) % 50}", float(j % 4)) for j in range(6)]
        rows.append(
            {
                "query_id": f"q{i}",
                "retrieved_ids": ranked,
                "relevance_scores": labels,
                "query_type": ["factual", "howto", None][i % 3],
            }
        )
    schema = pa.schema(
        [
            ("query_id", pa.string()),
            ("retrieved_ids", pa.list_(pa.string())),
            ("relevance_scores", pa.map_(pa.string(), pa.float64())),
            ("query_type", pa.string()),
        ]
    )
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path, row_group_size=100)
    return path


def _exit_code(args: list[str]) -> int:
    try:
        return main(args)
    except SystemExit as stop:  # usage errors leave through SystemExit(2)
        return int(stop.code or 0)


def _report(args: list[str]) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-m", "rankgate", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 1, done.stderr  # the gate below fails on purpose
    report = json.loads(done.stdout)
    assert isinstance(report, dict)
    return report


def test_spark_engine_reports_what_the_local_engine_reports(tmp_path: Path) -> None:
    reason = _unavailable()
    if reason is not None:
        if REQUIRED:
            pytest.fail(f"RANKGATE_REQUIRE_SPARK=1 but {reason}")
        pytest.skip(reason)
    path = _traces(tmp_path / "traces.parquet")
    common = [
        "eval",
        str(path),
        "--no-config",
        "--no-progress",
        "--format",
        "json",
        "-m",
        "ndcg@10,map,recall@20",
        "--segment-by",
        "query_type",
        "-g",
        "map>=0.99",
    ]
    local = _report(common)
    spark = _report([*common, "--engine", "spark", "--master", "local[2]"])
    for key in ("summary", "metrics", "segments", "gates", "passed"):
        assert spark[key] == local[key], key


@pytest.mark.parametrize(
    "extra",
    [
        ["--labels", "labels.jsonl"],
        ["--worst", "5", "--format", "html"],
        ["--since", "24h"],
        ["--input-format", "json"],
    ],
)
def test_options_spark_cannot_honour_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str]
) -> None:
    assert _exit_code(["eval", str(tmp_path / "t.parquet"), "--engine", "spark", *extra]) == 2
    assert "--engine spark reads Parquet" in capsys.readouterr().err


def test_master_needs_the_spark_engine(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _exit_code(["eval", str(tmp_path / "t.parquet"), "--master", "local[2]"]) == 2
    assert "--master applies to --engine spark" in capsys.readouterr().err


def _candidate(baseline: Path, path: Path) -> Path:
    """The baseline with the top two IDs swapped on every third query: a real, mixed change."""
    table = pq.read_table(baseline)
    rows = table.to_pylist()
    for i, row in enumerate(rows):
        if i % 3 == 0:
            ranked = row["retrieved_ids"]
            ranked[0], ranked[1] = ranked[1], ranked[0]
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), path, row_group_size=100)
    return path


def _compare_report(args: list[str]) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-m", "rankgate", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode in (0, 1), done.stderr
    report = json.loads(done.stdout)
    assert isinstance(report, dict)
    report["exit"] = done.returncode
    return report


@pytest.mark.parametrize("pairing", ["paired", "unpaired"])
def test_spark_compare_reports_what_local_compare_reports(tmp_path: Path, pairing: str) -> None:
    reason = _unavailable()
    if reason is not None:
        if REQUIRED:
            pytest.fail(f"RANKGATE_REQUIRE_SPARK=1 but {reason}")
        pytest.skip(reason)
    baseline = _traces(tmp_path / "base.parquet")
    candidate = _candidate(baseline, tmp_path / "cand.parquet")
    common = [
        "compare", str(baseline), str(candidate), "--no-config", "--no-progress",
        "--format", "json", "-m", "ndcg@10,mrr", "--segment-by", "query_type",
        "--pairing", pairing,
    ]  # fmt: skip
    local = _compare_report(common)
    spark = _compare_report([*common, "--engine", "spark", "--master", "local[2]"])
    assert spark["exit"] == local["exit"]
    assert spark["results"] == local["results"]


def test_compare_on_spark_refuses_what_it_cannot_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["compare", "-", str(tmp_path / "b.parquet"), "--engine", "spark"]
    assert _exit_code(args) == 2
    assert "--engine spark reads Parquet" in capsys.readouterr().err
    assert _exit_code(["compare", "a.parquet", "b.parquet", "--master", "local[2]"]) == 2
    assert "--master applies to --engine spark" in capsys.readouterr().err
