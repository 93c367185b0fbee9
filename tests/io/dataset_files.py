"""Trace datasets written several ways, and a file system that records what is opened.

Shared by ``test_io_datasets.py`` (local disk) and ``test_io_s3.py`` (a local S3 server):

* ``dataset_records()``: traces spread over five days, each with its ``timestamp``;
* ``write_jsonl`` / ``write_hive_parquet`` / ``write_hive_jsonl``: the same traces as one JSON Lines
  file, and as ``date=YYYY-MM-DD/part-0.*`` folders;
* ``CountingHandler``: a pyarrow file system that passes every call to another and remembers the
  paths it opened for reading.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

DAYS = ("2026-12-01", "2026-12-02", "2026-12-03", "2026-12-04", "2026-12-05")
PER_DAY = 40


def dataset_records(seed: int = 7) -> list[dict[str, Any]]:
    """Traces of five days, one per query; hours run 00..23 then again."""
    rng = random.Random(seed)
    records = []
    for day in DAYS:
        for index in range(PER_DAY):
            ids = list(dict.fromkeys(f"d{rng.randint(0, 30)}" for _ in range(10)))
            grades = {f"d{j}": rng.randint(0, 3) for j in rng.sample(range(30), 6)}
            records.append(
                {
                    "query_id": f"q{day[-2:]}-{index}",
                    "retrieved_ids": ids,
                    "relevance_scores": grades,
                    "timestamp": f"{day}T{index % 24:02d}:30:00.000000Z",
                }
            )
    return records


def day_of(record: dict[str, Any]) -> str:
    return str(record["timestamp"][:10])


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
    return path


def parquet_table(records: list[dict[str, Any]], timestamp_type: Any = None) -> Any:
    """The records as an Arrow table with map grades; the time as text, or of ``timestamp_type``."""
    times: Any = [record["timestamp"] for record in records]
    if timestamp_type is not None:
        times = pa.array(times).cast(timestamp_type)
    return pa.table(
        {
            "query_id": [record["query_id"] for record in records],
            "retrieved_ids": [record["retrieved_ids"] for record in records],
            "relevance_scores": pa.array(
                [list(record["relevance_scores"].items()) for record in records],
                pa.map_(pa.string(), pa.int64()),
            ),
            "timestamp": times,
        }
    )


def write_hive_parquet(
    root: Path, records: list[dict[str, Any]], key: str = "date", timestamp_type: Any = None
) -> list[Path]:
    written = []
    for day in DAYS:
        rows = [record for record in records if day_of(record) == day]
        path = root / f"{key}={day}" / "part-0.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(parquet_table(rows, timestamp_type), path)
        written.append(path)
    return written


def write_hive_jsonl(root: Path, records: list[dict[str, Any]]) -> list[Path]:
    return [
        write_jsonl(
            root / f"date={day}" / "part-0.jsonl",
            [record for record in records if day_of(record) == day],
        )
        for day in DAYS
    ]


class CountingHandler(pafs.FileSystemHandler):
    """Every call passed to ``inner``; the paths opened for reading are kept in ``opened``."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.opened: list[str] = []

    def get_type_name(self) -> str:
        return "counting"

    def equals(self, other: Any) -> bool:
        return self is other

    def normalize_path(self, path: str) -> str:
        return str(self.inner.normalize_path(path))

    def get_file_info(self, paths: list[str]) -> Any:
        return self.inner.get_file_info(paths)

    def get_file_info_selector(self, selector: Any) -> Any:
        return self.inner.get_file_info(selector)

    def open_input_stream(self, path: str) -> Any:
        self.opened.append(path)
        return self.inner.open_input_stream(path)

    def open_input_file(self, path: str) -> Any:
        self.opened.append(path)
        return self.inner.open_input_file(path)

    def _refused(self, *args: Any) -> Any:
        raise OSError("read-only in tests")

    create_dir = delete_dir = delete_dir_contents = delete_root_dir_contents = _refused
    delete_file = move = copy_file = open_output_stream = open_append_stream = _refused


def counting(inner: Any) -> tuple[Any, CountingHandler]:
    handler = CountingHandler(inner)
    return pafs.PyFileSystem(handler), handler
