"""Sources read as Arrow columns instead of one Python dict per record.

Parquet files, in-memory Arrow/pandas/polars tables, trace stores and JSON Lines files are read as
chunks of normalised Arrow columns (``Chunk``): ``query_id``, ``retrieved_ids``, ``relevant_ids``,
``relevance_scores`` and one ``segment:<field>`` column per segment field. The compiled join then
works on those buffers directly.

The validator (``io/validate.py``) stays the one definition of a valid trace. A chunk marks as
*slow* every row whose meaning the columnar reading cannot be sure of (a null or empty ID, a grade
out of range, a line that is not plain JSON...); the evaluator hands those rows to the validator one
by one, so they get exactly the validator's value or error message, and scores the ones it accepts
with the rest. When a whole source has a shape the columnar reading does not handle (dotted field
paths, rankings as JSON text, a float segment column), ``chunks`` returns None and the evaluator
reads its records one by one through the validator.

Grades in every shape a table holds (map, struct, JSON text) are made a map<large_string, double>
at the edge, by ``io/grades.py``.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from rankgate.errors import InputError, Location
from rankgate.fast import numpy_filled, numpy_of
from rankgate.io import limits
from rankgate.io.bounded import too_long_problem
from rankgate.io.grades import (
    convertible_struct,
    covered_items,
    entries,
    entries_or_fields,
    holds_map,
    json_text_as_map,
    mark_bad_grades,
    mark_rows_holding,
    not_utf8,
    struct_as_map,
)
from rankgate.io.json_records import JsonSource, OversizedLine, line_record
from rankgate.io.tables import ArrowSource, RecordsSource
from rankgate.io.validate import FieldMap, RawRecord

__all__ = ["Chunk", "chunks"]

# The struct conversion under its former name, for callers that reach for it here.
_struct_as_map = struct_as_map

T = TypeVar("T")

# Rows of a table, Parquet file or store scored at once. Measured at 1M traces x 100 IDs
# (2026-12-07): 2,048-row chunks read a Parquet file as fast as 8,192-row ones or faster (5.2 s
# against 5.6 s; the join's arrays stay in cache) and held 60 MB less, 0.1 GB less at 10M traces.
CHUNK_ROWS = 2048
CHUNK_BYTES = 8 << 20
# JSON Lines chunks parsed at once (each parse holds one chunk and its columns in memory).
PARSE_THREADS = min(2, os.cpu_count() or 1)
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
    # For each field asked for by ``presence``: which rows carry a value there (or may: a slow
    # row's fields are unknown until the validator reads it).
    present: dict[str, npt.NDArray[np.bool_]] = field(default_factory=dict)


def chunks(
    source: Any,
    fields: FieldMap,
    segment_fields: Sequence[str],
    *,
    presence: Sequence[str] = (),
) -> Iterator[Chunk] | None:
    """The source as columnar chunks, or None when its records must be read one by one.

    ``presence`` names fields whose presence per row the caller needs (``Chunk.present``)."""
    if any("." in path for path in (*fields.paths(), *segment_fields, *presence)):
        return None
    if set(segment_fields) & set(fields.paths()) or set(presence) & set(fields.paths()):
        return None
    found: Iterator[Chunk] | None = None
    if isinstance(source, RecordsSource):
        as_table = source.as_arrow()
        if as_table is not None:
            found = _arrow_chunks(as_table, fields, segment_fields, presence)
    elif isinstance(source, ArrowSource):
        found = _arrow_chunks(source, fields, segment_fields, presence)
    elif isinstance(source, JsonSource):
        try:
            from rankgate.io import jsonl_arrow
        except ImportError:  # the JSON Lines scanner is not built yet
            return None
        if not jsonl_arrow.available() or not source.is_lines():
            return None
        found = _json_chunks(source, fields, segment_fields, presence)
    return found


# --------------------------------------------------------------------------------------------
# Arrow tables and Parquet files


def _arrow_chunks(
    source: ArrowSource,
    fields: FieldMap,
    segment_fields: Sequence[str],
    presence: Sequence[str],
) -> Iterator[Chunk] | None:
    import pyarrow as pa

    # A source that builds its columns on request (a trace store) says which it can give.
    schema_for = getattr(source, "schema_for", None)
    schema = schema_for(fields, segment_fields) if callable(schema_for) else source.schema()
    if schema is None or not _columnar_schema(schema, fields, segment_fields):
        return None

    wanted = [
        name
        for name in dict.fromkeys([*fields.paths(), *segment_fields, *presence])
        if name in schema.names
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
            struct_as_map(piece, np.zeros(len(piece), dtype=np.bool_)) for piece in column.chunks
        ]
        as_map = pa.chunked_array(pieces, type=pa.map_(pa.large_string(), pa.float64()))
        return table.set_column(index, grades, as_map)

    normalised = getattr(source, "normalised", False)

    def generate() -> Iterator[Chunk]:
        row = 0
        for batch in prefetched(source.batches(CHUNK_ROWS, wanted)):
            if normalised:
                table = _renamed(batch, fields, segment_fields)
                # Labels may come from a labels file, merged per query there and never held to
                # the per-query bound: the validator words that error, as for any other source.
                labels = sum(
                    entries(table.column(name))
                    for name in ("relevant_ids", "relevance_scores")
                    if name in table.schema.names
                )
                slow = np.asarray(labels) > limits.MAX_LABELS_PER_QUERY
                if not slow.shape:
                    slow = np.zeros(batch.num_rows, dtype=np.bool_)
            else:
                verified: frozenset[str] = getattr(source, "verified_columns", frozenset())
                utf8: frozenset[str] = getattr(source, "utf8_columns", frozenset())
                table, slow = _normalised(batch, fields, segment_fields, verified, utf8)
            present = {
                name: (
                    numpy_of(batch.column(name).is_valid()) | slow
                    if name in batch.schema.names
                    else slow.copy()
                )
                for name in presence
            }
            first = row
            raw = _SlowRows(source, first, np.flatnonzero(slow))

            def later(
                rows: npt.NDArray[np.int64], first: int = first
            ) -> Callable[[], list[RawRecord]]:
                picked = rows.astype(np.int32, copy=False)
                return lambda: source.reread(picked.astype(np.int64) + first, as_scored)

            row += batch.num_rows
            yield Chunk(table, slow, first + 1, True, raw, later, row, row, present)

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

    def offer(entry: tuple[bool, Any]) -> bool:
        """Put ``entry`` when there is room; False once the consumer has stopped (a consumer
        that left early never takes another item, so a blocking put would wait forever)."""
        while not stop.is_set():
            try:
                slots.put(entry, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not offer((True, item)):
                    return
            offer((False, None))
        except BaseException as problem:  # handed to the consumer, which re-raises it
            offer((False, problem))

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
    if any(holds_map(kind) for kind in others):
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
        struct = pt.is_struct(scores) and convertible_struct(scores)
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


def _normalised(
    batch: Any,
    fields: FieldMap,
    segment_fields: Sequence[str],
    verified: frozenset[str] = frozenset(),
    utf8: frozenset[str] = frozenset(),
) -> tuple[Any, npt.NDArray[np.bool_]]:
    """A record batch in the normalised columns, and the rows the validator must read.

    ``verified``: columns whose text the compiled scanner wrote (valid UTF-8, no ID past
    ``MAX_ID_BYTES``, no more IDs than ``MAX_IDS_PER_RANKING``): those checks are not repeated
    over them (a store's source names them: ``StoreSource.verified_columns``). ``utf8``: columns
    whose text is known to be valid UTF-8 (a PostgreSQL database in UTF8), the other checks
    made."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = batch.num_rows
    slow = np.zeros(n, dtype=np.bool_)
    names = set(batch.schema.names)

    def column(name: str) -> Any:
        return batch.column(name) if name in names else None

    def id_list(array: Any, required: bool, name: str) -> Any:
        if not (
            pa.types.is_string(array.type.value_type)
            or pa.types.is_large_string(array.type.value_type)
        ):
            array = array.cast(pa.large_list(pa.large_string()))
        if required and array.null_count:
            slow[~numpy_of(array.is_valid())] = True
        if name not in verified:
            _mark_bad_items(array, array.values, slow, utf8=name in utf8)
        return array

    retrieved = id_list(column(fields.retrieved_ids), True, fields.retrieved_ids)
    if fields.retrieved_ids not in verified:
        slow |= entries(retrieved) > limits.MAX_IDS_PER_RANKING
    relevant = column(fields.relevant_ids)
    if relevant is not None:
        relevant = id_list(relevant, False, fields.relevant_ids)
    scores = column(fields.relevance_scores)
    declared = None
    if scores is not None:
        if pa.types.is_string(scores.type) or pa.types.is_large_string(scores.type):
            scores, declared = json_text_as_map(scores, slow)
        else:
            declared = entries_or_fields(scores)
            if pa.types.is_struct(scores.type):
                scores = struct_as_map(scores, slow)
    if scores is not None:
        key = scores.type.key_type
        if not (pa.types.is_string(key) or pa.types.is_large_string(key)):
            key = pa.large_string()  # integer document IDs, as text
        if key != scores.type.key_type or scores.type.item_type != pa.float64():
            # Unsafe only for integers past 2^53, far above MAX_GRADE: those rows go slow below
            # and the validator words the error with the exact value.
            scores = scores.cast(pa.map_(key, pa.float64()), safe=False)
        _mark_bad_items(scores, scores.keys, slow)
        mark_bad_grades(scores, slow)
    labels = sum(counts for counts in (_entries_or_none(relevant), declared) if counts is not None)
    slow |= np.asarray(labels) > limits.MAX_LABELS_PER_QUERY
    query_id = column(fields.query_id)
    if query_id is None:
        query_id = pa.nulls(n, pa.large_string())
    elif not (pa.types.is_string(query_id.type) or pa.types.is_large_string(query_id.type)):
        query_id = query_id.cast(pa.large_string())
    else:
        # An empty ID is an error the validator words.
        slow |= numpy_filled(pc.binary_length(query_id), -1) == 0
    if fields.query_id not in verified:
        slow |= _longer_than(query_id, limits.MAX_ID_BYTES) | not_utf8(query_id)
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
        if name not in verified:
            slow |= not_utf8(values)
        columns[SEGMENT_PREFIX + name] = values
    return pa.record_batch(columns), slow


def _renamed(batch: Any, fields: FieldMap, segment_fields: Sequence[str]) -> Any:
    """A batch of a source whose rows are valid and already in the normalised types (see
    ``ArrowSource.normalised``), under the normalised column names."""
    import pyarrow as pa

    names = set(batch.schema.names)
    columns = {
        "query_id": batch.column(fields.query_id),
        "retrieved_ids": batch.column(fields.retrieved_ids),
    }
    if fields.relevant_ids in names:
        columns["relevant_ids"] = batch.column(fields.relevant_ids)
    if fields.relevance_scores in names:
        columns["relevance_scores"] = batch.column(fields.relevance_scores)
    for name in segment_fields:
        columns[SEGMENT_PREFIX + name] = (
            batch.column(name) if name in names else pa.nulls(batch.num_rows, pa.large_string())
        )
    return pa.record_batch(columns)


def _mark_bad_items(
    lists: Any, items: Any, slow: npt.NDArray[np.bool_], *, utf8: bool = False
) -> None:
    """Rows with a null ID in a list (or map key), an ID past ``MAX_ID_BYTES``, or (unless the
    text is known to be ``utf8``) one that is not UTF-8, go to the validator, which words it.
    (The compiled join sends rows with an empty ID there itself.)"""
    import pyarrow.compute as pc

    items, base = covered_items(lists, items)
    if len(items) and items.null_count:
        mark_rows_holding(lists, numpy_of(pc.is_null(items)), slow, base)
    if len(items):
        mark_rows_holding(lists, _longer_than(items, limits.MAX_ID_BYTES), slow, base)
        if not utf8:
            mark_rows_holding(lists, not_utf8(items), slow, base)


def _entries_or_none(lists: Any) -> npt.NDArray[np.int64] | None:
    return None if lists is None else entries(lists)


def _longer_than(texts: Any, limit: int) -> npt.NDArray[np.bool_]:
    """Which strings of a text array are longer than ``limit`` bytes (a null is not). Mostly none:
    the longest span between two offsets says so in one pass, where the per-string lengths,
    their comparison and the bitmap's expansion took four."""
    import pyarrow as pa
    import pyarrow.compute as pc

    count = len(texts)
    wide = pa.types.is_large_string(texts.type) or pa.types.is_large_binary(texts.type)
    narrow = pa.types.is_string(texts.type) or pa.types.is_binary(texts.type)
    if count and (wide or narrow) and texts.buffers()[1] is not None:
        offsets = np.frombuffer(texts.buffers()[1], dtype=np.int64 if wide else np.int32)
        spans = np.diff(offsets[texts.offset : texts.offset + count + 1])
        # A null's span is usually empty; when it is not, the exact test below decides.
        if int(spans.max()) <= limit:
            return np.zeros(count, dtype=np.bool_)
    return numpy_filled(pc.binary_length(texts), 0) > limit


# --------------------------------------------------------------------------------------------
# JSON Lines


def _json_chunks(
    source: JsonSource,
    fields: FieldMap,
    segment_fields: Sequence[str],
    presence: Sequence[str] = (),
) -> Iterator[Chunk]:
    from rankgate.io import jsonl_arrow

    # A field asked for by presence is scanned as a segment field is (an object there makes the
    # line slow, which is also "present"), and dropped from the table unless it is one.
    extra = [name for name in presence if name not in segment_fields]
    scanned = (*segment_fields, *extra)

    keys = (fields.query_id, fields.retrieved_ids, fields.relevant_ids, fields.relevance_scores)
    names = [
        "query_id",
        "retrieved_ids",
        "relevant_ids",
        "relevance_scores",
        *(SEGMENT_PREFIX + name for name in scanned),
    ]

    def present_of(table: Any, slow: npt.NDArray[np.bool_]) -> dict[str, npt.NDArray[np.bool_]]:
        return {
            name: numpy_of(table.column(SEGMENT_PREFIX + name).is_valid()) | slow
            for name in presence
        }

    def without_extra(table: Any) -> Any:
        if not extra:
            return table
        return table.select(names[: len(names) - len(extra)])

    ordinal = 0

    def parse_piece(piece: Any) -> tuple[bytes | bytearray | memoryview, int, int, Any]:
        if isinstance(piece, OversizedLine):
            # One slow row in place of the line that was read past: a single invalid byte
            # makes the scanner give exactly that, and ``raw`` below words the real problem.
            found = jsonl_arrow.parse_chunk(b"\x00", keys, scanned, piece.line)
            return b"", piece.line, piece.start, (found, piece)
        data, first_line, offset = piece
        found = jsonl_arrow.parse_chunk(data, keys, scanned, first_line)
        # A line that ended inside a chunk may still be longer than a record may be: the
        # validator's path refuses it (``line_record``), so it must not be scored here.
        too_long = (found.end - found.start) > limits.MAX_RECORD_BYTES
        if too_long.any():
            found = replace(found, slow=found.slow | too_long)
        return data, first_line, offset, (found, None)

    def parsed_chunks() -> Iterator[tuple[bytes | bytearray | memoryview, int, int, Any]]:
        # The scanner releases the GIL: PARSE_THREADS chunks are parsed at once, in order, so
        # a consumer with little to do per chunk (compare's first pass) is not held to one core.
        if PARSE_THREADS < 2:
            yield from map(parse_piece, source.line_chunks(CHUNK_BYTES))
            return
        from collections import deque
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(PARSE_THREADS, thread_name_prefix="rankgate-parse") as pool:
            pending: deque[Any] = deque()
            try:
                try:
                    for piece in source.line_chunks(CHUNK_BYTES):
                        pending.append(pool.submit(parse_piece, piece))
                        if len(pending) >= PARSE_THREADS:
                            yield pending.popleft().result()
                except Exception:
                    # A read that fails (a truncated gzip) still hands over the chunks read
                    # before it, so an invalid record there is the error reported, as in order.
                    while pending:
                        yield pending.popleft().result()
                    raise
                while pending:
                    yield pending.popleft().result()
            finally:
                for future in pending:
                    future.cancel()

    try:
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
                    without_extra(table),
                    parsed.slow,
                    ordinal,
                    False,
                    only_record,
                    one_record,
                    source.done(),
                    oversized.start,
                    present_of(table, parsed.slow),
                )
                continue
            table = parsed.table.rename_columns(names)
            first = ordinal
            lines, starts, ends = parsed.line, parsed.start, parsed.end

            def raw(
                index: int,
                data: bytes | bytearray | memoryview = data,
                lines: Any = lines,
                starts: Any = starts,
                ends: Any = ends,
                first: int = first,
            ) -> RawRecord:
                line = bytes(data[int(starts[index]) : int(ends[index])])
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
                without_extra(table),
                parsed.slow,
                first + 1,
                False,
                raw,
                later,
                source.done(),
                offset + len(data),
                present_of(table, parsed.slow),
            )
    finally:
        # The scanner keeps freed chunk buffers for the next parse; once the file is read, hand
        # them back so a long-lived process does not hold up to POOL_LIMIT_BYTES for nothing.
        jsonl_arrow.release()


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
