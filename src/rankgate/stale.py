"""Stale labels: judgments for documents that left the corpus, or that are too old to trust.

When the corpus changes, a label for a deleted document makes recall look low for a reason that has
nothing to do with retrieval. With ``--corpus FILE`` such labels are removed before scoring; with
``--label-max-age 180d`` labels older than that (by the record's ``labeled_at``) are removed too. A
query that loses every relevant label this way moves to the ``no_relevant`` reason, and the report
counts both the removed labels and those queries.

``labeled_at`` is an ISO 8601 timestamp (or a ``datetime``, as a Parquet timestamp column gives) for
all of a record's labels, or an object of document ID -> timestamp for labels made at different
times.
"""

from __future__ import annotations

import csv
import json
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from rankgate.errors import ConfigError, InputError, Location, UsageError
from rankgate.io.bounded import (
    bounded_lines,
    cannot_read,
    open_binary,
    size_text,
    too_long_problem,
    utf8_length,
)
from rankgate.io.limits import MAX_ID_BYTES

__all__ = ["FilteredLabels", "LabelFilter", "filter_columns", "parse_age", "read_corpus"]

_AGE = re.compile(r"^(?P<amount>[0-9]+)(?P<unit>[smhdw])$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
CORPUS_ID_COLUMN = "id"


def parse_age(text: str) -> timedelta:
    """``"180d"``, ``"12h"``, ``"2w"`` as a duration."""
    match = _AGE.match(text.strip())
    if not match:
        raise ConfigError(f"label age {text!r}: expected a number and a unit, e.g. 180d, 12h, 2w")
    return timedelta(**{_UNITS[match.group("unit")]: int(match.group("amount"))})


def read_corpus(path: Path) -> frozenset[str]:
    """Document IDs in the corpus: one per line of text, or the ``id`` column of Parquet or CSV.

    An unreadable file, a line that is not UTF-8 and an ID past ``MAX_ID_BYTES`` are located
    ``InputError``s."""
    if not path.is_file():
        raise UsageError(f"{path}: no such corpus file")
    suffix = path.suffix.lower()
    try:
        if suffix in (".parquet", ".pq"):
            return _parquet_corpus(path)
        with open_binary(path) as raw:
            if suffix in (".csv", ".tsv"):
                return _csv_corpus(path, raw, "\t" if suffix == ".tsv" else ",")
            return _text_corpus(path, raw)
    except OSError as problem:
        raise cannot_read(path, problem) from None


def _parquet_corpus(path: Path) -> frozenset[str]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        schema = pq.read_schema(path)
        if CORPUS_ID_COLUMN not in schema.names:
            raise InputError(
                str(path),
                None,
                f"no '{CORPUS_ID_COLUMN}' column (columns: {', '.join(schema.names)})",
            )
        column = pq.read_table(path, columns=[CORPUS_ID_COLUMN]).column(CORPUS_ID_COLUMN)
    except OSError as problem:
        if problem.errno is not None:
            raise cannot_read(path, problem) from None
        raise InputError(str(path), None, f"cannot read as Parquet ({problem})") from None
    except pa.ArrowException as problem:
        raise InputError(str(path), None, f"cannot read as Parquet ({problem})") from None
    try:
        values = column.to_pylist()
    except UnicodeDecodeError:  # Arrow does not check a file's text when reading it
        raise InputError(str(path), CORPUS_ID_COLUMN, "text is not valid UTF-8") from None
    return frozenset(str(value) for value in values if value is not None)


def _decoded(path: Path, raw: Any) -> Iterator[str]:
    """Each line of ``raw`` as text, bounded in length; a byte-order mark (spreadsheet exports
    start with one) must not join the first ID."""
    for number, (line, too_long) in enumerate(bounded_lines(raw), start=1):
        if too_long:
            raise InputError(Location(str(path), line=number), None, too_long_problem())
        try:
            yield line.decode("utf-8-sig" if number == 1 else "utf-8")
        except UnicodeDecodeError:
            raise InputError(
                Location(str(path), line=number), None, "line is not valid UTF-8"
            ) from None


def _checked_id(path: Path, number: int, text: str, field: str | None) -> str:
    if utf8_length(text) > MAX_ID_BYTES:
        raise InputError(
            Location(str(path), line=number),
            field,
            f"ID is {utf8_length(text):,} bytes, more than the limit of {size_text(MAX_ID_BYTES)}",
        )
    return text


def _text_corpus(path: Path, raw: Any) -> frozenset[str]:
    ids = set()
    for number, line in enumerate(_decoded(path, raw), start=1):
        if line.strip():
            ids.add(_checked_id(path, number, line.strip(), None))
    return frozenset(ids)


def _csv_corpus(path: Path, raw: Any, delimiter: str) -> frozenset[str]:
    reader = csv.DictReader(_decoded(path, raw), delimiter=delimiter)
    try:
        if CORPUS_ID_COLUMN not in (reader.fieldnames or []):
            raise InputError(
                str(path),
                None,
                f"no '{CORPUS_ID_COLUMN}' column (columns: {', '.join(reader.fieldnames or [])})",
            )
        ids = set()
        for row in reader:
            value = row[CORPUS_ID_COLUMN]
            if value:
                ids.add(_checked_id(path, reader.line_num, value, CORPUS_ID_COLUMN))
        return frozenset(ids)
    except csv.Error as problem:
        raise InputError(
            Location(str(path), line=reader.line_num), None, f"cannot read CSV ({problem})"
        ) from None


@dataclass(frozen=True, slots=True)
class LabelFilter:
    """Which labels to drop before scoring. Either part may be unset."""

    corpus: frozenset[str] | None = None
    max_age: timedelta | None = None
    as_of: datetime | None = None
    labeled_at_field: str = "labeled_at"

    @property
    def active(self) -> bool:
        return self.corpus is not None or self.max_age is not None

    def apply(
        self, grades: dict[str, float], attributes: Mapping[str, Any], location: Location
    ) -> tuple[dict[str, float], int, int]:
        """The grades to keep, and how many were removed as not in the corpus and as too old."""
        kept = grades
        stale = expired = 0
        if self.corpus is not None:
            kept = {doc: grade for doc, grade in kept.items() if doc in self.corpus}
            stale = len(grades) - len(kept)
        if self.max_age is not None:
            stamps = _stamps(attributes.get(self.labeled_at_field), location, self.labeled_at_field)
            if stamps is not None:
                cutoff = _aware(self.as_of or datetime.now(UTC)) - self.max_age
                before = len(kept)
                kept = {
                    doc: grade
                    for doc, grade in kept.items()
                    if not _older(stamps, doc, cutoff, location, self.labeled_at_field)
                }
                expired = before - len(kept)
        return kept, stale, expired


def _stamps(value: Any, location: Location, field: str) -> Any:
    """``labeled_at`` as a timestamp string or a dict keyed by string document IDs."""
    if isinstance(value, str) and value.lstrip().startswith("{"):
        try:  # a per-document object arrives as JSON text from a CSV cell
            value = json.loads(value)
        except json.JSONDecodeError as problem:
            raise InputError(location, field, f"text is not valid JSON ({problem.msg})") from None
    if isinstance(value, dict):
        return {str(doc): stamp for doc, stamp in value.items()}  # 17 and "17" are one document
    return value


def _aware(moment: datetime) -> datetime:
    # Logs and options without a zone are taken as UTC, so every comparison is between aware times.
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment


def _older(stamps: Any, doc: str, cutoff: datetime, location: Location, field: str) -> bool:
    stamp = stamps.get(doc) if isinstance(stamps, dict) else stamps
    if stamp is None:
        return False  # no date for this label: nothing says it is old
    where = f"{field}.{doc}" if isinstance(stamps, dict) else field
    if isinstance(stamp, datetime):  # a Parquet timestamp column, or a Python caller
        return _aware(stamp) < cutoff
    if not isinstance(stamp, str):
        raise InputError(location, where, f"expected an ISO 8601 timestamp, got {stamp!r}")
    try:
        moment = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        raise InputError(
            location, where, f"expected an ISO 8601 timestamp, got {stamp!r}"
        ) from None
    return _aware(moment) < cutoff


# --------------------------------------------------------------------------------------------
# The same filter over whole Arrow columns


@dataclass(frozen=True, slots=True)
class FilteredLabels:
    """What ``filter_columns`` made of a chunk: the table with each labeled row's grades merged
    into one map (``relevant_ids`` at grade 1, then ``relevance_scores`` over them, as the
    validator merges them) and filtered, and per row the labels removed as not in the corpus
    (``stale``), as too old (``expired``), and whether the row lost every relevant label."""

    table: Any
    stale: npt.NDArray[np.int64]
    expired: npt.NDArray[np.int64]
    lost: npt.NDArray[np.bool_]


def filter_columns(
    table: Any,
    slow: npt.NDArray[np.bool_],
    stamps: Any,
    label_filter: LabelFilter,
    corpus_ids: Any,
    *,
    threshold: float,
    unique_map_keys: bool,
) -> FilteredLabels:
    """``LabelFilter.apply`` for every row of a normalised chunk at once.

    ``stamps`` is None or a map array of per-document times aligned entry for entry with the
    ``relevance_scores`` column (labels joined from a dated label table); a row with its own
    ``labeled_at`` must already be marked ``slow``, as must anything the validator has to read.
    ``corpus_ids`` is the corpus as an ``IdIndex`` (None without a corpus). A row whose
    map repeats a key, when ``unique_map_keys``, is marked slow here (the validator refuses it).
    Counts of slow rows are 0: the validator's path counts them."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = table.num_rows
    names = table.schema.names
    text = pa.large_string()
    keys_parts: list[Any] = []
    rows_parts: list[npt.NDArray[np.int64]] = []
    grades_parts: list[npt.NDArray[np.float64]] = []
    stamp_parts: list[npt.NDArray[np.int64]] = []
    from_scores_parts: list[npt.NDArray[np.bool_]] = []
    labeled = np.zeros(n, dtype=np.bool_)
    no_stamp = np.iinfo(np.int64).min

    if "relevant_ids" in names:
        relevant = table.column("relevant_ids")
        relevant = relevant.combine_chunks() if isinstance(relevant, pa.ChunkedArray) else relevant
        rows, positions, valid = _entries_of(relevant, slow)
        labeled |= valid
        keys_parts.append(relevant.values.take(pa.array(positions)).cast(text))
        rows_parts.append(rows)
        grades_parts.append(np.ones(len(rows), dtype=np.float64))
        stamp_parts.append(np.full(len(rows), no_stamp, dtype=np.int64))
        from_scores_parts.append(np.zeros(len(rows), dtype=np.bool_))
    if "relevance_scores" in names:
        scores = table.column("relevance_scores")
        scores = scores.combine_chunks() if isinstance(scores, pa.ChunkedArray) else scores
        rows, positions, valid = _entries_of(scores, slow)
        labeled |= valid
        picked = pa.array(positions)
        keys_parts.append(scores.keys.take(picked).cast(text))
        rows_parts.append(rows)
        grades_parts.append(_floats(scores.items.take(picked)))
        stamp_parts.append(
            np.full(len(rows), no_stamp, dtype=np.int64)
            if stamps is None
            else _micros(stamps.items.take(picked), no_stamp)
        )
        from_scores_parts.append(np.ones(len(rows), dtype=np.bool_))

    entry_rows = np.concatenate(rows_parts) if rows_parts else np.zeros(0, dtype=np.int64)
    keys = pa.concat_arrays(keys_parts) if keys_parts else pa.array([], text)
    grades = np.concatenate(grades_parts) if grades_parts else np.zeros(0, dtype=np.float64)
    entry_stamps = np.concatenate(stamp_parts) if stamp_parts else np.zeros(0, dtype=np.int64)
    from_scores = (
        np.concatenate(from_scores_parts) if from_scores_parts else np.zeros(0, dtype=np.bool_)
    )
    # Entries in the validator's order: by row, the relevant IDs before the scores, each in order.
    order = np.argsort(entry_rows, kind="stable")
    entry_rows, grades, entry_stamps, from_scores = (
        entry_rows[order],
        grades[order],
        entry_stamps[order],
        from_scores[order],
    )
    keys = keys.take(pa.array(order))
    encoded = pc.dictionary_encode(keys)
    codes = _ints(encoded.indices)
    width = max(len(encoded.dictionary), 1)
    pair = entry_rows * width + codes
    if unique_map_keys and len(pair):
        scored_pairs = pair[from_scores]
        unique_pairs, counts = np.unique(scored_pairs, return_counts=True)
        repeated = unique_pairs[counts > 1] // width
        slow[repeated] = True
    # One entry per (row, document): the last one given wins, as in a dict.
    reversed_pair = pair[::-1]
    _, first_of_reversed = np.unique(reversed_pair, return_index=True)
    last = np.sort(len(pair) - 1 - first_of_reversed)
    entry_rows, grades, entry_stamps = entry_rows[last], grades[last], entry_stamps[last]
    keys = keys.take(pa.array(last))
    relevant_before = _any_per_row(entry_rows, grades >= threshold, n)

    keep = np.ones(len(entry_rows), dtype=np.bool_)
    stale = np.zeros(n, dtype=np.int64)
    expired = np.zeros(n, dtype=np.int64)
    if corpus_ids is not None and len(keep):
        keep = corpus_ids.find(keys) >= 0
        stale = np.bincount(entry_rows[~keep], minlength=n).astype(np.int64)
    if label_filter.max_age is not None and len(keep):
        cutoff = _aware(label_filter.as_of or datetime.now(UTC)) - label_filter.max_age
        cutoff_micros = _micros_of(cutoff)
        old = keep & (entry_stamps != no_stamp) & (entry_stamps < cutoff_micros)
        expired = np.bincount(entry_rows[old], minlength=n).astype(np.int64)
        keep &= ~old
    entry_rows, grades = entry_rows[keep], grades[keep]
    keys = keys.filter(pa.array(keep)) if len(keep) else keys
    relevant_after = _any_per_row(entry_rows, grades >= threshold, n)
    lost = labeled & relevant_before & ~relevant_after

    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(entry_rows, minlength=n), out=offsets[1:])
    merged = pa.MapArray.from_arrays(
        pa.array(offsets.astype(np.int32)),
        keys,
        pa.array(grades, pa.float64()),
        mask=pa.array(~labeled),
    )
    columns = {
        name: table.column(name)
        for name in names
        if name not in ("relevant_ids", "relevance_scores")
    }
    columns["relevance_scores"] = merged
    for counts in (stale, expired):
        counts[slow] = 0
    lost &= ~slow
    return FilteredLabels(pa.record_batch(columns), stale, expired, lost)


def _entries_of(
    lists: Any, slow: npt.NDArray[np.bool_]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
    """Per item of a list or map array (its rows that are set and not slow): the row, and the
    item's position in the child array; and which rows are set."""
    import pyarrow.compute as pc

    n = len(lists)
    offsets = _ints(lists.offsets).astype(np.int64, copy=False)
    valid = (_bools(pc.is_valid(lists)) if lists.null_count else np.ones(n, dtype=np.bool_)).copy()
    taken = valid & ~slow
    lengths = np.where(taken, np.diff(offsets), 0)
    rows = np.repeat(np.arange(n, dtype=np.int64), lengths)
    starts = np.repeat(offsets[:-1] - np.concatenate(([0], np.cumsum(lengths)[:-1])), lengths)
    positions = starts + np.arange(len(rows), dtype=np.int64)
    return rows, positions, valid


def _any_per_row(
    rows: npt.NDArray[np.int64], flags: npt.NDArray[np.bool_], n: int
) -> npt.NDArray[np.bool_]:
    return np.bincount(rows[flags], minlength=n) > 0


def _micros_of(moment: datetime) -> int:
    delta = moment - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _micros(stamps: Any, missing: int) -> npt.NDArray[np.int64]:
    import pyarrow as pa
    import pyarrow.compute as pc

    as_int = pc.fill_null(stamps.cast(pa.timestamp("us", tz="UTC")).cast(pa.int64()), missing)
    return _ints(as_int)


def _floats(values: Any) -> npt.NDArray[np.float64]:
    import pyarrow as pa
    import pyarrow.compute as pc

    return np.asarray(_numbers(pc.fill_null(values.cast(pa.float64()), math.nan)), dtype=np.float64)


def _ints(values: Any) -> npt.NDArray[np.int64]:
    return np.asarray(_numbers(values), dtype=np.int64)


def _bools(values: Any) -> npt.NDArray[np.bool_]:
    import pyarrow.compute as pc

    return np.asarray(_numbers(pc.fill_null(values, False)), dtype=np.bool_)


def _numbers(values: Any) -> Any:
    from rankgate.fast import numpy_of

    return numpy_of(values)
