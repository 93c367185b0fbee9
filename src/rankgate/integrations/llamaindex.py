"""Record every LlamaIndex retrieval into a trace store.

``RankgateEventHandler`` is an event handler for LlamaIndex's instrumentation dispatcher. Every
``BaseRetriever.retrieve``/``aretrieve`` call ends with a ``RetrievalEndEvent`` that carries the
query and the ``NodeWithScore`` list, and the handler turns each into one trace in a
``TraceRecorder``. ``instrument(recorder, ...)`` makes a handler and attaches it to the root
dispatcher, so retrievers, query engines and chat engines are all covered; ``detach()`` removes it.
docs/frameworks.md explains the choices below at more length.

How a trace is filled in:

* **query_id**: the event's ``rankgate_query_id`` tag (set it around a call with
  ``llama_index.core.instrumentation.dispatcher.instrument_tags``), else what the ``query_id``
  callable returns for the query text, else ``text_id(query)``, the same hash the LangChain
  handler uses.
* **retrieved_ids**: per node, ``node.metadata[id_key]`` when ``id_key`` is given and the value is
  a non-empty string or integer, else the ID of the document the node was split from when
  ``use_ref_doc_id`` is set (``node.ref_doc_id``, read from the node's SOURCE relationship), else
  ``node.node_id``, else ``text_id`` of the node's text. Node IDs are random UUIDs unless the
  ingestion pipeline fixes them, so they match labels only within one index build: give documents
  stable IDs, or name a metadata key.
* **variant**: the ``rankgate_variant`` tag, else the handler's ``variant``.
* **trace_id**: the end event's ID, so handling the same event twice stores it once.
* **attributes**: ``query`` (the text, unless ``record_query_text=False``), ``retriever`` (the
  retriever's class, read from the span ID), ``span_id``, ``retrieved_scores`` (``NodeWithScore.score``
  aligned with the IDs, ``null`` where missing; absent when no node has one) and the tags named in
  ``attribute_keys``.

The handler never raises into the application (LlamaIndex's dispatcher would swallow it
silently): a retrieval it cannot record is counted in ``stats.failed``, and the first failure of
each kind is logged as a warning on the ``rankgate.integrations`` logger.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

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
    "RankgateEventHandler",
    "RecordingStats",
    "instrument",
    "text_id",
]

try:
    # The documented import path; the names are re-exported without __all__, hence the ignore.
    from llama_index.core.instrumentation import (  # type: ignore[attr-defined]
        Dispatcher,
        get_dispatcher,
    )
    from llama_index.core.instrumentation.event_handlers import BaseEventHandler
    from llama_index.core.instrumentation.events import BaseEvent
    from llama_index.core.instrumentation.events.retrieval import RetrievalEndEvent
    from llama_index.core.schema import BaseNode, MetadataMode, NodeWithScore, QueryBundle
    from pydantic import PrivateAttr
except ImportError as problem:
    raise MissingExtraError(
        "rankgate.integrations.llamaindex needs llama-index-core: "
        f"pip install 'rankgate[llamaindex]' ({problem})"
    ) from problem

# The dispatcher names a method's span "<instance class>.<method>-<uuid>".
_RETRIEVE_SPAN = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\.a?retrieve-")


class RankgateEventHandler(BaseEventHandler):
    """A LlamaIndex instrumentation event handler that records each retrieval as a trace.

    Args:
        recorder: where traces go; the handler does not close it.
        variant: the variant of every trace, unless the event's ``rankgate_variant`` tag says
            otherwise.
        query_id: maps a query text to its ID; returning ``None`` falls back to ``text_id``.
            Not consulted when the event carries a ``rankgate_query_id`` tag.
        id_key: a node metadata key holding the document ID, tried first.
        use_ref_doc_id: identify a node by the document it was split from (``ref_doc_id``)
            rather than by its own ID. Chunks of one document then share an ID, and rankgate
            keeps the first of them in a ranking (the rest count as duplicates).
        attribute_keys: instrument tags copied into the trace's attributes; values that are not
            text, numbers or booleans are left out.
        retrievers: record only retrievals by these retriever classes (by class name); all
            when ``None``. Useful when a fusion or recursive retriever calls inner ones.
        record_query_text: store the query text as the ``query`` attribute. Turn it off when
            queries may hold personal data.

    Attach it with ``instrument(recorder, ...)``, or ``get_dispatcher().add_event_handler(h)``.
    """

    _recorder: TraceRecorder = PrivateAttr()
    _variant: str | None = PrivateAttr(default=None)
    _query_id: Callable[[str], str | int | None] | None = PrivateAttr(default=None)
    _id_key: str | None = PrivateAttr(default=None)
    _use_ref_doc_id: bool = PrivateAttr(default=False)
    _attribute_keys: tuple[str, ...] = PrivateAttr(default=())
    _retrievers: frozenset[str] | None = PrivateAttr(default=None)
    _record_query_text: bool = PrivateAttr(default=True)
    _recording: Recording = PrivateAttr(default_factory=lambda: Recording("a LlamaIndex retrieval"))
    _dispatchers: list[Dispatcher] = PrivateAttr(default_factory=list)

    def __init__(
        self,
        recorder: TraceRecorder,
        *,
        variant: str | None = None,
        query_id: Callable[[str], str | int | None] | None = None,
        id_key: str | None = None,
        use_ref_doc_id: bool = False,
        attribute_keys: Sequence[str] = (),
        retrievers: Collection[str] | None = None,
        record_query_text: bool = True,
    ) -> None:
        super().__init__()
        self._recorder = recorder
        self._variant = variant
        self._query_id = query_id
        self._id_key = id_key
        self._use_ref_doc_id = use_ref_doc_id
        self._attribute_keys = tuple(attribute_keys)
        self._retrievers = None if retrievers is None else frozenset(retrievers)
        self._record_query_text = record_query_text

    @classmethod
    def class_name(cls) -> str:
        return "RankgateEventHandler"

    @property
    def recorder(self) -> TraceRecorder:
        return self._recorder

    @property
    def stats(self) -> RecordingStats:
        return self._recording.stats

    def attach(self, dispatcher: Dispatcher | None = None) -> RankgateEventHandler:
        """Add the handler to ``dispatcher`` (the root one by default, which every LlamaIndex
        module's dispatcher reports to) and return it."""
        target = get_dispatcher() if dispatcher is None else dispatcher
        if not any(handler is self for handler in target.event_handlers):
            target.add_event_handler(self)
            self._dispatchers.append(target)
        return self

    def detach(self) -> None:
        """Remove the handler from every dispatcher ``attach`` added it to; safe to call twice."""
        for dispatcher in self._dispatchers:
            dispatcher.event_handlers = [h for h in dispatcher.event_handlers if h is not self]
        self._dispatchers.clear()

    # --- LlamaIndex's callback ----------------------------------------------------------------

    def handle(self, event: BaseEvent, **kwargs: Any) -> None:
        if not isinstance(event, RetrievalEndEvent):
            return
        try:
            self._handle_end(event)
        except Exception as problem:
            self._recording.failed(problem)

    # --- recording ----------------------------------------------------------------------------

    def _handle_end(self, event: RetrievalEndEvent) -> None:
        span_id = event.span_id if isinstance(event.span_id, str) else None
        matched = _RETRIEVE_SPAN.match(span_id or "")
        retriever = matched.group(1) if matched else None
        if self._retrievers is not None and retriever not in self._retrievers:
            self._recording.skipped()
            return
        query = _query_text(event.str_or_query_bundle)
        tags: Mapping[str, Any] = event.tags or {}
        ranking = rank(event.nodes, lambda scored: self._node_id(scored.node), _text, _score)
        attributes = trace_attributes(
            tags,
            self._attribute_keys,
            query if self._record_query_text else None,
            {"retriever": retriever, "span_id": span_id},
            ranking.scores,
        )
        self._recorder.record(
            query_id_for(query, tags, self._query_id, "instrument tag"),
            ranking.ids,
            variant=tags.get(VARIANT_KEY, self._variant),
            attributes=attributes,
            trace_id=event.id_,
        )
        self._recording.recorded(ranking.hashed)

    def _node_id(self, node: BaseNode) -> str | None:
        if self._id_key is not None:
            value = node.metadata.get(self._id_key)
            if is_identifier(value):
                return str(value)
        if self._use_ref_doc_id:
            try:
                source = node.source_node
            except ValueError:  # a malformed SOURCE relationship: fall back to the node's own ID
                source = None
            if source is not None and source.node_id:
                return source.node_id
        if isinstance(node.node_id, str) and node.node_id:
            return node.node_id
        return None


def instrument(
    recorder: TraceRecorder,
    *,
    variant: str | None = None,
    query_id: Callable[[str], str | int | None] | None = None,
    id_key: str | None = None,
    use_ref_doc_id: bool = False,
    attribute_keys: Sequence[str] = (),
    retrievers: Collection[str] | None = None,
    record_query_text: bool = True,
    dispatcher: Dispatcher | None = None,
) -> RankgateEventHandler:
    """Record every retrieval from now on: a ``RankgateEventHandler`` with these options,
    attached to ``dispatcher`` (the root one by default). Call ``detach()`` on it to stop."""
    handler = RankgateEventHandler(
        recorder,
        variant=variant,
        query_id=query_id,
        id_key=id_key,
        use_ref_doc_id=use_ref_doc_id,
        attribute_keys=attribute_keys,
        retrievers=retrievers,
        record_query_text=record_query_text,
    )
    return handler.attach(dispatcher)


def _query_text(query: str | QueryBundle) -> str:
    if isinstance(query, str):
        return query
    return query.query_str if isinstance(query.query_str, str) else str(query.query_str)


def _text(scored: NodeWithScore) -> str:
    return scored.node.get_content(metadata_mode=MetadataMode.NONE)


def _score(scored: NodeWithScore) -> float | None:
    return finite_score(scored.score)
