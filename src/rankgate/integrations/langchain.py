"""Record every LangChain retriever call into a trace store.

``RankgateCallbackHandler`` is a LangChain callback handler. Pass it in ``callbacks`` (on the
retriever, the chain, or one call's ``config``) and each retriever run becomes one trace in a
``TraceRecorder``: the query, the documents in the order returned, their scores when the
documents carry any, the run's IDs and a variant tag. ``rankgate eval sqlite:///traces.db`` then
scores them like any other trace. docs/frameworks.md explains the choices below at more length.

How a trace is filled in:

* **query_id**: the run metadata's ``rankgate_query_id`` (``config={"metadata": {...}}``), else
  what the ``query_id`` callable returns for the query text, else ``text_id(query)``. The query
  text alone is not an ID, but its hash is stable: the same question pairs across runs and
  variants, and labels can be written for it with ``text_id``.
* **retrieved_ids**: per document, ``metadata[id_key]`` when ``id_key`` is given and the value is
  a non-empty string or integer, else ``Document.id``, else ``text_id(page_content)``.
* **variant**: the run metadata's ``rankgate_variant``, else the handler's ``variant``.
* **trace_id**: the LangChain run ID of the retriever call, so a trace matches its run in
  LangSmith and recording the same run twice stores it once.
* **attributes**: ``query`` (the text, unless ``record_query_text=False``), ``retriever`` (the run
  name), ``parent_run_id``, ``retrieved_scores`` (aligned with the IDs, ``null`` where a document
  has none; absent when no document has one) and the run-metadata keys named in
  ``attribute_keys``.

The handler never raises into the application: a call it cannot record (an ID the store refuses,
a closed recorder) is counted in ``stats.failed``, and the first failure of each kind is logged as
a warning on the ``rankgate.integrations`` logger.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from rankgate.errors import MissingExtraError
from rankgate.integrations._common import (
    QUERY_ID_KEY,
    VARIANT_KEY,
    Recording,
    RecordingStats,
    finite_score,
    is_identifier,
    query_id_for,
    rank,
    text_id,
    trace_attributes,
)
from rankgate.store.recorder import TraceRecorder

__all__ = [
    "QUERY_ID_KEY",
    "VARIANT_KEY",
    "MissingExtraError",
    "RankgateCallbackHandler",
    "RecordingStats",
    "text_id",
]

try:
    from langchain_core.callbacks import BaseCallbackHandler
    from langchain_core.documents import Document
except ImportError as problem:
    raise MissingExtraError(
        "rankgate.integrations.langchain needs langchain-core: pip install 'rankgate[langchain]' "
        f"({problem})"
    ) from problem

# Metadata keys that commonly hold a score: vector stores' "score", rerankers' "relevance_score".
SCORE_KEYS = ("score", "relevance_score")
# Retriever runs started but not yet ended. A run whose end never comes (a handler attached
# halfway, a crashed thread) must not grow the table for ever: past this many, the oldest go.
MAX_PENDING = 10_000


@dataclass(frozen=True, slots=True)
class _Started:
    query: str
    name: str | None
    parent_run_id: UUID | None
    metadata: Mapping[str, Any]


class RankgateCallbackHandler(BaseCallbackHandler):
    """A LangChain callback handler that records each retriever call as a trace.

    Args:
        recorder: where traces go; the handler does not close it.
        variant: the variant of every trace, unless the run metadata's ``rankgate_variant``
            says otherwise.
        query_id: maps a query text to its ID; returning ``None`` falls back to ``text_id``.
            Not consulted when the run metadata holds ``rankgate_query_id``.
        id_key: a document metadata key holding the document ID, tried before ``Document.id``.
        score_key: the document metadata key holding its score; by default the first of
            ``score`` and ``relevance_score`` present.
        attribute_keys: run-metadata keys copied into the trace's attributes (e.g. a
            ``query_type`` to segment by); values that are not text, numbers or booleans are
            left out.
        retrievers: record only runs with these names (the retriever's class name by default,
            or the ``run_name`` given); all runs when ``None``. Useful when an ensemble or
            multi-query retriever calls inner retrievers, each of which is a run of its own.
        record_query_text: store the query text as the ``query`` attribute. Turn it off when
            queries may hold personal data; the query ID is then the only trace of the text.

    Example::

        recorder = TraceRecorder("sqlite:///traces.db")
        handler = RankgateCallbackHandler(recorder, variant="bm25-v1")
        docs = retriever.invoke("what is ndcg?", config={"callbacks": [handler]})
    """

    def __init__(
        self,
        recorder: TraceRecorder,
        *,
        variant: str | None = None,
        query_id: Callable[[str], str | int | None] | None = None,
        id_key: str | None = None,
        score_key: str | None = None,
        attribute_keys: Sequence[str] = (),
        retrievers: Collection[str] | None = None,
        record_query_text: bool = True,
    ) -> None:
        super().__init__()
        self.recorder = recorder
        self.variant = variant
        self.query_id = query_id
        self.id_key = id_key
        self.score_keys = SCORE_KEYS if score_key is None else (score_key,)
        self.attribute_keys = tuple(attribute_keys)
        self.retrievers = None if retrievers is None else frozenset(retrievers)
        self.record_query_text = record_query_text
        self._recording = Recording("a LangChain retriever call")
        self.stats: RecordingStats = self._recording.stats
        self._pending: OrderedDict[UUID, _Started] = OrderedDict()
        # Callbacks of async chains run on executor threads: one lock guards pending and stats.
        self._lock: threading.Lock = self._recording.lock

    # --- LangChain's callbacks ----------------------------------------------------------------

    def on_retriever_start(
        self,
        serialized: dict[str, Any] | None,
        query: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        try:
            name = kwargs.get("name")
            started = _Started(
                query=query if isinstance(query, str) else str(query),
                name=name if isinstance(name, str) else None,
                parent_run_id=parent_run_id,
                metadata=dict(metadata or {}),
            )
            with self._lock:
                self._pending[run_id] = started
                while len(self._pending) > MAX_PENDING:
                    # Counted as unpaired if its end ever comes; not before, or twice.
                    self._pending.popitem(last=False)
        except Exception as problem:
            self._recording.failed(problem)

    def on_retriever_end(
        self,
        documents: Sequence[Document],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        try:
            with self._lock:
                started = self._pending.pop(run_id, None)
                if started is None:
                    self.stats.unpaired += 1
                    return
            if self.retrievers is not None and started.name not in self.retrievers:
                self._recording.skipped()
                return
            self._record(run_id, started, documents)
        except Exception as problem:
            self._recording.failed(problem)

    def on_retriever_error(
        self,
        error: BaseException,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        # A failed retrieval served nothing: there is no ranking to score.
        with self._lock:
            self._pending.pop(run_id, None)

    # --- recording ----------------------------------------------------------------------------

    def _record(self, run_id: UUID, started: _Started, documents: Sequence[Document]) -> None:
        metadata = started.metadata
        ranking = rank(documents, self._document_id, _text, self._score)
        parent = None if started.parent_run_id is None else str(started.parent_run_id)
        attributes = trace_attributes(
            metadata,
            self.attribute_keys,
            started.query if self.record_query_text else None,
            {"retriever": started.name, "parent_run_id": parent},
            ranking.scores,
        )
        self.recorder.record(
            query_id_for(started.query, metadata, self.query_id, "run metadata"),
            ranking.ids,
            variant=metadata.get(VARIANT_KEY, self.variant),
            attributes=attributes,
            trace_id=str(run_id),
        )
        self._recording.recorded(ranking.hashed)

    def _document_id(self, document: Document) -> str | None:
        if self.id_key is not None:
            value = document.metadata.get(self.id_key)
            if is_identifier(value):
                return str(value)
        if isinstance(document.id, str) and document.id:
            return document.id
        return None

    def _score(self, document: Document) -> float | None:
        for key in self.score_keys:
            value = document.metadata.get(key)
            if value is not None:
                return finite_score(value)
        return None


def _text(document: Document) -> str:
    return str(document.page_content)
