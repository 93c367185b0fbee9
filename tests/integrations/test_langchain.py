"""The LangChain recorder, driven by the real langchain-core: a keyword retriever over a tiny corpus
records into a SQLite store, and ``rankgate eval`` of that store gives the values worked out by hand
and the values of the same calls written as a JSONL file."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

pytest.importorskip(
    "langchain_core", reason="langchain-core is not installed (pip install 'rankgate[langchain]')"
)

import recorder_helpers
from langchain_core.callbacks import BaseCallbackHandler, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableConfig, RunnableLambda
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

from rankgate.integrations.langchain import RankgateCallbackHandler, text_id
from rankgate.store import TraceRecorder

store = recorder_helpers.store
recorder = recorder_helpers.recorder

CORPUS = [Document(id=key, page_content=text) for key, text in CORPUS_TEXTS.items()]


class KeywordRetriever(BaseRetriever):
    """Ranks documents by how many query words they share (ties in corpus order), with the count
    as each document's ``score`` metadata; documents sharing no word are not returned."""

    corpus: list[Document]
    k: int = 3

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        texts = [document.page_content for document in self.corpus]
        return [
            Document(
                id=self.corpus[position].id,
                page_content=self.corpus[position].page_content,
                metadata={**self.corpus[position].metadata, "score": float(overlap)},
            )
            for overlap, position in keyword_ranking(query, texts, self.k)
        ]


class FailingRetriever(BaseRetriever):
    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        raise LookupError("the index is down")


class RunIds(BaseCallbackHandler):
    """Notes the run ID of every retriever call, to compare with the stored trace IDs."""

    def __init__(self) -> None:
        self.ended: list[UUID] = []

    def on_retriever_end(self, documents: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self.ended.append(run_id)


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test here may reach the network: LangSmith tracing stays off and sockets cannot
    connect."""
    for name in ("LANGCHAIN_TRACING_V2", "LANGCHAIN_TRACING", "LANGSMITH_TRACING"):
        monkeypatch.delenv(name, raising=False)
    refuse_network(monkeypatch)


# --- scoring what was recorded ------------------------------------------------------------------


def test_recorded_calls_score_as_computed_by_hand(
    store: str, recorder: TraceRecorder, tmp_path: Path
) -> None:
    handler = RankgateCallbackHandler(recorder, variant="keyword-v1")
    retriever = KeywordRetriever(corpus=CORPUS)
    cats = retriever.invoke(
        "cats and dogs",
        config=RunnableConfig(callbacks=[handler], metadata={"rankgate_query_id": "q-cats"}),
    )
    fish = retriever.invoke(
        "fish in water",
        config=RunnableConfig(callbacks=[handler], metadata={"rankgate_query_id": "q-fish"}),
    )
    assert [d.id for d in cats] == ["d4", "d2", "d1"]
    assert [d.id for d in fish] == ["d3"]
    check_scores_as_computed_by_hand(store, recorder, tmp_path)
    assert handler.stats.recorded == 2
    assert handler.stats.failed == 0


def test_what_a_trace_holds(store: str, recorder: TraceRecorder) -> None:
    handler = RankgateCallbackHandler(recorder, variant="keyword-v1", attribute_keys=["query_type"])
    runs = RunIds()
    KeywordRetriever(corpus=CORPUS).invoke(
        "cats and dogs",
        config={"callbacks": [handler, runs], "metadata": {"query_type": "animals", "other": 1}},
    )
    recorder.close()
    [trace] = stored(store)
    assert trace["trace_id"] == str(runs.ended[0])
    assert trace["variant"] == "keyword-v1"
    assert trace["retrieved_ids"] == ["d4", "d2", "d1"]
    assert trace["attributes"] == {
        "query": "cats and dogs",
        "query_type": "animals",
        "retriever": "KeywordRetriever",
        "retrieved_scores": [3.0, 2.0, 1.0],
    }


def test_a_retriever_inside_a_chain_keeps_its_parent_run(
    store: str, recorder: TraceRecorder
) -> None:
    handler = RankgateCallbackHandler(recorder)
    retriever = KeywordRetriever(corpus=CORPUS)
    chain: RunnableLambda[str, list[Document]] = RunnableLambda(retriever.invoke)
    chain.invoke("fish", config={"callbacks": [handler]})
    recorder.close()
    [trace] = stored(store)
    UUID(trace["attributes"]["parent_run_id"])  # a run ID, the chain's


async def _ask(retriever: BaseRetriever, handler: RankgateCallbackHandler) -> list[Document]:
    return await retriever.ainvoke("cats", config={"callbacks": [handler]})


def test_async_calls_are_recorded(store: str, recorder: TraceRecorder) -> None:
    handler = RankgateCallbackHandler(recorder)
    documents = asyncio.run(_ask(KeywordRetriever(corpus=CORPUS), handler))
    recorder.close()
    [trace] = stored(store)
    assert trace["retrieved_ids"] == [d.id for d in documents] == ["d1", "d2", "d4"]


# --- query IDs ----------------------------------------------------------------------------------


def test_without_an_id_the_query_is_named_by_its_hash_across_variants(
    store: str, recorder: TraceRecorder
) -> None:
    retriever = KeywordRetriever(corpus=CORPUS)
    for variant in ("bm25", "hybrid"):
        handler = RankgateCallbackHandler(recorder, variant=variant)
        retriever.invoke("cats and dogs", config={"callbacks": [handler]})
    # The variant tag of one call overrides the handler's.
    handler = RankgateCallbackHandler(recorder, variant="bm25")
    retriever.invoke(
        "cats and dogs",
        config={"callbacks": [handler], "metadata": {"rankgate_variant": "dense"}},
    )
    recorder.close()
    traces = stored(store)
    assert [t["variant"] for t in traces] == ["bm25", "hybrid", "dense"]
    assert {t["query_id"] for t in traces} == {sha256_prefix("cats and dogs")}
    assert text_id("cats and dogs") == sha256_prefix("cats and dogs")
    assert text_id("what is ndcg?") == "sha256:75c7a35c2387eab4"  # the docs' example


def test_a_query_id_function_is_asked_before_the_hash(store: str, recorder: TraceRecorder) -> None:
    known = {"cats": "q-cats"}
    handler = RankgateCallbackHandler(recorder, query_id=known.get)
    retriever = KeywordRetriever(corpus=CORPUS)
    retriever.invoke("cats", config={"callbacks": [handler]})
    retriever.invoke("fish", config={"callbacks": [handler]})  # None from the function: the hash
    retriever.invoke(
        "cats", config={"callbacks": [handler], "metadata": {"rankgate_query_id": 17}}
    )  # the run's own ID wins over the function
    recorder.close()
    assert [t["query_id"] for t in stored(store)] == ["q-cats", sha256_prefix("fish"), "17"]


# --- document IDs and scores --------------------------------------------------------------------


def test_document_ids_fall_back_from_the_named_key_to_the_id_to_the_hash(
    store: str, recorder: TraceRecorder
) -> None:
    corpus = [
        Document(id="chunk-1", page_content="cats purr", metadata={"doc_id": "doc-a"}),
        Document(id="chunk-2", page_content="cats sleep", metadata={"doc_id": ""}),  # empty: next
        Document(page_content="cats hunt", metadata={"doc_id": 42}),
        Document(page_content="cats climb"),
    ]
    retriever = KeywordRetriever(corpus=corpus, k=10)
    keyed = RankgateCallbackHandler(recorder, id_key="doc_id", variant="keyed")
    plain = RankgateCallbackHandler(recorder, variant="plain")
    retriever.invoke("cats", config={"callbacks": [keyed]})
    retriever.invoke("cats", config={"callbacks": [plain]})
    recorder.close()
    by_key, by_id = stored(store)
    assert by_key["retrieved_ids"] == ["doc-a", "chunk-2", "42", sha256_prefix("cats climb")]
    assert by_id["retrieved_ids"] == [
        "chunk-1",
        "chunk-2",
        sha256_prefix("cats hunt"),
        sha256_prefix("cats climb"),
    ]
    assert (keyed.stats.hashed_ids, plain.stats.hashed_ids) == (1, 2)


def test_scores_come_from_the_named_key_or_the_common_ones(
    store: str, recorder: TraceRecorder
) -> None:
    corpus = [
        Document(id="a", page_content="x", metadata={"relevance_score": 0.9, "rank_score": 5}),
        Document(id="b", page_content="x", metadata={"relevance_score": float("nan")}),
        Document(id="c", page_content="x", metadata={"relevance_score": "high"}),
    ]

    class Fixed(BaseRetriever):
        documents: list[Document]

        def _get_relevant_documents(
            self, query: str, *, run_manager: CallbackManagerForRetrieverRun
        ) -> list[Document]:
            return self.documents

    common = RankgateCallbackHandler(recorder, variant="common")
    named = RankgateCallbackHandler(recorder, variant="named", score_key="rank_score")
    Fixed(documents=corpus).invoke("x", config={"callbacks": [common]})
    Fixed(documents=corpus).invoke("x", config={"callbacks": [named]})
    Fixed(documents=[Document(id="a", page_content="x")]).invoke("x", config={"callbacks": [named]})
    recorder.close()
    first, second, unscored = stored(store)
    # NaN and text are not scores: null, so the list stays aligned with the IDs.
    assert first["attributes"]["retrieved_scores"] == [0.9, None, None]
    assert second["attributes"]["retrieved_scores"] == [5.0, None, None]
    assert "retrieved_scores" not in unscored["attributes"]


# --- what is not recorded, and failures -----------------------------------------------------------


def test_only_the_named_retrievers_are_recorded(store: str, recorder: TraceRecorder) -> None:
    handler = RankgateCallbackHandler(recorder, retrievers={"outer"})
    inner = KeywordRetriever(corpus=CORPUS)
    inner.invoke("cats", config={"callbacks": [handler]})  # named KeywordRetriever: skipped
    inner.invoke("fish", config={"callbacks": [handler], "run_name": "outer"})
    recorder.close()
    assert [t["attributes"]["query"] for t in stored(store)] == ["fish"]
    assert (handler.stats.recorded, handler.stats.skipped) == (1, 1)


def test_query_text_can_be_left_out(store: str, recorder: TraceRecorder) -> None:
    handler = RankgateCallbackHandler(recorder, record_query_text=False)
    KeywordRetriever(corpus=CORPUS).invoke("my card number", config={"callbacks": [handler]})
    recorder.close()
    [trace] = stored(store)
    assert "query" not in trace["attributes"]
    assert "my card number" not in json.dumps(trace)


def test_a_failed_retrieval_records_nothing(store: str, recorder: TraceRecorder) -> None:
    handler = RankgateCallbackHandler(recorder)
    with pytest.raises(LookupError):
        FailingRetriever().invoke("cats", config={"callbacks": [handler]})
    recorder.close()
    assert stored(store) == []
    assert handler.stats.recorded == handler.stats.failed == 0
    assert not handler._pending


def test_an_end_without_its_start_is_counted() -> None:
    recorder: Any = None  # never reached: there is nothing to record
    handler = RankgateCallbackHandler(recorder)
    handler.on_retriever_end([], run_id=UUID(int=1))
    assert handler.stats.unpaired == 1


def test_a_failing_recorder_never_reaches_the_application(
    store: str, recorder: TraceRecorder, caplog: pytest.LogCaptureFixture
) -> None:
    handler = RankgateCallbackHandler(recorder)
    retriever = KeywordRetriever(corpus=CORPUS)
    # Three ways a call cannot be recorded: an ID the store cannot hold, a query ID of the wrong
    # type, and a closed recorder. The application gets its documents every time.
    nul = [Document(id="bad\x00id", page_content="cats")]
    with caplog.at_level(logging.WARNING, logger="rankgate.integrations"):
        assert KeywordRetriever(corpus=nul).invoke("cats", config={"callbacks": [handler]})
        bad_id: Any = {"metadata": {"rankgate_query_id": {"nested": 1}}, "callbacks": [handler]}
        assert retriever.invoke("cats", config=bad_id)
        recorder.close()
        for _ in range(3):
            assert retriever.invoke("cats", config={"callbacks": [handler]})
    assert handler.stats.failed == 5
    assert handler.stats.recorded == 0
    check_one_warning_per_failure_kind(caplog)


# --- the optional extra -------------------------------------------------------------------------


def test_without_langchain_the_import_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    check_import_names_the_extra(
        monkeypatch, "rankgate.integrations.langchain", "langchain_core", "langchain"
    )


def test_importing_rankgate_does_not_import_langchain() -> None:
    check_not_imported_by_rankgate("langchain", "langchain_core", "llama_index")
