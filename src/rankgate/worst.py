"""The lowest-scoring queries, kept with their rankings so a report can show what went wrong.

Per-query values are one float per query per metric, but a reader of a report wants to see *why* a
query scored badly: what the retriever put first and which relevant documents it missed. Keeping
every ranking would defeat the streaming design, so this module keeps only the rankings of queries
that are among the ``count`` lowest on at least one metric. Rankings wait in a small pending list
until their batch has been scored; then the running selection per metric is merged with the batch's
lowest and every ranking no metric still wants is dropped. Memory is bounded by one batch plus
``count`` examples per metric.

Ties are broken by input order (the earlier query is "worse"), so the selection does not depend on
batch boundaries.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from rankgate.spec import MetricSpec

__all__ = ["QUERY_TEXT_FIELDS", "QueryExample", "WorstQueries"]

# Attributes that commonly hold the query's text, in the order they are looked for.
QUERY_TEXT_FIELDS = ("query", "query_text", "question", "text")
# Relevant documents listed per example; the rest is only counted.
RELEVANT_SHOWN = 50


@dataclass(frozen=True, slots=True)
class QueryExample:
    """One scored query as a report shows it.

    ``index`` is the query's position among scored queries (its row in ``Evaluation.values``).
    ``ranked`` holds the first ``depth`` distinct retrieved IDs with their grade (None: unjudged);
    ``relevant`` holds documents graded at or above the threshold, best first, at most
    ``RELEVANT_SHOWN`` of them.
    """

    index: int
    query_id: str
    text: str | None
    ranked: tuple[tuple[str, float | None], ...]
    retrieved_count: int
    relevant: tuple[tuple[str, float], ...]
    relevant_count: int


@dataclass(slots=True)
class _Pending:
    query_id: str
    text: str | None
    distinct: list[str]
    grades: Mapping[str, float]


class WorstQueries:
    """Keeps the ``count`` lowest-scoring queries per metric, with rankings to ``depth``."""

    def __init__(
        self, metrics: Sequence[MetricSpec], count: int, depth: int, threshold: float
    ) -> None:
        if count < 0:
            raise ValueError(f"count must be >= 0, not {count}")
        self.metrics = tuple(metrics)
        self.count = count
        self.depth = depth
        self.threshold = threshold
        self._pending: list[_Pending] = []
        self._start = 0  # index of the first pending query among all scored queries
        # Per metric: (value, index) of the current selection, sorted worst first.
        self._chosen: dict[MetricSpec, list[tuple[float, int]]] = {m: [] for m in self.metrics}
        self._examples: dict[int, QueryExample] = {}

    @property
    def active(self) -> bool:
        return self.count > 0

    def hold(
        self,
        query_id: str,
        retrieved_ids: Sequence[str],
        grades: Mapping[str, float],
        attributes: Mapping[str, object],
    ) -> None:
        """Keep one scored query's ranking until its batch has values (call in scoring order)."""
        if not self.active:
            return
        text = next(
            (value for name in QUERY_TEXT_FIELDS if isinstance(value := attributes.get(name), str)),
            None,
        )
        self._pending.append(_Pending(query_id, text, list(dict.fromkeys(retrieved_ids)), grades))

    def settle(self, values: Mapping[MetricSpec, npt.NDArray[np.float64]]) -> None:
        """Merge the pending queries, whose values these are (same order), into the selection."""
        if not self.active:
            return
        held = len(self._pending)
        for spec in self.metrics:
            batch = values[spec]
            if len(batch) != held:
                raise ValueError(f"{spec}: {len(batch)} values for {held} held queries")
            indices = np.arange(self._start, self._start + held)
            finite = ~np.isnan(batch)
            # lexsort sorts by the last key first: value, then input order.
            order = np.lexsort((indices[finite], batch[finite]))[: self.count]
            fresh = zip(batch[finite][order].tolist(), indices[finite][order].tolist(), strict=True)
            self._chosen[spec] = sorted([*self._chosen[spec], *fresh])[: self.count]
        wanted = {index for chosen in self._chosen.values() for _, index in chosen}
        self._examples = {i: e for i, e in self._examples.items() if i in wanted}
        for offset, pending in enumerate(self._pending):
            index = self._start + offset
            if index in wanted:
                self._examples[index] = self._example(index, pending)
        self._start += held
        self._pending = []

    def choose_all(
        self,
        values: Mapping[MetricSpec, npt.NDArray[np.float64]],
        fetch: Callable[
            [list[int]],
            Mapping[int, tuple[str, Sequence[str], Mapping[str, float], Mapping[str, object]]],
        ],
    ) -> None:
        """Select from every query's values at once, then ``fetch`` the rankings of the chosen ones
        (by index: query ID, retrieved IDs, grades, attributes).

        For callers that read rankings back from their source instead of holding them; the choice
        is the one ``hold`` and ``settle`` make batch by batch.
        """
        if not self.active:
            return
        for spec in self.metrics:
            column = values[spec]
            indices = np.arange(len(column))
            finite = ~np.isnan(column)
            order = np.lexsort((indices[finite], column[finite]))[: self.count]
            self._chosen[spec] = list(
                zip(column[finite][order].tolist(), indices[finite][order].tolist(), strict=True)
            )
        wanted = sorted({index for chosen in self._chosen.values() for _, index in chosen})
        found = fetch(wanted)
        for index in wanted:
            query_id, retrieved_ids, grades, attributes = found[index]
            self._start = index
            self.hold(query_id, retrieved_ids, grades, attributes)
            self._examples[index] = self._example(index, self._pending.pop())
        self._start = len(next(iter(values.values()))) if values else 0

    def examples(self) -> tuple[QueryExample, ...]:
        """Every kept example, in input order."""
        return tuple(self._examples[i] for i in sorted(self._examples))

    def _example(self, index: int, pending: _Pending) -> QueryExample:
        grades = pending.grades
        ranked = tuple((doc, grades.get(doc)) for doc in pending.distinct[: self.depth])
        relevant = sorted(
            ((doc, grade) for doc, grade in grades.items() if grade >= self.threshold),
            key=lambda item: -item[1],
        )
        return QueryExample(
            index=index,
            query_id=pending.query_id,
            text=pending.text,
            ranked=ranked,
            retrieved_count=len(pending.distinct),
            relevant=tuple(relevant[:RELEVANT_SHOWN]),
            relevant_count=len(relevant),
        )
