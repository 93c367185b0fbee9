"""Many files read as one input: several paths, globs, folders, hive-partitioned Parquet datasets,
and the same on object storage (``s3://``, ``gs://``).

What the user names is first *resolved* into data files (``io/paths.py``: a file system, a path
on it, the name reports show, its format and the ``key=value`` folders above it), then *selected*
by the ``--since/--until`` window, and only then opened:

* Parquet files become one ``DatasetSource``, a ``pyarrow.dataset`` scan that is an
  ``ArrowSource``, so the columnar path reads it exactly as it reads one Parquet file. A window
  becomes a filter pushed into the scan, which skips row groups by their statistics.
* Other files (JSON Lines, JSON arrays, CSV) keep their own readers, chained one after the other
  (``ChainedSource``), so every error still names the file and line it comes from.

A window prunes by a date partition (``date=``, ``day=`` or ``dt=``, valued ``YYYY-MM-DD``) before
any file is opened: files of other days are never read. Within the files kept, a trace's time is
its ``timestamp`` field (the field the trace store writes each trace's time into); a trace without
one is dated by its partition's day, and one with neither is outside every window.

Credentials for object storage come from the environment and the usual configuration files, read
by pyarrow's file systems; a URL that carries credentials is shown with them masked, everywhere.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

from rankgate.errors import InputError, UsageError
from rankgate.io.json_records import JsonSource
from rankgate.io.paths import DATE_PARTITIONS, DataFile, filesystem_for, resolve, shown
from rankgate.io.source import TraceSource, data_suffix, file_size
from rankgate.io.tables import BATCH_ROWS, ArrowSource, CsvSource
from rankgate.io.validate import RawRecord

__all__ = [
    "DATE_PARTITIONS",
    "TIME_FIELD",
    "ChainedSource",
    "DataFile",
    "DatasetSource",
    "TimeWindow",
    "WindowedSource",
    "WithPartitions",
    "filesystem_for",
    "open_paths",
    "resolve",
    "shown",
]  # the resolution names are re-exported from io/paths.py for one import site

# The trace field that holds when a trace was recorded: the trace store writes its recorded_at here.
TIME_FIELD = "timestamp"


@dataclass(frozen=True, slots=True)
class TimeWindow:
    """Traces recorded at or after ``since`` and before ``until`` (either may be open; a naive
    datetime is UTC), by their ``time_field``."""

    since: datetime | None = None
    until: datetime | None = None
    time_field: str = TIME_FIELD

    def __post_init__(self) -> None:
        # A time without a zone is taken as UTC, as rankgate reads every time.
        for name in ("since", "until"):
            moment = getattr(self, name)
            if moment is not None and moment.tzinfo is None:
                object.__setattr__(self, name, moment.replace(tzinfo=UTC))
        if self.since is not None and self.until is not None and self.since >= self.until:
            raise UsageError("--since must be before --until")

    @property
    def active(self) -> bool:
        return self.since is not None or self.until is not None

    def holds_day(self, day: date) -> bool:
        """Whether a day (UTC midnight to midnight) overlaps the window."""
        start = datetime(day.year, day.month, day.day, tzinfo=UTC)
        if self.since is not None and start + timedelta(days=1) <= self.since:
            return False
        return self.until is None or start < self.until

    def holds(self, moment: datetime) -> bool:
        if self.since is not None and moment < self.since:
            return False
        return self.until is None or moment < self.until

    def describe(self) -> str:
        def text(moment: datetime) -> str:
            return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

        if self.since is not None and self.until is not None:
            return f"between {text(self.since)} and {text(self.until)}"
        if self.since is not None:
            return f"at or after {text(self.since)}"
        assert self.until is not None
        return f"before {text(self.until)}"


# --------------------------------------------------------------------------------------------
# Opening what was resolved


def open_paths(
    specs: Sequence[str | Path],
    input_format: str | None = None,
    *,
    window: TimeWindow | None = None,
    filesystem: Any = None,
) -> TraceSource:
    """One trace source for files, folders, globs and object-storage URLs read as one input.

    Parquet files are scanned together as one dataset (hive partitions become columns); other files
    are read one after another by their own readers. ``window`` keeps only the traces recorded in
    it, without opening files of days outside it. An empty selection is a ``UsageError``.
    """
    if input_format == "otlp":
        raise UsageError("--input-format otlp reads one export file or folder; give one path")
    window = window if window is not None and window.active else None
    files = resolve(specs, input_format, filesystem)
    name = ", ".join(shown(str(spec)) for spec in specs)
    if window is not None:
        files = _in_window(files, window, name)
    parquet = [item for item in files if item.format == "parquet"]
    others = [item for item in files if item.format != "parquet"]
    sources: list[TraceSource] = []
    if parquet and not others and len({id(item.filesystem) for item in parquet}) == 1:
        return DatasetSource(name if len(parquet) > 1 else parquet[0].name, parquet, window)
    for item in files:
        sources.append(_single(item, window))
    return sources[0] if len(sources) == 1 else ChainedSource(name, sources)


def _in_window(files: list[DataFile], window: TimeWindow, name: str) -> list[DataFile]:
    days = [item.day() for item in files]
    kept = [
        item for item, day in zip(files, days, strict=True) if day is None or window.holds_day(day)
    ]
    if not kept:
        known = sorted(day for day in days if day is not None)
        raise UsageError(
            f"{name}: nothing to read {window.describe()}: no partition falls in that window "
            f"(partitions run from {known[0]} to {known[-1]})"
        )
    return kept


def _single(item: DataFile, window: TimeWindow | None) -> TraceSource:
    """The reader of one file; with a window, only its traces recorded in it."""
    if item.format == "parquet":
        return DatasetSource(item.name, [item], window)
    if item.format == "otlp":
        raise UsageError("--input-format otlp reads one export file or folder; give one path")
    source: TraceSource
    if item.format in ("csv", "tsv"):
        if not item.local:
            raise UsageError(
                f"{item.name}: CSV and TSV are read from local files only; use Parquet or JSON "
                "Lines on object storage"
            )
        path = Path(item.path)
        source = CsvSource(path, "\t" if item.format == "tsv" else ",", file_size(path))
        source.name = item.name
    elif item.local:
        path = Path(item.path)
        source = JsonSource.from_path(path, file_size(path))
        source.name = item.name
    else:
        source = _remote_json(item)
    if item.partitions:
        source = WithPartitions(source, item.partitions)
    if window is None:
        return source
    return WindowedSource(source, window, item.day() is not None)


def _remote_json(item: DataFile) -> JsonSource:
    from rankgate.io.json_records import LINES_SUFFIXES

    def open_raw() -> Any:
        try:
            return item.filesystem.open_input_stream(item.path, compression=None)
        except (OSError, ValueError) as problem:
            raise InputError(item.name, None, f"cannot read ({problem})") from None

    try:
        total = item.filesystem.get_file_info(item.path).size
    except (OSError, ValueError):
        total = None
    lines_only = data_suffix(Path(item.path)) in LINES_SUFFIXES
    source = JsonSource(item.name, open_raw, total, lines_only=lines_only)
    source.rereadable = True
    return source


# --------------------------------------------------------------------------------------------
# Parquet files as one dataset


class DatasetSource(ArrowSource):
    """Parquet files scanned as one ``pyarrow.dataset``, with a window pushed into the scan.

    Batches are those of the whole selection, in file order; rows to explain are read back from
    their own file, and located there (``traces/date=2026-12-01/part-0.parquet row 17``).
    """

    def __init__(self, name: str, files: list[DataFile], window: TimeWindow | None) -> None:
        import pyarrow as pa
        import pyarrow.dataset as ds

        self.files = files
        self.window = window
        filesystem = files[0].filesystem
        self._remote = not files[0].local
        options = ds.ParquetFragmentScanOptions(pre_buffer=self._remote)
        self._format = ds.ParquetFileFormat(default_fragment_scan_options=options)
        try:
            discovered = ds.dataset(
                [item.path for item in files],
                filesystem=filesystem,
                format=self._format,
                partitioning=ds.HivePartitioning.discover(infer_dictionary=False),
            )
            fragments = list(discovered.get_fragments())
            # Every file's own columns, not only the first file's: a column added later counts.
            physical = [
                _footer_schema(fragment, item)
                for fragment, item in zip(fragments, files, strict=True)
            ]
            partition_fields = [
                discovered.schema.field(key)
                for key in dict.fromkeys(k for item in files for k in item.partitions)
                if key in discovered.schema.names
            ]
            schema = pa.unify_schemas([*physical, pa.schema(partition_fields)])
        except pa.ArrowTypeError as problem:
            raise InputError(
                name, None, f"the files disagree on a column's type ({problem})"
            ) from None
        except (OSError, pa.ArrowInvalid) as problem:
            raise _read_problem(files[0].name, problem) from None
        self._dataset = ds.FileSystemDataset(fragments, schema, self._format, filesystem)
        self._fragment_list = fragments
        self._names = [item.name for item in files]
        self._index = {fragment.path: number for number, fragment in enumerate(fragments)}
        self._row_filter = None if window is None else _row_filter(window, schema, files, name)
        total: int | None = None
        if self._row_filter is None:
            total = sum(fragment.metadata.num_rows for fragment in fragments)
        super().__init__(name, total=total)
        # Where each file's rows start among the rows ``batches`` has passed on.
        self._starts: list[tuple[int, int]] = []

    def schema(self) -> Any:
        return self._dataset.schema

    def batches(self, rows: int = BATCH_ROWS, columns: list[str] | None = None) -> Iterator[Any]:
        import pyarrow as pa

        scanner = self._dataset.scanner(
            columns=columns,
            filter=self._row_filter,
            batch_size=rows,
            batch_readahead=1,
            fragment_readahead=1 if not self._remote else 4,
        )
        tagged = scanner.scan_batches()
        self._starts = []
        done = 0
        current = -1
        while True:
            try:
                item = next(tagged, None)
            except (OSError, pa.ArrowException) as problem:
                where = self._names[current] if current >= 0 else self.name
                raise _read_problem(where, problem, self._row_filter is not None) from None
            if item is None:
                return
            number = self._index[item.fragment.path]
            if number != current:
                current = number
                self._starts.append((done, number))
            batch = item.record_batch
            if batch.num_rows == 0:
                continue
            done += batch.num_rows
            self._rows_done = done
            yield batch

    def reread(self, rows: Any, prepare: Callable[[Any], Any] | None = None) -> list[RawRecord]:
        """The records at these 0-based positions among the rows ``batches`` passed on, each read
        back from its own file and located at its row there."""
        import numpy as np

        positions = np.asarray(rows, dtype=np.int64)
        starts = np.asarray([start for start, _ in self._starts], dtype=np.int64)
        owners = np.searchsorted(starts, positions, side="right") - 1
        records: list[RawRecord | None] = [None] * len(positions)
        for owner in np.unique(owners).tolist():
            members = np.flatnonzero(owners == owner)
            start, number = self._starts[owner]
            local = positions[members] - start
            for slot, record in zip(
                members.tolist(), self._file_records(number, local, prepare), strict=True
            ):
                records[slot] = replace(record, ordinal=int(positions[slot]) + 1)
        return [record for record in records if record is not None]

    def _file_records(
        self, number: int, local: Any, prepare: Callable[[Any], Any] | None
    ) -> list[RawRecord]:
        """Rows of one file at these positions among its rows in the window."""
        import pyarrow as pa

        fragment = self._fragments()[number]
        try:
            table = fragment.to_table(schema=self._dataset.schema)
        except (OSError, pa.ArrowException) as problem:
            raise _read_problem(self._names[number], problem) from None
        in_file = _in_file_rows(table, self._row_filter)
        if prepare is not None:
            table = prepare(table)
        reader = ArrowSource.table(self._names[number], table)
        return reader.reread(in_file[local])

    def _fragments(self) -> list[Any]:
        return self._fragment_list

    def __iter__(self) -> Iterator[RawRecord]:
        import pyarrow as pa

        ordinal = 0
        for number, fragment in enumerate(self._fragments()):
            try:
                table = fragment.to_table(schema=self._dataset.schema)
            except (OSError, pa.ArrowException) as problem:
                raise _read_problem(self._names[number], problem) from None
            in_file = _in_file_rows(table, self._row_filter)
            for record in ArrowSource.table(self._names[number], table).reread(in_file):
                ordinal += 1
                self._rows_done = ordinal
                yield replace(record, ordinal=ordinal)


def _footer_schema(fragment: Any, item: DataFile) -> Any:
    import pyarrow as pa

    try:
        return fragment.physical_schema
    except (OSError, pa.ArrowInvalid) as problem:
        raise _read_problem(item.name, problem) from None


def _in_file_rows(table: Any, row_filter: Any) -> Any:
    """0-based numbers, in the file, of the rows the window keeps."""
    import numpy as np
    import pyarrow as pa

    numbers = np.arange(table.num_rows, dtype=np.int64)
    if row_filter is None:
        return numbers
    marker = "__rankgate_row__"
    kept = table.append_column(marker, pa.array(numbers)).filter(row_filter)
    return kept.column(marker).to_numpy()


def _read_problem(name: str, problem: BaseException, windowed: bool = False) -> InputError:
    from rankgate.store.urls import describe_error

    text = describe_error(problem)
    if windowed and ("cast" in text.lower() or "timestamp" in text.lower()):
        return InputError(
            name,
            TIME_FIELD,
            f"cannot read as an ISO 8601 time to select by --since/--until ({text})",
        )
    return InputError(name, None, f"cannot read Parquet data ({text})")


def _row_filter(window: TimeWindow, schema: Any, files: list[DataFile], name: str) -> Any:
    """The scan filter of a window: on the time column when there is one (row groups outside
    the window are skipped by their statistics), with rows without a time kept when their file's
    partition placed it in the window; None when partitions alone decide."""
    import pyarrow as pa
    import pyarrow.dataset as ds

    partitioned = all(item.day() is not None for item in files)
    if window.time_field not in schema.names:
        if partitioned:
            return None
        undated = next(item.name for item in files if item.day() is None)
        raise UsageError(
            f"{undated}: no '{window.time_field}' column and no date=YYYY-MM-DD partition "
            "to select --since/--until by"
        )
    kind = schema.field(window.time_field).type
    column = ds.field(window.time_field)
    if pa.types.is_timestamp(kind):
        unit = kind.unit
        target = pa.timestamp(unit, kind.tz) if kind.tz else pa.timestamp(unit)

        def bound(moment: datetime) -> Any:
            # A time without a zone in the file is taken as UTC, as rankgate reads every time.
            value = moment.astimezone(UTC)
            return pa.scalar(value if kind.tz else value.replace(tzinfo=None), type=target)

    elif pa.types.is_date(kind):

        def bound(moment: datetime) -> Any:
            return pa.scalar(moment.astimezone(UTC).date(), type=kind)

    elif pa.types.is_string(kind) or pa.types.is_large_string(kind):
        column = column.cast(pa.timestamp("us", "UTC"))

        def bound(moment: datetime) -> Any:
            return pa.scalar(moment.astimezone(UTC), type=pa.timestamp("us", "UTC"))

    else:
        raise UsageError(
            f"{name}: column '{window.time_field}' holds {kind}, not times: --since/--until "
            "cannot select by it"
        )
    condition = None
    if window.since is not None:
        # For a date column this keeps the day ``since`` falls in: the day overlaps the window.
        condition = column >= bound(window.since)
    if window.until is not None:
        upper = column < bound(window.until)
        if pa.types.is_date(kind) and window.until.astimezone(UTC).time() != datetime.min.time():
            upper = column <= bound(window.until)  # the day ``until`` falls in starts before it
        condition = upper if condition is None else condition & upper
    assert condition is not None
    if partitioned:
        condition = condition | column.is_null()
    return condition


# --------------------------------------------------------------------------------------------
# Files read one after another


class WindowedSource:
    """The records of one text file that fall in a window, by their time field.

    A record without a time is kept when its file's date partition placed it in the window, and
    passed over otherwise; a time that cannot be read is the record's problem. A file with
    records but no time in any of them, and no date partition, cannot be selected from: that is
    an error rather than an empty selection, as a Parquet file without the column is."""

    def __init__(self, inner: TraceSource, window: TimeWindow, dated_by_partition: bool) -> None:
        self.name = inner.name
        self.total = inner.total
        self._inner = inner
        self._window = window
        self._dated = dated_by_partition

    def done(self) -> int:
        return self._inner.done()

    def __iter__(self) -> Iterator[RawRecord]:
        from rankgate.times import parse_time

        field_name = self._window.time_field
        ordinal = 0
        timed = records = 0
        for record in self._inner:
            records += 1
            value = record.value
            moment = value.get(field_name) if isinstance(value, dict) else None
            timed += moment is not None
            if record.problem is None and moment is not None:
                try:
                    when = parse_time(moment, field_name)
                except UsageError:
                    ordinal += 1
                    yield RawRecord(
                        record.location,
                        None,
                        ordinal,
                        problem=(
                            f"expected an ISO 8601 time to place the trace in the --since/--until "
                            f"window, got {moment!r}"
                        ),
                        from_table=record.from_table,
                        problem_field=field_name,
                    )
                    continue
                if not self._window.holds(when):
                    continue
            elif record.problem is None and not self._dated:
                continue
            ordinal += 1
            yield replace(record, ordinal=ordinal)
        if records and not timed and not self._dated:
            raise UsageError(
                f"{self.name}: no record has a '{field_name}' field and the file has no "
                "date=YYYY-MM-DD partition to select --since/--until by"
            )


class WithPartitions:
    """The records of one text file with its hive partitions as fields, as a Parquet dataset has
    them as columns; a field the record has itself wins."""

    def __init__(self, inner: TraceSource, partitions: dict[str, str]) -> None:
        self.name = inner.name
        self.total = inner.total
        self._inner = inner
        self._partitions = partitions

    def done(self) -> int:
        return self._inner.done()

    def __iter__(self) -> Iterator[RawRecord]:
        for record in self._inner:
            if isinstance(record.value, dict):
                yield replace(record, value={**self._partitions, **record.value})
            else:
                yield record


class ChainedSource:
    """Several sources read one after another as one input; each record keeps its own file's
    location, and ordinals run on across files."""

    def __init__(self, name: str, sources: Sequence[TraceSource]) -> None:
        self.name = name
        self.sources = list(sources)
        totals = [source.total for source in self.sources]
        self.total: int | None = None if None in totals else sum(t for t in totals if t is not None)
        self._finished = 0
        self._current: TraceSource | None = None

    def done(self) -> int:
        current = self._current.done() if self._current is not None else 0
        return self._finished + current

    def __iter__(self) -> Iterator[RawRecord]:
        ordinal = 0
        self._finished = 0
        for source in self.sources:
            self._current = source
            for record in source:
                ordinal += 1
                yield replace(record, ordinal=ordinal)
            self._finished += source.total or source.done()
            self._current = None
