"""Evaluating a stream of traces: read -> validate -> batch -> kernels -> means -> gates.

``evaluate`` is the library's main entry point. It streams records through the validator, sets aside
the ones it cannot score (each under a named reason), builds columnar batches of the rest, runs every
requested metric's kernel over each batch, and keeps one float per query per metric. Means are exact
sums (``math.fsum``) over those values, so they do not depend on batch boundaries.

Records read always equal records scored plus records skipped, by reason:

* ``unlabeled``: neither ``relevant_ids`` nor ``relevance_scores`` present;
* ``no_relevant``: labeled, but no label reaches the relevance threshold, so recall and NDCG are
  undefined (only under ``empty_relevant="skip"``, the default; ``"zero"`` scores such queries 0);
* ``invalid``: malformed (only under ``on_invalid="skip"``; the default stops at the first one).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from rankgate import fast
from rankgate.attributes import AttributeRows, QueryIds, scalar_fields
from rankgate.batch import BatchBuilder
from rankgate.errors import ConfigError, InputError, UsageError
from rankgate.gates import CoverageOutcome, Gate, GateOutcome, GatePolicy, decide, parse_gate
from rankgate.io import FieldMap, Trace, TraceSource, open_source, validate_record
from rankgate.io.columnar import SEGMENT_PREFIX, Chunk, chunks
from rankgate.labels import QueryLabels, collect_labels
from rankgate.segments import (
    MISSING_VALUE,
    Group,
    GroupCounts,
    SegmentKey,
    check_segments,
    segment_fields_of,
    segment_value,
    split_by_segment,
    summarise,
)
from rankgate.spec import MetricSpec, make_metric, parse_metric, parse_metric_list
from rankgate.stale import LabelFilter
from rankgate.stats import DEFAULT_RESAMPLES
from rankgate.worst import QueryExample, WorstQueries

__all__ = [
    "DEFAULT_METRICS",
    "SKIP_REASONS",
    "Evaluation",
    "InvalidRecord",
    "Settings",
    "Summary",
    "check_bounds_computed",
    "evaluate",
    "require_extra",
    "summary_line",
]

DEFAULT_METRICS = ("ndcg@10", "mrr", "precision@5", "recall@20", "map")
SKIP_REASONS = ("unlabeled", "no_relevant", "invalid")
EmptyRelevant = Literal["skip", "zero"]
OnInvalid = Literal["fail", "skip"]
ProgressCallback = Callable[[int, int, int | None], None]

BATCH_QUERIES = 65_536
# Smaller batches while rankings are held for the worst-queries list, to bound what waits in memory.
BATCH_QUERIES_HOLDING = 8_192
# Ranks shown per worst query: the deepest cutoff requested, within these bounds.
WORST_DEPTH_DEFAULT = 10
WORST_DEPTH_MAX = 50
DEFAULT_JUDGED_DEPTH = 10
INVALID_EXAMPLES_KEPT = 10
PROGRESS_EVERY = 4096


@dataclass(frozen=True, slots=True)
class Settings:
    """The conventions an evaluation ran under; reported with the results."""

    relevance_threshold: float = 1.0
    empty_relevant: EmptyRelevant = "skip"
    on_invalid: OnInvalid = "fail"
    fields: FieldMap = field(default_factory=FieldMap)
    segment_by: tuple[str, ...] = ()
    label_filter: LabelFilter = field(default_factory=LabelFilter)
    seed: int = 0
    resamples: int = DEFAULT_RESAMPLES

    def __post_init__(self) -> None:
        try:
            check_relevance_threshold(self.relevance_threshold)
        except ValueError as problem:
            raise ConfigError(str(problem)) from None
        if self.empty_relevant not in ("skip", "zero"):
            raise ConfigError(
                f"empty_relevant must be 'skip' or 'zero', got {self.empty_relevant!r}"
            )
        if self.on_invalid not in ("fail", "skip"):
            raise ConfigError(f"on_invalid must be 'fail' or 'skip', got {self.on_invalid!r}")
        if (
            isinstance(self.resamples, bool)
            or not isinstance(self.resamples, int)
            or self.resamples < 0
        ):
            raise ConfigError(f"resamples must be a whole number >= 0, got {self.resamples!r}")


def check_relevance_threshold(value: object) -> float:
    """The relevance threshold as a float; ``ValueError`` unless it is a finite number > 0.

    At 0 or below every unlabeled document (grade 0) would count as relevant.
    """
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value <= 0
    ):
        raise ValueError(f"relevance threshold must be a number > 0, got {value!r}")
    return float(value)


@dataclass(frozen=True, slots=True)
class InvalidRecord:
    """A record skipped as invalid: where it was and what was wrong."""

    location: str
    field: str | None
    problem: str

    def __str__(self) -> str:
        what = f"field '{self.field}': {self.problem}" if self.field else self.problem
        return f"{self.location}: {what}"


@dataclass(frozen=True, slots=True)
class Summary:
    """What happened to every record read: scored, or skipped under a named reason."""

    read: int
    scored: int
    skipped: dict[str, int]
    labeled: int
    duplicates_dropped: int
    invalid_examples: tuple[InvalidRecord, ...] = ()
    labels_removed_stale: int = 0
    labels_removed_expired: int = 0
    lost_all_relevant: int = 0

    @property
    def coverage(self) -> float | None:
        """Share of records read that carry labels; None when nothing was read."""
        return self.labeled / self.read if self.read else None


@dataclass(frozen=True, eq=False)
class Evaluation:
    """Per-query metric values, their means and intervals overall and per segment, what was skipped
    and why, and the verdicts of the gates."""

    metrics: tuple[MetricSpec, ...]
    query_ids: Sequence[str]
    values: dict[MetricSpec, npt.NDArray[np.float64]]
    attributes: Sequence[dict[str, Any]]
    summary: Summary
    gates: tuple[GateOutcome, ...]
    settings: Settings
    overall: Group
    segments: tuple[Group, ...] = ()
    coverage_checks: tuple[CoverageOutcome, ...] = ()
    policy: GatePolicy = field(default_factory=GatePolicy)
    judged: MetricSpec | None = None
    examples: tuple[QueryExample, ...] = ()
    #: Things the reader of the verdict should know that do not change it: a segment field most
    #: queries lack, a ``[segments]`` rule that matched nothing. Every report shows them.
    warnings: tuple[str, ...] = ()

    @property
    def judged_mean(self) -> float:
        """How much of what was scored is judged: the mean of ``judged`` at the deepest cutoff
        requested (10 when none), computed with every evaluation beside the requested metrics."""
        return math.nan if self.judged is None else self.overall.means[self.judged]

    @property
    def means(self) -> dict[MetricSpec, float]:
        """Mean of each requested metric over the scored queries (NaN when none was scored)."""
        return {spec: self.overall.means[spec] for spec in self.metrics}

    @property
    def intervals(self) -> dict[MetricSpec, tuple[float, float]]:
        """95% bootstrap interval of each mean (NaN bounds when none was computed)."""
        return {spec: self.overall.intervals[spec] for spec in self.metrics}

    @property
    def passed(self) -> bool:
        """True when no gate and no coverage minimum failed (trivially when there are none).

        A segment with too few queries fails only under ``strict_segments``."""
        return all(o.passed for o in self.gates) and all(c.passed for c in self.coverage_checks)

    def segment(self, field_name: str, value: str) -> Group:
        """The group of one segment; ``KeyError`` when no record had that value."""
        key = SegmentKey(field_name, value)
        for group in self.segments:
            if group.key == key:
                return group
        raise KeyError(f"no segment {key}")

    def mean(self, metric: str | MetricSpec) -> float:
        """The mean of one metric, named by string (any alias, any case) or spec."""
        return self.means[self._computed(metric)]

    def interval(self, metric: str | MetricSpec) -> tuple[float, float]:
        """The 95% interval of one metric's mean, named as for ``mean``."""
        return self.intervals[self._computed(metric)]

    def values_for(self, metric: str | MetricSpec) -> npt.NDArray[np.float64]:
        """Per-query values of one metric, aligned with ``query_ids``, named as for ``mean``."""
        return self.values[self._computed(metric)]

    def _computed(self, metric: str | MetricSpec) -> MetricSpec:
        """The requested spec that ``metric`` parses to; ``KeyError`` naming those computed."""
        spec = parse_metric(metric) if isinstance(metric, str) else metric
        if spec not in self.metrics:
            raise KeyError(
                f"{spec} was not computed (computed: {', '.join(map(str, self.metrics))})"
            )
        return spec

    def per_query(self) -> list[dict[str, Any]]:
        """One dict per scored query: ``query_id`` and each metric's value under its canonical name."""
        columns = [(str(spec), self.values[spec].tolist()) for spec in self.metrics]
        return [
            {"query_id": query_id, **{name: values[i] for name, values in columns}}
            for i, query_id in enumerate(self.query_ids)
        ]

    def to_arrow(self) -> Any:
        """Per-query table as a ``pyarrow.Table``: query_id, one column per metric, then the
        records' other scalar fields."""
        import pyarrow as pa

        ids = self.query_ids
        columns: dict[str, Any] = {
            "query_id": (
                ids.to_arrow() if isinstance(ids, QueryIds) else pa.array(ids, pa.large_string())
            ).cast(pa.string())
        }
        for spec in self.metrics:
            columns[str(spec)] = pa.array(self.values[spec], type=pa.float64())
        for name in _attribute_names(self.attributes):
            if name in columns:
                continue
            try:
                columns[name] = pa.array([row.get(name) for row in self.attributes])
            except (pa.ArrowInvalid, pa.ArrowTypeError):
                # Mixed types in one field (a number here, text there): keep it as text.
                columns[name] = pa.array(
                    [None if row.get(name) is None else str(row[name]) for row in self.attributes]
                )
        return pa.table(columns)

    def to_pandas(self) -> Any:
        """Per-query table as a ``pandas.DataFrame`` (needs ``rankgate[pandas]``)."""
        require_extra("pandas", "to_pandas()")
        return self.to_arrow().to_pandas()

    def to_polars(self) -> Any:
        """Per-query table as a ``polars.DataFrame`` (needs ``rankgate[polars]``)."""
        require_extra("polars", "to_polars()")
        import polars as pl

        return pl.from_arrow(self.to_arrow())

    def to_json(self, *, sources: Sequence[str] = (), per_query: bool = False) -> str:
        """The JSON report (``rankgate eval --format json``, ``eval.schema.json``) as text;
        ``sources`` names the inputs, ``per_query`` adds every scored query's values."""
        from rankgate.report.json_report import eval_report, render_json

        return render_json(eval_report(self, list(sources), per_query=per_query))

    def __repr__(self) -> str:
        # A short summary: the default dataclass repr prints every per-query value and attribute.
        return f"<Evaluation {summary_line(self)}>"


#: Metrics named in a one-line summary before the rest are counted.
SUMMARY_METRICS = 8


def summary_line(evaluation: Evaluation) -> str:
    """Counts, means and verdict in one line, e.g. ``12 read, 10 scored; ndcg@10=0.734; PASS``."""
    summary = evaluation.summary
    means = [
        f"{spec}={'nan' if math.isnan(mean) else f'{mean:.4g}'}"
        for spec, mean in list(evaluation.means.items())[:SUMMARY_METRICS]
    ]
    if len(evaluation.metrics) > SUMMARY_METRICS:
        means.append(f"... {len(evaluation.metrics) - SUMMARY_METRICS} more")
    checks = len(evaluation.gates) + len(evaluation.coverage_checks)
    passed = sum(o.passed for o in evaluation.gates) + sum(
        c.passed for c in evaluation.coverage_checks
    )
    verdict = (
        f"{'PASS' if evaluation.passed else 'FAIL'} ({passed} of {checks} checks passed)"
        if checks
        else "no gates"
    )
    parts = [
        f"{summary.read:,} read, {summary.scored:,} scored",
        ", ".join(means),
        verdict,
    ]
    if evaluation.segments:
        parts.insert(2, f"{len(evaluation.segments)} segments")
    if evaluation.warnings:
        parts.append(f"{len(evaluation.warnings)} warning(s)")
    return "; ".join(parts)


def require_extra(package: str, what: str) -> None:
    """A one-line ``UsageError`` naming the extra to install when an optional package is missing."""
    import importlib

    try:
        importlib.import_module(package)
    except ImportError:
        raise UsageError(f"{what} needs {package}: pip install 'rankgate[{package}]'") from None


def evaluate(
    traces: Any,
    metrics: Iterable[str | MetricSpec] | None = None,
    gates: Sequence[Gate | str] = (),
    *,
    settings: Settings | None = None,
    policy: GatePolicy | None = None,
    input_format: str | None = None,
    progress: ProgressCallback | None = None,
    worst: int = 0,
    labels: Any = None,
    labels_format: str | None = None,
    partial: bool = False,
) -> Evaluation:
    """Score recorded traces and check gates.

    Args:
        traces: a path (JSON Lines, JSON array, Parquet, CSV; ``-`` for stdin), a list of dicts,
            a pandas/polars/Arrow table, or an open ``TraceSource``.
        metrics: metric strings (``"ndcg@5,10"``, ``"p@5"``) or specs; the default set when None.
            Metrics that only gates name are added after these.
        gates: thresholds on the means: ``Gate`` objects or strings such as ``"ndcg@10>=0.7"``.
        settings: relevance threshold, awkward-case policies, field mapping, segment fields, label
            filtering and the bootstrap's seed.
        policy: how gates decide (mean or interval bound, min_queries, coverage minimums,
            per-segment overrides); a field a segment rule names is segmented too.
        input_format: force a reader (``json``, ``parquet``, ``csv``, ``tsv``).
        progress: called now and then with (records read, units done, units in total or None);
            the unit is the source's own (bytes of a file, rows of a table).
        worst: keep this many lowest-scoring queries per requested metric with their rankings
            (``Evaluation.examples``), for reports; 0 keeps none.
        labels: labels kept apart from the traces, joined by query ID to every trace that carries
            none of its own: a label file (see ``rankgate.labels``), a store URL (its labels
            table), or a dict of query ID to ``QueryLabels``.
        labels_format: the label file's format, one of ``rankgate.labels.LABEL_FORMATS``; by
            default TREC qrels are recognised by name or layout, the rest by name or first bytes.
        partial: this call scores one part of a larger input (an engine's partition, or its dry
            run): the checks that need the whole input are left to the caller, who runs
            ``rankgate.segments.check_segments`` over the combined counts and
            ``check_bounds_computed`` before scoring.

    Raises:
        InputError: a record is malformed and ``settings.on_invalid`` is ``"fail"``.
        SpecError: a metric string is unknown or malformed.
    """
    settings = settings or Settings()
    label_filter = settings.label_filter
    if label_filter.max_age is not None and label_filter.as_of is None:
        # One "now" for the whole run, so every record's labels are aged against the same instant.
        settings = replace(settings, label_filter=replace(label_filter, as_of=datetime.now(UTC)))
    checked_gates = tuple(parse_gate(g) if isinstance(g, str) else g for g in gates)
    policy = policy or GatePolicy()
    if not partial and not (isinstance(traces, (list, tuple)) and not traces):
        # An empty list scores nothing, so no bound is consulted: an engine's dry run (no rows,
        # resamples=0) settles metrics and gates this way under any policy.
        check_bounds_computed(policy, settings)
    requested = _metric_specs(metrics)
    rule_gates = (gate for rule in policy.rules for gate in rule.gates)
    for gate in (*checked_gates, *rule_gates):
        if gate.metric not in requested:
            requested.append(gate.metric)
    if not requested:
        raise UsageError("no metric to compute: name at least one (e.g. ndcg@10)")
    segment_fields = segment_fields_of(settings, policy)
    source: TraceSource = open_source(traces, input_format)
    cutoffs = [spec.k for spec in requested if spec.k is not None]
    judged = make_metric("judged", max(cutoffs, default=DEFAULT_JUDGED_DEPTH))
    if isinstance(worst, bool) or not isinstance(worst, int) or worst < 0:
        raise UsageError(f"worst must be a whole number >= 0, not {worst!r}")
    depth = min(max(cutoffs, default=WORST_DEPTH_DEFAULT), WORST_DEPTH_MAX)
    tracker = WorstQueries(requested, worst, depth, settings.relevance_threshold)
    accumulator = _Accumulator(requested, settings, segment_fields, judged, tracker)
    accumulator.partial = partial
    if labels is not None:
        accumulator.labels = (
            labels
            if isinstance(labels, dict)
            else collect_labels(labels, fields=settings.fields, input_format=labels_format)
        )
    columnar = None
    if fast.available() and labels is None and not settings.label_filter.active:
        columnar = chunks(source, settings.fields, segment_fields)
    if columnar is not None:
        accumulator.record_blocks = []
        for chunk in columnar:
            accumulator.take_chunk(chunk)
            if chunk.first_ordinal == 1 and source.total:
                # Units are rows (tables) or bytes (JSON Lines): scale the first chunk up. Past
                # the total, the bytes were decompressed ones: the compressed count will do.
                through = chunk.through if 0 < chunk.through <= source.total else chunk.done
                if through:
                    rows = chunk.table.num_rows
                    accumulator.expect(int(rows * (source.total - through) / through * 1.05))
            if progress is not None:
                progress(accumulator.read, chunk.done, source.total)
    else:
        for raw in source:
            accumulator.take(raw)
            if progress is not None and accumulator.read % PROGRESS_EVERY == 0:
                progress(accumulator.read, source.done(), source.total)
    accumulator.flush()
    if progress is not None:
        progress(accumulator.read, source.done(), source.total)
    return accumulator.result(checked_gates, policy)


def check_bounds_computed(policy: GatePolicy, settings: Settings) -> None:
    """A gate on an interval bound needs the interval: without resamples there is none, and
    checking the mean instead while reporting "(lower)" would misstate what was checked."""
    if settings.resamples > 0:
        return
    wanted = [("", policy.gate_on)] + [
        (f" (in [segments] {r.key})", r.gate_on) for r in policy.rules
    ]
    for where, gate_on in wanted:
        if gate_on not in (None, "mean"):
            raise UsageError(
                f"--gate-on {gate_on}{where} needs resamples > 0 (the bound is a bootstrap "
                "interval's); set --resamples, or gate on the mean"
            )


def _metric_specs(metrics: Iterable[str | MetricSpec] | None) -> list[MetricSpec]:
    if metrics is None:
        return parse_metric_list(DEFAULT_METRICS)
    if isinstance(metrics, (str, MetricSpec)):
        metrics = [metrics]
    specs: list[MetricSpec] = []
    texts = [m for m in metrics if isinstance(m, str)]
    for item in metrics:
        if isinstance(item, MetricSpec) and item not in specs:
            specs.append(item)
    for spec in parse_metric_list(texts):
        if spec not in specs:
            specs.append(spec)
    return specs


def _codes(column: Any) -> tuple[npt.NDArray[np.int64], list[str]]:
    """A segment column as integer codes and the texts they stand for (null: missing)."""
    import pyarrow.compute as pc

    encoded = pc.fill_null(column, MISSING_VALUE).dictionary_encode()
    return (
        fast.numpy_of(encoded.indices).astype(np.int64, copy=False),
        [str(value) for value in encoded.dictionary.to_pylist()],
    )


def _texts(column: Any) -> list[str]:
    """A segment column as one text per row, sharing one string object per distinct value."""
    codes, categories = _codes(column)
    return [categories[code] for code in codes.tolist()]


def _attribute_names(rows: Iterable[dict[str, Any]]) -> list[str]:
    return list(dict.fromkeys(name for row in rows for name in row))


class _Column:
    """Per-query numbers (one metric's values, or row numbers), appended block by block into one
    growing array.

    Blocks joined at the end would need the blocks and the joined copy at once (twice the values'
    memory, about 1 GB at ten million queries and six metrics), and freed small blocks rarely go
    back to the system. ``reserve`` sizes the array once the input's length can be estimated.
    """

    def __init__(self, dtype: Any = np.float64) -> None:
        self._data: npt.NDArray[Any] = np.empty(1024, dtype=dtype)
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def reserve(self, capacity: int) -> None:
        if capacity > len(self._data):
            grown = np.empty(capacity, dtype=self._data.dtype)
            grown[: self._size] = self._data[: self._size]
            self._data = grown

    def extend(self, values: npt.NDArray[Any]) -> None:
        needed = self._size + len(values)
        if needed > len(self._data):
            self.reserve(max(needed, len(self._data) * 5 // 4))
        self._data[self._size : needed] = values
        self._size = needed

    def values(self) -> npt.NDArray[Any]:
        # A view: a reserve that was generous costs memory, never a copy of the values.
        return self._data[: self._size]


class _Accumulator:
    """Running state of one evaluation: counts, the open batch, and finished per-query values."""

    def __init__(
        self,
        metrics: list[MetricSpec],
        settings: Settings,
        segment_fields: tuple[str, ...],
        judged: MetricSpec,
        worst: WorstQueries,
    ) -> None:
        self.metrics = metrics
        self.judged = judged
        # Computed beside the requested metrics, for the coverage report.
        self.computed = metrics if judged in metrics else [*metrics, judged]
        self.settings = settings
        self.segment_fields = segment_fields
        self.read = 0
        self.duplicates = 0
        self.overall = GroupCounts()
        self.segment_counts: dict[SegmentKey, GroupCounts] = {}
        self.segment_columns: dict[str, list[str]] = {name: [] for name in segment_fields}
        self.invalid_examples: list[InvalidRecord] = []
        self.query_ids = QueryIds()
        self.attributes = AttributeRows()
        # Per query waiting in the batch builder: scored 0 for want of a relevant label.
        self.forced_zero: list[bool] = []
        self.values = {m: _Column() for m in self.computed}
        self.row_numbers = _Column(np.int32)
        self.builder = BatchBuilder()
        self.scratch = fast.Scratch()  # the join's output arrays, reused chunk after chunk
        self.worst = worst
        # On the columnar path rankings are not held: the worst queries are chosen from the final
        # values and their records read back. Each block: first query index, loader, rows.
        self.record_blocks: list[tuple[int, Any, Any]] | None = None
        self.labels: dict[str, QueryLabels] | None = None
        self.batch_limit = BATCH_QUERIES_HOLDING if worst.active else BATCH_QUERIES
        # Scoring one part of a larger input: whole-input checks are the caller's (see evaluate).
        self.partial = False

    def take(self, raw: Any) -> None:
        self.read += 1
        threshold = self.settings.relevance_threshold
        try:
            trace = validate_record(raw, self.settings.fields)
            if trace.grades is None and self.labels is not None:
                trace = self._joined(trace)
            grades, stale, expired = trace.grades, 0, 0
            if grades is not None and self.settings.label_filter.active:
                grades, stale, expired = self.settings.label_filter.apply(
                    grades, trace.attributes, trace.location
                )
        except InputError as problem:
            if self.settings.on_invalid == "fail":
                raise
            # An invalid record has no trustworthy fields, so it belongs to no segment.
            self.overall.read += 1
            self.overall.skip("invalid")
            if len(self.invalid_examples) < INVALID_EXAMPLES_KEPT:
                self.invalid_examples.append(
                    InvalidRecord(str(problem.location), problem.field, problem.problem)
                )
            return
        segments = [
            SegmentKey(name, segment_value(trace.attributes, name)) for name in self.segment_fields
        ]
        groups = [self.overall, *(self._counts(key) for key in segments)]
        for group in groups:
            group.read += 1
        if grades is None or trace.grades is None:
            for group in groups:
                group.skip("unlabeled")
            return
        has_relevant = any(grade >= threshold for grade in grades.values())
        lost = not has_relevant and any(grade >= threshold for grade in trace.grades.values())
        for group in groups:
            group.labeled += 1
            group.labels_removed_stale += stale
            group.labels_removed_expired += expired
            group.lost_all_relevant += lost
        if not has_relevant and self.settings.empty_relevant == "skip":
            for group in groups:
                group.skip("no_relevant")
            return
        self.duplicates += self.builder.add(trace.retrieved_ids, grades)
        self.query_ids.append(trace.query_id)
        for key in segments:
            self.segment_columns[key.field].append(key.value)
        # Scalar fields are kept for per-query tables; nested values are not.
        self.attributes.append(scalar_fields(trace.attributes))
        self.forced_zero.append(not has_relevant)
        if self.record_blocks is None:
            self.worst.hold(trace.query_id, trace.retrieved_ids, grades, trace.attributes)
        else:
            self.record_blocks.append((len(self.query_ids) - 1, None, [raw]))
        if len(self.builder) >= self.batch_limit:
            self.flush()

    def expect(self, queries: int) -> None:
        """Size the value arrays for about this many more scored queries (an estimate)."""
        for column in [*self.values.values(), self.row_numbers]:
            column.reserve(len(self.query_ids) + queries)

    def take_chunk(self, chunk: Chunk) -> None:
        """Take a block of records read as columns: the compiled join and kernels score the rows it
        can, the validator reads the rows marked slow, and both land in input order."""
        table, slow = chunk.table, chunk.slow.copy()
        names = table.schema.names
        retrieved = fast.IdColumns.from_arrow(table.column("retrieved_ids"))
        relevant = scores = score_values = None
        if "relevant_ids" in names:
            relevant = fast.IdColumns.from_arrow(table.column("relevant_ids"))
        if "relevance_scores" in names:
            scores_column = table.column("relevance_scores")
            scores = fast.IdColumns.from_arrow(scores_column)
            # A null grade marks its row slow; here it only has to be a number.
            items = scores_column.items.fill_null(math.nan)
            score_values = fast.numpy_of(items).astype(np.float64, copy=False)
        while True:
            rows = np.flatnonzero(~slow).astype(np.int64)
            joined = fast.join(
                rows,
                retrieved,
                relevant,
                scores,
                score_values,
                threshold=self.settings.relevance_threshold,
                skip_no_relevant=self.settings.empty_relevant == "skip",
                unique_map_keys=chunk.unique_map_keys,
                scratch=self.scratch,
            )
            for_validator = joined.status == fast.ROW_FOR_VALIDATOR
            if not for_validator.any():
                break
            slow[rows[for_validator]] = True  # the validator words the error

        status = joined.status
        self._count_columnar(table, rows, status)
        scored_rows = rows[status == fast.ROW_SCORED]
        values = fast.score(joined.batch, self.computed, {"rel": self.settings.relevance_threshold})
        zero = joined.forced_zero[status == fast.ROW_SCORED]
        if zero.any():
            for column in values.values():
                column[zero] = 0.0
        self.duplicates += int(joined.duplicates[status == fast.ROW_SCORED].sum())
        query_ids = table.column("query_id").take(scored_rows)
        segment_texts = {
            name: _texts(table.column(SEGMENT_PREFIX + name).take(scored_rows))
            for name in self.segment_fields
        }

        # Interleave: scored columnar rows in runs between the slow rows, which go one by one
        # through the record path (its pending batch is flushed first, to keep input order).
        slow_rows = np.flatnonzero(slow)
        run_ends = np.searchsorted(scored_rows, slow_rows)
        start = 0
        boundaries = [*zip(slow_rows.tolist(), run_ends.tolist(), strict=True)]
        for slow_row, end in [*boundaries, (None, len(scored_rows))]:
            if end > start:
                self.flush()
                self._append_scored(
                    chunk,
                    scored_rows[start:end],
                    query_ids[start:end],
                    {name: texts[start:end] for name, texts in segment_texts.items()},
                    {spec: column[start:end] for spec, column in values.items()},
                )
                start = end
            if slow_row is not None:
                self.take(chunk.raw(slow_row))

    def _count_columnar(self, table: Any, rows: Any, status: Any) -> None:
        """Read, labeled and skipped counts of the columnar rows, overall and per segment."""
        n = len(rows)
        self.read += n
        unlabeled = status == fast.ROW_UNLABELED
        no_relevant = status == fast.ROW_NO_RELEVANT
        everything = np.ones(n, dtype=np.bool_)
        groups: list[tuple[GroupCounts, npt.NDArray[np.bool_]]] = [(self.overall, everything)]
        for name in self.segment_fields:
            codes, categories = _codes(table.column(SEGMENT_PREFIX + name).take(rows))
            for code, value in enumerate(categories):
                groups.append((self._counts(SegmentKey(name, value)), codes == code))
        for counts, member in groups:
            read = int(member.sum())
            if not read:
                continue
            skipped = {
                "unlabeled": int((unlabeled & member).sum()),
                "no_relevant": int((no_relevant & member).sum()),
            }
            counts.read += read
            counts.labeled += read - skipped["unlabeled"]
            for reason, count in skipped.items():
                if count:
                    counts.skipped[reason] = counts.skipped.get(reason, 0) + count

    def _append_scored(
        self,
        chunk: Chunk,
        rows: Any,
        query_ids: Any,
        segment_texts: dict[str, list[str]],
        values: dict[MetricSpec, npt.NDArray[np.float64]],
    ) -> None:
        if query_ids.null_count:
            # Records without an ID are named by their place in the input, as the validator does.
            first = chunk.first_ordinal
            for query_id, row in zip(query_ids.to_pylist(), rows.tolist(), strict=True):
                self.query_ids.append(query_id if query_id is not None else f"#{first + row}")
        else:
            self.query_ids.extend_arrow(query_ids)
        for name, texts in segment_texts.items():
            self.segment_columns[name].extend(texts)
        for spec, column in values.items():
            self.values[spec].extend(column)
        # Each scored query's row in its chunk, kept until the end (4 bytes each) in one array:
        # small arrays kept per chunk would pin freed chunk memory and fragment the heap.
        start = len(self.row_numbers)
        self.row_numbers.extend(rows)
        span = (start, len(self.row_numbers))
        if self.record_blocks is not None:
            self.record_blocks.append((len(self.query_ids) - len(rows), chunk.later, span))
        fields, later, numbers = self.settings.fields, chunk.later, self.row_numbers
        self.attributes.extend_later(
            len(rows),
            lambda: [
                scalar_fields(validate_record(raw, fields).attributes)
                for raw in later(numbers.values()[span[0] : span[1]])()
            ],
        )

    def _records_of(
        self, indices: list[int]
    ) -> dict[int, tuple[str, list[str], dict[str, float], dict[str, Any]]]:
        """Scored queries read back from the source, by index, for the worst-queries list."""
        assert self.record_blocks is not None
        starts = [block[0] for block in self.record_blocks]
        wanted: dict[int, list[int]] = {}
        for index in indices:
            wanted.setdefault(bisect.bisect_right(starts, index) - 1, []).append(index)
        found = {}
        for block, members in wanted.items():
            start, later, rows = self.record_blocks[block]
            offsets = np.array(members, dtype=np.int64) - start
            if later is not None:
                rows = self.row_numbers.values()[rows[0] : rows[1]]
            # A block without a loader holds records that went through the validator on the way in.
            raws = [rows[i] for i in offsets.tolist()] if later is None else later(rows[offsets])()
            for index, raw in zip(members, raws, strict=True):
                trace = validate_record(raw, self.settings.fields)
                found[index] = (
                    trace.query_id,
                    trace.retrieved_ids,
                    trace.grades or {},
                    trace.attributes,
                )
        return found

    def _joined(self, trace: Trace) -> Trace:
        """The trace with its query's separately kept labels, when there are any."""
        assert self.labels is not None
        joined = self.labels.get(trace.query_id)
        if joined is None:
            return trace
        attributes = trace.attributes
        stamps = joined.labeled_at()
        if stamps is not None:
            attributes = {**attributes, self.settings.label_filter.labeled_at_field: stamps}
        return Trace(
            trace.location, trace.query_id, trace.retrieved_ids, dict(joined.grades), attributes
        )

    def _counts(self, key: SegmentKey) -> GroupCounts:
        counts = self.segment_counts.get(key)
        if counts is None:
            counts = self.segment_counts[key] = GroupCounts()
        return counts

    def flush(self) -> None:
        if not len(self.builder):
            return
        batch = self.builder.build()
        zero = np.asarray(self.forced_zero, dtype=np.bool_)
        defaults = {"rel": self.settings.relevance_threshold}
        batch_values: dict[MetricSpec, npt.NDArray[np.float64]] = {}
        for spec in self.computed:
            values = spec.compute(batch, defaults)
            # Under empty_relevant="zero" a query with nothing relevant scores 0 on every metric,
            # whatever positive grades below the threshold would otherwise contribute.
            values[zero] = 0.0
            self.values[spec].extend(values)
            batch_values[spec] = values
        if self.record_blocks is None:
            self.worst.settle(batch_values)
        self.forced_zero = []
        self.builder = BatchBuilder()

    def result(self, gates: tuple[Gate, ...], policy: GatePolicy) -> Evaluation:
        values = {spec: column.values() for spec, column in self.values.items()}
        if self.record_blocks is not None and self.worst.active:
            self.worst.choose_all({spec: values[spec] for spec in self.metrics}, self._records_of)
        seed, resamples = self.settings.seed, self.settings.resamples
        overall = summarise(None, self.overall, values, seed, resamples)
        segments = []
        for name in self.segment_fields:
            parts = split_by_segment(self.segment_columns[name], values)
            for key in sorted(k for k in self.segment_counts if k.field == name):
                empty = {spec: np.zeros(0, dtype=np.float64) for spec in values}
                segments.append(
                    summarise(
                        key, self.segment_counts[key], parts.get(key.value, empty), seed, resamples
                    )
                )
        warnings = (
            []
            if self.partial
            else check_segments(
                self.settings,
                policy,
                self.overall,
                self.segment_counts,
                segments,
                self.attributes,
            )
        )
        outcomes, coverage = decide(gates, policy, overall, segments)
        summary = Summary(
            read=self.read,
            scored=len(self.query_ids),
            skipped={reason: self.overall.skipped.get(reason, 0) for reason in SKIP_REASONS},
            labeled=self.overall.labeled,
            duplicates_dropped=self.duplicates,
            invalid_examples=tuple(self.invalid_examples),
            labels_removed_stale=self.overall.labels_removed_stale,
            labels_removed_expired=self.overall.labels_removed_expired,
            lost_all_relevant=self.overall.lost_all_relevant,
        )
        return Evaluation(
            metrics=tuple(self.metrics),
            query_ids=self.query_ids,
            values=values,
            attributes=self.attributes,
            summary=summary,
            gates=outcomes,
            settings=self.settings,
            overall=overall,
            segments=tuple(segments),
            coverage_checks=coverage,
            policy=policy,
            judged=self.judged,
            examples=self.worst.examples(),
            warnings=tuple(warnings),
        )
