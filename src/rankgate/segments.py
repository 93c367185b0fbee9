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
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from rankgate.errors import UsageError
from rankgate.io.validate import lookup_path
from rankgate.spec import MetricSpec
from rankgate.stats import bootstrap_interval, derived_seed, exact_sum

if TYPE_CHECKING:
    from rankgate.evaluate import Settings
    from rankgate.gates import GatePolicy

__all__ = [
    "MISSING_VALUE",
    "Group",
    "GroupCounts",
    "SegmentKey",
    "check_segments",
    "segment_fields_of",
    "segment_value",
    "summarise",
]

# The segment of records that lack the field: named so it is reported, never silently dropped.
MISSING_VALUE = "(missing)"
# Scored records whose fields are listed when a segment field is in none of them.
FIELD_HINT_ROWS = 1000


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


def check_segments(
    settings: Settings,
    policy: GatePolicy,
    overall: GroupCounts,
    segment_counts: Mapping[SegmentKey, GroupCounts],
    segments: Sequence[Group],
    attributes: Sequence[Mapping[str, Any]],
) -> list[str]:
    """Check a segmentation of a whole input before any gate is decided on it; the warnings.

    A field of ``settings.segment_by`` that no record has is a ``UsageError``: every query lands in
    ``(missing)``, so a misspelled ``--segment-by`` would quietly turn per-segment gates into one
    overall check. Softer signs are warnings, which the evaluation carries and reports show: a
    ``[segments]`` rule whose field no record has or whose value no record had (its gates and
    settings never applied), and a field that most scored queries lack. ``attributes`` (the scored
    queries' fields) name the fields that do exist. An engine that scores its input in parts calls
    this once over the combined counts (see ``evaluate(..., partial=True)``).
    """
    fields = segment_fields_of(settings, policy)
    seen: dict[str, set[str]] = {name: set() for name in fields}
    for key in segment_counts:
        seen.setdefault(key.field, set()).add(key.value)
    # With nothing scored every gate fails for want of a value, so no segmentation can flip the
    # verdict, and there are no records to name fields from.
    scored = len(attributes)
    warnings: list[str] = []
    # A field no record has a value for, and no scored record even names (a column of nulls is
    # a field that exists: it is then reported as mostly missing below). The records' field
    # names are read back only when some field is suspect: on a columnar input that means
    # re-reading rows, which would otherwise cost every run seconds.
    suspect = [name for name in fields if scored and seen[name] <= {MISSING_VALUE}]
    known = _field_names(attributes) if suspect else {}
    absent = [name for name in suspect if name not in known]
    for name in absent:
        if name in settings.segment_by:
            raise UsageError(
                f"segment field {name!r} is in none of the {scored:,} records scored; "
                f"{_existing_fields(known)}"
            )
        warnings.append(
            f"[segments.{name}] in the config names a field that no record has, so its rules "
            f"never applied; {_existing_fields(known)}"
        )
    for rule in policy.rules:
        values_seen = seen.get(rule.key.field, set())
        if rule.key.field in absent or rule.key.value in values_seen:
            continue  # reported above, or the rule matched and applied
        values = sorted(values_seen - {MISSING_VALUE})
        shown = ", ".join(_clip(value) for value in values[:10])
        more = f" and {len(values) - 10:,} more" if len(values) > 10 else ""
        warnings.append(
            f"[segments.{rule.key.field}.{rule.key.value}] matched no record, so its gates never "
            f"applied; values seen: {shown or 'none'}{more}"
        )
    for name in fields:
        if name in absent:
            continue
        in_field = [
            group for group in segments if group.key is not None and group.key.field == name
        ]
        scored = sum(group.scored for group in in_field)
        missing = sum(
            group.scored for group in in_field if group.key == SegmentKey(name, MISSING_VALUE)
        )
        if scored and missing * 2 > scored:
            warnings.append(
                f"segment field {name!r} is missing on {missing:,} of {scored:,} scored queries "
                f"({missing / scored:.0%}), which all fall in the {MISSING_VALUE} segment"
            )
    return warnings


def segment_fields_of(settings: Settings, policy: GatePolicy) -> tuple[str, ...]:
    """The fields an evaluation segments by: ``segment_by``, then any a ``[segments]`` rule names."""
    return tuple(dict.fromkeys([*settings.segment_by, *(rule.key.field for rule in policy.rules)]))


def _field_names(attributes: Sequence[Mapping[str, Any]]) -> dict[str, None]:
    """The fields of the first ``FIELD_HINT_ROWS`` scored records, in order of appearance."""
    names: dict[str, None] = {}
    for row in attributes[: min(len(attributes), FIELD_HINT_ROWS)]:
        names.update(dict.fromkeys(row))
    return names


def _existing_fields(names: Mapping[str, None]) -> str:
    """The fields scored records do have, for a message about one they lack."""
    if not names:
        return "the scored records have no other field to segment by"
    listed = sorted(names)
    shown = ", ".join(_clip(name) for name in listed[:20])
    more = f" and {len(listed) - 20:,} more" if len(listed) > 20 else ""
    return f"fields the records have: {shown}{more}"


def _clip(text: str, limit: int = 60) -> str:
    """A field name or value from the data, short enough for a one-line message."""
    return repr(text if len(text) <= limit else text[:limit] + "...")
