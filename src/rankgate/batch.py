"""The columnar batch every metric kernel consumes.

Metric kernels never see document IDs. By the time a batch exists, each query's ranking has been
de-duplicated and joined against its labels, so a kernel only needs two ragged columns:

* ``ranked_grades``: for every ranked position of every query, the grade of the document there
  (0.0 when the document carries no label), with ``ranked_offsets`` marking where each query starts,
  and ``ranked_judged``, whether the document there carries a label at all (grade 0 included);
* ``label_grades``: every label grade of every query, sorted from highest to lowest per query (the
  ideal ranking, and the source of R, the number of relevant documents), with ``label_offsets``.

This is the Arrow list layout (offsets + flat values), so kernels are whole-array numpy operations
with no Python object per query or per document.

The unjudged-document policies (the ``unjudged`` metric parameter) are batch transformations here,
``condensed`` and ``with_unjudged_relevant``: a metric's kernel then scores the transformed batch
unchanged, so no numpy kernel knows about policies. (The compiled twins apply
``with_unjudged_relevant`` query by query themselves, for speed; tests hold them equal to scoring
this batch.)
"""

from __future__ import annotations

from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from itertools import repeat

import numpy as np
import numpy.typing as npt

__all__ = ["BatchBuilder", "RankedBatch"]

Floats = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int64]


@dataclass(frozen=True, eq=False)
class RankedBatch:
    """Rankings joined with their labels, for a block of queries, in columnar form."""

    ranked_offsets: Ints
    ranked_grades: Floats
    ranked_judged: npt.NDArray[np.bool_]
    label_offsets: Ints
    label_grades: Floats

    @property
    def n_queries(self) -> int:
        return len(self.ranked_offsets) - 1

    @cached_property
    def ranked_lengths(self) -> Ints:
        """How many (distinct) documents each query retrieved."""
        return np.diff(self.ranked_offsets)

    @cached_property
    def ranked_query(self) -> Ints:
        """For every ranked position, the index of its query within the batch."""
        return np.repeat(np.arange(self.n_queries, dtype=np.int64), self.ranked_lengths)

    @cached_property
    def ranked_rank(self) -> Ints:
        """For every ranked position, its 0-based rank within its query."""
        return np.arange(len(self.ranked_grades), dtype=np.int64) - np.repeat(
            self.ranked_offsets[:-1], self.ranked_lengths
        )

    @cached_property
    def label_lengths(self) -> Ints:
        return np.diff(self.label_offsets)

    @cached_property
    def label_query(self) -> Ints:
        return np.repeat(np.arange(self.n_queries, dtype=np.int64), self.label_lengths)

    @cached_property
    def label_rank(self) -> Ints:
        """For every label, its 0-based position in the ideal (grade-descending) ranking."""
        return np.arange(len(self.label_grades), dtype=np.int64) - np.repeat(
            self.label_offsets[:-1], self.label_lengths
        )

    def under_unjudged(self, policy: str, grade: float) -> RankedBatch:
        """This batch as the unjudged-document ``policy`` sees it (``nonrelevant``: unchanged;
        ``condensed``: see ``condensed``; ``relevant``: see ``with_unjudged_relevant(grade)``)."""
        if policy == "nonrelevant":
            return self
        if policy == "condensed":
            return self.condensed()
        if policy == "relevant":
            return self.with_unjudged_relevant(grade)
        raise ValueError(f"unknown unjudged-document policy {policy!r}")

    def condensed(self) -> RankedBatch:
        """Each ranking with its unjudged documents removed, the rest moving up to close the gaps
        (Sakai's condensed lists; trec_eval -J). Labels, and so R and the ideal, are unchanged."""
        keep = self.ranked_judged
        if bool(keep.all()):
            return self
        counts = np.bincount(self.ranked_query[keep], minlength=self.n_queries)
        offsets = np.zeros(self.n_queries + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        return RankedBatch(
            ranked_offsets=offsets,
            ranked_grades=self.ranked_grades[keep],
            ranked_judged=np.ones(int(offsets[-1]), dtype=np.bool_),
            label_offsets=self.label_offsets,
            label_grades=self.label_grades,
        )

    def with_unjudged_relevant(self, grade: float) -> RankedBatch:
        """Every unjudged retrieved document labeled ``grade``, as though an annotator had judged
        it so: at its rank, and among the query's labels (so it counts in R and in the ideal
        ranking, which stays sorted from highest to lowest grade)."""
        unjudged = ~self.ranked_judged
        if not bool(unjudged.any()):
            return self
        added = np.bincount(self.ranked_query[unjudged], minlength=self.n_queries)
        added_before = np.zeros(self.n_queries + 1, dtype=np.int64)
        np.cumsum(added, out=added_before[1:])
        # A query's labels are sorted from highest grade to lowest, so its new ones (all of
        # ``grade``) go in one run after the labels graded above it: each old label moves by the
        # labels added to earlier queries, plus its own query's when it is not above ``grade``.
        # (Equal grades are equal numbers: their order cannot show in any value.) A linear merge:
        # a sort of every label here was a third of a compare's scoring time.
        query = self.label_query
        moved = np.arange(len(self.label_grades), dtype=np.int64) + added_before[query]
        moved += np.where(self.label_grades <= grade, added[query], 0)
        grades = np.full(len(self.label_grades) + int(added_before[-1]), grade, dtype=np.float64)
        grades[moved] = self.label_grades
        label_offsets = self.label_offsets + added_before
        return RankedBatch(
            ranked_offsets=self.ranked_offsets,
            ranked_grades=np.where(unjudged, grade, self.ranked_grades),
            ranked_judged=np.ones(len(self.ranked_judged), dtype=np.bool_),
            label_offsets=label_offsets,
            label_grades=grades,
        )


class BatchBuilder:
    """Accumulates validated traces and emits a ``RankedBatch``.

    ``add`` does the per-record join (de-duplication and label lookup); everything after ``build``
    is vectorised.
    """

    def __init__(self) -> None:
        self._ranked_offsets = array("q", [0])
        self._ranked_grades = array("d")
        self._ranked_judged = array("b")
        self._label_offsets = array("q", [0])
        self._label_grades = array("d")

    def __len__(self) -> int:
        return len(self._ranked_offsets) - 1

    def add(self, retrieved_ids: Sequence[str], grades: Mapping[str, float]) -> int:
        """Append one query; returns how many duplicate IDs were dropped from its ranking.

        A document that appears more than once keeps its first rank; later documents move up to
        close the gap.
        """
        distinct = list(dict.fromkeys(retrieved_ids))
        self._ranked_grades.extend(map(grades.get, distinct, repeat(0.0)))
        self._ranked_judged.extend(map(grades.__contains__, distinct))
        self._ranked_offsets.append(len(self._ranked_grades))
        self._label_grades.extend(sorted(grades.values(), reverse=True))
        self._label_offsets.append(len(self._label_grades))
        return len(retrieved_ids) - len(distinct)

    def build(self) -> RankedBatch:
        return RankedBatch(
            ranked_offsets=np.frombuffer(self._ranked_offsets, dtype=np.int64).copy(),
            ranked_grades=np.frombuffer(self._ranked_grades, dtype=np.float64).copy(),
            ranked_judged=np.frombuffer(self._ranked_judged, dtype=np.int8).astype(np.bool_),
            label_offsets=np.frombuffer(self._label_offsets, dtype=np.int64).copy(),
            label_grades=np.frombuffer(self._label_grades, dtype=np.float64).copy(),
        )
