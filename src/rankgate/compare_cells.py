"""The statistics of a comparison, from per-query values alone: one ``Cell`` per metric and group.

Everything here works on arrays of per-query metric values, so any engine that can produce them
(the local evaluator, the Spark engine) gets the same cells: ``cells_from_values`` makes one
candidate's raw cells, ``flag_cells`` adjusts the p-values of a whole run and flags the cells.

Two designs, because an A/B test is run in two ways:

* **paired**: both systems ranked the same queries (an offline replay). Per query, the delta; its
  mean, a BCa interval, a paired t-test or sign-flip test, Cohen's d_z and win/tie/loss counts.
* **unpaired**: each variant served its own queries (a traffic split). The difference of the two
  means, a two-sample bootstrap interval, Welch's t-test and Cohen's d; no wins or losses, since no
  query was seen by both.

Every metric here is better when higher, so a negative delta is a loss.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from rankgate.errors import ConfigError
from rankgate.fast import text_array, texts_of
from rankgate.gates import GatePolicy
from rankgate.segments import SegmentKey
from rankgate.spec import MetricSpec
from rankgate.stats import (
    CORRECTIONS,
    DEFAULT_PERMUTATIONS,
    adjust_pvalues,
    bca_interval,
    cohens_d,
    cohens_dz,
    derived_seed,
    difference_interval,
    exact_sum,
    paired_t_test,
    sign_flip_test,
    welch_t_test,
)

__all__ = [
    "PAIRINGS",
    "TESTS",
    "Cell",
    "Significance",
    "cells_from_values",
    "flag_cells",
]

TESTS = ("t", "randomization")
PAIRINGS = ("paired", "unpaired", "auto")
Flag = Literal["regression", "improvement"]
Design = Literal["paired", "unpaired"]
# Two per-query values closer than this are a tie: the same ranking scored twice gives the same
# value, but a sum taken in another order may differ in the last bits.
TIE_TOLERANCE = 1e-12

Values = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class Significance:
    """How differences are tested and flagged.

    ``test``: ``"t"`` (paired t-test) or ``"randomization"`` (sign-flip test, exact when 2^n <=
    ``permutations``); an unpaired comparison always uses Welch's t-test. ``correction``:
    ``"holm"`` or ``"bh"`` across every metric x segment cell. A cell is flagged when its adjusted
    p < ``alpha`` and |delta| > ``margin`` (a practical margin in the metric's units).
    """

    test: str = "t"
    permutations: int = DEFAULT_PERMUTATIONS
    correction: str = "holm"
    alpha: float = 0.05
    margin: float = 0.0

    def __post_init__(self) -> None:
        if self.test not in TESTS:
            raise ConfigError(f"test must be one of {', '.join(TESTS)}, got {self.test!r}")
        if self.correction not in CORRECTIONS:
            raise ConfigError(
                f"correction must be one of {', '.join(CORRECTIONS)}, got {self.correction!r}"
            )
        if not _number(self.alpha) or not 0.0 < self.alpha < 1.0:
            raise ConfigError(f"alpha must be a number between 0 and 1, got {self.alpha!r}")
        if not _number(self.margin) or not 0.0 <= self.margin < math.inf:
            raise ConfigError(f"margin must be a number >= 0, got {self.margin!r}")
        if (
            isinstance(self.permutations, bool)
            or not isinstance(self.permutations, int)
            or self.permutations < 1
        ):
            raise ConfigError(
                f"permutations must be a whole number >= 1, got {self.permutations!r}"
            )


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True, slots=True)
class Cell:
    """One metric on one group of queries (``segment`` None: all of them).

    ``delta`` is candidate - baseline (means); ``relative_delta`` divides it by the baseline mean
    (None when that is 0). ``interval`` is the 95% interval of the delta: BCa of the mean per-query
    delta when paired, a two-sample percentile bootstrap when unpaired (normal approximations at
    large n). ``queries`` counts the queries behind the cell: the pairs when paired, both sides
    together when unpaired (``baseline_queries`` and ``candidate_queries`` give each side).
    ``wins``/``ties``/``losses`` exist only for paired cells (None otherwise). ``status`` is
    ``insufficient`` when a side has fewer queries than the segment's ``min_queries``: such a cell
    is reported but never flagged.
    """

    candidate: str
    segment: SegmentKey | None
    metric: MetricSpec
    queries: int
    baseline_mean: float
    candidate_mean: float
    delta: float
    relative_delta: float | None
    interval: tuple[float, float]
    p_value: float
    p_adjusted: float
    exact: bool
    effect_size: float | None
    wins: int | None
    ties: int | None
    losses: int | None
    status: str = "ok"
    flag: Flag | None = None
    design: Design = "paired"
    baseline_queries: int | None = None
    candidate_queries: int | None = None

    @property
    def group(self) -> str:
        return "overall" if self.segment is None else str(self.segment)

    def statistics(self) -> dict[str, Any]:
        """The cell's numbers, counts, status and flag by name (the interval aside)."""
        return {
            "design": self.design,
            "queries": self.queries,
            "baseline_queries": self.baseline_queries,
            "candidate_queries": self.candidate_queries,
            "baseline_mean": self.baseline_mean,
            "candidate_mean": self.candidate_mean,
            "delta": self.delta,
            "relative_delta": self.relative_delta,
            "p_value": self.p_value,
            "p_adjusted": self.p_adjusted,
            "exact": self.exact,
            "effect_size": self.effect_size,
            "wins": self.wins,
            "ties": self.ties,
            "losses": self.losses,
            "status": self.status,
            "flag": self.flag,
        }


def cells_from_values(
    candidate: str,
    metrics: Sequence[MetricSpec],
    baseline_values: Mapping[MetricSpec, Values],
    candidate_values: Mapping[MetricSpec, Values],
    *,
    design: Design,
    segments: Sequence[SegmentKey] = (),
    baseline_segments: Mapping[str, Sequence[str]] | None = None,
    candidate_segments: Mapping[str, Sequence[str]] | None = None,
    policy: GatePolicy | None = None,
    significance: Significance | None = None,
    seed: int = 0,
    resamples: int = 1000,
) -> list[Cell]:
    """One candidate's cells (p-values not yet adjusted) from per-query values.

    Args:
        candidate: the candidate's name, carried by every cell.
        metrics: the metrics to report, in order.
        baseline_values, candidate_values: per-query values of each metric. ``paired``: aligned,
            element i of both is the same query. ``unpaired``: each side's own queries.
        design: ``"paired"`` or ``"unpaired"``.
        segments: the segments to report after the overall group, in order.
        baseline_segments, candidate_segments: per field, each query's segment value, aligned with
            that side's values. A paired comparison segments both sides by the baseline's.
        policy: ``min_queries`` per segment (a cell below it is ``insufficient``).
        significance: the test (paired designs) and the settings flags will use.
        seed, resamples: the bootstrap's; each cell draws from ``derived_seed(seed, group,
            metric, ...)``, so adding a metric or segment leaves the others' draws alone.

    Groups with no query (unpaired: on either side) get no cell.
    """
    policy = policy or GatePolicy()
    significance = significance or Significance()
    if design not in ("paired", "unpaired"):
        raise ValueError(f"design must be 'paired' or 'unpaired', got {design!r}")
    before_segments = baseline_segments or {}
    after_segments = before_segments if design == "paired" else (candidate_segments or {})
    n_before = _length(baseline_values, metrics)
    n_after = _length(candidate_values, metrics)
    before_codes = _Membership(before_segments)
    after_codes = before_codes if design == "paired" else _Membership(after_segments)
    groups: list[tuple[SegmentKey | None, Any, Any]] = [(None, slice(None), slice(None))]
    for segment in segments:
        groups.append(
            (segment, before_codes.rows(segment, n_before), after_codes.rows(segment, n_after))
        )
    cells = []
    for key, before_rows, after_rows in groups:
        if design == "paired":
            count = n_before if key is None else len(before_rows)
            if count == 0:
                continue  # a segment whose records were all skipped: its counts are reported
            counts = (count, count)
        else:
            counts = (
                n_before if key is None else len(before_rows),
                n_after if key is None else len(after_rows),
            )
            if min(counts) == 0:
                continue  # nothing to compare with: the side that has the segment reports it
        status = "ok"
        if key is not None:
            rule = policy.rule(key)
            least = rule.min_queries if rule and rule.min_queries else policy.min_queries
            if min(counts) < least:
                status = "insufficient"
        for spec in metrics:
            before = baseline_values[spec][before_rows]
            after = candidate_values[spec][after_rows]
            make = _paired_cell if design == "paired" else _unpaired_cell
            cells.append(
                make(candidate, key, spec, before, after, status, significance, seed, resamples)
            )
    return cells


def flag_cells(
    cells: Sequence[Sequence[Cell]], significance: Significance
) -> list[tuple[Cell, ...]]:
    """Every candidate's cells with p-values adjusted across the whole run (all candidates, metrics
    and segments) and flagged: a regression (improvement) when the adjusted p < alpha and the delta
    is below -margin (above +margin), and the cell's status is ``ok``."""
    adjusted = adjust_pvalues(
        [cell.p_value for group in cells for cell in group], significance.correction
    )
    position = 0
    finished = []
    for group in cells:
        flagged = []
        for cell in group:
            flagged.append(_flagged(cell, adjusted[position], significance))
            position += 1
        finished.append(tuple(flagged))
    return finished


class _Membership:
    """Rows of each segment value, from a side's segment columns (dictionary-encoded once)."""

    def __init__(self, columns: Mapping[str, Sequence[str]]) -> None:
        self.columns = columns
        self.encoded: dict[str, tuple[npt.NDArray[np.int64], dict[str, int]]] = {}

    def rows(self, key: SegmentKey, length: int) -> npt.NDArray[np.int64]:
        if key.field not in self.columns:
            return np.zeros(0, dtype=np.int64)
        if key.field not in self.encoded:

            encoded = text_array(self.columns[key.field]).dictionary_encode()
            codes = np.asarray(encoded.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
            names = {value: code for code, value in enumerate(texts_of(encoded.dictionary))}
            self.encoded[key.field] = (codes, names)
        codes, names = self.encoded[key.field]
        code = names.get(key.value)
        if code is None:
            return np.zeros(0, dtype=np.int64)
        return np.flatnonzero(codes == code)


def _length(values: Mapping[MetricSpec, Values], metrics: Sequence[MetricSpec]) -> int:
    return len(values[metrics[0]]) if metrics else 0


def _paired_cell(
    name: str,
    key: SegmentKey | None,
    spec: MetricSpec,
    before: Values,
    after: Values,
    status: str,
    significance: Significance,
    seed: int,
    resamples: int,
) -> Cell:
    deltas = after - before
    deltas[np.abs(deltas) <= TIE_TOLERANCE] = 0.0
    baseline_mean = exact_sum(before) / len(before)
    candidate_mean = exact_sum(after) / len(after)
    delta = candidate_mean - baseline_mean
    group = "" if key is None else str(key)
    if significance.test == "t":
        p_value, exact = paired_t_test(deltas), False
    else:
        p_value, exact = sign_flip_test(
            deltas, derived_seed(seed, group, spec, "signs"), significance.permutations
        )
    return Cell(
        candidate=name,
        segment=key,
        metric=spec,
        queries=len(deltas),
        baseline_mean=baseline_mean,
        candidate_mean=candidate_mean,
        delta=delta,
        relative_delta=delta / baseline_mean if baseline_mean else None,
        interval=bca_interval(deltas, derived_seed(seed, group, spec, "delta"), resamples),
        p_value=p_value,
        p_adjusted=p_value,
        exact=exact,
        effect_size=cohens_dz(deltas),
        wins=int(np.count_nonzero(deltas > 0)),
        ties=int(np.count_nonzero(deltas == 0)),
        losses=int(np.count_nonzero(deltas < 0)),
        status=status,
        design="paired",
        baseline_queries=len(before),
        candidate_queries=len(after),
    )


def _unpaired_cell(
    name: str,
    key: SegmentKey | None,
    spec: MetricSpec,
    before: Values,
    after: Values,
    status: str,
    significance: Significance,
    seed: int,
    resamples: int,
) -> Cell:
    baseline_mean = exact_sum(before) / len(before)
    candidate_mean = exact_sum(after) / len(after)
    delta = candidate_mean - baseline_mean
    group = "" if key is None else str(key)
    p_value = welch_t_test(before, after)
    return Cell(
        candidate=name,
        segment=key,
        metric=spec,
        queries=len(before) + len(after),
        baseline_mean=baseline_mean,
        candidate_mean=candidate_mean,
        delta=delta,
        relative_delta=delta / baseline_mean if baseline_mean else None,
        interval=difference_interval(
            before, after, derived_seed(seed, group, spec, "difference"), resamples
        ),
        p_value=p_value,
        p_adjusted=p_value,
        exact=False,
        effect_size=cohens_d(before, after),
        wins=None,
        ties=None,
        losses=None,
        status=status,
        design="unpaired",
        baseline_queries=len(before),
        candidate_queries=len(after),
    )


def _flagged(cell: Cell, p_adjusted: float, significance: Significance) -> Cell:
    flag: Flag | None = None
    if cell.status == "ok" and p_adjusted < significance.alpha:
        if cell.delta < -significance.margin:
            flag = "regression"
        elif cell.delta > significance.margin:
            flag = "improvement"
    return replace(cell, p_adjusted=p_adjusted, flag=flag)
