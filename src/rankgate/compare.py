"""Comparing retrieval configurations on the same queries: is the candidate better, worse, or
indistinguishable from the baseline, per metric and per segment?

The steps, each reusing the evaluation pipeline rather than re-implementing it:

1. read every side (a trace source each, or one source split by a variant field), validating records
   and refusing a query ID that appears twice on one side;
2. join labels: a query's labels may come from any side or from a separate labels source, and every
   source that labels a query must agree, or it is an input error naming the query;
3. pair queries by ID; those on one side only are counted and listed;
4. evaluate baseline and candidate on the paired queries with the same labels and the same segment
   attributes (the baseline's), so that both score exactly the same queries;
5. per metric and segment: means, the paired delta with a BCa interval, a paired test's p-value,
   Cohen's d_z and win/tie/loss counts; p-values are adjusted across every cell of the run;
6. flag a cell as a regression (or improvement) when its adjusted p is below alpha and its delta is
   beyond the practical margin; the candidate's own gates (thresholds per segment) are checked too.

Every metric here is better when higher, so a negative delta is a loss.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from rankgate.errors import ConfigError, InputError, Location, UsageError
from rankgate.evaluate import Evaluation, InvalidRecord, Settings, evaluate, require_extra
from rankgate.gates import Gate, GateOutcome, GatePolicy
from rankgate.io import TraceSource, open_source, validate_record
from rankgate.io.validate import Trace
from rankgate.labels import LabelReading, QueryLabels, collect_labels, read_judgments
from rankgate.segments import MISSING_VALUE, SegmentKey, segment_value
from rankgate.spec import MetricSpec
from rankgate.stats import (
    CORRECTIONS,
    DEFAULT_PERMUTATIONS,
    adjust_pvalues,
    bca_interval,
    cohens_dz,
    derived_seed,
    exact_sum,
    paired_t_test,
    sign_flip_test,
)
from rankgate.store import is_store_url

__all__ = [
    "TESTS",
    "Cell",
    "Comparison",
    "Pairing",
    "Significance",
    "Variant",
    "compare",
]

TESTS = ("t", "randomization")
Flag = Literal["regression", "improvement"]
ProgressCallback = Callable[[str, int], None]
UNPAIRED_EXAMPLES_KEPT = 20
# Two per-query values closer than this are a tie: the same ranking scored twice gives the same
# value, but a sum taken in another order may differ in the last bits.
TIE_TOLERANCE = 1e-12


@dataclass(frozen=True, slots=True)
class Significance:
    """How differences are tested and flagged.

    ``test``: ``"t"`` (paired t-test) or ``"randomization"`` (sign-flip test, exact when 2^n <=
    ``permutations``). ``correction``: ``"holm"`` or ``"bh"`` across every metric x segment cell.
    A cell is flagged when its adjusted p < ``alpha`` and |delta| > ``margin`` (a practical margin
    in the metric's units).
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
class Variant:
    """One side of a comparison: a trace source and the name it is reported under."""

    name: str
    data: Any


@dataclass(frozen=True, slots=True)
class Pairing:
    """How one candidate's queries matched the baseline's."""

    paired: int
    baseline_only: int
    candidate_only: int
    baseline_only_ids: tuple[str, ...]
    candidate_only_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Cell:
    """One metric on one group of paired queries (``segment`` None: all of them).

    ``delta`` is candidate - baseline; ``relative_delta`` divides it by the baseline mean (None when
    that is 0). ``interval`` is the 95% BCa interval of the mean per-query delta. ``status`` is
    ``insufficient`` when the segment has fewer paired queries than its ``min_queries``: such a cell
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
    wins: int
    ties: int
    losses: int
    status: str = "ok"
    flag: Flag | None = None

    @property
    def group(self) -> str:
        return "overall" if self.segment is None else str(self.segment)

    def statistics(self) -> dict[str, Any]:
        """The cell's numbers, counts, status and flag by name (the interval aside)."""
        return {
            "queries": self.queries,
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


@dataclass(frozen=True, eq=False)
class CandidateResult:
    """One candidate against the baseline: pairing, both evaluations, the cells, and its gates."""

    name: str
    pairing: Pairing
    baseline: Evaluation
    candidate: Evaluation
    cells: tuple[Cell, ...]
    segments: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def per_query(self) -> list[dict[str, Any]]:
        """One dict per scored paired query: ``query_id``, its segment values, and per metric the
        baseline's value, the candidate's and the delta (``"ndcg@10"``, ``"ndcg@10 baseline"``...).
        """
        rows: list[dict[str, Any]] = []
        columns = [
            (str(spec), self.baseline.values[spec].tolist(), self.candidate.values[spec].tolist())
            for spec in self.baseline.metrics
        ]
        for index, query_id in enumerate(self.baseline.query_ids):
            row: dict[str, Any] = {"query_id": query_id}
            row.update((name, values[index]) for name, values in self.segments.items())
            for name, before, after in columns:
                row[f"{name} baseline"] = before[index]
                row[f"{name} candidate"] = after[index]
                row[f"{name} delta"] = after[index] - before[index]
            rows.append(row)
        return rows

    def largest_losses(self, cell: Cell, count: int = 5) -> list[tuple[str, float]]:
        """The queries of ``cell``'s group that lost most on its metric: (query_id, delta), worst
        first; only queries whose value dropped."""
        deltas = self.candidate.values[cell.metric] - self.baseline.values[cell.metric]
        if cell.segment is not None:
            members = np.asarray(self.segments[cell.segment.field], dtype=object)
            deltas = np.where(members == cell.segment.value, deltas, 0.0)
        order = np.argsort(deltas, kind="stable")[:count]
        return [
            (self.baseline.query_ids[i], float(deltas[i]))
            for i in order
            if deltas[i] < -TIE_TOLERANCE
        ]

    def __repr__(self) -> str:
        flags = sum(cell.flag == "regression" for cell in self.cells)
        return (
            f"<CandidateResult {self.name}: {self.pairing.paired:,} paired, {len(self.cells)} "
            f"cells, {flags} regression(s); {'PASS' if self.passed else 'FAIL'}>"
        )

    @property
    def gate_failures(self) -> tuple[GateOutcome, ...]:
        return tuple(outcome for outcome in self.candidate.gates if not outcome.passed)

    @property
    def passed(self) -> bool:
        return self.candidate.passed and not any(c.flag == "regression" for c in self.cells)


@dataclass(frozen=True, eq=False)
class Comparison:
    """The baseline against each candidate, with every cell's statistics and the verdict."""

    baseline: str
    results: tuple[CandidateResult, ...]
    significance: Significance
    settings: Settings
    policy: GatePolicy
    labels_source: str | None = None
    read: dict[str, int] = field(default_factory=dict)
    invalid: dict[str, int] = field(default_factory=dict)
    invalid_examples: tuple[InvalidRecord, ...] = ()

    @property
    def cells(self) -> tuple[Cell, ...]:
        return tuple(cell for result in self.results for cell in result.cells)

    @property
    def regressions(self) -> tuple[Cell, ...]:
        return tuple(cell for cell in self.cells if cell.flag == "regression")

    @property
    def improvements(self) -> tuple[Cell, ...]:
        return tuple(cell for cell in self.cells if cell.flag == "improvement")

    @property
    def passed(self) -> bool:
        """False when any cell is a regression or any candidate misses a gate."""
        return all(result.passed for result in self.results)

    def result(self, candidate: str) -> CandidateResult:
        for result in self.results:
            if result.name == candidate:
                return result
        raise KeyError(f"no candidate {candidate!r} (candidates: {self._names()})")

    def cell(
        self, metric: str | MetricSpec, segment: str | None = None, candidate: str | None = None
    ) -> Cell:
        """One cell by metric (any alias), segment (``"field=value"``, None for overall) and
        candidate (optional when there is one)."""
        from rankgate.spec import parse_metric

        spec = parse_metric(metric) if isinstance(metric, str) else metric
        results = self.results if candidate is None else (self.result(candidate),)
        if candidate is None and len(results) > 1:
            raise KeyError(f"name a candidate ({self._names()})")
        for cell in results[0].cells:
            if (
                cell.metric == spec
                and (None if cell.segment is None else str(cell.segment)) == segment
            ):
                return cell
        raise KeyError(f"no cell for {spec} in {segment or 'overall'}")

    def _names(self) -> str:
        return ", ".join(result.name for result in self.results)

    def to_arrow(self) -> Any:
        """One row per cell, as a ``pyarrow.Table``."""
        import pyarrow as pa

        rows = [
            {
                "candidate": cell.candidate,
                "segment_field": None if cell.segment is None else cell.segment.field,
                "segment_value": None if cell.segment is None else cell.segment.value,
                "metric": str(cell.metric),
                "ci_low": cell.interval[0],
                "ci_high": cell.interval[1],
                **cell.statistics(),
            }
            for cell in self.cells
        ]
        schema = pa.schema(
            [
                ("candidate", pa.string()),
                ("segment_field", pa.string()),
                ("segment_value", pa.string()),
                ("metric", pa.string()),
                ("queries", pa.int64()),
                ("baseline_mean", pa.float64()),
                ("candidate_mean", pa.float64()),
                ("delta", pa.float64()),
                ("relative_delta", pa.float64()),
                ("ci_low", pa.float64()),
                ("ci_high", pa.float64()),
                ("p_value", pa.float64()),
                ("p_adjusted", pa.float64()),
                ("exact", pa.bool_()),
                ("effect_size", pa.float64()),
                ("wins", pa.int64()),
                ("ties", pa.int64()),
                ("losses", pa.int64()),
                ("status", pa.string()),
                ("flag", pa.string()),
            ]
        )
        return pa.Table.from_pylist(rows, schema=schema)

    def to_pandas(self) -> Any:
        """One row per cell, as a ``pandas.DataFrame`` (needs ``rankgate[pandas]``)."""
        require_extra("pandas", "to_pandas()")
        return self.to_arrow().to_pandas()

    def to_polars(self) -> Any:
        """One row per cell, as a ``polars.DataFrame`` (needs ``rankgate[polars]``)."""
        require_extra("polars", "to_polars()")
        import polars as pl

        return pl.from_arrow(self.to_arrow())

    def to_json(self, *, per_query: bool = False) -> str:
        """The JSON report (``rankgate compare --format json``, ``compare.schema.json``) as text."""
        from rankgate.report.json_report import comparison_report, render_json

        return render_json(comparison_report(self, per_query=per_query))

    @property
    def warnings(self) -> tuple[str, ...]:
        """The warnings of every evaluation behind the comparison, each once (see
        ``Evaluation.warnings``)."""
        found = (
            warning
            for result in self.results
            for evaluation in (result.baseline, result.candidate)
            for warning in evaluation.warnings
        )
        return tuple(dict.fromkeys(found))

    def __repr__(self) -> str:
        # Short: the default repr would print both evaluations of every candidate in full.
        candidates = ", ".join(
            f"{result.name} ({result.pairing.paired:,} paired)" for result in self.results
        )
        verdict = "PASS" if self.passed else "FAIL"
        text = (
            f"<Comparison baseline {self.baseline} vs {candidates}; {len(self.cells)} cells, "
            f"{len(self.regressions)} regression(s), {len(self.improvements)} improvement(s); "
            f"{verdict}"
        )
        if self.warnings:
            text += f"; {len(self.warnings)} warning(s)"
        return text + ">"


def compare(
    baseline: Any,
    *candidates: Any,
    metrics: Iterable[str | MetricSpec] | None = None,
    gates: Sequence[Gate | str] = (),
    settings: Settings | None = None,
    policy: GatePolicy | None = None,
    significance: Significance | None = None,
    labels: Any = None,
    labels_format: str | None = None,
    variant_field: str | None = None,
    input_format: str | None = None,
    progress: Callable[[str, int, int, int | None], None] | None = None,
) -> Comparison:
    """Compare a baseline with one or more candidates on the queries they share.

    Args:
        baseline, candidates: trace sources as ``evaluate`` reads them (paths, lists of dicts,
            tables), or ``Variant(name, source)`` to choose the reported name. With
            ``variant_field``, ``baseline`` is the one source and ``candidates`` are values of that
            field: the first is the baseline's value (``compare(path, "control", "new",
            variant_field="config")``); without candidate values every other value is a candidate.
        metrics, gates, settings, policy: as for ``evaluate``; the gates are checked on each
            candidate, per segment.
        significance: test, correction, alpha and margin (defaults: paired t-test, Holm, 0.05, 0).
        labels: a source of labels (records with ``query_id`` and ``relevant_ids`` or
            ``relevance_scores``, or a TREC qrels file, recognised by name or layout).
        labels_format: the label file's format (``rankgate.labels.LABEL_FORMATS``), when
            detection is not enough.
        progress: called with (source name, records read, units done, units in total or None).

    Raises:
        InputError: a malformed record, a query ID twice on one side, or a query whose labels differ
            between sources.
        UsageError: too few sides, or a variant value that is not in the data.
    """
    settings = settings or Settings()
    if settings.resamples < 1:
        raise ConfigError("compare needs bootstrap resamples (>= 1) for the intervals of deltas")
    policy = policy or GatePolicy()
    significance = significance or Significance()
    reader = _Reader(settings, input_format, progress)
    if variant_field is not None:
        sides = reader.split(baseline, variant_field, [str(value) for value in candidates])
    else:
        if not candidates:
            raise UsageError("compare needs a baseline and at least one candidate")
        named = [_as_variant(item, index) for index, item in enumerate((baseline, *candidates))]
        _check_distinct_names(named)
        sides = [reader.read(variant) for variant in named]

    label_book = _LabelBook(settings)
    labels_name = None
    if labels is not None:
        labels_name = _source_name(labels)
        label_book.add_source(labels, reader, labels_format)
    for side in sides:
        label_book.add_side(side)

    base = sides[0]
    pending = [
        _evaluate_pair(base, side, label_book, metrics, gates, settings, policy)
        for side in sides[1:]
    ]
    raw_cells = [
        _cells(name, pair, policy, significance, settings.seed, settings.resamples)
        for name, pair in zip((side.name for side in sides[1:]), pending, strict=True)
    ]
    adjusted = adjust_pvalues(
        [cell.p_value for cells in raw_cells for cell in cells], significance.correction
    )
    results = []
    position = 0
    for side, pair, cells in zip(sides[1:], pending, raw_cells, strict=True):
        finished = []
        for cell in cells:
            finished.append(_flagged(cell, adjusted[position], significance))
            position += 1
        results.append(
            CandidateResult(
                side.name,
                pair.pairing,
                pair.baseline,
                pair.candidate,
                tuple(finished),
                pair.segments,
            )
        )
    return Comparison(
        baseline=base.name,
        results=tuple(results),
        significance=significance,
        settings=settings,
        policy=policy,
        labels_source=labels_name,
        read={side.name: side.read for side in sides} | reader.extra_read,
        invalid={side.name: side.invalid for side in sides} | reader.extra_invalid,
        invalid_examples=tuple(reader.invalid_examples),
    )


# --- reading --------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Side:
    name: str
    traces: dict[str, Trace] = field(default_factory=dict)
    read: int = 0
    invalid: int = 0


def _as_variant(item: Any, index: int) -> Variant:
    if isinstance(item, Variant):
        return item
    return Variant(_source_name(item, index), item)


def _source_name(item: Any, index: int = 0) -> str:
    if isinstance(item, str):
        return item
    name = getattr(item, "name", None)
    if isinstance(name, str):
        return name
    if hasattr(item, "__fspath__"):
        return str(item)
    return "baseline" if index == 0 else f"candidate {index}"


def _check_distinct_names(variants: list[Variant]) -> None:
    seen: set[str] = set()
    for variant in variants:
        if variant.name in seen:
            raise UsageError(
                f"{variant.name!r} is named twice: compare two different sources, "
                "or name them with Variant(name, source)"
            )
        seen.add(variant.name)


class _Reader:
    """Reads sources into sides, counting invalid records under ``on_invalid="skip"``."""

    def __init__(
        self,
        settings: Settings,
        input_format: str | None,
        progress: Callable[[str, int, int, int | None], None] | None,
    ) -> None:
        self.settings = settings
        self.input_format = input_format
        self.progress = progress
        self.invalid_examples: list[InvalidRecord] = []
        self.extra_read: dict[str, int] = {}
        self.extra_invalid: dict[str, int] = {}

    def records(self, data: Any, name: str, *, ranking: bool) -> Iterable[Trace | None]:
        """Validated traces of one source; None in place of each invalid record that is skipped."""
        source: TraceSource = open_source(data, self.input_format)
        count = 0
        for raw in source:
            count += 1
            try:
                yield validate_record(
                    raw, self.settings.fields, require_query_id=True, require_ranking=ranking
                )
            except InputError as problem:
                self._invalid(problem)
                yield None
            if self.progress is not None and count % 4096 == 0:
                self.progress(name, count, source.done(), source.total)
        if self.progress is not None:
            self.progress(name, count, source.done(), source.total)

    def _invalid(self, problem: InputError) -> None:
        if self.settings.on_invalid == "fail":
            raise problem
        if len(self.invalid_examples) < 10:
            self.invalid_examples.append(
                InvalidRecord(str(problem.location), problem.field, problem.problem)
            )

    def read(self, variant: Variant) -> _Side:
        side = _Side(variant.name)
        for trace in self.records(variant.data, variant.name, ranking=True):
            side.read += 1
            if trace is None or not self._add(side, trace):
                side.invalid += 1
        return side

    def split(self, data: Any, variant_field: str, wanted: list[str]) -> list[_Side]:
        """Sides from one source, by the value of ``variant_field``: the first wanted value is the
        baseline, the others the candidates (all other values, in order of appearance, if none)."""
        name = _source_name(data)
        by_value: dict[str, _Side] = {}
        unassigned_read = unassigned_invalid = 0
        for trace in self.records(data, name, ranking=True):
            if trace is None:
                unassigned_read += 1
                unassigned_invalid += 1
                continue
            value = segment_value(trace.attributes, variant_field)
            if value == MISSING_VALUE:
                unassigned_read += 1
                unassigned_invalid += 1
                self._invalid(
                    InputError(trace.location, variant_field, "missing (it names the variant)")
                )
                continue
            side = by_value.get(value)
            if side is None:
                side = by_value[value] = _Side(value)
            side.read += 1
            if not self._add(side, trace):
                side.invalid += 1
        found = ", ".join(by_value) or "none"
        if not wanted:
            raise UsageError(
                f"name the baseline's value of {variant_field!r} (values found: {found})"
            )
        for value in wanted:
            if value not in by_value:
                raise UsageError(
                    f"no record has {variant_field} = {value!r} (values found: {found})"
                )
        if len(set(wanted)) != len(wanted):
            raise UsageError(f"a value of {variant_field!r} is named twice: {', '.join(wanted)}")
        chosen = wanted if len(wanted) > 1 else [*wanted, *(v for v in by_value if v != wanted[0])]
        if len(chosen) < 2:
            raise UsageError(
                f"{name}: only {variant_field} = {wanted[0]!r} was found; nothing to compare with"
            )
        unused = [value for value in by_value if value not in chosen]
        if unassigned_read:
            self.extra_read[f"{name} (no {variant_field})"] = unassigned_read
            self.extra_invalid[f"{name} (no {variant_field})"] = unassigned_invalid
        for value in unused:
            self.extra_read[f"{variant_field}={value} (not compared)"] = by_value[value].read
        return [by_value[value] for value in chosen]

    def _add(self, side: _Side, trace: Trace) -> bool:
        first = side.traces.get(trace.query_id)
        if first is None:
            side.traces[trace.query_id] = trace
            return True
        self._invalid(
            InputError(
                trace.location,
                self.settings.fields.query_id,
                f"query {trace.query_id!r} appears twice in {side.name} (first at {first.location})",
            )
        )
        return False


# --- labels ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Labels:
    grades: dict[str, float]
    location: Location | str
    labeled_at: Any


class _LabelBook:
    """Each query's labels, from whichever sources carry them; they must agree."""

    def __init__(self, settings: Settings) -> None:
        self.fields = settings.fields
        self.stamp_field = settings.label_filter.labeled_at_field
        self.by_query: dict[str, _Labels] = {}

    def add_source(self, data: Any, reader: _Reader, labels_format: str | None = None) -> None:
        """Labels from a label file (one judgment or one query per record), qrels or a store."""
        name = _source_name(data)
        reading = LabelReading()
        if is_store_url(data):
            labels = collect_labels(data)
        else:
            labels = {}
            for judgment in read_judgments(
                data,
                fields=self.fields,
                # The traces' --input-format says nothing of the label file's: it has its own
                # (detected by default: qrels by layout, the rest by name or first bytes).
                input_format=labels_format,
                on_invalid=reader.settings.on_invalid,
                reading=reading,
            ):
                labels.setdefault(judgment.query_id, QueryLabels()).add(judgment)
            reader.extra_read[f"{name} (labels)"] = reading.records
            reader.extra_invalid[f"{name} (labels)"] = reading.skipped.get("invalid", 0)
        for query_id, found in labels.items():
            self._add(
                query_id,
                _Labels(found.grades, name, found.labeled_at()),
                self.fields.relevance_scores,
            )

    def add_side(self, side: _Side) -> None:
        for trace in side.traces.values():
            if trace.grades is not None:
                self.add_trace(trace)

    def add_trace(self, trace: Trace) -> None:
        labels = _Labels(trace.grades or {}, trace.location, trace.attributes.get(self.stamp_field))
        self._add(trace.query_id, labels, self.fields.relevance_scores)

    def _add(self, query_id: str, labels: _Labels, field_name: str) -> None:
        known = self.by_query.get(query_id)
        if known is None:
            self.by_query[query_id] = labels
        elif known.grades != labels.grades:
            raise InputError(
                labels.location,
                field_name,
                f"query {query_id!r} is labeled differently at {known.location} "
                f"({_describe(known.grades)} vs {_describe(labels.grades)})",
            )

    def labeled(self, trace: Trace, attributes: dict[str, Any]) -> Trace:
        """``trace`` with the query's joined labels and the given segment attributes."""
        labels = self.by_query.get(trace.query_id)
        if labels is None:
            return Trace(trace.location, trace.query_id, trace.retrieved_ids, None, attributes)
        if labels.labeled_at is not None:
            attributes = {**attributes, self.stamp_field: labels.labeled_at}
        return Trace(trace.location, trace.query_id, trace.retrieved_ids, labels.grades, attributes)


def _describe(grades: dict[str, float]) -> str:
    shown = ", ".join(f"{doc}: {grade:g}" for doc, grade in list(grades.items())[:4])
    more = ", ..." if len(grades) > 4 else ""
    return "{" + shown + more + "}"


# --- pairing and statistics -----------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class _Pair:
    pairing: Pairing
    baseline: Evaluation
    candidate: Evaluation
    segments: dict[str, tuple[str, ...]]


def _evaluate_pair(
    base: _Side,
    side: _Side,
    label_book: _LabelBook,
    metrics: Iterable[str | MetricSpec] | None,
    gates: Sequence[Gate | str],
    settings: Settings,
    policy: GatePolicy,
) -> _Pair:
    paired = [query_id for query_id in base.traces if query_id in side.traces]
    if not paired:
        raise UsageError(
            f"no query is in both {base.name} and {side.name} (queries are paired by query_id; "
            f"{len(base.traces)} and {len(side.traces)} valid queries read)"
        )
    baseline_only = [query_id for query_id in base.traces if query_id not in side.traces]
    candidate_only = [query_id for query_id in side.traces if query_id not in base.traces]
    pairing = Pairing(
        paired=len(paired),
        baseline_only=len(baseline_only),
        candidate_only=len(candidate_only),
        baseline_only_ids=tuple(baseline_only[:UNPAIRED_EXAMPLES_KEPT]),
        candidate_only_ids=tuple(candidate_only[:UNPAIRED_EXAMPLES_KEPT]),
    )
    # Both sides are segmented by the baseline's attributes, so a query is in the same segment on
    # both; its labels (and their timestamps) are the joined ones.
    attributes = {query_id: base.traces[query_id].attributes for query_id in paired}
    base_traces = [
        label_book.labeled(base.traces[query_id], attributes[query_id]) for query_id in paired
    ]
    side_traces = [
        label_book.labeled(side.traces[query_id], attributes[query_id]) for query_id in paired
    ]
    metric_list = None if metrics is None else list(metrics)
    # The sides' own intervals are not reported here; they are needed only by gates that decide
    # on an interval bound. Skipping them halves the time on large inputs.
    on_bounds = policy.gate_on != "mean" or any(
        rule.gate_on not in (None, "mean") for rule in policy.rules
    )
    if not on_bounds:
        settings = replace(settings, resamples=0)
    # Records are already valid, so nothing can be skipped as invalid here but bad label times.
    baseline_eval = evaluate(base_traces, metric_list, gates, settings=settings, policy=policy)
    candidate_eval = evaluate(side_traces, metric_list, gates, settings=settings, policy=policy)
    if baseline_eval.query_ids != candidate_eval.query_ids:  # same labels, same attributes
        raise AssertionError("baseline and candidate scored different queries")
    # Each scored query's segment per field, aligned with the evaluations' query_ids.
    segments = {
        name: tuple(segment_value(attributes[q], name) for q in baseline_eval.query_ids)
        for name in dict.fromkeys(g.key.field for g in baseline_eval.segments if g.key)
    }
    return _Pair(pairing, baseline_eval, candidate_eval, segments)


def _cells(
    name: str,
    pair: _Pair,
    policy: GatePolicy,
    significance: Significance,
    seed: int,
    resamples: int,
) -> list[Cell]:
    base, cand = pair.baseline, pair.candidate
    everything = np.ones(len(base.query_ids), dtype=np.bool_)
    groups: list[tuple[SegmentKey | None, npt.NDArray[np.bool_]]] = [(None, everything)]
    columns = {name: np.asarray(values, dtype=object) for name, values in pair.segments.items()}
    for group in base.segments:
        if group.key is not None:
            groups.append((group.key, columns[group.key.field] == group.key.value))
    cells = []
    for key, mask in groups:
        queries = int(np.count_nonzero(mask))
        if queries == 0:
            continue  # a segment whose records were all skipped: its counts are reported, no cell
        rule = policy.rule(key) if key is not None else None
        min_queries = rule.min_queries if rule and rule.min_queries else policy.min_queries
        status = "insufficient" if key is not None and queries < min_queries else "ok"
        for spec in base.metrics:
            cells.append(
                _cell(
                    name,
                    key,
                    spec,
                    base.values[spec][mask],
                    cand.values[spec][mask],
                    status,
                    significance,
                    seed,
                    resamples,
                )
            )
    return cells


def _cell(
    name: str,
    key: SegmentKey | None,
    spec: MetricSpec,
    before: npt.NDArray[np.float64],
    after: npt.NDArray[np.float64],
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
    )


def _flagged(cell: Cell, p_adjusted: float, significance: Significance) -> Cell:
    flag: Flag | None = None
    if cell.status == "ok" and p_adjusted < significance.alpha:
        if cell.delta < -significance.margin:
            flag = "regression"
        elif cell.delta > significance.margin:
            flag = "improvement"
    return replace(cell, p_adjusted=p_adjusted, flag=flag)
