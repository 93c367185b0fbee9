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

Each cell that is not flagged also carries its minimum detectable effect: the smallest |delta|
its test had 80% power to flag (``rankgate.power``), at the level a cell is flagged at whatever the
other cells show (alpha over the number of cells: the first step of Holm's correction, and
Benjamini-Hochberg's with a single discovery). A ``min_detectable`` in the gate policy fails a cell
whose verdict could not have seen a change that size (``Cell.underpowered``).

When the per-query values include each metric under every unjudged-document policy and the
judged@k evidence (``compare_unjudged.evidence_specs``), each cell also carries a
``LabelEvidence``, and ``flag_cells`` marks a cell ``label-limited`` rather than a regression or an
improvement when the missing labels could decide it (see ``flag_cells``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from rankgate.compare_unjudged import (
    DEFAULT_UNJUDGED_TOLERANCE,
    LABEL_LIMITED,
    LabelEvidence,
    PolicyDelta,
    depth_of,
    has_evidence,
    judged_depth,
    judged_spec,
    unjudged_counts,
)
from rankgate.errors import ConfigError
from rankgate.fast import text_array, texts_of
from rankgate.gates import GatePolicy
from rankgate.power import (
    DETECTABLE_POWER,
    NO_SPREAD,
    combined_sd,
    effect_size_paired,
    effect_size_two_sample,
    spread_of,
)
from rankgate.segments import SegmentKey
from rankgate.spec import MetricSpec, unjudged_variants
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

    ``unjudged_tolerance``: how much less of its top k the candidate may have judged than the
    baseline (a share of the top k) before a flagged cell is ``label-limited`` instead.
    ``fail_on_label_limited``: whether a label-limited cell fails the comparison (by default it is
    reported and passes).
    """

    test: str = "t"
    permutations: int = DEFAULT_PERMUTATIONS
    correction: str = "holm"
    alpha: float = 0.05
    margin: float = 0.0
    unjudged_tolerance: float = DEFAULT_UNJUDGED_TOLERANCE
    fail_on_label_limited: bool = False

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
        if not _number(self.unjudged_tolerance) or not 0.0 <= self.unjudged_tolerance <= 1.0:
            raise ConfigError(
                "unjudged_tolerance must be a share of the top k between 0 and 1, "
                f"got {self.unjudged_tolerance!r}"
            )
        if not isinstance(self.fail_on_label_limited, bool):
            raise ConfigError(
                f"fail_on_label_limited must be True or False, got {self.fail_on_label_limited!r}"
            )
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
    is reported but never flagged; ``label-limited`` when missing labels could decide it
    (``evidence.reason`` says why): it carries no flag either.

    ``evidence``: judged@k of both arms, the delta under each unjudged-document policy and the
    unjudged pairs that decide the cell (None for a metric that takes no unjudged policy, or when
    the values behind the cell did not include the evidence).

    ``baseline_sd``/``candidate_sd``: each side's standard deviation of the per-query values
    (n - 1; None below two queries); ``delta_sd``: that of the per-query deltas (paired only).
    ``minimum_detectable_effect``: for a cell that is not flagged, the smallest |delta| its test
    had ``power.DETECTABLE_POWER`` (80%) power to flag at the per-cell level (``detectable_alpha``:
    alpha over the run's cells; see the module docstring), from the paired formula or the
    two-sample one (``rankgate.power``); None for a flagged cell, or when it cannot be estimated
    (fewer than two queries, no spread). The randomization test is planned as the t-test it
    approximates. ``min_detectable``: the policy's requirement on this cell (None: none);
    ``underpowered``: why the cell fails it, None when it does not (a cell that is flagged,
    insufficient or label-limited is never underpowered: its verdict has its own rule).
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
    evidence: LabelEvidence | None = None
    baseline_sd: float | None = None
    candidate_sd: float | None = None
    delta_sd: float | None = None
    minimum_detectable_effect: float | None = None
    detectable_alpha: float | None = None
    min_detectable: float | None = None
    underpowered: str | None = None

    @property
    def group(self) -> str:
        return "overall" if self.segment is None else str(self.segment)

    @property
    def label_limited(self) -> bool:
        return self.status == LABEL_LIMITED

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
            **_evidence_fields(self.evidence),
            "baseline_sd": self.baseline_sd,
            "candidate_sd": self.candidate_sd,
            "delta_sd": self.delta_sd,
            "minimum_detectable_effect": self.minimum_detectable_effect,
            "detectable_alpha": self.detectable_alpha,
            "min_detectable": self.min_detectable,
            "underpowered": self.underpowered,
        }


#: The evidence fields of ``Cell.statistics``, in order (None when a cell has no evidence).
EVIDENCE_FIELDS = (
    "judged_depth",
    "baseline_judged",
    "candidate_judged",
    "unjudged_pairs",
    "baseline_unjudged_pairs",
    "delta_nonrelevant",
    "delta_condensed",
    "delta_relevant",
    "label_limited_reason",
)


def _evidence_fields(evidence: LabelEvidence | None) -> dict[str, Any]:
    if evidence is None:
        return dict.fromkeys(EVIDENCE_FIELDS)
    return {
        "judged_depth": evidence.depth,
        "baseline_judged": evidence.baseline_judged,
        "candidate_judged": evidence.candidate_judged,
        "unjudged_pairs": evidence.unjudged_pairs,
        "baseline_unjudged_pairs": evidence.baseline_unjudged_pairs,
        "delta_nonrelevant": evidence.delta("nonrelevant"),
        "delta_condensed": evidence.delta("condensed"),
        "delta_relevant": evidence.delta("relevant"),
        "label_limited_reason": evidence.reason,
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
    depth: int | None = None,
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
        depth: the k judged@k is read at for a metric without a cutoff (default: the deepest
            cutoff of ``metrics``, else 10). When both sides' values hold a metric's
            ``compare_unjudged.evidence_specs``, its cells carry a ``LabelEvidence``.

    Groups with no query (unpaired: on either side) get no cell. Each cell carries the
    ``min_detectable`` the policy asks of its group.

    Raises:
        ConfigError: a ``min_detectable`` no larger than the practical margin (a change that small
            is never flagged, so no comparison could show the power to see it).
    """
    policy = policy or GatePolicy()
    significance = significance or Significance()
    check_detectable(policy, significance)
    if design not in ("paired", "unpaired"):
        raise ValueError(f"design must be 'paired' or 'unpaired', got {design!r}")
    before_segments = baseline_segments or {}
    after_segments = before_segments if design == "paired" else (candidate_segments or {})
    n_before = _length(baseline_values, metrics)
    n_after = _length(candidate_values, metrics)
    before_codes = _Membership(before_segments)
    after_codes = before_codes if design == "paired" else _Membership(after_segments)
    depth = judged_depth(metrics) if depth is None else depth
    counts_of = _CountCache(baseline_values, candidate_values)
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
            cell = make(candidate, key, spec, before, after, status, significance, seed, resamples)
            required = policy.detectable_for(key)
            if required is not None:
                cell = replace(cell, min_detectable=required)
            if has_evidence(baseline_values, spec, depth) and has_evidence(
                candidate_values, spec, depth
            ):
                evidence = _evidence(
                    key,
                    spec,
                    depth_of(spec, depth),
                    before_rows,
                    after_rows,
                    counts_of,
                    design,
                    significance,
                    seed,
                )
                cell = replace(cell, evidence=evidence)
            cells.append(cell)
    return cells


def check_detectable(policy: GatePolicy, significance: Significance) -> None:
    """Refuse a ``min_detectable`` (the policy's or a segment's) that is not above the margin."""
    asked = [("min_detectable", policy.min_detectable)] + [
        (f"[segments] {rule.key} min_detectable", rule.min_detectable) for rule in policy.rules
    ]
    for where, value in asked:
        if value is not None and value <= significance.margin:
            raise ConfigError(
                f"{where} = {value:g} is not above the margin ({significance.margin:g}): compare "
                "never flags a change within the margin, so no comparison could show the power "
                "to see it"
            )


class _CountCache:
    """Per side and depth, each query's unjudged documents in its top k (computed once)."""

    def __init__(
        self, baseline: Mapping[MetricSpec, Values], candidate: Mapping[MetricSpec, Values]
    ) -> None:
        self.values = (baseline, candidate)
        self.known: dict[tuple[int, int], npt.NDArray[np.int64]] = {}

    def counts(self, side: int, k: int) -> npt.NDArray[np.int64]:
        found = self.known.get((side, k))
        if found is None:
            found = self.known[(side, k)] = unjudged_counts(self.values[side], k)
        return found


def _evidence(
    key: SegmentKey | None,
    spec: MetricSpec,
    k: int,
    before_rows: Any,
    after_rows: Any,
    counts: _CountCache,
    design: Design,
    significance: Significance,
    seed: int,
) -> LabelEvidence:
    """Judged@k of both arms, the unjudged pairs, and the delta and test under each policy."""
    baseline, candidate = counts.values
    judged = judged_spec(k)
    group = "" if key is None else str(key)
    deltas = []
    for policy, variant in unjudged_variants(spec).items():
        before = baseline[variant][before_rows]
        after = candidate[variant][after_rows]
        delta = exact_sum(after) / len(after) - exact_sum(before) / len(before)
        if design == "unpaired":
            p_value = welch_t_test(before, after)
        else:
            per_query = after - before
            per_query[np.abs(per_query) <= TIE_TOLERANCE] = 0.0
            if significance.test == "t":
                p_value = paired_t_test(per_query)
            else:
                # The same draws as the cell's own test when the variant is the metric itself.
                p_value, _ = sign_flip_test(
                    per_query,
                    derived_seed(seed, group, variant, "signs"),
                    significance.permutations,
                )
        deltas.append(PolicyDelta(policy, delta, p_value, p_value))
    before_judged = baseline[judged][before_rows]
    after_judged = candidate[judged][after_rows]
    return LabelEvidence(
        depth=k,
        baseline_judged=exact_sum(before_judged) / len(before_judged),
        candidate_judged=exact_sum(after_judged) / len(after_judged),
        unjudged_pairs=int(counts.counts(1, k)[after_rows].sum()),
        baseline_unjudged_pairs=int(counts.counts(0, k)[before_rows].sum()),
        deltas=tuple(deltas),
    )


def flag_cells(
    cells: Sequence[Sequence[Cell]], significance: Significance
) -> list[tuple[Cell, ...]]:
    """Every candidate's cells with p-values adjusted across the whole run (all candidates, metrics
    and segments) and flagged: a regression (improvement) when the adjusted p < alpha and the delta
    is below -margin (above +margin), and the cell's status is ``ok``.

    A cell with evidence is tested under each unjudged policy too (each policy's p-values adjusted
    across the run as the cells' own are). When the two ends, unjudged documents all non-relevant
    and all relevant, reach different verdicts and either

    * one arm's top k is judged less than the other's by more than
      ``significance.unjudged_tolerance`` (mean judged@k over the cell's queries), or
    * the delta goes one way at one end and the other way at the other (beyond the margin),

    the cell is ``label-limited`` instead: no flag, and a ``reason`` (see ``_label_limit``). When
    both ends agree, the cell keeps its verdict.

    Every cell left without a flag then gets its minimum detectable effect at the per-cell level
    alpha / m (m: the cells of the run), and, when it carries a ``min_detectable`` and its status
    is ``ok``, is ``underpowered`` if that effect is larger (or cannot be estimated).
    """
    flat = [cell for group in cells for cell in group]
    adjusted = adjust_pvalues([cell.p_value for cell in flat], significance.correction)
    by_policy = {
        policy: adjust_pvalues([_policy_p(cell, policy) for cell in flat], significance.correction)
        for policy in _policies_in(flat)
    }
    detectable = _Detectable(significance.alpha / max(len(flat), 1))
    position = 0
    finished = []
    for group in cells:
        flagged = []
        for cell in group:
            policy_adjusted = {policy: found[position] for policy, found in by_policy.items()}
            done = _flagged(cell, adjusted[position], policy_adjusted, significance)
            flagged.append(detectable.judged(done))
            position += 1
        finished.append(tuple(flagged))
    return finished


class _Detectable:
    """Minimum detectable effects at one per-cell level. The standardised effect depends only on
    the design and the counts, so it is solved once per distinct (design, counts) and scaled by
    each cell's standard deviation."""

    def __init__(self, alpha: float) -> None:
        self.alpha = alpha
        self.effect_sizes: dict[tuple[str, int, int], float] = {}

    def judged(self, cell: Cell) -> Cell:
        """``cell`` with its minimum detectable effect and, under a requirement, its verdict."""
        if cell.flag is not None:
            return replace(cell, detectable_alpha=self.alpha)
        effect = self.effect(cell)
        reason = None
        if cell.min_detectable is not None and cell.status == "ok":
            reason = _underpowered(cell, effect, cell.min_detectable)
        return replace(
            cell,
            minimum_detectable_effect=effect,
            detectable_alpha=self.alpha,
            underpowered=reason,
        )

    def effect(self, cell: Cell) -> float | None:
        """The cell's minimum detectable |delta|; None below two queries a side; 0 when the
        per-query values have no spread."""
        n_b = cell.baseline_queries or 0
        n_c = cell.candidate_queries or 0
        if min(n_b, n_c) < 2:
            return None
        if cell.design == "paired":
            sd = cell.delta_sd
        elif cell.baseline_sd is not None and cell.candidate_sd is not None:
            sd = combined_sd(cell.baseline_sd, cell.candidate_sd, n_b, n_c)
        else:
            sd = None
        if sd is None:
            return None
        if not sd > NO_SPREAD:
            # Every query moved alike (an unflagged cell: not at all). Any change the same for
            # every query would have been flagged, so the comparison could detect any |delta|.
            return 0.0
        key = (cell.design, n_b, n_c)
        size = self.effect_sizes.get(key)
        if size is None:
            size = self.effect_sizes[key] = (
                effect_size_paired(n_b, power=DETECTABLE_POWER, alpha=self.alpha)
                if cell.design == "paired"
                else effect_size_two_sample(n_b, n_c, power=DETECTABLE_POWER, alpha=self.alpha)
            )
        return size * sd


def _underpowered(cell: Cell, effect: float | None, required: float) -> str | None:
    """Why ``cell`` (not flagged) fails a ``min_detectable`` of ``required``; None if it does not."""
    counted = (
        f"{cell.queries:,} paired queries"
        if cell.design == "paired"
        else f"{cell.baseline_queries:,} + {cell.candidate_queries:,} queries"
    )
    if effect is None:
        return (
            f"no spread in the per-query values of {counted} to estimate its power from "
            f"(min_detectable {required:g})"
        )
    if effect > required:
        return (
            f"could detect only |delta| >= {effect:.4f} with {counted} at "
            f"{DETECTABLE_POWER:.0%} power, not the {required:g} min_detectable asks for"
        )
    return None


def _policies_in(cells: Sequence[Cell]) -> list[str]:
    return list(
        dict.fromkeys(d.policy for cell in cells if cell.evidence for d in cell.evidence.deltas)
    )


def _policy_p(cell: Cell, policy: str) -> float:
    """The cell's p-value under ``policy`` (its own for a cell without evidence, so that every
    policy's family holds every cell of the run, as the cells' own family does)."""
    if cell.evidence is not None:
        for found in cell.evidence.deltas:
            if found.policy == policy:
                return found.p_value
    return cell.p_value


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
        baseline_sd=spread_of(before),
        candidate_sd=spread_of(after),
        delta_sd=spread_of(deltas),
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
        baseline_sd=spread_of(before),
        candidate_sd=spread_of(after),
    )


def _flag(delta: float, p_adjusted: float, significance: Significance) -> Flag | None:
    if p_adjusted < significance.alpha:
        if delta < -significance.margin:
            return "regression"
        if delta > significance.margin:
            return "improvement"
    return None


def _flagged(
    cell: Cell,
    p_adjusted: float,
    policy_adjusted: Mapping[str, float],
    significance: Significance,
) -> Cell:
    flag = _flag(cell.delta, p_adjusted, significance) if cell.status == "ok" else None
    evidence = cell.evidence
    if evidence is None:
        return replace(cell, p_adjusted=p_adjusted, flag=flag)
    deltas = tuple(
        replace(
            found,
            p_adjusted=policy_adjusted[found.policy],
            flag=_flag(found.delta, policy_adjusted[found.policy], significance),
        )
        for found in evidence.deltas
    )
    evidence = replace(evidence, deltas=deltas)
    reason = _label_limit(evidence, significance) if cell.status == "ok" else None
    if reason is None:
        return replace(cell, p_adjusted=p_adjusted, flag=flag, evidence=evidence)
    return replace(
        cell,
        p_adjusted=p_adjusted,
        flag=None,
        status=LABEL_LIMITED,
        evidence=replace(evidence, reason=reason),
    )


def _label_limit(evidence: LabelEvidence, significance: Significance) -> str | None:
    """Why the missing labels could decide a cell, in words; None when they cannot.

    The verdict is read at the two ends, unjudged documents all non-relevant and all relevant.
    When both ends reach the same verdict the labels cannot change it (under those readings).
    Otherwise the cell is label-limited when the arms' judged@k differ by more than the tolerance
    (either way: the less-judged arm is the one the pessimistic reading penalises) or the two ends
    move the delta in opposite directions. ``condensed`` is reported, not consulted: with labels
    of relevant documents only (``relevant_ids``) a condensed ranking keeps nothing but those, so
    it sees no change in a candidate that pushes them down, and would make every such regression
    label-limited.
    """
    ends = {found.policy: found for found in evidence.deltas}
    pessimistic, optimistic = ends["nonrelevant"], ends["relevant"]
    if pessimistic.flag == optimistic.flag:
        return None
    reasons = []
    if abs(evidence.judged_gap) > significance.unjudged_tolerance:
        less = "candidate" if evidence.judged_gap > 0 else "baseline"
        reasons.append(
            f"the {less}'s top {evidence.depth} is less judged (candidate "
            f"{evidence.candidate_judged:.0%}, baseline {evidence.baseline_judged:.0%}; tolerance "
            f"{significance.unjudged_tolerance * 100:.3g} points)"
        )
    bar = max(significance.margin, TIE_TOLERANCE)
    if (
        min(pessimistic.delta, optimistic.delta)
        < -bar
        < bar
        < max(pessimistic.delta, optimistic.delta)
    ):
        reasons.append("the delta changes sign between the two readings")
    if not reasons:
        return None
    return "; ".join(reasons) + (
        f": {pessimistic.flag or 'no flag'} if the unjudged documents are non-relevant, "
        f"{optimistic.flag or 'no flag'} if they are relevant"
    )
