"""Telling, without a document-ID mapping, that rankings and labels name different units.

When a retriever logs chunk IDs (``doc42#c3``) and annotators label documents (``doc42``), or the
reverse, nothing fails: every query quietly scores 0. ``detect_mismatch`` looks at the first labeled
queries of a run for that pattern and returns a one-line warning naming the ``--doc-id`` value that
would join them, or None. It only reads the IDs; the mapping itself lives in ``rankgate.doc_ids``.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

import numpy as np
import numpy.typing as npt

from rankgate.doc_ids import DocIdMapping
from rankgate.fast import compiled_string_hashes, index_array, numpy_of

__all__ = ["detect_mismatch"]

# Mismatch detection. Conservative on purpose: a false warning on healthy data teaches users to
# ignore warnings, so every threshold errs towards silence.
_MIN_LABELED = 5  # fewer labeled queries than this: too little to tell
_MAX_ROWS_CHECKED = 5_000  # the first labeled queries suffice to see a naming pattern
_MOSTLY_MISSING = 0.5  # share of labeled queries whose ranking meets none of their labels
_CHUNK_SIDE = 0.9  # share of one side's IDs the rule must rewrite...
_DOC_SIDE = 0.05  # ...and most of the other side's it may rewrite
_SEPARATORS = ("#", "::", "|", "/", ":", "@", "~", "_", "-", ".", "!", ";", ",", "+", "=")
_DIGITS = "\x00"  # stands for a run of digits in a suffix's shape
_MAX_SHAPE = 24


def detect_mismatch(retrieved: Any, labels: Any) -> str | None:
    """A one-line warning when rankings and labels look like chunks and documents; else None.

    Args:
        retrieved: the rankings, a list array of IDs (one row per query).
        labels: the labeled IDs of the same queries: a map array of grades (``relevance_scores``,
            whose keys are read) or a list array of IDs (``relevant_ids``).

    Fires only when (1) at least a few queries are labeled, (2) most labeled queries have no
    retrieved ID among their labeled IDs, and (3) a rule read off the IDs themselves (a separator,
    or a separator followed by a numbered chunk suffix such as ``#c3``) rewrites nearly every ID on
    one side, nearly none on the other, and makes most of those queries meet their labels. The
    warning names the ``--doc-id`` value that does so. Data whose IDs simply differ, or share a
    separator on both sides (``doc-00017`` and ``doc-00099``), stays silent.
    """
    import pyarrow as pa

    retrieved, labels = _combined(retrieved), _combined(labels)
    if len(retrieved) != len(labels):
        raise ValueError("detect_mismatch takes one ranking and one set of labels per query")
    lengths = np.diff(numpy_of(retrieved.offsets).astype(np.int64))
    label_lengths = np.diff(numpy_of(labels.offsets).astype(np.int64))
    labeled = (lengths > 0) & (label_lengths > 0)
    for column in (retrieved, labels):
        if column.null_count:
            labeled &= numpy_of(column.is_valid())
    rows = np.flatnonzero(labeled)[:_MAX_ROWS_CHECKED]
    if len(rows) < _MIN_LABELED:
        return None
    take = index_array(rows)
    ranked = _combined(retrieved.take(take))
    judged = _combined(labels.take(take))
    judged_ids = judged.keys if pa.types.is_map(judged.type) else judged.values
    try:
        ranked_ids = _flat(ranked.values, ranked.offsets).cast(pa.large_string())
        label_ids = _flat(judged_ids, judged.offsets).cast(pa.large_string())
    except pa.ArrowInvalid:
        return None  # IDs that are not text: no naming pattern to read
    ranked_rows = np.repeat(np.arange(len(rows)), np.diff(numpy_of(ranked.offsets)))
    label_rows = np.repeat(np.arange(len(rows)), np.diff(numpy_of(judged.offsets)))
    if ranked_ids.null_count or label_ids.null_count:
        return None
    met = _rows_meeting(ranked_rows, ranked_ids, label_rows, label_ids, len(rows))
    if met.mean() > 1 - _MOSTLY_MISSING:
        return None
    for candidate in _candidates(ranked_ids, label_ids):
        mapped_ranked = candidate.documents_of(ranked_ids)
        mapped_labels = candidate.documents_of(label_ids)
        changed = (_changed(ranked_ids, mapped_ranked), _changed(label_ids, mapped_labels))
        if not (
            (changed[0] >= _CHUNK_SIDE and changed[1] <= _DOC_SIDE)
            or (changed[1] >= _CHUNK_SIDE and changed[0] <= _DOC_SIDE)
        ):
            continue
        now = _rows_meeting(ranked_rows, mapped_ranked, label_rows, mapped_labels, len(rows))
        if now.mean() <= _MOSTLY_MISSING or now.sum() < 2 * max(int(met.sum()), 1):
            continue
        chunky = "retrieved IDs" if changed[0] >= _CHUNK_SIDE else "labeled IDs"
        other = "labeled documents" if changed[0] >= _CHUNK_SIDE else "retrieved documents"
        example = ranked_ids if changed[0] >= _CHUNK_SIDE else label_ids
        option = shlex.quote(str(candidate))
        return (
            f"{int((~met).sum())} of {len(rows)} labeled queries have no retrieved ID among their "
            f"labeled IDs; the {chunky} look like chunks of the {other} (e.g. "
            f"{_clip(example[0].as_py())}): with --doc-id {option} {int(now.sum())} of them "
            f"would meet their labels. Score documents with --doc-id {option} "
            f"(or [ids] in rankgate.toml)"
        )
    return None


def _flat(values: Any, offsets: Any) -> Any:
    """The IDs a (possibly sliced) list or map array holds, from its first row to its last."""
    bounds = numpy_of(offsets)
    return values.slice(int(bounds[0]), int(bounds[-1]) - int(bounds[0]))


def _rows_meeting(
    ranked_rows: npt.NDArray[Any],
    ranked_ids: Any,
    label_rows: npt.NDArray[Any],
    label_ids: Any,
    n: int,
) -> npt.NDArray[np.bool_]:
    """Per row: does any retrieved ID equal one of the row's labeled IDs?"""
    import pyarrow as pa
    import pyarrow.compute as pc

    both = pa.concat_arrays([ranked_ids, label_ids.cast(ranked_ids.type)])
    hashes = compiled_string_hashes(both)
    if hashes is not None:
        # Each ID's 64-bit hash mixed with its row: two different (row, ID) pairs share a key
        # with odds of 2**-64, which a heuristic's warning can bear. It runs on the first chunk
        # of every labeled input, where dictionary-encoding 500k IDs took a tenth of a second.
        rows = np.concatenate([ranked_rows, label_rows]).astype(np.uint64)
        keys = hashes ^ (rows * np.uint64(0x9E3779B97F4A7C15))
        ranked_keys, label_keys = keys[: len(ranked_ids)], keys[len(ranked_ids) :]
    else:
        # No nulls here (the caller returns early on them), so every ID has a code.
        codes = numpy_of(pc.dictionary_encode(both).indices).astype(np.int64)
        width = int(codes.max()) + 1 if len(codes) else 1
        ranked_keys = ranked_rows * width + codes[: len(ranked_ids)]
        label_keys = label_rows * width + codes[len(ranked_ids) :]
    hit = np.isin(ranked_keys, label_keys)
    met = np.zeros(n, dtype=np.bool_)
    met[ranked_rows[hit]] = True
    return met


def _changed(ids: Any, mapped: Any) -> float:
    import pyarrow.compute as pc

    if not len(ids):
        return 0.0
    return float(numpy_of(pc.fill_null(pc.not_equal(ids, mapped), False)).mean())


def _candidates(ranked_ids: Any, label_ids: Any) -> list[DocIdMapping]:
    """Rules worth trying: each separator found in most IDs of one side, and for it a regex for a
    numbered chunk suffix (``#c3``, ``_chunk_12``), which leaves documents whose own names hold the
    separator alone."""
    import pyarrow.compute as pc

    found: list[DocIdMapping] = []
    for separator in _SEPARATORS:
        for ids in (ranked_ids, label_ids):
            if not len(ids):
                continue
            holding = numpy_of(pc.match_substring(ids, separator)).mean()
            if holding < _CHUNK_SIDE:
                continue
            found.append(DocIdMapping.separator(separator))
            # The suffix after the last separator (#c3), then after the last two (_chunk_12).
            for depth in (1, 2):
                shape = _suffix_shape(ids, separator, depth)
                if shape is not None:
                    found.append(DocIdMapping.regex(f"^(.+){_re2_escape(separator)}{shape}$"))
    return found


def _suffix_shape(ids: Any, separator: str, depth: int) -> str | None:
    """A regex for what follows the ``depth``-th separator from the end in nearly all IDs, digits
    generalised (``c3``, ``c12`` -> ``c[0-9]+``; ``chunk_3`` -> ``chunk_[0-9]+`` at depth 2); None
    without one dominant shape that holds a number."""
    import pyarrow as pa
    import pyarrow.compute as pc

    parts = pc.split_pattern(ids, pattern=separator, max_splits=depth, reverse=True)
    # IDs with fewer separators than ``depth`` have no such suffix: null, counted as no shape.
    deep_enough = pc.equal(pc.list_value_length(parts), depth + 1)
    suffixes = pc.if_else(
        deep_enough,
        pc.binary_join(
            pc.list_slice(parts, 1, depth + 1), pa.scalar(separator, parts.type.value_type)
        ),
        None,
    )
    shapes = pc.replace_substring_regex(suffixes, pattern="[0-9]+", replacement=_DIGITS)
    counts = pc.value_counts(shapes)
    if not len(counts):
        return None
    tallies = numpy_of(counts.field("counts"))
    best = int(np.argmax(tallies))
    shape = counts.field("values")[best].as_py()
    if (
        shape is None
        or tallies[best] < _CHUNK_SIDE * len(ids)
        or _DIGITS not in shape
        or len(shape) > _MAX_SHAPE
    ):
        return None
    return "[0-9]+".join(_re2_escape(part) for part in shape.split(_DIGITS))


def _re2_escape(text: str) -> str:
    """``text`` as a literal in RE2, escaping only what RE2 treats as special (so a suggested
    pattern reads ``#c[0-9]+``, not ``\\#c[0-9]+``)."""
    return re.sub(r"([\\.^$|?*+()\[\]{}])", r"\\\1", text)


def _combined(column: Any) -> Any:
    """One Arrow array for a column that may be chunked."""
    import pyarrow as pa

    if isinstance(column, pa.ChunkedArray):
        return column.combine_chunks()
    return column


def _clip(value: Any, limit: int = 40) -> str:
    """An ID quoted for a message, cut short: an example must not flood the warning line."""
    text = str(value)
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")
