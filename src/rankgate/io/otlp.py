"""Retriever spans from OpenTelemetry OTLP/JSON trace exports, one trace record per span.

Production RAG systems already trace their retriever, so the ranking users saw is sitting in the
trace backend. This reader turns an OTLP/JSON export (the protobuf JSON mapping of
``ExportTraceServiceRequest``) into the same records a JSON Lines trace file gives, so every later
step (validation, metrics, segments, gates) is shared with the other formats.

A file holds either one JSON document (possibly pretty-printed) or one request per line, as the
OpenTelemetry Collector's file exporter writes it; gzip is recognised by its first bytes. A folder
is read file by file, in name order.

Two span conventions carry a ranking:

* **OpenInference** (``openinference.span.kind``): a ``RETRIEVER`` span flattens its documents into
  ``retrieval.documents.N.document.{id,score,metadata}`` with the query in ``input.value``; a
  ``RERANKER`` span has ``reranker.output_documents.N.document.*`` and ``reranker.query``. The rank
  is N, read as a number: exporters do not keep attribute order, and N may have gaps.
* **OpenTelemetry GenAI retrieval spans** (development status in semantic-conventions v1.45 and the
  semantic-conventions-genai repository, docs/gen-ai/retrieval.md; added by
  open-telemetry/semantic-conventions PR #2924): ``gen_ai.operation.name`` is ``retrieval``, the
  query text is ``gen_ai.retrieval.query.text`` and the ranking is ``gen_ai.retrieval.documents``,
  a list of objects that SHOULD carry ``id`` (string) and ``score`` (double). On spans it is
  recorded structured or, where the SDK cannot, as a JSON string; both are read. Both attributes
  are opt-in (they are content), so a retrieval span without documents is reported, not scored.
  Such a span counts as a ``RETRIEVER`` for ``OtlpOptions.span_kinds``.

Spans of other kinds are counted in ``OtlpSource.stats`` and skipped. A malformed file stops the
run with an ``InputError`` (a broken request hides an unknown number of spans, so there is nothing
to skip); a malformed retriever span becomes a record with a problem, which ``--on-invalid skip``
counts like any other invalid record.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from rankgate.errors import ConfigError, InputError, Location, UsageError
from rankgate.io import limits
from rankgate.io.bounded import (
    NestingError,
    bounded_lines,
    cannot_read,
    decode_json,
    deeper_than,
    open_binary,
    size_text,
)
from rankgate.io.source import GZIP_ERRORS, bytes_done, decompressed, file_size
from rankgate.io.validate import RawRecord, kind_name

__all__ = ["OtlpOptions", "OtlpSource", "OtlpStats", "SpanLocation"]

RETRIEVER = "RETRIEVER"
RERANKER = "RERANKER"
SUPPORTED_KINDS = (RETRIEVER, RERANKER)

SPAN_KIND_ATTRIBUTE = "openinference.span.kind"
GENAI_OPERATION = "gen_ai.operation.name"
GENAI_RETRIEVAL_OPERATION = "retrieval"
GENAI_DOCUMENTS = "gen_ai.retrieval.documents"
GENAI_QUERY = "gen_ai.retrieval.query.text"

# Where each kind keeps its ranked documents (flattened) and its query text, in order of preference.
_DOCUMENT_PREFIX = {
    RETRIEVER: "retrieval.documents.",
    RERANKER: "reranker.output_documents.",
}
_QUERY_ATTRIBUTES = {
    RETRIEVER: ("input.value", GENAI_QUERY),
    RERANKER: ("reranker.query", "input.value"),
}
# Per-document attributes: the ranking itself, never copied into a record as fields.
_PER_DOCUMENT_PREFIXES = (
    "retrieval.documents.",
    "reranker.input_documents.",
    "reranker.output_documents.",
)
_DOCUMENT_KEY = re.compile(r"(\d+)\.document\.(id|score|metadata)")

# The record fields this reader computes; a span attribute of the same name never replaces them.
RESERVED_FIELDS = (
    "query_id",
    "retrieved_ids",
    "retrieved_scores",
    "query",
    "trace_id",
    "span_id",
    "span_name",
    "timestamp",
)
EXPORT_SUFFIXES = (".json", ".jsonl", ".json.gz", ".jsonl.gz")
TRUNCATED_EXAMPLES = 10
_BOM = "\ufeff"


@dataclass(frozen=True, slots=True)
class OtlpOptions:
    """What to take from an export.

    Attributes:
        span_kinds: OpenInference span kinds read as rankings (``RETRIEVER``, ``RERANKER``).
            A GenAI retrieval span counts as ``RETRIEVER``.
        query_id_attributes: attributes naming the query, tried in order on the span; when the span
            has none of them, in the same order on its resource. With none, the validator names
            the record by its position, as for any record without an ID.
        doc_id_metadata_key: when a document has no ID, the key of its metadata (a JSON object,
            often JSON text) that holds one. Without it, such a document makes its span invalid,
            since a ranking with a hole cannot be scored faithfully.
    """

    span_kinds: tuple[str, ...] = (RETRIEVER,)
    query_id_attributes: tuple[str, ...] = ("query.id", "rankgate.query_id", "input.value")
    doc_id_metadata_key: str | None = None

    def __post_init__(self) -> None:
        # A list from a config file is fine; the dataclass stays hashable and immutable.
        object.__setattr__(self, "span_kinds", tuple(self.span_kinds))
        object.__setattr__(self, "query_id_attributes", tuple(self.query_id_attributes))
        if not self.span_kinds:
            raise ConfigError("span_kinds is empty: name at least one (e.g. RETRIEVER)")
        for kind in self.span_kinds:
            if kind not in SUPPORTED_KINDS:
                raise ConfigError(
                    f"span kind {kind!r} carries no ranking rankgate can read "
                    f"(span kinds: {', '.join(SUPPORTED_KINDS)})"
                )
        for name in self.query_id_attributes:
            if not isinstance(name, str) or not name:
                raise ConfigError(f"query_id_attributes: {name!r} is not an attribute name")
        if self.doc_id_metadata_key is not None and (
            not isinstance(self.doc_id_metadata_key, str) or not self.doc_id_metadata_key
        ):
            raise ConfigError(
                f"doc_id_metadata_key: {self.doc_id_metadata_key!r} is not a metadata key"
            )


@dataclass(slots=True)
class OtlpStats:
    """What a pass over the export saw; complete once iteration ends.

    ``truncated`` counts taken spans whose ``droppedAttributesCount`` is above 0: the SDK's
    attribute limit (128 by default) may have cut their ranking short, so their scores may be
    wrong. ``truncated_examples`` locates the first few, for a warning.
    """

    files: int = 0
    requests: int = 0
    spans_seen: int = 0
    spans_used: int = 0
    spans_invalid: int = 0
    spans_other_kind: int = 0
    truncated: int = 0
    truncated_examples: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class SpanLocation(Location):
    """A record's place in an export: the file, the line its request starts on, and the span.

    A pretty-printed export is one request, so the line alone would not tell spans apart.
    """

    span_id: str = "?"

    def __str__(self) -> str:
        return f"{Location.__str__(self)} span {self.span_id}"


class _SpanProblem(Exception):
    """A span that was taken but cannot give a record; becomes the record's ``problem``."""


class OtlpSource:
    """Trace records from one OTLP/JSON export file, or from every export file in a folder.

    ``total`` and ``done()`` are in bytes (as stored, so gzip counts compressed) over all files.
    ``stats`` is reset at the start of each pass.
    """

    def __init__(self, path: str | Path, options: OtlpOptions | None = None) -> None:
        path = Path(path)
        if path.is_dir():
            files = sorted(
                (entry for entry in path.iterdir() if entry.is_file() and _is_export(entry)),
                key=lambda entry: entry.name,
            )
            if not files:
                raise UsageError(
                    f"{path}: folder holds no OTLP export file "
                    f"({', '.join('*' + suffix for suffix in EXPORT_SUFFIXES)})"
                )
        elif path.exists():
            files = [path]
        else:
            raise UsageError(f"{path}: no such file or folder")
        self.name = str(path)
        self.options = options or OtlpOptions()
        self.files: tuple[Path, ...] = tuple(files)
        self._sizes = [file_size(file) for file in files]
        known = [size for size in self._sizes if size is not None]
        self.total: int | None = sum(known) if len(known) == len(self._sizes) else None
        self.stats = OtlpStats()
        self._finished = 0
        self._raw: IO[bytes] | None = None
        self._raw_size: int | None = None

    def done(self) -> int:
        return self._finished + bytes_done(self._raw, self._raw_size)

    def __iter__(self) -> Iterator[RawRecord]:
        self.stats = OtlpStats()
        self._finished = 0
        ordinal = 0
        for path, size in zip(self.files, self._sizes, strict=True):
            self.stats.files += 1
            name = str(path)
            with open_binary(path) as raw:
                self._raw, self._raw_size = raw, size
                try:
                    for line, request in _requests(decompressed(raw), name):
                        self.stats.requests += 1
                        for location, span, resource in _spans(request, name, line):
                            self.stats.spans_seen += 1
                            record = self._record(span, resource, location, ordinal + 1)
                            if record is not None:
                                ordinal += 1
                                yield record
                except GZIP_ERRORS as problem:
                    raise InputError(
                        name, None, f"corrupt or truncated gzip data ({problem})"
                    ) from None
                except OSError as problem:
                    raise cannot_read(name, problem) from None
            self._raw = None
            self._finished += size or 0

    def _record(
        self,
        span: Mapping[str, Any],
        resource: Mapping[str, Any],
        location: SpanLocation,
        ordinal: int,
    ) -> RawRecord | None:
        """The span's record; None for a span of another kind (counted, not a record)."""
        problems: list[str] = []
        attributes = _attribute_map(_field(span, "attributes"), problems)
        kind = _span_kind(attributes)
        if kind not in self.options.span_kinds:
            self.stats.spans_other_kind += 1
            return None
        dropped = _dropped(span)
        if dropped > 0:
            self.stats.truncated += 1
            if len(self.stats.truncated_examples) < TRUNCATED_EXAMPLES:
                self.stats.truncated_examples.append(str(location))
        span_name = _field(span, "name")
        label = f"{kind.lower()} span {span_name!r}" if isinstance(span_name, str) else "span"
        try:
            if problems:
                raise _SpanProblem(problems[0])
            record = self._fields(kind, span, attributes, resource, location)
        except _SpanProblem as problem:
            self.stats.spans_invalid += 1
            # Attribute limits drop the oldest attributes, which can leave half a document behind.
            why = f" (the span dropped {dropped} attributes)" if dropped > 0 else ""
            return RawRecord(location, None, ordinal, problem=f"{label}: {problem}{why}")
        self.stats.spans_used += 1
        return RawRecord(location, record, ordinal)

    def _fields(
        self,
        kind: str,
        span: Mapping[str, Any],
        attributes: Mapping[str, Any],
        resource: Mapping[str, Any],
        location: SpanLocation,
    ) -> dict[str, Any]:
        ids, scores = self._ranking(kind, attributes)
        record: dict[str, Any] = {}
        query_id = _first_present(attributes, self.options.query_id_attributes)
        if query_id is None:
            query_id = _first_present(resource, self.options.query_id_attributes)
        if query_id is not None:
            record["query_id"] = query_id
        record["retrieved_ids"] = ids
        if any(score is not None for score in scores):
            record["retrieved_scores"] = scores
        query = _first_present(attributes, _QUERY_ATTRIBUTES[kind])
        if query is not None:
            record["query"] = query
        record["trace_id"] = _hex_id(_field(span, "traceId"), 16)
        record["span_id"] = location.span_id
        record["span_name"] = _field(span, "name")
        timestamp = _timestamp(_field(span, "startTimeUnixNano"))
        if timestamp is not None:
            record["timestamp"] = timestamp
        # Resource first, so a span attribute of the same name wins.
        for source in (resource, attributes):
            for key, value in source.items():
                if key not in RESERVED_FIELDS and _is_scalar(value) and not _per_document(key):
                    record[key] = value
        return record

    def _ranking(
        self, kind: str, attributes: Mapping[str, Any]
    ) -> tuple[list[str], list[float | None]]:
        prefix = _DOCUMENT_PREFIX[kind]
        flattened: dict[int, dict[str, Any]] = {}
        for key, value in attributes.items():
            if key.startswith(prefix):
                match = _DOCUMENT_KEY.fullmatch(key, len(prefix))
                if match:
                    flattened.setdefault(int(match[1]), {})[match[2]] = value
        documents: list[tuple[str, Mapping[str, Any]]]
        if flattened:
            # The rank is N as a number ("10" after "9"), gaps allowed; attribute order means nothing.
            documents = [(f"{prefix}{n}", flattened[n]) for n in sorted(flattened)]
        elif kind == RETRIEVER and GENAI_DOCUMENTS in attributes:
            documents = _genai_documents(attributes[GENAI_DOCUMENTS])
        elif kind == RETRIEVER and attributes.get(GENAI_OPERATION) == GENAI_RETRIEVAL_OPERATION:
            raise _SpanProblem(
                f"GenAI retrieval span has no {GENAI_DOCUMENTS} (it is opt-in: enable content "
                "capture in the instrumentation)"
            )
        else:
            documents = []  # a retriever that found nothing records no document attributes
        ids = [self._document_id(where, document) for where, document in documents]
        scores = [_score(where, document.get("score")) for where, document in documents]
        return ids, scores

    def _document_id(self, where: str, document: Mapping[str, Any]) -> str:
        value = document.get("id")
        key = self.options.doc_id_metadata_key
        if value is None and key is not None:
            value = _metadata(where, document.get("metadata")).get(key)
            where = f"{where} metadata key {key!r}"
        if value is None:
            hint = "" if key is not None else " (doc_id_metadata_key can take it from metadata)"
            raise _SpanProblem(f"{where} has no document id{hint}")
        if isinstance(value, bool) or not isinstance(value, (str, int)) or value == "":
            raise _SpanProblem(
                f"{where}: document id must be a non-empty string or an integer, got {value!r}"
            )
        return str(value)


# ---------------------------------------------------------------------------------------------
# Reading requests from a file


def _refuse_constant(name: str) -> Any:
    # NaN and Infinity are not JSON; OTLP/JSON writes a non-finite double as the string "NaN".
    raise ValueError(f"{name} is not valid JSON")


_DECODER = json.JSONDecoder(parse_constant=_refuse_constant)


def _requests(stream: IO[bytes], name: str) -> Iterator[tuple[int, Any]]:
    """Each request in a file, with the line it starts on: one per line, or the whole file as one.

    The first non-blank line decides. If it is a complete JSON value, the file is JSON Lines. If it
    is a value cut short at the end of the line, the file is one (pretty-printed) document. Anything
    else is a broken first line, reported there. One request may be at most ``MAX_RECORD_BYTES``
    long and nest ``MAX_NESTING_DEPTH`` deep: a longer one stops the run (it holds an unknown
    number of spans, so there is nothing to skip).
    """
    lines = bounded_lines(stream)
    number = 0
    first = ""
    for number, (line, too_long) in enumerate(lines, start=1):
        if too_long:
            raise _too_long(name, number)
        first = _text(line, name, number, strip_bom=number == 1)
        if first.strip():
            break
    if not first.strip():
        return  # an empty export holds no spans
    try:
        value = _decode(first)
    except NestingError as problem:
        raise InputError(Location(name, line=number), None, str(problem)) from None
    except ValueError as problem:
        if not _cut_short(problem, first):
            raise _json_error(name, number, problem) from None
        room = limits.MAX_RECORD_BYTES - len(first)
        rest = stream.read(room + 1)
        if len(rest) > room:
            raise _too_long(name, number) from None
        whole = first + _text(rest, name, number + 1, strip_bom=False)
        try:
            value = _decode(whole)
        except NestingError as problem:
            raise InputError(Location(name, line=number), None, str(problem)) from None
        except ValueError as problem:
            at = number + (problem.lineno - 1 if isinstance(problem, json.JSONDecodeError) else 0)
            raise _json_error(name, at, problem) from None
        yield number, value
        return
    yield number, value
    for later, (line, too_long) in enumerate(lines, start=number + 1):
        if too_long:
            raise _too_long(name, later)
        text = _text(line, name, later, strip_bom=False)
        if not text.strip():
            continue
        try:
            value = _decode(text)
        except NestingError as problem:
            raise InputError(Location(name, line=later), None, str(problem)) from None
        except ValueError as problem:
            raise _json_error(name, later, problem) from None
        yield later, value


def _decode(text: str) -> Any:
    """One request decoded, its nesting bounded: attribute values nest (``kvlistValue``), and
    reading them recurses."""
    value = decode_json(_DECODER, text)
    if deeper_than(value, limits.MAX_NESTING_DEPTH):
        raise NestingError()
    return value


def _too_long(name: str, line: int) -> InputError:
    return InputError(
        Location(name, line=line),
        None,
        f"OTLP request is longer than {size_text(limits.MAX_RECORD_BYTES)} (the limit on one "
        "record); export in smaller batches",
    )


def _text(data: bytes, name: str, line: int, *, strip_bom: bool) -> str:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(Location(name, line=line), None, "not valid UTF-8") from None
    return text.removeprefix(_BOM) if strip_bom else text


def _cut_short(problem: ValueError, text: str) -> bool:
    """True when decoding failed only because the text ended: a document continues below."""
    return isinstance(problem, json.JSONDecodeError) and problem.pos >= len(text.rstrip())


def _reason(problem: ValueError) -> str:
    return problem.msg if isinstance(problem, json.JSONDecodeError) else str(problem)


def _json_error(name: str, line: int, problem: ValueError) -> InputError:
    return InputError(Location(name, line=line), None, f"not valid JSON ({_reason(problem)})")


def _spans(
    request: Any, name: str, line: int
) -> Iterator[tuple[SpanLocation, Mapping[str, Any], dict[str, Any]]]:
    """Every span of one request, located, with its resource's attributes.

    Anything wrong above the span (the request, a resource, a scope) is an ``InputError``: it
    cannot be charged to one span.
    """
    where = Location(name, line=line)
    if not isinstance(request, dict):
        raise InputError(
            where, None, f"expected an OTLP/JSON trace export (an object), got {kind_name(request)}"
        )
    resource_spans = _field(request, "resourceSpans")
    if resource_spans is None:
        for signal in ("resourceLogs", "resourceMetrics", "resourceProfiles"):
            if _field(request, signal) is not None:
                raise InputError(
                    where, None, f"this is an OTLP {signal[8:].lower()} export, not traces"
                )
        if request:
            keys = ", ".join(sorted(map(str, request))[:5])
            raise InputError(
                where, None, f"not an OTLP/JSON trace export: no resourceSpans (keys: {keys})"
            )
        return  # {}: a request without spans, as protobuf's JSON mapping writes it
    for resource_entry in _list(resource_spans, where, "resourceSpans"):
        if not isinstance(resource_entry, dict):
            raise InputError(
                where, "resourceSpans[]", f"expected an object, got {kind_name(resource_entry)}"
            )
        resource = _field(resource_entry, "resource") or {}
        if not isinstance(resource, dict):
            raise InputError(where, "resource", f"expected an object, got {kind_name(resource)}")
        problems: list[str] = []
        resource_attributes = _attribute_map(_field(resource, "attributes"), problems)
        if problems:
            raise InputError(where, "resource.attributes", problems[0])
        scopes = _field(resource_entry, "scopeSpans")
        for scope in _list(scopes or [], where, "scopeSpans"):
            if not isinstance(scope, dict):
                raise InputError(
                    where, "scopeSpans[]", f"expected an object, got {kind_name(scope)}"
                )
            for span in _list(_field(scope, "spans") or [], where, "spans"):
                if not isinstance(span, dict):
                    raise InputError(where, "spans[]", f"expected an object, got {kind_name(span)}")
                span_id = _hex_id(_field(span, "spanId"), 8) or "?"
                yield SpanLocation(name, line=line, span_id=span_id), span, resource_attributes


def _list(value: Any, where: Location, name: str) -> list[Any]:
    if not isinstance(value, list):
        raise InputError(where, name, f"expected a list, got {kind_name(value)}")
    return value


# ---------------------------------------------------------------------------------------------
# The protobuf JSON mapping


def _snake(name: str) -> str:
    return re.sub(r"([A-Z])", lambda match: "_" + match[1].lower(), name)


def _field(message: Mapping[str, Any], name: str) -> Any:
    """A message field by its JSON name (lowerCamelCase) or its proto name: parsers accept both."""
    if name in message:
        return message[name]
    return message.get(_snake(name))


def _attribute_map(entries: Any, problems: list[str]) -> dict[str, Any]:
    """``[{key, value: AnyValue}]`` as a dict of Python values; what cannot be read goes to
    ``problems`` (the caller decides whether it matters), the rest is kept."""
    if entries is None:
        return {}
    if not isinstance(entries, list):
        problems.append(f"attributes: expected a list, got {kind_name(entries)}")
        return {}
    decoded: dict[str, Any] = {}
    for entry in entries:
        key = entry.get("key") if isinstance(entry, dict) else None
        if not isinstance(key, str):
            problems.append(f"attribute without a key: {_short(entry)}")
            continue
        try:
            decoded[key] = _any_value(entry.get("value"))
        except ValueError as problem:
            problems.append(f"attribute {key!r}: {problem}")
    return decoded


def _any_value(value: Any) -> Any:
    """An OTLP ``AnyValue`` as a Python value. int64 arrives as a string in JSON (and as a number
    from lenient writers); a non-finite double as ``"NaN"`` / ``"Infinity"``."""
    if value is None:
        return None  # an unset value: protobuf's JSON mapping leaves it out
    if not isinstance(value, dict):
        raise ValueError(f"expected an AnyValue object, got {kind_name(value)}")
    if not value:
        return None
    for name in ("stringValue", "bytesValue"):
        found = _field(value, name)
        if found is not None:
            if not isinstance(found, str):
                raise ValueError(f"{name} must be a string, got {kind_name(found)}")
            return found
    found = _field(value, "boolValue")
    if found is not None:
        if not isinstance(found, bool):
            raise ValueError(f"boolValue must be true or false, got {_short(found)}")
        return found
    found = _field(value, "intValue")
    if found is not None:
        if isinstance(found, int) and not isinstance(found, bool):
            return found
        if isinstance(found, str) and re.fullmatch(r"-?\d+", found):
            return int(found)
        raise ValueError(f"intValue must be an integer (a string in JSON), got {_short(found)}")
    found = _field(value, "doubleValue")
    if found is not None:
        if isinstance(found, (int, float)) and not isinstance(found, bool):
            return float(found)
        if isinstance(found, str):
            try:
                return float(found)
            except ValueError:
                pass
        raise ValueError(f"doubleValue must be a number, got {_short(found)}")
    found = _field(value, "arrayValue")
    if found is not None:
        items = _field(found, "values") if isinstance(found, dict) else None
        if not isinstance(items or [], list):
            raise ValueError("arrayValue.values must be a list")
        return [_any_value(item) for item in items or []]
    found = _field(value, "kvlistValue")
    if found is not None:
        entries = _field(found, "values") if isinstance(found, dict) else None
        problems: list[str] = []
        decoded = _attribute_map(entries or [], problems)
        if problems:
            raise ValueError(f"kvlistValue: {problems[0]}")
        return decoded
    raise ValueError(f"unknown AnyValue {_short(value)}")


def _hex_id(value: Any, size: int) -> str | None:
    """A trace or span ID as lowercase hex, the form every trace UI shows.

    OTLP/JSON writes IDs as hex, but protobuf's generic JSON mapping (``MessageToJson``) writes
    bytes as base64; the length tells them apart (hex is twice the byte count).
    """
    if not isinstance(value, str) or not value:
        return None
    if len(value) == 2 * size and re.fullmatch(r"[0-9a-fA-F]+", value):
        return value.lower()
    try:
        decoded = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return value
    return decoded.hex() if len(decoded) == size else value


def _timestamp(value: Any) -> str | None:
    """Nanoseconds since the epoch (fixed64: a string in JSON) as ISO-8601 UTC, microseconds."""
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        return None
    seconds, nanos = divmod(value, 1_000_000_000)
    moment = datetime.fromtimestamp(seconds, UTC).replace(microsecond=nanos // 1000)
    return moment.isoformat(timespec="microseconds").replace("+00:00", "Z")


def _dropped(span: Mapping[str, Any]) -> int:
    value = _field(span, "droppedAttributesCount")
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


# ---------------------------------------------------------------------------------------------
# Span conventions


def _span_kind(attributes: Mapping[str, Any]) -> str | None:
    """The span's kind: declared, else inferred from where its documents are.

    Inference matters for long rankings: the SDK's attribute limit drops the *oldest* attributes
    first, and instrumentations set the span kind first, so a truncated retriever span has often
    lost its kind while keeping its (lower-ranked) documents.
    """
    declared = attributes.get(SPAN_KIND_ATTRIBUTE)
    if isinstance(declared, str) and declared:
        return declared.upper()
    for kind, prefix in _DOCUMENT_PREFIX.items():
        if any(key.startswith(prefix) for key in attributes):
            return kind
    if (
        attributes.get(GENAI_OPERATION) == GENAI_RETRIEVAL_OPERATION
        or GENAI_DOCUMENTS in attributes
    ):
        return RETRIEVER
    return None


def _genai_documents(value: Any) -> list[tuple[str, Mapping[str, Any]]]:
    """``gen_ai.retrieval.documents``, structured or as JSON text, in rank order (list order)."""
    if isinstance(value, str):
        try:
            value = decode_json(_DECODER, value)
        except NestingError as problem:
            raise _SpanProblem(f"{GENAI_DOCUMENTS}: {problem}") from None
        except ValueError as problem:
            raise _SpanProblem(
                f"{GENAI_DOCUMENTS}: text is not valid JSON ({_reason(problem)})"
            ) from None
    if not isinstance(value, list):
        raise _SpanProblem(
            f"{GENAI_DOCUMENTS}: expected a list of documents, got {kind_name(value)}"
        )
    documents: list[tuple[str, Mapping[str, Any]]] = []
    for index, document in enumerate(value):
        where = f"{GENAI_DOCUMENTS}[{index}]"
        if not isinstance(document, dict):
            raise _SpanProblem(f"{where}: expected an object with an id, got {kind_name(document)}")
        documents.append((where, document))
    return documents


def _metadata(where: str, value: Any) -> Mapping[str, Any]:
    """A document's metadata as an object; OpenInference stores it as JSON text."""
    if value is None:
        return {}
    if isinstance(value, str):
        try:
            value = decode_json(_DECODER, value)
        except NestingError as problem:
            raise _SpanProblem(f"{where} metadata: {problem}") from None
        except ValueError as problem:
            raise _SpanProblem(f"{where} metadata is not valid JSON ({_reason(problem)})") from None
    if not isinstance(value, dict):
        raise _SpanProblem(f"{where} metadata: expected an object, got {kind_name(value)}")
    return value


def _score(where: str, value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _SpanProblem(f"{where}: score must be a number, got {_short(value)}")
    score = float(value)
    return score if math.isfinite(score) else None


def _first_present(attributes: Mapping[str, Any], names: tuple[str, ...]) -> Any:
    for name in names:
        value = attributes.get(name)
        if value is not None:
            return value
    return None


def _per_document(key: str) -> bool:
    return key == GENAI_DOCUMENTS or key.startswith(_PER_DOCUMENT_PREFIXES)


def _is_scalar(value: Any) -> bool:
    return isinstance(value, (str, int, float, bool))


def _is_export(path: Path) -> bool:
    return path.name.lower().endswith(EXPORT_SUFFIXES)


def _short(value: Any) -> str:
    text = json.dumps(value) if isinstance(value, (dict, list, str)) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
