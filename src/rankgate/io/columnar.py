"""Sources read as Arrow columns instead of one Python dict per record.

Parquet files, in-memory Arrow/pandas/polars tables and JSON Lines files can be read as chunks of
normalised Arrow columns (``Chunk``): ``query_id``, ``retrieved_ids``, ``relevant_ids``,
``relevance_scores`` and one ``segment:<field>`` column per segment field. The compiled join then
works on those buffers directly.

The validator (``io/validate.py``) stays the one definition of a valid trace. A chunk marks as
*slow* every row whose meaning the columnar reading cannot be sure of (a null or empty ID, a grade
out of range, a line that is not plain JSON...); the evaluator hands those rows to the validator one
by one, so they get exactly the record path's value or error message. When a whole source has a
shape the columnar reading does not handle (dotted field paths, rankings as JSON text, a float
segment column), ``chunks`` returns None and the record path reads everything.

Grades arrive in three shapes, all made a map<large_string, double> at the edge: a map column; a
struct column with one field per document ID (what tables built from dicts hold), converted field
by field without a step per row (``_struct_as_map``); and JSON text in a string column, decoded one
cell at a time by the validator's own decoder (``_json_text_as_map``).
"""

from __future__ import annotations

import json
import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from rankgate.errors import InputError, Location
from rankgate.fast import numpy_of
from rankgate.io import limits
from rankgate.io.bounded import too_long_problem
from rankgate.io.json_records import JsonSource, OversizedLine, line_record
from rankgate.io.tables import ArrowSource
from rankgate.io.validate import MAX_GRADE, FieldMap, RawRecord

__all__ = ["Chunk", "chunks"]

T = TypeVar("T")

CHUNK_ROWS = 32_768
CHUNK_BYTES = 32 << 20
SEGMENT_PREFIX = "segment:"


@dataclass(frozen=True, eq=False)
class Chunk:
    """A block of consecutive input records as normalised Arrow columns.

    ``slow`` marks rows the validator must read (``raw(i)`` gives row i as a ``RawRecord``).
    ``later(rows)`` gives a loader of those rows' raw records, read back from the source when it is
    called, so per-query attributes can be fetched later without being held in memory (the loader
    keeps neither the chunk nor its columns). ``unique_map_keys``:
    the scores column comes from a table, where a repeated map key is an error (in a JSON object the
    last value wins).
    """

    table: Any
    slow: npt.NDArray[np.bool_]
    first_ordinal: int
    unique_map_keys: bool
    raw: Callable[[int], RawRecord]
    later: Callable[[npt.NDArray[np.int64]], Callable[[], list[RawRecord]]]
    done: int
    # How far into the input this chunk ends, in the source's units when it can be known (rows,
    # or bytes of an uncompressed file); ``done`` is what the reader has consumed, read-ahead
    # included, for the progress bar.
    through: int


def chunks(source: Any, fields: FieldMap, segment_fields: Sequence[str]) -> Iterator[Chunk] | None:
    """The source as columnar chunks, or None when only the record path can read it."""
    if any("." in path for path in (*fields.paths(), *segment_fields)):
        return None
    if set(segment_fields) & set(fields.paths()):
        return None
    if isinstance(source, ArrowSource):
        return _arrow_chunks(source, fields, segment_fields)
    if isinstance(source, JsonSource):
        try:
            from rankgate.io import jsonl_arrow
        except ImportError:  # the JSON Lines scanner is not built yet
            return None
        if not jsonl_arrow.available() or not source.is_lines():
            return None
        return _json_chunks(source, fields, segment_fields)
    return None


# --------------------------------------------------------------------------------------------
# Arrow tables and Parquet files


def _arrow_chunks(
    source: ArrowSource, fields: FieldMap, segment_fields: Sequence[str]
) -> Iterator[Chunk] | None:
    import pyarrow as pa

    schema = source.schema()
    if schema is None or not _columnar_schema(schema, fields, segment_fields):
        return None

    wanted = [
        name for name in dict.fromkeys([*fields.paths(), *segment_fields]) if name in schema.names
    ]

    grades = fields.relevance_scores

    def as_scored(table: Any) -> Any:
        """Scored rows read back with struct grades as a map: a struct's row becomes a dict of
        every field, thousands of keys when documents are many, while the map holds only the
        row's labels. For a row that was scored both say the same to the validator."""
        if grades not in table.schema.names:
            return table
        index = table.schema.get_field_index(grades)
        column = table.column(index)
        if not pa.types.is_struct(column.type):
            return table
        pieces = [
            _struct_as_map(piece, np.zeros(len(piece), dtype=np.bool_)) for piece in column.chunks
        ]
        as_map = pa.chunked_array(pieces, type=pa.map_(pa.large_string(), pa.float64()))
        return table.set_column(index, grades, as_map)

    def generate() -> Iterator[Chunk]:
        row = 0
        for batch in prefetched(source.batches(CHUNK_ROWS, wanted)):
            table, slow = _normalised(batch, fields, segment_fields)
            first = row
            raw = _SlowRows(source, first, np.flatnonzero(slow))

            def later(
                rows: npt.NDArray[np.int64], first: int = first
            ) -> Callable[[], list[RawRecord]]:
                picked = rows.astype(np.int32, copy=False)
                return lambda: source.reread(picked.astype(np.int64) + first, as_scored)

            row += batch.num_rows
            yield Chunk(table, slow, first + 1, True, raw, later, row, row)

    return generate()


class _SlowRows:
    """Whole records of a chunk's slow rows, read back together the first time one is asked for
    (the chunk's batch holds only the columns the evaluation reads)."""

    def __init__(self, source: ArrowSource, first: int, rows: npt.NDArray[np.int64]) -> None:
        self._source = source
        self._first = first
        self._rows = rows
        self._read: dict[int, RawRecord] | None = None

    def __call__(self, index: int) -> RawRecord:
        if self._read is None:
            records = self._source.reread(self._rows + self._first)
            self._read = dict(zip(self._rows.tolist(), records, strict=True))
        record = self._read.get(index)
        if record is None:  # found slow only after the join (a repeated map key)
            (record,) = self._source.reread(np.array([self._first + index], dtype=np.int64))
        return record


def prefetched(items: Iterator[T], depth: int = 2) -> Iterator[T]:
    """``items``, produced by a second thread up to ``depth`` ahead of the consumer.

    Reading (pyarrow, the JSON Lines scanner) and scoring (the compiled join) both release the GIL,
    so on two cores the next chunk is read while this one is scored. Errors raised while producing
    reach the consumer in order."""
    slots: queue.Queue[tuple[bool, Any]] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def produce() -> None:
        try:
            for item in items:
                while not stop.is_set():
                    try:
                        slots.put((True, item), timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            slots.put((False, None))
        except BaseException as problem:  # handed to the consumer, which re-raises it
            slots.put((False, problem))

    worker = threading.Thread(target=produce, name="rankgate-reader", daemon=True)
    worker.start()
    try:
        while True:
            more, item = slots.get()
            if not more:
                if item is not None:
                    raise item
                return
            yield item
    finally:
        stop.set()
        worker.join()


def _columnar_schema(schema: Any, fields: FieldMap, segment_fields: Sequence[str]) -> bool:
    """Whether every column the evaluation reads has a type the columnar path understands."""
    import pyarrow as pa
    import pyarrow.types as pt

    def id_type(t: Any) -> bool:
        return bool(pt.is_string(t) or pt.is_large_string(t) or pt.is_integer(t))

    def id_list(t: Any) -> bool:
        return bool((pt.is_list(t) or pt.is_large_list(t)) and id_type(t.value_type))

    names = set(schema.names)
    # The record path refuses a row whose map column, any map column, repeats a key; only the
    # trace fields are read here, so a source with other maps is left to the record path.
    others = [schema.field(name).type for name in names if name != fields.relevance_scores]
    if any(_holds_map(kind) for kind in others):
        return False
    if fields.retrieved_ids not in names or not id_list(schema.field(fields.retrieved_ids).type):
        return False
    if fields.relevant_ids in names and not id_list(schema.field(fields.relevant_ids).type):
        return False
    if fields.relevance_scores in names:
        scores = schema.field(fields.relevance_scores).type
        numeric_map = (
            pt.is_map(scores)
            and id_type(scores.key_type)
            and (pt.is_integer(scores.item_type) or pt.is_floating(scores.item_type))
        )
        struct = pt.is_struct(scores) and _convertible_struct(scores)
        json_text = pt.is_string(scores) or pt.is_large_string(scores)  # ``_json_text_as_map``
        if not (numeric_map or struct or json_text):
            return False
    if fields.query_id in names and not id_type(schema.field(fields.query_id).type):
        return False
    for name in segment_fields:
        if name in names:
            kind = schema.field(name).type
            if not (id_type(kind) or pt.is_boolean(kind) or kind == pa.null()):
                return False
    return True


def _convertible_struct(kind: Any) -> bool:
    """Whether grades stored as a struct (one field per document ID, as ``Table.from_pylist``,
    ``DataFrame(records)`` and polars make of dicts) can become a map column. Two fields of one
    name would be one key of the record path's dict, and a map inside would need its own check for
    repeated keys: both are left to the record path."""
    names = [kind.field(i).name for i in range(kind.num_fields)]
    return len(set(names)) == len(names) and not _holds_map(kind)


def _holds_map(kind: Any) -> bool:
    """Whether an Arrow type is, or nests, a map."""
    import pyarrow.types as pt

    if pt.is_map(kind):
        return True
    return any(_holds_map(kind.field(i).type) for i in range(kind.num_fields))


def _normalised(
    batch: Any, fields: FieldMap, segment_fields: Sequence[str]
) -> tuple[Any, npt.NDArray[np.bool_]]:
    """A record batch in the normalised columns, and the rows the validator must read."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = batch.num_rows
    slow = np.zeros(n, dtype=np.bool_)
    names = set(batch.schema.names)

    def column(name: str) -> Any:
        return batch.column(name) if name in names else None

    def id_list(array: Any, required: bool) -> Any:
        if not (
            pa.types.is_string(array.type.value_type)
            or pa.types.is_large_string(array.type.value_type)
        ):
            array = array.cast(pa.large_list(pa.large_string()))
        if required and array.null_count:
            slow[~numpy_of(array.is_valid())] = True
        _mark_bad_items(array, array.values, slow)
        return array

    retrieved = id_list(column(fields.retrieved_ids), required=True)
    slow |= _entries(retrieved) > limits.MAX_IDS_PER_RANKING
    relevant = column(fields.relevant_ids)
    if relevant is not None:
        relevant = id_list(relevant, required=False)
    scores = column(fields.relevance_scores)
    declared = None
    if scores is not None:
        if pa.types.is_string(scores.type) or pa.types.is_large_string(scores.type):
            scores, declared = _json_text_as_map(scores, slow)
        else:
            declared = _entries_or_fields(scores)
            if pa.types.is_struct(scores.type):
                scores = _struct_as_map(scores, slow)
    if scores is not None:
        key = scores.type.key_type
        if not (pa.types.is_string(key) or pa.types.is_large_string(key)):
            key = pa.large_string()  # integer document IDs, as text
        if key != scores.type.key_type or scores.type.item_type != pa.float64():
            # Unsafe only for integers past 2^53, far above MAX_GRADE: those rows go slow below
            # and the validator words the error with the exact value.
            scores = scores.cast(pa.map_(key, pa.float64()), safe=False)
        _mark_bad_items(scores, scores.keys, slow)
        _mark_bad_grades(scores, slow)
    labels = sum(counts for counts in (_entries_or_none(relevant), declared) if counts is not None)
    slow |= np.asarray(labels) > limits.MAX_LABELS_PER_QUERY
    query_id = column(fields.query_id)
    if query_id is None:
        query_id = pa.nulls(n, pa.large_string())
    elif not (pa.types.is_string(query_id.type) or pa.types.is_large_string(query_id.type)):
        query_id = query_id.cast(pa.large_string())
    else:
        # An empty ID is an error the validator words.
        slow |= numpy_of(pc.fill_null(pc.equal(query_id, ""), False))
    slow |= _longer_than(query_id, limits.MAX_ID_BYTES) | _not_utf8(query_id)
    # An absent label column stays absent (the join takes None for it).
    columns = {"query_id": query_id, "retrieved_ids": retrieved}
    if relevant is not None:
        columns["relevant_ids"] = relevant
    if scores is not None:
        columns["relevance_scores"] = scores
    for name in segment_fields:
        values = column(name)
        if values is None or values.type == pa.null():
            values = pa.nulls(n, pa.large_string())
        elif pa.types.is_boolean(values.type):
            values = pc.if_else(values, "true", "false").cast(pa.large_string())
        elif not (pa.types.is_string(values.type) or pa.types.is_large_string(values.type)):
            values = values.cast(pa.large_string())
        slow |= _not_utf8(values)
        columns[SEGMENT_PREFIX + name] = values
    return pa.record_batch(columns), slow


def _mark_bad_items(lists: Any, items: Any, slow: npt.NDArray[np.bool_]) -> None:
    """Rows with a null ID in a list (or map key), or an ID past ``MAX_ID_BYTES``, go to the
    validator, which words it. (The compiled join sends rows with an empty ID there itself.)"""
    import pyarrow.compute as pc

    if len(items) and items.null_count:
        _mark_rows_holding(lists, numpy_of(pc.is_null(items)), slow)
    if len(items):
        _mark_rows_holding(lists, _longer_than(items, limits.MAX_ID_BYTES), slow)
        _mark_rows_holding(lists, _not_utf8(items), slow)


def _entries_or_none(lists: Any) -> npt.NDArray[np.int64] | None:
    return None if lists is None else _entries(lists)


def _entries_or_fields(scores: Any) -> npt.NDArray[np.int64]:
    """Labels a grades column declares per row, as the validator counts them: a map's entries, or
    for a struct every field of a non-null row (the record path's dict has a key per field, null
    grades included)."""
    import pyarrow as pa

    if pa.types.is_struct(scores.type):
        valid = scores.is_valid()
        present = numpy_of(valid) if len(valid) else np.zeros(0, dtype=np.bool_)
        width: int = scores.type.num_fields
        return present.astype(np.int64) * width
    return _entries(scores)


def _struct_as_map(scores: Any, slow: npt.NDArray[np.bool_]) -> Any:
    """A struct column of grades (one field per document ID) as a map<large_string, double>, built
    field by field with whole-column operations: the cost is one pass over each field's N values in
    C, never a Python step per row. A null field is no label for that document (what the record
    path makes of a table's missing value); a null row stays a null (unlabeled) row.

    Rows the map cannot stand for go to the validator, which words their error: a non-null value
    in a field that is not a number (a boolean, text, a nested struct...), and any non-null row when
    a field's name is not a valid document ID (the validator checks every key, null grade or not).
    Grades out of range (NaN, negative, too large) are caught on the map like any other."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from rankgate.io.bounded import utf8_length

    kind = scores.type
    rows = len(scores)
    width = kind.num_fields
    # Map offsets are 32-bit: a chunk whose fields could hold more entries is cut in row slices.
    most_rows = max(1, (2**31 - 1) // max(width, 1))
    if rows > most_rows:
        parts = [
            _struct_as_map(scores.slice(start, most_rows), slow[start : start + most_rows])
            for start in range(0, rows, most_rows)
        ]
        return pa.concat_arrays(parts)
    valid = scores.is_valid()
    present_rows = numpy_of(valid) if rows else np.zeros(0, dtype=np.bool_)
    names = [kind.field(i).name for i in range(width)]
    if any(not name or utf8_length(name) > limits.MAX_ID_BYTES for name in names):
        slow |= present_rows
    children = scores.flatten()  # each field with the row's own nulls and any slice applied
    counts = np.zeros(rows, dtype=np.int64)
    found: list[tuple[int, npt.NDArray[np.int64], npt.NDArray[np.float64]]] = []
    for index, child in enumerate(children):
        if child.null_count == rows:
            continue
        has_value = numpy_of(child.is_valid())
        if not (pa.types.is_integer(child.type) or pa.types.is_floating(child.type)):
            slow |= has_value
            continue
        # Unsafe only for integers past 2^53, far above MAX_GRADE: those rows go slow later.
        numbers = child.cast(pa.float64(), safe=False)
        if numbers.null_count:
            numbers = pc.drop_null(numbers)
        at = np.flatnonzero(has_value)
        counts[at] += 1
        found.append((index, at, numpy_of(numbers)))
    offsets = np.zeros(rows + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    # Entries go row by row, fields in schema order within a row (the record path's dict order):
    # each field's values land at the next free place of the rows that hold one.
    field_of = np.empty(int(offsets[-1]), dtype=np.int64)
    grades = np.empty(int(offsets[-1]), dtype=np.float64)
    free = offsets[:-1].copy()
    for index, at, values in found:
        places = free[at]
        field_of[places] = index
        grades[places] = values
        free[at] += 1
    keys = pa.array(names, pa.large_string()).take(pa.array(field_of))
    return pa.MapArray.from_arrays(
        pa.array(offsets.astype(np.int32)),
        keys,
        pa.array(grades),
        mask=pc.invert(valid),
    )


def _json_text_as_map(texts: Any, slow: npt.NDArray[np.bool_]) -> tuple[Any, npt.NDArray[np.int64]]:
    """Grades kept as JSON text in a string column ('{"d1": 2, "d7": 0}', as a CSV-shaped export
    or a database dump holds them) as a map<large_string, double>, and the labels each row declares
    (every key, as the validator counts them).

    Each cell is decoded by Python's JSON decoder, the one the validator uses, so a cell means here
    what it means there; only the plain case is taken: an object whose values are all numbers.
    Anything else (not an object, invalid JSON, a null or non-number grade, an empty key, a number
    too large for a float) is a slow row, worded by the validator. One decode per row is far
    cheaper than the record path's whole-row conversion and validation; see
    ``bench/table_shapes.py``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from rankgate.io.bounded import decode_json

    rows = len(texts)
    unreadable = _not_utf8(texts)
    if unreadable.any():
        slow |= unreadable
        texts = pc.if_else(pa.array(unreadable), pa.scalar(None, texts.type), texts)
    decoder = json.JSONDecoder()
    declared = np.zeros(rows, dtype=np.int64)
    lengths = np.zeros(rows, dtype=np.int64)
    keys: list[str] = []
    grades: list[float] = []
    number_types = (int, float)
    for row, text in enumerate(texts.to_pylist()):
        if text is None:
            continue
        try:
            value = decode_json(decoder, text) if text.lstrip()[:1] == "{" else None
        except ValueError:  # invalid JSON, or nested past Python's limit
            value = None
        if not isinstance(value, dict):
            slow[row] = True
            continue
        declared[row] = len(value)
        numbers = list(value.values())
        # ``type(...) in`` and not isinstance: a boolean is an int to isinstance.
        if "" in value or not all(type(number) in number_types for number in numbers):
            slow[row] = True
            continue
        try:
            as_floats = list(map(float, numbers))
        except OverflowError:  # an integer past the float range
            slow[row] = True
            continue
        keys.extend(value)
        grades.extend(as_floats)
        lengths[row] = len(numbers)
    offsets = np.zeros(rows + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if offsets[-1] > 2**31 - 1:
        raise ValueError("too many relevance_scores entries in one chunk")
    as_map = pa.MapArray.from_arrays(
        pa.array(offsets.astype(np.int32)),
        pa.array(keys, pa.large_string()),
        pa.array(grades, pa.float64()),
        mask=texts.is_null(),
    )
    return as_map, declared


def _entries(lists: Any) -> npt.NDArray[np.int64]:
    """Items per row of a list or map array (0 for a null row)."""
    offsets = numpy_of(lists.offsets).astype(np.int64, copy=False)
    return np.diff(offsets)


def _not_utf8(texts: Any) -> npt.NDArray[np.bool_]:
    """Which strings of a text array are not valid UTF-8: Arrow does not check what a Parquet file
    holds, and the validator words the error. One pass in C when all are valid (the usual case)."""
    import pyarrow as pa

    bad = np.zeros(len(texts), dtype=np.bool_)
    try:
        texts.validate(full=True)
    except pa.ArrowInvalid:
        for index, value in enumerate(texts.cast(pa.large_binary()).to_pylist()):
            if value is not None:
                try:
                    value.decode("utf-8")
                except UnicodeDecodeError:
                    bad[index] = True
    return bad


def _longer_than(texts: Any, limit: int) -> npt.NDArray[np.bool_]:
    """Which strings of a text array are longer than ``limit`` bytes (a null is not)."""
    import pyarrow.compute as pc

    return numpy_of(pc.fill_null(pc.greater(pc.binary_length(texts), limit), False))


def _mark_bad_grades(scores: Any, slow: npt.NDArray[np.bool_]) -> None:
    """Rows with a grade that is null, NaN, negative or too large go to the validator."""
    items = scores.items
    if not len(items):
        return
    values = numpy_of(items.fill_null(np.nan)).astype(np.float64, copy=False)
    with np.errstate(invalid="ignore"):
        _mark_rows_holding(scores, ~((values >= 0) & (values <= MAX_GRADE)), slow)


def _mark_rows_holding(lists: Any, bad: npt.NDArray[np.bool_], slow: npt.NDArray[np.bool_]) -> None:
    """Mark slow every row of ``lists`` (a list or map array) that holds a marked child item."""
    if not bad.any():
        return
    offsets = numpy_of(lists.offsets).astype(np.int64, copy=False)
    positions = np.flatnonzero(bad)
    rows = np.searchsorted(offsets, positions, side="right") - 1
    inside = (rows >= 0) & (rows < len(offsets) - 1)
    rows = rows[inside]
    # Only positions that a row actually covers (a sliced array's child holds others too).
    covered = positions[inside] < offsets[rows + 1]
    slow[rows[covered]] = True


# --------------------------------------------------------------------------------------------
# JSON Lines


def _json_chunks(
    source: JsonSource, fields: FieldMap, segment_fields: Sequence[str]
) -> Iterator[Chunk]:
    from rankgate.io import jsonl_arrow

    keys = (fields.query_id, fields.retrieved_ids, fields.relevant_ids, fields.relevance_scores)
    names = [
        "query_id",
        "retrieved_ids",
        "relevant_ids",
        "relevance_scores",
        *(SEGMENT_PREFIX + name for name in segment_fields),
    ]
    ordinal = 0

    def parsed_chunks() -> Iterator[tuple[bytes | bytearray, int, int, Any]]:
        for piece in source.line_chunks(CHUNK_BYTES):
            if isinstance(piece, OversizedLine):
                # One slow row in place of the line that was read past: a single invalid byte
                # makes the scanner give exactly that, and ``raw`` below words the real problem.
                parsed = jsonl_arrow.parse_chunk(b"\x00", keys, tuple(segment_fields), piece.line)
                yield b"", piece.line, piece.start, (parsed, piece)
                continue
            data, first_line, offset = piece
            parsed = jsonl_arrow.parse_chunk(data, keys, tuple(segment_fields), first_line)
            # A line that ended inside a chunk may still be longer than a record may be: the
            # validator's path refuses it (``line_record``), so it must not be scored here.
            too_long = (parsed.end - parsed.start) > limits.MAX_RECORD_BYTES
            if too_long.any():
                parsed = replace(parsed, slow=parsed.slow | too_long)
            yield data, first_line, offset, (parsed, None)

    for data, first_line, offset, (parsed, oversized) in prefetched(parsed_chunks()):
        if oversized is not None:
            record = RawRecord(
                Location(source.name, line=oversized.line),
                None,
                ordinal + 1,
                problem=too_long_problem(),
            )
            table = parsed.table.rename_columns(names)
            ordinal += 1

            def only_record(index: int, record: RawRecord = record) -> RawRecord:
                return record

            def one_record(
                rows: npt.NDArray[np.int64], record: RawRecord = record
            ) -> Callable[[], list[RawRecord]]:
                return lambda: [record]

            yield Chunk(
                table,
                parsed.slow,
                ordinal,
                False,
                only_record,
                one_record,
                source.done(),
                oversized.start,
            )
            continue
        table = parsed.table.rename_columns(names)
        first = ordinal
        lines, starts, ends = parsed.line, parsed.start, parsed.end

        def raw(
            index: int,
            data: bytes | bytearray = data,
            lines: Any = lines,
            starts: Any = starts,
            ends: Any = ends,
            first: int = first,
        ) -> RawRecord:
            line = data[int(starts[index]) : int(ends[index])]
            return line_record(source.name, line, int(lines[index]), first + index + 1)

        def later(
            rows: npt.NDArray[np.int64],
            offset: int = offset,
            size: int = len(data),
            first_line: int = first_line,
            first: int = first,
        ) -> Callable[[], list[RawRecord]]:
            # Only the chunk's place in the file and the rows' numbers are kept (4 bytes a row);
            # the lines are found again by the same rules when they are asked for.
            picked = rows.astype(np.int32, copy=False)
            return lambda: _reread_lines(source, offset, size, first_line, first, picked)

        ordinal += table.num_rows
        yield Chunk(
            table, parsed.slow, first + 1, False, raw, later, source.done(), offset + len(data)
        )


def _reread_lines(
    source: JsonSource,
    offset: int,
    size: int,
    first_line: int,
    first_ordinal: int,
    rows: npt.NDArray[np.int32],
) -> list[RawRecord]:
    """Some records of a chunk read back from the source: the chunk's bytes sit at ``offset`` in
    the decompressed stream, ``rows`` number its non-blank lines from 0."""
    from rankgate.io.source import decompressed

    raw = source.reopen()
    try:
        stream = decompressed(raw)
        if stream is raw or (hasattr(stream, "seek") and not _is_gzip(stream)):
            stream.seek(offset)
        else:
            _skip(stream, offset)
        block = stream.read(size)
    finally:
        raw.close()
    wanted = set(rows.tolist())
    found: dict[int, RawRecord] = {}
    row = 0
    for number, line in enumerate(block.split(b"\n"), start=first_line):
        if not line.strip():
            continue
        if row in wanted:
            found[row] = line_record(source.name, line, number, first_ordinal + row + 1)
        row += 1
    if len(found) != len(wanted):
        raise InputError(source.name, None, "the file changed while it was read")
    return [found[row] for row in rows.tolist()]


def _is_gzip(stream: Any) -> bool:
    import gzip

    return isinstance(getattr(stream, "raw", None), gzip.GzipFile)


def _skip(stream: Any, count: int) -> None:
    while count > 0:
        block = stream.read(min(count, 1 << 20))
        if not block:
            raise InputError(str(stream), None, "the file changed while it was read")
        count -= len(block)
