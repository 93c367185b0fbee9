"""The bounds of io/limits.py, through every reader: a record past one is a located InputError
naming the field (or skipped with that reason under on_invalid="skip"), and a record exactly at one
is read as usual.

The compiled JSON Lines scanner has the bounds compiled in, so the JSON Lines cases use the real
numbers; the other readers read the bound when they run, so some cases lower it to stay small.
"""

from __future__ import annotations

import csv
import gzip
import json
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import rankgate
from rankgate.errors import InputError, Location
from rankgate.io import (
    FieldMap,
    RawRecord,
    TrecSource,
    jsonl_arrow,
    limits,
    open_source,
    validate_record,
)
from rankgate.io.otlp import OtlpSource
from rankgate.io.trec import read_qrels

FILE_FORMATS = ["jsonl", "json", "csv", "parquet"]
MEMORY_FORMATS = ["records", "arrow", "pandas"]
ALL_FORMATS = FILE_FORMATS + MEMORY_FORMATS


def write(fmt: str, records: list[dict[str, Any]], folder: Path) -> Any:
    """The records as ``fmt``: a path for a file format, the object itself for the others."""
    if fmt == "jsonl":
        path = folder / "t.jsonl"
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
        return path
    if fmt == "json":
        path = folder / "t.json"
        path.write_text("[\n" + ",\n".join(json.dumps(r) for r in records) + "\n]\n")
        return path
    columns = sorted({key for record in records for key in record})
    if fmt == "csv":
        path = folder / "t.csv"
        with path.open("w", newline="", encoding="utf-8") as out:
            writer = csv.writer(out)
            writer.writerow(columns)
            for record in records:
                writer.writerow(
                    [
                        json.dumps(v) if isinstance(v, (list, dict)) else ("" if v is None else v)
                        for v in (record.get(c) for c in columns)
                    ]
                )
        return path
    if fmt == "records":
        return records
    table = _table(records, columns)
    if fmt == "parquet":
        path = folder / "t.parquet"
        pq.write_table(table, path)
        return path
    if fmt == "arrow":
        return table
    if fmt == "pandas":
        return pd.DataFrame(records)
    raise AssertionError(fmt)


def _table(records: list[dict[str, Any]], columns: list[str]) -> pa.Table:
    kinds = {
        "retrieved_ids": pa.list_(pa.string()),
        "relevant_ids": pa.list_(pa.string()),
        "relevance_scores": pa.map_(pa.string(), pa.float64()),
    }
    arrays = {}
    for name in columns:
        values = [r.get(name) for r in records]
        if name == "relevance_scores":
            values = [None if v is None else list(v.items()) for v in values]
        arrays[name] = pa.array(values, kinds.get(name, pa.string()))
    return pa.table(arrays)


def line_of(fmt: str, index: int) -> str:
    """Where record ``index`` (0-based) of ``write`` is located, as text after the source name."""
    if fmt == "jsonl":
        return f":{index + 1}"
    if fmt in ("json", "csv"):
        return f":{index + 2}"
    return f" row {index + 1}"


def refusal(data: Any, segment_by: tuple[str, ...] = ()) -> InputError:
    settings = rankgate.Settings(segment_by=segment_by)
    with pytest.raises(InputError) as caught:
        rankgate.evaluate(data, ["mrr"], settings=settings)
    assert "\n" not in str(caught.value)
    return caught.value


def ok(**fields: Any) -> dict[str, Any]:
    return {"query_id": "q0", "retrieved_ids": ["a", "b"], "relevant_ids": ["b"], **fields}


# ---------------------------------------------------------------------------------------------
# Bytes of one ID


@pytest.mark.parametrize("fmt", ALL_FORMATS)
@pytest.mark.parametrize(
    ("field", "make"),
    [
        ("retrieved_ids[1]", lambda long: {"retrieved_ids": ["a", long]}),
        ("relevant_ids[0]", lambda long: {"relevant_ids": [long]}),
        ("relevance_scores", lambda long: {"relevance_scores": {long: 1.0}}),
        ("query_id", lambda long: {"query_id": long}),
    ],
)
def test_an_id_past_the_byte_limit(tmp_path: Path, fmt: str, field: str, make: Any) -> None:
    long = "é" * (limits.MAX_ID_BYTES // 2) + "x"  # 2 bytes a character: one byte too many
    at_limit = "é" * (limits.MAX_ID_BYTES // 2)
    good = rankgate.evaluate(write(fmt, [ok(**make(at_limit))], tmp_path), ["mrr"])
    assert good.summary.read == 1
    data = write(fmt, [ok(), ok(**make(long))], tmp_path)
    error = refusal(data)
    assert str(error.location).endswith(line_of(fmt, 1))
    assert error.field == field
    assert f"ID is {limits.MAX_ID_BYTES + 1:,} bytes, more than the limit of 8 KiB" in error.problem


# ---------------------------------------------------------------------------------------------
# IDs per ranking and labels per query


def test_jsonl_ranking_of_a_million_and_one_ids(tmp_path: Path) -> None:
    ids = [f"{n:x}" for n in range(limits.MAX_IDS_PER_RANKING + 1)]
    path = write("jsonl", [ok(retrieved_ids=ids[:-1]), ok(retrieved_ids=ids)], tmp_path)
    error = refusal(path)
    assert (str(error.location), error.field) == (f"{path}:2", "retrieved_ids")
    assert error.problem == "holds 1,000,001 IDs, more than the limit of 1,000,000"


def test_jsonl_labels_of_a_million_and_one(tmp_path: Path) -> None:
    half = limits.MAX_LABELS_PER_QUERY // 2
    relevant = [f"r{n}" for n in range(half)]
    scores = {f"s{n}": 1 for n in range(half + 1)}
    path = write("jsonl", [ok(relevant_ids=relevant, relevance_scores=scores)], tmp_path)
    error = refusal(path)
    assert (str(error.location), error.field) == (f"{path}:1", "relevance_scores")
    assert error.problem.startswith("query holds 1,000,001 labels")


@pytest.mark.parametrize("fmt", [f for f in ALL_FORMATS if f != "jsonl"])
def test_counts_past_a_lowered_limit(
    tmp_path: Path, fmt: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(limits, "MAX_IDS_PER_RANKING", 3)
    monkeypatch.setattr(limits, "MAX_LABELS_PER_QUERY", 2)
    at_limits = ok(retrieved_ids=["a", "b", "c"], relevant_ids=["a"], relevance_scores={"b": 2})
    assert rankgate.evaluate(write(fmt, [at_limits], tmp_path), ["mrr"]).summary.read == 1
    error = refusal(write(fmt, [ok(), ok(retrieved_ids=["a", "b", "c", "d"])], tmp_path))
    assert str(error.location).endswith(line_of(fmt, 1))
    assert (error.field, error.problem) == (
        "retrieved_ids",
        "holds 4 IDs, more than the limit of 3",
    )
    error = refusal(write(fmt, [ok(relevant_ids=["a", "b"], relevance_scores={"c": 1})], tmp_path))
    assert error.field == "relevance_scores"
    assert error.problem.startswith("query holds 3 labels")


# ---------------------------------------------------------------------------------------------
# Text values and nesting


@pytest.mark.parametrize("fmt", ["csv", "parquet", "arrow", "pandas"])
def test_table_cells_are_not_held_to_the_text_bound(tmp_path: Path, fmt: str) -> None:
    # A columnar read never looks at columns it does not need, so tables are bounded by their
    # record size (CSV) or their own typed columns, on every path alike.
    long = "x" * (limits.MAX_TEXT_BYTES + 1)
    data = write(fmt, [ok(notes=long, query_type=long)], tmp_path)
    settings = rankgate.Settings(segment_by=("query_type",))
    assert rankgate.evaluate(data, ["mrr"], settings=settings).summary.read == 1
    with_labels = rankgate.evaluate(data, ["mrr"], labels={}, worst=1)
    assert with_labels.summary.read == 1


@pytest.mark.parametrize("fmt", ["jsonl", "json", "records"])
def test_a_text_value_past_the_limit(tmp_path: Path, fmt: str) -> None:
    long = "x" * (limits.MAX_TEXT_BYTES + 1)
    at_limit = "x" * limits.MAX_TEXT_BYTES
    assert rankgate.evaluate(write(fmt, [ok(notes=at_limit)], tmp_path), ["mrr"]).summary.read == 1
    error = refusal(write(fmt, [ok(notes=""), ok(notes=long)], tmp_path), segment_by=("notes",))
    assert str(error.location).endswith(line_of(fmt, 1))
    assert error.field == "notes"
    assert (
        error.problem
        == f"text is {limits.MAX_TEXT_BYTES + 1:,} bytes, more than the limit of 1 MiB"
    )


@pytest.mark.parametrize("fmt", ["jsonl", "json", "records"])
def test_nesting_at_and_past_the_limit(tmp_path: Path, fmt: str) -> None:
    def nested(levels: int) -> Any:
        value: Any = 0
        for _ in range(levels):
            value = [value]
        return value

    depth = limits.MAX_NESTING_DEPTH
    assert (
        rankgate.evaluate(write(fmt, [ok(x=nested(depth - 1))], tmp_path), ["mrr"]).summary.read
        == 1
    )
    error = refusal(write(fmt, [ok(), ok(x=nested(depth))], tmp_path))
    assert str(error.location).endswith(line_of(fmt, 1))
    assert error.problem.startswith("nested deeper than 64 levels")


def test_validator_measures_depth_iteratively() -> None:
    value: Any = {}
    for _ in range(100_000):  # far past Python's recursion limit
        value = {"x": value}
    with pytest.raises(InputError, match="nested deeper than 64"):
        validate_record(RawRecord(Location("<records>", row=1), value, 1), FieldMap())


def test_csv_cell_holding_deep_json(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text('retrieved_ids\n"' + "[" * 5000 + "]" * 5000 + '"\n')
    error = refusal(path)
    assert (str(error.location), error.field) == (f"{path}:2", "retrieved_ids")
    assert error.problem.startswith("nested deeper than 64 levels")


# ---------------------------------------------------------------------------------------------
# Bytes of one record


@pytest.fixture
def small_records(monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(limits, "MAX_RECORD_BYTES", 1000)
    return 1000


@pytest.mark.parametrize("compressed", [False, True])
@pytest.mark.parametrize("columnar", [True, False])
def test_jsonl_record_past_a_lowered_limit_is_skipped_with_the_reason(
    tmp_path: Path, small_records: int, compressed: bool, columnar: bool
) -> None:
    lines = [
        json.dumps(ok(query_id="q1")),
        json.dumps(ok(query_id="q2", pad="x" * small_records)),
        json.dumps(ok(query_id="q3")),
    ]
    data = ("\n".join(lines) + "\n").encode()
    path = tmp_path / "t.jsonl"
    path.write_bytes(gzip.compress(data) if compressed else data)
    error = refusal(path)
    assert (str(error.location), error.problem) == (
        f"{path}:2",
        "record is longer than 1,000 bytes (the limit on one record)",
    )
    # Labels kept apart (none here) send every record down the validator's path.
    labels = None if columnar else {}
    evaluation = rankgate.evaluate(
        path, ["mrr"], settings=rankgate.Settings(on_invalid="skip"), labels=labels
    )
    assert evaluation.summary.read == 3
    assert evaluation.query_ids == ("q1", "q3")


def test_jsonl_line_longer_than_a_chunk_and_the_limit(
    tmp_path: Path, small_records: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rankgate.io import columnar

    monkeypatch.setattr(columnar, "CHUNK_BYTES", 64)  # the long line spans many reads
    path = tmp_path / "t.jsonl"
    path.write_text(
        json.dumps(ok(query_id="q1"))
        + "\n"
        + json.dumps(ok(query_id="q2", pad="x" * 5000))
        + "\n"
        + json.dumps(ok(query_id="q3"))
        + "\n"
        + json.dumps(ok(query_id="q4"))
        + "\n"
    )
    evaluation = rankgate.evaluate(path, ["mrr"], settings=rankgate.Settings(on_invalid="skip"))
    assert (evaluation.summary.read, evaluation.query_ids) == (4, ("q1", "q3", "q4"))
    error = refusal(path)
    assert str(error.location) == f"{path}:2"


def test_json_array_element_past_a_lowered_limit(tmp_path: Path, small_records: int) -> None:
    path = write("json", [ok(), ok(pad="x" * small_records)], tmp_path)
    error = refusal(path)
    assert str(error.location) == f"{path}:3"
    assert "longer than 1,000 bytes" in error.problem


def test_json_array_is_read_in_blocks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rankgate.io import json_records

    monkeypatch.setattr(json_records, "_ARRAY_BLOCK", 7)  # elements and numbers split across reads
    records = [
        {"query_id": f"q{n}", "retrieved_ids": [123456789, "é"], "n": 1234567} for n in range(20)
    ]
    path = tmp_path / "t.json"
    path.write_text(
        "[\n" + ",\n".join(json.dumps(r, ensure_ascii=False) for r in records) + "\n]\n"
    )
    traces = [validate_record(raw, FieldMap()) for raw in open_source(path)]
    assert [t.retrieved_ids for t in traces] == [["123456789", "é"]] * 20
    assert [t.attributes["n"] for t in traces] == [1234567] * 20
    assert [t.location.line for t in traces] == list(range(2, 22))


def test_csv_row_past_a_lowered_limit(tmp_path: Path, small_records: int) -> None:
    path = write("csv", [ok(), ok(pad="x" * small_records)], tmp_path)
    error = refusal(path)
    assert str(error.location) == f"{path}:3"
    assert error.problem == "record is longer than 1,000 bytes (the limit on one record)"


def test_csv_row_spanning_lines_counts_them_all(tmp_path: Path, small_records: int) -> None:
    path = tmp_path / "t.csv"
    path.write_text('query_id,retrieved_ids\nq1,"[' + '""a"",\n' * 200 + '""b""]"\n')
    error = refusal(path)
    assert str(error.location) == f"{path}:2"


def test_otlp_request_past_a_lowered_limit(tmp_path: Path, small_records: int) -> None:
    path = tmp_path / "export.json"
    export = {"resourceSpans": [{"resource": {"attributes": []}, "pad": "x" * 2000}]}
    path.write_text(json.dumps(export, indent=2))
    with pytest.raises(InputError, match=r"export.json:1: OTLP request is longer than 1,000 bytes"):
        list(OtlpSource(path))
    path.write_text(json.dumps(export) + "\n")
    with pytest.raises(InputError, match=r"export.json:1: OTLP request is longer"):
        list(OtlpSource(path))


def test_otlp_request_nested_too_deep(tmp_path: Path) -> None:
    def kvlists(levels: int) -> str:
        opening = '{"kvlistValue": {"values": [{"key": "k", "value": ' * levels
        return opening + '{"stringValue": "x"}' + "}]}}" * levels

    for levels in (20, 2000):  # past the limit, and past Python's own recursion limit
        attribute = '{"key": "a", "value": ' + kvlists(levels) + "}"
        path = tmp_path / "export.jsonl"
        path.write_text('{"resourceSpans": [{"resource": {"attributes": [' + attribute + "]}}]}\n")
        with pytest.raises(InputError, match=r"export.jsonl:1: nested deeper than 64 levels"):
            list(OtlpSource(path))


# ---------------------------------------------------------------------------------------------
# TREC files


def test_trec_line_past_a_lowered_limit(tmp_path: Path, small_records: int) -> None:
    qrels = tmp_path / "x.qrels"
    qrels.write_text("q1 0 a 1\nq1 0 " + "b" * 2000 + " 1\n")
    with pytest.raises(InputError, match=r"x.qrels:2: record is longer"):
        read_qrels(qrels)


def test_qrels_limits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    qrels = tmp_path / "x.qrels"
    qrels.write_text("q1 0 " + "d" * (limits.MAX_ID_BYTES + 1) + " 1\n")
    with pytest.raises(InputError) as caught:
        read_qrels(qrels)
    assert (str(caught.value.location), caught.value.field) == (f"{qrels}:1", "docno")
    monkeypatch.setattr(limits, "MAX_LABELS_PER_QUERY", 2)
    qrels.write_text("q1 0 a 1\nq1 0 b 1\nq1 0 a 2\nq2 0 a 1\nq1 0 c 1\n")
    with pytest.raises(InputError) as caught:
        read_qrels(qrels)
    assert str(caught.value.location) == f"{qrels}:5"


def test_trec_run_ranking_past_a_lowered_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(limits, "MAX_IDS_PER_RANKING", 2)
    run = tmp_path / "x.run"
    run.write_text("q1 Q0 a 1 3 t\nq1 Q0 b 2 2 t\nq2 Q0 a 1 3 t\nq2 Q0 b 2 2 t\nq2 Q0 c 3 1 t\n")
    qrels = tmp_path / "x.qrels"
    qrels.write_text("q1 0 a 1\n")
    error = refusal(TrecSource(run, qrels))
    assert (str(error.location), error.field) == (f"{run}:3", "retrieved_ids")


# ---------------------------------------------------------------------------------------------
# The compiled scanner carries the same numbers


@pytest.mark.skipif(not jsonl_arrow.available(), reason="rankgate._jsonl is not built")
def test_compiled_limits_equal_the_documented_ones() -> None:
    import rankgate._jsonl as compiled

    for name in (
        "MAX_NESTING_DEPTH",
        "MAX_IDS_PER_RANKING",
        "MAX_LABELS_PER_QUERY",
        "MAX_ID_BYTES",
        "MAX_TEXT_BYTES",
    ):
        assert getattr(compiled, name) == getattr(limits, name), name
