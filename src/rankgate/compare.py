"""Comparing retrieval configurations: is the candidate better, worse, or indistinguishable from
the baseline, per metric and per segment?

Two designs (``pairing``):

* **paired**: both sides ranked the same queries (an offline replay of one query set). Queries are
  paired by ID; both sides are scored on the paired queries, segmented by the baseline's
  attributes, and each cell tests the per-query deltas.
* **unpaired**: each side served its own queries (a traffic-split online A/B test). Each side is
  scored on all its queries, segmented by its own attributes, and each cell compares the two means
  (Welch's t-test, a two-sample bootstrap interval).
* **auto** (the default) pairs when at least ``AUTO_PAIRED_SHARE`` of the smaller side's queries
  are on both sides, and says so in ``Pairing.reason``.

The steps, each reusing the evaluation pipeline rather than re-implementing it:

1. read every side once as Arrow columns (``compare_read``), refusing a query ID twice on a side
   (past ``compare_read.HELD_RANKING_BYTES`` of rankings a side keeps only its IDs, labels and
   attributes, and its rankings are read again while it is scored, to bound memory);
2. join labels: a query's labels may come from any side or from a separate labels source, and every
   source that labels a query must agree, or it is an input error naming the query;
3. pair by query ID (``pc.index_in``); queries on one side only are counted and listed;
4. score each side with ``evaluate`` on an Arrow table of its rows (the columnar path), with the
   shared labels;
5. cells from the per-query values (``compare_cells.cells_from_values``): means, the delta, its
   interval, a p-value and an effect size; p-values adjusted across every cell of the run;
6. flag a cell as a regression (or improvement) when its adjusted p is below alpha and its delta is
   beyond the practical margin, or as ``label-limited`` when unjudged documents could decide it
   (``compare_unjudged``: each metric is also scored under every unjudged policy, with judged@k);
   the candidate's own gates (thresholds per segment) are checked too;
7. give every cell left without a flag its minimum detectable effect (``rankgate.power``) and, when
   the policy asks for one (``GatePolicy.min_detectable``), fail a "no regression" that had too
   little power to see a change that size (``Cell.underpowered``).

Every metric here is better when higher, so a negative delta is a loss.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from rankgate import fast
from rankgate.baseline import SavedBaseline, is_saved_baseline, load_baseline
from rankgate.compare_ahead import ScoredAhead, paired_columns, whole_columns
from rankgate.compare_cells import (
    PAIRINGS,
    TESTS,
    TIE_TOLERANCE,
    Cell,
    Significance,
    cells_from_values,
    check_detectable,
    flag_cells,
)
from rankgate.compare_labels import LabelBook
from rankgate.compare_read import (
    NotArrowText,
    Reader,
    SideTable,
    held_side,
    name_of_labels,
    streamed_side,
)
from rankgate.compare_records import (
    CountedSide,
    Pairing,
    PairLister,
    RecordRun,
    Variant,
    _as_variant,
    _check_distinct_names,
    score_by_records,
)
from rankgate.compare_unjudged import (
    LABEL_LIMITED,
    UnjudgedPair,
    evidence_specs,
    judged_depth,
    requested_metrics,
    unjudged_in_top,
)
from rankgate.errors import ConfigError, UsageError
from rankgate.evaluate import Evaluation, InvalidRecord, Settings, evaluate, require_extra
from rankgate.gates import INTERVAL_BOUNDS, Gate, GateOutcome, GatePolicy, parse_gate
from rankgate.id_index import IdIndex
from rankgate.segments import SegmentKey, segment_fields_of
from rankgate.spec import MetricSpec

__all__ = [
    "AUTO_PAIRED_SHARE",
    "PAIRINGS",
    "TESTS",
    "TIE_TOLERANCE",
    "CandidateResult",
    "Cell",
    "Comparison",
    "Pairing",
    "Significance",
    "UnjudgedPair",
    "Variant",
    "cells_from_values",
    "compare",
    "flag_cells",
]

ProgressCallback = Callable[[str, int], None]
UNPAIRED_EXAMPLES_KEPT = 20
# ``auto`` pairs when at least this share of the smaller side's queries is on both sides. A replay
# of one query set shares ~100%; a traffic split shares only the queries that recur by chance
# (a few percent). At half, the paired test uses most of the data and the unpaired test would
# count the shared queries twice as independent draws.
AUTO_PAIRED_SHARE = 0.5


@dataclass(frozen=True, eq=False)
class CandidateResult:
    """One candidate against the baseline: pairing, both evaluations, the cells, and its gates.

    Paired: both evaluations score the paired queries, aligned (element i is the same query), and
    ``segments`` holds each scored query's segment per field (the baseline's attributes).
    Unpaired: each evaluation scores its side's own queries; ``segments`` is the baseline's and
    ``candidate_segments`` the candidate's.
    """

    name: str
    pairing: Pairing
    baseline: Evaluation
    candidate: Evaluation
    cells: tuple[Cell, ...]
    segments: dict[str, Sequence[str]] = field(default_factory=dict)
    candidate_segments: dict[str, Sequence[str]] = field(default_factory=dict)
    #: Whether a label-limited cell fails this candidate (``Significance.fail_on_label_limited``).
    fail_on_label_limited: bool = False

    @property
    def design(self) -> str:
        return self.pairing.design

    def per_query(self) -> list[dict[str, Any]]:
        """One dict per scored paired query: ``query_id``, its segment values, and per metric the
        baseline's value, the candidate's and the delta (``"ndcg@10"``, ``"ndcg@10 baseline"``...).

        Unpaired: one dict per scored query of either side, with ``side`` (``"baseline"`` or
        ``"candidate"``), its segment values and each metric's value.
        """
        if self.design == "unpaired":
            return self._per_query_unpaired()
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

    def _per_query_unpaired(self) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        for side, evaluation, segments in (
            ("baseline", self.baseline, self.segments),
            ("candidate", self.candidate, self.candidate_segments),
        ):
            columns = [(str(spec), evaluation.values[spec].tolist()) for spec in evaluation.metrics]
            texts = {name: list(values) for name, values in segments.items()}
            for index, query_id in enumerate(evaluation.query_ids):
                row: dict[str, Any] = {"query_id": query_id, "side": side}
                row.update((name, values[index]) for name, values in texts.items())
                row.update((name, values[index]) for name, values in columns)
                rows.append(row)
        return rows

    def largest_losses(self, cell: Cell, count: int = 5) -> list[tuple[str, float]]:
        """The queries of ``cell``'s group that lost most on its metric: (query_id, delta), worst
        first; only queries whose value dropped. Empty when unpaired: no query is on both sides."""
        if self.design == "unpaired":
            return []
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
            f"<CandidateResult {self.name} ({self.design}): {self.pairing.paired:,} paired, "
            f"{len(self.cells)} "
            f"cells, {flags} regression(s); {'PASS' if self.passed else 'FAIL'}>"
        )

    @property
    def gate_failures(self) -> tuple[GateOutcome, ...]:
        return tuple(outcome for outcome in self.candidate.gates if not outcome.passed)

    @property
    def label_limited(self) -> tuple[Cell, ...]:
        """Cells whose verdict unjudged documents could decide (see ``flag_cells``)."""
        return tuple(cell for cell in self.cells if cell.status == LABEL_LIMITED)

    @property
    def underpowered(self) -> tuple[Cell, ...]:
        """Cells whose "no regression" had too little power for the policy's ``min_detectable``."""
        return tuple(cell for cell in self.cells if cell.underpowered is not None)

    @property
    def passed(self) -> bool:
        """False on a missed gate, a regression or an underpowered cell, or a label-limited cell
        when it fails."""
        if self.fail_on_label_limited and self.label_limited:
            return False
        if self.underpowered:
            return False
        return self.candidate.passed and not any(c.flag == "regression" for c in self.cells)

    def cell_queries(self, cell: Cell, side: str = "candidate") -> list[str]:
        """The IDs of the queries behind ``cell`` on ``side`` (``"candidate"`` or
        ``"baseline"``; paired, the same queries)."""
        evaluation = self.candidate if side == "candidate" else self.baseline
        segments = (
            self.candidate_segments
            if side == "candidate" and self.design == "unpaired"
            else self.segments
        )
        ids = list(evaluation.query_ids)
        if cell.segment is None:
            return ids
        column = segments[cell.segment.field]
        return [
            query_id
            for query_id, value in zip(ids, column, strict=True)
            if value == cell.segment.value
        ]


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
    pairing: str = "paired"
    #: The unjudged (query, document) pairs that decide the label-limited cells, when asked for
    #: (``compare(list_unjudged=True)``); None otherwise.
    unjudged_pairs: tuple[UnjudgedPair, ...] | None = None
    #: ``compare --ppi``: the prediction-powered deltas (``rankgate.ppi_eval.PPIComparison``).
    ppi: Any = None

    @property
    def designs(self) -> dict[str, str]:
        """Per candidate, the design it was compared with and why: ``{name: "paired: ..."}``."""
        return {
            result.name: f"{result.pairing.design}: {result.pairing.reason}"
            for result in self.results
        }

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
    def label_limited(self) -> tuple[Cell, ...]:
        """Cells whose verdict unjudged documents could decide (neither flagged nor failing
        unless ``Significance.fail_on_label_limited``)."""
        return tuple(cell for cell in self.cells if cell.status == LABEL_LIMITED)

    @property
    def underpowered(self) -> tuple[Cell, ...]:
        """Cells that fail ``GatePolicy.min_detectable``: not flagged, and unable to have seen a
        change of that size at 80% power."""
        return tuple(cell for cell in self.cells if cell.underpowered is not None)

    @property
    def next_step(self) -> str | None:
        """What to do about the label-limited cells, in words (None when there are none)."""
        limited = self.label_limited
        if not limited:
            return None
        most = max(cell.evidence.unjudged_pairs for cell in limited if cell.evidence)
        listed = (
            f"the {len(self.unjudged_pairs):,} distinct pairs are listed"
            if self.unjudged_pairs is not None
            else "`rankgate labels todo` with the same sources lists them first, under a "
            "budget, for annotators; --unjudged-pairs FILE lists them all as JSON Lines"
        )
        verdict = (
            "they fail this run (--fail-on-label-limited)"
            if self.significance.fail_on_label_limited
            else "they pass unless --fail-on-label-limited is given"
        )
        return (
            f"{len(limited):,} label-limited cell(s) wait for labels: judge the unjudged (query, "
            f"document) pairs that decide them (up to {most:,} in one cell; {listed}), add the "
            f"labels (--labels) and compare again; {verdict}"
        )

    @property
    def passed(self) -> bool:
        """False when any cell is a regression or underpowered, or any candidate misses a gate
        (or, under ``Significance.fail_on_label_limited``, any cell is label-limited)."""
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
                ("design", pa.string()),
                ("queries", pa.int64()),
                ("baseline_queries", pa.int64()),
                ("candidate_queries", pa.int64()),
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
                ("judged_depth", pa.int64()),
                ("baseline_judged", pa.float64()),
                ("candidate_judged", pa.float64()),
                ("unjudged_pairs", pa.int64()),
                ("baseline_unjudged_pairs", pa.int64()),
                ("delta_nonrelevant", pa.float64()),
                ("delta_condensed", pa.float64()),
                ("delta_relevant", pa.float64()),
                ("label_limited_reason", pa.string()),
                ("baseline_sd", pa.float64()),
                ("candidate_sd", pa.float64()),
                ("delta_sd", pa.float64()),
                ("minimum_detectable_effect", pa.float64()),
                ("detectable_alpha", pa.float64()),
                ("min_detectable", pa.float64()),
                ("underpowered", pa.string()),
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
            f"{result.name} ({result.pairing.paired:,} paired, {result.design})"
            for result in self.results
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
    pairing: str = "paired",
    progress: Callable[[str, int, int, int | None], None] | None = None,
    list_unjudged: bool = False,
) -> Comparison:
    """Compare a baseline with one or more candidates.

    Args:
        baseline, candidates: trace sources as ``evaluate`` reads them (paths, lists of dicts,
            tables), or ``Variant(name, source)`` to choose the reported name. With
            ``variant_field``, ``baseline`` is the one source and ``candidates`` are values of that
            field: the first is the baseline's value (``compare(path, "control", "new",
            variant_field="config")``); without candidate values every other value is a candidate.
        metrics, gates, settings, policy: as for ``evaluate``; the gates are checked on each
            candidate, per segment.
        significance: test, correction, alpha and margin (defaults: paired t-test, Holm, 0.05, 0).
            Every cell left without a flag carries its minimum detectable effect; the policy's
            ``min_detectable`` fails those that could not have seen a change that size.
        labels: a source of labels (records with ``query_id`` and ``relevant_ids`` or
            ``relevance_scores``, or a TREC qrels file, recognised by name or layout).
        labels_format: the label file's format (``rankgate.labels.LABEL_FORMATS``), when
            detection is not enough.
        pairing: ``"paired"`` (the same queries on both sides: per-query deltas), ``"unpaired"``
            (each side its own queries: Welch's t-test on the two means) or ``"auto"``: paired
            when at least ``AUTO_PAIRED_SHARE`` of the smaller side's queries are on both sides.
            The default here is ``"paired"`` (a library call says what it means); the CLI's is
            ``auto``.
            Each candidate's choice and its reason are in ``CandidateResult.pairing``.
        progress: called with (source name, records read, units done, units in total or None).
        list_unjudged: list the unjudged (query, document) pairs that decide the label-limited
            cells in ``Comparison.unjudged_pairs`` (each arm's top k of the cells' queries); needs
            the rankings in memory, so not with sides past ``compare_read.HELD_RANKING_BYTES`` or
            with a label filter (stale labels are removed inside the evaluation).

    Raises:
        InputError: a malformed record, a query ID twice on one side, or a query whose labels differ
            between sources.
        UsageError: too few sides, a variant value that is not in the data, or no shared query
            under ``pairing="paired"``.
        ConfigError: a ``min_detectable`` not above the margin, or other settings out of range.
    """
    settings = settings or Settings()
    if isinstance(gates, (str, Gate)):  # one gate, not a sequence of characters
        gates = [gates]
    if settings.resamples < 1:
        raise ConfigError("compare needs bootstrap resamples (>= 1) for the intervals of deltas")
    if pairing not in PAIRINGS:
        raise ConfigError(f"pairing must be one of {', '.join(PAIRINGS)}, got {pairing!r}")
    policy = policy or GatePolicy()
    significance = significance or Significance()
    check_detectable(policy, significance)
    if list_unjudged and settings.label_filter.active:
        raise UsageError(
            "listing unjudged pairs does not go with a label filter (--corpus, --max-label-age): "
            "the labels it removes are removed inside the evaluation"
        )
    # Each metric is also scored under every unjudged policy, with judged@k, for the evidence.
    requested = requested_metrics(metrics, gates, policy)
    depth = judged_depth(requested)
    extra = evidence_specs(requested, depth)
    try:
        run = _score_by_columns(
            baseline,
            candidates,
            metrics=requested,
            extra_metrics=extra,
            gates=gates,
            settings=settings,
            policy=policy,
            labels=labels,
            labels_format=labels_format,
            variant_field=variant_field,
            input_format=input_format,
            pairing=pairing,
            progress=progress,
        )
    except NotArrowText:
        # Text Arrow cannot hold (a lone surrogate, which JSON escapes allow): the record path.
        run = score_by_records(
            baseline,
            candidates,
            metrics=requested,
            extra_metrics=extra,
            gates=gates,
            settings=settings,
            policy=policy,
            labels=labels,
            labels_format=labels_format,
            variant_field=variant_field,
            input_format=input_format,
            pairing=pairing,
            design_of=_design,
            examples_kept=UNPAIRED_EXAMPLES_KEPT,
            progress=progress,
        )
    names = run.names
    pending = [_Scored(*found) for found in run.scored]
    raw_cells = [
        cells_from_values(
            name,
            list(scored.baseline.metrics),
            scored.baseline.values,
            scored.candidate.values,
            design="paired" if scored.pairing.design == "paired" else "unpaired",
            segments=_segment_keys(scored),
            baseline_segments=scored.segments,
            candidate_segments=scored.candidate_segments,
            policy=policy,
            significance=significance,
            seed=settings.seed,
            resamples=settings.resamples,
            depth=depth,
        )
        for name, scored in zip(names[1:], pending, strict=True)
    ]
    finished = flag_cells(raw_cells, significance)
    results = tuple(
        CandidateResult(
            name,
            scored.pairing,
            scored.baseline,
            scored.candidate,
            cells,
            scored.segments,
            scored.candidate_segments,
            significance.fail_on_label_limited,
        )
        for name, scored, cells in zip(names[1:], pending, finished, strict=True)
    )
    pairs = None
    if list_unjudged:
        if run.lister is None:
            raise UsageError("these sides cannot list their unjudged pairs")
        pairs = pairs_to_judge(names[0], results, run.lister)
    return Comparison(
        baseline=names[0],
        results=results,
        significance=significance,
        settings=settings,
        policy=policy,
        labels_source=run.labels_name,
        read=run.read,
        invalid=run.invalid,
        invalid_examples=run.invalid_examples,
        pairing=pairing,
        unjudged_pairs=pairs,
    )


def pairs_to_judge(
    baseline: str, results: Sequence[CandidateResult], lister: PairLister
) -> tuple[UnjudgedPair, ...]:
    """The unjudged (query, document) pairs of every label-limited cell: in each arm's top k
    (the cell's judged depth) of the cell's queries, each pair once (the candidate's listing
    first), candidates in order, then queries and ranks as ranked."""
    found: dict[tuple[str, str], UnjudgedPair] = {}
    for result in results:
        for side, side_name in (("candidate", result.name), ("baseline", baseline)):
            depths: dict[str, int] = {}
            for cell in result.label_limited:
                assert cell.evidence is not None  # label-limited cells carry their evidence
                for query_id in result.cell_queries(cell, side):
                    depths[query_id] = max(depths.get(query_id, 0), cell.evidence.depth)
            if not depths:
                continue
            for query_id, doc_id, rank in lister(side_name, depths):
                found.setdefault(
                    (query_id, doc_id), UnjudgedPair(query_id, doc_id, rank, side, result.name)
                )
    return tuple(found.values())


def _score_by_columns(
    baseline: Any,
    candidates: tuple[Any, ...],
    *,
    metrics: Iterable[str | MetricSpec] | None,
    extra_metrics: Sequence[MetricSpec],
    gates: Sequence[Gate | str],
    settings: Settings,
    policy: GatePolicy,
    labels: Any,
    labels_format: str | None,
    variant_field: str | None,
    input_format: str | None,
    pairing: str,
    progress: Callable[[str, int, int, int | None], None] | None,
) -> RecordRun:
    """Read, label, pair and score every side through Arrow tables and ``evaluate``."""
    segment_fields = segment_fields_of(settings, policy)
    stamp = settings.label_filter.labeled_at_field if settings.label_filter.active else None
    attributes = [*segment_fields, *([stamp] if stamp else [])]
    _import_statistics_meanwhile()
    reader = Reader(settings, input_format, attributes, progress)
    if is_saved_baseline(baseline) and variant_field is None:
        return _score_against_saved(
            load_baseline(baseline),
            candidates,
            reader=reader,
            metrics=metrics,
            extra_metrics=extra_metrics,
            gates=gates,
            settings=settings,
            policy=policy,
            labels=labels,
            labels_format=labels_format,
            pairing=pairing,
            segment_fields=segment_fields,
            stamp=stamp,
        )
    book = LabelBook(settings, stamp)
    scorer = _Scorer(metrics, gates, settings, policy, book, segment_fields, stamp)
    scorer.extra = list(extra_metrics)
    # With no labels file and no label ages, the baseline's labels are the book's first: sides
    # can then be scored while they are read (``compare_ahead``).
    early = labels is None and stamp is None and variant_field is None and fast.available()
    if variant_field is not None:
        sides = reader.split(baseline, variant_field, [str(value) for value in candidates])
    else:
        if not candidates:
            raise UsageError("compare needs a baseline and at least one candidate")
        named = [_as_variant(item, index) for index, item in enumerate((baseline, *candidates))]
        _check_distinct_names(named)
        if early:
            sides = _read_sides(named, reader, scorer)
        else:
            sides = [reader.read(variant.data, variant.name) for variant in named]

    labels_name = None
    if labels is not None:
        labels_name = name_of_labels(labels)
        book.add_labels_source(labels, reader, labels_format)
    before = None if book.shared is None else book.shared.num_rows
    try:
        for side in sides[1:] if early else sides:
            book.add_side(side)
    except BaseException:
        scorer.drop_aheads()
        raise
    # Labels a candidate adds (a query no earlier source labeled) would have changed what the
    # sides scored while read were given.
    scorer.book_settled = (before or 0) == (0 if book.shared is None else book.shared.num_rows)
    base = sides[0]
    try:
        pending = [_scored(base, side, pairing, scorer) for side in sides[1:]]
    finally:
        scorer.drop_aheads()
    return RecordRun(
        [side.name for side in sides],
        [(s.pairing, s.baseline, s.candidate, s.segments, s.candidate_segments) for s in pending],
        {side.name: side.read for side in sides} | reader.extra_read,
        {side.name: side.invalid for side in sides} | reader.extra_invalid,
        tuple(reader.invalid_examples),
        labels_name,
        _column_lister(sides, book, settings),
    )


def _score_against_saved(
    saved: SavedBaseline,
    candidates: tuple[Any, ...],
    *,
    reader: Reader,
    metrics: Iterable[str | MetricSpec] | None,
    extra_metrics: Sequence[MetricSpec],
    gates: Sequence[Gate | str],
    settings: Settings,
    policy: GatePolicy,
    labels: Any,
    labels_format: str | None,
    pairing: str,
    segment_fields: Sequence[str],
    stamp: str | None,
) -> RecordRun:
    """Candidates read and scored as usual, against a baseline file's saved values: the same
    pairing, segments and cells as against the baseline's traces, once the file is shown to
    hold what this run scores (``SavedBaseline.check``) with the same labels."""
    if not candidates:
        raise UsageError("compare needs a baseline and at least one candidate")
    requested = requested_metrics(metrics, gates, policy)
    saved.check(settings, requested, segment_fields)
    named = [_as_variant(item, index) for index, item in enumerate(candidates, start=1)]
    _check_distinct_names([Variant(saved.name, None), *named])
    sides = [reader.read(variant.data, variant.name) for variant in named]
    book = LabelBook(settings, stamp)
    labels_name = None
    if labels is not None:
        labels_name = name_of_labels(labels)
        book.add_labels_source(labels, reader, labels_format)
    for side in sides:
        book.add_side(side)
    scorer = _Scorer(metrics, gates, settings, policy, book, segment_fields, stamp)
    # The evidence the file holds (it holds the requested metrics: checked above).
    held = saved.specs()
    scorer.extra = [spec for spec in extra_metrics if spec in held]
    scorer.digests = True
    checked_gates = [parse_gate(g) if isinstance(g, str) else g for g in gates]
    pending = [
        _scored_against_saved(saved, side, pairing, scorer, requested, checked_gates)
        for side in sides
    ]
    return RecordRun(
        [saved.name, *(side.name for side in sides)],
        [(s.pairing, s.baseline, s.candidate, s.segments, s.candidate_segments) for s in pending],
        {saved.name: saved.queries} | {side.name: side.read for side in sides} | reader.extra_read,
        {saved.name: 0} | {side.name: side.invalid for side in sides} | reader.extra_invalid,
        tuple(reader.invalid_examples),
        labels_name,
        None,
    )


def _scored_against_saved(
    saved: SavedBaseline,
    side: SideTable,
    requested: str,
    scorer: _Scorer,
    metrics: Sequence[MetricSpec],
    gates: Sequence[Gate],
) -> _Scored:
    import pyarrow as pa
    import pyarrow.compute as pc

    # Every query the baseline read, scored ones first: pairing and the overlap share count the
    # queries it read without labels too, as a comparison against its traces would.
    base_ids = pa.chunked_array(
        [*saved.table.column("query_id").chunks, saved.unscored_ids], pa.large_string()
    ).combine_chunks()
    side_ids = side.table.column("query_id")
    in_base = fast.numpy_filled(pc.index_in(side_ids, value_set=base_ids), -1).astype(np.int64)
    in_side = fast.numpy_filled(pc.index_in(base_ids, value_set=side_ids), -1).astype(np.int64)
    base_rows = np.flatnonzero(in_side >= 0)
    paired = len(base_rows)
    baseline_only = np.flatnonzero(in_side < 0)
    candidate_only = np.flatnonzero(in_base < 0)
    smaller = min(saved.queries, side.queries)
    share = paired / smaller if smaller else 0.0
    design, reason = _design(requested, share, paired, saved, side)
    pairing = Pairing(
        paired=paired,
        baseline_only=len(baseline_only),
        candidate_only=len(candidate_only),
        baseline_only_ids=tuple(
            base_ids.take(fast.index_array(baseline_only[:UNPAIRED_EXAMPLES_KEPT])).to_pylist()
        ),
        candidate_only_ids=tuple(
            side_ids.take(fast.index_array(candidate_only[:UNPAIRED_EXAMPLES_KEPT])).to_pylist()
        ),
        design=design,
        requested=requested,
        shared_share=share,
        reason=reason,
    )
    settings = scorer.settings
    if design == "unpaired":
        everything = np.arange(saved.scored, dtype=np.int64)
        before = saved.evaluation(everything, metrics, gates, settings, scorer.policy)
        after, after_segments = _whole(side, scorer)
        return _Scored(pairing, before, after, scorer._segments(before), after_segments)
    # The candidate's paired rows, segmented by the baseline's saved values (a query the baseline
    # did not score has none: if the candidate scores it, the run is refused below).
    attributes = _saved_attributes(saved).take(fast.index_array(base_rows))
    side_rows = in_side[base_rows]
    order = np.argsort(side_rows, kind="stable")
    after, _ = scorer.score(
        _rows(side.table, np.sort(side_rows)), attributes.take(fast.index_array(order)), side
    )
    # The baseline rows of the queries the candidate scored, in its order.
    rows = fast.numpy_of(pc.index_in(_ids(after), value_set=base_ids)).astype(np.int64)
    added = rows[rows >= saved.scored]
    if len(added):
        first = base_ids.take(pa.array(added[:3])).to_pylist()
        raise UsageError(
            f"{saved.name}: {len(added):,} paired queries the baseline read without labels are "
            f"scored in {side.name} (first: {', '.join(map(repr, first))}): they have labels "
            "now that the baseline was not scored with; save a new baseline with these labels"
        )
    if len(rows) != np.count_nonzero(base_rows < saved.scored):
        unscored = np.setdiff1d(base_rows[base_rows < saved.scored], rows)
        first = base_ids.take(pa.array(unscored[:3])).to_pylist()
        raise UsageError(
            f"{saved.name}: {len(unscored):,} paired queries the baseline scored are not scored "
            f"in {side.name} (first: {', '.join(map(repr, first))}): their labels are gone or "
            "their traces invalid there; the baseline would not be comparable"
        )
    saved.check_labels(rows, after.label_digests, after.query_ids)
    before = saved.evaluation(rows, metrics, gates, settings, scorer.policy)
    return _Scored(pairing, before, after, scorer._segments(before), {})


def _saved_attributes(saved: SavedBaseline) -> Any:
    """The query ID and segment columns of every query a baseline file read: its scored rows,
    then the unscored ones (segment values empty: the file keeps none for them)."""
    import pyarrow as pa

    names = ["query_id", *(n for n in saved.table.schema.names if n.startswith("segment:"))]
    scored = saved.table.select(names)
    blank = pa.array([""] * len(saved.unscored_ids), pa.large_string())
    unscored = pa.table(
        {name: saved.unscored_ids if name == "query_id" else blank for name in names}
    )
    return pa.concat_tables([scored, unscored.cast(scored.schema)])


def _column_lister(sides: Sequence[SideTable], book: LabelBook, settings: Settings) -> PairLister:
    """Lists a side's unjudged documents in the top k of some of its queries, from its table and
    the shared labels (under the document-ID mapping when one is set, as scoring does)."""
    by_name = {side.name: side for side in sides}

    def unjudged(name: str, depths: dict[str, int]) -> list[tuple[str, str, int]]:
        import pyarrow as pa
        import pyarrow.compute as pc

        side = by_name[name]
        if side.streamed:
            raise UsageError(
                f"{name} is too large to hold its rankings in memory, which listing unjudged "
                "pairs needs; list them from a sample of the queries"
            )
        wanted = pa.array(list(depths), type=pa.large_string())
        rows = side.table.filter(pc.is_in(side.table.column("query_id"), value_set=wanted))
        relevant, scores, _ = book.labels_for(rows.column("query_id"), rows)
        retrieved = rows.column("retrieved_ids")
        mapping = settings.doc_ids
        if mapping is not None:
            from rankgate.doc_ids import map_labels, map_rankings

            retrieved, _ = map_rankings(retrieved, mapping)
            relevant, _ = map_rankings(relevant, mapping)
            scores = map_labels(scores, mapping)
        listed: list[tuple[str, str, int]] = []
        for query_id, ranking, ids, grades in zip(
            rows.column("query_id").to_pylist(),
            retrieved.to_pylist(),
            relevant.to_pylist(),
            scores.to_pylist(),
            strict=True,
        ):
            judged = set(ids or ()) | {doc for doc, _ in grades or ()}
            listed.extend(
                (query_id, doc, rank)
                for doc, rank in unjudged_in_top(ranking or [], judged, depths[query_id])
            )
        return listed

    return unjudged


# --- pairing and scoring ----------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class _Scored:
    pairing: Pairing
    baseline: Evaluation
    candidate: Evaluation
    segments: dict[str, Sequence[str]]
    candidate_segments: dict[str, Sequence[str]]


class _Scorer:
    """Scores a side's rows with ``evaluate`` on an Arrow table (the columnar path), with the
    shared labels and the segment attributes it is given."""

    def __init__(
        self,
        metrics: Iterable[str | MetricSpec] | None,
        gates: Sequence[Gate | str],
        settings: Settings,
        policy: GatePolicy,
        book: LabelBook,
        segment_fields: Sequence[str],
        stamp: str | None,
    ) -> None:
        self.metrics = None if metrics is None else list(metrics)
        self.gates = gates
        self.policy = policy
        self.book = book
        self.segment_fields = list(segment_fields)
        self.stamp = stamp
        self.fields = settings.fields
        self.extra: list[MetricSpec] = []
        # Keep each scored query's label digest (compared with a saved baseline's).
        self.digests = False
        # The sides' own intervals are not reported here; they are needed only by gates that
        # decide on an interval bound. Skipping them halves the time on large inputs.
        on_bounds = policy.gate_on in INTERVAL_BOUNDS or any(
            rule.gate_on in INTERVAL_BOUNDS for rule in policy.rules
        )
        self.settings = settings if on_bounds else replace(settings, resamples=0)
        # Intervals of the sides are resampled in query order: keep it the baseline's.
        self.needs_order = on_bounds
        self.whole: dict[str, tuple[Evaluation, dict[str, Sequence[str]]]] = {}
        # Sides scored while they were read (``compare_ahead``), by name; usable only while the
        # label book is as it was when they were scored.
        self.aheads: dict[str, ScoredAhead] = {}
        self.book_settled = False
        # The side scored whole while read (the baseline); the others were scored paired.
        self.first: SideTable | None = None
        self._indexes: dict[str, IdIndex | None] = {}

    def score(
        self, rows: Any, attributes_from: Any, side: SideTable | None = None
    ) -> tuple[Evaluation, dict[str, Sequence[str]]]:
        """Evaluate ``rows`` (a side's table) segmented by ``attributes_from``'s attribute columns
        (a table of as many rows: the side itself, or the paired baseline rows). ``side``: the
        side ``rows`` come from, whose rankings are read again when it let them go."""
        streamed = side is not None and side.streamed
        table = self.meta(rows, attributes_from, rankings=not streamed)
        if side is None:
            source = table
        elif streamed:
            source = streamed_side(side, rows, table, self.fields)
        else:
            source = held_side(side, table)
        evaluation = self.evaluate(source)
        return evaluation, self._segments(evaluation)

    def meta(self, rows: Any, attributes_from: Any, *, rankings: bool = False) -> Any:
        """The table ``evaluate`` reads for ``rows``: query IDs, the shared labels, the segment
        attributes of ``attributes_from`` (and the rankings, when asked and held)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        query_ids = rows.column("query_id")
        relevant, scores, stamps = self.book.labels_for(query_ids, rows)
        columns: dict[str, Any] = {self.fields.query_id: query_ids}
        if rankings:
            columns[self.fields.retrieved_ids] = rows.column("retrieved_ids")
        for name, labels in (
            (self.fields.relevant_ids, relevant),
            (self.fields.relevance_scores, scores),
        ):
            # A column of nulls says what an absent one says (no labels); the compiled join
            # wants buffers an all-null array built without values may not have.
            if labels.null_count < len(labels):
                columns[name] = labels
        for name in self.segment_fields:
            columns[name] = attributes_from.column("segment:" + name)
        if self.stamp is not None:
            own = attributes_from.column("segment:" + self.stamp)
            columns[self.stamp] = pc.coalesce(stamps, own) if len(own) else stamps
        return pa.table(columns)

    def evaluate(self, source: Any) -> Evaluation:
        return evaluate(
            source,
            self.metrics,
            self.gates,
            settings=self.settings,
            policy=self.policy,
            extra_metrics=self.extra,
            label_digests=self.digests,
        )

    def ahead_for(
        self, side: SideTable, rows: Any, attributes_from: Any
    ) -> tuple[Evaluation, dict[str, Sequence[str]]] | None:
        """The evaluation of ``side`` made while it was read, when it is the one ``score(rows,
        attributes_from, side)`` would give: the same rows (every row handed over, none since
        dropped as a repeat), and labels no later source changed. Its rows read back come from
        the side read again, as ``score``'s would."""
        ahead = self.aheads.get(side.name)
        if ahead is None or not side.streamed or not self.book_settled:
            return None
        evaluation = ahead.result()
        if evaluation is None or ahead.rows != rows.num_rows or ahead.source is None:
            return None
        # Rows read back (attributes, examples) are rare: what reads them is built when needed.
        ahead.source.bind(
            lambda: streamed_side(side, rows, self.meta(rows, attributes_from), self.fields)
        )
        return evaluation, self._segments(evaluation)

    def index_of(self, side: SideTable) -> IdIndex | None:
        """``side``'s query IDs by hash (built once: every candidate is paired with it)."""
        if side.name not in self._indexes:
            index = IdIndex(side.table.column("query_id"))
            self._indexes[side.name] = index if index.hashed else None
        return self._indexes[side.name]

    def drop_aheads(self) -> None:
        """Stop the scoring of sides while read (the comparison failed or is done)."""
        for ahead in self.aheads.values():
            ahead.stop()

    @staticmethod
    def _segments(evaluation: Evaluation) -> dict[str, Sequence[str]]:
        """Each scored query's segment per field, aligned with the evaluation's query_ids."""
        fields = dict.fromkeys(g.key.field for g in evaluation.segments if g.key)
        return {name: evaluation.segment_column(name) for name in fields}


def _scored(base: SideTable, side: SideTable, requested: str, scorer: _Scorer) -> _Scored:
    import pyarrow.compute as pc

    base_ids = base.table.column("query_id")
    side_ids = side.table.column("query_id")
    index = scorer.index_of(base) if fast.available() else None
    if index is not None:
        # Each side's IDs are distinct: either direction of the match gives the other.
        in_base = index.find(side_ids.combine_chunks())
        in_side = np.full(base.queries, -1, dtype=np.int64)
        matched = np.flatnonzero(in_base >= 0)
        in_side[in_base[matched]] = matched
    else:
        in_base = fast.numpy_filled(pc.index_in(side_ids, value_set=base_ids), -1).astype(np.int64)
        in_side = fast.numpy_filled(pc.index_in(base_ids, value_set=side_ids), -1).astype(np.int64)
    base_rows = np.flatnonzero(in_side >= 0)  # paired, in the baseline's order
    paired = len(base_rows)
    baseline_only = np.flatnonzero(in_side < 0)
    candidate_only = np.flatnonzero(in_base < 0)
    smaller = min(base.queries, side.queries)
    share = paired / smaller if smaller else 0.0
    design, reason = _design(requested, share, paired, base, side)
    pairing = Pairing(
        paired=paired,
        baseline_only=len(baseline_only),
        candidate_only=len(candidate_only),
        baseline_only_ids=tuple(
            base_ids.take(fast.index_array(baseline_only[:UNPAIRED_EXAMPLES_KEPT])).to_pylist()
        ),
        candidate_only_ids=tuple(
            side_ids.take(fast.index_array(candidate_only[:UNPAIRED_EXAMPLES_KEPT])).to_pylist()
        ),
        design=design,
        requested=requested,
        shared_share=share,
        reason=reason,
    )
    if design == "unpaired":
        before, before_segments = _whole(base, scorer)
        after, after_segments = _whole(side, scorer)
        return _Scored(pairing, before, after, before_segments, after_segments)
    # Both sides are segmented by the baseline's attributes, so a query is in the same segment on
    # both; its labels (and their timestamps) are the joined ones. Rankings are the bulk of a
    # table: they are filtered (a copy in place order) rather than reordered where that suffices.
    base_paired = _rows(base.table, base_rows)
    side_rows = in_side[base_rows]
    in_order = len(side_rows) < 2 or bool(np.all(np.diff(side_rows) > 0))
    ahead = _scored_ahead(base, side, base_paired, side_rows, in_order, scorer)
    if ahead is not None:
        before, segments, after = ahead
        if len(before.query_ids) != len(after.query_ids):  # same labels, same attributes
            raise AssertionError("baseline and candidate scored different queries")
        return _Scored(pairing, before, after, segments, {})
    # The two sides are scored at once, the candidate in a thread of its own: the join and the
    # kernels release the GIL, and each side's scoring is independent of the other's.
    with ThreadPoolExecutor(1, thread_name_prefix="rankgate-candidate") as pool:
        # A streamed side is read in its own order; it is large, so its intervals are normal
        # ones, which do not depend on the order.
        if in_order or (scorer.needs_order and not side.streamed):
            candidate = pool.submit(scorer.score, _rows(side.table, side_rows), base_paired, side)
        else:
            # The candidate lists the shared queries in another order: score them in its order
            # with the baseline's attributes, then put the values in the baseline's order.
            order = np.argsort(side_rows, kind="stable")
            in_candidate_order = np.sort(side_rows)
            attributes = base_paired.take(fast.index_array(order))
            candidate = pool.submit(
                scorer.score, _rows(side.table, in_candidate_order), attributes, side
            )
        # Should the baseline fail, leaving the block waits for the candidate, then raises.
        before, segments = scorer.score(base_paired, base_paired, base)
        after, _ = candidate.result()
    if not (in_order or (scorer.needs_order and not side.streamed)):
        after = _reordered(after, before)
    if len(before.query_ids) != len(after.query_ids):  # same labels, same attributes
        raise AssertionError("baseline and candidate scored different queries")
    return _Scored(pairing, before, after, segments, {})


def _import_statistics_meanwhile() -> None:
    """Import what the cells' tests and power use (scipy: about a second) in a thread, while the
    sides are read, rather than after them. Not a daemon: an import cut short at exit could
    leave a module half made for an exit handler."""
    import threading

    def load() -> None:
        try:
            import scipy.optimize
            import scipy.special
            import scipy.stats  # noqa: F401
        except Exception:  # the import where a module is used says what is wrong
            return

    threading.Thread(target=load, name="rankgate-imports").start()


def _read_sides(named: Sequence[Variant], reader: Reader, scorer: _Scorer) -> list[SideTable]:
    """Each side read and, from where it lets its rankings go, scored as it is read
    (``compare_ahead``); the baseline's labels go into the book as soon as it is read, for the
    candidates' paired rows."""
    sides: list[SideTable] = []
    try:
        for variant in named:
            if sides:
                columns = paired_columns(
                    scorer.fields, scorer.segment_fields, sides[0], scorer.book, scorer.index_of
                )
            else:
                columns = whole_columns(scorer.fields, scorer.segment_fields)
            ahead = ScoredAhead(variant.name, columns, scorer.evaluate)
            scorer.aheads[variant.name] = ahead
            side = reader.read(variant.data, variant.name, ahead)
            ahead.close()
            if not sides:
                scorer.book.add_side(side)
                scorer.first = side
            sides.append(side)
    except BaseException:
        scorer.drop_aheads()
        raise
    return sides


def _scored_ahead(
    base: SideTable,
    side: SideTable,
    base_paired: Any,
    side_rows: npt.NDArray[np.int64],
    in_order: bool,
    scorer: _Scorer,
) -> tuple[Evaluation, dict[str, Sequence[str]], Evaluation] | None:
    """The paired sides' evaluations, from what was scored while they were read where that is
    what scoring them now would give (``_Scorer.ahead_for``), the rest scored now as ``_scored``
    scores them; None when neither side was scored while read."""

    order = None if in_order else np.argsort(side_rows, kind="stable")
    in_candidate_order = side_rows if order is None else np.sort(side_rows)
    candidate_rows = _rows(side.table, in_candidate_order)
    attributes = base_paired if order is None else base_paired.take(fast.index_array(order))
    found_before = scorer.ahead_for(base, base_paired, base_paired)
    found_after = scorer.ahead_for(side, candidate_rows, attributes)
    if found_before is None and found_after is None:
        return None
    before, segments = found_before or scorer.score(base_paired, base_paired, base)
    if found_after is not None:
        after = found_after[0] if order is None else _reordered(found_after[0], before)
    elif order is not None and scorer.needs_order and not side.streamed:
        # Intervals resampled in query order: a held candidate is scored in the baseline's.
        after, _ = scorer.score(_rows(side.table, side_rows), base_paired, side)
    else:
        after, _ = scorer.score(candidate_rows, attributes, side)
        if order is not None:
            after = _reordered(after, before)
    return before, segments, after


def _rows(table: Any, rows: Any) -> Any:
    """``table``'s rows at ``rows``, in that order: the table itself (every row, in order), a
    filter (increasing rows), or a take (any other order)."""

    increasing = len(rows) < 2 or bool(np.all(np.diff(rows) > 0))
    if not increasing:
        # A permutation of every row is not the table: it was once taken for it, and a held
        # candidate then kept its own order under the baseline's attributes.
        return table.take(fast.index_array(rows))
    if len(rows) == table.num_rows:
        return table
    mask = np.zeros(table.num_rows, dtype=np.bool_)
    mask[rows] = True
    return table.filter(fast.mask_array(mask))


def _reordered(evaluation: Evaluation, aligned_with: Evaluation) -> Evaluation:
    """``evaluation`` (scored in the candidate's order) with its per-query values put in the order
    of ``aligned_with`` (the baseline's, on the same queries: with the same labels and attributes,
    a query skipped on one side is skipped on the other)."""
    import pyarrow.compute as pc

    scored_here = _ids(evaluation)
    scored_there = _ids(aligned_with)
    at = fast.numpy_of(pc.index_in(scored_there, value_set=scored_here)).astype(np.int64)
    values = {spec: column[at] for spec, column in evaluation.values.items()}
    digests = evaluation.label_digests
    return replace(
        evaluation,
        query_ids=aligned_with.query_ids,
        values=values,
        label_digests=None if digests is None else digests[at],
        attributes=aligned_with.attributes,
        examples=(),
    )


def _ids(evaluation: Evaluation) -> Any:
    import pyarrow as pa

    ids = evaluation.query_ids
    array = ids.to_arrow() if hasattr(ids, "to_arrow") else fast.text_array(ids)
    return array.cast(pa.large_string())


def _whole(side: SideTable, scorer: _Scorer) -> tuple[Evaluation, dict[str, Sequence[str]]]:
    """A side scored on all its queries (once, however many candidates it is compared with)."""
    known = scorer.whole.get(side.name)
    if known is None:
        known = scorer.ahead_for(side, side.table, side.table) if side is scorer.first else None
        if known is None:
            known = scorer.score(side.table, side.table, side)
        scorer.whole[side.name] = known
    return known


def _design(
    requested: str, share: float, paired: int, base: CountedSide, side: CountedSide
) -> tuple[str, str]:
    """The design to use and why, in words (``base`` and ``side``: anything with a ``name`` and
    a count of valid ``queries``)."""
    base_name, base_queries = base.name, base.queries
    side_name, side_queries = side.name, side.queries
    shared = (
        f"{share:.0%} of the smaller side's queries are on both sides "
        f"({paired:,} of {min(base_queries, side_queries):,})"
    )
    if requested == "paired":
        if not paired:
            raise UsageError(
                f"no query is in both {base_name} and {side_name} (queries are paired by "
                f"query_id; {base_queries} and {side_queries} valid queries read); compare "
                "different queries with --pairing unpaired"
            )
        return "paired", f"requested; {shared}"
    if requested == "unpaired":
        return "unpaired", f"requested; {shared}"
    rule = f"auto pairs from {AUTO_PAIRED_SHARE:.0%}"
    if paired and share >= AUTO_PAIRED_SHARE:
        return "paired", f"{shared}; {rule}"
    return "unpaired", f"{shared}; {rule}"


def _segment_keys(scored: _Scored) -> list[SegmentKey]:
    """The segments to report: the baseline's (paired), or either side's (unpaired), in order."""
    keys = [group.key for group in scored.baseline.segments if group.key is not None]
    if scored.pairing.design == "unpaired":
        fields = list(dict.fromkeys(key.field for key in keys))
        extra = [
            g.key for g in scored.candidate.segments if g.key is not None and g.key not in keys
        ]
        keys = sorted(
            [*keys, *extra],
            key=lambda k: (fields.index(k.field) if k.field in fields else len(fields), k.value),
        )
    return keys
