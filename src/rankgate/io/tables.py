"""Row-shaped sources: Parquet files, CSV/TSV files, Arrow/pandas/polars tables, lists of dicts.

Parquet and in-memory tables are read in Arrow record batches, so a large file never sits in memory
whole. List cells arrive as Python lists, map cells as dicts; CSV cells carry lists and maps as JSON
text, which the validator decodes.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Callable, Iterable, Iterator, Sized
from pathlib import Path
from typing import IO, Any

from rankgate.errors import InputError, Location, UsageError
from rankgate.io import limits
from rankgate.io.bounded import bounded_lines, cannot_read, open_binary, too_long_problem
from rankgate.io.cells import grade_map_array, text_list_array
from rankgate.io.source import GZIP_ERRORS, bytes_done, decompressed
from rankgate.io.validate import RawRecord

__all__ = ["ArrowSource", "CsvSource", "RecordsSource", "arrow_table"]

BATCH_ROWS = 8192


class ArrowSource:
    """Rows of a Parquet file or an in-memory Arrow table, read batch by batch.

    Either ``path`` (a Parquet file, opened again for every pass) or ``table`` is set.
    """

    #: True for rows rankgate has read and validated itself (compare's sides, scored again):
    #: every row is valid, in the normalised types (large strings, ``large_list`` IDs, a
    #: ``map<large_string, double>`` of grades), and the columnar reader takes them as they are.
    normalised = False
    #: Columns whose text is valid UTF-8 by construction (see ``arrow_table``), not checked again.
    utf8_columns: frozenset[str] = frozenset()

    def __init__(
        self, name: str, *, path: Path | None = None, table: Any = None, total: int | None
    ) -> None:
        self.name = name
        self.total = total
        self._path = path
        self._table = table
        self._rows_done = 0

    @classmethod
    def parquet(cls, path: Path) -> ArrowSource:
        parquet = _open_parquet(path)
        return cls(str(path), path=path, total=parquet.metadata.num_rows)

    @classmethod
    def table(cls, name: str, table: Any) -> ArrowSource:
        return cls(name, table=table, total=table.num_rows)

    def schema(self) -> Any:
        """The Arrow schema of the rows."""
        if self._table is not None:
            return self._table.schema
        assert self._path is not None
        return _open_parquet(self._path).schema_arrow

    def batches(self, rows: int = BATCH_ROWS, columns: list[str] | None = None) -> Iterator[Any]:
        """Record batches of at most ``rows`` rows (only ``columns``, when given); counts
        progress; a corrupt page is an ``InputError``."""
        import pyarrow as pa

        if self._table is not None:
            table = self._table if columns is None else self._table.select(columns)
            batches = iter(table.to_batches(max_chunksize=rows))
        else:
            assert self._path is not None
            _open_parquet(self._path)  # a file that is not Parquet gets the usual message
            batches = _parquet_batches(self._path, rows, columns)
        done = 0
        while True:
            try:
                batch = next(batches, None)
            except (OSError, pa.ArrowException) as problem:  # corrupt pages surface while reading
                raise InputError(
                    self.name, None, f"cannot read Parquet data after row {done} ({problem})"
                ) from None
            if batch is None:
                return
            done += batch.num_rows
            self._rows_done = done
            yield batch if self._table is None else _compacted(batch)

    def reread(self, rows: Any, prepare: Callable[[Any], Any] | None = None) -> list[RawRecord]:
        """The records at these 0-based row numbers, read again (for fields fetched on demand).
        ``prepare`` may reshape the rows' Arrow table first (a cheaper column of the same meaning
        for rows already known to be valid)."""
        import numpy as np
        import pyarrow as pa

        indices = np.asarray(rows, dtype=np.int64)
        if self._table is not None:
            if prepare is not None and len(indices):
                # Only the span the rows lie in is reshaped (they come from one chunk), and before
                # the rows are taken: taking from a wide struct costs a copy of every field.
                low = int(indices.min())
                span = self._table.slice(low, int(indices.max()) - low + 1)
                picked = prepare(span).take(indices - low)
            else:
                picked = self._table.take(indices)
        else:
            assert self._path is not None
            try:
                picked = _take_parquet_rows(_open_parquet(self._path), indices, prepare)
            except (OSError, pa.ArrowException) as unreadable:  # a page that reads badly now
                raise InputError(
                    self.name, None, f"cannot read Parquet data ({unreadable})"
                ) from None
        records = []
        for number, (value, problem, field) in zip(
            (indices + 1).tolist(), _rows_of_table(picked), strict=True
        ):
            records.append(
                RawRecord(
                    Location(self.name, row=number),
                    value,
                    number,
                    problem=problem,
                    from_table=True,
                    problem_field=field,
                )
            )
        return records

    def done(self) -> int:
        return self._rows_done

    def __iter__(self) -> Iterator[RawRecord]:
        row = 0
        for batch in self.batches():
            for value, row_problem, field in _rows(batch):
                row += 1
                yield RawRecord(
                    Location(self.name, row=row),
                    value,
                    row,
                    problem=row_problem,
                    from_table=True,
                    problem_field=field,
                )


def _open_parquet(path: Path) -> Any:
    import pyarrow.parquet as pq

    try:
        return pq.ParquetFile(path)
    except OSError as problem:
        if problem.errno is not None:  # the system refused (permission, a vanished file)
            raise cannot_read(path, problem) from None
        raise InputError(str(path), None, f"cannot read as Parquet ({problem})") from None
    except Exception as problem:  # pyarrow raises several types for a file that is not Parquet
        raise InputError(str(path), None, f"cannot read as Parquet ({problem})") from None


def _parquet_batches(path: Path, rows: int, columns: list[str] | None) -> Iterator[Any]:
    """A Parquet file's rows in batches, in file order, one row group's pages at a time through a
    small read buffer. Whole column chunks are not buffered ahead (``pre_buffer``): at a million
    traces that held 0.5 GB more than reading page by page, and gains nothing on a local disk.
    The caller already reads a batch ahead on a thread of its own, so the columns of a batch are
    decoded one after the other (``use_threads=False``): decoded at once by Arrow's own threads,
    they held 0.1 GB more at 10M traces and took the scoring thread's core, for no time saved."""
    import pyarrow.parquet as pq

    parquet = pq.ParquetFile(path, buffer_size=1 << 20, pre_buffer=False)
    yield from parquet.iter_batches(batch_size=rows, columns=columns, use_threads=False)


def _take_parquet_rows(
    parquet: Any, indices: Any, prepare: Callable[[Any], Any] | None = None
) -> Any:
    """Rows of a Parquet file by number, reading only the row groups that hold them (each reshaped
    by ``prepare`` first, when given)."""
    import numpy as np
    import pyarrow as pa

    if not len(indices):
        return parquet.schema_arrow.empty_table()
    sizes = [parquet.metadata.row_group(i).num_rows for i in range(parquet.num_row_groups)]
    starts = np.concatenate(([0], np.cumsum(sizes)))
    groups = np.searchsorted(starts, indices, side="right") - 1
    parts = []
    for group in np.unique(groups):
        table = parquet.read_row_group(int(group))
        if prepare is not None:
            table = prepare(table)
        parts.append(table.take(indices[groups == group] - starts[group]))
    if len(parts) == 1:
        return parts[0]  # one row group: the rows are already in the order asked for
    merged = pa.concat_tables(parts)
    # Back to the order asked for: rows were gathered group by group.
    position = np.empty(len(indices), dtype=np.int64)
    position[np.concatenate([np.flatnonzero(groups == g) for g in np.unique(groups)])] = np.arange(
        len(indices)
    )
    return merged.take(position)


def _rows_of_table(table: Any) -> Iterator[tuple[Any, str | None, str | None]]:
    for batch in table.to_batches():
        yield from _rows(batch)


def _rows(batch: Any) -> Iterator[tuple[Any, str | None, str | None]]:
    """A batch's rows as dicts; a row whose map column repeats a key, or whose text is not valid
    UTF-8 (Arrow does not check it when a file is read), becomes a located problem."""
    try:
        yield from ((value, None, None) for value in batch.to_pylist(maps_as_pydicts="strict"))
        return
    except (KeyError, UnicodeDecodeError):
        pass  # some row is bad: find which, row by row
    for index in range(batch.num_rows):
        row = batch.slice(index, 1)
        try:
            (value,) = row.to_pylist(maps_as_pydicts="strict")
        except KeyError as problem:
            # pyarrow names the key inside a sentence: "... (duplicate key was 'a')."
            said = str(problem.args[0]) if problem.args else ""
            key = re.search(r"duplicate key was (.*)\)", said)
            yield None, f"a map column repeats the key {key.group(1) if key else said}", None
        except UnicodeDecodeError:
            yield None, "text is not valid UTF-8", _undecodable_column(row)
        else:
            yield value, None, None


def _undecodable_column(row: Any) -> str:
    """The first column of a one-row batch whose text cannot be decoded."""
    for name, column in zip(row.schema.names, row.columns, strict=True):
        try:
            column.to_pylist()
        except UnicodeDecodeError:
            return str(name)
    return "?"


class CsvSource:
    """Rows of a CSV or TSV file (plain or gzip) with a header line; an empty cell is missing.

    Lines are decoded one at a time, so a bad byte is reported on its own line, and each record is
    located at the line where its row starts (a quoted cell may span several lines).
    """

    def __init__(self, path: Path, delimiter: str, total: int | None) -> None:
        self.name = str(path)
        self.total = total
        self._path = path
        self._delimiter = delimiter
        self._raw: Any = None
        self._line = 0
        self._row_line = 1  # where the row being read starts
        self._row_started = True  # the next line read starts a row

    def done(self) -> int:
        return bytes_done(self._raw, self.total)

    def __iter__(self) -> Iterator[RawRecord]:
        with open_binary(self._path) as raw:
            self._raw = raw
            try:
                reader = csv.reader(
                    self._decoded_lines(decompressed(raw)), delimiter=self._delimiter
                )
                yield from self._rows(reader)
            except csv.Error as problem:
                raise InputError(
                    Location(self.name, line=self._line), None, f"cannot read CSV ({problem})"
                ) from None
            except GZIP_ERRORS as problem:
                raise InputError(
                    self.name, None, f"corrupt or truncated gzip data ({problem})"
                ) from None
            except OSError as problem:
                raise cannot_read(self.name, problem) from None

    def _decoded_lines(self, stream: IO[bytes]) -> Iterator[str]:
        # A row may span lines (a quoted cell holding line breaks): its bytes are bounded as a
        # whole, and past the bound the file stops here, since the rest of a row that long (most
        # often a quote never closed) leaves no line where reading can safely go on.
        row_bytes = 0
        for number, (line, too_long) in enumerate(bounded_lines(stream), start=1):
            self._line = number
            row_bytes = 0 if self._row_started else row_bytes
            self._row_started = False
            row_bytes += len(line)
            if too_long or row_bytes > limits.MAX_RECORD_BYTES:
                raise InputError(
                    Location(self.name, line=self._row_line or number), None, too_long_problem()
                )
            try:
                yield line.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError:
                raise InputError(
                    Location(self.name, line=number), None, "line is not valid UTF-8"
                ) from None

    def _rows(self, reader: Iterator[list[str]]) -> Iterator[RawRecord]:
        self._row_line = 1
        self._row_started = True
        header = next(reader, None)
        if header is None:
            return
        self._check_header(header)
        ordinal = 0
        while True:
            starts_at = self._row_line = self._line + 1
            self._row_started = True
            # A ranking of thousands of IDs makes a cell longer than the csv module's default limit
            # (128 KiB). Raise it only while this reader parses, and put it back: it is process-wide.
            previous_limit = csv.field_size_limit(limits.MAX_RECORD_BYTES)
            try:
                row = next(reader, None)
            finally:
                csv.field_size_limit(previous_limit)
            if row is None:
                return
            if not row:
                continue  # a blank line is not a record
            ordinal += 1
            location = Location(self.name, line=starts_at)
            if len(row) != len(header):
                yield _wrong_width(location, ordinal, row, header)
                continue
            value = {
                key: (cell if cell != "" else None) for key, cell in zip(header, row, strict=True)
            }
            yield RawRecord(location, value, ordinal, from_table=True)

    def _check_header(self, header: list[str]) -> None:
        """Refuse a header that names a column twice: one of the two would be lost unseen."""
        seen: dict[str, int] = {}
        for number, name in enumerate(header, start=1):
            if name in seen:
                raise InputError(
                    Location(self.name, line=1),
                    name,
                    f"the header names this column twice (columns {seen[name]} and {number})",
                )
            seen[name] = number


def _wrong_width(location: Location, ordinal: int, row: list[str], header: list[str]) -> RawRecord:
    """A row whose cells do not line up with the header's columns: which column is wrong is
    unknowable, so the row is refused (an empty cell is how a CSV says "missing")."""
    if len(row) > len(header):
        return RawRecord(
            location,
            None,
            ordinal,
            problem="row has more cells than the header has columns",
        )
    return RawRecord(
        location,
        None,
        ordinal,
        problem=(
            f"row has {len(row)} {'cell' if len(row) == 1 else 'cells'}, the header has "
            f"{len(header)} columns (write an empty cell for a missing value)"
        ),
        problem_field=header[len(row)],
    )


class RecordsSource:
    """Dicts from memory: a list, or any iterable such as a generator (``evaluate([...])``)."""

    def __init__(self, records: Iterable[Any], name: str = "<records>") -> None:
        self.name = name
        self.total: int | None = len(records) if isinstance(records, Sized) else None
        self._records = records
        self._done = 0

    def done(self) -> int:
        return self._done

    def __iter__(self) -> Iterator[RawRecord]:
        for index, value in enumerate(self._records, start=1):
            self._done = index
            yield RawRecord(Location(self.name, row=index), value, index)

    def as_arrow(self) -> ArrowSource | None:
        """The records as one Arrow table, converted in C, with the dicts themselves kept for
        the validator; None when they are not a list of dicts Arrow takes whole (mixed types in
        a field, keys that are not text, a number too large...): then they are read one by one.
        """
        records = self._records
        if not isinstance(records, list) or not records:
            return None
        if not all(type(record) is dict for record in records):
            return None
        import pyarrow as pa

        # Column by column, over every record's keys (``Table.from_pylist`` would take the first
        # record's only): rankings and grades in C (``io.cells``), anything else inferred by Arrow.
        names = dict.fromkeys(key for record in records for key in record)
        if not all(type(name) is str for name in names):
            return None
        if len(names) > _MOST_COLUMNS_BY_NAME:
            # Walking the records once per name would take names x records: Arrow infers
            # the columns of so many names in one pass instead.
            try:
                rows = pa.array(records)
            except (pa.ArrowException, TypeError, ValueError, OverflowError):
                return None
            if not pa.types.is_struct(rows.type) or not _within_record_limits(rows):
                return None
            return _RecordsTable(self, pa.Table.from_struct_array(rows), records)
        arrays = {}
        utf8: set[str] = set()
        for name in names:
            cells = [record.get(name) for record in records]
            array = text_list_array(cells) if _has_type(cells, list) else None
            if array is not None:
                utf8.add(name)  # encoded from str objects: valid UTF-8
            if array is None and _has_type(cells, dict):
                array = grade_map_array(cells)
            if array is None:
                try:
                    array = pa.array(cells)
                except (pa.ArrowException, TypeError, ValueError, OverflowError):
                    return None
            arrays[name] = array
        if not names or not _within_record_limits(
            pa.StructArray.from_arrays(list(arrays.values()), names=list(arrays))
        ):
            return None
        converted = _RecordsTable(self, pa.table(arrays), records)
        converted.utf8_columns = frozenset(utf8)
        return converted


# Dicts with more distinct keys than this are converted by Arrow's inference in one pass.
_MOST_COLUMNS_BY_NAME = 64


def _has_type(cells: list[Any], kind: type) -> bool:
    """Whether the first cell that is not None is of ``kind`` (the converters check the rest)."""
    return next((type(cell) for cell in cells if cell is not None), None) is kind


def _within_record_limits(rows: Any) -> bool:
    """Whether no text in ``rows`` is longer than ``MAX_TEXT_BYTES`` and no value nests deeper
    than ``MAX_NESTING_DEPTH`` (the limits the validator enforces on one record). When one might
    be passed, the dicts are read one by one, so the validator names the record and field."""
    import pyarrow as pa
    import pyarrow.compute as pc

    pending = [(rows, 1)]
    while pending:
        array, depth = pending.pop()
        kind = array.type
        if depth >= limits.MAX_NESTING_DEPTH - 1:
            return False
        if pa.types.is_string(kind) or pa.types.is_large_string(kind):
            longest = pc.max(pc.binary_length(array)).as_py()
            if longest is not None and longest > limits.MAX_TEXT_BYTES:
                return False
        elif pa.types.is_map(kind):
            pending += [(array.keys, depth + 1), (array.items, depth + 1)]
        elif pa.types.is_list(kind) or pa.types.is_large_list(kind):
            pending.append((array.flatten(), depth + 1))
        elif pa.types.is_struct(kind):
            pending += [(array.field(i), depth + 1) for i in range(kind.num_fields)]
    return True


class _RecordsTable(ArrowSource):
    """Dicts read as an Arrow table: rows read again are the dicts themselves, located as
    ``RecordsSource`` locates them, so the validator sees exactly what it would have."""

    def __init__(self, origin: RecordsSource, table: Any, records: list[Any]) -> None:
        super().__init__(origin.name, table=table, total=len(records))
        self._origin = origin
        self._records = records

    def batches(self, rows: int = BATCH_ROWS, columns: list[str] | None = None) -> Iterator[Any]:
        for batch in super().batches(rows, columns):
            yield batch
            self._origin._done = self._rows_done  # progress, as the dicts' own reading counts it

    def reread(self, rows: Any, prepare: Callable[[Any], Any] | None = None) -> list[RawRecord]:
        return [
            RawRecord(Location(self.name, row=row + 1), self._records[row], row + 1)
            for row in (int(row) for row in rows)
        ]


def _compacted(batch: Any) -> Any:
    """A batch cut from an in-memory table, with each list or map column holding only the items
    its rows cover. A cut keeps its whole parent's child array, and a check or conversion of every
    batch's child would then read the whole table each time (quadratic in its size)."""
    import pyarrow as pa

    columns = []
    changed = False
    for column in batch.columns:
        kind = column.type
        if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_map(kind):
            offsets = column.offsets
            child = column.items if pa.types.is_map(kind) else column.values
            if len(offsets) and (offsets[0].as_py() != 0 or offsets[-1].as_py() != len(child)):
                column = pa.concat_arrays([column])
                changed = True
        columns.append(column)
    return pa.RecordBatch.from_arrays(columns, schema=batch.schema) if changed else batch


def arrow_table(data: Any, utf8: set[str] | None = None) -> Any | None:
    """An Arrow table for a pandas, polars or Arrow object; None for anything else. ``utf8``
    gathers the names of the columns whose text is valid UTF-8 by construction (lists of str
    encoded by ``io.cells``), which the columnar reader need not check again."""
    module = type(data).__module__.split(".", 1)[0]
    if module not in ("pyarrow", "pandas", "polars"):
        return None
    import pyarrow as pa

    if isinstance(data, pa.Table):
        return data
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    if module == "polars":
        return data.to_arrow()
    if module == "pandas":
        try:
            return _with_grade_maps(
                data, lambda frame: pa.Table.from_pandas(frame, preserve_index=False), utf8
            )
        except pa.ArrowException:
            pass
        # Arrow maps take text keys only, while a dict record may key its grades by integer IDs
        # (17 and "17" name one document): give such keys their decimal text, as the validator
        # does for a dict, and convert again.
        try:
            return _with_grade_maps(
                _text_keyed(data),
                lambda frame: pa.Table.from_pandas(frame, preserve_index=False),
                utf8,
            )
        except pa.ArrowException as problem:
            raise UsageError(f"cannot convert the DataFrame to Arrow: {problem}") from None
    return None


# What a grade may be in a dict cell converted straight to a map column; anything else (a bool,
# which Arrow would take as 1.0, a string, a nested value) leaves the column to pandas' inference
# and the validator, which words the problem.
_GRADE_TYPES = frozenset({int, float, type(None)})


def _with_grade_maps(
    frame: Any, convert: Callable[[Any], Any], utf8: set[str] | None = None
) -> Any:
    """``convert(frame)``, with each object column whose cells are all dicts of text -> number
    (or missing) converted straight to a map column (``int64`` grades when all are whole numbers,
    else ``float64``), and each whose cells are all lists of text converted in C (``io.cells``).

    ``DataFrame(records)`` holds grades as one dict per row; Arrow's inference makes such a column
    a struct with a field per distinct document ID (cost and memory grow with rows x documents)
    that the reader then turns back into a map. Converting it to the map directly skips both."""
    import itertools

    import numpy as np
    import pyarrow as pa

    columns = list(frame.columns)
    if len(set(columns)) != len(columns) or not all(isinstance(c, str) for c in columns):
        return convert(frame)
    maps: dict[str, Any] = {}
    for name in columns:
        column = frame[name]
        if column.dtype != object or not len(column):
            continue
        cells = column.tolist()
        kinds = {type(cell) for cell in cells}
        if kinds == {list} or kinds == {list, type(None)}:
            # Rankings as lists of str: in C, several times faster than pyarrow's builders.
            ranking = text_list_array(cells)
            if ranking is not None:
                maps[name] = ranking
                if utf8 is not None:
                    utf8.add(name)  # encoded from str objects: valid UTF-8
            continue
        if not kinds <= {dict, type(None)} or kinds == {type(None)}:
            continue
        direct = grade_map_array(cells)
        if direct is not None:
            maps[name] = direct
            continue
        present = [cell for cell in cells if cell is not None]
        keys = set(map(type, itertools.chain.from_iterable(present)))
        values = set(map(type, itertools.chain.from_iterable(map(dict.values, present))))
        numeric = {kind for kind in values if issubclass(kind, (np.integer, np.floating))}
        if keys - {str} or (values - numeric) - _GRADE_TYPES:
            continue
        # Whole-number grades stay integers, so an error quotes a grade as it was written.
        whole = all(kind is int or issubclass(kind, np.integer) for kind in values - {type(None)})
        grade_type = pa.int64() if whole else pa.float64()
        try:
            maps[name] = pa.array(cells, pa.map_(pa.large_string(), grade_type))
        except (pa.ArrowException, OverflowError):
            continue
    if not maps:
        return convert(frame)
    if len(maps) == len(columns):
        return pa.table({name: maps[name] for name in columns})
    table = convert(frame.drop(columns=list(maps)))
    for name in columns:
        if name in maps:
            table = table.add_column(columns.index(name), name, maps[name])
    return table


def _text_keyed(frame: Any) -> Any:
    """``frame`` with every dict cell of an object column keyed by text: integer keys (Python or
    numpy, never bool) become their decimal string. Other columns and cells are left as they are."""
    import numbers

    def key_text(key: Any) -> Any:
        if isinstance(key, numbers.Integral) and not isinstance(key, bool):
            return str(int(key))
        return key

    def rekeyed(cell: Any) -> Any:
        if isinstance(cell, dict):
            return {key_text(key): value for key, value in cell.items()}
        return cell

    converted = frame.copy(deep=False)
    for name in frame.columns:
        if frame[name].dtype == object:
            converted[name] = frame[name].map(rekeyed)
    return converted
