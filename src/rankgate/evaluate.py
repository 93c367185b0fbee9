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

When the query set is known (labels kept apart, a qrels file, a store's labels, or an explicit
``queries`` set), a query of the set with no trace at all is counted as ``missing_trace``. It is
not a record, so it is outside ``read``: ``read == scored + sum(skipped)`` still holds, and under
``missing_trace="zero"`` (trec_eval's ``-c``) the means cover ``scored + missing_trace`` queries,
the missing ones at 0 on every metric. See docs/missing-traces.md.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from rankgate import fast
from rankgate.attributes import AttributeRows, QueryIds, scalar_fields
from rankgate.doc_id_mismatch import detect_mismatch
from rankgate.doc_ids import DocIdMapping, map_labels, map_rankings
from rankgate.errors import ConfigError, InputError, MissingExtraError, UsageError
from rankgate.gates import CoverageOutcome, Gate, GateOutcome, GatePolicy, decide, parse_gate
from rankgate.id_index import IdIndex
from rankgate.io import FieldMap, Trace, TraceSource, open_source, validate_record
from rankgate.io.columnar import SEGMENT_PREFIX, Chunk, chunks
from rankgate.label_digest import UNKNOWN, digest_of, digests_of_columns
from rankgate.labels import (
    LABEL_SOURCES,
    LabelIndex,
    label_table,
    queries_with_relevant,
    read_query_set,
)
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
from rankgate.spec import (
    MAX_CUTOFF,
    MetricSpec,
    make_metric,
    parse_metric,
    parse_metric_list,
    unjudged_variants,
)
from rankgate.stale import FilteredLabels, LabelFilter, filter_columns
from rankgate.stats import DEFAULT_RESAMPLES
from rankgate.worst import QueryExample, WorstQueries

__all__ = [
    "DEFAULT_METRICS",
    "SKIP_REASONS",
    "Evaluation",
    "InvalidRecord",
    "ServedDepth",
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
MissingTrace = Literal["skip", "zero"]
OnInvalid = Literal["fail", "skip"]
ProgressCallback = Callable[[int, int, int | None], None]

# Validated traces scored together, from a source without a columnar reading.
BATCH_QUERIES = 8_192
# Smaller while validated traces are held for the worst-queries list.
BATCH_QUERIES_HOLDING = 4_096
PROGRESS_EVERY = 4096
# Ranks shown per worst query: the deepest cutoff requested, within these bounds.
WORST_DEPTH_DEFAULT = 10
WORST_DEPTH_MAX = 50
DEFAULT_JUDGED_DEPTH = 10
INVALID_EXAMPLES_KEPT = 10
# Queries of the query set without a trace, named in reports (the count covers them all).
MISSING_EXAMPLES_KEPT = 10
# Query IDs of traces the validator read, resolved against the query set this many at a time.
SEEN_FLUSH = 65_536


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
    #: A query of the known query set with no trace: left out of the means (``"skip"``), or
    #: scored 0 on every metric and included in means, intervals and segments (``"zero"``,
    #: trec_eval's ``-c``). Counted as ``missing_trace`` either way.
    missing_trace: MissingTrace = "skip"
    #: How many results users are shown; a gate on a metric cut elsewhere is warned about.
    served_k: int | None = None
    #: How an ID names its document (``--doc-id``, ``[ids]``): rankings collapse to documents and
    #: labels aggregate to them before the join (a rule in --doc-id form, "#", is parsed). None
    #: scores IDs as they are.
    doc_ids: DocIdMapping | None = None
    #: Which labels kept apart to use (``rankgate.labels.LABEL_SOURCES``): ``"all"`` (a human's
    #: judgment of a pair winning over a model judge's), or only ``"human"`` or ``"judge"`` ones.
    label_source: str = "all"

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
        if isinstance(self.doc_ids, str):
            # The command line's form ("#", "re:...", "map:FILE") is accepted from Python too.
            from rankgate.doc_ids import parse_doc_id_option

            object.__setattr__(
                self, "doc_ids", parse_doc_id_option(self.doc_ids, where="Settings.doc_ids")
            )
        elif self.doc_ids is not None and not isinstance(self.doc_ids, DocIdMapping):
            raise ConfigError(
                "doc_ids must be a DocIdMapping, or a rule such as '#', 're:PATTERN' or "
                f"'map:FILE', got {self.doc_ids!r}"
            )
        if self.label_source not in LABEL_SOURCES:
            raise ConfigError(
                f"label_source must be one of {', '.join(LABEL_SOURCES)}, got {self.label_source!r}"
            )
        if self.missing_trace not in ("skip", "zero"):
            raise ConfigError(f"missing_trace must be 'skip' or 'zero', got {self.missing_trace!r}")
        if self.served_k is not None and (
            isinstance(self.served_k, bool)
            or not isinstance(self.served_k, int)
            or not 1 <= self.served_k <= MAX_CUTOFF
        ):
            raise ConfigError(
                f"served_k must be a whole number from 1 to {MAX_CUTOFF:,}, got {self.served_k!r}"
            )
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
class ServedDepth:
    """How many distinct IDs the scored rankings hold: the depth a metric's k is read against."""

    queries: int
    median: float
    p10: float
    #: Each depth seen and how many rankings hold it, ascending: what the figures of several
    #: partitions combine from (an engine adds the partitions' counts, then ``from_histogram``).
    histogram: tuple[tuple[int, int], ...] = field(default=(), repr=False)

    @classmethod
    def from_histogram(cls, histogram: Mapping[int, int]) -> ServedDepth | None:
        """The figures of rankings whose depths are counted (depth -> rankings); None when there
        are none. Percentiles interpolate linearly between ranks, as ``numpy.percentile`` does."""
        pairs = tuple(sorted((int(d), int(n)) for d, n in histogram.items() if n))
        if not pairs:
            return None
        depths = np.array([d for d, _ in pairs], dtype=np.float64)
        ends = np.cumsum([n for _, n in pairs])
        total = int(ends[-1])

        def at(rank: int) -> float:
            return float(depths[int(np.searchsorted(ends, rank, side="right"))])

        def percentile(share: float) -> float:
            position = (total - 1) * share
            below = math.floor(position)
            low, high = at(below), at(min(below + 1, total - 1))
            return low + (high - low) * (position - below)

        return cls(total, percentile(0.5), percentile(0.1), pairs)


@dataclass(frozen=True, slots=True)
class Summary:
    """What happened to every record read: scored, or skipped under a named reason.

    ``read == scored + sum(skipped.values())``. ``missing_trace`` counts queries of the known
    query set (``query_set`` says where it came from, ``expected_queries`` how many it holds) that
    had no trace at all: they are not records, so they are outside ``read``; under
    ``Settings.missing_trace="zero"`` they are scored 0, and the means cover ``in_means`` queries.
    ``outside_set`` counts records whose query is not in an explicit ``queries`` set (scored as
    the rest).
    """

    read: int
    scored: int
    skipped: dict[str, int]
    labeled: int
    duplicates_dropped: int
    invalid_examples: tuple[InvalidRecord, ...] = ()
    labels_removed_stale: int = 0
    labels_removed_expired: int = 0
    lost_all_relevant: int = 0
    missing_trace: int = 0
    missing_examples: tuple[str, ...] = ()
    missing_scored: int = 0
    query_set: str | None = None
    expected_queries: int | None = None
    outside_set: int = 0
    served_depth: ServedDepth | None = None
    #: Under a document-ID mapping: later chunks of a document already ranked, removed from the
    #: scored rankings (the document keeps its first chunk's rank). Not duplicates of the trace.
    chunks_collapsed: int = 0
    #: The mapping the IDs were scored under (``--doc-id`` syntax), None when IDs were taken as is.
    doc_ids: str | None = None
    #: Labels kept apart (``labels=``) by kind: ``{"human": n, "judge": m}`` after a human's
    #: judgment of a pair replaced a judge's; empty when none were given.
    label_sources: dict[str, int] = field(default_factory=dict)

    @property
    def coverage(self) -> float | None:
        """Share of records read that carry labels; None when nothing was read."""
        return self.labeled / self.read if self.read else None

    @property
    def in_means(self) -> int:
        """Queries the means cover: those scored from a trace, plus the missing ones scored 0."""
        return self.scored + self.missing_scored


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
    #: Each segment field's value per scored query, aligned with ``query_ids``.
    segment_values: Mapping[str, Sequence[str]] = field(default_factory=dict)
    #: Per scored query, the digest of the labels it was scored with (``label_digest``), when
    #: ``evaluate(..., label_digests=True)`` asked for them (a saved baseline keeps them).
    label_digests: npt.NDArray[np.uint64] | None = None
    #: The distinct IDs of valid traces that were read but not scored (no labels, or no relevant
    #: label under empty_relevant='skip'), an Arrow string array; kept with ``label_digests``.
    unscored_query_ids: Any = None
    #: Prediction-powered estimates (``rankgate.ppi_eval.PPIEvaluation``) under ``eval --ppi``;
    #: the gates were then decided on them.
    ppi: Any = None

    def segment_column(self, field_name: str) -> Sequence[str]:
        """Each scored query's value of a segment field, aligned with ``query_ids``, as the
        segments hold it (``(missing)`` where a query has none). A field the evaluation was not
        segmented by is read from the queries' scalar attributes."""
        held = self.segment_values.get(field_name)
        if held is not None:
            return held
        return [segment_value(row, field_name) for row in self.attributes]

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

    def unjudged_range(
        self, metric: str | MetricSpec, group: Group | None = None
    ) -> tuple[float, float] | None:
        """The mean of ``metric`` over ``group`` (default: all scored queries) with every unjudged
        retrieved document counted non-relevant and counted relevant: ``(pessimistic,
        optimistic)``, the ``unjudged=nonrelevant`` and ``unjudged=relevant`` variants, which
        ``evaluate`` computes beside every requested metric that takes the parameter. None for a
        metric that takes none (``judged``, ``bpref``, ``rbp_residual``).

        The two are equal when nothing that could change the value is unjudged. ``relevant`` is
        the optimistic policy, not an upper bound for every metric (see ``UNJUDGED``): a report
        that shows a range orders the two numbers.
        """
        variants = unjudged_variants(self._computed(metric))
        if not variants:
            return None
        means = (group or self.overall).means
        pessimistic, optimistic = variants["nonrelevant"], variants["relevant"]
        if pessimistic not in means or optimistic not in means:
            return None  # assembled by an engine that did not compute them
        return means[pessimistic], means[optimistic]

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
                ids.to_arrow() if isinstance(ids, QueryIds) else fast.text_array(ids)
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
    """A one-line ``MissingExtraError`` (a ``UsageError``) naming the extra to install when an
    optional package is missing."""
    import importlib

    try:
        importlib.import_module(package)
    except ImportError:
        raise MissingExtraError(
            f"{what} needs {package}: pip install 'rankgate[{package}]'"
        ) from None


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
    queries: Any = None,
    extra_metrics: Iterable[str | MetricSpec] = (),
    label_digests: bool = False,
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
        queries: the golden query set the traces are expected to cover: a file (one query ID per
            line, or JSON Lines/JSON/CSV/Parquet records with a ``query_id``; see
            ``rankgate.labels.read_query_set``) or an iterable of IDs. Without it the query set is
            the labels' (``labels``, a TREC source's qrels, a store's labels table when read
            without a time window). Its queries with no trace count as ``missing_trace``.
        partial: this call scores one part of a larger input (an engine's partition, or its dry
            run): the checks that need the whole input are left to the caller, who runs
            ``rankgate.segments.check_segments`` over the combined counts and
            ``check_bounds_computed`` before scoring.
        extra_metrics: metrics computed beside the requested ones, as ``judged`` and the
            unjudged-document range are: their per-query values are in ``Evaluation.values`` and
            their means and intervals in every group, but no report lists them and no gate reads
            them (``rankgate.compare`` scores each metric under every unjudged policy this way).
        label_digests: also keep, per scored query, a digest of the labels it was scored with
            (``Evaluation.label_digests``; see ``rankgate.label_digest``), at some cost in time:
            what a saved baseline needs to refuse a comparison against other labels.

    Raises:
        InputError: a record is malformed and ``settings.on_invalid`` is ``"fail"``.
        SpecError: a metric string is unknown or malformed.
    """
    settings = settings or Settings()
    label_filter = settings.label_filter
    if label_filter.max_age is not None and label_filter.as_of is None:
        # One "now" for the whole run, so every record's labels are aged against the same instant.
        settings = replace(settings, label_filter=replace(label_filter, as_of=datetime.now(UTC)))
    if isinstance(gates, (str, Gate)):  # one gate, not a sequence of characters
        gates = [gates]
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
    # Every metric that takes an unjudged policy is also scored with unjudged documents counted
    # non-relevant and counted relevant: the range reports show and gate_on="pessimistic" reads.
    companions = [
        variants[policy]
        for spec in requested
        for variants in (unjudged_variants(spec),)
        if variants
        for policy in ("nonrelevant", "relevant")
    ]
    companions += _metric_specs(extra_metrics) if extra_metrics else []
    if isinstance(worst, bool) or not isinstance(worst, int) or worst < 0:
        raise UsageError(f"worst must be a whole number >= 0, not {worst!r}")
    depth = min(max(cutoffs, default=WORST_DEPTH_DEFAULT), WORST_DEPTH_MAX)
    tracker = WorstQueries(requested, worst, depth, settings.relevance_threshold)
    accumulator = _Accumulator(requested, settings, segment_fields, judged, tracker, companions)
    accumulator.partial = partial
    if label_digests:
        accumulator.digests = _Column(np.uint64)
        accumulator.valid_ids = []
    if labels is not None:
        accumulator.labels = LabelIndex(
            label_table(
                labels,
                fields=settings.fields,
                input_format=labels_format,
                label_source=settings.label_source,
                counts=accumulator.label_sources,
            )
        )
    if settings.label_filter.corpus is not None:
        accumulator.corpus_ids = IdIndex(fast.text_array(sorted(settings.label_filter.corpus)))
    if not partial:
        # Which queries lack a trace is known only over the whole input: a partition's caller
        # (an engine) would have to combine the parts' seen queries.
        _expect_queries(accumulator, source, queries, settings)
    elif queries is not None or settings.missing_trace == "zero":
        raise UsageError("queries and missing_trace='zero' need the whole input, not one part")
    presence = (label_filter.labeled_at_field,) if label_filter.max_age is not None else ()
    columnar = chunks(source, settings.fields, segment_fields, presence=presence)
    if columnar is None:
        # A source without a columnar reading: its records go to the validator one by one, and
        # those it accepts are scored, block by block, by the same join and kernels.
        accumulator.take_records(source, progress)
        columnar = iter(())
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
    if progress is not None:
        progress(accumulator.read, source.done(), source.total)
    return accumulator.result(checked_gates, policy)


def _expect_queries(
    accumulator: _Accumulator, source: Any, queries: Any, settings: Settings
) -> None:
    """Tell the accumulator which queries the traces are expected to cover, and where that set
    comes from: an explicit ``queries`` set first, then labels kept apart, then the source's own
    labels (a qrels file, a store's labels table read without a time window)."""
    threshold = settings.relevance_threshold
    if queries is not None:
        ids = read_query_set(queries, fields=settings.fields)
        accumulator.set_expected(ids, "queries", None, outside=True)
    elif accumulator.labels is not None:
        labels = accumulator.labels
        accumulator.set_expected(labels.query_ids, "labels", labels.has_relevant(threshold))
    else:
        declared = getattr(source, "expected_queries", None)
        found = declared() if callable(declared) else None
        if found is not None:
            # Only the IDs and whether each has a relevant label: a grade the join would refuse
            # is reported by the join, for the trace it is joined to.
            name, table = found
            ids = table.column("query_id").combine_chunks()
            relevant = queries_with_relevant(table.column("relevance_scores"), threshold)
            accumulator.set_expected(ids, name, relevant)
    if settings.missing_trace == "zero" and accumulator.expected is None:
        raise UsageError(
            "missing_trace='zero' needs a known query set: labels kept apart (--labels), "
            "--run/--qrels, a store's labels (read without --since/--until/--sql), or --queries"
        )


def check_bounds_computed(policy: GatePolicy, settings: Settings) -> None:
    """A gate on an interval bound needs the interval: without resamples there is none, and
    checking the mean instead while reporting "(lower)" would misstate what was checked."""
    if settings.resamples > 0:
        return
    wanted = [("", policy.gate_on)] + [
        (f" (in [segments] {r.key})", r.gate_on) for r in policy.rules
    ]
    for where, gate_on in wanted:
        if gate_on in ("lower_bound", "upper_bound"):
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


@dataclass(frozen=True, slots=True)
class _Settled:
    """A record the validator accepted for scoring: the trace, its grades after the label join
    and the stale-label filter, and its value of each segment field."""

    trace: Trace
    grades: dict[str, float]
    segments: list[str]


def depth_warnings(
    metrics: Sequence[MetricSpec],
    depth: ServedDepth | None,
    served: int | None,
    gates: Sequence[Gate],
    policy: GatePolicy,
) -> list[str]:
    """A metric cut deeper than most rankings reach, and a gate cut at another depth than
    the one users are served (a whole-input check: engines run it once over every partition)."""
    warnings = []
    if depth is not None:
        for spec in metrics:
            if spec.k is not None and spec.k > depth.median:
                warnings.append(
                    f"{spec} reads the top {spec.k}, but the median ranking holds "
                    f"{depth.median:g} IDs "
                    f"(10% hold {depth.p10:g} or fewer): ranks past a ranking's end count "
                    "as misses"
                )
    if served is not None:
        gated = dict.fromkeys(
            gate.metric for gate in (*gates, *(g for rule in policy.rules for g in rule.gates))
        )
        for spec in gated:
            if spec.k != served:
                depth_text = "the whole ranking" if spec.k is None else f"the top {spec.k}"
                warnings.append(
                    f"the gate on {spec} reads {depth_text}, but users are served "
                    f"{served} results (served_k = {served})"
                )
    return warnings


def _is_id_type(kind: Any) -> bool:
    """Whether an Arrow type holds IDs the join reads (text, or bytes for IDs that are not UTF-8)."""
    import pyarrow as pa

    return bool(
        pa.types.is_string(kind)
        or pa.types.is_large_string(kind)
        or pa.types.is_binary(kind)
        or pa.types.is_large_binary(kind)
    )


def _array(column: Any) -> Any:
    """One Arrow array for a column that may be chunked."""
    import pyarrow as pa

    if isinstance(column, pa.ChunkedArray):
        return column.combine_chunks()
    return column


class _Accumulator:
    """Running state of one evaluation: counts, the open batch, and finished per-query values."""

    def __init__(
        self,
        metrics: list[MetricSpec],
        settings: Settings,
        segment_fields: tuple[str, ...],
        judged: MetricSpec,
        worst: WorstQueries,
        companions: Sequence[MetricSpec] = (),
    ) -> None:
        self.metrics = metrics
        self.judged = judged
        # Computed beside the requested metrics: judged for the coverage report, the companions
        # for the unjudged-document range (and whatever the caller asked for as extra metrics).
        self.computed = list(dict.fromkeys([*metrics, judged, *companions]))
        self.settings = settings
        self.segment_fields = segment_fields
        self.read = 0
        self.duplicates = 0
        self.chunks_collapsed = 0
        # Without a document-ID mapping, the first labeled rows are checked once for chunk IDs
        # scored against document labels (or the reverse); the warning, if any, lands here.
        self.mismatch_checked = settings.doc_ids is not None
        self.mismatch_warning: str | None = None
        self.overall = GroupCounts()
        self.segment_counts: dict[SegmentKey, GroupCounts] = {}
        self.segment_columns: dict[str, list[str]] = {name: [] for name in segment_fields}
        self.invalid_examples: list[InvalidRecord] = []
        self.query_ids = QueryIds()
        self.attributes = AttributeRows()
        self.values = {m: _Column() for m in self.computed}
        self.row_numbers = _Column(np.int32)
        self.scratch = fast.Scratch()  # the join's output arrays, reused chunk after chunk
        self.worst = worst
        # Rankings are not held: the worst queries are chosen from the final values and their
        # records read back. Each block: first query index, and either a loader and the span of
        # row numbers, or None and the validated traces (held only when worst queries are kept).
        self.record_blocks: list[tuple[int, Any, Any]] = []
        self.labels: LabelIndex | None = None
        #: How many labels kept apart are a human's and how many a model judge's.
        self.label_sources: dict[str, int] = {}
        self.corpus_ids: Any = None
        # How many scored rankings hold each number of distinct IDs (index: depth), for the
        # served-depth figures: counted as they come, 4 bytes a query less than a column of them.
        self.depths = np.zeros(0, dtype=np.int64)
        # The query set the traces are expected to cover (an Arrow string array), which of its
        # queries had a trace, and the IDs the validator read, not yet looked up.
        self.expected: Any = None
        self.expected_index: IdIndex | None = None
        self.expected_name: str | None = None
        self.expected_relevant: npt.NDArray[np.bool_] | None = None
        self.seen: npt.NDArray[np.bool_] = np.zeros(0, dtype=np.bool_)
        self.seen_pending: list[str] = []
        self.count_outside = False
        self.outside = 0
        # Scoring one part of a larger input: whole-input checks are the caller's (see evaluate).
        self.partial = False
        # Per scored query, the digest of its labels, when asked for (see evaluate); with them,
        # the IDs of every valid trace, for the queries read but not scored.
        self.digests: _Column | None = None
        self.valid_ids: list[Any] | None = None
        self.valid_ids_pending: list[str] = []

    def set_expected(
        self,
        ids: Any,
        name: str,
        relevant: npt.NDArray[np.bool_] | None,
        *,
        outside: bool = False,
    ) -> None:
        """The query set the traces should cover; ``relevant`` marks its queries with a label at
        the threshold (None: not known, as for a bare ``queries`` set)."""
        import pyarrow as pa

        self.expected = ids.cast(pa.large_string())
        # Looked up once per block: hashed once here, not by every block's lookup.
        self.expected_index = IdIndex(self.expected)
        self.expected_name = name
        self.expected_relevant = relevant
        self.seen = np.zeros(len(ids), dtype=np.bool_)
        self.count_outside = outside

    def _mark_seen(self, query_ids: Any) -> None:
        """Mark the query set's queries that these trace IDs name (an Arrow array, one lookup
        for the block) and count the IDs outside an explicit set."""
        import pyarrow as pa

        if self.expected_index is None or not len(query_ids):
            return
        if not isinstance(query_ids, (pa.Array, pa.ChunkedArray)):
            query_ids = fast.text_array(query_ids)
        found = self.expected_index.find(query_ids.cast(pa.large_string()))
        hit = found >= 0
        self.seen[found[hit]] = True
        if self.count_outside:
            self.outside += len(found) - int(np.count_nonzero(hit))

    def _flush_seen(self) -> None:
        if self.seen_pending:
            pending, self.seen_pending = self.seen_pending, []
            self._mark_seen(pending)

    def _take_slow(self, raw: Any) -> _Settled | None:
        """One record read by the validator: counted (read, labeled, skipped, labels removed) as
        every record is, and returned with its settled grades when it is to be scored."""
        self.read += 1
        threshold = self.settings.relevance_threshold
        try:
            trace = validate_record(raw, self.settings.fields)
            settled = self._settle(trace)
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
            return None
        trace, grades, stale, expired = settled
        if self.valid_ids is not None:
            self.valid_ids_pending.append(trace.query_id)
        if self.expected is not None:
            self.seen_pending.append(trace.query_id)
            if len(self.seen_pending) >= SEEN_FLUSH:
                self._flush_seen()
        segments = [
            SegmentKey(name, segment_value(trace.attributes, name)) for name in self.segment_fields
        ]
        groups = [self.overall, *(self._counts(key) for key in segments)]
        for group in groups:
            group.read += 1
        if grades is None or trace.grades is None:
            for group in groups:
                group.skip("unlabeled")
            return None
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
            return None
        return _Settled(trace, grades, [key.value for key in segments])

    def _settle(self, trace: Trace) -> tuple[Trace, dict[str, float] | None, int, int]:
        """A validated trace with its query's separately kept labels joined (when it carries none
        of its own), and its grades after the stale-label filter, with the labels it removed."""
        if trace.grades is None and self.labels is not None:
            joined = self.labels.get(trace.query_id)
            if joined is not None:
                attributes = trace.attributes
                stamps = joined.labeled_at()
                if stamps is not None:
                    field_name = self.settings.label_filter.labeled_at_field
                    attributes = {**attributes, field_name: stamps}
                trace = Trace(
                    trace.location,
                    trace.query_id,
                    trace.retrieved_ids,
                    dict(joined.grades),
                    attributes,
                )
        grades, stale, expired = trace.grades, 0, 0
        if grades is not None and self.settings.label_filter.active:
            grades, stale, expired = self.settings.label_filter.apply(
                grades, trace.attributes, trace.location
            )
        return trace, grades, stale, expired

    def expect(self, queries: int) -> None:
        """Size the value arrays for about this many more scored queries (an estimate)."""
        for column in [*self.values.values(), self.row_numbers]:
            column.reserve(len(self.query_ids) + queries)

    def _with_labels(self, chunk: Chunk, slow: npt.NDArray[np.bool_]) -> tuple[Any, Any]:
        """The chunk's table with separately kept labels joined to its rows that carry none, and
        the joined rows' per-document times (None when the label table has none)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        table = chunk.table
        if self.labels is None:
            return table, None
        names = table.schema.names
        n = table.num_rows
        unlabeled = ~slow
        for name in ("relevant_ids", "relevance_scores"):
            if name in names:
                column = table.column(name)
                if column.null_count:
                    unlabeled &= ~fast.numpy_of(column.is_valid())
                else:
                    unlabeled[:] = False
        wanted = np.flatnonzero(unlabeled)
        if not len(wanted):
            return table, None
        query_ids = table.column("query_id")
        if query_ids.null_count:
            # A record without an ID is named by its place in the input (see validate_record).
            places = pa.array([f"#{chunk.first_ordinal + i}" for i in range(n)], pa.large_string())
            query_ids = pc.if_else(pc.is_null(query_ids), places, query_ids)
        found = self.labels.rows_of(query_ids.take(pa.array(wanted)))
        hit = found >= 0
        if not hit.any():
            return table, None
        rows = wanted[hit]
        label_rows = pa.array(found[hit])
        scores_type = self.labels.scores.type
        if "relevance_scores" in names:
            own = table.column("relevance_scores")
            own = own.combine_chunks() if isinstance(own, pa.ChunkedArray) else own
            own = own.cast(scores_type)
        else:
            own = pa.nulls(n, scores_type)
        positions = np.arange(n, dtype=np.int64)
        positions[rows] = n + np.arange(len(rows), dtype=np.int64)
        joined_scores = pa.concat_arrays([own, self.labels.scores.take(label_rows)]).take(
            pa.array(positions)
        )
        stamps = None
        if self.labels.stamps is not None:
            stamps = pa.concat_arrays(
                [pa.nulls(n, self.labels.stamps.type), self.labels.stamps.take(label_rows)]
            ).take(pa.array(positions))
        if "relevance_scores" in names:
            table = table.set_column(
                names.index("relevance_scores"), "relevance_scores", joined_scores
            )
        else:
            table = table.append_column("relevance_scores", joined_scores)
        return table, stamps

    def _as_documents(
        self, table: Any, slow: npt.NDArray[np.bool_]
    ) -> tuple[Any, npt.NDArray[np.int64] | None]:
        """The chunk's rankings and labels named by document under the document-ID mapping (with
        each row's collapsed chunks); without one, the table as it is, checked once for IDs that
        look like chunks of the labeled documents (or the reverse). Columns of an unexpected type
        are left alone: their rows are slow, and the validator's rows are mapped when scored."""
        import pyarrow as pa

        names = table.schema.names
        mapping = self.settings.doc_ids

        def id_lists(name: str) -> Any:
            if name not in names:
                return None
            column = _array(table.column(name))
            kind = column.type
            if (pa.types.is_list(kind) or pa.types.is_large_list(kind)) and (
                _is_id_type(kind.value_type)
            ):
                return column
            return None

        def grade_maps() -> Any:
            if "relevance_scores" not in names:
                return None
            column = _array(table.column("relevance_scores"))
            kind = column.type
            if pa.types.is_map(kind) and _is_id_type(kind.key_type):
                return column
            return None

        retrieved = id_lists("retrieved_ids")
        if mapping is None:
            # Graded labels when any row has them, else binary ones (a reader may give an
            # all-null grades column): the check reads only which IDs are labeled.
            labels = grade_maps()
            if labels is None or labels.null_count == len(labels):
                labels = id_lists("relevant_ids")
            if not self.mismatch_checked and retrieved is not None and labels is not None:
                self.mismatch_checked = True
                fast_rows = fast.index_array(np.flatnonzero(~slow))
                self.mismatch_warning = detect_mismatch(
                    retrieved.take(fast_rows), labels.take(fast_rows)
                )
            return table, None
        if retrieved is None:
            return table, None
        ranked, collapsed = map_rankings(retrieved, mapping)
        table = table.set_column(names.index("retrieved_ids"), "retrieved_ids", ranked)
        relevant = id_lists("relevant_ids")
        if relevant is not None:
            # A relevant document named by several of its chunks is one relevant document.
            documents, _ = map_rankings(relevant, mapping)
            table = table.set_column(names.index("relevant_ids"), "relevant_ids", documents)
        grades = grade_maps()
        if grades is not None:
            table = table.set_column(
                names.index("relevance_scores"), "relevance_scores", map_labels(grades, mapping)
            )
        return table, collapsed

    def take_chunk(self, chunk: Chunk) -> None:
        """Take a block of records read as columns: separately kept labels joined and stale labels
        removed over whole columns, then the compiled join and kernels score the rows they can;
        the validator reads the rows marked slow, and those it accepts are scored by the same join
        and kernels. Both land in input order."""
        slow = chunk.slow.copy()
        label_filter = self.settings.label_filter
        if label_filter.max_age is not None:
            # A record's own labeled_at (a time, or one per document) is read by the validator.
            slow |= chunk.present.get(label_filter.labeled_at_field, False)
        table, stamps = self._with_labels(chunk, slow)
        filtered = None
        if label_filter.active:
            filtered = filter_columns(
                table,
                slow,
                stamps,
                label_filter,
                self.corpus_ids,
                threshold=self.settings.relevance_threshold,
                unique_map_keys=chunk.unique_map_keys,
            )
            table = filtered.table
        table, collapsed = self._as_documents(table, slow)
        names = table.schema.names
        retrieved = fast.IdColumns.from_arrow(_array(table.column("retrieved_ids")))
        relevant = scores = score_values = None
        if "relevant_ids" in names:
            relevant = fast.IdColumns.from_arrow(_array(table.column("relevant_ids")))
        if "relevance_scores" in names:
            scores_column = _array(table.column("relevance_scores"))
            scores = fast.IdColumns.from_arrow(scores_column)
            # A null grade marks its row slow; here it only has to be a number.
            score_values = fast.numpy_filled(scores_column.items, math.nan).astype(
                np.float64, copy=False
            )
        while True:
            rows = np.flatnonzero(~slow).astype(np.int64)
            scored = fast.join_and_score(
                rows,
                retrieved,
                relevant,
                scores,
                score_values,
                self.computed,
                {"rel": self.settings.relevance_threshold},
                threshold=self.settings.relevance_threshold,
                skip_no_relevant=self.settings.empty_relevant == "skip",
                unique_map_keys=chunk.unique_map_keys,
                scratch=self.scratch,
            )
            if scored.values is not None:
                break
            for_validator = scored.status == fast.ROW_FOR_VALIDATOR
            slow[rows[for_validator]] = True  # the validator words the error

        status = scored.status
        self._count_columnar(table, rows, status, filtered)
        scored_rows = rows[status == fast.ROW_SCORED]
        depths = scored.depths
        values = scored.values
        self.duplicates += int(scored.duplicates[status == fast.ROW_SCORED].sum())
        if collapsed is not None:
            self.chunks_collapsed += int(collapsed[scored_rows].sum())
        # Row numbers handed to Arrow as an Arrow array: a numpy one makes pyarrow import pandas.
        taken = fast.index_array(scored_rows)
        query_ids = table.column("query_id").take(taken)
        digests = None
        if self.digests is not None:
            digests = (
                np.full(len(scored_rows), UNKNOWN, dtype=np.uint64)
                if "relevant_ids" not in names and "relevance_scores" not in names
                else None
            )
            digests = (
                digests
                if digests is not None
                else digests_of_columns(
                    table.column("relevant_ids").take(taken) if "relevant_ids" in names else None,
                    table.column("relevance_scores").take(taken)
                    if "relevance_scores" in names
                    else None,
                )
            )
        segment_texts = {
            name: _texts(table.column(SEGMENT_PREFIX + name).take(taken))
            for name in self.segment_fields
        }

        # The slow rows, one by one through the validator; those it accepts are scored together.
        accepted_rows: list[int] = []
        accepted: list[_Settled] = []
        for slow_row in np.flatnonzero(slow).tolist():
            settled = self._take_slow(chunk.raw(slow_row))
            if settled is not None:
                accepted_rows.append(slow_row)
                accepted.append(settled)
        accepted_values, accepted_depths = self._score_settled(accepted)

        # Interleave, in input order: runs of columnar rows between runs of accepted slow rows.
        run_ends = np.searchsorted(scored_rows, np.asarray(accepted_rows, dtype=np.int64))
        start = 0
        slow_start = 0
        boundaries = [*run_ends.tolist(), len(scored_rows)]
        for index, end in enumerate(boundaries):
            if end > start:
                self._append_scored(
                    chunk,
                    scored_rows[start:end],
                    query_ids[start:end],
                    {name: texts[start:end] for name, texts in segment_texts.items()},
                    {spec: column[start:end] for spec, column in values.items()},
                    depths[start:end],
                )
                if digests is not None and self.digests is not None:
                    self.digests.extend(digests[start:end])
                start = end
            if index < len(accepted) and (
                index + 1 == len(accepted) or boundaries[index + 1] > end
            ):
                # The slow rows accepted since the last columnar run, in one block.
                self._append_settled(
                    accepted[slow_start : index + 1],
                    {
                        spec: column[slow_start : index + 1]
                        for spec, column in accepted_values.items()
                    },
                    accepted_depths[slow_start : index + 1],
                )
                slow_start = index + 1

    def take_records(self, source: TraceSource, progress: ProgressCallback | None) -> None:
        """Take a source's records one at a time through the validator (reading no further than
        the record being validated); those it accepts are scored a block at a time."""
        limit = BATCH_QUERIES_HOLDING if self.worst.active else BATCH_QUERIES
        pending: list[_Settled] = []
        for raw in source:
            settled = self._take_slow(raw)
            if settled is not None:
                pending.append(settled)
                if len(pending) >= limit:
                    self._append_settled(pending, *self._score_settled(pending))
                    pending = []
            if progress is not None and self.read % PROGRESS_EVERY == 0:
                progress(self.read, source.done(), source.total)
        if pending:
            self._append_settled(pending, *self._score_settled(pending))

    def _score_settled(
        self, accepted: list[_Settled]
    ) -> tuple[dict[MetricSpec, npt.NDArray[np.float64]], npt.NDArray[np.int64]]:
        """Per-metric values and ranking depths of validated traces: made the canonical Arrow
        rows (ranking, grades) and scored by the same join and kernels as every other row."""

        if not accepted:
            empty = {spec: np.zeros(0, dtype=np.float64) for spec in self.computed}
            return empty, np.zeros(0, dtype=np.int64)
        retrieved, grades = _settled_arrays(accepted)
        if self.settings.doc_ids is not None:
            retrieved, collapsed = map_rankings(retrieved, self.settings.doc_ids)
            grades = map_labels(grades, self.settings.doc_ids)
            self.chunks_collapsed += int(collapsed.sum())
        elif not self.mismatch_checked:
            self.mismatch_checked = True
            self.mismatch_warning = detect_mismatch(retrieved, grades)
        score_values = fast.numpy_of(grades.items).astype(np.float64, copy=False)
        rows = np.arange(len(accepted), dtype=np.int64)
        joined = fast.join(
            rows,
            fast.IdColumns.from_arrow(retrieved),
            None,
            fast.IdColumns.from_arrow(grades),
            score_values,
            threshold=self.settings.relevance_threshold,
            skip_no_relevant=self.settings.empty_relevant == "skip",
            unique_map_keys=False,
            scratch=self.scratch,
        )
        if (joined.status != fast.ROW_SCORED).any():
            raise RuntimeError("a trace the validator accepted was not scored by the join")
        values = fast.score(joined.batch, self.computed, {"rel": self.settings.relevance_threshold})
        zero = joined.forced_zero
        if zero.any():
            for column in values.values():
                column[zero] = 0.0
        self.duplicates += int(joined.duplicates.sum())
        depths = joined.batch.ranked_lengths.copy()
        return {spec: column.copy() for spec, column in values.items()}, depths

    def _append_settled(
        self,
        accepted: list[_Settled],
        values: dict[MetricSpec, npt.NDArray[np.float64]],
        depths: npt.NDArray[np.int64],
    ) -> None:
        """Validated traces that were scored, appended with their values, attributes and
        segment values (held, as they were read anyway)."""
        first = len(self.query_ids)
        for settled in accepted:
            self.query_ids.append(settled.trace.query_id)
            for name, value in zip(self.segment_fields, settled.segments, strict=True):
                self.segment_columns[name].append(value)
            # Scalar fields are kept for per-query tables; nested values are not.
            self.attributes.append(scalar_fields(settled.trace.attributes))
        for spec, column in values.items():
            self.values[spec].extend(column)
        self._count_depths(depths)
        self.row_numbers.extend(np.zeros(len(accepted), dtype=np.int32))
        if self.digests is not None:
            self.digests.extend(np.array([digest_of(s.grades) for s in accepted], dtype=np.uint64))
        held = (
            [
                (s.trace.query_id, s.trace.retrieved_ids, s.grades, s.trace.attributes)
                for s in accepted
            ]
            if self.worst.active
            else None
        )
        self.record_blocks.append((first, None, held))

    def _count_columnar(
        self, table: Any, rows: Any, status: Any, filtered: FilteredLabels | None
    ) -> None:
        """Read, labeled and skipped counts of the columnar rows, overall and per segment, and
        the labels the stale-label filter removed from them."""
        n = len(rows)
        self.read += n
        if self.expected is not None or self.valid_ids is not None:
            read_ids = table.column("query_id").take(fast.index_array(rows))
            self._mark_seen(read_ids)
            if self.valid_ids is not None:
                self.valid_ids.append(read_ids)
        unlabeled = status == fast.ROW_UNLABELED
        no_relevant = status == fast.ROW_NO_RELEVANT
        everything = np.ones(n, dtype=np.bool_)
        groups: list[tuple[GroupCounts, npt.NDArray[np.bool_]]] = [(self.overall, everything)]
        for name in self.segment_fields:
            codes, categories = _codes(
                table.column(SEGMENT_PREFIX + name).take(fast.index_array(rows))
            )
            for code, value in enumerate(categories):
                groups.append((self._counts(SegmentKey(name, value)), codes == code))
        removed = None
        if filtered is not None:
            labeled = ~unlabeled
            removed = (
                np.where(labeled, filtered.stale[rows], 0),
                np.where(labeled, filtered.expired[rows], 0),
                labeled & filtered.lost[rows],
            )
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
            if removed is not None:
                stale, expired, lost = removed
                counts.labels_removed_stale += int(stale[member].sum())
                counts.labels_removed_expired += int(expired[member].sum())
                counts.lost_all_relevant += int((lost & member).sum())

    def _append_scored(
        self,
        chunk: Chunk,
        rows: Any,
        query_ids: Any,
        segment_texts: dict[str, list[str]],
        values: dict[MetricSpec, npt.NDArray[np.float64]],
        depths: npt.NDArray[np.int64],
    ) -> None:
        self._count_depths(depths)
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
        starts = [block[0] for block in self.record_blocks]
        wanted: dict[int, list[int]] = {}
        for index in indices:
            wanted.setdefault(bisect.bisect_right(starts, index) - 1, []).append(index)
        found = {}
        for block, members in wanted.items():
            start, later, rows = self.record_blocks[block]
            offsets = np.array(members, dtype=np.int64) - start
            if later is None:
                # Validated traces, held as they were scored.
                for index, offset in zip(members, offsets.tolist(), strict=True):
                    found[index] = rows[offset]
                continue
            numbers = self.row_numbers.values()[rows[0] : rows[1]]
            for index, raw in zip(members, later(numbers[offsets])(), strict=True):
                trace, grades, _, _ = self._settle(validate_record(raw, self.settings.fields))
                found[index] = (
                    trace.query_id,
                    trace.retrieved_ids,
                    grades or {},
                    trace.attributes,
                )
        return found

    def _counts(self, key: SegmentKey) -> GroupCounts:
        counts = self.segment_counts.get(key)
        if counts is None:
            counts = self.segment_counts[key] = GroupCounts()
        return counts

    def _missing(self) -> tuple[int, list[str], int]:
        """The query set's queries without a trace: how many, the first few IDs, and how many
        were appended with 0 on every metric (under ``missing_trace="zero"``; a missing query
        whose labels hold nothing relevant is left out under ``empty_relevant="skip"``, as its
        trace would have been)."""
        if self.expected is None:
            return 0, [], 0
        self._flush_seen()
        positions = np.flatnonzero(~self.seen)
        examples = [
            str(v)
            for v in self.expected.take(
                fast.index_array(positions[:MISSING_EXAMPLES_KEPT])
            ).to_pylist()
        ]
        if self.settings.missing_trace != "zero" or not len(positions):
            return len(positions), examples, 0
        if self.expected_relevant is not None and self.settings.empty_relevant == "skip":
            positions = positions[self.expected_relevant[positions]]
        self._append_missing(self.expected.take(fast.index_array(positions)))
        return len(np.flatnonzero(~self.seen)), examples, len(positions)

    def _append_missing(self, query_ids: Any) -> None:
        """Missing queries scored as an empty ranking (0 on every quality metric), with no
        attributes and the missing value of every segment field, so they count in means,
        intervals and segments."""
        n = len(query_ids)
        if not n:
            return
        first = len(self.query_ids)
        self.query_ids.extend_arrow(query_ids)
        for name in self.segment_fields:
            self._counts(SegmentKey(name, MISSING_VALUE))
            self.segment_columns[name].extend([MISSING_VALUE] * n)
        for spec, value in self._empty_ranking_values().items():
            self.values[spec].extend(np.full(n, value, dtype=np.float64))
        self.row_numbers.extend(np.zeros(n, dtype=np.int32))
        if self.digests is not None:
            self.digests.extend(np.full(n, UNKNOWN, dtype=np.uint64))
        self.attributes.extend_later(n, lambda: [{} for _ in range(n)])
        held: list[tuple[str, list[str], dict[str, float], dict[str, Any]]] | None = (
            [(query_id, [], {}, {}) for query_id in query_ids.to_pylist()]
            if self.worst.active
            else None
        )
        self.record_blocks.append((first, None, held))

    def _empty_ranking_values(self) -> dict[MetricSpec, float]:
        """Each metric's value for a labeled query that retrieved nothing, which is how a missing
        query is scored: 0 for every quality metric, but 1 for ``rbp_residual`` (nothing is
        known), so a missing trace never narrows an uncertainty. Scored by the same join and
        kernels as every ranking."""
        import pyarrow as pa

        text = pa.large_string()
        retrieved = pa.array([[]], pa.large_list(text))
        grade = max(self.settings.relevance_threshold, 1.0)
        grades = pa.array([[("(missing)", grade)]], pa.map_(text, pa.float64()))
        joined = fast.join(
            np.zeros(1, dtype=np.int64),
            fast.IdColumns.from_arrow(retrieved),
            None,
            fast.IdColumns.from_arrow(grades),
            np.array([grade], dtype=np.float64),
            threshold=self.settings.relevance_threshold,
            skip_no_relevant=False,
            unique_map_keys=True,
            scratch=fast.Scratch(),
        )
        values = fast.score(joined.batch, self.computed, {"rel": self.settings.relevance_threshold})
        return {spec: float(column[0]) for spec, column in values.items()}

    def _count_depths(self, depths: npt.NDArray[Any]) -> None:
        if not len(depths):
            return
        counts = np.bincount(depths)
        if len(counts) > len(self.depths):
            counts[: len(self.depths)] += self.depths
            self.depths = counts
        else:
            self.depths[: len(counts)] += counts

    def _served_depth(self) -> ServedDepth | None:
        held = np.flatnonzero(self.depths)
        counts = self.depths[held]
        return ServedDepth.from_histogram(dict(zip(held.tolist(), counts.tolist(), strict=True)))

    def result(self, gates: tuple[Gate, ...], policy: GatePolicy) -> Evaluation:
        scored = len(self.query_ids)
        depth = self._served_depth()
        missing, missing_examples, missing_scored = self._missing()
        values = {spec: column.values() for spec, column in self.values.items()}
        if self.worst.active:
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
                # The checks are about the traces: missing queries scored 0 lack every field by
                # construction, and would read as a field most queries lack.
                [_without_missing(group, missing_scored) for group in segments],
                _Prefix(self.attributes, scored),
            )
        )
        if missing and not missing_scored:
            warnings.append(
                f"{missing:,} of the {len(self.expected):,} queries in the query set "
                f"({self.expected_name}) have no trace and are left out of the means; "
                "missing_trace='zero' (--missing-trace zero) scores them 0, as trec_eval -c does"
            )
        elif missing > missing_scored:
            warnings.append(
                f"{missing - missing_scored:,} queries without a trace have no relevant label "
                "and are left out, as their traces would be under empty_relevant='skip'"
            )
        if not self.partial:
            # Like the segment checks, a whole-input check: one partition's depths are not all.
            warnings.extend(
                depth_warnings(self.metrics, depth, self.settings.served_k, gates, policy)
            )
        if self.mismatch_warning is not None:
            warnings.append(self.mismatch_warning)
        outcomes, coverage = decide(gates, policy, overall, segments)
        summary = Summary(
            read=self.read,
            scored=scored,
            skipped={reason: self.overall.skipped.get(reason, 0) for reason in SKIP_REASONS},
            labeled=self.overall.labeled,
            duplicates_dropped=self.duplicates,
            chunks_collapsed=self.chunks_collapsed,
            doc_ids=None if self.settings.doc_ids is None else str(self.settings.doc_ids),
            invalid_examples=tuple(self.invalid_examples),
            labels_removed_stale=self.overall.labels_removed_stale,
            labels_removed_expired=self.overall.labels_removed_expired,
            lost_all_relevant=self.overall.lost_all_relevant,
            missing_trace=missing,
            missing_examples=tuple(missing_examples),
            missing_scored=missing_scored,
            query_set=self.expected_name,
            expected_queries=None if self.expected is None else len(self.expected),
            outside_set=self.outside,
            served_depth=depth,
            label_sources=dict(self.label_sources),
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
            segment_values={name: self.segment_columns[name] for name in self.segment_fields},
            label_digests=None if self.digests is None else self.digests.values(),
            unscored_query_ids=self._unscored_ids(),
        )

    def _unscored_ids(self) -> Any:
        """The distinct IDs of the valid traces that were not scored (no labels, no relevant
        label), when they were tracked: a saved baseline keeps them, so that a comparison against
        it pairs and counts queries as one against the traces would."""
        import pyarrow as pa
        import pyarrow.compute as pc

        if self.valid_ids is None:
            return None
        parts = [
            part.cast(pa.large_string())
            for part in [*self.valid_ids, fast.text_array(self.valid_ids_pending)]
            if len(part)
        ]
        if not parts:
            return pa.array([], pa.large_string())
        read = pc.unique(pc.drop_null(pa.chunked_array(parts, pa.large_string())))
        scored = self.query_ids.to_arrow()
        return pc.filter(read, pc.invert(pc.is_in(read, value_set=scored)))


def _without_missing(group: Group, missing_scored: int) -> Group:
    """A segment group as the traces alone fill it: the missing queries scored 0 taken out of
    its ``(missing)`` value."""
    if missing_scored and group.key is not None and group.key.value == MISSING_VALUE:
        return replace(group, scored=group.scored - missing_scored)
    return group


class _Prefix(Sequence[dict[str, Any]]):
    """The first ``length`` rows of a sequence, without copying them."""

    def __init__(self, rows: Sequence[dict[str, Any]], length: int) -> None:
        self._rows = rows
        self._length = length

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._length))]
        if not -self._length <= index < self._length:
            raise IndexError("row out of range")
        return self._rows[index % self._length]

    def __iter__(self) -> Any:
        for index, row in enumerate(self._rows):
            if index >= self._length:
                return
            yield row


def _settled_arrays(accepted: list[_Settled]) -> tuple[Any, Any]:
    """The rankings and grades of validated traces as Arrow arrays. IDs the validator let through
    may not be valid UTF-8 (a lone surrogate from a JSON escape); Arrow strings refuse those, so
    such a block goes as bytes (surrogates passed through), which the join compares the same way."""
    import pyarrow as pa

    rankings = [settled.trace.retrieved_ids for settled in accepted]
    grade_items = [list(settled.grades.items()) for settled in accepted]
    text = pa.large_string()
    try:
        return (
            pa.array(rankings, pa.large_list(text)),
            pa.array(grade_items, pa.map_(text, pa.float64())),
        )
    except (pa.ArrowException, UnicodeError):
        raw = pa.large_binary()

        def encoded(value: str) -> bytes:
            return value.encode("utf-8", "surrogatepass")

        return (
            pa.array([[encoded(i) for i in ids] for ids in rankings], pa.large_list(raw)),
            pa.array(
                [[(encoded(i), grade) for i, grade in items] for items in grade_items],
                pa.map_(raw, pa.float64()),
            ),
        )
