"""The labels of a comparison: every source that labels a query (a labels source, any side) must
agree, and each side is scored with the shared labels.

Sources are added in order; each one's labeled rows are matched to the queries already known by
``pc.index_in``, and rows spelled alike (same relevant IDs, same scores in the same order) agree
without a look at Python objects. Only rows spelled differently are compared as the validator
merges them, and the first that really differs is an ``InputError`` naming the query and both
places.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from rankgate import fast
from rankgate.compare_read import (
    ORDINAL,
    RELEVANT,
    SCORES,
    NotArrowText,
    Reader,
    SideTable,
    name_of_labels,
)
from rankgate.errors import InputError, Location
from rankgate.evaluate import Settings
from rankgate.id_index import IdIndex, all_distinct
from rankgate.io.columnar import SEGMENT_PREFIX
from rankgate.labels import QueryLabels, gather_labels

__all__ = ["LabelBook", "label_grades"]

# Labels of this many queries are compared at a time.
COMPARED_PER_BLOCK = 65_536


@dataclass(eq=False)
class _LabelSource:
    name: str
    table: Any  # query_id, RELEVANT, SCORES, stamp text, ORDINAL (labeled rows only)
    locate: Callable[[int], Location | str]


class LabelBook:
    """Each query's labels, from whichever sources carry them; every source must agree.

    ``shared`` is one row per labeled query (the first source's labels), in the sides' columns,
    for ``take``-ing onto any side by ``pc.index_in`` of its query IDs.
    """

    def __init__(self, settings: Settings, stamp: str | None) -> None:
        self.settings = settings
        self.stamp = stamp
        self.sources: list[_LabelSource] = []
        self.shared: Any = None
        # The shared table's query IDs by hash, with the table they index (built once for all
        # the blocks that ask, again when the table grows).
        self._shared_index: tuple[Any, IdIndex] | None = None

    def add_labels_source(
        self, data: Any, reader: Reader, labels_format: str | None = None
    ) -> None:
        """Labels from a label file (one judgment or one query per record), qrels or a store."""

        name = name_of_labels(data)
        labels, readings = gather_labels(
            data,
            fields=self.settings.fields,
            # The traces' --input-format says nothing of the label file's: it has its own
            # (detected by default: qrels by layout, the rest by name or first bytes).
            input_format=labels_format,
            on_invalid=self.settings.on_invalid,
            label_source=self.settings.label_source,
        )
        for source, reading in readings.items():
            reader.extra_read[f"{source} (labels)"] = reading.records
            reader.extra_invalid[f"{source} (labels)"] = reading.skipped.get("invalid", 0)
        stamps = [found.labeled_at() for found in labels.values()]
        try:
            table = self._labels_table(labels, stamps)
        except UnicodeEncodeError:
            raise NotArrowText from None
        self._add(_LabelSource(name, table, lambda ordinal: name))

    @staticmethod
    def _labels_table(labels: dict[str, QueryLabels], stamps: list[Any]) -> Any:
        import pyarrow as pa

        return pa.table(
            {
                "query_id": fast.text_array(list(labels)),
                RELEVANT: pa.nulls(len(labels), pa.large_list(pa.large_string())),
                SCORES: pa.MapArray.from_arrays(
                    pa.array(
                        np.cumsum([0, *(len(found.grades) for found in labels.values())]),
                        pa.int32(),
                    ),
                    fast.text_array(
                        [document for found in labels.values() for document in found.grades]
                    ),
                    pa.array(
                        [grade for found in labels.values() for grade in found.grades.values()],
                        pa.float64(),
                    ),
                ),
                "stamp": pa.array(
                    [None if s is None else _stamp_text(s) for s in stamps], pa.large_string()
                ),
                ORDINAL: pa.array(np.arange(1, len(labels) + 1), pa.int64()),
            }
        )

    def add_side(self, side: SideTable) -> None:
        import pyarrow as pa
        import pyarrow.compute as pc

        table = side.table
        labeled = pc.or_(pc.is_valid(table.column(RELEVANT)), pc.is_valid(table.column(SCORES)))
        stamp = (
            table.column(SEGMENT_PREFIX + self.stamp)
            if self.stamp is not None and SEGMENT_PREFIX + self.stamp in table.schema.names
            else pa.nulls(table.num_rows, pa.large_string())
        )
        rows = pa.table(
            {
                "query_id": table.column("query_id"),
                RELEVANT: table.column(RELEVANT),
                SCORES: table.column(SCORES),
                "stamp": stamp,
                ORDINAL: table.column(ORDINAL),
            }
        )
        # Views of the side's own columns when every row is labeled (a replayed, annotated query
        # set): a filter would copy every label of a side that may hold millions of queries.
        if not pc.all(labeled).as_py():
            rows = rows.filter(labeled)
        self._add(_LabelSource(side.name, rows, side.locate))

    def _add(self, source: _LabelSource) -> None:
        import pyarrow as pa

        if self.shared is None or self.shared.num_rows == 0:
            self.sources.append(source)
            self.shared = _first_per_query(self._tagged(source))
            return
        # The shared table's index: built once, and kept for ``labels_for`` while no later
        # source adds a query.
        known = self._shared_rows(source.table.column("query_id"))[1]
        both = np.flatnonzero(known >= 0)
        # In blocks, so that the labels compared are copied a block at a time, and by slices where
        # both sources list the queries in the same order (a replay of one query set does).
        for start in range(0, len(both), COMPARED_PER_BLOCK):
            rows = both[start : start + COMPARED_PER_BLOCK]
            differing = _differing(_rows(self.shared, known[rows]), _rows(source.table, rows))
            if len(differing):
                row = int(rows[differing[0]])
                self._conflict(source, row, int(known[row]))
        self.sources.append(source)
        # Only the queries no earlier source labels are added; the shared rows are kept as they
        # are (concatenating chunks copies nothing, while a filter of the whole would copy them).
        unknown = known < 0
        if unknown.any():
            fresh = _first_per_query(self._tagged(source).filter(fast.mask_array(unknown)))
            self.shared = pa.concat_tables([self.shared, fresh])

    def _tagged(self, source: _LabelSource) -> Any:
        import pyarrow as pa

        index = len(self.sources) - 1
        return source.table.append_column(
            "source", fast.index_array(np.full(source.table.num_rows, index)).cast(pa.int32())
        )

    def _conflict(self, source: _LabelSource, row: int, known_row: int) -> None:
        known = self.shared.slice(known_row, 1).to_pylist()[0]
        new = source.table.slice(row, 1).to_pylist()[0]
        first = self.sources[known["source"]]
        raise InputError(
            source.locate(new[ORDINAL]),
            self.settings.fields.relevance_scores,
            f"query {new['query_id']!r} is labeled differently at "
            f"{first.locate(known[ORDINAL])} ({_describe(label_grades(known))} vs "
            f"{_describe(label_grades(new))})",
        )

    def labels_for(self, query_ids: Any, own: Any = None) -> tuple[Any, Any, Any]:
        """The shared labels of each of ``query_ids`` (relevant IDs, scores, stamps; nulls for a
        query no source labels).

        ``own``: the rows' own table, whose labels are used as they are when no row needs another
        source's (every source that labels a query agrees, so a row's own labels score the same):
        no copy of them then. Label ages (stamps) always come from the shared table.
        """
        import pyarrow as pa
        import pyarrow.compute as pc

        n = len(query_ids)
        if own is not None and self.stamp is None:
            unlabeled = pc.invert(
                pc.or_(pc.is_valid(own.column(RELEVANT)), pc.is_valid(own.column(SCORES)))
            )
            missing = own.column("query_id").filter(unlabeled)
            known = self.shared is not None and self.shared.num_rows > 0
            if not len(missing) or not (known and bool((self._shared_rows(missing)[1] >= 0).any())):
                return (
                    own.column(RELEVANT),
                    own.column(SCORES),
                    pa.nulls(n, pa.large_string()),
                )
        if self.shared is None or self.shared.num_rows == 0:
            return (
                pa.nulls(n, pa.large_list(pa.large_string())),
                pa.nulls(n, pa.map_(pa.large_string(), pa.float64())),
                pa.nulls(n, pa.large_string()),
            )
        shared, at = self._shared_rows(query_ids)
        picked = shared.take(fast.index_array_with_nulls(at))
        return (picked.column(RELEVANT), picked.column(SCORES), picked.column("stamp"))

    def _shared_rows(self, query_ids: Any) -> tuple[Any, npt.NDArray[np.int64]]:
        """The shared table, and each ID's row in it (-1 for none)."""
        shared = self.shared
        cached = self._shared_index
        if cached is None or cached[0] is not shared:
            cached = (shared, IdIndex(shared.column("query_id")))
            self._shared_index = cached
        return shared, cached[1].find(query_ids)


def _rows(table: Any, rows: npt.NDArray[np.int64]) -> Any:
    """``table``'s rows at ``rows``: a slice when they are consecutive, else a take."""

    if len(rows) and bool(np.all(np.diff(rows) == 1)):
        return table.slice(int(rows[0]), len(rows))
    return table.take(fast.index_array(rows))


def _first_per_query(table: Any) -> Any:
    import pyarrow.compute as pc

    ids = table.column("query_id")
    if all_distinct(ids):  # a side's own rows, repeats already taken out
        return table
    first = fast.numpy_of(pc.index_in(ids, value_set=ids).combine_chunks())
    keep = first == np.arange(len(first))
    return table if keep.all() else table.filter(keep)


def _differing(known: Any, new: Any) -> npt.NDArray[np.int64]:
    """Rows (positions) where two aligned label tables give a query different grades. Rows
    spelled alike (same relevant IDs, same scores in the same order) are equal without looking
    further; the rest are compared as the validator merges them (relevant IDs grade 1 unless
    scored)."""
    same = _same_lists(known.column(RELEVANT), new.column(RELEVANT)) & _same_maps(
        known.column(SCORES), new.column(SCORES)
    )
    suspects = np.flatnonzero(~same)
    if not len(suspects):
        return suspects
    import pyarrow as pa

    before = known.take(pa.array(suspects)).to_pylist()
    after = new.take(pa.array(suspects)).to_pylist()
    differ = [
        i
        for i, (a, b) in enumerate(zip(before, after, strict=True))
        if label_grades(a) != label_grades(b)
    ]
    return suspects[np.array(differ, dtype=np.int64)]


def _same_lists(a: Any, b: Any) -> npt.NDArray[np.bool_]:
    """Per row: both null, or both lists with the same items in the same order."""
    a, b = _combined(a), _combined(b)
    valid_a, valid_b = fast.numpy_of(a.is_valid()), fast.numpy_of(b.is_valid())
    lengths_a, lengths_b = _lengths(a), _lengths(b)
    same: npt.NDArray[np.bool_] = (valid_a == valid_b) & (lengths_a == lengths_b)
    return same & _same_items(a, b, lengths_a, same, lambda x: x.flatten())


def _same_maps(a: Any, b: Any) -> npt.NDArray[np.bool_]:
    """Per row: both null, or both maps with the same entries in the same order."""
    a, b = _combined(a), _combined(b)
    valid_a, valid_b = fast.numpy_of(a.is_valid()), fast.numpy_of(b.is_valid())
    lengths_a, lengths_b = _lengths(a), _lengths(b)
    same: npt.NDArray[np.bool_] = (valid_a == valid_b) & (lengths_a == lengths_b)
    same &= _same_items(a, b, lengths_a, same, lambda x: _map_part(x, x.keys))
    return same & _same_items(a, b, lengths_a, same, lambda x: _map_part(x, x.items))


def _map_part(array: Any, part: Any) -> Any:
    """A map array's keys or items, only those its rows hold (its children may hold more)."""
    import pyarrow as pa

    return pa.ListArray.from_arrays(array.offsets, part).flatten()


def _lengths(values: Any) -> npt.NDArray[np.int64]:
    """Entries per row of a list or map array (0 for a null row)."""
    offsets = fast.numpy_of(values.offsets).astype(np.int64)
    lengths = np.diff(offsets)
    if values.null_count:
        lengths[~fast.numpy_of(values.is_valid())] = 0
    return lengths


def _same_items(
    a: Any,
    b: Any,
    lengths: npt.NDArray[np.int64],
    candidates: npt.NDArray[np.bool_],
    items_of: Callable[[Any], Any],
) -> npt.NDArray[np.bool_]:
    """Per row (among ``candidates``, whose lengths agree): the items are equal in order."""
    import pyarrow.compute as pc

    rows = np.flatnonzero(candidates & (lengths > 0))
    result = np.ones(len(lengths), dtype=np.bool_)
    if not len(rows):
        return result
    if len(rows) == len(lengths):  # every row (an annotated replay): no copy of either side
        values_a, values_b = items_of(a), items_of(b)
    else:
        values_a = items_of(a.take(fast.index_array(rows)))
        values_b = items_of(b.take(fast.index_array(rows)))
    equal = fast.numpy_filled(pc.equal(values_a, values_b), False)
    counts = lengths[rows]
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    all_equal = np.logical_and.reduceat(equal, starts) if len(equal) else np.ones(0, np.bool_)
    result[rows] = all_equal
    return result


def _combined(values: Any) -> Any:
    import pyarrow as pa

    return values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values


def label_grades(row: dict[str, Any]) -> dict[str, float]:
    """A label row's grades as the validator merges them: relevant IDs grade 1 unless scored."""
    grades = {doc: 1.0 for doc in row.get(RELEVANT) or ()}
    grades.update(dict(row.get(SCORES) or ()))
    return grades


def _describe(grades: dict[str, float]) -> str:
    shown = ", ".join(f"{doc}: {grade:g}" for doc, grade in list(grades.items())[:4])
    more = ", ..." if len(grades) > 4 else ""
    return "{" + shown + more + "}"


def _stamp_text(value: Any) -> str:
    isoformat = getattr(value, "isoformat", None)
    return str(isoformat()) if callable(isoformat) else str(value)
