"""Genuine OTLP/JSON exports for the OTLP reader's tests, written with the real OpenTelemetry SDK.

Spans are recorded by a ``TracerProvider`` into an in-memory exporter, encoded by the OTLP
exporter's own encoder into an ``ExportTraceServiceRequest`` and turned into JSON by protobuf's JSON
mapping, so the reader is tested on what an SDK really produces (int64 as strings, IDs as base64,
attributes in insertion order), not on JSON written by hand to match the reader.
"""

from __future__ import annotations

import gzip
import json
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from google.protobuf.json_format import MessageToDict
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

# 2024-05-01T12:00:00Z in nanoseconds: spans get fixed, known start times.
BASE_NS = 1_714_564_800 * 1_000_000_000


@dataclass
class Recorder:
    """A tracer provider with one resource, whose finished spans are kept in memory."""

    resource: Mapping[str, Any]
    max_attributes: int | None = None
    exporter: InMemorySpanExporter = field(default_factory=InMemorySpanExporter)

    def __post_init__(self) -> None:
        limits = SpanLimits(max_span_attributes=self.max_attributes)
        self.provider = TracerProvider(
            resource=Resource.create(dict(self.resource)),
            span_limits=limits,
            shutdown_on_exit=False,
        )
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.tracer = self.provider.get_tracer("rankgate-tests")
        self._clock = BASE_NS

    def span(self, name: str, attributes: Mapping[str, Any]) -> None:
        """Record one finished span with these attributes, in this insertion order."""
        self._clock += 1_000_000_000
        span = self.tracer.start_span(name, start_time=self._clock)
        for key, value in attributes.items():
            span.set_attribute(key, value)
        span.end(end_time=self._clock + 5_000_000)

    def spans(self) -> tuple[ReadableSpan, ...]:
        return self.exporter.get_finished_spans()


def retriever_attributes(
    query_id: str,
    query: str,
    documents: Sequence[tuple[int, Any, float | None]],
    extra: Mapping[str, Any] | None = None,
    *,
    prefix: str = "retrieval.documents",
    kind: str = "RETRIEVER",
    query_key: str = "input.value",
    content: bool = True,
    seed: int | None = 0,
) -> dict[str, Any]:
    """OpenInference attributes for a ranking of ``(N, id, score)``, inserted in shuffled order
    when ``seed`` is given, so only N can tell the reader the rank."""
    pairs: list[tuple[str, Any]] = [
        ("openinference.span.kind", kind),
        ("query.id", query_id),
        (query_key, query),
    ]
    for n, doc_id, score in documents:
        if doc_id is not None:
            pairs.append((f"{prefix}.{n}.document.id", doc_id))
        if score is not None:
            pairs.append((f"{prefix}.{n}.document.score", score))
        if content:
            pairs.append((f"{prefix}.{n}.document.content", f"text of {doc_id}"))
    pairs.extend((extra or {}).items())
    if seed is not None:
        random.Random(seed).shuffle(pairs)
    return dict(pairs)


def request_dict(spans: Iterable[ReadableSpan]) -> dict[str, Any]:
    """The spans as one OTLP/JSON ``ExportTraceServiceRequest``."""
    return MessageToDict(encode_spans(list(spans)))


def write_json(path: Path, spans: Iterable[ReadableSpan]) -> Path:
    """One pretty-printed request, as ``MessageToJson`` writes it."""
    path.write_text(json.dumps(request_dict(spans), indent=2) + "\n", encoding="utf-8")
    return path


def write_jsonl(path: Path, batches: Iterable[Iterable[ReadableSpan]], *, gz: bool = False) -> Path:
    """One request per line, as the Collector's file exporter writes it; gzip when ``gz``."""
    text = "".join(json.dumps(request_dict(batch)) + "\n" for batch in batches)
    data = text.encode("utf-8")
    path.write_bytes(gzip.compress(data) if gz else data)
    return path
