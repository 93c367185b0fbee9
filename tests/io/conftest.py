"""One logical trace dataset, and builders that write it in every input format rankgate reads.

Everything is handed to tests as fixtures (test modules never import this file):

* ``records`` / ``expected_traces``: the dataset and, written out by hand, the traces it must give;
* ``write_as(fmt, records)``: the records written in one format, with the expected locations;
* ``fmt`` / ``text_fmt`` / ``table_fmt``: parametrized format names.
"""

from __future__ import annotations

import copy
import csv
import gzip
import io
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.json as pa_json
import pyarrow.parquet as pq
import pytest

BOM = b"\xef\xbb\xbf"

# The logical dataset. Every record has query_type, so table formats (where every column exists in
# every row) and JSON (where absent keys are absent) agree on the attributes too.
RECORDS: list[dict[str, Any]] = [
    {
        "query_id": "q-17",
        "retrieved_ids": ["d3", "d9", "d1"],
        "relevant_ids": ["d1", "d4"],
        "relevance_scores": {"d1": 3, "d4": 1, "d9": 0},
        "query_type": "factual",
    },
    {
        "query_id": "q-ünï",
        "retrieved_ids": ["文档-1", "café", "🦀-doc", "d4"],
        "relevance_scores": {"café": 2, "🦀-doc": 1},
        "query_type": "navigational",
    },
    {
        "query_id": "q-empty",
        "retrieved_ids": [],
        "relevant_ids": ["d2"],
        "query_type": "factual",
    },
    {
        "query_id": "q-unlabeled",
        "retrieved_ids": ["d5", "d6"],
        "query_type": "multi_hop",
    },
    {
        # no query_id: named by its position
        "retrieved_ids": ["d7", "d8"],
        "relevant_ids": ["d8"],
        "query_type": "troubleshooting",
    },
    {
        "query_id": "q-zero",
        "retrieved_ids": ["d1"],
        "relevant_ids": [],
        "relevance_scores": {"d1": 0},
        "query_type": "factual",
    },
]

# What validate_record must make of RECORDS, written out by hand:
# (query_id, retrieved_ids, grades, attributes)
EXPECTED_TRACES: list[tuple[str, list[str], dict[str, float] | None, dict[str, Any]]] = [
    ("q-17", ["d3", "d9", "d1"], {"d1": 3.0, "d4": 1.0, "d9": 0.0}, {"query_type": "factual"}),
    (
        "q-ünï",
        ["文档-1", "café", "🦀-doc", "d4"],
        {"café": 2.0, "🦀-doc": 1.0},
        {"query_type": "navigational"},
    ),
    ("q-empty", [], {"d2": 1.0}, {"query_type": "factual"}),
    ("q-unlabeled", ["d5", "d6"], None, {"query_type": "multi_hop"}),
    ("#5", ["d7", "d8"], {"d8": 1.0}, {"query_type": "troubleshooting"}),
    ("q-zero", ["d1"], {"d1": 0.0}, {"query_type": "factual"}),
]

TEXT_FORMATS = (
    "jsonl",
    "jsonl-bom",
    "jsonl-blank-lines",
    "jsonl.gz",
    "gzip-no-suffix",
    "json-array",
    "stdin",
    "stdin-gzip",
    "csv",
    "csv-bom",
    "tsv",
)
TABLE_FORMATS = (
    "parquet-map",
    "parquet-struct",
    "parquet-json-text",
    "records",
    "arrow",
    "pandas",
    "polars",
)
ALL_FORMATS = TEXT_FORMATS + TABLE_FORMATS


@dataclass
class Built:
    """A source in one format: what to pass to ``open_source``/``evaluate``, and where each
    record is expected to be located (``str(Location)``), in record order."""

    source: Any
    locations: list[str]


# ---------------------------------------------------------------------------------------------
# Writers


def jsonl_text(records: Sequence[Any]) -> str:
    return "".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records)


def json_array_text(records: Sequence[Any]) -> tuple[str, list[int]]:
    """A pretty-printed JSON array, and the line on which each element starts."""
    lines = ["["]
    starts = []
    for i, record in enumerate(records):
        starts.append(len(lines) + 1)
        element = json.dumps(record, ensure_ascii=False, indent=2)
        element_lines = ["  " + line for line in element.split("\n")]
        if i < len(records) - 1:
            element_lines[-1] += ","
        lines.extend(element_lines)
    lines.append("]")
    return "\n".join(lines) + "\n", starts


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, (list, dict)):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def delimited_text(records: Sequence[dict[str, Any]], delimiter: str) -> str:
    columns = list(dict.fromkeys(key for record in records for key in record))
    out = io.StringIO()
    writer = csv.writer(out, delimiter=delimiter, lineterminator="\n")
    writer.writerow(columns)
    for record in records:
        writer.writerow([_cell(record.get(column)) for column in columns])
    return out.getvalue()


def _with_map_scores(table: pa.Table) -> pa.Table:
    index = table.schema.get_field_index("relevance_scores")
    scores = table.column(index).to_pylist()
    as_map = pa.array(scores, type=pa.map_(pa.string(), pa.int64()))
    return table.set_column(index, "relevance_scores", as_map)


def _with_json_text_scores(table: pa.Table) -> pa.Table:
    index = table.schema.get_field_index("relevance_scores")
    texts = [
        None if value is None else json.dumps(value, ensure_ascii=False)
        for value in table.column(index).to_pylist()
    ]
    return table.set_column(index, "relevance_scores", pa.array(texts, type=pa.string()))


class _FakeStdin:
    def __init__(self, data: bytes) -> None:
        self.buffer = io.BytesIO(data)


@pytest.fixture
def write_as(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., Built]:
    """``write_as(fmt, records)``: the records in format ``fmt``, with expected locations."""

    def build(fmt: str, records: Sequence[dict[str, Any]] = RECORDS) -> Built:
        n = len(records)
        rows = list(range(1, n + 1))
        if fmt == "records":
            return Built(list(records), [f"<records> row {r}" for r in rows])
        if fmt in ("jsonl", "jsonl-bom", "jsonl.gz", "gzip-no-suffix"):
            data = jsonl_text(records).encode("utf-8")
            name = {"jsonl.gz": "traces.jsonl.gz", "gzip-no-suffix": "traces-export"}.get(
                fmt, "traces.jsonl"
            )
            if fmt == "jsonl-bom":
                data = BOM + data
            if fmt in ("jsonl.gz", "gzip-no-suffix"):
                data = gzip.compress(data)
            path = tmp_path / name
            path.write_bytes(data)
            return Built(str(path), [f"{path}:{r}" for r in rows])
        if fmt == "jsonl-blank-lines":
            # blank and whitespace-only lines before, between and after records
            path = tmp_path / "traces.jsonl"
            lines = ["", "   "]
            locations = []
            for record in records:
                lines.append(json.dumps(record, ensure_ascii=False))
                locations.append(f"{path}:{len(lines)}")
                lines.append("")
            path.write_text("\n".join(lines) + "\n\n", encoding="utf-8")
            return Built(str(path), locations)
        if fmt == "json-array":
            text, starts = json_array_text(records)
            path = tmp_path / "traces.json"
            path.write_text(text, encoding="utf-8")
            return Built(str(path), [f"{path}:{line}" for line in starts])
        if fmt in ("stdin", "stdin-gzip"):
            data = jsonl_text(records).encode("utf-8")
            if fmt == "stdin-gzip":
                data = gzip.compress(data)
            monkeypatch.setattr(sys, "stdin", _FakeStdin(data))
            return Built("-", [f"<stdin>:{r}" for r in rows])
        if fmt in ("csv", "csv-bom", "tsv"):
            delimiter = "\t" if fmt == "tsv" else ","
            path = tmp_path / ("traces.tsv" if fmt == "tsv" else "traces.csv")
            data = delimited_text(records, delimiter).encode("utf-8")
            path.write_bytes((BOM if fmt == "csv-bom" else b"") + data)
            return Built(str(path), [f"{path}:{r + 1}" for r in rows])
        if fmt.startswith("parquet-"):
            path = tmp_path / "traces.parquet"
            if fmt == "parquet-struct":
                # exactly as pyarrow guesses from JSON: a struct with one field per document seen
                # anywhere, null where a record lacks that key
                jsonl = tmp_path / "for-pyarrow.jsonl"
                jsonl.write_text(jsonl_text(records), encoding="utf-8")
                table = pa_json.read_json(jsonl)
                assert pa.types.is_struct(table.schema.field("relevance_scores").type)
            else:
                table = pa.Table.from_pylist(list(records))
                if fmt == "parquet-map":
                    table = _with_map_scores(table)
                else:
                    table = _with_json_text_scores(table)
            pq.write_table(table, path)
            return Built(str(path), [f"{path} row {r}" for r in rows])
        if fmt == "arrow":
            return Built(pa.Table.from_pylist(list(records)), [f"<Table> row {r}" for r in rows])
        if fmt == "pandas":
            import pandas as pd

            return Built(pd.DataFrame(list(records)), [f"<DataFrame> row {r}" for r in rows])
        if fmt == "polars":
            import polars as pl

            return Built(pl.DataFrame(list(records)), [f"<DataFrame> row {r}" for r in rows])
        raise AssertionError(f"unknown test format {fmt!r}")

    return build


@pytest.fixture
def records() -> list[dict[str, Any]]:
    return copy.deepcopy(RECORDS)


@pytest.fixture
def expected_traces() -> list[tuple[str, list[str], dict[str, float] | None, dict[str, Any]]]:
    return copy.deepcopy(EXPECTED_TRACES)


@pytest.fixture(params=ALL_FORMATS)
def fmt(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=TEXT_FORMATS)
def text_fmt(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=TABLE_FORMATS)
def table_fmt(request: pytest.FixtureRequest) -> str:
    return str(request.param)
