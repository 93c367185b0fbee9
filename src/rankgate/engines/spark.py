"""Scoring a Spark DataFrame of traces: the local engine on every partition, put together on the driver.

Each partition is scored where it lives, on an executor, by ``rankgate.evaluate`` itself (run on the
partition's rows as one Arrow table, with the bootstrap turned off). Only two kinds of result travel
back to the driver: one row per scored query (its metric values, ID, segment values and scalar
fields) and one row of record counts per partition. The driver lays the per-query values end to end
in input order (partition, then position inside it) and builds the ``Evaluation`` the way the local
engine does: the same exact sums for the means, the same seeded bootstrap for the intervals, the
same gate decisions. A run here therefore equals ``rankgate.evaluate`` on the same rows taken in
the order Spark holds them (``df.toArrow()``).

To know which input row each scored query came from (for its segment values, its attributes and,
when it has no ID, its name), a partition's table gets a row-number column. Usually the local
engine is simply told that this column is the query ID, and everything else is read off the
partition's columns at the scored rows. When that swap could change a result (an ID the validator
would refuse, fields nested under ``input``...), the partition takes the general way instead: the
row number is read back from the attributes the local engine keeps, record by record, which is
exact but several times slower.

Where the two engines differ, and why:

* an invalid record is located as ``spark partition P row R`` (P counted from 0, as Spark numbers
  partitions; R from 1 inside the partition): a DataFrame has no file lines to point at, and the
  global row number would cost an extra pass over the data;
* ``Evaluation.examples`` (the worst queries with their rankings) stays empty: holding rankings
  would mean shipping the document IDs of every query to the driver;
* ``Evaluation.attributes`` (each scored query's other scalar fields) stay in Arrow columns on the
  driver and become dicts only when read.

pyspark is imported lazily; importing rankgate never needs it.
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from rankgate.attributes import AttributeRows, QueryIds
from rankgate.errors import (
    ConfigError,
    InputError,
    Location,
    RankgateError,
    SpecError,
    UsageError,
)
from rankgate.evaluate import (
    INVALID_EXAMPLES_KEPT,
    SKIP_REASONS,
    Evaluation,
    InvalidRecord,
    ServedDepth,
    Settings,
    Summary,
    check_bounds_computed,
    depth_warnings,
)
from rankgate.evaluate import evaluate as local_evaluate
from rankgate.gates import Gate, GatePolicy, decide, parse_gate
from rankgate.io.tables import ArrowSource
from rankgate.io.validate import NESTED_INPUT_KEY, RawRecord, validate_record
from rankgate.segments import (
    MISSING_VALUE,
    Group,
    GroupCounts,
    SegmentKey,
    check_segments,
    segment_value,
    split_by_segment,
    summarise,
)
from rankgate.spec import MetricSpec

if TYPE_CHECKING:
    from rankgate.compare import Comparison

__all__ = ["MISSING_PYSPARK", "compare_on_spark", "evaluate", "evaluate_path", "session"]

MISSING_PYSPARK = "the spark engine needs pyspark: pip install 'rankgate[spark]'"
# The row-number column added to every partition's table (see above); refused as a user column.
ROW_COLUMN = "__rankgate_row__"
# Per-query rows leave an executor in record batches of at most this many rows.
OUTPUT_ROWS = 65_536
# Attributes are decoded on the driver in blocks of this many queries, on first access.
ATTRIBUTE_BLOCK = 8_192
DEFAULT_MASTER = "local[*]"
# pyspark warns on every Arrow UDF that it has not been tested with pandas 3; this engine hands
# pandas nothing, so the warning would only alarm users.
_PANDAS_WARNING = "PySpark does not yet fully support pandas"
_KIND_QUERY, _KIND_COUNTS, _KIND_ERROR = "query", "counts", "error"
# Errors an executor reports as data, re-raised on the driver as the same class.
_ERROR_TYPES: dict[str, type[RankgateError]] = {
    cls.__name__: cls for cls in (InputError, SpecError, ConfigError, UsageError, RankgateError)
}


def evaluate(
    df: Any,
    metrics: Iterable[str | MetricSpec] | None = None,
    gates: Sequence[Gate | str] = (),
    *,
    settings: Settings | None = None,
    policy: GatePolicy | None = None,
) -> Evaluation:
    """Score the traces of a Spark DataFrame; the same results as ``rankgate.evaluate``.

    Args:
        df: a ``pyspark.sql.DataFrame`` whose columns are trace fields (``query_id``,
            ``retrieved_ids`` array<string>, ``relevant_ids`` array<string>, ``relevance_scores``
            map<string, number>) plus any others, such as segment fields.
        metrics, gates, settings, policy: as for ``rankgate.evaluate``. The bootstrap
            (``settings.resamples``) runs on the driver.

    Raises:
        UsageError: pyspark is not installed, or the DataFrame has a column named
            ``__rankgate_row__``.
        InputError: a record is malformed and ``settings.on_invalid`` is ``"fail"``; its location
            reads ``spark partition P row R``.
        SpecError: a metric or gate string is unknown or malformed.
    """
    _require_pyspark()
    settings = settings or Settings()
    policy = policy or GatePolicy()
    checked_gates = tuple(parse_gate(g) if isinstance(g, str) else g for g in gates)
    if ROW_COLUMN in df.columns:
        raise UsageError(f"the DataFrame has a column named {ROW_COLUMN}, which rankgate reserves")
    job = _plan(metrics, checked_gates, settings, policy, df.schema)
    with _quiet_pyspark():
        scored = df.mapInArrow(job, _output_ddl(job))
        results = _collect_arrow(scored, job)
    return _assemble(results, job, checked_gates, settings, policy)


def compare_on_spark(baseline: Any, *candidates: Any, **options: Any) -> Comparison:
    """Compare a baseline with candidates on Spark: the same ``Comparison`` as ``rankgate.compare``.

    The inputs are DataFrames or Parquet paths; the options are ``rankgate.compare``'s (metrics,
    gates, settings, policy, significance, labels, labels_format, variant_field, pairing) plus
    ``master`` and ``progress``. Defined in ``rankgate.engines.spark_compare``, which imports
    this module.
    """
    from rankgate.engines.spark_compare import compare_on_spark as compare_here

    return compare_here(baseline, *candidates, **options)


def evaluate_path(
    path: str | Path,
    metrics: Iterable[str | MetricSpec] | None = None,
    gates: Sequence[Gate | str] = (),
    settings: Settings | None = None,
    policy: GatePolicy | None = None,
    master: str | None = None,
    *,
    progress: bool = True,
) -> Evaluation:
    """Score a Parquet file, or a folder of Parquet part files, with Spark.

    The session is the running one when there is one, else a new one on ``master`` (``local[*]``
    by default; under spark-submit, Databricks or the pyspark shell, their own master). ``path``
    may be any URL Spark reads (``s3a://``, ``abfss://``, ``dbfs:/``...). ``progress=False`` turns
    off Spark's console progress bar in a session started here.
    """
    _require_pyspark()
    text = str(path)
    # Local paths are checked here for a plain message; URLs and glob patterns are Spark's to read.
    if not _is_pattern_or_url(text) and not Path(text).exists():
        raise UsageError(f"{text}: no such file or folder")
    spark = session(master, progress=progress)
    try:
        with _quiet_pyspark():
            df = spark.read.parquet(text)
    except Exception as problem:  # pyspark raises AnalysisException and others for unreadable input
        raise InputError(text, None, f"cannot read as Parquet ({_first_line(problem)})") from None
    return evaluate(df, metrics, gates, settings=settings, policy=policy)


def session(master: str | None = None, *, progress: bool = True) -> Any:
    """The active SparkSession, or a new one.

    A new session runs on ``master`` when given. Without one it runs on the master its launcher
    configured (a Python driver started by spark-submit or Databricks finds its JVM through
    ``PYSPARK_GATEWAY_PORT``), else on ``local[*]``. A local session's workers run this very Python
    (``PYSPARK_PYTHON``, when not set already), so they import the same rankgate. ``progress``
    applies to a new session only: Spark's console progress bar, on by default.
    """
    _require_pyspark()
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        running = active.sparkContext.master
        if master is not None and running != master:
            raise UsageError(
                f"a Spark session is already running on {running}; it cannot move to {master}"
            )
        return active
    builder = SparkSession.builder.appName("rankgate")
    if not progress:
        builder = builder.config("spark.ui.showConsoleProgress", "false")
    if master is None and "PYSPARK_GATEWAY_PORT" not in os.environ:
        master = DEFAULT_MASTER
    if master is not None:
        builder = builder.master(master)
        if master.startswith("local"):
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    with _quiet_pyspark():
        return builder.getOrCreate()


def _is_pattern_or_url(text: str) -> bool:
    return "://" in text or text.startswith("dbfs:") or any(c in text for c in "*?[{")


def _require_pyspark() -> None:
    try:
        import pyspark  # noqa: F401
    except ImportError:
        raise UsageError(MISSING_PYSPARK) from None


@contextmanager
def _quiet_pyspark() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_PANDAS_WARNING, category=FutureWarning)
        yield


def _first_line(problem: BaseException) -> str:
    text = str(problem).strip()
    return text.splitlines()[0] if text else type(problem).__name__


# --------------------------------------------------------------------------------------------
# The plan: what every executor computes, settled once on the driver

# Spark column types whose values reach Python as str, int, float or bool: the attribute kinds the
# local engine keeps per query. Values of any other type are kept only when null (as None).
# Keyed by Spark's type name; the value is the type's DDL name, which the output schema uses.
_SCALAR_TYPES = {
    "string": "string",
    "byte": "tinyint",
    "short": "smallint",
    "integer": "int",
    "long": "bigint",
    "float": "float",
    "double": "double",
    "boolean": "boolean",
}


@dataclass(frozen=True)
class _PartitionJob:
    """The work of one partition; pickled to the executors, where ``__call__`` runs.

    ``value_specs`` are the metrics computed (the requested ones, then ``judged``), in the order of
    the output columns ``m0``, ``m1``...; ``segment_fields`` give the columns ``s0``, ``s1``...
    ``attributes`` lists the DataFrame's columns that are not trace fields, each with the Spark
    type its values travel back in (``a0``, ``a1``...), or None for a column that travels only as
    "is null" (its non-null values are nested, which per-query attributes leave out).
    ``trace_columns`` are the DataFrame's columns the field map consumes.
    """

    metrics: tuple[MetricSpec, ...]
    value_specs: tuple[MetricSpec, ...]
    judged: MetricSpec | None
    segment_fields: tuple[str, ...]
    settings: Settings
    policy: GatePolicy
    attributes: tuple[tuple[str, str | None], ...]
    trace_columns: frozenset[str]

    def __call__(self, batches: Iterable[Any]) -> Iterator[Any]:
        from pyspark import TaskContext

        context = TaskContext.get()
        partition = context.partitionId() if context is not None else 0
        yield from score_partition(self, partition, list(batches))


def _plan(
    metrics: Iterable[str | MetricSpec] | None,
    gates: tuple[Gate, ...],
    settings: Settings,
    policy: GatePolicy,
    schema: Any,
) -> _PartitionJob:
    """The job, from a run of the local engine over no rows on the driver.

    That dry run settles the metric list (requested, then those only gates name), the ``judged``
    spec and their order exactly as a real local run would, and rejects bad metric or gate strings
    before any Spark job starts.
    """
    check_bounds_computed(policy, settings)
    dry = local_evaluate(
        [], metrics, gates, settings=replace(settings, resamples=0), policy=policy, partial=True
    )
    segment_fields = tuple(
        dict.fromkeys([*settings.segment_by, *(rule.key.field for rule in policy.rules)])
    )
    trace_columns = frozenset(path for path in settings.fields.paths() if path in schema.names)
    attributes = tuple(
        (column.name, _SCALAR_TYPES.get(column.dataType.typeName()))
        for column in schema.fields
        if column.name not in trace_columns
    )
    executor_settings = replace(settings, resamples=0)
    labels = settings.label_filter
    if labels.max_age is not None and labels.as_of is None:
        # "Too old" is judged against now: one now for every partition, not each executor's own.
        executor_settings = replace(
            executor_settings, label_filter=replace(labels, as_of=datetime.now(UTC))
        )
    return _PartitionJob(
        metrics=dry.metrics,
        value_specs=tuple(dry.values),
        judged=dry.judged,
        segment_fields=segment_fields,
        # The executors' intervals would be thrown away; the driver bootstraps the whole input.
        settings=executor_settings,
        policy=policy,
        attributes=attributes,
        trace_columns=trace_columns,
    )


def _output_columns(job: _PartitionJob) -> list[tuple[str, str]]:
    """Name and Spark type of every output column. Metric, segment and attribute columns are named
    by position: spec strings such as ``ndcg(gain=linear)@10`` are not safe column names."""
    return [
        ("kind", "string"),
        ("partition", "int"),
        ("position", "bigint"),
        ("row", "bigint"),
        ("query_id", "string"),
        ("unnamed", "boolean"),
        *((f"m{i}", "double") for i in range(len(job.value_specs))),
        *((f"s{i}", "string") for i in range(len(job.segment_fields))),
        *((f"a{i}", kind or "boolean") for i, (_, kind) in enumerate(job.attributes)),
        ("attributes", "string"),
        ("payload", "string"),
    ]


def _output_ddl(job: _PartitionJob) -> str:
    return ", ".join(f"{name} {kind}" for name, kind in _output_columns(job))


def _output_schema(job: _PartitionJob) -> Any:
    import pyarrow as pa

    arrow = {
        "string": pa.string(),
        "tinyint": pa.int8(),
        "smallint": pa.int16(),
        "int": pa.int32(),
        "bigint": pa.int64(),
        "float": pa.float32(),
        "double": pa.float64(),
        "boolean": pa.bool_(),
    }
    return pa.schema([(name, arrow[kind]) for name, kind in _output_columns(job)])


# --------------------------------------------------------------------------------------------
# On an executor


def score_partition(job: _PartitionJob, partition: int, batches: Sequence[Any]) -> Iterator[Any]:
    """Score one partition's record batches with the local engine; yield the output batches.

    Public to the module's tests so that the executor side can be exercised without Spark.
    """
    import pyarrow as pa

    table = pa.Table.from_batches(batches) if batches else None
    if table is None or table.num_rows == 0:
        return  # nothing read: no counts either, which sum to the same totals
    table = table.append_column(
        ROW_COLUMN, pa.array(np.arange(1, table.num_rows + 1, dtype=np.int64))
    )
    name = f"spark partition {partition}"
    schema = _output_schema(job)
    try:
        if _by_columns(job, table):
            evaluation, columns = _score_by_columns(job, table, name)
        else:
            evaluation, columns = _score_by_records(job, table, name)
    except RankgateError as problem:
        # Raised here, it would reach the driver as a Spark task failure wrapping a traceback;
        # as data it is re-raised there as the same error with the same location.
        yield _single_row(schema, _KIND_ERROR, partition, _error_payload(problem))
        return
    count = len(columns["row"])
    columns.update(
        kind=pa.array([_KIND_QUERY] * count, pa.string()),
        partition=pa.array(np.full(count, partition, dtype=np.int32)),
        position=pa.array(np.arange(count, dtype=np.int64)),
        payload=pa.nulls(count, pa.string()),
    )
    for i, spec in enumerate(job.value_specs):
        columns[f"m{i}"] = pa.array(evaluation.values[spec], pa.float64())
    output = pa.table(
        [_as_type(columns[field.name], field.type) for field in schema], schema=schema
    )
    yield from output.to_batches(max_chunksize=OUTPUT_ROWS)
    yield _single_row(schema, _KIND_COUNTS, partition, _counts_payload(evaluation))


def _as_type(values: Any, kind: Any) -> Any:
    import pyarrow as pa

    if not isinstance(values, (pa.Array, pa.ChunkedArray)):
        return pa.array(values, kind)
    return values if values.type == kind else values.cast(kind)


def _by_columns(job: _PartitionJob, table: Any) -> bool:
    """Whether the scored queries' rows, IDs, segments and attributes can be read off the columns.

    That needs the local engine to name each scored query by its row, which it does when the
    field map points ``query_id`` at the row number column. The swap changes nothing else provided
    no ID of this partition is one the validator would refuse (that would turn an invalid record
    into a valid one), nothing else reads the ID column as an attribute, and no record can nest its
    fields under ``input`` (attributes would then come from inside the record).
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    names = set(table.column_names)
    fields = job.settings.fields
    query_id = fields.query_id
    if "." in query_id:
        return False
    # The validator looks inside `input` only for a record without its own retrieved_ids and only
    # when `input` holds an object: a text column named input (a RAG prompt, say) is harmless.
    if NESTED_INPUT_KEY in names and fields.retrieved_ids not in names:
        nested = table.column(NESTED_INPUT_KEY).type
        if pa.types.is_struct(nested) or pa.types.is_map(nested):
            return False
    readers = {job.settings.label_filter.labeled_at_field}
    for path in job.segment_fields:
        readers.update((path, path.partition(".")[0]))
    if query_id in readers:
        return False
    if query_id not in names:
        return True
    ids = table.column(query_id)
    kind = ids.type
    if pa.types.is_integer(kind) or ids.null_count == len(ids):
        return True
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return not pc.any(pc.equal(ids, "")).as_py()  # "" is an invalid ID
    return False


def _score_by_columns(
    job: _PartitionJob, table: Any, name: str
) -> tuple[Evaluation, dict[str, Any]]:
    """The fast way: the local engine names each scored query by its row, and everything else is
    taken from the partition's columns at those rows, with no Python object per record."""
    import pyarrow as pa
    import pyarrow.compute as pc

    fields = replace(job.settings.fields, query_id=ROW_COLUMN)
    evaluation = local_evaluate(
        ArrowSource.table(name, table),
        list(job.metrics),
        settings=replace(job.settings, fields=fields),
        policy=job.policy,
        partial=True,
    )
    rows = np.fromiter(
        (int(row) for row in evaluation.query_ids), dtype=np.int64, count=len(evaluation.query_ids)
    )
    index = pa.array(rows - 1)
    query_id = job.settings.fields.query_id
    if query_id in table.column_names:
        ids = table.column(query_id).take(index)
        if not (pa.types.is_string(ids.type) or pa.types.is_large_string(ids.type)):
            ids = ids.cast(pa.string())  # integer IDs read as text, as the validator reads them
    else:
        ids = pa.nulls(len(rows), pa.string())
    columns: dict[str, Any] = {
        "row": pa.array(rows),
        # An ID left null is named after its row on the driver, which knows the row's place in
        # the whole input.
        "query_id": ids,
        "unnamed": pc.is_null(ids),
        "attributes": pa.nulls(len(rows), pa.string()),
    }
    for i, path in enumerate(job.segment_fields):
        columns[f"s{i}"] = _segment_texts(job, table, path, index)
    for i, (column, kind) in enumerate(job.attributes):
        values = table.column(column).take(index)
        columns[f"a{i}"] = values if kind is not None else pc.is_null(values)
    return evaluation, columns


def _segment_texts(job: _PartitionJob, table: Any, path: str, index: Any) -> Any:
    """One segment field's value at the given rows, as ``segment_value`` reads it from a record's
    attributes: the column named ``path`` itself, else (for ``a.b``) the nested value under ``a``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    names = set(table.column_names) - job.trace_columns
    if path in names:
        values = table.column(path).take(index)
        kind = values.type
        # Few distinct values: each is worded once. Only for types whose equal values have one
        # wording (a float 0.0 and -0.0 are equal yet read differently).
        if pa.types.is_string(kind) or pa.types.is_integer(kind) or pa.types.is_boolean(kind):
            encoded = values.combine_chunks().dictionary_encode()
            texts = [segment_value({path: v}, path) for v in encoded.dictionary.to_pylist()]
            codes = pc.fill_null(encoded.indices, len(texts))
            return pa.array([*texts, MISSING_VALUE], pa.string()).take(codes)
        cells = values.to_pylist(maps_as_pydicts="strict")
        return pa.array([segment_value({path: v}, path) for v in cells], pa.string())
    head, dot, _ = path.partition(".")
    if dot and head in names:
        cells = table.column(head).take(index).to_pylist(maps_as_pydicts="strict")
        return pa.array([segment_value({head: v}, path) for v in cells], pa.string())
    return pa.array([MISSING_VALUE] * len(index), pa.string())


def _score_by_records(
    job: _PartitionJob, table: Any, name: str
) -> tuple[Evaluation, dict[str, Any]]:
    """The general way: the per-query attributes the local engine reads back (one record at a
    time) carry each query's row; segments and attributes come from them."""
    evaluation = local_evaluate(
        ArrowSource.table(name, table),
        list(job.metrics),
        settings=job.settings,
        policy=job.policy,
        partial=True,
    )
    rows: list[int] = []
    attributes: list[str] = []
    segments: list[list[str | None]] = [[] for _ in job.segment_fields]
    # Queries whose segment field is not among their scalar attributes (absent, nested, or a dotted
    # path): their segment values come from the whole record, as the local engine reads them.
    incomplete: list[int] = []
    for position, row_attributes in enumerate(evaluation.attributes):
        kept = dict(row_attributes)
        rows.append(int(kept.pop(ROW_COLUMN)))
        attributes.append(json.dumps(kept, ensure_ascii=False))
        complete = True
        for texts, field_name in zip(segments, job.segment_fields, strict=True):
            if field_name in kept:
                texts.append(segment_value(kept, field_name))
            else:
                texts.append(None)
                complete = False
        if not complete:
            incomplete.append(position)
    if incomplete:
        records = _raw_records(table, name, [rows[i] for i in incomplete])
        for position, raw in zip(incomplete, records, strict=True):
            full = validate_record(raw, job.settings.fields).attributes
            for texts, field_name in zip(segments, job.segment_fields, strict=True):
                texts[position] = segment_value(full, field_name)
    columns: dict[str, Any] = {
        "row": rows,
        "query_id": list(evaluation.query_ids),
        "unnamed": _unnamed(job, evaluation.query_ids, rows, table, name),
        "attributes": attributes,
    }
    for i, texts in enumerate(segments):
        columns[f"s{i}"] = texts
    for i, _ in enumerate(job.attributes):
        columns[f"a{i}"] = [None] * len(rows)
    return evaluation, columns


def _unnamed(
    job: _PartitionJob, query_ids: Sequence[str], rows: list[int], table: Any, name: str
) -> list[bool]:
    """Which queries carry no ID of their own and were named ``#N`` after their row.

    The local engine names them by their row in the whole input, which only the driver can work
    out; here the candidates (an ID that reads ``#<own row>``) are validated again with another
    ordinal, and only a name that follows the ordinal was made up.
    """
    flags = [False] * len(query_ids)
    candidates = [
        i
        for i, (query_id, row) in enumerate(zip(query_ids, rows, strict=True))
        if query_id == f"#{row}"
    ]
    if not candidates:
        return flags
    records = _raw_records(table, name, [rows[i] for i in candidates])
    for i, raw in zip(candidates, records, strict=True):
        again = RawRecord(raw.location, raw.value, 0, from_table=True)
        flags[i] = validate_record(again, job.settings.fields).query_id == "#0"
    return flags


def _raw_records(table: Any, name: str, rows: list[int]) -> list[RawRecord]:
    """The records at these 1-based rows, as the table reader presents them to the validator."""
    import pyarrow as pa

    picked = table.take(pa.array([row - 1 for row in rows], type=pa.int64()))
    values = picked.to_pylist(maps_as_pydicts="strict")
    return [
        RawRecord(Location(name, row=row), value, row, from_table=True)
        for row, value in zip(rows, values, strict=True)
    ]


def _counts_payload(evaluation: Evaluation) -> str:
    summary = evaluation.summary
    return json.dumps(
        {
            "read": summary.read,
            "duplicates": summary.duplicates_dropped,
            "chunks_collapsed": summary.chunks_collapsed,
            "depths": [] if summary.served_depth is None else summary.served_depth.histogram,
            "invalid": [
                [example.location, example.field, example.problem]
                for example in summary.invalid_examples
            ],
            "overall": _group_counts(evaluation.overall),
            "segments": [
                [group.key.field, group.key.value, _group_counts(group)]
                for group in evaluation.segments
                if group.key is not None
            ],
        },
        ensure_ascii=False,
    )


def _group_counts(group: Group) -> dict[str, Any]:
    return {
        "read": group.read,
        "labeled": group.labeled,
        "skipped": group.skipped,
        "labels_removed_stale": group.labels_removed_stale,
        "labels_removed_expired": group.labels_removed_expired,
        "lost_all_relevant": group.lost_all_relevant,
    }


def _error_payload(problem: RankgateError) -> str:
    payload: dict[str, Any] = {"type": type(problem).__name__, "message": str(problem)}
    if isinstance(problem, InputError):
        location = problem.location
        payload["field"] = problem.field
        payload["problem"] = problem.problem
        if isinstance(location, Location):
            payload["location"] = {
                "source": location.source,
                "line": location.line,
                "row": location.row,
            }
        else:
            payload["location"] = str(location)
    return json.dumps(payload, ensure_ascii=False)


def _single_row(schema: Any, kind: str, partition: int, payload: str) -> Any:
    import pyarrow as pa

    columns: dict[str, list[Any]] = {name: [None] for name in schema.names}
    columns.update(kind=[kind], partition=[partition], payload=[payload])
    return pa.RecordBatch.from_pydict(columns, schema=schema)


# --------------------------------------------------------------------------------------------
# On the driver


def _collect_arrow(frame: Any, job: _PartitionJob) -> Any:
    """The output rows as one Arrow table, without a Python object per row on the way."""
    import pyarrow as pa

    to_arrow = getattr(frame, "toArrow", None)  # pyspark 4
    if to_arrow is not None:
        return to_arrow()
    return pa.Table.from_batches(frame._collect_as_arrow(), schema=_output_schema(job))


def _assemble(
    results: Any,
    job: _PartitionJob,
    gates: tuple[Gate, ...],
    settings: Settings,
    policy: GatePolicy,
) -> Evaluation:
    """The Evaluation of the whole DataFrame, built as ``_Accumulator.result`` builds the local one."""
    import pyarrow.compute as pc

    kind = results.column("kind")
    errors = results.filter(pc.equal(kind, _KIND_ERROR))
    if errors.num_rows:
        raise _first_error(errors)
    counts = sorted(
        results.filter(pc.equal(kind, _KIND_COUNTS)).select(["partition", "payload"]).to_pylist(),
        key=lambda item: int(item["partition"]),
    )
    queries = results.filter(pc.equal(kind, _KIND_QUERY))
    # Input order: partitions in Spark's order, each in its own order. toArrow already returns
    # them so; sorting makes the order a guarantee rather than an observation.
    queries = queries.take(
        pc.sort_indices(queries, sort_keys=[("partition", "ascending"), ("position", "ascending")])
    )

    read = duplicates = chunks_collapsed = 0
    depths: dict[int, int] = {}
    offsets: dict[int, int] = {}  # rows read before each partition
    overall = GroupCounts()
    segment_counts: dict[SegmentKey, GroupCounts] = {}
    invalid_examples: list[InvalidRecord] = []
    for item in counts:
        payload = json.loads(item["payload"])
        offsets[int(item["partition"])] = read
        read += int(payload["read"])
        duplicates += int(payload["duplicates"])
        chunks_collapsed += int(payload.get("chunks_collapsed", 0))
        for depth, rankings in payload.get("depths", ()):
            depths[int(depth)] = depths.get(int(depth), 0) + int(rankings)
        for location, field_name, problem in payload["invalid"]:
            if len(invalid_examples) < INVALID_EXAMPLES_KEPT:
                invalid_examples.append(InvalidRecord(location, field_name, problem))
        _add_counts(overall, payload["overall"])
        for field_name, value, group in payload["segments"]:
            key = SegmentKey(field_name, value)
            _add_counts(segment_counts.setdefault(key, GroupCounts()), group)

    query_ids = _query_ids(queries, offsets)
    values: dict[MetricSpec, npt.NDArray[np.float64]] = {
        spec: np.ascontiguousarray(queries.column(f"m{i}").to_numpy(), dtype=np.float64)
        for i, spec in enumerate(job.value_specs)
    }
    seed, resamples = settings.seed, settings.resamples
    overall_group = summarise(None, overall, values, seed, resamples)
    segments = []
    for i, name in enumerate(job.segment_fields):
        column: list[str] = queries.column(f"s{i}").to_pylist()
        parts = split_by_segment(column, values)
        for key in sorted(k for k in segment_counts if k.field == name):
            empty = {spec: np.zeros(0, dtype=np.float64) for spec in values}
            segments.append(
                summarise(key, segment_counts[key], parts.get(key.value, empty), seed, resamples)
            )
    attributes = _attribute_rows(queries, job)
    # Partitions score with the whole-input checks off; they run once here, over every partition.
    warnings = check_segments(settings, policy, overall, segment_counts, segments, attributes)
    served_depth = ServedDepth.from_histogram(depths)
    warnings.extend(depth_warnings(job.metrics, served_depth, settings.served_k, gates, policy))
    outcomes, coverage = decide(gates, policy, overall_group, segments)
    summary = Summary(
        read=read,
        scored=len(query_ids),
        skipped={reason: overall.skipped.get(reason, 0) for reason in SKIP_REASONS},
        labeled=overall.labeled,
        duplicates_dropped=duplicates,
        chunks_collapsed=chunks_collapsed,
        doc_ids=None if settings.doc_ids is None else str(settings.doc_ids),
        served_depth=served_depth,
        invalid_examples=tuple(invalid_examples),
        labels_removed_stale=overall.labels_removed_stale,
        labels_removed_expired=overall.labels_removed_expired,
        lost_all_relevant=overall.lost_all_relevant,
    )
    return Evaluation(
        metrics=job.metrics,
        query_ids=query_ids,
        values=values,
        attributes=attributes,
        summary=summary,
        gates=outcomes,
        settings=settings,
        overall=overall_group,
        segments=tuple(segments),
        coverage_checks=coverage,
        policy=policy,
        judged=job.judged,
        warnings=tuple(warnings),
    )


def _add_counts(total: GroupCounts, part: dict[str, Any]) -> None:
    total.read += int(part["read"])
    total.labeled += int(part["labeled"])
    total.labels_removed_stale += int(part["labels_removed_stale"])
    total.labels_removed_expired += int(part["labels_removed_expired"])
    total.lost_all_relevant += int(part["lost_all_relevant"])
    for reason, count in part["skipped"].items():
        if count:
            total.skipped[reason] = total.skipped.get(reason, 0) + int(count)


def _query_ids(queries: Any, offsets: dict[int, int]) -> QueryIds:
    """Query IDs in input order, kept as Arrow text; a query without an ID is named by its row in
    the whole input, ``#N``, as the local engine names it."""
    import pyarrow as pa
    import pyarrow.compute as pc

    ids = queries.column("query_id").combine_chunks()
    unnamed = np.asarray(queries.column("unnamed").to_numpy(), dtype=np.bool_)
    if unnamed.any():
        positions = np.flatnonzero(unnamed)
        partitions = queries.column("partition").to_numpy()[positions].tolist()
        rows = queries.column("row").to_numpy()[positions].tolist()
        names = [f"#{offsets[p] + r}" for p, r in zip(partitions, rows, strict=True)]
        ids = pc.replace_with_mask(ids, pa.array(unnamed), pa.array(names, ids.type))
    query_ids = QueryIds()
    query_ids.extend_arrow(ids)
    return query_ids


def _attribute_rows(queries: Any, job: _PartitionJob) -> AttributeRows:
    """Each query's scalar fields, kept as Arrow columns (or JSON text, for queries scored the
    general way) and made into dicts a block at a time, when first read."""
    columns = ["attributes", *(f"a{i}" for i in range(len(job.attributes)))]
    kept = queries.select(columns)
    rows = AttributeRows()
    for start in range(0, kept.num_rows, ATTRIBUTE_BLOCK):
        block = kept.slice(start, ATTRIBUTE_BLOCK)
        rows.extend_later(block.num_rows, partial(_attribute_dicts, block, job.attributes))
    return rows


def _attribute_dicts(
    block: Any, attributes: tuple[tuple[str, str | None], ...]
) -> list[dict[str, Any]]:
    texts = block.column(0).to_pylist()
    cells = [
        (name, kind is not None, block.column(i + 1).to_pylist())
        for i, (name, kind) in enumerate(attributes)
    ]
    rows: list[dict[str, Any]] = []
    for i, text in enumerate(texts):
        if text is not None:
            rows.append(json.loads(text))
            continue
        row: dict[str, Any] = {}
        for name, scalar, values in cells:
            if scalar:
                row[name] = values[i]
            elif values[i]:
                row[name] = None  # a nested column's null is kept; its values are not
        rows.append(row)
    return rows


def _first_error(errors: Any) -> RankgateError:
    """The error of the first partition in input order: under on_invalid="fail" that is the first
    invalid record of the whole input, the one the local engine would stop at."""
    first = min(errors.select(["partition", "payload"]).to_pylist(), key=lambda e: e["partition"])
    payload = json.loads(first["payload"])
    cls = _ERROR_TYPES.get(payload["type"], RankgateError)
    if cls is not InputError:
        return cls(payload["message"])
    where = payload["location"]
    location = (
        Location(where["source"], where["line"], where["row"])
        if isinstance(where, dict)
        else str(where)
    )
    return InputError(location, payload["field"], payload["problem"])
