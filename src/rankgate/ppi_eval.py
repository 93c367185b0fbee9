"""``eval --ppi``: a metric's mean from model-judge labels on every query, corrected by a declared
random sample of queries that humans labeled (prediction-powered inference; the statistics are in
``rankgate.ppi``).

The traces are scored three times through the one pipeline ``evaluate`` runs: with every label
(the report's own table, a human's grade of a pair winning over a judge's), with judge labels only
(the *judge values*, one per scored trace) and with human labels only (the *human values*). The
queries of the declared sample that humans labeled give the rectifier; every query the judge
labels scored is the population. Both extra passes score a query with no relevant document 0
instead of skipping it: which queries count must not depend on who graded them, or the sample
stops being random.

The sample is *declared*: the file ``rankgate labels todo --sample-queries`` wrote (or its filled
copy, or a Label Studio export of it), whose records say they belong to the sample. A set of
queries chosen any other way (the ones an annotator got to first, the hard ones) is refused: the
correction is unbiased only over a random sample.

Gates under ``--ppi`` are decided on the PPI estimates (mean or interval bound), overall and per
segment; a segment with fewer sampled queries than ``min_queries`` (or than 3, the fewest the
estimate can use) is insufficient, as a small segment always is.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rankgate.errors import InputError, UsageError
from rankgate.evaluate import Evaluation, Settings, evaluate
from rankgate.gates import Gate, GatePolicy, decide, parse_gate
from rankgate.io import open_source
from rankgate.labels import NoLabelsOfSource
from rankgate.ppi import PPIDeltaResult, PPIResult, ppi_mean, ppi_paired_delta
from rankgate.report.console import shown_query_id
from rankgate.segments import Group, SegmentKey
from rankgate.spec import MetricSpec

__all__ = [
    "MIN_SAMPLED",
    "DeltaRow",
    "PPIComparison",
    "PPIEvaluation",
    "SampleReading",
    "SegmentEstimates",
    "compare_ppi",
    "evaluate_ppi",
    "read_declared_sample",
]

#: The fewest sampled queries a group needs for an estimate. The formulas need 3 (a fitted weight
#: and a variance), but an interval from a handful of differences can come out of zero width when
#: they happen to agree: below 10 there is no estimate, and the run stops when the whole sample
#: is that small.
MIN_SAMPLED = 10
#: Below this many sampled queries the judge's weight is fixed at 1 (classic PPI) instead of
#: fitted: a slope fitted on a few dozen queries costs more coverage than it buys (at 30 sampled
#: queries, a nominal 95% interval covered 92.3% fitted against 93.5% fixed in
#: bench/ppi_simulation.py --share 0.03).
MIN_SAMPLED_TO_TUNE = 50
CONFIDENCE = 0.95
#: What marks a record of a declared sample: the reason ``labels todo`` gives a sampled pair,
#: or the ``sample`` field it writes beside it.
SAMPLED_REASON = "sampled query"
SAMPLE_FIELD = "sample"
#: Why a sampled query is left out of the correction.
NO_JUDGE_VALUE = "no trace scored with judge labels"
NO_HUMAN_LABEL = "no human label yet"


@dataclass(frozen=True)
class SampleReading:
    """The queries of a declared random sample, in file order, and how it was drawn."""

    name: str
    query_ids: tuple[str, ...]
    design: str


@dataclass(frozen=True)
class SegmentEstimates:
    """PPI estimates of one group (``key`` None: every query), metric by metric; ``sampled``:
    its queries in the human sample that were scored by both; ``total``: its queries scored with
    judge labels. ``estimates`` is empty when ``sampled < MIN_SAMPLED``."""

    key: SegmentKey | None
    sampled: int
    total: int
    estimates: dict[MetricSpec, PPIResult]
    requested: tuple[MetricSpec, ...] = ()


@dataclass(frozen=True)
class PPIEvaluation:
    """What ``eval --ppi`` adds to an evaluation.

    ``sample``: the declared sample; ``dropped``: its queries left out, by reason (no trace, not
    scored with judge labels, no human label yet). ``outside_sample``: queries humans labeled that
    are not in the sample (not used: they were not drawn at random). ``judge_labels`` and
    ``human_labels``: the labels kept apart of each kind that were read.
    """

    sample: SampleReading
    overall: SegmentEstimates
    segments: tuple[SegmentEstimates, ...]
    dropped: dict[str, int]
    outside_sample: int
    judge_labels: int
    human_labels: int
    confidence: float = CONFIDENCE
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def sampled(self) -> int:
        return self.overall.sampled


# --- the declared sample ---------------------------------------------------------------------


def read_declared_sample(path: str | Path) -> SampleReading:
    """The query IDs of a sample file written by ``labels todo --sample-queries`` (JSON Lines,
    CSV, or Label Studio tasks or their export), first appearance kept.

    Raises ``UsageError`` when no record says it belongs to a random sample.
    """
    name = str(path)
    seen: dict[str, None] = {}
    declared = 0
    design = ""
    for raw in open_source(path):
        record = raw.value
        if isinstance(record, dict) and isinstance(record.get("data"), dict):
            record = record["data"]  # a Label Studio task, or the export of one
        if not isinstance(record, dict):
            raise InputError(raw.location, None, f"expected a record, got {type(record).__name__}")
        marked = record.get("reason") == SAMPLED_REASON or SAMPLE_FIELD in record
        if not marked:
            continue
        declared += 1
        query_id = record.get("query_id")
        if isinstance(query_id, int) and not isinstance(query_id, bool):
            query_id = str(query_id)
        if not isinstance(query_id, str) or not query_id:
            raise InputError(raw.location, "query_id", "expected the sampled query's ID")
        seen.setdefault(query_id, None)
        if not design and isinstance(record.get(SAMPLE_FIELD), str):
            # Free text from a file: shown in reports, so on one printable line.
            design = shown_query_id(" ".join(record[SAMPLE_FIELD].split()))
    if not declared:
        raise UsageError(
            f"--ppi {name}: no record is marked as part of a random sample (reason "
            f"'{SAMPLED_REASON}'); the correction is unbiased only over queries drawn at random: "
            "make the sample with `rankgate labels todo --sample-queries N`, have it graded, "
            "and give that file"
        )
    return SampleReading(shown_query_id(name), tuple(seen), design or "random sample")


# --- the whole ----------------------------------------------------------------------------------


def evaluate_ppi(
    traces: Callable[[], Any] | Any,
    metrics: Iterable[str | MetricSpec] | None,
    gates: Sequence[Gate | str] = (),
    *,
    labels: Any,
    sample: str | Path | SampleReading,
    settings: Settings | None = None,
    policy: GatePolicy | None = None,
    input_format: str | None = None,
    labels_format: str | None = None,
    evaluation: Evaluation | None = None,
    **options: Any,
) -> Evaluation:
    """``evaluate`` with prediction-powered estimates (``Evaluation.ppi``) and gates decided on
    them.

    ``traces`` is read three times; give a callable that returns a fresh source for each read
    when the source cannot be read twice (an open ``TraceSource``). ``labels`` holds both the
    human labels and the judge's (``source`` ``judge:...``), in one source or a list of them.
    ``evaluation``: the all-labels evaluation when the caller has it already (the CLI, with its
    progress bar); it is scored here otherwise. ``options`` go to every ``evaluate`` call.
    """
    settings = settings or Settings()
    policy = policy or GatePolicy()
    if policy.gate_on == "pessimistic" or any(
        rule.gate_on == "pessimistic" for rule in policy.rules
    ):
        raise UsageError(
            "--ppi gates the prediction-powered estimate; gate_on 'pessimistic' has none "
            "(use mean or lower_bound)"
        )
    if labels is None:
        raise UsageError("--ppi needs --labels: the human sample's grades and the judge's")
    reading = sample if isinstance(sample, SampleReading) else read_declared_sample(sample)
    parsed = [parse_gate(gate) if isinstance(gate, str) else gate for gate in gates]

    def fresh() -> Any:
        return traces() if callable(traces) else traces

    common = {"input_format": input_format, "labels": labels, "labels_format": labels_format}
    if evaluation is None:
        evaluation = evaluate(
            fresh(), metrics, parsed, settings=settings, policy=policy, **common, **options
        )
    # Both passes score the same metrics as the report, with no gate and no interval of their own.
    specs = list(evaluation.metrics)
    by_kind = {}
    for kind in ("judge", "human"):
        kind_settings = dataclasses.replace(
            settings, label_source=kind, empty_relevant="zero", resamples=0
        )
        with _said_for_ppi(reading, kind):
            by_kind[kind] = evaluate(
                fresh(), specs, settings=kind_settings, policy=GatePolicy(), **common, **options
            )
    found = ppi_of(by_kind["judge"], by_kind["human"], reading, settings.segment_by)
    _check_sample(found)
    # The report's groups carry the corrected means and intervals, so every table, every format
    # and every gate reads the same numbers; their other columns (coverage, judged@k) stay.
    overall = _group(found.overall, evaluation.overall, evaluation.judged)
    by_key = {estimates.key: estimates for estimates in found.segments}
    segments = [
        _group(by_key[group.key], group, evaluation.judged) if group.key in by_key else group
        for group in evaluation.segments
    ]
    outcomes, _ = decide(parsed, policy, overall, segments, overall_minimum=True)
    # Coverage minimums stay the report's own: they are about labels, not about an estimate.
    return dataclasses.replace(
        evaluation, overall=overall, segments=tuple(segments), gates=outcomes, ppi=found
    )


@contextlib.contextmanager
def _said_for_ppi(sample: SampleReading, kind: str) -> Iterator[None]:
    """A pass that finds no label of its kind, said in the words of ``--ppi``."""
    try:
        yield
    except NoLabelsOfSource:
        if kind == "judge":
            raise UsageError(
                f"--ppi {sample.name}: --labels hold no judge label (source judge:...); make "
                "them with `rankgate labels judge` and give its file as --labels too"
            ) from None
        raise UsageError(
            f"--ppi {sample.name}: --labels hold no human label; give the graded sample file "
            "as --labels too"
        ) from None


def _check_sample(found: PPIEvaluation) -> None:
    """A verdict needs an estimate: a sample the labels do not reach is a usage error, said with
    what to do, never an n/a mean that fails a gate."""
    if found.sampled >= MIN_SAMPLED:
        return
    name = found.sample.name
    declared = len(found.sample.query_ids)
    no_judge = found.dropped.get(NO_JUDGE_VALUE, 0)
    no_human = found.dropped.get(NO_HUMAN_LABEL, 0)
    if declared and no_judge == declared:
        raise UsageError(
            f"--ppi {name}: the judge graded none of the {declared:,} sampled queries; the "
            "correction needs the judge's grade of the sampled pairs too: run `rankgate labels "
            "judge` without --labels (its cache keeps that cheap) and give its file as --labels"
        )
    if declared and no_human + no_judge == declared and no_human:
        raise UsageError(
            f"--ppi {name}: none of the {declared:,} sampled queries has a human label in "
            "--labels; give the graded sample file as --labels too"
        )
    raise UsageError(
        f"--ppi {name}: {found.sampled:,} sampled queries carry both a human and a judge "
        f"label (of {declared:,} declared; left out: "
        + (", ".join(f"{r} {c:,}" for r, c in found.dropped.items()) or "none")
        + f"); an estimate needs at least {MIN_SAMPLED}"
    )


def ppi_of(
    judge: Evaluation,
    human: Evaluation,
    sample: SampleReading,
    segment_by: Sequence[str] = (),
) -> PPIEvaluation:
    """The estimates, overall and per segment of ``segment_by``, from the judge-label and
    human-label evaluations of the same traces."""
    judge_ids = list(judge.query_ids)
    sampled_set = set(sample.query_ids)
    # A query may have several traces: its k-th trace under judge labels pairs with its k-th
    # under human labels (the same record, since both passes read the same input in order).
    human_rows: dict[str, list[int]] = {}
    for row, query_id in enumerate(human.query_ids):
        human_rows.setdefault(query_id, []).append(row)
    taken: dict[str, int] = {}
    labeled_rows: list[int] = []
    human_index: list[int] = []
    for row, query_id in enumerate(judge_ids):
        if query_id not in sampled_set:
            continue
        rows = human_rows.get(query_id, [])
        position = taken.get(query_id, 0)
        if position < len(rows):
            labeled_rows.append(row)
            human_index.append(rows[position])
            taken[query_id] = position + 1
    judged = set(judge_ids)
    humans = set(human_rows)
    dropped = {
        NO_JUDGE_VALUE: sum(1 for q in sample.query_ids if q not in judged),
        NO_HUMAN_LABEL: sum(1 for q in sample.query_ids if q in judged and q not in humans),
    }
    labeled = np.asarray(labeled_rows, dtype=np.int64)
    human_at = np.asarray(human_index, dtype=np.int64)
    overall = _estimates(None, judge, human, labeled, human_at, np.arange(len(judge_ids)))
    segments = []
    for path in segment_by:
        column = np.asarray(list(judge.segment_column(path)), dtype=object)
        for value in dict.fromkeys(column.tolist()):
            members = np.flatnonzero(column == value)
            segments.append(
                _estimates(SegmentKey(path, value), judge, human, labeled, human_at, members)
            )
    notes = []
    if dropped[NO_HUMAN_LABEL]:
        notes.append(
            f"{dropped['no human label yet']:,} sampled queries have no human label yet: the "
            "estimate is unbiased only if those left ungraded are no different from the rest; "
            "grade the whole sample"
        )
    return PPIEvaluation(
        sample=sample,
        overall=overall,
        segments=tuple(segments),
        dropped={reason: count for reason, count in dropped.items() if count},
        outside_sample=len(humans - sampled_set),
        judge_labels=judge.summary.label_sources.get("judge", 0),
        human_labels=human.summary.label_sources.get("human", 0),
        notes=tuple(notes),
    )


def _estimates(
    key: SegmentKey | None,
    judge: Evaluation,
    human: Evaluation,
    labeled: np.ndarray,
    human_at: np.ndarray,
    members: np.ndarray,
) -> SegmentEstimates:
    """PPI over the judge-evaluation rows ``members``; ``labeled`` (judge rows) and
    ``human_at`` (the matching human rows) are the sampled pairs of the whole input."""
    inside = np.isin(labeled, members)
    own_labeled, own_human = labeled[inside], human_at[inside]
    position = np.full(len(judge.query_ids), -1, dtype=np.int64)
    position[members] = np.arange(len(members))
    estimates: dict[MetricSpec, PPIResult] = {}
    sampled = len(own_labeled)
    if sampled >= MIN_SAMPLED:
        for spec in judge.metrics:
            estimates[spec] = ppi_mean(
                judge.values[spec][members],
                position[own_labeled],
                human.values[spec][own_human],
                confidence=CONFIDENCE,
                tune=sampled >= MIN_SAMPLED_TO_TUNE,
                estimand="evaluated",
            )
    return SegmentEstimates(key, sampled, len(members), estimates, tuple(judge.metrics))


def _group(estimates: SegmentEstimates, base: Group, judged: MetricSpec | None) -> Group:
    """A report group with the PPI means and intervals of its metrics (n/a where the group has
    too few sampled queries), and the sampled queries as its count: what min_queries weighs, since
    the interval's width rests on them."""
    # The unjudged-document range of the all-labels means says nothing about the estimates, so
    # its variants go; judged@k (how much of the rankings the labels cover) stays.
    kept = [spec for spec in base.means if spec == judged]
    means = {spec: base.means[spec] for spec in kept}
    intervals = {spec: base.intervals[spec] for spec in kept if spec in base.intervals}
    for spec in estimates.requested:
        result = estimates.estimates.get(spec)
        means[spec] = math.nan if result is None else result.ppi.mean
        intervals[spec] = (
            (math.nan, math.nan) if result is None else (result.ppi.low, result.ppi.high)
        )
    return dataclasses.replace(base, scored=estimates.sampled, means=means, intervals=intervals)


def estimate_rows(found: PPIEvaluation) -> list[dict[str, Any]]:
    """One row per (group, metric) for the reports: the three estimates and what the judge was
    worth."""
    rows = []
    for group in (found.overall, *found.segments):
        for spec, result in group.estimates.items():
            rows.append(
                {
                    "segment": None if group.key is None else str(group.key),
                    "metric": str(spec),
                    "sampled": group.sampled,
                    "queries": group.total,
                    "judge_only": _estimate(result.judge_only),
                    "human_only": _estimate(result.human_only),
                    "ppi": _estimate(result.ppi),
                    "judge_weight": _finite(result.lambda_),
                    "effective_human_queries": _finite(result.effective_queries),
                    # How far the judge-only mean is from the corrected one: the judge's bias
                    # on this metric, as the sample measures it.
                    "judge_offset": _finite(result.judge_only.mean - result.ppi.mean),
                }
            )
    return rows


def _estimate(estimate: Any) -> dict[str, Any]:
    return {
        "mean": _finite(estimate.mean),
        "low": _finite(estimate.low),
        "high": _finite(estimate.high),
        "queries": estimate.queries,
    }


def _finite(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


# --- compare: the deltas ---------------------------------------------------------------------


@dataclass(frozen=True)
class DeltaRow:
    """One candidate's delta on one metric (candidate minus baseline): judge-only, human-only and
    PPI estimates, each with its interval and p-value; ``adjusted_p``: the PPI p-value after the
    comparison's multiple-testing correction over every row."""

    candidate: str
    metric: MetricSpec
    result: PPIDeltaResult
    adjusted_p: float
    significant: bool


@dataclass(frozen=True)
class PPIComparison:
    """What ``compare --ppi`` adds: per candidate and metric, the delta's three estimates."""

    sample: SampleReading
    rows: tuple[DeltaRow, ...]
    sampled: dict[str, int]
    paired: dict[str, int]
    correction: str
    alpha: float
    confidence: float = CONFIDENCE


def compare_ppi(
    baseline: tuple[str, Callable[[], Any]],
    candidates: Sequence[tuple[str, Callable[[], Any]]],
    metrics: Iterable[str | MetricSpec] | None,
    *,
    labels: Any,
    sample: str | Path | SampleReading,
    settings: Settings | None = None,
    correction: str = "holm",
    alpha: float = 0.05,
    input_format: str | None = None,
    labels_format: str | None = None,
) -> PPIComparison:
    """The prediction-powered delta of each candidate against the baseline on the queries both
    scored: each side scored with judge labels and with human labels (``name, fresh source``
    pairs), paired by query ID, and ``ppi_paired_delta`` over the declared sample. The estimand
    is the population of queries these were drawn from: is the candidate better on queries like
    these (``rankgate.ppi``)."""
    from rankgate.stats import adjust_pvalues

    settings = settings or Settings()
    reading = sample if isinstance(sample, SampleReading) else read_declared_sample(sample)
    common = {"input_format": input_format, "labels": labels, "labels_format": labels_format}

    def scored(source: Callable[[], Any], kind: str) -> Evaluation:
        kind_settings = dataclasses.replace(
            settings, label_source=kind, empty_relevant="zero", resamples=0
        )
        with _said_for_ppi(reading, kind):
            return evaluate(source(), metrics, settings=kind_settings, **common)

    base = {kind: scored(baseline[1], kind) for kind in ("judge", "human")}
    base_rows = {kind: _first_rows(evaluation) for kind, evaluation in base.items()}
    sampled_set = set(reading.query_ids)
    pending: list[tuple[str, MetricSpec, PPIDeltaResult]] = []
    sampled: dict[str, int] = {}
    paired: dict[str, int] = {}
    for name, source in candidates:
        other = {kind: scored(source, kind) for kind in ("judge", "human")}
        other_rows = {kind: _first_rows(evaluation) for kind, evaluation in other.items()}
        order = sorted(base_rows["judge"].keys() & other_rows["judge"].keys())
        labeled_ids = [
            query_id
            for query_id in order
            if query_id in sampled_set
            and query_id in base_rows["human"]
            and query_id in other_rows["human"]
        ]
        paired[name], sampled[name] = len(order), len(labeled_ids)
        if len(labeled_ids) < MIN_SAMPLED:
            continue
        position = {query_id: index for index, query_id in enumerate(order)}
        labeled = np.asarray([position[query_id] for query_id in labeled_ids], dtype=np.int64)
        for spec in base["judge"].metrics:
            pending.append(
                (
                    name,
                    spec,
                    ppi_paired_delta(
                        _column(base["judge"], base_rows["judge"], spec, order),
                        _column(other["judge"], other_rows["judge"], spec, order),
                        labeled,
                        _column(base["human"], base_rows["human"], spec, labeled_ids),
                        _column(other["human"], other_rows["human"], spec, labeled_ids),
                        confidence=CONFIDENCE,
                        tune=len(labeled_ids) >= MIN_SAMPLED_TO_TUNE,
                    ),
                )
            )
    adjusted = adjust_pvalues([result.ppi.p_value for _, _, result in pending], correction)
    rows = tuple(
        DeltaRow(name, spec, result, p_value, p_value < alpha)
        for (name, spec, result), p_value in zip(pending, adjusted, strict=True)
    )
    return PPIComparison(reading, rows, sampled, paired, correction, alpha)


def _first_rows(evaluation: Evaluation) -> dict[str, int]:
    """Each query's first scored row: a comparison pairs queries, one value each."""
    rows: dict[str, int] = {}
    for row, query_id in enumerate(evaluation.query_ids):
        rows.setdefault(query_id, row)
    return rows


def _column(
    evaluation: Evaluation, rows: dict[str, int], spec: MetricSpec, query_ids: Sequence[str]
) -> np.ndarray:
    return evaluation.values[spec][np.asarray([rows[q] for q in query_ids], dtype=np.int64)]
