"""JSON Lines trace records straight to Arrow columns, by the compiled reader ``rankgate._jsonl``.

Decoding a million lines with ``json`` and validating each record in Python costs far more than
scoring them. ``parse_chunk`` hands a chunk of whole lines to C, which extracts the trace fields of
every ordinary line into Arrow buffers without making a Python object per value. A line the C reader
is not sure about (invalid JSON, a wrong type, an unusual shape such as fields nested under
``input``) comes back flagged in ``slow``; the caller reads that line again with
``json_records.line_record`` and ``validate.validate_record``, which give the exact value or the
exact error. For every other line the columns hold what that Python path would have produced.

The extension is optional (``available()``); without it callers keep to the Python path.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

_jsonl: Any
try:
    import rankgate._jsonl as _jsonl
except ImportError:  # built without a C compiler
    _jsonl = None

__all__ = [
    "ParsedLines",
    "available",
    "parse_chunk",
    "parse_rankings",
    "read_chunks",
    "release",
    "schema",
]

SEGMENT_PREFIX = "segment:"
_BOM = b"\xef\xbb\xbf"
_INT32_MAX = 2**31 - 1
_SCORES_TYPE = pa.map_(pa.large_string(), pa.float64())


def available() -> bool:
    """True when the compiled reader was built (it is optional at install)."""
    return _jsonl is not None


def release() -> int:
    """Hand the scanner's pooled chunk buffers back to the allocator; the bytes freed (0 without
    the compiled reader). Call it once a file is read: a long-lived process should not keep them."""
    return 0 if _jsonl is None else int(_jsonl.release())


@dataclass(frozen=True, slots=True)
class ParsedLines:
    """The non-blank lines of one chunk, one row each, in order.

    ``table`` holds the trace fields of the rows ``slow`` is False for; a slow row has nulls and an
    empty ranking there and must be read by the Python path. ``line`` is each row's 1-based line
    number in the whole input; ``start``/``end`` its byte range in the chunk (``end`` before the
    newline), for reading a slow line again.
    """

    table: pa.RecordBatch
    slow: npt.NDArray[np.bool_]
    line: npt.NDArray[np.int64]
    start: npt.NDArray[np.int64]
    end: npt.NDArray[np.int64]

    def __len__(self) -> int:
        return len(self.slow)


def schema(segment_fields: tuple[str, ...] = ()) -> pa.Schema:
    """The schema of ``ParsedLines.table`` for these segment fields."""
    return pa.schema(
        [
            pa.field("query_id", pa.large_string()),
            pa.field("retrieved_ids", pa.large_list(pa.large_string()), nullable=False),
            pa.field("relevant_ids", pa.large_list(pa.large_string())),
            pa.field("relevance_scores", _SCORES_TYPE),
        ]
        + [pa.field(SEGMENT_PREFIX + name, pa.large_string()) for name in segment_fields]
    )


def parse_chunk(
    data: bytes | bytearray | memoryview,
    fields: tuple[str, str, str, str],
    segment_fields: tuple[str, ...],
    first_line: int,
) -> ParsedLines:
    """Trace columns from ``data``, which holds whole lines of JSON Lines.

    ``fields`` are the top-level keys of query_id, retrieved_ids, relevant_ids and relevance_scores
    (plain keys: a dotted path is not looked up); ``segment_fields`` are keys whose scalar values
    are wanted as text (column ``"segment:" + name``; null when absent, as ``segment_value`` gives
    ``(missing)``). ``first_line`` is the line number of the chunk's first line. The GIL is released
    while the bytes are scanned, so several threads can parse several chunks at once.
    """
    if _jsonl is None:
        raise RuntimeError("rankgate._jsonl was not built; use the Python reader")
    out = _jsonl.parse(data, tuple(fields), tuple(segment_fields))
    rows = int(out["rows"])
    columns = [
        _text(rows, out["query_id_valid"], out["query_id_offsets"], out["query_id_data"]),
        _id_lists(
            rows, None, out["retrieved_lists"], out["retrieved_offsets"], out["retrieved_data"]
        ),
        _id_lists(
            rows,
            out["relevant_valid"],
            out["relevant_lists"],
            out["relevant_offsets"],
            out["relevant_data"],
        ),
        _scores(rows, out),
    ]
    columns += [_text(rows, valid, offsets, text) for valid, offsets, text in out["segments"]]
    table = pa.RecordBatch.from_arrays(columns, schema=schema(tuple(segment_fields)))
    status = np.frombuffer(out["status"], dtype=np.uint8)
    return ParsedLines(
        table=table,
        slow=status.view(np.bool_),  # 0 or 1 only
        line=np.frombuffer(out["line_index"], dtype=np.int64) + first_line,
        start=np.frombuffer(out["line_start"], dtype=np.int64),
        end=np.frombuffer(out["line_end"], dtype=np.int64),
    )


def parse_rankings(texts: pa.Array) -> tuple[pa.Array, npt.NDArray[np.bool_]]:
    """Each value of ``texts`` (an Arrow string column of JSON arrays, such as a store's
    ``retrieved_ids``) as a list of IDs, and which rows the scanner left to the validator: a null,
    or text that is not exactly one array of IDs (the validator words it). The GIL is released
    while the text is scanned."""
    if _jsonl is None:
        raise RuntimeError("rankgate._jsonl was not built; use the Python reader")
    wide = pa.types.is_large_string(texts.type)
    if not (wide or pa.types.is_string(texts.type)):
        raise TypeError(f"expected a string column, not {texts.type}")
    count = len(texts)
    width = 8 if wide else 4
    buffers = texts.buffers()
    offsets = memoryview(buffers[1])[texts.offset * width : (texts.offset + count + 1) * width]
    data: Any = buffers[2] if buffers[2] is not None else b""
    out = _jsonl.parse_rankings(data, offsets, count, wide)
    rows = int(out["rows"])
    rankings = _id_lists(
        rows, None, out["retrieved_lists"], out["retrieved_offsets"], out["retrieved_data"]
    )
    slow = np.frombuffer(out["status"], dtype=np.uint8).view(np.bool_).copy()
    if texts.null_count:
        slow |= ~np.asarray(texts.is_valid())
    return rankings, slow


def _validity(rows: int, flags: bytes | None) -> tuple[Any, int]:
    """Arrow's bit-packed validity bitmap from one flag byte per row (None when nothing is null)."""
    if flags is None:
        return None, 0
    valid = np.frombuffer(flags, dtype=np.uint8)
    nulls = rows - int(np.count_nonzero(valid))
    if nulls == 0:
        return None, 0
    return pa.py_buffer(np.packbits(valid, bitorder="little")), nulls


def _strings(count: int, offsets: bytes, data: bytes) -> pa.Array:
    return pa.Array.from_buffers(
        pa.large_string(), count, [None, pa.py_buffer(offsets), pa.py_buffer(data)], null_count=0
    )


def _text(rows: int, valid: bytes, offsets: bytes, data: bytes) -> pa.Array:
    bitmap, nulls = _validity(rows, valid)
    return pa.Array.from_buffers(
        pa.large_string(),
        rows,
        [bitmap, pa.py_buffer(offsets), pa.py_buffer(data)],
        null_count=nulls,
    )


def _id_lists(
    rows: int, valid: bytes | None, lists: bytes, offsets: bytes, data: bytes
) -> pa.Array:
    items = _strings(len(offsets) // 8 - 1, offsets, data)
    bitmap, nulls = _validity(rows, valid)
    return pa.Array.from_buffers(
        pa.large_list(pa.large_string()),
        rows,
        [bitmap, pa.py_buffer(lists)],
        null_count=nulls,
        children=[items],
    )


def _scores(rows: int, out: dict[str, Any]) -> pa.Array:
    keys = _strings(
        len(out["scores_key_offsets"]) // 8 - 1, out["scores_key_offsets"], out["scores_key_data"]
    )
    values = pa.Array.from_buffers(
        pa.float64(), len(keys), [None, pa.py_buffer(out["scores_values"])], null_count=0
    )
    entries = pa.StructArray.from_arrays(
        [keys, values], fields=[_SCORES_TYPE.key_field, _SCORES_TYPE.item_field]
    )
    # Arrow has no large map: its offsets are int32 whatever the key type.
    offsets = np.frombuffer(out["scores_entries"], dtype=np.int64)
    if offsets[-1] > _INT32_MAX:
        raise ValueError("too many relevance_scores entries in one chunk; use smaller chunks")
    bitmap, nulls = _validity(rows, out["scores_valid"])
    return pa.Array.from_buffers(
        _SCORES_TYPE,
        rows,
        [bitmap, pa.py_buffer(offsets.astype(np.int32))],
        null_count=nulls,
        children=[entries],
    )


def read_chunks(stream: IO[bytes], chunk_bytes: int = 32 << 20) -> Iterator[tuple[bytes, int, int]]:
    """``stream`` in chunks of about ``chunk_bytes`` that end at a line break (or at the end).

    Yields (chunk, line number of its first line, offset of the chunk in the stream). A line longer
    than ``chunk_bytes`` makes a longer chunk: no line is ever split. A UTF-8 byte-order mark at the
    very start is skipped, as the Python reader does (the first chunk's offset then counts it).
    """
    if chunk_bytes < 1:
        raise ValueError("chunk_bytes must be positive")
    head = _read_at_least(stream, len(_BOM))
    offset = len(_BOM) if head.startswith(_BOM) else 0
    line = 1
    # The unfinished tail of the chunk so far, joined only once a line break ends it, so that a
    # very long line costs one copy rather than one per block.
    parts = [head[offset:]]
    while True:
        block = stream.read(chunk_bytes)
        if not block:
            break
        cut = block.rfind(b"\n") + 1
        if cut == 0:
            parts.append(block)
            continue
        parts.append(block[:cut])
        chunk = b"".join(parts)
        yield chunk, line, offset
        line += chunk.count(b"\n")
        offset += len(chunk)
        parts = [block[cut:]]
    tail = b"".join(parts)
    if tail:
        yield tail, line, offset


def _read_at_least(stream: IO[bytes], count: int) -> bytes:
    """The first ``count`` bytes (fewer only at the end), however short the stream's reads are."""
    data = b""
    while len(data) < count:
        more = stream.read(count - len(data))
        if not more:
            break
        data += more
    return data
