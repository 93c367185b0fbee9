"""Generated hostile records fed to every reader through ``rankgate eval``, as a user runs it.

For every run (adversarial_helpers.check_contract): exit 0/1 only with the JSON report, whose counts
add up; exit 2 only as one line on stderr naming the input; never 3, a traceback, a signal or a hang.
Where the input's record count is known (one record per non-blank line, one per Parquet row, one per
array element), the report must have read exactly that many: no record lost, none invented.

JSON Lines are read twice, by the compiled scanner and by the pure-Python fallback, which must agree
on every count. A line that is wrong is one bad record, so under ``--on-invalid skip`` a JSON Lines
file always gets a report; with the default ``fail`` the run stops exactly when skip mode found an
invalid record.
"""

from __future__ import annotations

import json
import sqlite3
import tempfile
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from adversarial_helpers import (
    EXAMPLES,
    PHASES,
    check_contract,
    check_refusal_only,
    run_eval,
    run_rankgate,
)
from hostile_strategies import (
    CsvCase,
    csv_files,
    gzip_bytes,
    json_arrays,
    jsonl_files,
    ordinary_record,
    otlp_exports,
    parquet_tables,
    trec_files,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

fuzz = settings(
    max_examples=EXAMPLES,
    deadline=None,
    phases=PHASES,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

SKIP = ("--on-invalid", "skip")
# Every stage a hostile ID or segment value can reach: segments, per-query values, a gate (so exit 1
# happens too) and, for one run, the HTML report.
DEEP = ("--segment-by", "query_type", "--per-query", "--gate", "mrr>=0.5", "--resamples", "50")


def _folder() -> tempfile.TemporaryDirectory[str]:
    return tempfile.TemporaryDirectory(prefix="rankgate-fuzz-")


def _same_counts(first: dict[str, Any], second: dict[str, Any]) -> None:
    keys = ("read", "scored", "skipped", "labeled", "duplicates_dropped")
    assert {k: first[k] for k in keys} == {k: second[k] for k in keys}


@fuzz
@given(jsonl_files())
def test_json_lines_both_readers(case: tuple[bytes, int]) -> None:
    body, records = case
    with _folder() as name:
        folder = Path(name)
        (folder / "traces.jsonl").write_bytes(body)
        compiled = run_eval(folder, ["traces.jsonl", *SKIP, *DEEP, "--html", "report.html"])
        html = (folder / "report.html").read_bytes() if compiled.code in (0, 1) else b""
        fallback = run_eval(folder, ["traces.jsonl", *SKIP, *DEEP], python_path_only=True)
        strict = run_eval(folder, ["traces.jsonl", *DEEP])
    summaries = []
    for outcome in (compiled, fallback):
        summary = check_contract(outcome, name="traces.jsonl")
        assert summary is not None, f"skip mode refused a JSON Lines file: {outcome.err}"
        assert summary["read"] == records, (summary, records)
        summaries.append(summary)
    _same_counts(summaries[0], summaries[1])
    assert compiled.report is not None and fallback.report is not None
    assert compiled.report["metrics"] == pytest.approx(fallback.report["metrics"], nan_ok=True)
    assert compiled.report["segments"] == fallback.report["segments"]
    assert b"\x00" not in html, "raw NUL in the HTML report"
    assert compiled.code == fallback.code
    strict_summary = check_contract(strict, name="traces.jsonl")
    if summaries[0]["skipped"]["invalid"]:
        assert strict_summary is None, "fail mode passed over an invalid record"
    else:
        assert strict_summary is not None, f"fail mode refused a clean file: {strict.err}"
        _same_counts(strict_summary, summaries[0])


@fuzz
@given(json_arrays())
def test_json_arrays(case: tuple[bytes, int, bool]) -> None:
    body, elements, intact = case
    with _folder() as name:
        folder = Path(name)
        (folder / "traces.json").write_bytes(body)
        outcome = run_eval(folder, ["traces.json", *SKIP])
    summary = check_contract(outcome, name="traces.json")
    if summary is not None:
        assert intact, "a broken JSON array was read as if whole"
        assert summary["read"] == elements


@fuzz
@given(st.one_of(jsonl_files().map(lambda c: (c[0], c[1], "lines")),
                 json_arrays().map(lambda c: (c[0], c[1], "array" if c[2] else "broken"))),
       st.booleans())  # fmt: skip
def test_standard_input(case: tuple[bytes, int, str], packed: bool) -> None:
    body, records, shape = case
    data = gzip_bytes(body, "none") if packed else body
    with _folder() as name:
        outcome = run_eval(Path(name), ["-", *SKIP, "--per-query"], stdin=data)
    summary = check_contract(outcome, name="stdin")
    if summary is not None and shape != "broken":
        assert summary["read"] == records


@fuzz
@given(jsonl_files(), st.sampled_from(["none", "none", "truncated", "flipped", "trailing-garbage"]))
def test_gzip(case: tuple[bytes, int], damage: str) -> None:
    body, records = case
    with _folder() as name:
        folder = Path(name)
        (folder / "traces.jsonl.gz").write_bytes(gzip_bytes(body, damage))
        outcome = run_eval(folder, ["traces.jsonl.gz", *SKIP])
    summary = check_contract(outcome, name="traces.jsonl.gz")
    if damage == "none":
        assert summary is not None, f"skip mode refused an intact gzip file: {outcome.err}"
        assert summary["read"] == records
    elif damage in ("truncated", "flipped"):
        # Corrupt compressed data leaves no record to skip: the run must stop, not guess.
        assert summary is None, "a corrupt gzip file was read as if whole"


@fuzz
@given(st.sampled_from([(b",", "traces.csv"), (b"\t", "traces.tsv")]).flatmap(
    lambda d: st.tuples(st.just(d[1]), csv_files(d[0]))))  # fmt: skip
def test_csv_and_tsv(case: tuple[str, CsvCase]) -> None:
    filename, csv_case = case
    with _folder() as name:
        folder = Path(name)
        (folder / filename).write_bytes(csv_case.body)
        outcome = run_eval(folder, [filename, *SKIP])
    summary = check_contract(outcome, name=filename)
    if csv_case.duplicated:
        # Two columns of one name: which one holds the data is a guess, so the file is refused.
        assert summary is None, "a duplicated CSV column was read, the last one silently winning"
    if summary is not None and csv_case.exact:
        assert summary["read"] == csv_case.rows
        # A row with too few cells is a bad record, not an unlabeled one.
        assert summary["skipped"]["invalid"] >= csv_case.short_rows, summary


@fuzz
@given(parquet_tables())
def test_parquet(table: Any) -> None:
    with _folder() as name:
        folder = Path(name)
        pq.write_table(table, folder / "traces.parquet")
        outcome = run_eval(folder, ["traces.parquet", *SKIP])
    summary = check_contract(outcome, name="traces.parquet")
    if summary is not None:
        assert summary["read"] == table.num_rows


@fuzz
@given(trec_files(6), trec_files(4))
def test_trec_run_and_qrels(run: bytes, qrels: bytes) -> None:
    with _folder() as name:
        folder = Path(name)
        (folder / "run.txt").write_bytes(run)
        (folder / "qrels.txt").write_bytes(qrels)
        outcome = run_eval(folder, ["--run", "run.txt", "--qrels", "qrels.txt", *SKIP])
    check_contract(outcome)


@fuzz
@given(otlp_exports(), st.booleans())
def test_otlp_json(export: bytes, lines: bool) -> None:
    labels = "".join(
        json.dumps({"query_id": f"q{i}", "relevant_ids": ["d1"]}) + "\n" for i in range(4)
    )
    with _folder() as name:
        folder = Path(name)
        # One request per file, or one per line as the Collector's file exporter writes them.
        (folder / "export.json").write_bytes(export + b"\n" + export if lines else export)
        (folder / "labels.jsonl").write_text(labels, encoding="utf-8")
        outcome = run_eval(
            folder,
            ["export.json", "--input-format", "otlp", "--labels", "labels.jsonl", *SKIP],
        )
    check_contract(outcome, name="export.json")


@fuzz
@given(st.one_of(jsonl_files().map(lambda c: ("labels.jsonl", c[0])),
                 trec_files(4).map(lambda b: ("labels.qrels", b))))  # fmt: skip
def test_labels_file(case: tuple[str, bytes]) -> None:
    """Hostile labels joined to clean traces: the trace count is known whatever the labels say."""
    filename, body = case
    traces = [
        {key: value for key, value in ordinary_record(i).items() if key != "relevance_scores"}
        | {"query_id": query_id}
        for i, query_id in enumerate(["q1", "q2", "q3", "d1", ""])
    ]
    with _folder() as name:
        folder = Path(name)
        (folder / filename).write_bytes(body)
        (folder / "traces.jsonl").write_text(
            "".join(json.dumps(t) + "\n" for t in traces), encoding="utf-8"
        )
        outcome = run_eval(folder, ["traces.jsonl", "--labels", filename, *SKIP])
    summary = check_contract(outcome, name=filename)
    if summary is not None:
        assert summary["read"] == len(traces)


@fuzz
@given(jsonl_files())
def test_trace_store_round_trip(case: tuple[bytes, int]) -> None:
    """Hostile records recorded into a SQLite store with ``trace import``, then scored from it: the
    store is a reader too, and what went in must come out counted."""
    body, _ = case
    with _folder() as name:
        folder = Path(name)
        (folder / "traces.jsonl").write_bytes(body)
        stored = check_refusal_only(
            *run_rankgate(
                folder, ["trace", "import", "traces.jsonl", "--store", "sqlite:///s.db", *SKIP]
            )
        )
        if not stored:
            return
        with sqlite3.connect(folder / "s.db") as connection:
            (traces,) = connection.execute("SELECT COUNT(*) FROM rankgate_traces").fetchone()
        connection.close()
        outcome = run_eval(folder, ["sqlite:///s.db", *SKIP, "--per-query"])
    summary = check_contract(outcome, name="s.db")
    assert summary is not None, f"a store that trace import wrote cannot be read: {outcome.err}"
    assert summary["read"] == traces
