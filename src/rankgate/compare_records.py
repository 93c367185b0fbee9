"""A comparison's sides as Python objects: the public ``Variant`` and ``Pairing``, and the
record-by-record reading.

The local ``compare`` reads sides as Arrow tables (``rankgate.compare_read``). The record reading
here serves two callers: the Spark engine, whose executors validate records one by one and gather
labels per query, and ``compare`` itself for the rare input Arrow cannot hold (text that is not
valid Unicode, such as a lone surrogate spelled by a JSON escape), via ``score_by_records``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from rankgate.compare_read import name_of_labels
from rankgate.compare_unjudged import unjudged_in_top
from rankgate.errors import InputError, Location, UsageError
from rankgate.evaluate import Evaluation, InvalidRecord, Settings
from rankgate.gates import INTERVAL_BOUNDS
from rankgate.io import TraceSource, open_source, validate_record
from rankgate.io.validate import Trace
from rankgate.labels import gather_labels
from rankgate.segments import MISSING_VALUE, segment_value

__all__: list[str] = []


@dataclass(frozen=True, slots=True)
class Variant:
    """One side of a comparison: a trace source and the name it is reported under."""

    name: str
    data: Any


@dataclass(frozen=True, slots=True)
class Pairing:
    """How one candidate's queries matched the baseline's, and which design compared them.

    ``design`` is ``"paired"`` or ``"unpaired"``; ``requested`` what the caller asked for
    (``"auto"`` included); ``shared_share`` the share of the smaller side's queries that are on
    both sides, on which ``auto`` decides; ``reason`` says why in words.
    """

    paired: int
    baseline_only: int
    candidate_only: int
    baseline_only_ids: tuple[str, ...]
    candidate_only_ids: tuple[str, ...]
    design: str = "paired"
    requested: str = "paired"
    shared_share: float | None = None
    reason: str = ""


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
        """Labels from a label file (one judgment or one query per record), qrels or a store,
        or several of them."""
        name = name_of_labels(data)
        labels, readings = gather_labels(
            data,
            fields=self.fields,
            # The traces' --input-format says nothing of the label file's: it has its own
            # (detected by default: qrels by layout, the rest by name or first bytes).
            input_format=labels_format,
            on_invalid=reader.settings.on_invalid,
            label_source=reader.settings.label_source,
        )
        for source, reading in readings.items():
            reader.extra_read[f"{source} (labels)"] = reading.records
            reader.extra_invalid[f"{source} (labels)"] = reading.skipped.get("invalid", 0)
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


class CountedSide(Protocol):
    """Anything with a side's name and its count of valid queries."""

    @property
    def name(self) -> str: ...

    @property
    def queries(self) -> int: ...


@dataclass(frozen=True, slots=True)
class SideCount:
    """A side's name and its count of valid queries (what choosing a design looks at)."""

    name: str
    queries: int


#: Lists a side's unjudged documents in the top k of some of its queries: called with the side's
#: name and each query's k, it returns (query_id, doc_id, 1-based rank) triples.
PairLister = Callable[[str, dict[str, int]], list[tuple[str, str, int]]]


@dataclass(frozen=True, eq=False)
class RecordRun:
    """A comparison's sides read and scored record by record: names, per candidate its pairing,
    evaluations and segment values, and the reading's counts."""

    names: list[str]
    scored: list[tuple[Pairing, Evaluation, Evaluation, dict[str, Any], dict[str, Any]]]
    read: dict[str, int]
    invalid: dict[str, int]
    invalid_examples: tuple[InvalidRecord, ...]
    labels_name: str | None
    lister: PairLister | None = None


def score_by_records(
    baseline: Any,
    candidates: tuple[Any, ...],
    *,
    metrics: list[Any] | None,
    extra_metrics: list[Any] | None = None,
    gates: Any,
    settings: Settings,
    policy: Any,
    labels: Any,
    labels_format: str | None,
    variant_field: str | None,
    input_format: str | None,
    pairing: str,
    design_of: Callable[[str, float, int, CountedSide, CountedSide], tuple[str, str]],
    examples_kept: int,
    progress: Callable[[str, int, int, int | None], None] | None,
) -> RecordRun:
    """The comparison through Python objects, for traces Arrow cannot hold: text that is not
    valid Unicode (a lone surrogate from a JSON escape), which the validator accepts."""
    from dataclasses import replace

    from rankgate.evaluate import evaluate

    reader = _Reader(settings, input_format, progress)
    if variant_field is not None:
        sides = reader.split(baseline, variant_field, [str(value) for value in candidates])
    else:
        named = [_as_variant(item, index) for index, item in enumerate((baseline, *candidates))]
        _check_distinct_names(named)
        sides = [reader.read(variant) for variant in named]
    book = _LabelBook(settings)
    labels_name = None
    if labels is not None:
        labels_name = name_of_labels(labels)
        book.add_source(labels, reader, labels_format)
    for side in sides:
        book.add_side(side)
    on_bounds = policy.gate_on in INTERVAL_BOUNDS or any(
        rule.gate_on in INTERVAL_BOUNDS for rule in policy.rules
    )
    scoring = settings if on_bounds else replace(settings, resamples=0)

    def scored(traces: list[Trace]) -> tuple[Evaluation, dict[str, Any]]:
        evaluation = evaluate(
            traces,
            metrics,
            gates,
            settings=scoring,
            policy=policy,
            extra_metrics=extra_metrics or (),
        )
        by_id = {trace.query_id: trace.attributes for trace in traces}
        segments = {
            name: [segment_value(by_id[q], name) for q in evaluation.query_ids]
            for name in dict.fromkeys(g.key.field for g in evaluation.segments if g.key)
        }
        return evaluation, segments

    base = sides[0]
    results = []
    for side in sides[1:]:
        shared = [query_id for query_id in base.traces if query_id in side.traces]
        base_only = [query_id for query_id in base.traces if query_id not in side.traces]
        side_only = [query_id for query_id in side.traces if query_id not in base.traces]
        smaller = min(len(base.traces), len(side.traces))
        share = len(shared) / smaller if smaller else 0.0
        design, reason = design_of(
            pairing,
            share,
            len(shared),
            SideCount(base.name, len(base.traces)),
            SideCount(side.name, len(side.traces)),
        )
        counts = Pairing(
            len(shared),
            len(base_only),
            len(side_only),
            tuple(base_only[:examples_kept]),
            tuple(side_only[:examples_kept]),
            design,
            pairing,
            share,
            reason,
        )
        if design == "unpaired":
            before, before_segments = scored(
                [book.labeled(t, t.attributes) for t in base.traces.values()]
            )
            after, after_segments = scored(
                [book.labeled(t, t.attributes) for t in side.traces.values()]
            )
            results.append((counts, before, after, before_segments, after_segments))
            continue
        attributes = {query_id: base.traces[query_id].attributes for query_id in shared}
        before, segments = scored([book.labeled(base.traces[q], attributes[q]) for q in shared])
        after, _ = scored([book.labeled(side.traces[q], attributes[q]) for q in shared])
        results.append((counts, before, after, segments, {}))
    return RecordRun(
        [side.name for side in sides],
        results,
        {side.name: side.read for side in sides} | reader.extra_read,
        {side.name: side.invalid for side in sides} | reader.extra_invalid,
        tuple(reader.invalid_examples),
        labels_name,
        _record_lister(sides, book, settings),
    )


def _record_lister(sides: list[_Side], book: _LabelBook, settings: Settings) -> PairLister:
    """Lists a side's unjudged documents in the top k of some of its queries, from its traces and
    the joined labels."""
    by_name = {side.name: side for side in sides}

    def unjudged(name: str, depths: dict[str, int]) -> list[tuple[str, str, int]]:
        if settings.doc_ids is not None:
            raise UsageError(
                "listing unjudged pairs under a document-ID mapping needs IDs that are valid "
                "Unicode text"
            )
        listed: list[tuple[str, str, int]] = []
        for query_id, trace in by_name[name].traces.items():
            depth = depths.get(query_id)
            if depth is None:
                continue
            grades = book.labeled(trace, trace.attributes).grades or {}
            listed.extend(
                (query_id, doc, rank)
                for doc, rank in unjudged_in_top(trace.retrieved_ids, set(grades), depth)
            )
        return listed

    return unjudged
