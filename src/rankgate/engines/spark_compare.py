"""Comparing a baseline with candidates on Spark: read, validate, pair and score on the executors,
compute the cells on the driver with the local compare's code.

The steps follow ``rankgate.compare.compare`` one by one, so that the result is the same
``Comparison``:

1. every side's rows are validated on the executors by the local validator (the records a local
   compare would read), one output row per record: the trace (pickled, to come back unchanged),
   its query ID, its labels (when it carries any) and, with ``variant_field``, its variant;
2. records that are invalid or repeat a query ID on their side are found with Spark (a window over
   the query ID in input order) and counted, reported or raised as the local reader does;
3. labels: every labeled trace of every side and every record of a ``labels=`` source are
   gathered per query; a query labeled two ways is the local compare's error, naming both places;
   each query's labels are the first ones found (the labels source, then the sides in order);
4. pairing is a Spark join on the query ID (``pairing="paired"``); each partition of the pairs is
   scored on an executor by ``rankgate.evaluate`` itself, both sides with the joined labels and
   the baseline's attributes, exactly as the local compare scores them;
5. the driver puts the per-query values together as the Spark eval engine does (same means, same
   seeded intervals, same gates) and hands the aligned value arrays to the local compare's cell
   code: statistics, correction and flags are the local ones. The executors score each metric
   under every unjudged policy, with judged@k, as the local compare does
   (``compare_unjudged.evidence_specs``), so label-limited cells and their pair counts are the
   same; only the listing of the pairs (``list_unjudged``) is local, as it needs document IDs.

The driver holds a few floats per query and side plus the query IDs: a million queries fit
comfortably. Rankings never leave the executors.

Where the result differs from a local run on the same files: records are located as
``SOURCE (spark partition P) row R``, as the eval engine locates them.
"""

from __future__ import annotations

import json
import pickle
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

from rankgate.compare import (
    PAIRINGS,
    UNPAIRED_EXAMPLES_KEPT,
    CandidateResult,
    Cell,
    Comparison,
    Pairing,
    Significance,
    Variant,
    _design,
    _segment_keys,
    cells_from_values,
    flag_cells,
)
from rankgate.compare_records import (
    _as_variant,
    _check_distinct_names,
    _describe,
    _LabelBook,
    _Labels,
    _Reader,
    _source_name,
)
from rankgate.compare_unjudged import evidence_specs, judged_depth, requested_metrics
from rankgate.engines import spark as engine
from rankgate.errors import ConfigError, InputError, RankgateError, UsageError
from rankgate.evaluate import Evaluation, InvalidRecord, Settings
from rankgate.evaluate import evaluate as local_evaluate
from rankgate.gates import INTERVAL_BOUNDS, Gate, GatePolicy, parse_gate
from rankgate.io.tables import ArrowSource
from rankgate.io.validate import Trace, validate_record
from rankgate.segments import MISSING_VALUE, segment_value
from rankgate.spec import MetricSpec

__all__ = ["compare_on_spark"]

# Invalid records kept as examples, as the local reader keeps them.
INVALID_EXAMPLES_KEPT = 10
_TRACE, _INVALID, _NO_VARIANT = "trace", "invalid", "no_variant"
_BASELINE_SIDE, _CANDIDATE_SIDE = 0, 1


def compare_on_spark(
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
    pairing: str = "paired",
    master: str | None = None,
    progress: bool = True,
) -> Comparison:
    """Compare a baseline with candidates on Spark; the same ``Comparison`` as ``rankgate.compare``.

    Args:
        baseline, candidates: Spark DataFrames, or Parquet paths Spark reads (a file, a folder of
            part files, a glob, any URL Spark reads), or ``Variant(name, either)``. With
            ``variant_field``, ``baseline`` is the one input and ``candidates`` are values of that
            field, the first one the baseline's, as for ``rankgate.compare``.
        metrics, gates, settings, policy, significance, pairing: as for ``rankgate.compare``
            (``pairing``: ``"paired"``, the default, ``"unpaired"`` or ``"auto"``).
        labels, labels_format: a labels source as ``rankgate.compare`` reads it (a label file,
            TREC qrels, a store URL); it is read on the driver and joined in Spark.
        master, progress: for a session started here (see ``rankgate.engines.spark.session``).

    Raises:
        InputError: a malformed record, a query ID twice on one side, or a query whose labels
            differ between sources (under ``on_invalid="fail"`` for the first two).
        UsageError: pyspark is missing, too few sides, or no query is on both sides under
            ``pairing="paired"``.
    """
    engine._require_pyspark()
    settings = settings or Settings()
    if settings.resamples < 1:
        raise ConfigError("compare needs bootstrap resamples (>= 1) for the intervals of deltas")
    if pairing not in PAIRINGS:
        raise ConfigError(f"pairing must be one of {', '.join(PAIRINGS)}, got {pairing!r}")
    policy = policy or GatePolicy()
    significance = significance or Significance()
    checked_gates = tuple(parse_gate(g) if isinstance(g, str) else g for g in gates)
    # The executors score the evidence beside the requested metrics; the driver reports only
    # the requested ones (as the local compare's ``extra_metrics``).
    requested = requested_metrics(metrics, checked_gates, policy)
    depth = judged_depth(requested)
    scored_metrics = list(dict.fromkeys([*requested, *evidence_specs(requested, depth)]))
    job = engine._plan(scored_metrics, checked_gates, settings, policy, _EmptySchema())

    with engine._quiet_pyspark():
        reading = _Reading(settings, master, progress)
        try:
            if variant_field is not None:
                sides = reading.split(baseline, variant_field, [str(v) for v in candidates])
            else:
                if not candidates:
                    raise UsageError("compare needs a baseline and at least one candidate")
                named = [
                    _as_variant(item, index) for index, item in enumerate((baseline, *candidates))
                ]
                _check_distinct_names(named)
                sides = [reading.read(variant, rank) for rank, variant in enumerate(named)]
            reading.check_problems(sides)
            chosen_labels, labels_name = reading.join_labels(sides, labels, labels_format)
            base = sides[0]
            pending = [
                _reported(
                    _scored(
                        base, side, pairing, chosen_labels, job, checked_gates, settings, policy
                    ),
                    requested,
                )
                for side in sides[1:]
            ]
        finally:
            reading.release()

    raw_cells = [
        _candidate_cells(side.name, scored, policy, significance, settings, depth)
        for side, scored in zip(sides[1:], pending, strict=True)
    ]
    finished = flag_cells(raw_cells, significance)
    results = tuple(
        CandidateResult(
            side.name,
            scored.pairing,
            scored.baseline,
            scored.candidate,
            cells,
            dict[str, Sequence[str]](scored.segments),
            dict[str, Sequence[str]](scored.candidate_segments),
            significance.fail_on_label_limited,
        )
        for side, scored, cells in zip(sides[1:], pending, finished, strict=True)
    )
    return Comparison(
        baseline=sides[0].name,
        results=results,
        significance=significance,
        settings=settings,
        policy=policy,
        labels_source=labels_name,
        read={side.name: side.read for side in sides} | reading.extra_read,
        invalid={side.name: side.invalid for side in sides} | reading.extra_invalid,
        invalid_examples=tuple(reading.invalid_examples),
        pairing=pairing,
    )


class _EmptySchema:
    """A schema with no columns, for the eval engine's plan: compare carries attributes in the
    pickled traces, not as columns of their own."""

    names: tuple[str, ...] = ()
    fields: tuple[Any, ...] = ()


# --------------------------------------------------------------------------------------------
# The local compare's code: the design choice and the cells, from aligned per-query values


def _candidate_cells(
    name: str,
    scored: _ScoredSides,
    policy: GatePolicy,
    significance: Significance,
    settings: Settings,
    depth: int,
) -> list[Cell]:
    """One candidate's raw cells, computed by the local compare's cell code."""
    return cells_from_values(
        name,
        list(scored.baseline.metrics),
        scored.baseline.values,
        scored.candidate.values,
        design="paired" if scored.pairing.design == "paired" else "unpaired",
        segments=_segment_keys(cast(Any, scored)),
        baseline_segments=scored.segments,
        candidate_segments=scored.candidate_segments,
        policy=policy,
        significance=significance,
        seed=settings.seed,
        resamples=settings.resamples,
        depth=depth,
    )


def _reported(scored: _ScoredSides, requested: Sequence[MetricSpec]) -> _ScoredSides:
    """Both evaluations reporting the requested metrics only; the evidence's values stay in
    ``values`` for the cells."""
    wanted = tuple(spec for spec in scored.baseline.metrics if spec in requested)
    return replace(
        scored,
        baseline=replace(scored.baseline, metrics=wanted),
        candidate=replace(scored.candidate, metrics=wanted),
    )


@dataclass(frozen=True)
class _Counted:
    """What the local compare's design choice reads of a side: its name and valid queries."""

    name: str
    queries: int


# --------------------------------------------------------------------------------------------
# Reading and validating the sides (executors), and what the driver learns of them


@dataclass(eq=False)
class _SparkSide:
    """One side: its valid traces (first occurrence of each query ID) as a cached DataFrame."""

    name: str
    rank: int  # order of the sides, and of their problems in the local reader
    traces: Any  # DataFrame: query_id, partition, row, labels_key, labels, trace
    problems: Any  # DataFrame of invalid records and repeated IDs, with order and payload
    read: int = 0
    invalid: int = 0


@dataclass(frozen=True)
class _ValidateJob:
    """Validates one partition's records with the local validator; pickled to the executors."""

    source: str
    settings: Settings
    variant_field: str | None

    def __call__(self, batches: Iterable[Any]) -> Iterator[Any]:
        from pyspark import TaskContext

        context = TaskContext.get()
        partition = context.partitionId() if context is not None else 0
        yield from validate_partition(self, partition, list(batches))


_VALIDATED = [
    ("kind", "string"),
    ("partition", "int"),
    ("row", "bigint"),
    ("query_id", "string"),
    ("location", "string"),
    ("variant", "string"),
    ("labels_key", "string"),
    ("labels", "binary"),
    ("trace", "binary"),
    ("payload", "string"),
]


def _ddl(columns: list[tuple[str, str]]) -> str:
    return ", ".join(f"{name} {kind}" for name, kind in columns)


def _arrow_schema(columns: list[tuple[str, str]]) -> Any:
    import pyarrow as pa

    kinds = {
        "string": pa.string(),
        "int": pa.int32(),
        "bigint": pa.int64(),
        "binary": pa.binary(),
        "double": pa.float64(),
        "boolean": pa.bool_(),
        "tinyint": pa.int8(),
    }
    return pa.schema([(name, kinds[kind]) for name, kind in columns])


def validate_partition(job: _ValidateJob, partition: int, batches: Sequence[Any]) -> Iterator[Any]:
    """One output row per record of the partition: the valid trace, or why it is invalid.

    Public to the module's tests so that the executor side can be exercised without Spark.
    """
    import pyarrow as pa

    if not batches:
        return
    table = pa.Table.from_batches(batches)
    name = f"{job.source} (spark partition {partition})"
    fields = job.settings.fields
    stamp_field = job.settings.label_filter.labeled_at_field
    columns: dict[str, list[Any]] = {column: [] for column, _ in _VALIDATED}
    for row, raw in enumerate(ArrowSource.table(name, table), start=1):
        cells: dict[str, Any] = dict.fromkeys(columns)
        cells.update(partition=partition, row=row, location=str(raw.location))
        try:
            trace = validate_record(raw, fields, require_query_id=True, require_ranking=True)
        except InputError as problem:
            cells.update(kind=_INVALID, payload=_problem_payload(problem))
        else:
            cells.update(kind=_TRACE, query_id=trace.query_id, trace=pickle.dumps(trace))
            if job.variant_field is not None:
                value = segment_value(trace.attributes, job.variant_field)
                if value == MISSING_VALUE:
                    missing = InputError(
                        trace.location, job.variant_field, "missing (it names the variant)"
                    )
                    cells.update(kind=_NO_VARIANT, payload=_problem_payload(missing))
                cells["variant"] = value
            if trace.grades is not None:
                cells["labels_key"] = _labels_key(trace.grades)
                labeled_at = trace.attributes.get(stamp_field)
                cells["labels"] = pickle.dumps((trace.grades, str(trace.location), labeled_at))
        for column, value in cells.items():
            columns[column].append(value)
    schema = _arrow_schema(_VALIDATED)
    yield from pa.table(columns, schema=schema).to_batches(max_chunksize=engine.OUTPUT_ROWS)


def _labels_key(grades: dict[str, float]) -> str:
    """A text equal for two label sets exactly when the local compare finds them equal (dict
    equality: order aside, 1 == 1.0 and 0.0 == -0.0)."""
    return json.dumps(sorted((doc, float(grade) + 0.0) for doc, grade in grades.items()))


def _problem_payload(problem: InputError) -> str:
    return json.dumps(
        {"location": str(problem.location), "field": problem.field, "problem": problem.problem},
        ensure_ascii=False,
    )


class _Reading:
    """The sides as Spark DataFrames, and the counts and examples the local reader keeps."""

    def __init__(self, settings: Settings, master: str | None, progress: bool) -> None:
        self.settings = settings
        self.master = master
        self.progress = progress
        self.invalid_examples: list[InvalidRecord] = []
        self.extra_read: dict[str, int] = {}
        self.extra_invalid: dict[str, int] = {}
        self.unassigned: Any = None  # DataFrame of the records that name no variant
        self._cached: list[Any] = []

    def release(self) -> None:
        for frame in self._cached:
            frame.unpersist()
        self._cached.clear()

    def frame(self, data: Any) -> tuple[Any, str]:
        """The DataFrame of an input, and the name the local compare would give it."""
        if _is_dataframe(data):
            return data, ""
        if isinstance(data, (str, Path)):
            text = str(data)
            if not engine._is_pattern_or_url(text) and not Path(text).exists():
                raise UsageError(f"{text}: no such file or folder")
            spark = engine.session(self.master, progress=self.progress)
            try:
                return spark.read.parquet(text), text
            except Exception as problem:  # pyspark raises AnalysisException and others
                raise InputError(
                    text, None, f"cannot read as Parquet ({engine._first_line(problem)})"
                ) from None
        raise UsageError(
            f"the spark engine compares DataFrames or Parquet paths, not a {type(data).__name__}"
        )

    def validated(self, df: Any, source: str, variant_field: str | None) -> Any:
        job = _ValidateJob(source, self.settings, variant_field)
        frame = df.mapInArrow(job, _ddl(_VALIDATED)).cache()
        self._cached.append(frame)
        return frame

    def read(self, variant: Variant, rank: int) -> _SparkSide:
        df, _ = self.frame(variant.data)
        validated = self.validated(df, variant.name, None)
        return self._side(variant.name, rank, validated)

    def split(self, data: Any, variant_field: str, wanted: list[str]) -> list[_SparkSide]:
        """Sides from one input by the value of ``variant_field``, chosen as the local compare
        chooses them."""
        from pyspark.sql import functions as F

        df, path = self.frame(data)
        name = path or _source_name(data)
        validated = self.validated(df, name, variant_field)
        found = (
            validated.where(F.col("kind") == _TRACE)
            .groupBy("variant")
            .agg(
                F.min(F.struct("partition", "row")).alias("first"),
                F.count(F.lit(1)).alias("read"),
            )
            .collect()
        )
        found.sort(key=lambda item: (item["first"]["partition"], item["first"]["row"]))
        values = [str(item["variant"]) for item in found]
        described = ", ".join(values) or "none"
        if not wanted:
            raise UsageError(
                f"name the baseline's value of {variant_field!r} (values found: {described})"
            )
        for value in wanted:
            if value not in values:
                raise UsageError(
                    f"no record has {variant_field} = {value!r} (values found: {described})"
                )
        if len(set(wanted)) != len(wanted):
            raise UsageError(f"a value of {variant_field!r} is named twice: {', '.join(wanted)}")
        chosen = wanted if len(wanted) > 1 else [*wanted, *(v for v in values if v != wanted[0])]
        if len(chosen) < 2:
            raise UsageError(
                f"{name}: only {variant_field} = {wanted[0]!r} was found; nothing to compare with"
            )
        counts = {str(item["variant"]): int(item["read"]) for item in found}
        unassigned = validated.where(F.col("kind") != _TRACE)
        unassigned_read = unassigned.count()
        if unassigned_read:
            self.extra_read[f"{name} (no {variant_field})"] = unassigned_read
            self.extra_invalid[f"{name} (no {variant_field})"] = unassigned_read
        for value in values:
            if value not in chosen:
                self.extra_read[f"{variant_field}={value} (not compared)"] = counts[value]
        # The records that name no variant are problems of the one input, in its order.
        self.unassigned = _problem_rows(unassigned, 0)
        return [
            self._side(value, 0, validated.where(F.col("variant") == value)) for value in chosen
        ]

    def _side(self, name: str, rank: int, validated: Any) -> _SparkSide:
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        traces = validated.where(F.col("kind") == _TRACE)
        in_order = Window.partitionBy("query_id").orderBy("partition", "row")
        numbered = traces.withColumn("occurrence", F.row_number().over(in_order)).withColumn(
            "first_location", F.first("location").over(in_order)
        )
        # A repeated ID's message is worded on the driver, for the few problems it collects.
        repeated = numbered.where(F.col("occurrence") > 1).select(
            F.lit(rank).alias("rank"),
            "partition",
            "row",
            F.lit(None).cast("string").alias("payload"),
            F.lit(name).alias("side"),
            "query_id",
            "location",
            "first_location",
        )
        invalid = _problem_rows(validated.where(F.col("kind") == _INVALID), rank)
        first = numbered.where(F.col("occurrence") == 1).drop(
            "occurrence", "first_location", "kind", "payload", "variant"
        )
        return _SparkSide(name, rank, first, invalid.unionByName(repeated))

    def check_problems(self, sides: list[_SparkSide]) -> None:
        """Counts per side; under ``on_invalid="fail"`` the first problem in reading order is
        raised, else the first few are kept as examples (as the local reader does)."""
        problems = self.unassigned
        for side in sides:
            problems = side.problems if problems is None else problems.unionByName(side.problems)
            side.invalid = side.problems.count()
            side.read = side.traces.count() + side.invalid
        if problems is None:
            return
        keep = 1 if self.settings.on_invalid == "fail" else INVALID_EXAMPLES_KEPT
        first = problems.orderBy("rank", "partition", "row").limit(keep).collect()
        examples = [_problem(item, self.settings.fields.query_id) for item in first]
        if examples and self.settings.on_invalid == "fail":
            example = examples[0]
            raise InputError(example.location, example.field, example.problem)
        self.invalid_examples.extend(examples)

    def join_labels(
        self, sides: list[_SparkSide], labels: Any, labels_format: str | None
    ) -> tuple[Any, str | None]:
        """Each query's labels, one row per labeled query (query_id, labels), from a labels source
        and every side, checked to agree as the local compare checks them."""
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        entries = [
            side.traces.where(F.col("labels_key").isNotNull()).select(
                "query_id",
                F.lit(side.rank + 1).alias("rank"),
                "partition",
                "row",
                "labels_key",
                "labels",
            )
            for side in sides
        ]
        labels_name = None
        if labels is not None:
            labels_name = _source_name(labels)
            book = _LabelBook(self.settings)
            reader = _Reader(self.settings, None, None)
            book.add_source(labels, reader, labels_format)
            self.extra_read.update(reader.extra_read)
            self.extra_invalid.update(reader.extra_invalid)
            entries.insert(0, _labels_frame(sides[0].traces.sparkSession, book))
        joined = entries[0]
        for more in entries[1:]:
            joined = joined.unionByName(more)
        in_order = Window.partitionBy("query_id").orderBy("rank", "partition", "row")
        ranked = joined.withColumn("first_key", F.first("labels_key").over(in_order)).withColumn(
            "first_labels", F.first("labels").over(in_order)
        )
        conflict = (
            ranked.where(F.col("labels_key") != F.col("first_key"))
            .orderBy("rank", "partition", "row")
            .limit(1)
            .collect()
        )
        if conflict:
            item = conflict[0]
            grades, location, _ = pickle.loads(item["labels"])
            known_grades, known_location, _ = pickle.loads(item["first_labels"])
            raise InputError(
                location,
                self.settings.fields.relevance_scores,
                f"query {item['query_id']!r} is labeled differently at {known_location} "
                f"({_describe(known_grades)} vs "
                f"{_describe(grades)})",
            )
        chosen = (
            ranked.withColumn("place", F.row_number().over(in_order))
            .where(F.col("place") == 1)
            .select("query_id", F.col("labels").alias("joined_labels"))
        )
        return chosen, labels_name


def _is_dataframe(data: Any) -> bool:
    return type(data).__module__.startswith("pyspark.") and hasattr(data, "mapInArrow")


def _problem_rows(frame: Any, rank: int) -> Any:
    from pyspark.sql import functions as F

    text = F.lit(None).cast("string")
    return frame.select(
        F.lit(rank).alias("rank"),
        "partition",
        "row",
        "payload",
        text.alias("side"),
        text.alias("query_id"),
        text.alias("location"),
        text.alias("first_location"),
    )


def _problem(item: Any, query_id_field: str) -> InvalidRecord:
    """A collected problem row as the local reader reports it."""
    if item["payload"] is not None:
        found = json.loads(item["payload"])
        return InvalidRecord(found["location"], found["field"], found["problem"])
    problem = (
        f"query {item['query_id']!r} appears twice in {item['side']} "
        f"(first at {item['first_location']})"
    )
    return InvalidRecord(item["location"], query_id_field, problem)


def _labels_frame(spark: Any, book: _LabelBook) -> Any:
    """The labels source's queries as label entries ranked before every side, in its order."""
    rows = [
        (
            query_id,
            0,
            0,
            position,
            _labels_key(found.grades),
            bytearray(pickle.dumps((found.grades, str(found.location), found.labeled_at))),
        )
        for position, (query_id, found) in enumerate(book.by_query.items())
    ]
    schema = (
        "query_id string, rank int, partition int, row bigint, labels_key string, labels binary"
    )
    return spark.createDataFrame(rows, schema=schema)


# --------------------------------------------------------------------------------------------
# Pairing (Spark) and scoring (executors), put together on the driver


@dataclass(frozen=True)
class _ScoreJob:
    """Scores one partition of the sides' queries with the local engine; pickled to the executors.

    Each input row holds a query's baseline trace, its candidate trace or both (a paired query),
    and the query's joined labels. A paired query is segmented by the baseline's attributes on
    both sides, as the local compare segments it.
    """

    evaluation: engine._PartitionJob
    settings: Settings

    def __call__(self, batches: Iterable[Any]) -> Iterator[Any]:
        from pyspark import TaskContext

        context = TaskContext.get()
        partition = context.partitionId() if context is not None else 0
        yield from score_sides(self, partition, list(batches))


def _scored_columns(job: engine._PartitionJob) -> list[tuple[str, str]]:
    return [*engine._output_columns(job), ("side", "tinyint")]


def score_sides(job: _ScoreJob, partition: int, batches: Sequence[Any]) -> Iterator[Any]:
    """Both sides of one partition scored by ``rankgate.evaluate``, in the eval engine's output
    layout plus a ``side`` column (0 baseline, 1 candidate).

    Public to the module's tests so that the executor side can be exercised without Spark.
    """
    import pyarrow as pa

    if not batches:
        return
    rows = pa.Table.from_batches(batches).to_pylist()
    if not rows:
        return
    book = _LabelBook(job.settings)
    sides: tuple[list[Trace], list[Trace]] = ([], [])
    order: tuple[dict[str, tuple[int, int]], dict[str, tuple[int, int]]] = ({}, {})
    # Each query's full attributes: segments may read nested values, which per-query attributes
    # (scalars only) leave out.
    everything: tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]] = ({}, {})
    for row in rows:
        base = None if row["base_trace"] is None else pickle.loads(row["base_trace"])
        candidate = None if row["candidate_trace"] is None else pickle.loads(row["candidate_trace"])
        query_id = row["query_id"]
        if row["joined_labels"] is not None:
            grades, location, labeled_at = pickle.loads(row["joined_labels"])
            book.by_query[query_id] = _Labels(grades, location, labeled_at)
        for side, trace in ((_BASELINE_SIDE, base), (_CANDIDATE_SIDE, candidate)):
            if trace is None:
                continue
            attributes = (base if base is not None else trace).attributes
            labeled = book.labeled(trace, attributes)
            sides[side].append(labeled)
            order[side][query_id] = (row["order_partition"], row["order_row"])
            everything[side][query_id] = labeled.attributes
    schema = _arrow_schema(_scored_columns(job.evaluation))
    for side, traces in enumerate(sides):
        if not traces:
            continue
        try:
            evaluation = local_evaluate(
                traces,
                list(job.evaluation.metrics),
                settings=job.evaluation.settings,
                policy=job.evaluation.policy,
                partial=True,
            )
        except RankgateError as problem:
            payload = engine._error_payload(problem)
            yield _single_row(schema, engine._KIND_ERROR, partition, side, payload)
            return
        yield from _query_rows(
            job.evaluation, evaluation, order[side], everything[side], side, schema
        )
        payload = engine._counts_payload(evaluation)
        yield _single_row(schema, engine._KIND_COUNTS, partition, side, payload)


def _query_rows(
    job: engine._PartitionJob,
    evaluation: Evaluation,
    order: dict[str, tuple[int, int]],
    everything: dict[str, dict[str, Any]],
    side: int,
    schema: Any,
) -> Iterator[Any]:
    import pyarrow as pa

    count = len(evaluation.query_ids)
    if not count:
        return
    places = [order[query_id] for query_id in evaluation.query_ids]
    attributes = [dict(row) for row in evaluation.attributes]
    columns: dict[str, Any] = {
        "kind": [engine._KIND_QUERY] * count,
        "partition": [place[0] for place in places],
        "position": [place[1] for place in places],
        "row": [place[1] for place in places],
        "query_id": list(evaluation.query_ids),
        "unnamed": [False] * count,
        "attributes": [json.dumps(row, ensure_ascii=False) for row in attributes],
        "payload": [None] * count,
        "side": [side] * count,
    }
    for i, spec in enumerate(job.value_specs):
        columns[f"m{i}"] = pa.array(evaluation.values[spec], pa.float64())
    for i, name in enumerate(job.segment_fields):
        columns[f"s{i}"] = [segment_value(everything[q], name) for q in evaluation.query_ids]
    for i, _ in enumerate(job.attributes):
        columns[f"a{i}"] = [None] * count
    table = pa.table({field.name: columns[field.name] for field in schema}, schema=schema)
    yield from table.to_batches(max_chunksize=engine.OUTPUT_ROWS)


def _single_row(schema: Any, kind: str, partition: int, side: int, payload: str) -> Any:
    import pyarrow as pa

    columns: dict[str, list[Any]] = {name: [None] for name in schema.names}
    columns.update(kind=[kind], partition=[partition], payload=[payload], side=[side])
    return pa.RecordBatch.from_pydict(columns, schema=schema)


@dataclass(frozen=True, eq=False)
class _ScoredSides:
    """Both sides of one candidate, put together: what the cell code needs (the fields of the
    local compare's own result of this step)."""

    pairing: Pairing
    baseline: Evaluation
    candidate: Evaluation
    # Segment values per field, aligned with each side's query_ids; paired: the baseline's only.
    segments: dict[str, list[str]]
    candidate_segments: dict[str, list[str]]


def _scored(
    base: _SparkSide,
    side: _SparkSide,
    requested: str,
    chosen_labels: Any,
    job: engine._PartitionJob,
    gates: tuple[Gate, ...],
    settings: Settings,
    policy: GatePolicy,
) -> _ScoredSides:
    """Pair (Spark), choose the design as the local compare does, score both sides (executors)."""
    from pyspark.sql import functions as F

    pairing = _pairing(base, side, requested)
    if pairing.design == "unpaired":
        # Each side on all its own queries, segmented by its own attributes.
        def own(part: _SparkSide, column: str) -> Any:
            empty = F.lit(None).cast("binary")
            return part.traces.select(
                "query_id",
                F.col("partition").alias("order_partition"),
                F.col("row").alias("order_row"),
                (F.col("trace") if column == "base_trace" else empty).alias("base_trace"),
                (F.col("trace") if column == "candidate_trace" else empty).alias("candidate_trace"),
            )

        frame = own(base, "base_trace").unionByName(own(side, "candidate_trace"))
    else:
        # Both sides on the paired queries, in the baseline's order, segmented by its attributes.
        frame = base.traces.select(
            "query_id",
            F.col("partition").alias("order_partition"),
            F.col("row").alias("order_row"),
            F.col("trace").alias("base_trace"),
        ).join(side.traces.select("query_id", F.col("trace").alias("candidate_trace")), "query_id")
    frame = frame.join(chosen_labels, "query_id", "left")
    return _score(frame, pairing, job, gates, settings, policy)


def _pairing(base: _SparkSide, side: _SparkSide, requested: str) -> Pairing:
    """Queries on both sides, on the baseline's only and on the candidate's only (with the first
    few one-sided IDs in each side's input order), and the design the local compare would choose."""
    from pyspark.sql import functions as F

    left = base.traces.select("query_id", "partition", "row", F.lit(True).alias("in_base"))
    right = side.traces.select(
        "query_id",
        F.col("partition").alias("c_partition"),
        F.col("row").alias("c_row"),
        F.lit(True).alias("in_candidate"),
    )
    both = left.join(right, "query_id", "full_outer").cache()
    try:
        found = both.agg(
            F.count(F.when(F.col("in_base") & F.col("in_candidate"), 1)).alias("paired"),
            F.count(F.when(F.col("in_candidate").isNull(), 1)).alias("baseline_only"),
            F.count(F.when(F.col("in_base").isNull(), 1)).alias("candidate_only"),
        ).collect()[0]
        paired = int(found["paired"])
        baseline_only = int(found["baseline_only"])
        candidate_only = int(found["candidate_only"])

        def first_ids(where: Any, partition: str, row: str, wanted: int) -> tuple[str, ...]:
            if not wanted:
                return ()
            chosen = both.where(where).orderBy(partition, row).limit(UNPAIRED_EXAMPLES_KEPT)
            return tuple(item["query_id"] for item in chosen.select("query_id").collect())

        baseline_only_ids = first_ids(
            F.col("in_candidate").isNull(), "partition", "row", baseline_only
        )
        candidate_only_ids = first_ids(
            F.col("in_base").isNull(), "c_partition", "c_row", candidate_only
        )
    finally:
        both.unpersist()
    base_side = _Counted(base.name, paired + baseline_only)
    candidate_side = _Counted(side.name, paired + candidate_only)
    smaller = min(base_side.queries, candidate_side.queries)
    share = paired / smaller if smaller else 0.0
    design, reason = _design(requested, share, paired, base_side, candidate_side)
    return Pairing(
        paired=paired,
        baseline_only=baseline_only,
        candidate_only=candidate_only,
        baseline_only_ids=baseline_only_ids,
        candidate_only_ids=candidate_only_ids,
        design=design,
        requested=requested,
        shared_share=share,
        reason=reason,
    )


def _score(
    frame: Any,
    pairing: Pairing,
    job: engine._PartitionJob,
    gates: tuple[Gate, ...],
    settings: Settings,
    policy: GatePolicy,
) -> _ScoredSides:
    import pyarrow.compute as pc

    columns = _scored_columns(job)
    scored = frame.mapInArrow(_ScoreJob(job, settings), _ddl(columns))
    to_arrow = getattr(scored, "toArrow", None)  # pyspark 4
    if to_arrow is not None:
        results = to_arrow()
    else:
        import pyarrow as pa

        results = pa.Table.from_batches(scored._collect_as_arrow(), schema=_arrow_schema(columns))
    # The sides' own intervals are not reported; gates on an interval bound need them, as locally.
    on_bounds = policy.gate_on in INTERVAL_BOUNDS or any(
        rule.gate_on in INTERVAL_BOUNDS for rule in policy.rules
    )
    side_settings = settings if on_bounds else replace(settings, resamples=0)
    evaluations = []
    segments = []
    for side in (_BASELINE_SIDE, _CANDIDATE_SIDE):
        rows = results.filter(pc.equal(results.column("side"), side)).drop_columns(["side"])
        evaluation = engine._assemble(rows, job, gates, side_settings, policy)
        evaluations.append(evaluation)
        segments.append(_segment_columns(rows, job, evaluation))
    baseline, candidate = evaluations
    if (
        pairing.design == "paired" and baseline.query_ids != candidate.query_ids
    ):  # same labels, same attributes
        raise AssertionError("baseline and candidate scored different queries")
    # Paired: both sides are segmented by the baseline's attributes, kept once (as locally).
    candidate_segments = segments[1] if pairing.design == "unpaired" else {}
    return _ScoredSides(pairing, baseline, candidate, segments[0], candidate_segments)


def _segment_columns(
    rows: Any, job: engine._PartitionJob, evaluation: Evaluation
) -> dict[str, list[str]]:
    """Each scored query's segment per field, aligned with the evaluation's query_ids (input
    order, as ``_assemble`` lays them out)."""
    import pyarrow.compute as pc

    queries = rows.filter(pc.equal(rows.column("kind"), engine._KIND_QUERY))
    queries = queries.take(
        pc.sort_indices(queries, sort_keys=[("partition", "ascending"), ("position", "ascending")])
    )
    wanted = dict.fromkeys(g.key.field for g in evaluation.segments if g.key is not None)
    return {
        name: queries.column(f"s{job.segment_fields.index(name)}").to_pylist() for name in wanted
    }
