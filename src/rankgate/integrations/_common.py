"""What the LangChain and LlamaIndex recorders share: the ID of a text that has none, the counts a
handler keeps and its once-per-kind failure warning, and how a retrieval becomes the arguments of
``TraceRecorder.record``.

No framework is imported here. ``rankgate.integrations.langchain`` and
``rankgate.integrations.llamaindex`` re-export the public names (``text_id``, ``RecordingStats``,
``QUERY_ID_KEY``, ``VARIANT_KEY``, and ``MissingExtraError`` from ``rankgate.errors``).
"""

from __future__ import annotations

import hashlib
import logging
import math
import numbers
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

__all__ = [
    "QUERY_ID_KEY",
    "VARIANT_KEY",
    "Ranking",
    "Recording",
    "RecordingStats",
    "finite_score",
    "is_identifier",
    "query_id_for",
    "rank",
    "text_id",
    "trace_attributes",
]

log = logging.getLogger("rankgate.integrations")

QUERY_ID_KEY = "rankgate_query_id"
VARIANT_KEY = "rankgate_variant"

Item = TypeVar("Item")


def text_id(text: str) -> str:
    """The ID rankgate gives a text that has none: ``"sha256:"`` and the first 16 hex digits of
    the SHA-256 of its UTF-8 bytes.

    Used for a query without an explicit ID and a document without one; call it to write labels
    for such queries and documents. Lone surrogates are encoded as they are ("surrogatepass"), so
    every Python string has an ID.

    >>> text_id("what is ndcg?")
    'sha256:75c7a35c2387eab4'
    """
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    return f"sha256:{digest[:16]}"


@dataclass(slots=True)
class RecordingStats:
    """Counts since the handler was made.

    ``recorded``: retrievals handed to the recorder (its own ``stats`` say what reached the
    store). ``skipped``: retrievals by retrievers not in ``retrievers``. ``unpaired`` (LangChain
    only, 0 for LlamaIndex): ends without a start the handler holds (never seen, or dropped past
    ``MAX_PENDING`` open runs), so without a query. ``failed``: retrievals that could not be
    recorded (the recorder refused them or raised). ``hashed_ids``: documents or nodes
    identified by ``text_id`` because they had no ID."""

    recorded: int = 0
    skipped: int = 0
    unpaired: int = 0
    failed: int = 0
    hashed_ids: int = 0


class Recording:
    """A handler's ``RecordingStats``, the lock that guards them, and the warning logged for the
    first failure of each kind (later ones are only counted).

    ``what`` names one retrieval in the log lines, e.g. ``"a LangChain retriever call"``.
    """

    def __init__(self, what: str) -> None:
        self.what = what
        self.stats = RecordingStats()
        # Callbacks may run on several threads at once (async chains, executor pools).
        self.lock = threading.Lock()
        self._logged: set[str] = set()

    def recorded(self, hashed_ids: int) -> None:
        with self.lock:
            self.stats.recorded += 1
            self.stats.hashed_ids += hashed_ids

    def skipped(self) -> None:
        with self.lock:
            self.stats.skipped += 1

    def failed(self, problem: Exception) -> None:
        kind = type(problem).__name__
        with self.lock:
            self.stats.failed += 1
            first = kind not in self._logged
            self._logged.add(kind)
        if first:
            log.warning(
                "rankgate could not record %s (%s: %s); the application goes on, and further %s "
                "failures are counted in stats.failed without a log line",
                self.what,
                kind,
                problem,
                kind,
            )
        else:
            log.debug("rankgate could not record %s", self.what, exc_info=problem)


@dataclass(frozen=True, slots=True)
class Ranking:
    """What a retriever returned, as stored: the IDs in order, the scores aligned with them, and
    how many of the IDs are ``text_id`` hashes."""

    ids: list[str]
    scores: list[float | None]
    hashed: int


def rank(
    items: Iterable[Item],
    id_of: Callable[[Item], str | None],
    text_of: Callable[[Item], str],
    score_of: Callable[[Item], float | None],
) -> Ranking:
    """The ``Ranking`` of ``items``: each one's ``id_of``, else ``text_id`` of its ``text_of``."""
    ids: list[str] = []
    scores: list[float | None] = []
    hashed = 0
    for item in items:
        identifier = id_of(item)
        if identifier is None:
            identifier = text_id(text_of(item))
            hashed += 1
        ids.append(identifier)
        scores.append(score_of(item))
    return Ranking(ids, scores, hashed)


def query_id_for(
    query: str,
    context: Mapping[str, Any],
    query_id: Callable[[str], str | int | None] | None,
    where: str,
) -> str | int:
    """The query's ID: ``context[QUERY_ID_KEY]``, else what ``query_id`` returns for the text,
    else ``text_id(query)``. ``where`` names the context in the error (``"run metadata"``)."""
    explicit: object = context.get(QUERY_ID_KEY)
    if explicit is not None:
        # A wrong type is the caller's mistake: it fails this call visibly (counted, logged)
        # rather than quietly falling back to the hash.
        if isinstance(explicit, bool) or not isinstance(explicit, (str, int)):
            raise TypeError(
                f"{where} {QUERY_ID_KEY!r} must be a string or an integer, "
                f"not {type(explicit).__name__}"
            )
        return explicit
    if query_id is not None:
        chosen = query_id(query)
        if chosen is not None:
            return chosen
    return text_id(query)


def trace_attributes(
    context: Mapping[str, Any],
    keys: Sequence[str],
    query: str | None,
    described: Mapping[str, str | None],
    scores: Sequence[float | None],
) -> dict[str, Any]:
    """A trace's attributes, in this order: the ``context`` values named in ``keys`` that are
    text, finite numbers or booleans; ``query`` unless ``None``; the ``described`` values that are
    not ``None``; ``retrieved_scores`` when any score is not ``None``."""
    attributes: dict[str, Any] = {}
    for key in keys:
        value = context.get(key)
        if _is_scalar(value):
            attributes[key] = value
    if query is not None:
        # PostgreSQL cannot hold a NUL in text; a query that has one is still worth a trace.
        attributes["query"] = query.replace("\x00", "\ufffd")
    for key, text in described.items():
        if text is not None:
            attributes[key] = text
    if any(score is not None for score in scores):
        attributes["retrieved_scores"] = list(scores)
    return attributes


def is_identifier(value: object) -> bool:
    """A non-empty string or an integer (not a boolean): usable as a document ID."""
    return (isinstance(value, str) and value != "") or (
        isinstance(value, int) and not isinstance(value, bool)
    )


def finite_score(value: object) -> float | None:
    """A score as a float; ``None`` for what is not a finite number (JSON cannot hold NaN)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    try:
        number = float(value)
    except (OverflowError, ValueError):  # an int past float's range: no score, not a lost trace
        return None
    return number if math.isfinite(number) else None


def _is_scalar(value: object) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    return isinstance(value, (str, int, bool))
