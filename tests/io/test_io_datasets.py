"""Many files as one input: several paths, globs, folders and hive-partitioned datasets on disk.

The reference for every report is the same traces as one JSON Lines file, read by the reader that
has its own tests; a window's reference is that file's records filtered here by their time. The
partition pruning is checked on what is opened: a file system that records every file it opens.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
from dataset_files import (
    DAYS,
    counting,
    dataset_records,
    day_of,
    parquet_table,
    write_hive_jsonl,
    write_hive_parquet,
    write_jsonl,
)

import rankgate.io.json_records as json_records
import rankgate.io.paths as paths_module
from rankgate import evaluate
from rankgate.cli import main
from rankgate.errors import InputError, UsageError
from rankgate.evaluate import Evaluation, Settings
from rankgate.io import ChainedSource, DatasetSource, TimeWindow, open_source
from rankgate.io.datasets import open_paths

METRICS = ["ndcg@10", "mrr", "p@5"]


def assert_same(got: Evaluation, expected: Evaluation) -> None:
    """The same report: counts, means, intervals and every query's values, in order."""
    assert got.summary.read == expected.summary.read
    assert got.summary.scored == expected.summary.scored
    assert got.summary.skipped == expected.summary.skipped
    assert list(got.query_ids) == list(expected.query_ids)
    assert {str(k): v for k, v in got.means.items()} == pytest.approx(
        {str(k): v for k, v in expected.means.items()}, rel=1e-12
    )
    for spec, bounds in expected.intervals.items():
        assert got.intervals[spec] == pytest.approx(bounds, rel=1e-12)
    for spec in expected.metrics:
        np.testing.assert_allclose(got.values[spec], expected.values[spec], rtol=1e-12)


@pytest.fixture
def records() -> list[dict[str, Any]]:
    return dataset_records()


@pytest.fixture
def layout(tmp_path: Path, records: list[dict[str, Any]]) -> dict[str, Any]:
    """The traces as one JSON Lines file, a Parquet dataset and a JSON Lines dataset."""
    return {
        "jsonl": write_jsonl(tmp_path / "all.jsonl", records),
        "parquet": write_hive_parquet(tmp_path / "pq", records),
        "json_days": write_hive_jsonl(tmp_path / "js", records),
        "root": tmp_path,
    }


def test_a_hive_parquet_dataset_gives_the_report_of_the_concatenated_jsonl(
    layout: dict[str, Any],
) -> None:
    expected = evaluate(layout["jsonl"], METRICS)
    assert expected.summary.read == len(DAYS) * 40  # the reference read everything
    source = open_source(str(layout["root"] / "pq"))
    assert isinstance(source, DatasetSource)  # scanned as one dataset, the columnar way
    assert "date" in source.schema().names  # the partition is a column, as in Spark
    assert_same(evaluate(source, METRICS), expected)


@pytest.mark.parametrize(
    "form",
    ["folder", "glob", "recursive glob", "several paths", "json folder", "mixed folder"],
)
def test_every_way_of_naming_the_files_gives_the_same_report(
    layout: dict[str, Any], form: str, tmp_path: Path, records: list[dict[str, Any]]
) -> None:
    root: Path = layout["root"]
    if form == "folder":
        data: Any = root / "pq"
    elif form == "glob":
        data = str(root / "pq" / "date=*" / "*.parquet")
    elif form == "recursive glob":
        data = str(root / "**" / "*.parquet")
    elif form == "several paths":
        data = [str(path) for path in layout["parquet"]]
    elif form == "json folder":
        data = str(root / "js")
    else:
        # Days 1-2 as JSON Lines, 3-5 as Parquet, in one folder: read file after file.
        mixed = tmp_path / "mixed"
        for day in DAYS:
            rows = [record for record in records if day_of(record) == day]
            if day <= DAYS[1]:
                write_jsonl(mixed / f"date={day}" / "part-0.jsonl", rows)
            else:
                (mixed / f"date={day}").mkdir(parents=True)
                pq.write_table(parquet_table(rows), mixed / f"date={day}" / "part-0.parquet")
        data = str(mixed)
    expected = evaluate(layout["jsonl"], METRICS)
    assert_same(evaluate(data, METRICS), expected)


@pytest.mark.parametrize("kind", ["pq", "js"])
def test_partitions_are_fields_to_segment_by(layout: dict[str, Any], kind: str) -> None:
    got = evaluate(layout["root"] / kind, METRICS, settings=Settings(segment_by=("date",)))
    assert sorted(group.key.value for group in got.segments if group.key) == list(DAYS)
    assert all(group.scored == 40 for group in got.segments)


def test_hidden_and_underscore_files_are_passed_over(layout: dict[str, Any]) -> None:
    root: Path = layout["root"] / "pq"
    (root / "_SUCCESS").write_text("")
    (root / ".part-0.parquet.crc").write_bytes(b"not parquet")
    (root / "_temporary").mkdir()
    (root / "_temporary" / "part-9.parquet").write_bytes(b"not parquet either")
    (root / "README.txt").write_text("not data")
    assert_same(evaluate(root, METRICS), evaluate(layout["jsonl"], METRICS))


# --- --since/--until: pruning by partition, filtering by time ----------------------------------


def expected_in_window(
    records: list[dict[str, Any]], since: datetime | None, until: datetime | None
) -> list[dict[str, Any]]:
    def inside(record: dict[str, Any]) -> bool:
        moment = datetime.fromisoformat(record["timestamp"].replace("Z", "+00:00"))
        return (since is None or moment >= since) and (until is None or moment < until)

    return [record for record in records if inside(record)]


@pytest.mark.parametrize("kind", ["parquet", "json"])
def test_since_opens_only_the_partitions_in_the_window(
    layout: dict[str, Any],
    records: list[dict[str, Any]],
    kind: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    filesystem, handler = counting(pafs.LocalFileSystem())
    # JSON Lines files are opened by their own reader: count those opens too.
    real_open = json_records.open_binary

    def counted_open(path: Any) -> Any:
        handler.opened.append(str(path))
        return real_open(path)

    monkeypatch.setattr(json_records, "open_binary", counted_open)
    since = datetime(2026, 12, 2, 5, tzinfo=UTC)
    until = datetime(2026, 12, 4, tzinfo=UTC)
    folder = layout["root"] / ("pq" if kind == "parquet" else "js")
    source = open_paths([str(folder)], window=TimeWindow(since, until), filesystem=filesystem)
    got = evaluate(source, METRICS)
    kept = expected_in_window(records, since, until)
    assert 0 < len(kept) < len(records)
    assert_same(got, evaluate(kept, METRICS))
    assert isinstance(source, DatasetSource if kind == "parquet" else ChainedSource)
    assert handler.opened  # the count is real
    assert {Path(path).parent.name for path in handler.opened} == {
        "date=2026-12-02",
        "date=2026-12-03",
    }


def test_since_on_the_command_line_reads_one_day_of_many(
    layout: dict[str, Any],
    records: list[dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    filesystem, handler = counting(pafs.LocalFileSystem())
    original = paths_module.filesystem_for

    def wrapped(spec: str) -> tuple[Any, str, bool]:
        _, path, local = original(spec)
        return filesystem, path, local

    monkeypatch.setattr(paths_module, "filesystem_for", wrapped)
    code, report, err = run(
        capsys,
        "eval",
        layout["root"] / "pq",
        "--since",
        "2026-12-03",
        "--until",
        "2026-12-04",
        *METRIC_ARGS,
    )
    assert code == 0, err
    assert {Path(path).parent.name for path in handler.opened} == {"date=2026-12-03"}
    day = [record for record in records if day_of(record) == "2026-12-03"]
    expected = evaluate(day, METRICS)
    assert report["summary"]["read"] == len(day)
    assert report["metrics"] == pytest.approx({str(k): v for k, v in expected.means.items()})


def test_a_time_column_without_partitions_filters_rows_by_row_group(
    tmp_path: Path, records: list[dict[str, Any]]
) -> None:
    path = tmp_path / "all.parquet"
    # Rows in time order, 40 per row group (one day): statistics let whole days be skipped.
    pq.write_table(parquet_table(records, pa.timestamp("us", "UTC")), path, row_group_size=40)
    since = datetime(2026, 12, 3, 12, tzinfo=UTC)
    source = open_paths([str(path)], window=TimeWindow(since=since))
    assert_same(
        evaluate(source, METRICS), evaluate(expected_in_window(records, since, None), METRICS)
    )
    # The filter the scan gets is on the typed column, so row-group statistics apply.
    fragment = next(iter(source._dataset.get_fragments()))
    kept = fragment.split_by_row_group(filter=source._row_filter)
    assert [group.row_groups[0].id for group in kept] == [2, 3, 4]


def test_a_time_as_text_is_read_as_a_time(tmp_path: Path, records: list[dict[str, Any]]) -> None:
    path = tmp_path / "all.parquet"
    pq.write_table(parquet_table(records), path)  # the time as ISO 8601 text
    until = datetime(2026, 12, 2, 6, tzinfo=UTC)
    got = evaluate(open_paths([str(path)], window=TimeWindow(until=until)), METRICS)
    assert_same(got, evaluate(expected_in_window(records, None, until), METRICS))


def test_partitions_alone_select_whole_days(tmp_path: Path, records: list[dict[str, Any]]) -> None:
    for record in records:
        record.pop("timestamp")
    for day in DAYS:
        rows = [record for record in records if record["query_id"].startswith(f"q{day[-2:]}")]
        path = tmp_path / "ds" / f"day={day}" / "part-0.parquet"
        path.parent.mkdir(parents=True)
        pq.write_table(pa.Table.from_pylist(rows), path)
    # 2026-12-02T05:00 to 2026-12-03T01:00 overlaps two days, which are read whole.
    window = TimeWindow(datetime(2026, 12, 2, 5, tzinfo=UTC), datetime(2026, 12, 3, 1, tzinfo=UTC))
    got = evaluate(open_paths([str(tmp_path / "ds")], window=window), METRICS)
    assert got.summary.read == 80


def test_records_outside_the_window_are_not_read_and_counts_still_add_up(
    tmp_path: Path, records: list[dict[str, Any]]
) -> None:
    # A JSON Lines file without partitions: records are selected by their own time.
    path = write_jsonl(tmp_path / "all.jsonl", records)
    since = datetime(2026, 12, 5, tzinfo=UTC)
    got = evaluate(open_paths([str(path)], window=TimeWindow(since=since)), METRICS)
    assert got.summary.read == 40
    assert got.summary.scored + sum(got.summary.skipped.values()) == got.summary.read


def test_an_unreadable_time_is_the_records_problem_with_file_and_line(tmp_path: Path) -> None:
    rows = dataset_records()[:3]
    rows[1]["timestamp"] = "yesterday"
    path = write_jsonl(tmp_path / "days" / "part-0.jsonl", rows)
    with pytest.raises(InputError) as caught:
        evaluate(
            open_paths(
                [str(tmp_path / "days")], window=TimeWindow(since=datetime(2026, 1, 1, tzinfo=UTC))
            ),
            METRICS,
        )
    message = str(caught.value)
    assert message.startswith(f"{tmp_path / 'days'}/part-0.jsonl:2: field 'timestamp'")
    assert path.name in message


# --- locations, the command line, compare ------------------------------------------------------


def test_a_bad_row_in_a_dataset_is_located_in_its_own_file(
    tmp_path: Path, records: list[dict[str, Any]]
) -> None:
    write_hive_parquet(tmp_path / "ds", records)
    bad = tmp_path / "ds" / "date=2026-12-03" / "part-0.parquet"
    table = pq.read_table(bad)
    ids = table.column("retrieved_ids").to_pylist()
    ids[6] = None
    pq.write_table(table.set_column(1, "retrieved_ids", pa.array(ids, pa.list_(pa.string()))), bad)
    with pytest.raises(InputError) as caught:
        evaluate(tmp_path / "ds", METRICS)
    assert str(caught.value).startswith(f"{bad} row 7: field 'retrieved_ids'")
    skipped = evaluate(tmp_path / "ds", METRICS, settings=Settings(on_invalid="skip"))
    assert skipped.summary.skipped["invalid"] == 1
    assert skipped.summary.scored + sum(skipped.summary.skipped.values()) == len(records)


def test_an_error_in_a_json_file_of_a_folder_names_the_file_and_line(tmp_path: Path) -> None:
    rows = dataset_records()[:5]
    write_jsonl(tmp_path / "days" / "a.jsonl", rows)
    broken = tmp_path / "days" / "b.jsonl"
    broken.write_text(json.dumps(rows[0]) + "\n{not json\n", encoding="utf-8")
    with pytest.raises(InputError) as caught:
        evaluate(tmp_path / "days", METRICS)
    assert str(caught.value).startswith(f"{tmp_path / 'days'}/b.jsonl:2:")


METRIC_ARGS = ("-m", "ndcg@10", "-m", "mrr", "-m", "p@5", "--format", "json", "--no-progress")


def run(capsys: pytest.CaptureFixture[str], *args: object) -> tuple[int, Any, str]:
    capsys.readouterr()
    try:
        code = main([str(arg) for arg in args])
    except SystemExit as stop:
        code = int(stop.code or 0)
    captured = capsys.readouterr()
    report = json.loads(captured.out) if code in (0, 1) and captured.out.strip() else None
    return code, report, captured.err


def test_the_command_line_takes_several_paths_globs_and_folders(
    layout: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    root: Path = layout["root"]
    code, reference, err = run(capsys, "eval", layout["jsonl"], *METRIC_ARGS)
    assert code == 0, err
    days = [str(path) for path in layout["json_days"]]
    for given in (
        days,  # several positional paths are one input
        [str(root / "pq")],
        [str(root / "pq" / "*" / "*.parquet")],
        [str(root / "js"), *map(str, layout["parquet"][:0])],
    ):
        code, report, err = run(capsys, "eval", *given, *METRIC_ARGS)
        assert code == 0, err
        assert report["summary"] == reference["summary"]
        assert report["metrics"] == pytest.approx(reference["metrics"], rel=1e-12)
        assert report["sources"] == given


def test_compare_takes_a_dataset_or_glob_per_side_and_a_window(
    layout: dict[str, Any], records: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    root: Path = layout["root"]
    glob = str(root / "js" / "*" / "*.jsonl")
    for window, count in (((), len(records)), (("--since", "2026-12-04"), 80)):
        code, report, err = run(
            capsys,
            "compare",
            root / "pq",
            glob,
            "-m",
            "mrr",
            *window,
            "--format",
            "json",
            "--no-progress",
        )
        assert code == 0, err
        assert report["read"] == {str(root / "pq"): count, glob: count}
        (cell,) = report["cells"]
        assert (cell["queries"], cell["ties"], cell["delta"]) == (count, count, 0.0)


# --- errors: one line, exit 2, no traceback ----------------------------------------------------


def usage_error(capsys: pytest.CaptureFixture[str], *args: object) -> str:
    code, _, err = run(capsys, "eval", *args, "-m", "mrr", "--no-progress")
    assert code == 2
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("rankgate: error: ")
    return err


def test_one_line_errors_for_what_names_no_data(
    tmp_path: Path, layout: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("no traces here")
    assert "no file matches" in usage_error(capsys, str(tmp_path / "nothing" / "*.parquet"))
    assert "no file matches" in usage_error(capsys, str(layout["root"] / "pq" / "*.csv"))
    assert "is a folder without trace files" in usage_error(capsys, tmp_path / "empty")
    assert "no such file or folder" in usage_error(capsys, layout["jsonl"], tmp_path / "gone.jsonl")
    assert "cannot be read together" in usage_error(capsys, layout["jsonl"], "-")


def test_an_empty_window_says_so(
    layout: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    err = usage_error(capsys, layout["root"] / "pq", "--since", "2027-01-01")
    assert "nothing to read at or after 2027-01-01T00:00:00Z" in err
    assert "partitions run from 2026-12-01 to 2026-12-05" in err
    # Without partitions the emptiness shows only once read: a zero report, and a note that says why.
    code, report, err = run(capsys, "eval", layout["jsonl"], "--since", "2027-01-01", *METRIC_ARGS)
    assert code == 0
    assert report["summary"]["read"] == 0
    assert "no traces recorded in the --since/--until window" in err


def test_a_window_needs_a_time_to_select_by(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "plain.parquet"
    pq.write_table(pa.table({"query_id": ["q"], "retrieved_ids": [["a"]]}), path)
    err = usage_error(capsys, path, "--since", "2026-12-01")
    assert "no 'timestamp' column and no date=YYYY-MM-DD partition" in err
    untimed = tmp_path / "untimed.jsonl"
    untimed.write_text('{"query_id": "q", "retrieved_ids": ["a"]}\n', encoding="utf-8")
    err = usage_error(capsys, untimed, "--since", "2026-12-01")
    assert "no record has a 'timestamp' field and the file has no date=YYYY-MM-DD" in err
    bad = tmp_path / "ds" / "date=yesterday" / "p.parquet"
    bad.parent.mkdir(parents=True)
    pq.write_table(pa.table({"query_id": ["q"], "retrieved_ids": [["a"]]}), bad)
    assert "partition date=yesterday is not a YYYY-MM-DD date" in usage_error(
        capsys, tmp_path / "ds", "--since", "2026-12-01"
    )


def test_files_that_disagree_on_a_column_type_are_refused(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    pq.write_table(
        pa.table({"query_id": ["q"], "retrieved_ids": [["a"]]}), tmp_path / "a" / "1.parquet"
    )
    pq.write_table(
        pa.table({"query_id": [1], "retrieved_ids": [["a"]]}), tmp_path / "a" / "2.parquet"
    )
    with pytest.raises(InputError, match="disagree on a column's type"):
        open_source(tmp_path / "a")


def test_store_options_other_than_the_window_still_need_a_store(
    layout: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    assert "--variant applies only to a trace store URL" in usage_error(
        capsys, layout["root"] / "pq", "--variant", "a"
    )


def test_a_window_on_records_in_memory_is_refused() -> None:
    with pytest.raises(UsageError, match="--since/--until select among files"):
        open_source([{"query_id": "q"}], window=TimeWindow(since=datetime(2026, 1, 1, tzinfo=UTC)))
