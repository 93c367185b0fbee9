"""Groups of queries: the whole evaluation, or one segment (one value of one field).

A single mean over all queries hides a regression on a rare query type, so every metric is also
reported per segment: ``--segment-by query_type`` splits the scored queries by that field's value.
Each field is its own partition (``query_type`` and ``retriever`` give two sets of segments, not
their product). A ``Group`` carries what the gates and reports need: record counts (so coverage is
known per segment), means and confidence intervals.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from rankgate.io.validate import lookup_path
from rankgate.spec import MetricSpec
from rankgate.stats import bootstrap_interval, derived_seed, exact_sum

__all__ = ["MISSING_VALUE", "Group", "GroupCounts", "SegmentKey", "segment_value", "summarise"]

# The segment of records that lack the field: named so it is reported, never silently dropped.
MISSING_VALUE = "(missing)"


@dataclass(frozen=True, slots=True, order=True)
class SegmentKey:
    """One segment: a field (a key or dotted path) and one of its values, as text."""

    field: str
    value: str

    def __str__(self) -> str:
        return f"{self.field}={self.value}"


def segment_value(attributes: Mapping[str, Any], path: str) -> str:
    """The segment a record belongs to for ``path``: its value as text, or ``(missing)``."""
    value = lookup_path(attributes, path)
    if value is None:
        return MISSING_VALUE
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


@dataclass(slots=True)
class GroupCounts:
    """Record accounting for one group, filled while records stream in."""

    read: int = 0
    labeled: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    labels_removed_stale: int = 0
    labels_removed_expired: int = 0
    lost_all_relevant: int = 0

    def skip(self, reason: str) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + 1


@dataclass(frozen=True, slots=True)
class Group:
    """Counts, means and 95% intervals of one group of queries (``key`` None: all of them)."""

    key: SegmentKey | None
    read: int
    labeled: int
    scored: int
    skipped: dict[str, int]
    means: dict[MetricSpec, float]
    intervals: dict[MetricSpec, tuple[float, float]]
    labels_removed_stale: int = 0
    labels_removed_expired: int = 0
    lost_all_relevant: int = 0

    @property
    def coverage(self) -> float | None:
        """Share of the group's records that carry labels; None when it has none."""
        return self.labeled / self.read if self.read else None

    @property
    def name(self) -> str:
        return "overall" if self.key is None else str(self.key)


def summarise(
    key: SegmentKey | None,
    counts: GroupCounts,
    values: Mapping[MetricSpec, npt.NDArray[np.float64]],
    seed: int,
    resamples: int,
) -> Group:
    """A ``Group`` from its counts and its queries' per-query values (already selected)."""
    scored = len(next(iter(values.values()))) if values else 0
    means = {
        spec: exact_sum(column) / scored if scored else math.nan for spec, column in values.items()
    }
    intervals = {
        spec: (
            bootstrap_interval(column, _seed_for(seed, key, spec), resamples)
            if resamples
            else (math.nan, math.nan)
        )
        for spec, column in values.items()
    }
    return Group(
        key=key,
        read=counts.read,
        labeled=counts.labeled,
        scored=scored,
        skipped={reason: counts.skipped.get(reason, 0) for reason in _REASONS},
        means=means,
        intervals=intervals,
        labels_removed_stale=counts.labels_removed_stale,
        labels_removed_expired=counts.labels_removed_expired,
        lost_all_relevant=counts.lost_all_relevant,
    )


_REASONS = ("unlabeled", "no_relevant", "invalid")


def _seed_for(seed: int, key: SegmentKey | None, spec: MetricSpec) -> int:
    """A seed per (group, metric), derived from the run's seed and the names, so that adding a
    metric or a segment does not change the intervals of the others."""
    return derived_seed(seed, "" if key is None else key, spec)


def split_by_segment(
    column: Sequence[str], values: Mapping[MetricSpec, npt.NDArray[np.float64]]
) -> dict[str, dict[MetricSpec, npt.NDArray[np.float64]]]:
    """Per-query values divided among the segments of one field (``column`` aligns with them)."""
    labels = np.asarray(column, dtype=object)
    parts: dict[str, dict[MetricSpec, npt.NDArray[np.float64]]] = {}
    for segment in dict.fromkeys(column):
        mask = labels == segment
        parts[segment] = {spec: array[mask] for spec, array in values.items()}
    return parts
