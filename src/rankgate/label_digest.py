"""A query's labels in eight bytes: what a saved baseline keeps so that a later comparison can
tell whether it is scored against the same labels.

A baseline's values were computed with the labels of the day it was saved; labels grow and get
corrected, and a candidate scored against other labels than its baseline shows differences that
are the labels', not the retriever's. The digest is taken of the labels as scoring saw them (after
the label join, the stale-label filter and the document-ID mapping): the set of (document, grade)
pairs, ``relevant_ids`` counting as grade 1 unless ``relevance_scores`` grades the document, as
the validator reads them (``io.validate``). Order and repeats in the record do not change it; any
grade or document does.

It is computed over whole Arrow columns (a chunk of a million labels in a few milliseconds), so
it is a hash built from parts numpy can vectorise: each document ID hashed as a polynomial over
its UTF-8 bytes, each pair mixed with its grade by the SplitMix64 finaliser (Steele, Lea & Flood,
"Fast splittable pseudorandom number generators", OOPSLA 2014), the pairs of a query summed
(mod 2^64, so order does not matter) and mixed once more. It detects change; it is not meant to
resist someone forging labels. 0 means "not known" (a query scored without labels of its own,
such as a missing trace scored 0); a labeled query never gets 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["UNKNOWN", "digest_of", "digests_of_columns"]

UNKNOWN = 0
_MASK = (1 << 64) - 1
_BASE = 0x100000001B3  # the multiplier of the ID polynomial (FNV's 64-bit prime)
_SEED = 0x9E3779B97F4A7C15
_MIX1 = 0xBF58476D1CE4E5B9
_MIX2 = 0x94D049BB133111EB

Digests = npt.NDArray[np.uint64]


# --- one query, in Python (the validator's rows) -------------------------------------------------


def _mix(value: int) -> int:
    value &= _MASK
    value ^= value >> 30
    value = (value * _MIX1) & _MASK
    value ^= value >> 27
    value = (value * _MIX2) & _MASK
    return value ^ (value >> 31)


def _id_hash(document: str) -> int:
    total, power = 0, 1
    for byte in document.encode("utf-8", "surrogatepass"):
        total = (total + (byte + 1) * power) & _MASK
        power = (power * _BASE) & _MASK
    # The length is mixed in after the sum, so no two IDs of different lengths (say "" and
    # "\x00") meet by arithmetic.
    return _mix(_mix(total) + len(document.encode("utf-8", "surrogatepass")))


def _grade_bits(grade: float) -> int:
    return int(np.array([float(grade) + 0.0], dtype=np.float64).view(np.uint64)[0])


def digest_of(grades: Mapping[str, float] | None) -> int:
    """The digest of one query's grades (document -> grade); ``UNKNOWN`` for None."""
    if grades is None:
        return UNKNOWN
    total = 0
    for document, grade in grades.items():
        total = (total + _mix(_id_hash(document) ^ _mix(_grade_bits(grade)))) & _MASK
    return _mix(total ^ _SEED) or 1


# --- whole columns, in numpy ------------------------------------------------------------------


def _vmix(value: Digests) -> Digests:
    value = value ^ (value >> np.uint64(30))
    value = value * np.uint64(_MIX1)
    value = value ^ (value >> np.uint64(27))
    value = value * np.uint64(_MIX2)
    return value ^ (value >> np.uint64(31))


def _id_hashes(ids: Any) -> Digests:
    """``_id_hash`` of every string of an Arrow string array, over its bytes at once."""
    import pyarrow as pa

    ids = ids.cast(pa.large_string()) if ids.type != pa.large_string() else ids
    count = len(ids)
    if not count:
        return np.zeros(0, dtype=np.uint64)
    offsets = np.frombuffer(ids.buffers()[1], dtype=np.int64)[ids.offset : ids.offset + count + 1]
    starts, ends = offsets[:-1], offsets[1:]
    lengths = ends - starts
    buffer = ids.buffers()[2]
    data = (
        np.zeros(0, dtype=np.uint8)
        if buffer is None or offsets[-1] == offsets[0]
        else np.frombuffer(buffer, dtype=np.uint8)[offsets[0] : offsets[-1]]
    )
    longest = int(lengths.max())
    powers = np.empty(max(longest, 1), dtype=np.uint64)
    powers[0] = 1
    if longest > 1:
        powers[1:] = np.uint64(_BASE)
        powers = np.cumprod(powers, dtype=np.uint64)  # wraps mod 2^64, as the Python side does
    owner = np.repeat(np.arange(count), lengths)
    within = np.arange(len(data), dtype=np.int64) - (starts - offsets[0])[owner]
    terms = (data.astype(np.uint64) + np.uint64(1)) * powers[within]
    # Sums per string by differences of a running total (wrapping is exact for sums mod 2^64).
    running = np.concatenate([np.zeros(1, dtype=np.uint64), np.cumsum(terms, dtype=np.uint64)])
    relative = offsets - offsets[0]
    totals = running[relative[1:]] - running[relative[:-1]]
    return _vmix(_vmix(totals) + lengths.astype(np.uint64))


def digests_of_columns(relevant: Any, scores: Any) -> Digests:
    """Per row of Arrow ``relevant_ids`` (list of strings) and ``relevance_scores`` (map string ->
    grade) columns, either of which may be None: ``digest_of`` the grades the validator would read
    from the row (a graded document keeps its grade; repeats count once), ``UNKNOWN`` for a row
    with neither."""
    import pyarrow as pa
    import pyarrow.compute as pc

    def whole(column: Any) -> Any:
        return column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column

    relevant = None if relevant is None else whole(relevant)
    scores = None if scores is None else whole(scores)
    if relevant is None and scores is None:
        raise ValueError("digests need a relevant_ids or a relevance_scores column")
    rows = len(relevant) if relevant is not None else len(scores)
    labeled = np.zeros(rows, dtype=np.bool_)
    parts: list[tuple[Any, Any, Any, int]] = []  # (row of each pair, IDs, grades, priority)
    if scores is not None:
        valid = np.asarray(scores.is_valid().to_numpy(zero_copy_only=False), dtype=np.bool_)
        labeled |= valid
        # A map's offsets index its unsliced key and item children; a null row holds nothing.
        offsets = np.asarray(scores.offsets.to_numpy(), dtype=np.int64)
        lengths = np.where(valid, np.diff(offsets), 0)
        parent = np.repeat(np.arange(rows, dtype=np.int64), lengths)
        taken = np.arange(len(parent), dtype=np.int64) - np.repeat(
            np.cumsum(lengths) - lengths - offsets[:-1], lengths
        )
        at = pa.array(taken, pa.int64())
        parts.append(
            (
                parent,
                scores.keys.take(at),
                scores.items.take(at).fill_null(np.nan).to_numpy(zero_copy_only=False),
                0,
            )
        )
    if relevant is not None:
        labeled |= np.asarray(relevant.is_valid().to_numpy(zero_copy_only=False), dtype=np.bool_)
        ids = pc.list_flatten(relevant)
        parts.append((pc.list_parent_indices(relevant).to_numpy(), ids, np.ones(len(ids)), 1))
    owner = np.concatenate(
        [np.asarray(p[0], dtype=np.int64) for p in parts] or [np.zeros(0, dtype=np.int64)]
    )
    hashes = np.concatenate([_id_hashes(p[1]) for p in parts] or [np.zeros(0, np.uint64)])
    grades = np.concatenate([np.asarray(p[2], dtype=np.float64) for p in parts] or [np.zeros(0)])
    priority = np.concatenate(
        [np.full(len(p[0]), p[3], dtype=np.int8) for p in parts] or [np.zeros(0, np.int8)]
    )
    # One pair per (row, document): the graded one first, then the relevant_ids repeats dropped.
    order = np.lexsort((priority, hashes, owner))
    owner, hashes, grades = owner[order], hashes[order], grades[order]
    first = np.ones(len(order), dtype=np.bool_)
    first[1:] = (owner[1:] != owner[:-1]) | (hashes[1:] != hashes[:-1])
    owner, hashes, grades = owner[first], hashes[first], grades[first]
    bits = (grades + 0.0).view(np.uint64)
    items = _vmix(hashes ^ _vmix(bits))
    running = np.concatenate([np.zeros(1, dtype=np.uint64), np.cumsum(items, dtype=np.uint64)])
    bounds = np.searchsorted(owner, np.arange(rows + 1), side="left")
    totals = running[bounds[1:]] - running[bounds[:-1]]
    digests = _vmix(totals ^ np.uint64(_SEED))
    digests[digests == 0] = 1
    digests[~labeled] = UNKNOWN
    return digests
