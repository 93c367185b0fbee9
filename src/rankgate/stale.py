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
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

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

__all__ = ["LabelFilter", "parse_age", "read_corpus"]

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
