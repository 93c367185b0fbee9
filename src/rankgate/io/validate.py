"""Turning raw records into validated traces, with errors that say exactly where and what.

Every reader yields ``RawRecord``s (a location plus whatever the format decoded); this module is the
one place that decides what a valid trace is. Field names are mapped with ``FieldMap`` (dotted paths
reach nested objects), and a record whose fields sit one level down under ``input`` (the design note's
``Example.Input``) is read from there.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rankgate.errors import ConfigError, InputError, Location
from rankgate.io import limits
from rankgate.io.bounded import NestingError, decode_json, deeper_than, size_text, utf8_length

__all__ = ["FieldMap", "RawRecord", "Trace", "validate_record"]

# The key under which the design note's per-example evaluator kept its fields.
NESTED_INPUT_KEY = "input"
# Exponential gain 2^g - 1 overflows a double beyond g = 1023; real scales are 0-3 or 0-100.
MAX_GRADE = 1000.0


@dataclass(frozen=True, slots=True)
class RawRecord:
    """One record as a reader decoded it.

    ``problem`` is set (and ``value`` is None) when the reader could not decode the record at all,
    so that ``--on-invalid skip`` can count it like any other invalid record (``problem_field``
    names the field or column it concerns, when one does). ``from_table`` is set
    by table readers (CSV, Parquet, DataFrames), whose cells differ from JSON values in two ways: a
    null is a missing value (an empty cell, an absent struct field), and a list or map may arrive as
    JSON text in a string cell.
    """

    location: Location
    value: Any
    ordinal: int
    problem: str | None = None
    from_table: bool = False
    problem_field: str | None = None


@dataclass(frozen=True, slots=True)
class FieldMap:
    """Where each trace field lives in a record: a key, or a dotted path such as ``meta.ids``."""

    query_id: str = "query_id"
    retrieved_ids: str = "retrieved_ids"
    relevant_ids: str = "relevant_ids"
    relevance_scores: str = "relevance_scores"

    @classmethod
    def from_assignments(
        cls, assignments: Mapping[str, str], base: FieldMap | None = None
    ) -> FieldMap:
        """Override fields from ``{"retrieved_ids": "metadata.retrieval.ids"}`` style pairs."""
        known = {"query_id", "retrieved_ids", "relevant_ids", "relevance_scores"}
        values = {name: getattr(base or cls(), name) for name in known}
        for name, path in assignments.items():
            if name not in known:
                raise ConfigError(
                    f"unknown trace field {name!r} in field mapping "
                    f"(fields: {', '.join(sorted(known))})"
                )
            if not path or any(not part for part in path.split(".")):
                raise ConfigError(f"field {name}: {path!r} is not a key or dotted path")
            values[name] = path
        return cls(**values)

    def paths(self) -> tuple[str, ...]:
        return (self.query_id, self.retrieved_ids, self.relevant_ids, self.relevance_scores)


@dataclass(slots=True)
class Trace:
    """A validated trace: what the retriever returned and, when labeled, every document's grade.

    ``grades`` is None for an unlabeled query. ``relevant_ids`` contribute grade 1 unless
    ``relevance_scores`` gives the document a grade of its own.
    """

    location: Location
    query_id: str
    retrieved_ids: list[str]
    grades: dict[str, float] | None
    attributes: dict[str, Any] = field(default_factory=dict)


_MISSING = object()
_CELL_DECODER = json.JSONDecoder()


def validate_record(
    raw: RawRecord,
    fields: FieldMap,
    *,
    require_query_id: bool = False,
    require_ranking: bool = True,
) -> Trace:
    """Check one raw record and return its trace; raises ``InputError`` naming location and field.

    A ``Trace`` passes through as it is (callers that join records, like ``compare``, build them).
    ``require_query_id`` refuses a record without an ID (instead of naming it by position), for
    callers that pair records by ID; ``require_ranking=False`` reads labels-only records, whose
    ``retrieved_ids`` come back empty.
    """
    if isinstance(raw.value, Trace):
        return raw.value
    if raw.problem is not None:
        raise InputError(raw.location, raw.problem_field, raw.problem)
    record = raw.value
    if not isinstance(record, dict):
        raise InputError(raw.location, None, f"expected an object, got {kind_name(record)}")
    if deeper_than(record, limits.MAX_NESTING_DEPTH):
        raise InputError(raw.location, None, str(NestingError()))

    container, prefix = record, ""
    nested = record.get(NESTED_INPUT_KEY)
    if _lookup(record, fields.retrieved_ids) is _MISSING and isinstance(nested, dict):
        container, prefix = nested, NESTED_INPUT_KEY + "."

    def named(path: str) -> str:
        return prefix + path

    def lookup(path: str, *, may_be_json_text: bool = False) -> Any:
        # Inside `input` first; a field the example keeps beside `input` (often its ID) also counts.
        found = _lookup(container, path)
        if found is _MISSING and container is not record:
            found = _lookup(record, path)
        found = _plain(found)
        if may_be_json_text and raw.from_table:
            found = _decoded_text(found, raw.location, named(path))
        return found

    retrieved_raw = lookup(fields.retrieved_ids, may_be_json_text=True)
    if retrieved_raw is _MISSING or (retrieved_raw is None and raw.from_table):
        if require_ranking:
            if "resourceSpans" in record or "resource_spans" in record:
                raise InputError(raw.location, None, OTLP_RECORD_PROBLEM)
            raise InputError(raw.location, named(fields.retrieved_ids), "required field is missing")
        retrieved_raw = []
    if isinstance(retrieved_raw, (list, tuple)):
        _check_count(
            len(retrieved_raw),
            limits.MAX_IDS_PER_RANKING,
            "IDs",
            raw.location,
            named(fields.retrieved_ids),
        )
    retrieved = _id_list(retrieved_raw, raw.location, named(fields.retrieved_ids))

    relevant_raw = lookup(fields.relevant_ids, may_be_json_text=True)
    scores_raw = lookup(fields.relevance_scores, may_be_json_text=True)
    # Counted before any item is looked at: a million-label record costs nothing to refuse.
    label_count = sum(
        len(v) for v in (relevant_raw, scores_raw) if isinstance(v, (list, tuple, dict))
    )
    if label_count > limits.MAX_LABELS_PER_QUERY:
        too_many = named(
            fields.relevance_scores if isinstance(scores_raw, dict) else fields.relevant_ids
        )
        raise InputError(
            raw.location,
            too_many,
            f"query holds {label_count:,} labels (relevant_ids plus relevance_scores), more than "
            f"the limit of {limits.MAX_LABELS_PER_QUERY:,}",
        )
    relevant = (
        None
        if relevant_raw is _MISSING or relevant_raw is None
        else _id_list(relevant_raw, raw.location, named(fields.relevant_ids))
    )
    scores = _grades(scores_raw, raw.location, named(fields.relevance_scores), raw.from_table)
    grades: dict[str, float] | None = None
    if relevant is not None or scores is not None:
        grades = dict.fromkeys(relevant or (), 1.0)
        grades.update(scores or {})

    query_id = _query_id(lookup(fields.query_id), raw, named(fields.query_id), require_query_id)
    # Only keys consumed whole: with retrieved_ids at metadata.ids, metadata's other fields stay.
    used = {path for path in fields.paths() if path in container}
    attributes = {key: value for key, value in container.items() if key not in used}
    if container is not record:
        attributes.update((key, value) for key, value in record.items() if key != NESTED_INPUT_KEY)
    if not raw.from_table:
        # Table cells are typed columns read in bounded batches (a CSV row by the record bound),
        # and a columnar read never looks at the columns it does not need, so the text bound is
        # one of JSON records only: a record path and a columnar path must refuse the same rows.
        _check_text(attributes, raw.location)
    return Trace(raw.location, query_id, retrieved, grades, attributes)


OTLP_RECORD_PROBLEM = (
    "looks like an OpenTelemetry (OTLP) trace export (it holds resourceSpans), not a trace "
    "record; pass --input-format otlp to read its retriever spans"
)


def _check_count(count: int, limit: int, what: str, location: Location, field_name: str) -> None:
    if count > limit:
        raise InputError(
            location, field_name, f"holds {count:,} {what}, more than the limit of {limit:,}"
        )


def _check_text(attributes: Mapping[Any, Any], location: Location) -> None:
    """Every top-level text value (and field name) within ``MAX_TEXT_BYTES``."""
    limit = limits.MAX_TEXT_BYTES
    for key, value in attributes.items():
        name = key if isinstance(key, str) else str(key)
        if isinstance(key, str) and len(key) > limit // 4 and utf8_length(key) > limit:
            raise InputError(
                location,
                _short_text(key),
                f"field name is {utf8_length(key):,} bytes, more than the limit of "
                f"{size_text(limit)}",
            )
        if isinstance(value, str) and len(value) > limit // 4 and utf8_length(value) > limit:
            raise InputError(
                location,
                name,
                f"text is {utf8_length(value):,} bytes, more than the limit of {size_text(limit)}",
            )


def _short_text(text: str) -> str:
    return text if len(text) <= 40 else text[:37] + "..."


def lookup_path(container: Mapping[str, Any], path: str) -> Any:
    """The value at a key or dotted path, or None when there is none."""
    value = _lookup(container, path)
    return None if value is _MISSING else value


def _lookup(container: Mapping[str, Any], path: str) -> Any:
    """The value at a key or dotted path; ``_MISSING`` when absent, None when explicitly null."""
    if path in container:
        return container[path]
    head, dot, rest = path.partition(".")
    if dot and isinstance(container.get(head), dict):
        return _lookup(container[head], rest)
    return _MISSING


def kind_name(value: Any) -> str:
    """A JSON value's kind in words, for messages: null, boolean, string, list, object..."""
    if value is None:
        return "null"
    names = {
        bool: "boolean",
        str: "string",
        int: "integer",
        float: "number",
        list: "list",
        dict: "object",
    }
    return names.get(type(value), type(value).__name__)


def _plain(value: Any) -> Any:
    """Python values for numpy ones, which DataFrame rows carry (arrays for lists, np.int64 IDs)."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


def _decoded_text(value: Any, location: Location, field_name: str) -> Any:
    """CSV cells and text columns carry lists and maps as JSON text; decode them here."""
    if isinstance(value, str) and value.lstrip()[:1] in ("[", "{"):
        try:
            return decode_json(_CELL_DECODER, value)
        except NestingError as problem:
            raise InputError(location, field_name, str(problem)) from None
        except json.JSONDecodeError as problem:
            raise InputError(
                location, field_name, f"text is not valid JSON ({problem.msg})"
            ) from None
    return value


def _document_id(value: Any, location: Location, field_name: str) -> str:
    # Integer IDs are common in logs; 17 and "17" name the same document. Floats, booleans and
    # nested values are refused: their string forms ("1.0", "True") are almost never meant.
    value = _plain(value)
    if isinstance(value, str):
        if not value:
            raise InputError(location, field_name, "document ID is an empty string")
        _check_id_bytes(value, location, field_name)
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return _integer_text(value, location, field_name)
    raise InputError(
        location, field_name, f"expected a string or integer ID, got {kind_name(value)}"
    )


def _check_id_bytes(value: str, location: Location, field_name: str) -> None:
    limit = limits.MAX_ID_BYTES
    if len(value) > limit // 4 and utf8_length(value) > limit:
        raise InputError(
            location,
            field_name,
            f"ID is {utf8_length(value):,} bytes, more than the limit of {size_text(limit)}",
        )


def _integer_text(value: int, location: Location, field_name: str) -> str:
    # Python refuses str() of an int past sys.get_int_max_str_digits() with a ValueError; any
    # such int is far past the ID limit anyway.
    try:
        text = str(value)
    except ValueError:
        text = ""
    if not text or len(text) > limits.MAX_ID_BYTES:
        raise InputError(
            location,
            field_name,
            f"integer ID has more digits than the limit of {size_text(limits.MAX_ID_BYTES)}",
        )
    return text


def _id_list(value: Any, location: Location, field_name: str) -> list[str]:
    if isinstance(value, tuple):
        value = list(value)
    if not isinstance(value, list):
        raise InputError(location, field_name, f"expected a list of IDs, got {kind_name(value)}")
    # Fast path for the usual all-text list: join checks every item is a str in C, far quicker
    # than a Python-level check per ID on 100-document rankings; so does max(map(len)) for the
    # byte limit, which only a long ID (a quarter of the limit in characters) must be measured for.
    try:
        "".join(value)
    except TypeError:
        pass
    else:
        if "" not in value and max(map(len, value), default=0) <= limits.MAX_ID_BYTES // 4:
            return list(value)
    return [_document_id(item, location, f"{field_name}[{i}]") for i, item in enumerate(value)]


def _grades(
    value: Any, location: Location, field_name: str, from_table: bool
) -> dict[str, float] | None:
    if value is _MISSING or value is None:
        return None
    if not isinstance(value, dict):
        raise InputError(
            location,
            field_name,
            f"expected an object of document ID -> grade, got {kind_name(value)}",
        )
    grades: dict[str, float] = {}
    for key, raw_grade in value.items():
        doc = _document_id(key, location, field_name)
        grade = _plain(raw_grade)
        where = f"{field_name}.{doc}"
        if grade is None and from_table:
            continue
        if isinstance(grade, bool) or not isinstance(grade, (int, float)):
            raise InputError(
                location, where, f"grade must be a number >= 0, got {kind_name(grade)}"
            )
        try:
            as_float = float(grade)
        except OverflowError:
            as_float = math.inf
        if not math.isfinite(as_float) or as_float < 0:
            raise InputError(location, where, f"grade must be a number >= 0, got {_short(grade)}")
        if as_float > MAX_GRADE:
            raise InputError(
                location,
                where,
                f"grade must be at most {MAX_GRADE:g} (the gain 2^g - 1 overflows), got {_short(grade)}",
            )
        grades[doc] = as_float
    return grades


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _query_id(value: Any, raw: RawRecord, field_name: str, required: bool) -> str:
    if (value is _MISSING or value is None) and required:
        raise InputError(
            raw.location, field_name, "required field is missing (queries are paired by their ID)"
        )
    if value is _MISSING or value is None:
        # Records without an ID are still scored; they are named by their position in the input.
        return f"#{raw.ordinal}"
    if isinstance(value, str) and value:
        _check_id_bytes(value, raw.location, field_name)
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return _integer_text(value, raw.location, field_name)
    got = "an empty string" if value == "" else kind_name(value)
    raise InputError(
        raw.location, field_name, f"expected a non-empty string or an integer, got {got}"
    )
