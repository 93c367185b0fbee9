"""Relevance grades converted at the edge into the one shape the join reads: a map<large_string,
double> column, whatever the table held.

Grades arrive in three shapes: a map column; a struct column with one field per document ID (what
tables built from dicts hold), converted field by field without a step per row
(``struct_as_map``); and JSON text in a string column, decoded one cell at a time by the
validator's own decoder (``json_text_as_map``). Rows the conversion cannot vouch for are marked
slow, for the validator to word, with the Arrow checks here (``mark_rows_holding``,
``not_utf8``...) that the columnar reader shares.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import numpy.typing as npt

from rankgate.fast import numpy_filled, numpy_of
from rankgate.io import limits
from rankgate.io.validate import MAX_GRADE

__all__ = [
    "convertible_struct",
    "covered_items",
    "entries",
    "entries_or_fields",
    "holds_map",
    "json_text_as_map",
    "mark_bad_grades",
    "mark_rows_holding",
    "not_utf8",
    "struct_as_map",
]


def convertible_struct(kind: Any) -> bool:
    """Whether grades stored as a struct (one field per document ID, as ``Table.from_pylist``,
    ``DataFrame(records)`` and polars make of dicts) can become a map column. Two fields of one
    name would be one key of the record path's dict, and a map inside would need its own check for
    repeated keys: both are left to the record path."""
    names = [kind.field(i).name for i in range(kind.num_fields)]
    return len(set(names)) == len(names) and not holds_map(kind)


def holds_map(kind: Any) -> bool:
    """Whether an Arrow type is, or nests, a map."""
    import pyarrow.types as pt

    if pt.is_map(kind):
        return True
    return any(holds_map(kind.field(i).type) for i in range(kind.num_fields))


def entries_or_fields(scores: Any) -> npt.NDArray[np.int64]:
    """Labels a grades column declares per row, as the validator counts them: a map's entries, or
    for a struct every field of a non-null row (the record path's dict has a key per field, null
    grades included)."""
    import pyarrow as pa

    if pa.types.is_struct(scores.type):
        valid = scores.is_valid()
        present = numpy_of(valid) if len(valid) else np.zeros(0, dtype=np.bool_)
        width: int = scores.type.num_fields
        return present.astype(np.int64) * width
    return entries(scores)


def struct_as_map(scores: Any, slow: npt.NDArray[np.bool_]) -> Any:
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
            struct_as_map(scores.slice(start, most_rows), slow[start : start + most_rows])
            for start in range(0, rows, most_rows)
        ]
        return pa.concat_arrays(parts)
    valid = scores.is_valid()
    present_rows = numpy_of(valid) if rows else np.zeros(0, dtype=np.bool_)
    names = [kind.field(i).name for i in range(width)]
    if any(not name or utf8_length(name) > limits.MAX_ID_BYTES for name in names):
        slow |= present_rows
    children = scores.flatten()  # each field with the row's own nulls and any slice applied
    compiled = _compiled_entries(children, rows, slow)
    if compiled is not None:
        offsets, keys, grades = compiled
        return pa.MapArray.from_arrays(
            pa.array(offsets.astype(np.int32)),
            pa.array(names, pa.large_string()).take(pa.array(keys)),
            pa.array(grades),
            mask=pc.invert(valid),
        )
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


def compiled_number_types() -> list[Any]:
    """The Arrow number types ``_join.struct_entries`` converts, in the order of its codes."""
    import pyarrow as pa

    widths = (8, 16, 32, 64)
    return [
        *(pa.int8(), pa.int16(), pa.int32(), pa.int64()),
        *(getattr(pa, f"uint{bits}")() for bits in widths),
        pa.float32(),
        pa.float64(),
    ]


def _number_codes() -> dict[int, int]:
    """Arrow type ids of the numbers ``_join.struct_entries`` converts, to its codes."""
    return {kind.id: code for code, kind in enumerate(compiled_number_types())}


def _compiled_entries(
    children: list[Any], rows: int, slow: npt.NDArray[np.bool_]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int32], npt.NDArray[np.float64]] | None:
    """The map entries of a struct's flattened fields in one compiled pass (``_join.
    struct_entries``): offsets per row, each entry's field (its index in the struct) and grade.
    Marks ``slow`` the rows holding a value in a field that is not a number, as the field-by-field
    conversion does. None without the extension, or with a field of a number type it does not
    convert (half floats), before marking anything."""
    from rankgate import fast

    if fast._join is None:
        return None
    codes = _number_codes()
    fields: list[tuple[Any, int, Any, int]] = []
    indices: list[int] = []
    others: list[Any] = []
    for index, child in enumerate(children):
        if child.null_count == rows:
            continue
        code = codes.get(child.type.id)
        if code is None:
            import pyarrow as pa

            if pa.types.is_integer(child.type) or pa.types.is_floating(child.type):
                return None
            others.append(child)
            continue
        validity, values = child.buffers()[:2]
        fields.append((validity if child.null_count else None, child.offset, values, code))
        indices.append(index)
    for child in others:
        slow |= numpy_of(child.is_valid())
    offsets, field_of, grades = fast._join.struct_entries(rows, fields)
    positions = np.frombuffer(field_of, dtype=np.int32)
    keys = np.asarray(indices, dtype=np.int32)[positions] if len(indices) else positions
    return (
        np.frombuffer(offsets, dtype=np.int64),
        keys,
        np.frombuffer(grades, dtype=np.float64),
    )


def json_text_as_map(texts: Any, slow: npt.NDArray[np.bool_]) -> tuple[Any, npt.NDArray[np.int64]]:
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
    unreadable = not_utf8(texts)
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
        if (
            "" in value
            or not all(type(number) in number_types for number in numbers)
            or not all(_arrow_text(key) for key in value)
        ):
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


def _arrow_text(key: str) -> bool:
    """Whether a decoded key can be Arrow text: a JSON escape can spell a lone surrogate, which
    UTF-8 cannot hold. Such a row goes to the validator, which words it."""
    if key.isascii():
        return True
    try:
        key.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def entries(lists: Any) -> npt.NDArray[np.int64]:
    """Items per row of a list or map array (0 for a null row)."""
    offsets = numpy_of(lists.offsets).astype(np.int64, copy=False)
    return np.diff(offsets)


def not_utf8(texts: Any) -> npt.NDArray[np.bool_]:
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


def mark_bad_grades(scores: Any, slow: npt.NDArray[np.bool_]) -> None:
    """Rows with a grade that is null, NaN, negative or too large go to the validator."""
    items, base = covered_items(scores, scores.items)
    if not len(items):
        return
    values = numpy_filled(items, np.nan).astype(np.float64, copy=False)
    with np.errstate(invalid="ignore"):
        mark_rows_holding(scores, ~((values >= 0) & (values <= MAX_GRADE)), slow, base)


def covered_items(lists: Any, items: Any) -> tuple[Any, int]:
    """The part of a list or map array's child (``items``: its values, keys or items) that its
    rows cover, and where that part starts in the child. A slice of a larger array (a table cut
    into batches) keeps the whole child: checking all of it for every batch would make reading a
    table quadratic in its size."""
    offsets = numpy_of(lists.offsets)
    start = int(offsets[0]) if len(offsets) else 0
    end = int(offsets[-1]) if len(offsets) else 0
    if start == 0 and end == len(items):
        return items, 0
    return items.slice(start, end - start), start


def mark_rows_holding(
    lists: Any, bad: npt.NDArray[np.bool_], slow: npt.NDArray[np.bool_], base: int = 0
) -> None:
    """Mark slow every row of ``lists`` (a list or map array) that holds a marked child item;
    ``bad`` covers the child from position ``base`` on (see ``covered_items``)."""
    if not bad.any():
        return
    offsets = numpy_of(lists.offsets).astype(np.int64, copy=False)
    positions = np.flatnonzero(bad) + base
    rows = np.searchsorted(offsets, positions, side="right") - 1
    inside = (rows >= 0) & (rows < len(offsets) - 1)
    rows = rows[inside]
    # Only positions that a row actually covers (a sliced array's child holds others too).
    covered = positions[inside] < offsets[rows + 1]
    slow[rows[covered]] = True
