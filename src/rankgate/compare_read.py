"""Reading the sides of a comparison as Arrow tables, joining their labels, and pairing them.

Each side is read once, through the same columnar reader ``evaluate`` uses (``io.columnar``): its
valid traces become one Arrow table (query ID, ranking, labels, the attributes that segments and
label ages need, and each row's ordinal in the input). Rows the columnar reader is unsure of go to
the validator one by one, so they get the record path's verdict and message. From there every step
is an Arrow or numpy operation over whole columns:

* a query ID twice on one side: the later rows are invalid (``pc.index_in`` finds first rows);
* labels: every source that labels a query must agree (``compare_labels``);
* pairing: candidate rows matched to baseline rows by ``pc.index_in`` on the query IDs.

A record's location is needed only to word an error, so it is read back from the source then.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from rankgate import fast
from rankgate.errors import InputError, Location, UsageError
from rankgate.evaluate import InvalidRecord, Settings
from rankgate.id_index import all_distinct
from rankgate.io import TraceSource, open_source, validate_record
from rankgate.io.columnar import SEGMENT_PREFIX, chunks
from rankgate.io.validate import FieldMap, Trace
from rankgate.segments import MISSING_VALUE, segment_value

__all__ = [
    "HELD_RANKING_BYTES",
    "NotArrowText",
    "Reader",
    "SideTable",
    "held_side",
    "source_name",
    "streamed_side",
]

INVALID_EXAMPLES_KEPT = 10
# Rankings of one side are held in memory up to this many bytes (half of what two sides may hold
# together); past it the side keeps only its query IDs, labels and attributes, and its rankings
# are read again from the source while it is scored (``StreamedSide``), so memory stays bounded
# whatever the input's size, at the price of a second read.
HELD_RANKING_BYTES = 384 << 20
ORDINAL = "__ordinal"
SCORES = "__scores"
RELEVANT = "__relevant"
PROGRESS_EVERY = 4096


class NotArrowText(Exception):
    """A trace holds text that is not valid Unicode (a lone surrogate, which a JSON escape can
    spell and the validator accepts): an Arrow string cannot hold it."""


def _schema(attributes: Sequence[str]) -> Any:
    import pyarrow as pa

    return pa.schema(
        [
            ("query_id", pa.large_string()),
            ("retrieved_ids", pa.large_list(pa.large_string())),
            (RELEVANT, pa.large_list(pa.large_string())),
            (SCORES, pa.map_(pa.large_string(), pa.float64())),
            *((SEGMENT_PREFIX + name, pa.large_string()) for name in attributes),
            (ORDINAL, pa.int64()),
        ]
    )


@dataclass(eq=False)
class SideTable:
    """One side's valid traces as columns, in input order, each query ID once.

    ``table`` columns: ``query_id``, ``retrieved_ids``, the labels as the record gave them
    (``RELEVANT`` list, ``SCORES`` map; both null when unlabeled), ``segment:<field>`` text per
    attribute read, and ``ORDINAL`` (the record's 1-based place in its source).
    """

    name: str
    table: Any
    read: int = 0
    invalid: int = 0
    locate: Callable[[int], Location | str] = field(default=lambda ordinal: f"record {ordinal}")
    #: Whether the rankings were let go (only the validator's rows keep theirs): they are read
    #: again from ``data`` when the side is scored.
    streamed: bool = False
    data: Any = None
    input_format: str | None = None
    attributes: tuple[str, ...] = ()
    loaders: tuple[tuple[int, Any], ...] = ()

    @property
    def queries(self) -> int:
        return int(self.table.num_rows)

    def attribute(self, name: str) -> Any:
        return self.table.column(SEGMENT_PREFIX + name)


def source_name(item: Any, index: int = 0) -> str:
    if isinstance(item, str):
        return item
    name = getattr(item, "name", None)
    if isinstance(name, str):
        return name
    if hasattr(item, "__fspath__"):
        return str(item)
    return "baseline" if index == 0 else f"candidate {index}"


def name_of_labels(labels: Any) -> str:
    """What a labels source is called in counts and reports: its path or name, else "labels"
    (a qrels dict or a table has neither, and is not the baseline)."""
    if isinstance(labels, str) or hasattr(labels, "__fspath__"):
        return str(labels)
    if (
        isinstance(labels, (list, tuple))
        and labels
        and all(isinstance(item, str) or hasattr(item, "__fspath__") for item in labels)
    ):
        return " + ".join(str(item) for item in labels)
    name = getattr(labels, "name", None)
    return name if isinstance(name, str) else "labels"


class Reader:
    """Reads sources into ``SideTable``s, counting invalid records under ``on_invalid="skip"``."""

    def __init__(
        self,
        settings: Settings,
        input_format: str | None,
        attributes: Sequence[str],
        progress: Callable[[str, int, int, int | None], None] | None,
    ) -> None:
        self.settings = settings
        self.input_format = input_format
        self.attributes = list(dict.fromkeys(attributes))
        self.progress = progress
        self.invalid_examples: list[InvalidRecord] = []
        self.extra_read: dict[str, int] = {}
        self.extra_invalid: dict[str, int] = {}

    def invalid(self, problem: InputError) -> None:
        if self.settings.on_invalid == "fail":
            raise problem
        if len(self.invalid_examples) < INVALID_EXAMPLES_KEPT:
            self.invalid_examples.append(
                InvalidRecord(str(problem.location), problem.field, problem.problem)
            )

    def read(self, data: Any, name: str, ahead: Any = None) -> SideTable:
        """``data`` as a side. ``ahead`` (a ``compare_ahead.ScoredAhead``): what the side's valid
        rows are handed to, with their rankings, once the side lets its rankings go."""
        try:
            side = self._read_all(data, name, self.attributes, ahead)
        except BaseException:
            if ahead is not None:
                ahead.spoil("the side could not be read")
            raise
        return self._deduplicated(side)

    def split(self, data: Any, variant_field: str, wanted: list[str]) -> list[SideTable]:
        """Sides from one source, by the value of ``variant_field``: the first wanted value is the
        baseline, the others the candidates (all other values, in order of appearance, if none)."""

        name = source_name(data)
        whole = self._read_all(data, name, [*self.attributes, variant_field])
        # The variants as codes into the distinct values (a null: -1): no per-row comparison
        # with a text, which would make pyarrow import pandas for its scalar.
        variants = whole.attribute(variant_field).combine_chunks()
        encoded = variants.dictionary_encode()
        codes = fast.numpy_filled(encoded.indices, -1).astype(np.int64, copy=False)
        names = [str(text) for text in encoded.dictionary.to_pylist()]
        code_of = {text: code for code, text in enumerate(names)}
        missing_rows = codes < 0
        if MISSING_VALUE in code_of:
            missing_rows |= codes == code_of[MISSING_VALUE]
        unassigned_read = whole.read - whole.table.num_rows
        unassigned_invalid = whole.invalid
        table = whole.table
        if missing_rows.any():
            missing = fast.mask_array(missing_rows)
            ordinals = whole.table.column(ORDINAL).filter(missing).to_pylist()
            for ordinal in ordinals:
                unassigned_read += 1
                unassigned_invalid += 1
                self.invalid(
                    InputError(
                        whole.locate(ordinal), variant_field, "missing (it names the variant)"
                    )
                )
            # Filtered only when rows lack the field: a filter that keeps every row still copies
            # the whole table (0.9 s at 1M traces with their labels).
            table = table.filter(fast.mask_array(~missing_rows))
            codes = codes[~missing_rows]
        firsts = np.unique(codes, return_index=True)[1]
        order = [names[codes[i]] for i in np.sort(firsts)]
        found = ", ".join(order) or "none"
        if not wanted:
            raise UsageError(
                f"name the baseline's value of {variant_field!r} (values found: {found})"
            )
        for value in wanted:
            if value not in order:
                raise UsageError(
                    f"no record has {variant_field} = {value!r} (values found: {found})"
                )
        if len(set(wanted)) != len(wanted):
            raise UsageError(f"a value of {variant_field!r} is named twice: {', '.join(wanted)}")
        chosen = wanted if len(wanted) > 1 else [*wanted, *(v for v in order if v != wanted[0])]
        if len(chosen) < 2:
            raise UsageError(
                f"{name}: only {variant_field} = {wanted[0]!r} was found; nothing to compare with"
            )
        sides = {}
        for value in order:
            rows = table.filter(fast.mask_array(codes == code_of[value]))
            side = SideTable(
                value,
                rows,
                rows.num_rows,
                0,
                whole.locate,
                whole.streamed,
                whole.data,
                whole.input_format,
                whole.attributes,
                whole.loaders,
            )
            sides[value] = self._deduplicated(side)
        if unassigned_read:
            self.extra_read[f"{name} (no {variant_field})"] = unassigned_read
            self.extra_invalid[f"{name} (no {variant_field})"] = unassigned_invalid
        for value in order:
            if value not in chosen:
                self.extra_read[f"{variant_field}={value} (not compared)"] = sides[value].read
        return [sides[value] for value in chosen]

    # -- reading --------------------------------------------------------------------------------

    def _read_all(
        self, data: Any, name: str, attributes: Sequence[str], ahead: Any = None
    ) -> SideTable:
        import pyarrow as pa

        source: TraceSource = open_source(data, self.input_format)
        schema = _schema(attributes)
        pieces: list[Any] = []
        traces: list[tuple[int, Trace]] = []
        loaders: list[tuple[int, Any]] = []
        read = invalid = 0
        held = 0
        streamed = False
        columnar = (
            chunks(source, self.settings.fields, list(attributes)) if fast.available() else None
        )
        if columnar is not None:
            for chunk in columnar:
                table = chunk.table
                n = table.num_rows
                first = chunk.first_ordinal
                loaders.append((first, chunk.later))
                slow = chunk.slow.copy()
                query_ids = table.column("query_id")
                if query_ids.null_count:
                    slow |= ~fast.numpy_of(query_ids.is_valid())
                read += n
                keep = np.flatnonzero(~slow)
                piece = _normalised_piece(table, keep, first, schema, attributes)
                if not streamed:
                    held += piece.column("retrieved_ids").nbytes
                    if held > HELD_RANKING_BYTES:
                        streamed = True
                        if ahead is not None:
                            # The side's rows, scaled up from the share of it read so far.
                            expected = None
                            if source.total and 0 < chunk.done <= source.total:
                                expected = int(read * source.total / chunk.done * 1.05)
                            for kept in pieces:
                                ahead.feed(kept, expected)
                            ahead.feed(piece, expected)
                        pieces = [_without_rankings(kept) for kept in pieces]
                elif ahead is not None:
                    ahead.feed(piece)
                pieces.append(_without_rankings(piece) if streamed else piece)
                for row in np.flatnonzero(slow).tolist():
                    trace = self._validated(chunk.raw(row))
                    if trace is None:
                        invalid += 1
                    else:
                        traces.append((first + row, trace))
                        if ahead is not None:
                            # It joins the table in its place by ordinal, after the others.
                            ahead.spoil("the validator read a row")
                if self.progress is not None:
                    self.progress(name, read, chunk.done, source.total)
        else:
            for raw in source:
                read += 1
                trace = self._validated(raw)
                if trace is None:
                    invalid += 1
                else:
                    traces.append((raw.ordinal, trace))
                if self.progress is not None and read % PROGRESS_EVERY == 0:
                    self.progress(name, read, source.done(), source.total)
        if self.progress is not None:
            self.progress(name, read, source.done(), source.total)
        if traces:
            try:
                pieces.append(_trace_piece(traces, schema, attributes))
            except UnicodeEncodeError:
                raise NotArrowText from None
        table = pa.Table.from_batches([], schema) if not pieces else pa.concat_tables(pieces)
        if traces and pieces:
            order = np.argsort(fast.numpy_of(table.column(ORDINAL).combine_chunks()), kind="stable")
            table = table.take(order)
        # Locations are needed only to word an error: those of validated rows are kept, the
        # others found on demand.
        locations: dict[int, Location | str] = {}

        def locate(ordinal: int) -> Location | str:
            known = locations.get(ordinal)
            if known is not None:
                return known
            for location_of in _locators(loaders, data, self.input_format):
                found = location_of(ordinal)
                if found is not None:
                    locations[ordinal] = found
                    return found
            return f"{name} record {ordinal}"

        side = SideTable(
            name,
            table,
            read,
            invalid,
            locate,
            streamed,
            data,
            self.input_format,
            tuple(attributes),
            tuple(loaders),
        )
        for ordinal, trace in traces:
            locations[ordinal] = trace.location
        return side

    def _validated(self, raw: Any) -> Trace | None:
        try:
            return validate_record(raw, self.settings.fields, require_query_id=True)
        except InputError as problem:
            self.invalid(problem)
            return None

    def _deduplicated(self, side: SideTable) -> SideTable:
        """The side without later rows of a query ID it already has (each one invalid)."""
        import pyarrow.compute as pc

        ids = side.table.column("query_id")
        if side.table.num_rows == 0:
            return side
        if all_distinct(ids):
            return side
        first = fast.numpy_of(pc.index_in(ids, value_set=ids).combine_chunks())
        repeated = first != np.arange(len(first))
        if not repeated.any():
            return side
        ordinals = fast.numpy_of(side.table.column(ORDINAL).combine_chunks())
        id_list = ids.take(np.flatnonzero(repeated)).to_pylist()
        for row, query_id in zip(np.flatnonzero(repeated).tolist(), id_list, strict=True):
            self.invalid(
                InputError(
                    side.locate(int(ordinals[row])),
                    self.settings.fields.query_id,
                    f"query {query_id!r} appears twice in {side.name} "
                    f"(first at {side.locate(int(ordinals[first[row]]))})",
                )
            )
        kept = side.table.filter(~repeated)
        return replace(side, table=kept, invalid=side.invalid + int(repeated.sum()))


def _locators(
    loaders: list[tuple[int, Any]], data: Any, input_format: str | None
) -> Iterable[Callable[[int], Location | None]]:
    """Ways to find a record's location by ordinal, cheapest first: the chunk's loader (reads the
    rows back), else one pass over the source."""
    import bisect

    starts = [first for first, _ in loaders]

    def by_chunk(ordinal: int) -> Location | None:
        at = bisect.bisect_right(starts, ordinal) - 1
        if at < 0:
            return None
        first, later = loaders[at]
        try:
            (raw,) = later(np.array([ordinal - first], dtype=np.int64))()
        except Exception:  # a loader that cannot re-read: fall back to a pass over the source
            return None
        location: Location = raw.location
        return location

    def by_pass(ordinal: int) -> Location | None:
        for raw in open_source(data, input_format):
            if raw.ordinal == ordinal:
                return raw.location
        return None

    if loaders:
        yield by_chunk
    yield by_pass


def _normalised_piece(
    table: Any, keep: npt.NDArray[np.int64], first: int, schema: Any, attributes: Sequence[str]
) -> Any:
    import pyarrow as pa

    n = len(keep)
    names = table.schema.names
    picked = table.take(fast.index_array(keep)) if n != table.num_rows else table

    def column(name: str, kind: Any) -> Any:
        if name not in names:
            return pa.nulls(n, kind)
        values = picked.column(name)
        return values if values.type == kind else values.cast(kind)

    arrays = [
        column("query_id", pa.large_string()),
        column("retrieved_ids", pa.large_list(pa.large_string())),
        column("relevant_ids", pa.large_list(pa.large_string())),
        column("relevance_scores", pa.map_(pa.large_string(), pa.float64())),
        *(column(SEGMENT_PREFIX + name, pa.large_string()) for name in attributes),
        fast.index_array(keep + first),
    ]
    return pa.Table.from_arrays(
        [a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a for a in arrays],
        schema=schema,
    )


def _without_rankings(piece: Any) -> Any:
    import pyarrow as pa

    index = piece.schema.get_field_index("retrieved_ids")
    kind = piece.schema.field(index).type
    return piece.set_column(index, "retrieved_ids", pa.nulls(piece.num_rows, kind))


def _trace_piece(traces: list[tuple[int, Trace]], schema: Any, attributes: Sequence[str]) -> Any:
    """Validated traces as rows of the side's table; their merged grades become the scores."""
    import pyarrow as pa

    columns: dict[str, list[Any]] = {
        "query_id": [trace.query_id for _, trace in traces],
        "retrieved_ids": [trace.retrieved_ids for _, trace in traces],
        RELEVANT: [None] * len(traces),
        SCORES: [None if t.grades is None else list(t.grades.items()) for _, t in traces],
    }
    for name in attributes:
        columns[SEGMENT_PREFIX + name] = [
            _attribute_text(trace.attributes, name) for _, trace in traces
        ]
    columns[ORDINAL] = [ordinal for ordinal, _ in traces]
    return pa.table(columns, schema=schema)


def _attribute_text(attributes: dict[str, Any], name: str) -> str | None:
    value = segment_value(attributes, name)
    return None if value == MISSING_VALUE and name not in attributes else value


def held_side(side: SideTable, table: Any) -> Any:
    """A source for ``evaluate``: ``table``, rows of ``side`` that kept their rankings, with the
    shared labels and the segment attributes (every row valid: see ``ArrowSource.normalised``)."""
    from rankgate.io.tables import ArrowSource

    class HeldSide(ArrowSource):
        normalised = True

    return HeldSide(side.name, table=table, total=table.num_rows)


# --- a side read again while it is scored ---------------------------------------------------------


def streamed_side(side: SideTable, rows: Any, meta: Any, fields: FieldMap) -> Any:
    """A source for ``evaluate``: the rows of ``side`` at ``rows`` (a slice of its table, in input
    order), with ``meta``'s columns (query ID, the shared labels, the segment attributes, one row
    per row of ``rows``) and each row's ranking read again from the side's source, chunk by chunk.
    """
    from rankgate.io.tables import ArrowSource

    class StreamedSide(ArrowSource):
        normalised = True  # rows read and validated on the first pass

        def __init__(self) -> None:
            super().__init__(side.name, total=meta.num_rows)
            self.ordinals = fast.numpy_of(rows.column(ORDINAL).combine_chunks()).astype(np.int64)
            held = rows.column("retrieved_ids").combine_chunks()
            valid = fast.numpy_of(held.is_valid()) if len(held) else np.zeros(0, np.bool_)
            # Rows the validator read on the first pass keep their ranking (they are few).
            self.held = {int(self.ordinals[i]): held[int(i)].as_py() for i in np.flatnonzero(valid)}

        def schema(self) -> Any:
            import pyarrow as pa

            return meta.schema.append(
                pa.field(fields.retrieved_ids, pa.large_list(pa.large_string()))
            )

        def batches(self, rows_per_batch: int = 0, columns: list[str] | None = None) -> Any:
            import pyarrow as pa

            kind = pa.large_list(pa.large_string())
            position = 0
            source = open_source(side.data, side.input_format)
            # Only the rankings are taken from this read: a store need not read its labels
            # table again (the whole of it, for each side split from one store).
            if hasattr(source, "join_labels"):
                source.join_labels = False
            found = chunks(source, fields, list(side.attributes))
            if found is None:
                raise InputError(side.name, None, "cannot be read again as columns")
            for chunk in found:
                first, n = chunk.first_ordinal, chunk.table.num_rows
                stop = int(np.searchsorted(self.ordinals, first + n, side="left"))
                if stop == position:
                    continue
                at = self.ordinals[position:stop] - first
                rankings = chunk.table.column("retrieved_ids")
                if rankings.type != kind:
                    rankings = rankings.cast(kind)
                if int(at[-1]) - int(at[0]) + 1 == len(at):  # a run of rows: no copy
                    picked = rankings.slice(int(at[0]), len(at))
                else:
                    picked = rankings.take(fast.index_array(at))
                ordinals = self.ordinals[position:stop]
                if self.held and not self.held.keys().isdisjoint(ordinals.tolist()):
                    values = picked.to_pylist()
                    for i, ordinal in enumerate(ordinals.tolist()):
                        if ordinal in self.held:
                            values[i] = self.held[ordinal]
                    picked = pa.array(values, kind)
                table = meta.slice(position, stop - position).append_column(
                    fields.retrieved_ids, picked
                )
                if columns is not None:
                    table = table.select(columns)
                self._rows_done = stop
                yield from table.to_batches(max_chunksize=rows_per_batch or None)
                position = stop
            if position != len(self.ordinals):
                raise InputError(
                    side.name, None, "changed while it was read (records are missing now)"
                )

        def reread(self, positions: Any, prepare: Callable[[Any], Any] | None = None) -> Any:
            """The rows as ready traces (their first-pass records, with the shared labels and
            the attributes the comparison gave them): the validator passes a trace through."""
            from rankgate.compare_labels import label_grades
            from rankgate.io.validate import RawRecord

            wanted = np.asarray(positions, dtype=np.int64)
            records = []
            for position in wanted.tolist():
                ordinal = int(self.ordinals[position])
                raw = _raw_record(side, ordinal)
                row = meta.slice(position, 1).to_pylist()[0]
                grades = label_grades(
                    {
                        RELEVANT: row.get(fields.relevant_ids),
                        SCORES: row.get(fields.relevance_scores),
                    }
                )
                labeled = (
                    row.get(fields.relevant_ids) is not None
                    or row.get(fields.relevance_scores) is not None
                )
                attributes = {
                    name: value
                    for name, value in row.items()
                    if name not in fields.paths() and value is not None
                }
                ranking = self.held.get(ordinal)
                if ranking is None:
                    ranking = validate_record(raw, fields).retrieved_ids
                trace = Trace(
                    raw.location,
                    row[fields.query_id],
                    ranking,
                    grades if labeled else None,
                    attributes,
                )
                records.append(RawRecord(raw.location, trace, position + 1))
            return records

    return StreamedSide()


def _raw_record(side: SideTable, ordinal: int) -> Any:
    """The side's record with this ordinal, read again from its source."""
    import bisect

    starts = [first for first, _ in side.loaders]
    at = bisect.bisect_right(starts, ordinal) - 1
    if at >= 0:
        first, later = side.loaders[at]
        (raw,) = later(np.array([ordinal - first], dtype=np.int64))()
        return raw
    for raw in open_source(side.data, side.input_format):
        if raw.ordinal == ordinal:
            return raw
    raise InputError(side.name, None, f"record {ordinal} is gone (the source changed)")
