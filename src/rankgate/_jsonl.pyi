# The compiled JSON Lines reader (src/rankgate/_jsonl.c); called only through
# rankgate.io.jsonl_arrow.
#
# parse(data, fields, segment_fields) scans the lines of `data` (split at b"\n" only; blank lines,
# those bytes.strip() empties, give no row) with the GIL released, and returns, for n rows:
#
#   "rows": n
#   "status": uint8[n], 0 = fast (columns hold the Python reader's result), 1 = slow (read the line
#       with the Python reader; the row's columns are empty and null)
#   "line_index": int64[n], the row's line among all lines of `data`, blank ones included, from 0
#   "line_start", "line_end": int64[n], the line's byte range in `data` (end before the b"\n")
#   "query_id_valid": uint8[n]; "query_id_offsets": int64[n + 1]; "query_id_data"
#   "retrieved_lists": int64[n + 1] (into the strings); "retrieved_offsets": int64[m + 1];
#       "retrieved_data"
#   "relevant_valid": uint8[n]; "relevant_lists": int64[n + 1]; "relevant_offsets": int64[k + 1];
#       "relevant_data"
#   "scores_valid": uint8[n]; "scores_entries": int64[n + 1]; "scores_key_offsets": int64[e + 1];
#       "scores_key_data"; "scores_values": float64[e] (repeated keys kept in order: last one wins)
#   "segments": per segment field, (valid uint8[n], offsets int64[n + 1], data)
#
# Every array is a Block in native byte order (all offsets int64): a read-only buffer over the
# memory the parser filled, so nothing is copied; numpy.frombuffer and pyarrow.py_buffer take it
# directly and keep it alive. bytes(block) copies it. A Block's memory goes back to a pool of
# spare buffers when it is freed (at most POOL_LIMIT_BYTES), and the next parse reuses it.
#
# parse_rankings(data, offsets, count, wide) reads each of the `count` values of an Arrow string
# column (`data` and `offsets` its buffers, 64-bit offsets when `wide`) as a ranking in JSON text:
# one row per value, with the same keys as parse's result (only the ranking filled; "line_index" is
# the value's position). A value that is not exactly one JSON array of IDs is a slow row.
#
# line_breaks(data) counts the b"\n" bytes of `data` with the GIL released and gives the index
# of the last one (-1 when there is none).
#
# release() frees the pool's spare buffers and returns the bytes freed; pooled() gives the bytes
# and the number of buffers it holds.
from typing import final

from typing_extensions import Buffer

@final
class Block:
    def __buffer__(self, flags: int, /) -> memoryview: ...
    def __len__(self) -> int: ...

POOL_LIMIT_BYTES: int

def release() -> int: ...
def line_breaks(data: Buffer, /) -> tuple[int, int]: ...
def pooled() -> tuple[int, int]: ...
def parse(
    data: Buffer, fields: tuple[str, str, str, str], segment_fields: tuple[str, ...], /
) -> dict[str, object]: ...
def parse_rankings(
    data: Buffer, offsets: Buffer, count: int, wide: bool, /
) -> dict[str, object]: ...
