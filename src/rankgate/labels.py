"""Relevance labels that arrive apart from the traces: annotation exports, qrels, a store's table.

Annotators judge (query, document) pairs after the fact, so labels live in their own files and are
joined to traces by query ID. Three shapes are read:

* one judgment per record: ``query_id``, ``document_id`` (or ``doc_id``), ``grade`` (or
  ``relevance``), optionally ``labeled_at`` and ``source``: what annotation tools export;
* one query per record, as in a trace: ``relevant_ids`` and/or ``relevance_scores``;
* TREC qrels: ``input_format="qrels"``, or detected, whatever the file is called, by the layout of
  its first line (``qid iter docno rel``: four columns, the last a number; see
  ``rankgate.io.trec.looks_like_qrels``).

Within one run, a later judgment of the same (query, document) replaces an earlier one unless the
earlier one is newer by ``labeled_at``, or dated while the later one is not: the rule the trace
store applies too.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from os import PathLike
from pathlib import Path
from typing import Any

from rankgate.errors import InputError, Location, UsageError
from rankgate.io import FORMATS, FieldMap, RawRecord, Trace, limits, open_source, validate_record
from rankgate.io.bounded import size_text, utf8_length
from rankgate.io.source import data_suffix
from rankgate.io.trec import looks_like_qrels, read_qrels
from rankgate.io.validate import MAX_GRADE
from rankgate.times import parse_time

__all__ = [
    "LABEL_FORMATS",
    "Judgment",
    "LabelReading",
    "QueryLabels",
    "collect_labels",
    "judgments_of",
    "read_judgments",
]

DOCUMENT_KEYS = ("document_id", "doc_id")
GRADE_KEYS = ("grade", "relevance")
LABELED_AT_KEY = "labeled_at"
SOURCE_KEY = "source"
QRELS = "qrels"
#: What ``input_format`` may name for a label file: TREC qrels, or any trace format.
LABEL_FORMATS = (QRELS, *FORMATS)


@dataclass(frozen=True, slots=True)
class Judgment:
    """One (query, document) grade; ``grade`` 0 means judged and not relevant."""

    query_id: str
    document_id: str
    grade: float
    labeled_at: datetime | None
    source: str | None


@dataclass(slots=True)
class LabelReading:
    """Accounting for one label file: records read, and those that gave no judgment, by reason."""

    records: int = 0
    judgments: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    invalid_examples: list[str] = field(default_factory=list)

    def skip(self, reason: str) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + 1


@dataclass(slots=True)
class QueryLabels:
    """A query's grades by document, and when each was given (None when unknown)."""

    grades: dict[str, float] = field(default_factory=dict)
    stamps: dict[str, datetime | None] = field(default_factory=dict)

    def add(self, judgment: Judgment) -> None:
        known = self.stamps.get(judgment.document_id)
        if (
            judgment.document_id in self.grades
            and known is not None
            and (judgment.labeled_at is None or judgment.labeled_at < known)
        ):
            return  # the judgment held is newer, or dated while this one is not
        self.grades[judgment.document_id] = judgment.grade
        self.stamps[judgment.document_id] = judgment.labeled_at

    def labeled_at(self) -> dict[str, str] | None:
        """Per-document stamps as ISO text, for the stale-label filter; None when none is known."""
        known = {doc: stamp.isoformat() for doc, stamp in self.stamps.items() if stamp is not None}
        return known or None


def read_judgments(
    data: Any,
    *,
    fields: FieldMap | None = None,
    input_format: str | None = None,
    source: str | None = None,
    on_invalid: str = "fail",
    reading: LabelReading | None = None,
) -> Iterator[Judgment]:
    """Every judgment in a label file (any trace format, or qrels), in file order.

    ``input_format`` is one of ``LABEL_FORMATS``; without it a file is read as TREC qrels when
    it is named ``*.qrels`` or laid out as qrels (``qid iter docno rel``), else by the trace
    readers' own detection. ``source`` names judgments whose records do not say; a malformed
    record raises ``InputError``, or under ``on_invalid="skip"`` is counted in
    ``reading.skipped["invalid"]``.
    """
    fields = fields or FieldMap()
    reading = reading if reading is not None else LabelReading()
    name = source or (str(data) if isinstance(data, (str, PathLike)) else None)
    if input_format is not None and input_format not in LABEL_FORMATS:
        raise UsageError(
            f"unknown label format {input_format!r} (formats: {', '.join(LABEL_FORMATS)})"
        )
    if input_format == QRELS or (input_format is None and _is_qrels_file(data)):
        for query_id, grades in read_qrels(Path(data)).items():
            reading.records += len(grades)
            for document_id, grade in grades.items():
                reading.judgments += 1
                yield Judgment(query_id, document_id, grade, None, name)
        return
    for raw in open_source(data, input_format):
        reading.records += 1
        try:
            found = list(_judgments(raw, fields, name))
        except InputError as problem:
            if on_invalid == "fail":
                raise
            reading.skip("invalid")
            if len(reading.invalid_examples) < 10:
                reading.invalid_examples.append(str(problem))
            continue
        if not found:
            reading.skip("no_labels")
        reading.judgments += len(found)
        yield from found


def _is_qrels_file(data: Any) -> bool:
    if not isinstance(data, (str, PathLike)) or "://" in str(data) or str(data) == "-":
        return False
    path = Path(data)
    return data_suffix(path) == ".qrels" or looks_like_qrels(path)


def collect_labels(
    data: Any, *, fields: FieldMap | None = None, input_format: str | None = None
) -> dict[str, QueryLabels]:
    """Every query's labels from a label file or a store URL, newest judgment first.

    ``input_format`` (one of ``LABEL_FORMATS``, e.g. ``"qrels"``) forces how a file is read; see
    ``read_judgments`` for what is detected without it.
    """
    from rankgate.store import is_store_url

    judgments = (
        _store_judgments(data)
        if is_store_url(data)
        else read_judgments(data, fields=fields, input_format=input_format)
    )
    labels: dict[str, QueryLabels] = {}
    for judgment in judgments:
        labels.setdefault(judgment.query_id, QueryLabels()).add(judgment)
    return labels


def _store_judgments(url: str) -> Iterator[Judgment]:
    from rankgate.store.backends import connect

    backend = connect(url, read_only=True)
    try:
        rows = backend.read_sql(
            "SELECT query_id, document_id, grade, labeled_at, source FROM rankgate_labels", {}
        )
        for row in rows:
            stamp = row["labeled_at"]
            yield Judgment(
                row["query_id"],
                row["document_id"],
                float(row["grade"]),
                None if stamp is None else parse_time(stamp, "labeled_at"),
                row["source"],
            )
    finally:
        backend.close()


def _judgments(raw: RawRecord, fields: FieldMap, source: str | None) -> Iterator[Judgment]:
    record = raw.value
    if isinstance(record, dict) and any(key in record for key in DOCUMENT_KEYS):
        yield _row_judgment(record, raw.location, fields, source)
        return
    trace = validate_record(raw, fields, require_query_id=True, require_ranking=False)
    yield from judgments_of(trace, source)


def judgments_of(trace: Trace, source: str | None) -> Iterator[Judgment]:
    """The judgments a trace record carries, dated by its ``labeled_at`` (one time, or one per
    document) and named by its ``source`` field when it has one."""
    if trace.grades is None:
        return
    stamps = trace.attributes.get(LABELED_AT_KEY)
    named = trace.attributes.get(SOURCE_KEY)
    for document_id, grade in trace.grades.items():
        stamp = stamps.get(document_id) if isinstance(stamps, dict) else stamps
        yield Judgment(
            trace.query_id,
            document_id,
            grade,
            _stamp(stamp, trace.location),
            named if isinstance(named, str) else source,
        )


def _row_judgment(
    record: dict[str, Any], location: Location, fields: FieldMap, source: str | None
) -> Judgment:
    query_id = _identifier(record.get(fields.query_id), location, fields.query_id)
    key = next(k for k in DOCUMENT_KEYS if k in record)
    document_id = _identifier(record[key], location, key)
    grade_key = next((k for k in GRADE_KEYS if k in record), None)
    if grade_key is None:
        raise InputError(location, GRADE_KEYS[0], "required field is missing")
    grade = record[grade_key]
    if isinstance(grade, str):
        try:
            grade = float(grade)
        except ValueError:
            raise InputError(
                location, grade_key, f"expected a number, got {_clip(grade)}"
            ) from None
    if isinstance(grade, bool) or not isinstance(grade, (int, float)):
        raise InputError(location, grade_key, f"expected a number, got {_clip(grade)}")
    if not math.isfinite(grade) or not 0 <= grade <= MAX_GRADE:
        raise InputError(location, grade_key, f"grade must be between 0 and {MAX_GRADE:g}")
    named = record.get(SOURCE_KEY)
    return Judgment(
        query_id,
        document_id,
        float(grade),
        _stamp(record.get(LABELED_AT_KEY), location),
        named if isinstance(named, str) and named else source,
    )


def _identifier(value: Any, location: Location, name: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int)) or value == "":
        raise InputError(
            location, name, f"expected a non-empty string or integer, got {_clip(value)}"
        )
    try:
        text = value if isinstance(value, str) else str(value)
    except ValueError:  # an int past Python's digit limit for str()
        text = "0" * (limits.MAX_ID_BYTES + 1)
    if utf8_length(text) > limits.MAX_ID_BYTES:
        raise InputError(
            location,
            name,
            f"ID is {utf8_length(text):,} bytes, more than the limit of "
            f"{size_text(limits.MAX_ID_BYTES)}",
        )
    return text


def _clip(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _stamp(value: Any, location: Location) -> datetime | None:
    if value is None or value == "":
        return None
    try:
        return parse_time(value, LABELED_AT_KEY)
    except UsageError:
        raise InputError(
            location, LABELED_AT_KEY, f"expected an ISO 8601 timestamp, got {_clip(value)}"
        ) from None
