"""A fixed catalogue of hostile records, one hostility per line, through every reader at once.

The generated suites find combinations; this one makes sure each known hostility is tried on every
run, not only when the generator happens to draw it. Under ``--on-invalid skip`` a bad record is
skipped on its own, so the whole catalogue fits in one file per reader, and the report must count
every line: read = the number of records, = scored + skipped.
"""

from __future__ import annotations

import gzip
import json
import math
import sqlite3
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from adversarial_helpers import check_contract, check_refusal_only, run_eval, run_rankgate

GOOD = b'{"query_id":"good-%d","retrieved_ids":["d1","d2"],"relevant_ids":["d2"],"query_type":"a"}'


def _record(fields: bytes) -> bytes:
    return b'{"retrieved_ids":["d1","d2"],"relevant_ids":["d1"],' + fields + b"}"


CATALOGUE: dict[str, bytes] = {
    "deep-ranking": b'{"query_id":"q","retrieved_ids":' + b"[" * 1500 + b"]" * 1500 + b"}",
    "deep-grades": b'{"query_id":"q","retrieved_ids":["a"],"relevance_scores":{"a":'
    + b'{"x":' * 1500
    + b"1"
    + b"}" * 1500
    + b"}}",
    "just-past-depth": b'{"query_id":"q","retrieved_ids":' + b"[" * 70 + b"]" * 70 + b"}",
    "surrogate-query": _record(b'"query_id":"x\\ud800"'),
    "surrogate-doc": b'{"query_id":"s2","retrieved_ids":["a\\udfff","d1"],"relevant_ids":["d1"]}',
    "surrogate-segment": _record(b'"query_id":"s3","query_type":"\\ud800"'),
    "surrogate-grade-key": b'{"query_id":"s4","retrieved_ids":["d1"],"relevance_scores":{"\\udc00":1,"d1":1}}',
    "cesu-bytes": _record(b'"query_id":"x\xed\xa0\x80y"'),
    "nul-escaped": _record(b'"query_id":"n\\u0000ul","query_type":"\\u0000"'),
    "nul-raw-in-string": _record(b'"query_id":"n\x00ul"'),
    "nul-raw-outside": b"\x00" + _record(b'"query_id":"n3"'),
    "bom-mid-file": b"\xef\xbb\xbf" + _record(b'"query_id":"bom"'),
    "crlf": _record(b'"query_id":"crlf"') + b"\r",
    "bare-cr-whitespace": b"{\r" + _record(b'"query_id":"cr"')[1:],
    "line-separator": _record('"query_id":"ls\u2028x","query_type":"p\u2029"'.encode()),
    "invalid-utf8": _record(b'"query_id":"bad\xffbyte"'),
    "overlong-utf8": _record(b'"query_id":"\xc0\xaf"'),
    "truncated": b'{"query_id":"t","retrieved_ids":["a"',
    "nan-grade": b'{"query_id":"g1","retrieved_ids":["d1"],"relevance_scores":{"d1":NaN}}',
    "inf-grade": b'{"query_id":"g2","retrieved_ids":["d1"],"relevance_scores":{"d1":Infinity}}',
    "1e400-grade": b'{"query_id":"g3","retrieved_ids":["d1"],"relevance_scores":{"d1":1e400}}',
    "5000-digit-grade": b'{"query_id":"g4","retrieved_ids":["d1"],"relevance_scores":{"d1":1'
    + b"0" * 5000
    + b"}}",
    "2-to-62-grade": b'{"query_id":"g5","retrieved_ids":["d1"],"relevance_scores":{"d1":4611686018427387904}}',
    "2-to-64-grade": b'{"query_id":"g6","retrieved_ids":["d1"],"relevance_scores":{"d1":18446744073709551616}}',
    "negative-grade": b'{"query_id":"g7","retrieved_ids":["d1"],"relevance_scores":{"d1":-1}}',
    "text-grade": b'{"query_id":"g8","retrieved_ids":["d1"],"relevance_scores":{"d1":"2"}}',
    "bool-grade": b'{"query_id":"g9","retrieved_ids":["d1"],"relevance_scores":{"d1":true}}',
    "null-grade": b'{"query_id":"g10","retrieved_ids":["d1"],"relevance_scores":{"d1":null}}',
    "duplicate-field": b'{"query_id":"k1","retrieved_ids":["d1"],"retrieved_ids":"x","relevant_ids":["d1"]}',
    "duplicate-grade-key": b'{"query_id":"k2","retrieved_ids":["d1"],"relevance_scores":{"d1":1,"d1":3}}',
    "empty-query-id": _record(b'"query_id":""'),
    "empty-doc-id": b'{"query_id":"e2","retrieved_ids":["","d1"],"relevant_ids":[""]}',
    "huge-query-id": _record(b'"query_id":"' + b"q" * 9000 + b'"'),
    "huge-doc-id": b'{"query_id":"h2","retrieved_ids":["'
    + b"d" * 9000
    + b'"],"relevant_ids":["d1"]}',
    "huge-segment": _record(b'"query_id":"h3","query_type":"' + b"s" * 70_000 + b'"'),
    "duplicate-ids": b'{"query_id":"u1","retrieved_ids":["d1","d1","d2","d1"],"relevant_ids":["d2"]}',
    "ranking-string": b'{"query_id":"w1","retrieved_ids":"d1,d2","relevant_ids":["d1"]}',
    "ranking-number": b'{"query_id":"w2","retrieved_ids":7,"relevant_ids":["d1"]}',
    "ranking-null": b'{"query_id":"w3","retrieved_ids":null,"relevant_ids":["d1"]}',
    "ranking-object": b'{"query_id":"w4","retrieved_ids":{"d1":1},"relevant_ids":["d1"]}',
    "nested-relevant": b'{"query_id":"w5","retrieved_ids":["d1"],"relevant_ids":[["d1"]]}',
    "numeric-ids": b'{"query_id":17,"retrieved_ids":[17,"17",1.5,-0.0],"relevant_ids":[17]}',
    "1e400-id": b'{"query_id":"i2","retrieved_ids":[1e400],"relevant_ids":["d1"]}',
    "5000-digit-id": b'{"query_id":"i3","retrieved_ids":[1'
    + b"0" * 5000
    + b'],"relevant_ids":["d1"]}',
    "2-to-70-id": b'{"query_id":1180591620717411303424,"retrieved_ids":["d1"],"relevant_ids":["d1"]}',
    "bidi": _record('"query_id":"\u202eevil","query_type":"\u2066x"'.encode()),
    "top-level-array": b'[{"query_id":"x","retrieved_ids":[]}]',
    "top-level-number": b"42",
    "top-level-string": b'"record"',
    "top-level-null": b"null",
    "nested-input": b'{"input":{"query_id":"in1","retrieved_ids":["d1"],"relevant_ids":["d1"]}}',
    "trailing-garbage": _record(b'"query_id":"tg"') + b" }x",
    "two-objects": _record(b'"query_id":"two1"') + _record(b'"query_id":"two2"'),
    "sql-text": _record(b'"query_id":"\'; DROP TABLE rankgate_traces; --"'),
}

LINES = [GOOD % 1, *CATALOGUE.values(), GOOD % 2]
JSONL = b"\n".join(LINES) + b"\n"


def _strict_json(line: bytes) -> Any:
    """The line as JSON exactly as the standard has it (no NaN), or None."""

    def refuse(name: str) -> Any:
        raise ValueError(name)

    try:
        return json.loads(line.decode("utf-8"), parse_constant=refuse)
    except (ValueError, RecursionError):
        return None


def _expect_all_read(outcome: Any, name: str, count: int) -> dict[str, Any]:
    summary = check_contract(outcome, name=name)
    assert summary is not None, f"skip mode refused the whole file: {outcome.err[-2000:]}"
    assert summary["read"] == count, (summary, count)
    assert summary["scored"] >= 2, summary  # the two good records at least
    return summary


@pytest.mark.parametrize("python_path_only", [False, True], ids=["compiled", "python"])
def test_catalogue_as_json_lines(tmp_path: Path, python_path_only: bool) -> None:
    (tmp_path / "traces.jsonl").write_bytes(JSONL)
    outcome = run_eval(
        tmp_path,
        ["traces.jsonl", "--on-invalid", "skip", "--segment-by", "query_type", "--per-query"],
        python_path_only=python_path_only,
    )
    _expect_all_read(outcome, "traces.jsonl", len(LINES))


def test_both_json_lines_readers_agree_on_the_catalogue(tmp_path: Path) -> None:
    (tmp_path / "traces.jsonl").write_bytes(JSONL)
    args = ["traces.jsonl", "--on-invalid", "skip", "--per-query"]
    compiled = run_eval(tmp_path, args, report_name="compiled.json")
    python = run_eval(tmp_path, args, python_path_only=True, report_name="python.json")
    assert compiled.report is not None and python.report is not None
    assert compiled.report["summary"] == python.report["summary"]


@pytest.mark.parametrize("name", list(CATALOGUE), ids=list(CATALOGUE))
def test_each_bad_line_stops_a_failing_run_in_one_located_line(tmp_path: Path, name: str) -> None:
    """Without skip, each hostility alone: exit 0 with a report if it is a valid record, else exit
    2 with one line naming the file."""
    (tmp_path / "one.jsonl").write_bytes(GOOD % 1 + b"\n" + CATALOGUE[name] + b"\n")
    outcome = run_eval(tmp_path, ["one.jsonl"])
    summary = check_contract(outcome, name="one.jsonl")
    if summary is not None:
        assert summary["read"] == 2
        assert summary["skipped"]["invalid"] == 0


def test_catalogue_on_standard_input(tmp_path: Path) -> None:
    outcome = run_eval(tmp_path, ["-", "--on-invalid", "skip", "--per-query"], stdin=JSONL)
    _expect_all_read(outcome, "stdin", len(LINES))


def test_catalogue_gzipped(tmp_path: Path) -> None:
    (tmp_path / "traces.jsonl.gz").write_bytes(gzip.compress(JSONL))
    outcome = run_eval(tmp_path, ["traces.jsonl.gz", "--on-invalid", "skip"])
    _expect_all_read(outcome, "traces.jsonl.gz", len(LINES))


def test_catalogue_as_a_json_array(tmp_path: Path) -> None:
    """The lines that are standard JSON, as one array: each element is one record."""
    elements = [line for line in LINES if _strict_json(line) is not None]
    (tmp_path / "traces.json").write_bytes(b"[\n" + b",\n".join(elements) + b"\n]")
    outcome = run_eval(tmp_path, ["traces.json", "--on-invalid", "skip", "--per-query"])
    _expect_all_read(outcome, "traces.json", len(elements))


def _csv_cell(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return '"' + text.replace('"', '""') + '"'


def test_catalogue_as_csv(tmp_path: Path) -> None:
    columns = ["query_id", "retrieved_ids", "relevant_ids", "relevance_scores", "query_type"]
    rows = [",".join(columns)]
    for line in LINES:
        record = _strict_json(line)
        if not isinstance(record, dict):
            continue
        cells = ["" if c not in record else _csv_cell(record[c]) for c in columns]
        rows.append(",".join(cells))
    body = ("\n".join(rows) + "\n").encode("utf-8", "backslashreplace")
    (tmp_path / "traces.csv").write_bytes(body)
    outcome = run_eval(tmp_path, ["traces.csv", "--on-invalid", "skip", "--per-query"])
    summary = check_contract(outcome, name="traces.csv")
    if summary is not None:
        assert summary["read"] == len(rows) - 1


def test_catalogue_through_a_trace_store(tmp_path: Path) -> None:
    (tmp_path / "traces.jsonl").write_bytes(JSONL)
    imported = run_rankgate(
        tmp_path,
        ["trace", "import", "traces.jsonl", "--store", "sqlite:///s.db", "--on-invalid", "skip"],
    )
    assert check_refusal_only(*imported), "trace import refused a file that skip mode can read"
    with sqlite3.connect(tmp_path / "s.db") as connection:
        (stored,) = connection.execute("SELECT COUNT(*) FROM rankgate_traces").fetchone()
    connection.close()
    assert stored >= 2
    outcome = run_eval(tmp_path, ["sqlite:///s.db", "--on-invalid", "skip", "--per-query"])
    summary = check_contract(outcome, name="s.db")
    assert summary is not None, outcome.err
    assert summary["read"] == stored


def test_catalogue_as_labels(tmp_path: Path) -> None:
    """The catalogue as a --labels file for clean traces: the trace count is what must be read."""
    traces = [
        {"query_id": q, "retrieved_ids": ["d1", "d2"]}
        for q in ["good-1", "good-2", "q", "s2", "g1", "k1", "17", "in1"]
    ]
    (tmp_path / "traces.jsonl").write_text(
        "".join(json.dumps(t) + "\n" for t in traces), encoding="utf-8"
    )
    (tmp_path / "labels.jsonl").write_bytes(JSONL)
    outcome = run_eval(
        tmp_path, ["traces.jsonl", "--labels", "labels.jsonl", "--on-invalid", "skip"]
    )
    summary = check_contract(outcome, name="labels.jsonl")
    if summary is not None:
        assert summary["read"] == len(traces)


# --- Parquet: the same hostilities in typed columns --------------------------------------------


def _unchecked_strings(values: list[bytes | None]) -> pa.Array:
    """A string column holding these bytes as they are, UTF-8 or not: pyarrow builds it from a
    binary column without validating, as a writer in another language may."""
    return pa.array(values, type=pa.binary()).view(pa.string())


def _hostile_parquet_rows() -> pa.Table:
    ids: list[list[str | None] | None] = [
        ["d1", "d2"], ["d1"], None, [], ["d1", None], ["d1", "d1", "d2", "d1"], ["d" * 9000],
        ["d1"], ["d1"], ["d1"], ["d1"], ["d1"], ["", "d1"], ["n\x00ul"], ["\u202eevil"],
        ["d1"], ["d1"], ["d1"], ["d1", "d2"],
    ]  # fmt: skip
    grades: list[list[tuple[str, float]] | None] = [
        [("d2", 1.0)], [("d1", 1.0)], [("d1", 1.0)], [("d1", 1.0)], [("d1", 1.0)],
        [("d2", 1.0)], [("d1", 1.0)], [("d1", math.nan)], [("d1", math.inf)], [("d1", -1.0)],
        [("d1", float(2**62))], None, [("", 1.0)], [("n\x00ul", 1.0)], [("\u202eevil", 1.0)],
        [("d1", 1.0)], [("d1", 1.0)], [("d1", 1.0)], [("d2", 2.0)],
    ]  # fmt: skip
    count = len(ids)
    query_ids: list[bytes | None] = [f"p{i}".encode() for i in range(count)]
    query_ids[1] = None
    query_ids[15] = b"bad\xffutf8"
    segments: list[bytes | None] = [b"a"] * count
    segments[16] = b"\xc3"
    segments[17] = b"\xed\xa0\x80"  # a surrogate, CESU-encoded
    # One ranking whose ID is not UTF-8 either.
    ranking_values = _unchecked_strings([b"d1", b"\xff\xfe", b"d2"])
    bad_ranking = pa.ListArray.from_arrays(pa.array([0, 3], pa.int32()), ranking_values)
    retrieved = pa.concat_arrays(
        [pa.array(ids[:17], pa.list_(pa.string())), bad_ranking,
         pa.array(ids[18:], pa.list_(pa.string()))]
    )  # fmt: skip
    return pa.table(
        {
            "query_id": _unchecked_strings(query_ids),
            "retrieved_ids": retrieved,
            "relevance_scores": pa.array(grades, pa.map_(pa.string(), pa.float64())),
            "query_type": _unchecked_strings(segments),
        }
    )


def _int_grade_rows() -> pa.Table:
    grades = [[("d1", 1)], [("d1", 2**62)], [("d1", 2**63 - 1)], [("d1", -1)], [("d1", 0)]]
    return pa.table(
        {
            "query_id": [f"i{i}" for i in range(len(grades))],
            "retrieved_ids": [["d1"]] * len(grades),
            "relevance_scores": pa.array(grades, pa.map_(pa.string(), pa.int64())),
            "query_type": ["a"] * len(grades),
        }
    )


@pytest.mark.parametrize("build", [_hostile_parquet_rows, _int_grade_rows], ids=["rows", "int64"])
def test_catalogue_as_parquet(tmp_path: Path, build: Any) -> None:
    table = build()
    pq.write_table(table, tmp_path / "traces.parquet")
    outcome = run_eval(
        tmp_path,
        ["traces.parquet", "--on-invalid", "skip", "--segment-by", "query_type", "--per-query"],
    )
    summary = check_contract(outcome, name="traces.parquet")
    if summary is not None:
        assert summary["read"] == table.num_rows


def test_catalogue_through_compare(tmp_path: Path) -> None:
    """``compare`` pairs by query ID, so hostile IDs meet its pairing code too. Its counts must add
    up the same way: every record read is paired, on one side only, or invalid; every pair scored
    or skipped."""
    (tmp_path / "baseline.jsonl").write_bytes(JSONL)
    (tmp_path / "candidate.jsonl").write_bytes(b"\n".join(reversed(LINES)) + b"\n")
    full, proc = run_rankgate(
        tmp_path,
        [
            "compare", "baseline.jsonl", "candidate.jsonl", "--on-invalid", "skip",
            "--segment-by", "query_type",
            "--no-config", "--format", "json", "-o", "compare.json",
        ],
    )  # fmt: skip
    err = proc.stderr.decode("utf-8", "replace")
    where = f"rankgate {' '.join(full)}\nstderr:\n{err[-3000:]}"
    assert proc.returncode in (0, 1), f"exit {proc.returncode}: {where}"
    assert "Traceback" not in err, where
    report = json.loads((tmp_path / "compare.json").read_text(encoding="utf-8"))
    assert sorted(report["read"].values()) == [len(LINES), len(LINES)], report["read"]
    for result in report["results"]:
        pairing = result["pairing"]
        assert pairing["paired"] == result["scored"] + sum(result["skipped"].values()), result
    for source, read in report["read"].items():
        invalid = report["invalid"].get(source, 0)
        assert invalid <= read
