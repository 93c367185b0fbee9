"""OTLP/JSON exports of retriever spans, written by the real OpenTelemetry SDK, read as traces.

The central check: the same queries, written once as rankgate JSON Lines and once as an SDK export
(attributes in shuffled order, gaps in N), give exactly the same per-query numbers.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from otlp_export import BASE_NS, Recorder, retriever_attributes, write_json, write_jsonl

import rankgate
from rankgate import ConfigError, InputError, UsageError
from rankgate.io import FieldMap, OtlpOptions, OtlpSource, open_source, validate_record
from rankgate.io.otlp import SpanLocation

METRICS = ["ndcg@10", "mrr", "recall@20"]
RESOURCE = {"service.name": "search-api", "deployment.environment": "prod", "team": "platform"}

# (query_id, query text, [(N, doc id, score)], labels or None, retriever.name)
QUERIES: list[tuple[str, str, list[tuple[int, Any, float | None]], dict[str, int] | None, str]] = [
    (
        "q-1",
        "capital of france",
        # 12 documents, N 0..11: read as text, "10" and "11" would sort right after "1"
        [(n, f"d{n}", round(1.0 - n / 20, 3)) for n in range(12)],
        {"d0": 0, "d3": 2, "d10": 3, "d-unseen": 1},
        "dense",
    ),
    (
        "q-2",
        "reset my password",
        # gaps in N, an integer ID, one document without a score
        [(3, "p9", 0.9), (7, 17, None), (8, "p1", 0.4), (20, "p4", 0.1)],
        {"17": 1, "p4": 2},
        "bm25",
    ),
    ("q-3", "nothing matches this", [], {"z1": 1}, "bm25"),
    ("q-4", "unlabeled query", [(0, "u1", 0.5), (1, "u2", 0.4)], None, "dense"),
    ("q-5", "second rank wins", [(1, "a", 0.8), (2, "b", 0.7), (0, "c", 0.95)], {"b": 1}, "dense"),
]


def expected_ids(documents: list[tuple[int, Any, float | None]]) -> list[str]:
    return [str(doc_id) for _, doc_id, _ in sorted(documents)]


def record_spans(recorder: Recorder, *, noise: bool = True) -> None:
    """Every query as a retriever span, with an LLM span and a plain HTTP span in between."""
    for index, (query_id, query, documents, _, retriever) in enumerate(QUERIES):
        extra = {"retriever.name": retriever, "team": "ranking", "top_k": len(documents)}
        recorder.span(
            "retrieve", retriever_attributes(query_id, query, documents, extra, seed=index)
        )
        if noise:
            recorder.span(
                "llm",
                {"openinference.span.kind": "LLM", "llm.model_name": "m", "input.value": query},
            )
    if noise:
        recorder.span("GET /search", {"http.request.method": "GET"})


@pytest.fixture
def recorder() -> Recorder:
    recorder = Recorder(RESOURCE)
    record_spans(recorder)
    return recorder


@pytest.fixture
def export(tmp_path: Path, recorder: Recorder) -> Path:
    return write_json(tmp_path / "export.json", recorder.spans())


def read_records(source: Any) -> list[dict[str, Any]]:
    """The decoded record of every span, in order; fails on a record with a problem."""
    records = []
    for raw in source:
        assert raw.problem is None, raw.problem
        records.append(raw.value)
    return records


def with_labels(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    labels = {query_id: grades for query_id, _, _, grades, _ in QUERIES}
    merged = []
    for record in records:
        grades = labels[record["query_id"]]
        merged.append(record if grades is None else {**record, "relevance_scores": grades})
    return merged


def jsonl_traces(path: Path) -> Path:
    lines = []
    for query_id, _, documents, grades, _ in QUERIES:
        record: dict[str, Any] = {"query_id": query_id, "retrieved_ids": expected_ids(documents)}
        if grades is not None:
            record["relevance_scores"] = grades
        lines.append(json.dumps(record))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


# --- the same numbers as JSON Lines -------------------------------------------------------------


def test_export_scores_exactly_like_the_same_queries_as_jsonl(export: Path, tmp_path: Path) -> None:
    source = OtlpSource(export)
    records = read_records(source)
    assert [r["query_id"] for r in records] == [q[0] for q in QUERIES]
    from_otlp = rankgate.evaluate(with_labels(records), METRICS)
    from_jsonl = rankgate.evaluate(str(jsonl_traces(tmp_path / "traces.jsonl")), METRICS)
    assert from_otlp.per_query() == from_jsonl.per_query()
    assert from_otlp.summary.scored == from_jsonl.summary.scored == 4
    assert from_otlp.summary.skipped == from_jsonl.summary.skipped


def test_rank_comes_from_n_numerically_not_from_attribute_order(export: Path) -> None:
    records = {r["query_id"]: r for r in read_records(OtlpSource(export))}
    assert records["q-1"]["retrieved_ids"] == [f"d{n}" for n in range(12)]
    assert records["q-2"]["retrieved_ids"] == ["p9", "17", "p1", "p4"]
    assert records["q-2"]["retrieved_scores"] == [0.9, None, 0.4, 0.1]
    assert records["q-3"]["retrieved_ids"] == []
    assert "retrieved_scores" not in records["q-3"]
    assert records["q-5"]["retrieved_ids"] == ["c", "a", "b"]


def test_record_carries_span_identity_time_query_and_attributes(
    export: Path, recorder: Recorder
) -> None:
    record = read_records(OtlpSource(export))[0]
    span = recorder.spans()[0]
    assert record["trace_id"] == format(span.context.trace_id, "032x")
    assert record["span_id"] == format(span.context.span_id, "016x")
    assert record["span_name"] == "retrieve"
    assert record["timestamp"] == "2024-05-01T12:00:01.000000Z"
    assert record["query"] == "capital of france"
    # resource and span attributes under their own names; the span wins a clash
    assert record["service.name"] == "search-api"
    assert record["deployment.environment"] == "prod"
    assert record["retriever.name"] == "dense"
    assert record["team"] == "ranking"
    assert record["top_k"] == 12
    assert not any(key.startswith("retrieval.documents.") for key in record)


def test_other_span_kinds_are_counted_not_read(export: Path) -> None:
    source = OtlpSource(export)
    read_records(source)
    stats = source.stats
    assert (stats.files, stats.requests) == (1, 1)
    assert stats.spans_seen == 2 * len(QUERIES) + 1
    assert stats.spans_used == len(QUERIES)
    assert stats.spans_other_kind == len(QUERIES) + 1
    assert (stats.spans_invalid, stats.truncated) == (0, 0)


def test_segments_from_resource_and_span_attributes(export: Path) -> None:
    records = with_labels(read_records(OtlpSource(export)))
    settings = rankgate.Settings(segment_by=("service.name", "retriever.name"))
    evaluation = rankgate.evaluate(records, METRICS, settings=settings)
    assert evaluation.segment("service.name", "search-api").scored == 4
    assert evaluation.segment("retriever.name", "dense").scored == 2
    assert evaluation.segment("retriever.name", "bm25").scored == 2


# --- file shapes --------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", ["json", "jsonl", "jsonl.gz", "gzip named .json"])
def test_every_file_shape_gives_the_same_records(
    shape: str, tmp_path: Path, recorder: Recorder, export: Path
) -> None:
    spans = recorder.spans()
    batches = [spans[:4], spans[4:7], spans[7:]]  # the Collector writes one request per line
    if shape == "json":
        path = export
    elif shape == "jsonl":
        path = write_jsonl(tmp_path / "export.jsonl", batches)
    elif shape == "jsonl.gz":
        path = write_jsonl(tmp_path / "export.jsonl.gz", batches, gz=True)
    else:
        path = write_jsonl(tmp_path / "export-gz.json", batches, gz=True)
    source = open_source(path, "otlp")
    assert isinstance(source, OtlpSource)
    records = read_records(source)
    expected = read_records(OtlpSource(export))
    assert records == expected
    assert source.done() == source.total == path.stat().st_size
    if shape.startswith("jsonl"):
        assert source.stats.requests == 3


def test_locations_name_file_line_and_span(tmp_path: Path, recorder: Recorder) -> None:
    spans = recorder.spans()
    path = write_jsonl(tmp_path / "export.jsonl", [spans[:2], spans[2:]])
    raws = list(OtlpSource(path))
    span_ids = [format(s.context.span_id, "016x") for s in spans if s.name == "retrieve"]
    assert [raw.location for raw in raws] == [
        SpanLocation(str(path), line=1 if i == 0 else 2, span_id=span_id)
        for i, span_id in enumerate(span_ids)
    ]
    assert str(raws[1].location) == f"{path}:2 span {span_ids[1]}"
    assert [raw.ordinal for raw in raws] == [1, 2, 3, 4, 5]


def test_folder_reads_every_export_file_in_name_order(tmp_path: Path) -> None:
    folder = tmp_path / "exports"
    folder.mkdir()
    first, second = Recorder({"service.name": "a"}), Recorder({"service.name": "b"})
    first.span("retrieve", retriever_attributes("q-a", "x", [(0, "d1", 1.0)]))
    second.span("retrieve", retriever_attributes("q-b", "y", [(0, "d2", 1.0), (1, "d3", 0.5)]))
    write_jsonl(folder / "2-second.jsonl.gz", [second.spans()], gz=True)
    write_json(folder / "1-first.json", first.spans())
    (folder / "notes.txt").write_text("not an export", encoding="utf-8")
    source = open_source(folder, "otlp")
    assert isinstance(source, OtlpSource)
    records = read_records(source)
    assert [(r["query_id"], r["service.name"]) for r in records] == [("q-a", "a"), ("q-b", "b")]
    assert source.stats.files == 2
    sizes = sum(p.stat().st_size for p in folder.glob("*-*"))
    assert source.total == source.done() == sizes


def test_empty_folder_and_missing_path_are_usage_errors(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no OTLP export file"):
        open_source(tmp_path, "otlp")
    with pytest.raises(UsageError, match="no such file"):
        open_source(tmp_path / "absent.json", "otlp")


def test_evaluate_takes_a_source_built_with_options(export: Path) -> None:
    evaluation = rankgate.evaluate(OtlpSource(export, OtlpOptions()), METRICS)
    assert evaluation.summary.read == len(QUERIES)
    assert evaluation.summary.skipped["unlabeled"] == len(QUERIES)


# --- conventions and options --------------------------------------------------------------------


def test_genai_retrieval_span_with_documents_as_json_text(tmp_path: Path) -> None:
    recorder = Recorder({"service.name": "rag"})
    documents = [{"id": "g2", "score": 0.9}, {"id": "g7", "score": 0.8}, {"id": 5, "score": 0.1}]
    recorder.span(
        "retrieval",
        {
            "gen_ai.operation.name": "retrieval",
            "gen_ai.data_source.id": "kb-1",
            "gen_ai.retrieval.query.text": "what is otlp",
            "gen_ai.retrieval.documents": json.dumps(documents),
            "query.id": "g-1",
        },
    )
    recorder.span("retrieval", {"gen_ai.operation.name": "retrieval", "query.id": "g-2"})
    recorder.span("chat", {"gen_ai.operation.name": "chat"})
    source = OtlpSource(write_json(tmp_path / "genai.json", recorder.spans()))
    raws = list(source)
    record = raws[0].value
    assert record["retrieved_ids"] == ["g2", "g7", "5"]
    assert record["retrieved_scores"] == [0.9, 0.8, 0.1]
    assert record["query"] == "what is otlp"
    assert record["gen_ai.data_source.id"] == "kb-1"
    assert "gen_ai.retrieval.documents" not in record
    assert raws[1].problem is not None
    assert "no gen_ai.retrieval.documents" in raws[1].problem
    assert source.stats.spans_other_kind == 1


def test_genai_documents_recorded_structured(tmp_path: Path) -> None:
    # An SDK that supports structured attributes writes the list as arrayValue of kvlistValue.
    def document(doc_id: str, score: float) -> dict[str, Any]:
        return {
            "kvlistValue": {
                "values": [
                    {"key": "id", "value": {"stringValue": doc_id}},
                    {"key": "score", "value": {"doubleValue": score}},
                ]
            }
        }

    request = {
        "resourceSpans": [
            {
                "scopeSpans": [
                    {
                        "spans": [
                            {
                                "traceId": "5b8efff798038103d269b633813fc60c",
                                "spanId": "eee19b7ec3c1b174",
                                "name": "retrieval",
                                "startTimeUnixNano": str(BASE_NS),
                                "attributes": [
                                    {"key": "query.id", "value": {"intValue": "42"}},
                                    {
                                        "key": "gen_ai.retrieval.documents",
                                        "value": {
                                            "arrayValue": {
                                                "values": [document("s1", 0.7), document("s2", 0.2)]
                                            }
                                        },
                                    },
                                ],
                            }
                        ]
                    }
                ]
            }
        ]
    }
    path = tmp_path / "collector.json"
    path.write_text(json.dumps(request), encoding="utf-8")
    (record,) = read_records(OtlpSource(path))
    assert record["query_id"] == 42
    assert record["retrieved_ids"] == ["s1", "s2"]
    assert record["trace_id"] == "5b8efff798038103d269b633813fc60c"
    assert record["span_id"] == "eee19b7ec3c1b174"
    assert record["timestamp"] == "2024-05-01T12:00:00.000000Z"
    assert validate_record(next(iter(OtlpSource(path))), FieldMap()).query_id == "42"


def test_reranker_spans_when_chosen(tmp_path: Path) -> None:
    recorder = Recorder({"service.name": "rag"})
    recorder.span("retrieve", retriever_attributes("q-r", "find", [(0, "d1", 0.3), (1, "d2", 0.2)]))
    recorder.span(
        "rerank",
        retriever_attributes(
            "q-r",
            "find",
            [(2, "d1", 0.1), (0, "d2", 0.9)],
            {"reranker.model_name": "cross-encoder", "reranker.top_k": 2},
            prefix="reranker.output_documents",
            kind="RERANKER",
            query_key="reranker.query",
        ),
    )
    path = write_json(tmp_path / "rerank.json", recorder.spans())
    default = OtlpSource(path)
    assert [r["span_name"] for r in read_records(default)] == ["retrieve"]
    assert default.stats.spans_other_kind == 1
    reranked = read_records(OtlpSource(path, OtlpOptions(span_kinds=("RERANKER",))))
    assert len(reranked) == 1
    assert reranked[0]["retrieved_ids"] == ["d2", "d1"]
    assert reranked[0]["query"] == "find"
    assert reranked[0]["reranker.model_name"] == "cross-encoder"
    both = read_records(OtlpSource(path, OtlpOptions(span_kinds=["RETRIEVER", "RERANKER"])))
    assert [r["span_name"] for r in both] == ["retrieve", "rerank"]


def test_document_id_from_a_metadata_key(tmp_path: Path) -> None:
    recorder = Recorder({"service.name": "rag"})
    attributes = retriever_attributes("q-m", "meta", [(0, None, 0.9), (1, "kept", 0.5)], seed=None)
    attributes["retrieval.documents.0.document.metadata"] = json.dumps({"doc_id": "from-meta"})
    recorder.span("retrieve", attributes)
    path = write_json(tmp_path / "meta.json", recorder.spans())
    options = OtlpOptions(doc_id_metadata_key="doc_id")
    (record,) = read_records(OtlpSource(path, options))
    assert record["retrieved_ids"] == ["from-meta", "kept"]

    # without the option the span is invalid, and says which document and what to do
    (raw,) = list(OtlpSource(path))
    assert raw.value is None
    assert raw.problem == (
        "retriever span 'retrieve': retrieval.documents.0 has no document id "
        "(doc_id_metadata_key can take it from metadata)"
    )
    with pytest.raises(InputError) as caught:
        validate_record(raw, FieldMap())
    span_id = format(recorder.spans()[0].context.span_id, "016x")
    assert str(caught.value).startswith(f"{path}:1 span {span_id}: retriever span 'retrieve'")


def test_missing_document_id_is_skipped_as_invalid_under_on_invalid_skip(tmp_path: Path) -> None:
    recorder = Recorder({"service.name": "rag"})
    recorder.span("retrieve", retriever_attributes("q-ok", "a", [(0, "d1", 0.5)]))
    recorder.span("retrieve", retriever_attributes("q-bad", "b", [(0, None, 0.5), (1, "d2", 0.4)]))
    path = write_json(tmp_path / "export.json", recorder.spans())
    source = OtlpSource(path)
    evaluation = rankgate.evaluate(source, METRICS, settings=rankgate.Settings(on_invalid="skip"))
    assert evaluation.summary.read == 2
    assert evaluation.summary.skipped["invalid"] == 1
    (example,) = evaluation.summary.invalid_examples
    assert "retrieval.documents.0 has no document id" in example.problem
    assert (source.stats.spans_used, source.stats.spans_invalid) == (1, 1)
    with pytest.raises(InputError, match="has no document id"):
        rankgate.evaluate(OtlpSource(path), METRICS)


def test_spans_with_dropped_attributes_are_counted_as_truncated(tmp_path: Path) -> None:
    # The SDK's attribute limit drops the oldest attributes and says so in droppedAttributesCount.
    # Instrumentations set the span kind first, so it goes first: the kind is then inferred.
    recorder = Recorder({"service.name": "rag"}, max_attributes=8)
    short = [(0, "d1", 0.5)]
    long = [(n, f"d{n}", 1.0 - n / 10) for n in range(6)]
    recorder.span("retrieve", retriever_attributes("q-short", "a", short, seed=None))
    recorder.span("retrieve", retriever_attributes("q-long", "b", long, content=False, seed=None))
    recorder.span("retrieve", retriever_attributes("q-half", "c", long, seed=None))
    path = write_json(tmp_path / "export.json", recorder.spans())
    spans = json.loads(path.read_text())["resourceSpans"][0]["scopeSpans"][0]["spans"]
    assert [span.get("droppedAttributesCount", 0) for span in spans] == [0, 7, 13]
    source = OtlpSource(path)
    raws = list(source)
    assert raws[0].value["retrieved_ids"] == ["d1"]
    assert raws[1].value["retrieved_ids"] == ["d2", "d3", "d4", "d5"]  # the top was cut off
    assert "query_id" not in raws[1].value
    # the limit split document 3: its content and score stayed, its id went
    assert raws[2].problem == (
        "retriever span 'retrieve': retrieval.documents.3 has no document id "
        "(doc_id_metadata_key can take it from metadata) (the span dropped 13 attributes)"
    )
    assert source.stats.truncated == 2
    assert source.stats.truncated_examples == [str(raws[1].location), str(raws[2].location)]
    assert (source.stats.spans_used, source.stats.spans_invalid) == (2, 1)


def test_query_id_from_resource_when_the_span_has_none(tmp_path: Path) -> None:
    recorder = Recorder({"service.name": "rag", "rankgate.query_id": "from-resource"})
    recorder.span("retrieve", {"openinference.span.kind": "RETRIEVER"})
    path = write_json(tmp_path / "export.json", recorder.spans())
    (record,) = read_records(OtlpSource(path))
    assert record["query_id"] == "from-resource"
    assert record["retrieved_ids"] == []
    # with none of the attributes anywhere the validator names the record by position
    options = OtlpOptions(query_id_attributes=("nope",))
    (raw,) = list(OtlpSource(path, options))
    assert validate_record(raw, FieldMap()).query_id == "#1"


def test_options_are_checked() -> None:
    with pytest.raises(ConfigError, match="span kind 'LLM'"):
        OtlpOptions(span_kinds=("LLM",))
    with pytest.raises(ConfigError, match="span_kinds is empty"):
        OtlpOptions(span_kinds=())
    with pytest.raises(ConfigError, match="doc_id_metadata_key"):
        OtlpOptions(doc_id_metadata_key="")


# --- files that are not OTLP/JSON ---------------------------------------------------------------


def first_error(path: Path) -> InputError:
    with pytest.raises(InputError) as caught:
        list(OtlpSource(path))
    return caught.value


def test_non_json_file_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "export.json"
    path.write_text("\n\nnot json at all\n", encoding="utf-8")
    assert str(first_error(path)) == f"{path}:3: not valid JSON (Expecting value)"


def test_broken_line_in_json_lines_names_its_line(tmp_path: Path, recorder: Recorder) -> None:
    path = write_jsonl(tmp_path / "export.jsonl", [recorder.spans()[:2], recorder.spans()[2:]])
    with path.open("a", encoding="utf-8") as out:
        out.write('{"resourceSpans": [\n')
    assert str(first_error(path)).startswith(f"{path}:3: not valid JSON")


def test_pretty_printed_file_with_an_error_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "export.json"
    path.write_text('{\n  "resourceSpans": [\n    {,}\n  ]\n}\n', encoding="utf-8")
    assert str(first_error(path)).startswith(f"{path}:3: not valid JSON")


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ([1, 2], "expected an OTLP/JSON trace export (an object), got list"),
        ({"query_id": "q"}, "not an OTLP/JSON trace export: no resourceSpans (keys: query_id)"),
        ({"resourceLogs": []}, "this is an OTLP logs export, not traces"),
        ({"resourceSpans": {}}, "field 'resourceSpans': expected a list, got object"),
    ],
)
def test_json_that_is_not_an_otlp_trace_export(tmp_path: Path, content: Any, problem: str) -> None:
    path = tmp_path / "export.json"
    path.write_text(json.dumps(content), encoding="utf-8")
    assert str(first_error(path)) == f"{path}:1: {problem}"


def test_empty_request_and_empty_file_hold_no_spans(tmp_path: Path) -> None:
    path = tmp_path / "export.jsonl"
    path.write_text("{}\n\n{}\n", encoding="utf-8")
    assert list(OtlpSource(path)) == []
    empty = tmp_path / "empty.json"
    empty.write_bytes(b"")
    assert list(OtlpSource(empty)) == []


def test_corrupt_gzip_is_an_input_error(tmp_path: Path) -> None:
    path = tmp_path / "export.json.gz"
    path.write_bytes(gzip.compress(b'{"resourceSpans": []}\n')[:-6])
    assert "corrupt or truncated gzip" in str(first_error(path))


def test_bad_attribute_value_makes_the_span_invalid(tmp_path: Path) -> None:
    span = {
        "spanId": "eee19b7ec3c1b174",
        "name": "retrieve",
        "attributes": [
            {"key": "openinference.span.kind", "value": {"stringValue": "RETRIEVER"}},
            {"key": "retrieval.documents.0.document.id", "value": {"intValue": "seven"}},
        ],
    }
    path = tmp_path / "export.json"
    path.write_text(
        json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}), encoding="utf-8"
    )
    (raw,) = list(OtlpSource(path))
    assert raw.problem == (
        "retriever span 'retrieve': attribute 'retrieval.documents.0.document.id': "
        'intValue must be an integer (a string in JSON), got "seven"'
    )
    assert str(raw.location) == f"{path}:1 span eee19b7ec3c1b174"


# --- end to end: the command line, with labels from a file or a store ---------------------------


def run_cli(capsys: pytest.CaptureFixture[str], *args: object) -> tuple[int, str, str]:
    from rankgate.cli import main

    capsys.readouterr()
    try:
        code = main([str(arg) for arg in args])
    except SystemExit as stop:
        code = int(stop.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_cli_scores_an_export_with_labels_from_a_file_or_a_store(
    export: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    judgments = tmp_path / "judgments.jsonl"
    judgments.write_text(
        "".join(
            json.dumps({"query_id": query_id, "document_id": doc, "grade": grade}) + "\n"
            for query_id, _, _, grades, _ in QUERIES
            for doc, grade in (grades or {}).items()
        )
    )
    judged = sum(len(grades or {}) for _, _, _, grades, _ in QUERIES)
    store = f"sqlite:///{tmp_path / 'labels.db'}"
    assert run_cli(capsys, "label", "import", judgments, "--store", store)[0] == 0
    common = ["-m", ",".join(METRICS), "--no-config", "--format", "json", "--per-query"]
    _, expected, _ = run_cli(capsys, "eval", jsonl_traces(tmp_path / "t.jsonl"), *common)
    for labels in (judgments, store):
        code, out, err = run_cli(
            capsys, "eval", export, "--input-format", "otlp", "--labels", labels, *common
        )
        assert code == 0, err
        assert json.loads(out)["per_query"] == json.loads(expected)["per_query"]
        # Labels kept apart name a query set and count their labels by kind; the inline-labeled
        # JSONL does neither.
        assert json.loads(out)["summary"]["label_sources"] == {"human": judged, "judge": 0}
        set_keys = ("query_set", "expected_queries", "label_sources")
        summary = {k: v for k, v in json.loads(out)["summary"].items() if k not in set_keys}
        wanted = {k: v for k, v in json.loads(expected)["summary"].items() if k not in set_keys}
        assert summary == wanted
        # The spans it passed over are accounted for on stderr.
        assert "taken as traces" in err and "of other kinds passed over" in err


def test_cli_warns_about_truncated_spans_and_takes_otel_options(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recorder = Recorder(RESOURCE, max_attributes=12)
    documents = [(n, f"d{n}", None) for n in range(4)]
    attributes = retriever_attributes("q-9", "long", documents, content=False, seed=None)
    # Padding first: the SDK drops the oldest attributes, so the ranking itself survives.
    recorder.span("retrieve", {**{f"pad.{i}": i for i in range(20)}, **attributes})
    export = write_json(tmp_path / "cut.json", recorder.spans())
    code, _, err = run_cli(
        capsys, "eval", export, "--input-format", "otlp", "--no-config", "-m", "mrr",
        "--on-invalid", "skip", "--otel-query-id", "query.id",
    )  # fmt: skip
    assert code == 0
    assert "warning: 1 span(s) had attributes dropped" in err
    code, _, err = run_cli(capsys, "eval", export, "--no-config", "--otel-span-kind", "RERANKER")
    assert code == 2 and "--otel-* options apply to --input-format otlp" in err
