"""The compiled path: Arrow columns of IDs -> ``RankedBatch`` -> per-query metric values.

``BatchBuilder`` joins rankings with labels one Python dict at a time; on millions of traces that,
and the Python objects behind it, is where the time goes. Here the same join runs in C
(``rankgate._join``) straight over Arrow buffers, and the metrics that declare a compiled twin
(``native=`` in ``metrics/definitions.py``) are scored in one pass per query. The numpy definitions
remain the reference: tests hold both paths equal on random batches, and any metric without a twin is
computed by its definition over the same ``RankedBatch``.

The module works without the extension too (``available()`` is then False): ``join`` then makes the
same decisions in Python over the same columns, and ``score`` runs the numpy definitions.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from rankgate.batch import BatchBuilder, RankedBatch
from rankgate.spec import MetricSpec

_join: Any
try:
    import rankgate._join as _join
except ImportError:  # built without a C compiler: the pure-Python path still works
    _join = None

__all__ = [
    "ROW_FOR_VALIDATOR",
    "ROW_STATUS",
    "IdColumns",
    "Joined",
    "available",
    "compiled_string_hashes",
    "index_array",
    "index_array_with_nulls",
    "join",
    "join_and_score",
    "mask_array",
    "numpy_filled",
    "numpy_of",
    "score",
]

# What ``join`` decided for each row, by code.
# ROW_FOR_VALIDATOR: an empty ID, or a repeated key in a table's map column; the validator words it.
ROW_SCORED, ROW_UNLABELED, ROW_NO_RELEVANT, ROW_FOR_VALIDATOR = 0, 1, 2, 3
ROW_STATUS = ("scored", "unlabeled", "no_relevant", "for_validator")

# The compiled twins, by the code ``_join.score`` knows them under.
_NATIVE_CODES = {
    ("ndcg", "exponential"): 0,
    ("ndcg", "linear"): 1,
    ("dcg", "exponential"): 2,
    ("dcg", "linear"): 3,
    ("precision", None): 4,
    ("recall", None): 5,
    ("mrr", None): 6,
    ("map", None): 7,
    ("hit_rate", None): 8,
    ("r_precision", None): 9,
    ("judged", None): 10,
}

Ints = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float64]
Flags = npt.NDArray[np.uint8]
_EMPTY_BYTES = np.zeros(0, dtype=np.uint8)


def cut_rankings(texts: Any, lengths: Any) -> tuple[Any, npt.NDArray[np.bool_]] | None:
    """``store.columns.split_rankings`` in C (``_join.cut_rankings``): the same list column and
    unread rows, the IDs copied out in one pass over the text. None without the extension, or
    for a text column of another type (the caller cuts it with pyarrow)."""
    if _join is None:
        return None
    import pyarrow as pa

    wide = pa.types.is_large_string(texts.type)
    if not (wide or pa.types.is_string(texts.type)):
        return None
    count = len(texts)
    width = 8 if wide else 4
    buffers = texts.buffers()
    if buffers[1] is None:
        return None
    offsets = memoryview(buffers[1])[texts.offset * width : (texts.offset + count + 1) * width]
    data = buffers[2] if buffers[2] is not None else b""
    valid = np.ones(count, dtype=np.uint8)
    if texts.null_count:
        valid = numpy_of(texts.is_valid()).astype(np.uint8)
    wanted = np.ascontiguousarray(numpy_filled(lengths, -1), dtype=np.int64)
    list_offsets, value_offsets, values, unread = _join.cut_rankings(
        offsets, data, count, wide, valid, wanted
    )
    pieces = len(value_offsets) // width - 1
    text_type = pa.large_string() if wide else pa.string()
    items = pa.Array.from_buffers(
        text_type, pieces, [None, pa.py_buffer(value_offsets), pa.py_buffer(values)], null_count=0
    )
    kind = pa.large_list(text_type) if wide else pa.list_(text_type)
    ranking = pa.Array.from_buffers(
        kind, count, [None, pa.py_buffer(list_offsets)], null_count=0, children=[items]
    )
    return ranking, np.frombuffer(unread, dtype=np.bool_)


def qrels_columns(data: bytes, max_line: int) -> tuple[Any, Any, Any] | None:
    """The query ID, document ID and grade columns of a qrels file's bytes, as Arrow large
    strings (``_join.qrels_columns``: the file must hold no white space but space, tab, CR and
    LF); None without the extension, or when a line is longer than ``max_line`` bytes or has
    other than four columns."""
    if _join is None:
        return None
    import pyarrow as pa

    bad_line, *buffers = _join.qrels_columns(data, max_line)
    if bad_line:
        return None
    columns = []
    for offsets, values in zip(buffers[::2], buffers[1::2], strict=True):
        rows = len(offsets) // 8 - 1
        columns.append(
            pa.LargeStringArray.from_buffers(rows, pa.py_buffer(offsets), pa.py_buffer(values))
        )
    return columns[0], columns[1], columns[2]


def compiled_string_hashes(strings: Any) -> npt.NDArray[np.uint64] | None:
    """The hash ``store.columns.string_hashes`` defines, of each string of an Arrow string
    column, computed in C; None without the extension (the caller computes it with numpy)."""
    if _join is None:
        return None
    import pyarrow as pa

    wide = pa.types.is_large_string(strings.type)
    if not (wide or pa.types.is_string(strings.type)):
        strings = strings.cast(pa.large_string())
        wide = True
    count = len(strings)
    hashes = np.empty(count, dtype=np.uint64)
    if not count:
        return hashes
    width = 8 if wide else 4
    buffers = strings.buffers()
    offsets = memoryview(buffers[1])[strings.offset * width : (strings.offset + count + 1) * width]
    data = buffers[2] if buffers[2] is not None else b""
    _join.hash_strings(offsets, data, count, wide, hashes)
    return hashes


def available() -> bool:
    """True when the compiled kernels were built (they are optional at install)."""
    return _join is not None


@dataclass(frozen=True, slots=True)
class IdColumns:
    """A column of ID lists in Arrow layout: per row a range of strings, per string a byte range.

    ``valid`` is None when every row has a list; otherwise 1 for rows that have one.
    """

    lists: Ints
    strings: npt.NDArray[np.int32] | Ints  # Arrow's own width: int32 (string) or int64 (large)
    data: npt.NDArray[np.uint8]
    valid: Flags | None = None

    @classmethod
    def from_arrow(cls, array: Any) -> IdColumns:
        """From a ``list<string>`` / ``large_list<large_string>`` (or map keys) Arrow array.

        Offsets are widened to int64; the bytes are not copied.
        """
        lists = numpy_of(array.offsets).astype(np.int64, copy=False)
        child = array.keys if hasattr(array, "keys") else array.values
        strings, data = string_buffers(child)
        valid = None
        if array.null_count:
            valid = numpy_of(array.is_valid()).astype(np.uint8)
        return cls(lists, strings, data, valid)


def numpy_of(array: Any) -> npt.NDArray[Any]:
    """The values of a null-free Arrow array of numbers or booleans, as numpy, read from its
    buffers. (``to_numpy`` and ``np.asarray`` make pyarrow import pandas: 0.2 s of start-up, a
    third of a small run.)"""
    if array.null_count:
        raise ValueError("numpy_of takes arrays without nulls")
    return _buffer_values(array)


def numpy_filled(array: Any, fill: Any) -> npt.NDArray[Any]:
    """``numpy_of`` of an Arrow array (or chunked array) of numbers or booleans, each null as
    ``fill``: ``pc.fill_null`` without its scalar, which makes pyarrow import pandas (0.2-0.4 s
    of a 1M-query compare)."""
    import pyarrow as pa

    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    values = _buffer_values(array)
    if not array.null_count:
        return values
    if isinstance(fill, float) and values.dtype.kind in "iu":
        values = values.astype(np.float64)  # NaN (say) is no integer: as pyarrow's fill casts
    bits = np.unpackbits(np.frombuffer(array.buffers()[0], dtype=np.uint8), bitorder="little")
    valid = bits[array.offset : array.offset + len(array)].view(np.bool_)
    return np.where(valid, values, np.asarray(fill, dtype=values.dtype))


def _buffer_values(array: Any) -> npt.NDArray[Any]:
    import pyarrow.types as pt

    kind = array.type
    start, length = array.offset, len(array)
    data = array.buffers()[1]
    if pt.is_boolean(kind):
        if data is None:
            return np.zeros(0, dtype=np.bool_)
        bits = np.unpackbits(np.frombuffer(data, dtype=np.uint8), bitorder="little")
        return bits[start : start + length].view(np.bool_)
    dtype = np.dtype(kind.to_pandas_dtype())
    if data is None:
        return np.zeros(0, dtype=dtype)
    values: npt.NDArray[Any] = np.frombuffer(data, dtype=dtype)[start : start + length]
    return values


def index_array(indices: Any) -> Any:
    """An int64 Arrow array over a numpy array of row numbers, without a copy. (``pa.array`` of
    anything makes pyarrow import pandas, 0.2 s of start-up: a third of a small run.)"""
    import pyarrow as pa

    held = np.ascontiguousarray(indices, dtype=np.int64)
    return pa.Array.from_buffers(pa.int64(), len(held), [None, pa.py_buffer(held)])


def int32_array(values: Any) -> Any:
    """An int32 Arrow array over a numpy array (a list's or a map's offsets), without
    ``pa.array`` (see ``index_array``)."""
    import pyarrow as pa

    held = np.ascontiguousarray(values, dtype=np.int32)
    return pa.Array.from_buffers(pa.int32(), len(held), [None, pa.py_buffer(held)])


def mask_array(mask: Any) -> Any:
    """A boolean Arrow array over a numpy mask (packed to bits), without ``pa.array`` (which makes
    pyarrow import pandas: 0.4 s of a 1M-query compare, on its reading thread)."""
    import pyarrow as pa

    flags = np.ascontiguousarray(mask, dtype=np.bool_)
    bits = np.packbits(flags, bitorder="little")
    return pa.Array.from_buffers(pa.bool_(), len(flags), [None, pa.py_buffer(bits)])


def index_array_with_nulls(indices: Any) -> Any:
    """``index_array`` with a null where an index is negative (a row that is not there)."""
    import pyarrow as pa

    held = np.ascontiguousarray(indices, dtype=np.int64)
    missing = held < 0
    if not missing.any():
        return index_array(held)
    bits = np.packbits(~missing, bitorder="little")
    return pa.Array.from_buffers(
        pa.int64(),
        len(held),
        [pa.py_buffer(bits), pa.py_buffer(held)],
        null_count=int(np.count_nonzero(missing)),
    )


def text_array(values: Sequence[str]) -> Any:
    """A ``large_string`` Arrow array of Python strings, also when some are not valid UTF-8.

    A JSON escape can put a lone surrogate in an ID; Arrow's conversion refuses it. Such a block
    is stored as its ``surrogatepass`` bytes under the string type (Arrow hashes and compares the
    bytes, never validates them), so joins, pairing and dictionary codes treat it like any other
    ID. Read such arrays back with ``texts_of``.
    """
    import pyarrow as pa

    try:
        return pa.array(values, pa.large_string())
    except (pa.ArrowException, UnicodeError):
        encoded = [value.encode("utf-8", "surrogatepass") for value in values]
        offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum([len(item) for item in encoded], out=offsets[1:])
        return pa.Array.from_buffers(
            pa.large_string(),
            len(encoded),
            [None, pa.py_buffer(offsets.tobytes()), pa.py_buffer(b"".join(encoded))],
        )


def texts_of(array: Any) -> list[str]:
    """The Python strings of an Arrow string array, surrogates from ``text_array`` included."""
    import pyarrow as pa

    try:
        return [str(value) for value in array.to_pylist()]
    except UnicodeError:
        raw = array.cast(pa.large_binary()).to_pylist()
        return [
            value.decode("utf-8", "surrogatepass") if value is not None else "" for value in raw
        ]


def string_buffers(strings: Any) -> tuple[Any, npt.NDArray[np.uint8]]:
    """Offsets and bytes of an Arrow string array, neither copied (the offsets keep their width)."""
    _, offsets_buffer, data_buffer = strings.buffers()[:3]
    large = str(strings.type) in ("large_string", "large_binary")
    width = np.int64 if large else np.int32
    start = strings.offset
    offsets = np.frombuffer(offsets_buffer, dtype=width)[start : start + len(strings) + 1]
    data = _EMPTY_BYTES if data_buffer is None else np.frombuffer(data_buffer, dtype=np.uint8)
    return offsets, data


@dataclass(frozen=True, slots=True)
class Joined:
    """What ``join`` made of a block of rows.

    ``status``, ``duplicates`` and ``forced_zero`` have one entry per row asked for; ``batch`` holds
    the scored rows only, in order. ``forced_zero`` marks scored rows with no relevant label (kept
    under ``empty_relevant="zero"``).
    """

    status: Flags
    duplicates: Ints
    forced_zero: npt.NDArray[np.bool_]
    batch: RankedBatch


class Scratch:
    """Output arrays reused from one ``join`` to the next.

    A block of 65k traces needs about 60 MB of output; fresh arrays each time cost more in page
    faults (the kernel zeroing new pages) than the join itself. The arrays of one call are valid
    until the next call with the same scratch, so a caller keeps one per thread and copies what it
    keeps.
    """

    def __init__(self) -> None:
        self._arrays: dict[str, npt.NDArray[Any]] = {}
        self._parts: list[Scratch] = []

    def array(self, name: str, size: int, dtype: Any) -> npt.NDArray[Any]:
        held = self._arrays.get(name)
        if held is None or len(held) < size:
            held = self._arrays[name] = np.empty(max(size, 1) + size // 4, dtype=dtype)
        return held[:size]

    def part(self, index: int) -> Scratch:
        """The scratch of one part of a block joined in parts at once (see ``join_and_score``)."""
        while len(self._parts) <= index:
            self._parts.append(Scratch())
        return self._parts[index]


def join(
    rows: Ints,
    retrieved: IdColumns,
    relevant: IdColumns | None,
    scores: IdColumns | None,
    score_values: Floats | None,
    *,
    threshold: float,
    skip_no_relevant: bool,
    unique_map_keys: bool,
    scratch: Scratch | None = None,
) -> Joined:
    """Join the rankings of ``rows`` with their labels (into ``scratch``'s arrays when given) (see ``batch.BatchBuilder.add``, the
    reference this must equal): first occurrence of an ID wins, relevant IDs count grade 1, a score
    overrides, unlabeled documents count 0. Rows without any label column are ``unlabeled``; rows
    whose best grade misses ``threshold`` are ``no_relevant`` when ``skip_no_relevant``; with
    ``unique_map_keys``, a row whose scores repeat a key (a table's map column must not, while a JSON
    object may, keeping the last), and any row with an empty ID, are ``for_validator``."""
    rows = np.ascontiguousarray(rows, dtype=np.int64)
    if _join is None:
        return _join_in_python(
            rows,
            retrieved,
            relevant,
            scores,
            score_values,
            threshold=threshold,
            skip_no_relevant=skip_no_relevant,
            unique_map_keys=unique_map_keys,
        )
    n = len(rows)
    retrieved_cap = int((retrieved.lists[rows + 1] - retrieved.lists[rows]).sum()) if n else 0
    label_cap = 0
    for column in (relevant, scores):
        if column is not None and n:
            label_cap += int((column.lists[rows + 1] - column.lists[rows]).sum())
    empty_lists = np.zeros(1, dtype=np.int64)
    no_valid = np.zeros(0, dtype=np.uint8)

    def parts(column: IdColumns | None) -> tuple[Any, Any, Any, Any]:
        if column is None:
            return no_valid, empty_lists, empty_lists, _EMPTY_BYTES
        valid = column.valid
        if valid is None:
            valid = np.ones(len(column.lists) - 1, dtype=np.uint8)
        return valid, column.lists, column.strings, column.data

    space = scratch or Scratch()
    status = space.array("status", n, np.uint8)
    duplicates = space.array("duplicates", n, np.int64)
    forced_zero = space.array("forced_zero", n, np.uint8)
    ranked_offsets = space.array("ranked_offsets", n + 1, np.int64)
    ranked_grades = space.array("ranked_grades", retrieved_cap, np.float64)
    ranked_judged = space.array("ranked_judged", retrieved_cap, np.uint8)
    label_offsets = space.array("label_offsets", n + 1, np.int64)
    label_grades = space.array("label_grades", label_cap, np.float64)
    values = np.zeros(0, dtype=np.float64) if score_values is None else score_values
    scored, ranked, labels = _join.join(
        rows,
        retrieved.lists,
        retrieved.strings,
        retrieved.data,
        *parts(relevant),
        *parts(scores),
        np.ascontiguousarray(values, dtype=np.float64),
        float(threshold),
        int(skip_no_relevant),
        int(unique_map_keys),
        status,
        duplicates,
        forced_zero,
        ranked_offsets,
        ranked_grades,
        ranked_judged,
        label_offsets,
        label_grades,
        None,
    )
    batch = RankedBatch(
        ranked_offsets=ranked_offsets[: scored + 1],
        ranked_grades=ranked_grades[:ranked],
        ranked_judged=ranked_judged[:ranked].view(np.bool_),
        label_offsets=label_offsets[: scored + 1],
        label_grades=label_grades[:labels],
    )
    return Joined(status, duplicates, forced_zero.view(np.bool_), batch)


@dataclass
class Scored:
    """A block of rows joined and scored (``join_and_score``). ``status``, ``duplicates``: per
    row asked for; ``depths`` (distinct IDs ranked) and ``values`` (per metric, 0 for a query with
    no relevant label): per scored row, in order. ``values`` is None when some row is for the
    validator: the caller takes those rows out and asks again."""

    status: Flags
    duplicates: Ints
    depths: Ints
    values: dict[MetricSpec, Floats] | None


# Below this many rows a block is joined and scored by the calling thread alone: handing half
# to a helper costs more than it saves.
PARALLEL_ROWS = 1024
_helper_lock = threading.Lock()
_helper: ThreadPoolExecutor | None = None
# Held while the helper works on a half. A caller that finds it taken (compare scores both sides
# at once, on two threads) does its whole block itself rather than wait for the other's half.
_helper_idle = threading.Semaphore(1)


def _helper_thread() -> ThreadPoolExecutor | None:
    """One thread beside the caller's for the second half of a block, or None on one core."""
    global _helper
    if (os.cpu_count() or 1) < 2:
        return None
    with _helper_lock:
        if _helper is None:
            _helper = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rankgate-score")
        return _helper


def _forget_helper() -> None:
    """In a forked child (Spark's workers, multiprocessing): the parent's thread is not there, and
    work handed to it would wait forever; the child makes its own when it needs one."""
    global _helper, _helper_lock, _helper_idle
    _helper = None
    _helper_lock = threading.Lock()
    _helper_idle = threading.Semaphore(1)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_helper)


def join_and_score(
    rows: Ints,
    retrieved: IdColumns,
    relevant: IdColumns | None,
    scores: IdColumns | None,
    score_values: Floats | None,
    specs: Sequence[MetricSpec],
    defaults: Mapping[str, float],
    *,
    threshold: float,
    skip_no_relevant: bool,
    unique_map_keys: bool,
    scratch: Scratch,
) -> Scored:
    """``join`` then ``score`` over ``rows``, with each query's values forced to 0 where it has no
    relevant label. A large block is cut in two halves joined and scored at once, one on a helper
    thread (the join and the twins run without the GIL): on the JSON Lines path the calling
    thread was the one busy core while the parser's threads waited for it. Each query's values
    depend on its own row alone, so the halves put together equal the whole block scored at once.
    """
    rows = np.ascontiguousarray(rows, dtype=np.int64)
    helper = _helper_thread() if _join is not None and len(rows) >= PARALLEL_ROWS else None
    idle = _helper_idle
    if helper is not None and not idle.acquire(blocking=False):
        helper = None  # busy with another caller's half

    def run(part: Ints, space: Scratch) -> Scored:
        joined = join(
            part,
            retrieved,
            relevant,
            scores,
            score_values,
            threshold=threshold,
            skip_no_relevant=skip_no_relevant,
            unique_map_keys=unique_map_keys,
            scratch=space,
        )
        status = joined.status.copy()
        duplicates = joined.duplicates.copy()
        depths = joined.batch.ranked_lengths  # a fresh array (a difference of offsets)
        if (status == ROW_FOR_VALIDATOR).any():
            return Scored(status, duplicates, depths, None)
        values = score(joined.batch, specs, defaults)
        zero = joined.forced_zero[status == ROW_SCORED]
        if zero.any():
            for column in values.values():
                column[zero] = 0.0
        return Scored(status, duplicates, depths, values)

    if helper is None:
        return run(rows, scratch)

    def run_then_free(part: Ints, space: Scratch) -> Scored:
        try:
            return run(part, space)
        finally:
            idle.release()

    middle = len(rows) // 2
    try:
        later = helper.submit(run_then_free, rows[middle:], scratch.part(1))
    except BaseException:
        idle.release()
        raise
    first = run(rows[:middle], scratch.part(0))
    second = later.result()
    values = None
    if first.values is not None and second.values is not None:
        values = {spec: np.concatenate([first.values[spec], second.values[spec]]) for spec in specs}
    return Scored(
        np.concatenate([first.status, second.status]),
        np.concatenate([first.duplicates, second.duplicates]),
        np.concatenate([first.depths, second.depths]),
        values,
    )


def _texts_of(column: IdColumns | None, row: int) -> list[str] | None:
    """One row's IDs of an ``IdColumns`` as text; None when the row has no list."""
    if column is None or (column.valid is not None and not column.valid[row]):
        return None
    ends = column.strings
    data = column.data
    return [
        bytes(data[int(ends[j]) : int(ends[j + 1])]).decode("utf-8", "surrogatepass")
        for j in range(int(column.lists[row]), int(column.lists[row + 1]))
    ]


def _join_in_python(
    rows: Ints,
    retrieved: IdColumns,
    relevant: IdColumns | None,
    scores: IdColumns | None,
    score_values: Floats | None,
    *,
    threshold: float,
    skip_no_relevant: bool,
    unique_map_keys: bool,
) -> Joined:
    """``join`` without the compiled extension: the same decisions row by row over the same
    columns, with ``batch.BatchBuilder`` (the reference the compiled join equals) building the
    batch. Slow, and only for installs that could not build the extension."""
    n = len(rows)
    status = np.zeros(n, dtype=np.uint8)
    duplicates = np.zeros(n, dtype=np.int64)
    forced_zero = np.zeros(n, dtype=np.bool_)
    builder = BatchBuilder()
    for i, row in enumerate(rows.tolist()):
        ranking = _texts_of(retrieved, row) or []
        if "" in ranking:
            status[i] = ROW_FOR_VALIDATOR
            continue
        listed = _texts_of(relevant, row)
        keys = _texts_of(scores, row)
        if listed is None and keys is None:
            status[i] = ROW_UNLABELED
            continue
        grades = dict.fromkeys(listed or (), 1.0)
        repeated = False
        if keys is not None:
            assert score_values is not None and scores is not None
            first = int(scores.lists[row])
            seen: set[str] = set()
            for j, key in enumerate(keys):
                repeated |= key in seen
                seen.add(key)
                grades[key] = float(score_values[first + j])
        if "" in grades or (repeated and unique_map_keys):
            status[i] = ROW_FOR_VALIDATOR
            continue
        has_relevant = max(grades.values(), default=-1.0) >= threshold
        if not has_relevant and skip_no_relevant:
            status[i] = ROW_NO_RELEVANT
            continue
        duplicates[i] = builder.add(ranking, grades)
        forced_zero[i] = not has_relevant
    return Joined(status, duplicates, forced_zero, builder.build())


def native_code(spec: MetricSpec) -> int | None:
    """The compiled twin of a metric, or None when it has none (its definition then runs)."""
    native = spec.definition.native
    if native is None:
        return None
    variant = spec.param("gain") if native in ("ndcg", "dcg") else None
    return _NATIVE_CODES.get((native, None if variant is None else str(variant)))


def score(
    batch: RankedBatch,
    specs: Sequence[MetricSpec],
    defaults: Mapping[str, float],
    *,
    native: bool = True,
) -> dict[MetricSpec, Floats]:
    """Per-query values of every spec over ``batch``: compiled twins in one pass, the rest (or all,
    when ``native`` is False or the extension is missing) by their numpy definitions.

    A spec under ``unjudged=condensed`` runs its twin over the batch that policy makes
    (``RankedBatch.under_unjudged``), built once, exactly the batch its numpy definition is
    handed. Under ``unjudged=relevant`` (every evaluation's companions, for the unjudged range)
    the twins make each query's arrays under the policy themselves, in C, equal to the bit to
    scoring ``RankedBatch.with_unjudged_relevant``'s batch: that batch, ten bytes per ranked
    document built and read back, was a fifth of the scoring.
    """
    values: dict[MetricSpec, Floats] = {}
    twins: list[tuple[MetricSpec, int, str, float]] = []
    for spec in specs:
        if not native or _join is None:
            break
        code = native_code(spec)
        if code is not None:
            policy, grade = spec.definition.unjudged_policy(dict(spec.params), defaults)
            twins.append((spec, code, policy, grade))
    if twins:
        # Every policy in one pass over the batch: under ``relevant`` (every evaluation's
        # companions, for the unjudged range) and ``condensed`` (compare scores its metrics under
        # all three) the twins make each query's arrays as the policy sees them, in C.
        values.update(_score_policies(batch, twins, defaults))
    for spec in specs:
        if spec not in values:
            values[spec] = spec.compute(batch, defaults)
    return {spec: values[spec] for spec in specs}


#: The policy codes of ``_join.score``, in the order its metrics are passed (grouped by policy).
_POLICY_CODES = {"nonrelevant": 0, "condensed": 1, "relevant": 2}


def _score_twins(
    batch: RankedBatch,
    twins: Sequence[tuple[MetricSpec, int]],
    defaults: Mapping[str, float],
    *,
    unjudged_grade: float | None = None,
    condensed: bool = False,
) -> dict[MetricSpec, Floats]:
    """The compiled twins' values over ``batch`` under one policy: with ``unjudged_grade``, as
    over ``batch.with_unjudged_relevant(unjudged_grade)``, with ``condensed`` as over
    ``batch.condensed()``, else as the batch is."""
    policy = "relevant" if unjudged_grade is not None else "condensed" if condensed else None
    grade = 1.0 if unjudged_grade is None else float(unjudged_grade)
    return _score_policies(
        batch, [(spec, code, policy or "nonrelevant", grade) for spec, code in twins], defaults
    )


def _score_policies(
    batch: RankedBatch,
    twins: Sequence[tuple[MetricSpec, int, str, float]],
    defaults: Mapping[str, float],
) -> dict[MetricSpec, Floats]:
    """The compiled twins' values, each under its unjudged-document policy (and the grade of an
    unjudged document under ``relevant``), in one pass over the queries: each query's arrays as a
    policy sees them (``RankedBatch.under_unjudged``) are made in C, one query at a time, never
    the whole batch (that batch's arrays were a fifth of the scoring)."""
    if not batch.n_queries:
        return {}
    for _, _, policy, _ in twins:
        if policy not in _POLICY_CODES:
            raise ValueError(f"unknown unjudged-document policy {policy!r}")
    # Grouped by policy: the kernel makes a query's arrays again whenever the policy changes.
    twins = sorted(twins, key=lambda twin: (_POLICY_CODES[twin[2]], twin[3]))
    longest = max(int(batch.ranked_lengths.max(initial=0)), int(batch.label_lengths.max(initial=0)))
    if any(policy == "relevant" for _, _, policy, _ in twins):
        # Each unjudged document joins the ideal ranking.
        longest = max(longest, int((batch.ranked_lengths + batch.label_lengths).max(initial=0)))
    # numpy computes the discounts, as the definitions do, so both divide by the same numbers.
    discounts = np.log2(np.arange(longest, dtype=np.float64) + 2.0)
    codes = np.array([code for _, code, _, _ in twins], dtype=np.int32)
    cutoffs = np.array([-1 if s.k is None else s.k for s, _, _, _ in twins], dtype=np.int64)
    rels = np.array([_rel(s, defaults) for s, _, _, _ in twins], dtype=np.float64)
    policies = np.array([_POLICY_CODES[policy] for _, _, policy, _ in twins], dtype=np.int32)
    grades = np.array([grade for _, _, _, grade in twins], dtype=np.float64)
    out = np.empty((len(twins), batch.n_queries), dtype=np.float64)
    _join.score(
        batch.ranked_offsets,
        batch.ranked_grades,
        batch.ranked_judged.view(np.uint8),
        batch.label_offsets,
        batch.label_grades,
        discounts,
        codes,
        cutoffs,
        rels,
        out,
        float("nan"),
        False,
        policies,
        grades,
    )
    return {spec: out[row] for row, (spec, _, _, _) in enumerate(twins)}


def _rel(spec: MetricSpec, defaults: Mapping[str, float]) -> float:
    if not any(p.name == "rel" for p in spec.definition.params):
        return 1.0
    given = dict(spec.params)
    return float(given.get("rel", defaults.get("rel", spec.definition.param("rel").default)))
