"""Object columns of Python cells (a DataFrame built from dicts) as Arrow arrays, in C.

``pandas.DataFrame(records)`` holds each ranking as a list of str and each set of grades as a dict.
pyarrow converts such columns item by item through its generic builders, and infers a struct with a
field per document ID for the dicts; ``rankgate._cells`` converts exactly these two shapes straight
into Arrow buffers (about ten times faster for the rankings). Anything else, or a build without the
extension, returns None and the caller converts the column as before.
"""

from __future__ import annotations

from typing import Any

_cells: Any
try:
    import rankgate._cells as _cells
except ImportError:  # built without a C compiler
    _cells = None

__all__ = ["grade_map_array", "text_list_array"]


def text_list_array(cells: list[Any]) -> Any | None:
    """``cells`` (each None or a list of str) as an Arrow ``list<string>`` array (``large_list<
    large_string>`` past 32-bit offsets); None when a cell is anything else."""
    if _cells is None:
        return None
    converted = _cells.text_lists(cells)
    if converted is None:
        return None
    import pyarrow as pa

    nulls, list_offsets, validity, items, text_offsets, data, wide = converted
    texts = pa.Array.from_buffers(
        pa.large_string() if wide else pa.string(),
        items,
        [None, pa.py_buffer(text_offsets), pa.py_buffer(data)],
        null_count=0,
    )
    kind = pa.large_list(texts.type) if wide else pa.list_(texts.type)
    return pa.Array.from_buffers(
        kind,
        len(cells),
        [_buffer(validity), pa.py_buffer(list_offsets)],
        null_count=nulls,
        children=[texts],
    )


def grade_map_array(cells: list[Any]) -> Any | None:
    """``cells`` (each None or a dict of str -> int, float or None) as an Arrow
    ``map<large_string, int64>`` (every grade an int) or ``map<large_string, double>``; None when a
    cell is anything else or an int does not fit in 64 bits."""
    if _cells is None:
        return None
    converted = _cells.grade_maps(cells)
    if converted is None:
        return None
    import pyarrow as pa

    nulls, map_offsets, validity, entries, key_offsets, keys, values, value_validity, whole = (
        converted
    )
    grade_type = pa.int64() if whole else pa.float64()
    key_array = pa.Array.from_buffers(
        pa.large_string(), entries, [None, pa.py_buffer(key_offsets), pa.py_buffer(keys)], 0
    )
    value_array = pa.Array.from_buffers(
        grade_type, entries, [_buffer(value_validity), pa.py_buffer(values)]
    )
    kind = pa.map_(pa.large_string(), grade_type)
    entries_array = pa.StructArray.from_arrays(
        [key_array, value_array], fields=[kind.key_field, kind.item_field]
    )
    return pa.Array.from_buffers(
        kind,
        len(cells),
        [_buffer(validity), pa.py_buffer(map_offsets)],
        null_count=nulls,
        children=[entries_array],
    )


def _buffer(data: bytes | None) -> Any:
    import pyarrow as pa

    return None if data is None else pa.py_buffer(data)
