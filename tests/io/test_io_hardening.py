"""Issue 15, readers: every crash the probe found, driven through the command line as a user would.

Each case runs ``python -m rankgate`` in a second process and asserts exit code 2 and exactly one
line on stderr naming the file (and the line or row, and the field, where there is one): never a
traceback, never the "internal error" exit.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import rankgate
from rankgate.errors import InputError

GOOD = {"query_id": "q1", "retrieved_ids": ["a", "b"], "relevant_ids": ["b"]}


def run(
    *args: str, cwd: Path | None = None, prefix: tuple[str, ...] = (), stdin: Any = None
) -> Any:
    return subprocess.run(
        [*prefix, sys.executable, "-m", "rankgate", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        stdin=stdin,
        timeout=120,
        env={**os.environ, "NO_COLOR": "1"},
    )


def refused(result: Any, *fragments: str) -> str:
    """The single stderr line of a run that ended with exit 2; it holds every fragment."""
    lines = result.stderr.splitlines()
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1, result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    return str(lines[0])


# ---------------------------------------------------------------------------------------------
# Nesting: RecursionError from the json fallback


def _deep(depth: int) -> str:
    return json.dumps({**GOOD, "x": 0}).replace("0}", "[" * depth + "]" * depth + "}")


@pytest.mark.parametrize("name", ["deep.jsonl", "deep.json", "deep.log"])
def test_json_nested_1500_deep_is_a_located_error(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_text(json.dumps(GOOD) + "\n" + _deep(1500) + "\n")
    result = run("eval", str(path), "-m", "mrr")
    refused(result, f"{path}:2:", "nested deeper than 64 levels")


def test_json_array_element_nested_1500_deep(tmp_path: Path) -> None:
    path = tmp_path / "deep.json"
    path.write_text("[\n" + json.dumps(GOOD) + ",\n" + _deep(1500) + "\n]\n")
    refused(run("eval", str(path), "-m", "mrr"), f"{path}:3:", "nested deeper than 64 levels")


def test_stdin_nested_1500_deep(tmp_path: Path) -> None:
    path = tmp_path / "deep.jsonl"
    path.write_text(_deep(1500) + "\n")
    with path.open("rb") as handle:
        result = run("eval", "-", "-m", "mrr", stdin=handle)
    refused(result, "<stdin>:1:", "nested deeper than 64 levels")


def test_nesting_at_the_limit_is_scored_and_past_it_skipped_with_the_reason(
    tmp_path: Path,
) -> None:
    path = tmp_path / "t.jsonl"
    # The record is level 1, so 63 more levels reach the limit of 64 exactly.
    path.write_text(_deep(63) + "\n" + _deep(64) + "\n")
    result = run("eval", str(path), "-m", "mrr", "--on-invalid", "skip", "--format", "json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert json.dumps(summary).count("nested deeper than 64 levels") >= 1
    assert rankgate.evaluate(path, ["mrr"], settings=_skip()).summary.read == 2


def _skip() -> rankgate.Settings:
    return rankgate.Settings(on_invalid="skip")


# ---------------------------------------------------------------------------------------------
# Record length: MemoryError on /dev/zero


def test_dev_zero_stops_at_the_record_limit(tmp_path: Path) -> None:
    result = run("eval", "/dev/zero", "-m", "mrr")
    refused(result, "/dev/zero:1:", "record is longer than 256 MiB")


def test_dev_zero_on_stdin_stops_too() -> None:
    with open("/dev/zero", "rb") as zeros:
        result = run("eval", "-", "-m", "mrr", stdin=zeros)
    refused(result, "<stdin>:1:", "record is longer than 256 MiB")


def test_an_overlong_line_in_a_file_is_skipped_and_counted(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    with path.open("wb") as out:
        out.write(json.dumps(GOOD).encode() + b"\n")
        out.write(b'{"retrieved_ids": ["' + b"x" * (257 << 20) + b'"]}\n')  # no room to decode
        out.write(json.dumps({**GOOD, "query_id": "q3"}).encode() + b"\n")
    refused(run("eval", str(path), "-m", "mrr"), f"{path}:2:", "record is longer than 256 MiB")
    evaluation = rankgate.evaluate(path, ["mrr"], settings=_skip())
    assert evaluation.summary.read == 3
    assert evaluation.query_ids == ("q1", "q3")


# ---------------------------------------------------------------------------------------------
# Parquet: ArrowInvalid on an int64 grade of 2**62


def test_parquet_int64_grade_of_2_pow_62(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    scores = pa.array([[("a", 1)], [("b", 2**62)]], pa.map_(pa.string(), pa.int64()))
    table = pa.table({"query_id": ["q1", "q2"], "retrieved_ids": [["a"], ["b"]]})
    pq.write_table(table.append_column("relevance_scores", scores), path)
    refused(
        run("eval", str(path), "-m", "mrr"),
        f"{path} row 2: field 'relevance_scores.b'",
        "grade must be at most 1000",
    )


# ---------------------------------------------------------------------------------------------
# PermissionError on unreadable files


@pytest.fixture
def unreadable_dir(tmp_path: Path) -> tuple[Path, tuple[str, ...]]:
    """A folder, and the prefix that makes a mode-000 file in it unreadable to the command: root
    reads everything, so as root the command runs without the capabilities that let it."""
    if os.geteuid() != 0:
        return tmp_path, ()
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: no file is unreadable")
    return tmp_path, (setpriv, "--bounding-set=-dac_override,-dac_read_search")


def _unreadable(path: Path) -> Path:
    path.chmod(0o000)
    return path


@pytest.mark.parametrize("name", ["t.jsonl", "t.csv", "t.jsonl.gz", "t.json", "t.parquet", "t"])
def test_unreadable_trace_file(unreadable_dir: tuple[Path, tuple[str, ...]], name: str) -> None:
    folder, prefix = unreadable_dir
    path = folder / name
    path.write_bytes(gzip.compress(json.dumps(GOOD).encode()))
    result = run("eval", str(_unreadable(path)), "-m", "mrr", prefix=prefix)
    refused(result, f"{path}: cannot read: permission denied")


def test_unreadable_labels_and_corpus(unreadable_dir: tuple[Path, tuple[str, ...]]) -> None:
    folder, prefix = unreadable_dir
    traces = folder / "t.jsonl"
    traces.write_text(json.dumps({"query_id": "q1", "retrieved_ids": ["a"]}) + "\n")
    for name in ("labels.jsonl", "labels.qrels", "labels.csv"):
        labels = folder / name
        labels.write_text("q1 0 a 1\n")
        result = run(
            "eval", str(traces), "-m", "mrr", "--labels", str(_unreadable(labels)), prefix=prefix
        )
        refused(result, f"{labels}: cannot read: permission denied")
    labeled = folder / "labeled.jsonl"
    labeled.write_text(json.dumps(GOOD) + "\n")
    for name in ("corpus.txt", "corpus.csv", "corpus.parquet"):
        corpus = folder / name
        corpus.write_text("a\n")
        result = run(
            "eval", str(labeled), "-m", "mrr", "--corpus", str(_unreadable(corpus)), prefix=prefix
        )
        refused(result, f"{corpus}: cannot read: permission denied")


# ---------------------------------------------------------------------------------------------
# Format hints: an SQLite store and an OTLP export given as trace files


def _sqlite_file(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE t (x)")
    connection.close()
    return path


def test_sqlite_file_suggests_the_store_url_relative(tmp_path: Path) -> None:
    _sqlite_file(tmp_path / "build" / "traces.db")
    result = run("eval", "build/traces.db", "-m", "mrr", cwd=tmp_path)
    line = refused(result, "build/traces.db: is an SQLite database")
    assert line.endswith("pass sqlite:///build/traces.db")


def test_sqlite_file_suggests_the_store_url_absolute(tmp_path: Path) -> None:
    path = _sqlite_file(tmp_path / "traces.jsonl")  # the name does not matter
    line = refused(run("eval", str(path), "-m", "mrr"), "is an SQLite database")
    assert line.endswith(f"pass sqlite:///{path}")
    assert f"sqlite:////{str(path).lstrip('/')}" in line


def test_suggested_sqlite_url_opens_the_store(tmp_path: Path) -> None:
    from rankgate.io.source import sqlite_url
    from rankgate.store.backends import connect

    path = tmp_path / "my store.db"
    connect("sqlite:///" + str(path)).close()  # creates the store
    backend = connect(sqlite_url(path), read_only=True)
    backend.close()


@pytest.mark.parametrize("compact", [True, False])
def test_otlp_export_named_json_says_to_pass_input_format(tmp_path: Path, compact: bool) -> None:
    export = {"resourceSpans": [{"resource": {}, "scopeSpans": [{"spans": []}]}]}
    path = tmp_path / "export.json"
    path.write_text(json.dumps(export, indent=None if compact else 2))
    refused(
        run("eval", str(path), "-m", "mrr"),
        f"{path}: looks like an OpenTelemetry (OTLP) trace export",
        "pass --input-format otlp",
    )
    assert run("eval", str(path), "-m", "mrr", "--input-format", "otlp").returncode in (0, 1, 2)


def test_otlp_record_elsewhere_names_the_option_too(tmp_path: Path) -> None:
    path = tmp_path / "export.jsonl"
    path.write_text(json.dumps({"x": 1, "resourceSpans": []}) + "\n")  # not the first key
    refused(run("eval", str(path), "-m", "mrr"), f"{path}:1:", "pass --input-format otlp")


# ---------------------------------------------------------------------------------------------
# CSV: duplicated columns and short rows


def test_csv_duplicated_column_is_a_located_error(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text('query_id,relevant_ids,retrieved_ids,relevant_ids\nq1,"[""a""]","[""a""]",\n')
    refused(
        run("eval", str(path), "-m", "mrr"),
        f"{path}:1: field 'relevant_ids': the header names this column twice (columns 2 and 4)",
    )


def test_csv_short_row_is_a_located_error_not_unlabeled(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text('query_id,retrieved_ids,relevant_ids\nq1,"[""a""]","[""a""]"\nq2,"[""a""]"\n')
    refused(
        run("eval", str(path), "-m", "mrr"),
        f"{path}:3: field 'relevant_ids': row has 2 cells, the header has 3 columns",
    )
    evaluation = rankgate.evaluate(path, ["mrr"], settings=_skip())
    assert (evaluation.summary.read, evaluation.query_ids) == (2, ("q1",))


# ---------------------------------------------------------------------------------------------
# TREC qrels recognised by their layout


QRELS = "q1 0 b 1\nq1 0 c 0\nq2 0 z 2\n"


@pytest.mark.parametrize("name", ["labels.txt", "qrels", "labels.tsv", "labels.qrels.gz"])
def test_eval_labels_in_qrels_layout_whatever_the_name(tmp_path: Path, name: str) -> None:
    traces = tmp_path / "t.jsonl"
    traces.write_text(json.dumps({"query_id": "q1", "retrieved_ids": ["a", "b"]}) + "\n")
    labels = tmp_path / name
    data = QRELS.encode()
    labels.write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    result = run("eval", str(traces), "-m", "mrr", "--labels", str(labels), "--format", "json")
    assert result.returncode == 0, result.stderr
    assert rankgate.evaluate(traces, ["mrr"], labels=labels).mean("mrr") == 0.5


def test_label_import_reads_qrels_layout(tmp_path: Path) -> None:
    labels = tmp_path / "judgments.txt"
    labels.write_text(QRELS)
    store = f"sqlite:///{tmp_path / 'store.db'}"
    result = run("label", "import", str(labels), store)
    assert result.returncode == 0, result.stderr
    from rankgate.labels import collect_labels

    found = collect_labels(store)
    assert {q: dict(v.grades) for q, v in found.items()} == {
        "q1": {"b": 1.0, "c": 0.0},
        "q2": {"z": 2.0},
    }


def test_label_format_can_be_forced(tmp_path: Path) -> None:
    from rankgate.labels import LABEL_FORMATS, collect_labels

    assert "qrels" in LABEL_FORMATS
    labels = tmp_path / "odd.dat"
    labels.write_text("# a comment line first\nq1 0 b 1\n")  # not detected: five columns
    with pytest.raises(InputError):
        collect_labels(labels)
    labels.write_text("q1 0 b 1\n")
    assert collect_labels(labels, input_format="qrels")["q1"].grades == {"b": 1.0}
    with pytest.raises(rankgate.UsageError, match="unknown label format"):
        collect_labels(labels, input_format="trec")


def test_a_trace_tsv_is_not_taken_for_qrels(tmp_path: Path) -> None:
    from rankgate.io.trec import looks_like_qrels

    path = tmp_path / "t.tsv"
    path.write_text("query_id\tdocument_id\tgrade\tsource\nq1\tb\t1\tx\n")
    assert not looks_like_qrels(path)
    path.write_text(json.dumps(GOOD) + "\n")
    assert not looks_like_qrels(path)


# ---------------------------------------------------------------------------------------------
# Tables with integer-keyed relevance_scores


INT_KEYED = [
    {"query_id": "q1", "retrieved_ids": ["1", "2"], "relevance_scores": {2: 1, 5: 2}},
    {"query_id": "q2", "retrieved_ids": ["7", "3"], "relevance_scores": {np.int64(7): np.int64(3)}},
]


def test_int_keys_are_read_as_their_decimal_text_from_dicts_and_dataframes() -> None:
    expected = rankgate.evaluate(INT_KEYED, ["mrr", "ndcg@2"])
    frame = pd.DataFrame(INT_KEYED)
    from_frame = rankgate.evaluate(frame, ["mrr", "ndcg@2"])
    assert from_frame.per_query() == expected.per_query()
    assert expected.mean("mrr") == (1 / 2 + 1) / 2
    assert frame["relevance_scores"][0] == {2: 1, 5: 2}  # the caller's frame is not changed


def test_int_keyed_maps_from_arrow_and_polars() -> None:
    scores = pa.array([[(2, 1), (5, 2)], [(7, 3)]], pa.map_(pa.int64(), pa.int64()))
    table = pa.table(
        {
            "query_id": ["q1", "q2"],
            "retrieved_ids": [["1", "2"], ["7", "3"]],
            "relevance_scores": scores,
        }
    )
    expected = rankgate.evaluate(INT_KEYED, ["mrr", "ndcg@2"]).per_query()
    assert rankgate.evaluate(table, ["mrr", "ndcg@2"]).per_query() == expected
    assert rankgate.evaluate(pl.from_arrow(table), ["mrr", "ndcg@2"]).per_query() == expected


# ---------------------------------------------------------------------------------------------
# Parquet text that is not UTF-8 (Arrow does not check it when reading a file)


def _bad_text(valid_rows: int) -> pa.Array:
    good = b"ok"
    data = good * valid_rows + b"q\xc3"
    offsets = [len(good) * i for i in range(valid_rows + 1)] + [len(data)]
    return pa.Array.from_buffers(
        pa.string(),
        valid_rows + 1,
        [None, pa.py_buffer(pa.array(offsets, pa.int32()).buffers()[1]), pa.py_buffer(data)],
    )


@pytest.mark.parametrize("column", ["query_id", "query_type", "retrieved_ids", "relevant_ids"])
@pytest.mark.parametrize("skip", [False, True])
def test_parquet_text_not_utf8_is_a_located_error(tmp_path: Path, column: str, skip: bool) -> None:
    bad = _bad_text(1)
    columns: dict[str, Any] = {
        "query_id": pa.array(["q1", "q2"]),
        "retrieved_ids": pa.array([["a"], ["a"]], pa.list_(pa.string())),
        "relevant_ids": pa.array([["a"], ["a"]], pa.list_(pa.string())),
        "query_type": pa.array(["x", "y"]),
    }
    if column in ("retrieved_ids", "relevant_ids"):
        columns[column] = pa.ListArray.from_arrays(pa.array([0, 1, 2], pa.int32()), bad)
    else:
        columns[column] = bad
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table(columns), path)
    args = ["eval", str(path), "-m", "mrr", "--segment-by", "query_type"]
    if skip:
        result = run(*args, "--on-invalid", "skip", "--format", "json")
        assert result.returncode == 0, result.stderr
        assert "not valid UTF-8" in result.stdout
    else:
        refused(run(*args), f"{path} row 2: field '{column}", "not valid UTF-8")
