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
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from os import PathLike
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from rankgate import fast
from rankgate.errors import InputError, Location, UsageError
from rankgate.id_index import IdIndex
from rankgate.io import FORMATS, FieldMap, RawRecord, Trace, limits, open_source, validate_record
from rankgate.io.bounded import size_text, utf8_length
from rankgate.io.ir_objects import qrels_of
from rankgate.io.source import data_suffix
from rankgate.io.trec import looks_like_qrels, qrels_table, read_qrels
from rankgate.io.validate import MAX_GRADE
from rankgate.times import parse_time

__all__ = [
    "JUDGE_SOURCE_PREFIX",
    "LABEL_FORMATS",
    "LABEL_SOURCES",
    "Judgment",
    "LabelIndex",
    "LabelReading",
    "NoLabelsOfSource",
    "QueryLabels",
    "collect_labels",
    "gather_labels",
    "is_judge_source",
    "judgments_of",
    "label_source_counts",
    "label_sources_of",
    "label_table",
    "queries_with_relevant",
    "read_judgments",
    "read_query_set",
]

DOCUMENT_KEYS = ("document_id", "doc_id")
GRADE_KEYS = ("grade", "relevance")
LABELED_AT_KEY = "labeled_at"
SOURCE_KEY = "source"
QRELS = "qrels"
#: How judge labels name their source: ``judge:<model>@<prompt version>`` (``labels judge``
#: writes them so). Every other source, or none, is a human's.
JUDGE_SOURCE_PREFIX = "judge:"
#: Which labels a run uses: every label (a human's winning over a judge's for the same pair), or
#: only one kind.
LABEL_SOURCES = ("all", "human", "judge")
OTHER_SOURCE = "other label source"
#: What ``input_format`` may name for a label file: TREC qrels, or any trace format.
LABEL_FORMATS = (QRELS, *FORMATS)
#: Query-set files read as records (a ``query_id`` field per record); any other name is a text
#: file with one query ID per line.
QUERY_SET_RECORD_SUFFIXES = (".jsonl", ".ndjson", ".json", ".csv", ".tsv", ".parquet")


def is_judge_source(source: str | None) -> bool:
    """Whether a label's source names a model judge (``judge:...``) rather than a human."""
    return source is not None and source.startswith(JUDGE_SOURCE_PREFIX)


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
    #: The documents whose grade a model judge gave (absent: a human's).
    judged_by_model: set[str] = field(default_factory=set)

    def add(self, judgment: Judgment) -> None:
        document = judgment.document_id
        by_model = is_judge_source(judgment.source)
        if document in self.grades:
            held_by_model = document in self.judged_by_model
            if by_model and not held_by_model:
                return  # a human's grade beats a judge's, however old
            known = self.stamps.get(document)
            if (
                by_model == held_by_model
                and known is not None
                and (judgment.labeled_at is None or judgment.labeled_at < known)
            ):
                return  # the judgment held is newer, or dated while this one is not
        self.grades[document] = judgment.grade
        self.stamps[document] = judgment.labeled_at
        if by_model:
            self.judged_by_model.add(document)
        else:
            self.judged_by_model.discard(document)

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
    label_source: str = "all",
) -> Iterator[Judgment]:
    """Every judgment in a label file (any trace format, or qrels), in file order.

    ``label_source`` (one of ``LABEL_SOURCES``) keeps only a human's judgments or only a model
    judge's; a record all of whose judgments are of the other kind is counted in
    ``reading.skipped["other label source"]``.

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
    # Qrels held in memory (a dict, a ranx Qrels, Qrel tuples) or in a TREC file: one reading.
    data, held = qrels_of(data)
    if held is None and (input_format == QRELS or (input_format is None and _is_qrels_file(data))):
        held = read_qrels(Path(data))
    check_label_source(label_source)
    if held is not None:
        for query_id, grades in held.items():
            reading.records += len(grades)
            for document_id, grade in grades.items():
                judgment = Judgment(query_id, document_id, grade, None, name)
                if not _of_source(judgment, label_source):
                    reading.skip(OTHER_SOURCE)
                    continue
                reading.judgments += 1
                yield judgment
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
            reading.skip("ungraded" if _ungraded(raw.value) else "no_labels")
            continue
        kept = [judgment for judgment in found if _of_source(judgment, label_source)]
        if not kept:
            reading.skip(OTHER_SOURCE)
        reading.judgments += len(kept)
        yield from kept


def check_label_source(label_source: str) -> None:
    if label_source not in LABEL_SOURCES:
        raise UsageError(
            f"unknown label source {label_source!r} (label sources: {', '.join(LABEL_SOURCES)})"
        )


def _of_source(judgment: Judgment, label_source: str) -> bool:
    if label_source == "all":
        return True
    return is_judge_source(judgment.source) == (label_source == "judge")


def _is_qrels_file(data: Any) -> bool:
    if not isinstance(data, (str, PathLike)) or "://" in str(data) or str(data) == "-":
        return False
    path = Path(data)
    return data_suffix(path) == ".qrels" or looks_like_qrels(path)


def collect_labels(
    data: Any,
    *,
    fields: FieldMap | None = None,
    input_format: str | None = None,
    label_source: str = "all",
) -> dict[str, QueryLabels]:
    """Every query's labels from a label file or a store URL (or a list of them, read in
    order): a human's judgment first, then the newest.

    ``input_format`` (one of ``LABEL_FORMATS``, e.g. ``"qrels"``) forces how a file is read; see
    ``read_judgments`` for what is detected without it. ``label_source`` keeps one kind only.
    """
    labels, _ = gather_labels(
        data, fields=fields, input_format=input_format, label_source=label_source
    )
    return labels


def label_sources_of(data: Any) -> list[Any]:
    """Several label sources (a list or tuple of paths or store URLs) as a list; anything else is
    one source."""
    if (
        isinstance(data, (list, tuple))
        and data
        and all(isinstance(item, (str, PathLike)) for item in data)
    ):
        return list(data)
    return [data]


def gather_labels(
    data: Any,
    *,
    fields: FieldMap | None = None,
    input_format: str | None = None,
    on_invalid: str = "fail",
    label_source: str = "all",
) -> tuple[dict[str, QueryLabels], dict[str, LabelReading]]:
    """Every query's labels from one label source or several (see ``label_sources_of``), with the
    accounting of each file read, by its name (a store's labels table has none)."""
    from rankgate.store import is_store_url

    check_label_source(label_source)
    labels: dict[str, QueryLabels] = {}
    readings: dict[str, LabelReading] = {}
    dropped = [0]  # judgments of a store's labels table of the kind not asked for
    for item in label_sources_of(data):
        if is_store_url(item):
            judgments: Iterator[Judgment] = _kept(_store_judgments(item), label_source, dropped)
        else:
            reading = readings.setdefault(_name_of(item), LabelReading())
            judgments = read_judgments(
                item,
                fields=fields,
                input_format=input_format,
                on_invalid=on_invalid,
                reading=reading,
                label_source=label_source,
            )
        for judgment in judgments:
            labels.setdefault(judgment.query_id, QueryLabels()).add(judgment)
    if label_source != "all" and not labels:
        _check_kind_found(data, label_source, readings, dropped[0])
    return labels, readings


class NoLabelsOfSource(UsageError):
    """``label_source`` asked for a kind of label none of the labels given is."""


def _check_kind_found(
    data: Any, label_source: str, readings: Mapping[str, LabelReading], store_filtered: int
) -> None:
    """Labels were given but none is of the kind asked for: a usage error, not an evaluation
    of nothing (every query unlabeled, every gate failed for want of a value)."""
    other = store_filtered + sum(r.skipped.get(OTHER_SOURCE, 0) for r in readings.values())
    if other:
        kind = "a model judge's (source judge:...)" if label_source == "judge" else "a human's"
        raise NoLabelsOfSource(
            f"--label-source {label_source}: none of the labels in {_name_of(data)} is {kind}; "
            f"{other:,} of the other kind were left out"
        )


def _kept(
    judgments: Iterator[Judgment], label_source: str, dropped: list[int]
) -> Iterator[Judgment]:
    for judgment in judgments:
        if _of_source(judgment, label_source):
            yield judgment
        else:
            dropped[0] += 1


def _name_of(data: Any) -> str:
    if isinstance(data, (str, PathLike)):
        return str(data)
    if isinstance(data, (list, tuple)) and all(isinstance(x, (str, PathLike)) for x in data):
        return " + ".join(str(item) for item in data)
    name = getattr(data, "name", None)
    return name if isinstance(name, str) else "labels"


def label_source_counts(labels: Mapping[str, QueryLabels]) -> dict[str, int]:
    """How many of the labels held are a human's and how many a model judge's."""
    by_model = sum(len(held.judged_by_model) for held in labels.values())
    total = sum(len(held.grades) for held in labels.values())
    return {"human": total - by_model, "judge": by_model}


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
    if _is_label_studio_task(record):
        yield from _label_studio_judgment(record, raw.location, fields, source)
        return
    if isinstance(record, dict) and any(key in record for key in DOCUMENT_KEYS):
        if not _ungraded(record):
            yield _row_judgment(record, raw.location, fields, source)
        return
    trace = validate_record(raw, fields, require_query_id=True, require_ranking=False)
    yield from judgments_of(trace, source)


def _ungraded(record: Any) -> bool:
    """A judgment row whose grade is still to be given (null or empty, as ``rankgate labels
    todo`` writes it): not a judgment yet, and not an error either. A Label Studio task with no
    completed annotation is one too."""
    if _is_label_studio_task(record):
        return _label_studio_choice(record) is None
    if not isinstance(record, dict) or not any(key in record for key in DOCUMENT_KEYS):
        return False
    grade_key = next((k for k in GRADE_KEYS if k in record), None)
    if grade_key is None:
        return False
    grade = record[grade_key]
    return grade is None or (isinstance(grade, str) and not grade.strip())


# --- Label Studio ------------------------------------------------------------------------------
# An export of Label Studio (JSON, "JSON-MIN" aside) is a list of tasks: ``data`` holds what the
# task was created with (``labels todo --format label-studio`` writes query_id and document_id
# there) and ``annotations`` what annotators gave; the grade is the choice (or rating) of the
# latest annotation that was not cancelled.


def _is_label_studio_task(record: Any) -> bool:
    """A task as Label Studio exports it, or as ``labels todo`` writes it (``data`` alone, not
    yet annotated): no trace or judgment record has a ``data`` object without a document key."""
    return (
        isinstance(record, dict)
        and isinstance(record.get("data"), dict)
        and not any(key in record for key in DOCUMENT_KEYS)
        and ("annotations" in record or set(record) <= {"data", "id"})
    )


def _label_studio_choice(record: dict[str, Any]) -> tuple[Any, Any] | None:
    """(grade as given, time of the annotation) from the latest completed annotation."""
    latest: tuple[Any, Any] | None = None
    latest_time: datetime | None = None
    annotations = record.get("annotations")
    for annotation in annotations if isinstance(annotations, list) else ():
        if not isinstance(annotation, dict) or annotation.get("was_cancelled"):
            continue
        results = annotation.get("result")
        for result in results if isinstance(results, list) else ():
            value = result.get("value") if isinstance(result, dict) else None
            if not isinstance(value, dict):
                continue
            if isinstance(value.get("choices"), list) and value["choices"]:
                given = value["choices"][0]
            elif "rating" in value:
                given = value["rating"]
            elif "number" in value:
                given = value["number"]
            else:
                continue
            stamp = annotation.get("updated_at") or annotation.get("created_at")
            try:
                when = None if stamp in (None, "") else parse_time(stamp, LABELED_AT_KEY)
            except (UsageError, TypeError, ValueError):
                when = None
            # The latest dated annotation wins; undated ones count in order, after dated ones
            # only when none is dated.
            if latest is None or (
                (when is not None and (latest_time is None or when >= latest_time))
                or (when is None and latest_time is None)
            ):
                latest, latest_time = (given, stamp), when
    return latest


def _label_studio_judgment(
    record: dict[str, Any], location: Location, fields: FieldMap, source: str | None
) -> Iterator[Judgment]:
    found = _label_studio_choice(record)
    if found is None:
        return
    given, stamp = found
    data = record["data"]
    key = next((k for k in DOCUMENT_KEYS if k in data), DOCUMENT_KEYS[0])
    row = {
        fields.query_id: data.get(fields.query_id),
        key: data.get(key),
        GRADE_KEYS[0]: given,
        LABELED_AT_KEY: stamp,
    }
    yield _row_judgment(row, location, fields, source)


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


# --------------------------------------------------------------------------------------------
# Labels as one Arrow table, joined to traces by a vectorised lookup


def label_table(
    data: Any,
    *,
    fields: FieldMap | None = None,
    input_format: str | None = None,
    label_source: str = "all",
    counts: dict[str, int] | None = None,
) -> Any:
    """Every query's labels as one ``pyarrow.Table``: ``query_id`` (string), ``relevance_scores``
    (map<string, float64>) and, when any judgment is dated, ``labeled_at`` (map<string,
    timestamp[us, UTC]>, a null value for an undated judgment), one row per query.

    ``data`` is anything ``collect_labels`` reads (a label file, qrels, a store URL), a dict of
    query ID to ``QueryLabels``, qrels as IR toolkits hold them (``{qid: {doc: grade}}``, a ranx
    ``Qrels``, ir_measures ``Qrel`` tuples: see ``io.ir_objects``), or a table of this shape
    already (checked, and returned in the canonical types). ``evaluate(traces, labels=...)``
    takes the table as it takes the rest. A list of paths or store URLs is read as one set of
    labels (a human's judgment of a pair beating a judge's). ``label_source`` keeps only one kind
    of label; ``counts``, when given, is filled with how many labels of each kind the table holds.
    """
    import pyarrow as pa

    check_label_source(label_source)
    if isinstance(data, pa.Table):
        if label_source == "judge":
            raise UsageError(
                "a labels table holds no label sources: label_source='judge' keeps none"
            )
        return _checked_label_table(data)
    data, qrels = qrels_of(data)
    labels: Mapping[str, Any]
    if qrels is not None:
        labels = (
            {query_id: QueryLabels(grades) for query_id, grades in qrels.items()}
            if label_source != "judge"
            else {}
        )
    elif isinstance(data, dict):
        labels = data
    elif (table := _bulk_qrels(data, input_format, label_source, counts)) is not None:
        return table
    else:
        labels = collect_labels(
            data, fields=fields, input_format=input_format, label_source=label_source
        )
    if counts is not None:
        counts.update(
            label_source_counts(
                {key: held for key, held in labels.items() if isinstance(held, QueryLabels)}
            )
        )
    query_ids: list[str] = []
    offsets = [0]
    documents: list[str] = []
    grades: list[float] = []
    stamps: list[datetime | None] = []
    for query_id, held in labels.items():
        if not isinstance(held, QueryLabels):
            raise UsageError(
                f"labels: expected QueryLabels for query {_clip(query_id)}, "
                f"got a {type(held).__name__}"
            )
        query_ids.append(str(query_id))
        documents.extend(held.grades)
        grades.extend(held.grades.values())
        stamps.extend(held.stamps.get(document) for document in held.grades)
        offsets.append(len(documents))
    offset_array = pa.array(offsets, pa.int32())
    # The documented types are (32-bit offset) strings; a cast between string types copies the
    # bytes without validating them, so IDs that are not valid UTF-8 survive it.
    keys = fast.text_array(documents).cast(pa.string())
    columns = {
        "query_id": fast.text_array(query_ids).cast(pa.string()),
        "relevance_scores": pa.MapArray.from_arrays(
            offset_array, keys, pa.array(grades, pa.float64())
        ),
    }
    if any(stamp is not None for stamp in stamps):
        columns["labeled_at"] = pa.MapArray.from_arrays(
            offset_array, keys, pa.array(stamps, _stamp_type())
        )
    return pa.table(columns)


def _bulk_qrels(
    data: Any, input_format: str | None, label_source: str, counts: dict[str, int] | None
) -> Any | None:
    """One qrels file's label table read in bulk (``io.trec.qrels_table``), or None when the
    file is something else, holds labels of the kind not asked for, or must be read line by
    line. Every judgment of one file is of one kind, the kind its name gives."""

    if not isinstance(data, (str, PathLike)):
        return None
    if not (input_format == QRELS or (input_format is None and _is_qrels_file(data))):
        return None
    by_model = is_judge_source(str(data))
    if label_source != "all" and by_model != (label_source == "judge"):
        return None
    table = qrels_table(Path(data))
    if table is None:
        return None
    if counts is not None:
        total = sum(len(chunk.keys) for chunk in table.column("relevance_scores").chunks)
        counts.update({"human": 0 if by_model else total, "judge": total if by_model else 0})
    return table


def _label_types() -> tuple[Any, Any]:
    import pyarrow as pa

    return pa.map_(pa.string(), pa.float64()), pa.map_(pa.string(), _stamp_type())


def _stamp_type() -> Any:
    import pyarrow as pa

    return pa.timestamp("us", tz="UTC")


def _scores_type() -> Any:
    """The grades' type inside the evaluation: large strings, as the readers give them."""
    import pyarrow as pa

    return pa.map_(pa.large_string(), pa.float64())


def _checked_label_table(table: Any) -> Any:
    """A caller's label table in the canonical types, or a one-line ``UsageError`` saying what is
    wrong with it (a missing column, a type that is not a map of grades, a repeated query ID, a
    grade out of range)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    scores_type, stamps_type = _label_types()
    for name in ("query_id", "relevance_scores"):
        if name not in table.schema.names:
            raise UsageError(
                f"labels table: no '{name}' column (columns: {', '.join(table.schema.names)})"
            )
    try:
        query_ids = table.column("query_id").cast(pa.string())
        scores = table.column("relevance_scores").cast(scores_type)
        stamps = (
            table.column("labeled_at").cast(stamps_type)
            if "labeled_at" in table.schema.names
            else None
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as problem:
        raise UsageError(
            "labels table: expected query_id text, relevance_scores map<string, float64> and "
            f"optionally labeled_at map<string, timestamp> ({problem})"
        ) from None
    if query_ids.null_count:
        raise UsageError("labels table: query_id has a null value")
    counts = pc.value_counts(query_ids)
    repeated = pc.filter(counts.field("values"), pc.greater(counts.field("counts"), 1))
    if len(repeated):
        raise UsageError(f"labels table: query_id {_clip(repeated[0].as_py())} is repeated")
    columns = {"query_id": query_ids.combine_chunks(), "relevance_scores": scores.combine_chunks()}
    grades = columns["relevance_scores"]
    values = grades.items
    if len(values):
        bad = pc.or_kleene(
            pc.is_null(values),
            pc.invert(pc.and_(pc.greater_equal(values, 0.0), pc.less_equal(values, MAX_GRADE))),
        )
        if pc.any(pc.fill_null(bad, True)).as_py():
            raise UsageError(
                f"labels table: every grade must be a number between 0 and {MAX_GRADE:g}"
            )
    if pc.any(pc.fill_null(pc.equal(grades.keys, ""), True)).as_py():
        raise UsageError("labels table: a document ID is null or empty")
    if stamps is not None:
        columns["labeled_at"] = stamps.combine_chunks()
    return pa.table(columns)


class LabelIndex:
    """Separately kept labels, looked up by query ID for whole Arrow columns at once.

    ``attach`` gives every row of a chunk that carries no labels of its own the labels of its query
    (``pyarrow.compute.index_in`` and ``take``: no Python object per ID); ``get`` serves the few
    rows the validator reads, through a dict built the first time one is asked for."""

    def __init__(self, table: Any) -> None:
        import pyarrow as pa

        table = _checked_label_table(table)
        self.query_ids = (
            table.column("query_id").chunk(0) if table.num_rows else pa.array([], pa.string())
        )
        scores = table.column("relevance_scores")
        self.scores = (
            scores.chunk(0).cast(_scores_type()) if table.num_rows else pa.array([], _scores_type())
        )
        self.stamps = None
        if "labeled_at" in table.schema.names and table.num_rows:
            self.stamps = table.column("labeled_at").chunk(0)
        self._rows: dict[str, int] | None = None
        self._index: IdIndex | None = None

    @property
    def dated(self) -> bool:
        return self.stamps is not None

    def has_relevant(self, threshold: float) -> Any:
        """Per query (in table order), whether any label reaches ``threshold``."""
        return queries_with_relevant(self.scores, threshold)

    def rows_of(self, query_ids: Any) -> npt.NDArray[np.int64]:
        """Each ID's row in the table, -1 where the query has none."""
        if self._index is None:  # hashed once, on the first block that asks
            self._index = IdIndex(self.query_ids)
        return self._index.find(query_ids)

    def get(self, query_id: str) -> QueryLabels | None:
        """One query's labels, for a row the validator read."""
        if self._rows is None:
            self._rows = {text: row for row, text in enumerate(self.query_ids.to_pylist())}
        row = self._rows.get(query_id)
        if row is None:
            return None
        held = QueryLabels()
        pairs = self.scores[row].as_py() or []
        stamps = dict(self.stamps[row].as_py() or []) if self.stamps is not None else {}
        for document, grade in pairs:
            held.grades[document] = float(grade)
            held.stamps[document] = stamps.get(document)
        return held


# --------------------------------------------------------------------------------------------
# The query set a run is expected to cover


def read_query_set(data: Any, *, fields: FieldMap | None = None) -> Any:
    """The IDs of a golden query set as an Arrow string array, first appearance kept, repeats
    dropped.

    ``data`` is a path or an iterable of IDs. A file named ``*.jsonl``, ``*.json``, ``*.csv``,
    ``*.tsv`` or ``*.parquet`` (``.gz`` allowed) is read as records, each naming its query in
    ``query_id`` (or the field ``fields.query_id`` names); any other file holds one ID per line,
    surrounding white space removed, blank lines and lines starting with ``#`` ignored.
    """
    import pyarrow as pa

    if isinstance(data, (pa.Array, pa.ChunkedArray)):
        ids: list[str] = [str(value) for value in data.to_pylist() if value is not None]
    elif isinstance(data, (str, PathLike)):
        ids = list(_query_set_file(Path(data), fields or FieldMap()))
    else:
        ids = []
        for value in data:
            if not isinstance(value, str) or not value:
                raise UsageError(f"queries: expected query IDs as text, got {_clip(value)}")
            ids.append(value)
    return fast.text_array(list(dict.fromkeys(ids)))


def _query_set_file(path: Path, fields: FieldMap) -> Iterator[str]:
    from rankgate.io.bounded import bounded_lines, open_binary, too_long_problem
    from rankgate.io.source import decompressed, require_file

    require_file(path)
    if data_suffix(path) in QUERY_SET_RECORD_SUFFIXES:
        for raw in open_source(path):
            record = raw.value
            value = record.get(fields.query_id) if isinstance(record, dict) else None
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                value = str(value)
            if not isinstance(value, str) or not value:
                raise InputError(
                    raw.location, fields.query_id, f"expected a query ID, got {_clip(value)}"
                )
            yield value
        return
    with open_binary(path) as stream:
        for number, (line, too_long) in enumerate(bounded_lines(decompressed(stream)), start=1):
            if too_long:
                raise InputError(Location(str(path), line=number), None, too_long_problem())
            try:
                text = line.decode("utf-8-sig" if number == 1 else "utf-8").strip()
            except UnicodeDecodeError as problem:
                raise InputError(
                    Location(str(path), line=number),
                    None,
                    f"line is not valid UTF-8 ({problem.reason})",
                ) from None
            if not text or text.startswith("#"):
                continue
            if utf8_length(text) > limits.MAX_ID_BYTES:
                raise InputError(
                    Location(str(path), line=number),
                    "query_id",
                    f"ID is {utf8_length(text):,} bytes, more than the limit of "
                    f"{size_text(limits.MAX_ID_BYTES)}",
                )
            yield text


def queries_with_relevant(scores: Any, threshold: float) -> Any:
    """Per row of a ``map<string, float64>`` array of grades, whether any grade reaches
    ``threshold``: a NumPy bool array computed over the flattened grades (no Python object per
    query). A null or non-numeric grade reaches nothing; the join reports it where it is used."""
    import numpy as np
    import pyarrow as pa

    if isinstance(scores, pa.ChunkedArray):
        scores = scores.combine_chunks()
    count = len(scores)
    relevant = np.zeros(count, dtype=np.bool_)
    if not count:
        return relevant
    # The map's offsets index its (unsliced) grade column.
    offsets = fast.numpy_of(scores.offsets).astype(np.int64, copy=False)
    items = scores.items.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
    try:
        items = items.cast(pa.float64())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return relevant
    grades = fast.numpy_filled(items, math.nan).astype(np.float64, copy=False)
    owner = np.repeat(np.arange(count, dtype=np.int64), np.diff(offsets))
    relevant[owner[grades >= threshold]] = True
    return relevant
