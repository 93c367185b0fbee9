"""The LlamaIndex recorder, driven by the real llama-index-core instrumentation: a keyword retriever
over a tiny corpus (no embeddings, no LLM, no network) records into a SQLite store, and
``rankgate eval`` of that store gives the values worked out by hand and the values of the same
calls written as a JSONL file."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip(
    "llama_index.core",
    reason="llama-index-core is not installed (pip install 'rankgate[llamaindex]')",
)

import recorder_helpers
from llama_index.core.instrumentation import get_dispatcher  # type: ignore[attr-defined]
from llama_index.core.instrumentation.dispatcher import (  # type: ignore[attr-defined]
    instrument_tags,
)
from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import (
    NodeRelationship,
    NodeWithScore,
    QueryBundle,
    RelatedNodeInfo,
    TextNode,
)
from recorder_helpers import (
    CORPUS_TEXTS,
    check_import_names_the_extra,
    check_not_imported_by_rankgate,
    check_one_warning_per_failure_kind,
    check_scores_as_computed_by_hand,
    keyword_ranking,
    refuse_network,
    sha256_prefix,
    stored,
)

from rankgate.integrations.llamaindex import RankgateEventHandler, instrument, text_id
from rankgate.store import TraceRecorder

store = recorder_helpers.store
recorder = recorder_helpers.recorder


def corpus() -> list[TextNode]:
    return [TextNode(id_=key, text=text) for key, text in CORPUS_TEXTS.items()]


class KeywordRetriever(BaseRetriever):
    """Ranks nodes by how many query words they share (ties in corpus order), the count being the
    score; nodes sharing no word are not returned."""

    def __init__(self, nodes: list[TextNode], k: int = 3) -> None:
        super().__init__()
        self._nodes = nodes
        self._k = k

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        texts = [node.text for node in self._nodes]
        return [
            NodeWithScore(node=self._nodes[position], score=float(overlap))
            for overlap, position in keyword_ranking(query_bundle.query_str, texts, self._k)
        ]


class FixedRetriever(BaseRetriever):
    """Returns the same nodes for every query."""

    def __init__(self, nodes: list[NodeWithScore]) -> None:
        super().__init__()
        self._fixed = nodes

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return list(self._fixed)


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test here may reach the network (no tokenizer or NLTK download): sockets cannot
    connect."""
    refuse_network(monkeypatch)


@pytest.fixture
def attached() -> Iterator[list[RankgateEventHandler]]:
    """Handlers a test attaches to the global dispatcher; detached afterwards whatever happens."""
    handlers: list[RankgateEventHandler] = []
    yield handlers
    for handler in handlers:
        handler.detach()


# --- scoring what was recorded ------------------------------------------------------------------


def test_recorded_retrievals_score_as_computed_by_hand(
    store: str, recorder: TraceRecorder, tmp_path: Path, attached: list[RankgateEventHandler]
) -> None:
    handler = instrument(recorder, variant="keyword-v1")
    attached.append(handler)
    retriever = KeywordRetriever(corpus())
    with instrument_tags({"rankgate_query_id": "q-cats"}):
        cats = retriever.retrieve("cats and dogs")
    with instrument_tags({"rankgate_query_id": "q-fish"}):
        fish = retriever.retrieve(QueryBundle("fish in water"))
    assert [n.node.node_id for n in cats] == ["d4", "d2", "d1"]
    assert [n.node.node_id for n in fish] == ["d3"]
    check_scores_as_computed_by_hand(store, recorder, tmp_path)
    assert (handler.stats.recorded, handler.stats.failed) == (2, 0)


def test_what_a_trace_holds(
    store: str, recorder: TraceRecorder, attached: list[RankgateEventHandler]
) -> None:
    attached.append(instrument(recorder, variant="keyword-v1", attribute_keys=["query_type"]))
    with instrument_tags({"query_type": "animals", "other": 1}):
        KeywordRetriever(corpus()).retrieve("cats and dogs")
    recorder.close()
    [trace] = stored(store)
    assert trace["variant"] == "keyword-v1"
    assert trace["retrieved_ids"] == ["d4", "d2", "d1"]
    attributes = trace["attributes"]
    assert attributes.pop("span_id").startswith("KeywordRetriever.retrieve-")
    assert attributes == {
        "query": "cats and dogs",
        "query_type": "animals",
        "retriever": "KeywordRetriever",
        "retrieved_scores": [3.0, 2.0, 1.0],
    }


async def _ask(retriever: BaseRetriever) -> list[NodeWithScore]:
    return await retriever.aretrieve("cats")


def test_async_retrievals_are_recorded(
    store: str, recorder: TraceRecorder, attached: list[RankgateEventHandler]
) -> None:
    attached.append(instrument(recorder))
    nodes = asyncio.run(_ask(KeywordRetriever(corpus())))
    recorder.close()
    [trace] = stored(store)
    assert trace["retrieved_ids"] == [n.node.node_id for n in nodes] == ["d1", "d2", "d4"]
    assert trace["attributes"]["span_id"].startswith("KeywordRetriever.aretrieve-")


def test_detach_stops_recording(
    store: str, recorder: TraceRecorder, attached: list[RankgateEventHandler]
) -> None:
    handler = instrument(recorder)
    attached.append(handler)
    handler.attach()  # attaching twice adds it once
    assert sum(h is handler for h in get_dispatcher().event_handlers) == 1
    retriever = KeywordRetriever(corpus())
    retriever.retrieve("cats")
    handler.detach()
    retriever.retrieve("fish")
    recorder.close()
    assert [t["attributes"]["query"] for t in stored(store)] == ["cats"]
    assert all(h is not handler for h in get_dispatcher().event_handlers)


# --- query IDs and variants ---------------------------------------------------------------------


def test_without_an_id_the_query_is_named_by_its_hash_across_variants(
    store: str, recorder: TraceRecorder, attached: list[RankgateEventHandler]
) -> None:
    retriever = KeywordRetriever(corpus())
    for variant in ("bm25", "hybrid"):
        handler = instrument(recorder, variant=variant)
        retriever.retrieve("cats and dogs")
        handler.detach()
    attached.append(instrument(recorder, variant="bm25"))
    with instrument_tags({"rankgate_variant": "dense"}):  # a tag overrides the handler's variant
        retriever.retrieve("cats and dogs")
    recorder.close()
    traces = stored(store)
    assert [t["variant"] for t in traces] == ["bm25", "hybrid", "dense"]
    assert {t["query_id"] for t in traces} == {sha256_prefix("cats and dogs")}
    assert (
        text_id("what is ndcg?") == "sha256:75c7a35c2387eab4"
    )  # the docs' example, as LangChain's


def test_a_query_id_function_is_asked_before_the_hash(
    store: str, recorder: TraceRecorder, attached: list[RankgateEventHandler]
) -> None:
    known = {"cats": "q-cats"}
    attached.append(instrument(recorder, query_id=known.get))
    retriever = KeywordRetriever(corpus())
    retriever.retrieve("cats")
    retriever.retrieve("fish")  # None from the function: the hash
    with instrument_tags({"rankgate_query_id": 17}):  # the call's own ID wins over the function
        retriever.retrieve("cats")
    recorder.close()
    assert [t["query_id"] for t in stored(store)] == ["q-cats", sha256_prefix("fish"), "17"]


# --- node IDs and scores ------------------------------------------------------------------------


def test_node_ids_fall_back_from_the_named_key_to_the_document_to_the_node_to_the_hash(
    store: str, recorder: TraceRecorder, attached: list[RankgateEventHandler]
) -> None:
    source = {NodeRelationship.SOURCE: RelatedNodeInfo(node_id="doc-a")}
    nodes = [
        NodeWithScore(node=TextNode(id_="n1", text="a", metadata={"doc_id": "doc-k"})),
        NodeWithScore(node=TextNode(id_="n2", text="b", metadata={"doc_id": 7})),
        NodeWithScore(node=TextNode(id_="n3", text="c", relationships=source)),
        NodeWithScore(node=TextNode(id_="n4", text="d")),
        NodeWithScore(node=TextNode(id_="", text="e")),
    ]
    retriever = FixedRetriever(nodes)
    options: list[dict[str, Any]] = [
        {"id_key": "doc_id", "use_ref_doc_id": True},
        {"use_ref_doc_id": True},
        {},
    ]
    handlers = []
    for option in options:
        handler = instrument(recorder, **option)
        retriever.retrieve("x")
        handler.detach()
        handlers.append(handler)
    recorder.close()
    keyed, by_document, by_node = (t["retrieved_ids"] for t in stored(store))
    hashed = sha256_prefix("e")
    assert keyed == ["doc-k", "7", "doc-a", "n4", hashed]
    assert by_document == ["n1", "n2", "doc-a", "n4", hashed]
    assert by_node == ["n1", "n2", "n3", "n4", hashed]
    assert [h.stats.hashed_ids for h in handlers] == [1, 1, 1]


def test_scores_are_the_nodes_scores_aligned_with_the_ids(
    store: str, recorder: TraceRecorder, attached: list[RankgateEventHandler]
) -> None:
    attached.append(instrument(recorder))
    FixedRetriever(
        [
            NodeWithScore(node=TextNode(id_="a", text="x"), score=0.5),
            NodeWithScore(node=TextNode(id_="b", text="x"), score=None),
            NodeWithScore(node=TextNode(id_="c", text="x"), score=float("inf")),
        ]
    ).retrieve("x")
    FixedRetriever([NodeWithScore(node=TextNode(id_="a", text="x"))]).retrieve("x")
    recorder.close()
    scored, unscored = stored(store)
    assert scored["attributes"]["retrieved_scores"] == [0.5, None, None]
    assert "retrieved_scores" not in unscored["attributes"]


# --- what is not recorded, and failures -----------------------------------------------------------


def test_only_the_named_retrievers_are_recorded(
    store: str, recorder: TraceRecorder, attached: list[RankgateEventHandler]
) -> None:
    handler = instrument(recorder, retrievers={"FixedRetriever"})
    attached.append(handler)
    KeywordRetriever(corpus()).retrieve("cats")
    FixedRetriever([NodeWithScore(node=TextNode(id_="a", text="x"))]).retrieve("fish")
    recorder.close()
    assert [t["attributes"]["query"] for t in stored(store)] == ["fish"]
    assert (handler.stats.recorded, handler.stats.skipped) == (1, 1)


def test_query_text_can_be_left_out(
    store: str, recorder: TraceRecorder, attached: list[RankgateEventHandler]
) -> None:
    attached.append(instrument(recorder, record_query_text=False))
    KeywordRetriever(corpus()).retrieve("my cats card number")
    recorder.close()
    [trace] = stored(store)
    assert "query" not in trace["attributes"]
    assert "card number" not in json.dumps(trace)


def test_a_failing_recorder_never_reaches_the_application(
    recorder: TraceRecorder,
    attached: list[RankgateEventHandler],
    caplog: pytest.LogCaptureFixture,
) -> None:
    handler = instrument(recorder)
    attached.append(handler)
    retriever = KeywordRetriever(corpus())
    with caplog.at_level(logging.WARNING, logger="rankgate.integrations"):
        FixedRetriever([NodeWithScore(node=TextNode(id_="bad\x00id", text="x"))]).retrieve("x")
        with instrument_tags({"rankgate_query_id": ["not", "an", "id"]}):
            assert retriever.retrieve("cats")
        recorder.close()
        for _ in range(3):
            assert retriever.retrieve("cats")
    assert (handler.stats.failed, handler.stats.recorded) == (5, 0)
    check_one_warning_per_failure_kind(caplog)


# --- the optional extra -------------------------------------------------------------------------


def test_without_llama_index_the_import_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    check_import_names_the_extra(
        monkeypatch, "rankgate.integrations.llamaindex", "llama_index", "llamaindex"
    )


def test_importing_rankgate_does_not_import_llama_index() -> None:
    check_not_imported_by_rankgate("llama_index", "llama_index_instrumentation", "langchain_core")
