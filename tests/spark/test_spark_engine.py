"""The Spark engine gives the local engine's numbers, on data spread over several partitions.

Every comparison runs the local engine on ``arrow_of(df)``: the same rows in the order Spark holds
them (partition by partition), which is the order the Spark engine promises to reproduce. One
local-mode session serves the whole module.

Skipped, with the reason shown, when pyspark or Java is missing; with RANKGATE_REQUIRE_SPARK=1 set
(as in CI), a missing pyspark or Java fails instead.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import sys
import warnings
from dataclasses import replace

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import rankgate
from rankgate import InputError, Settings
from rankgate.errors import Location, SpecError, UsageError
from rankgate.gates import GatePolicy, SegmentRule, parse_gate
from rankgate.io import FieldMap
from rankgate.segments import MISSING_VALUE, SegmentKey
from rankgate.stale import LabelFilter

REQUIRED = os.environ.get("RANKGATE_REQUIRE_SPARK") == "1"


def _unavailable() -> str | None:
    try:
        import pyspark  # noqa: F401
    except ImportError:
        return "pyspark is not installed (pip install 'rankgate[spark]')"
    java_home = os.environ.get("JAVA_HOME")
    if shutil.which("java") is None and not (
        java_home and os.path.exists(os.path.join(java_home, "bin", "java"))
    ):
        return "no Java runtime (java is not on PATH and JAVA_HOME is unset)"
    return None


_REASON = _unavailable()
if _REASON is not None:
    if REQUIRED:
        pytest.fail(f"RANKGATE_REQUIRE_SPARK=1 but {_REASON}", pytrace=False)
    pytest.skip(_REASON, allow_module_level=True)

from rankgate.engines import spark as engine  # noqa: E402  (after the skip: imports fine anyway)

# pyspark warns about pandas 3 on its own calls (session start, Arrow UDFs); not ours to fix.
PANDAS_WARNING = "PySpark does not yet fully support pandas"
ROWS = 3000
FIRST_INVALID = 500  # 0-based input position of the first invalid record


@pytest.fixture(scope="module")
def spark():
    from pyspark.sql import SparkSession

    previous = os.environ.get("PYSPARK_PYTHON")
    # The workers must run this interpreter, the one rankgate is installed in.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=PANDAS_WARNING, category=FutureWarning)
            session = (
                SparkSession.builder.master("local[2]")
                .appName("rankgate-tests")
                .config("spark.ui.enabled", "false")
                .config("spark.ui.showConsoleProgress", "false")
                .config("spark.sql.shuffle.partitions", "2")
                # Small splits, so that a few thousand rows make several partitions.
                .config("spark.sql.files.maxPartitionBytes", "16k")
                .config("spark.sql.files.openCostInBytes", "0")
                .getOrCreate()
            )
    except Exception as problem:  # a JVM that does not start (wrong Java version, no memory...)
        if REQUIRED:
            pytest.fail(f"cannot start a local Spark session: {problem}", pytrace=False)
        pytest.skip(f"cannot start a local Spark session: {problem}")
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
    if previous is None:
        os.environ.pop("PYSPARK_PYTHON", None)
    else:
        os.environ["PYSPARK_PYTHON"] = previous


@pytest.fixture(autouse=True)
def _quiet_pandas_warning():
    # Calls the tests make themselves (toArrow, read.parquet) warn as well.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=PANDAS_WARNING, category=FutureWarning)
        yield


# --- data -------------------------------------------------------------------------------------

SCHEMA = pa.schema(
    [
        ("query_id", pa.string()),
        ("retrieved_ids", pa.list_(pa.string())),
        ("relevant_ids", pa.list_(pa.string())),
        ("relevance_scores", pa.map_(pa.string(), pa.int64())),
        ("qtype", pa.string()),
        ("tier", pa.int64()),
        ("region", pa.string()),
        ("meta", pa.struct([("lang", pa.string()), ("latency_ms", pa.float64())])),
    ]
)


def _records(count: int, seed: int = 11) -> list[dict]:
    """Traces of every kind: scored, unlabeled, labeled without a relevant document, and (in the
    main data set, at fixed places) invalid; some without a query ID, some with a repeated
    document, some without qtype."""
    rng = random.Random(seed)
    docs = [f"d{i}" for i in range(40)]
    rows = []
    for i in range(count):
        retrieved = rng.sample(docs, rng.randint(1, 12))
        if i % 9 == 0:
            retrieved.append(retrieved[0])  # a duplicate the batch builder drops
        kind = i % 10
        relevant = scores = None
        if kind <= 3:
            relevant = rng.sample(docs, rng.randint(1, 4))
        elif kind <= 5:
            scores = {d: rng.randint(0, 3) for d in rng.sample(docs, rng.randint(1, 5))}
        elif kind == 6:
            relevant = []  # labeled, nothing relevant: no_relevant (or 0 under "zero")
        elif kind == 7:
            scores = {d: rng.choice((0, 1)) for d in rng.sample(docs, 2)}
        # kinds 8 and 9: unlabeled
        rows.append(
            {
                "query_id": None if i % 101 == 0 else f"q{i}",
                "retrieved_ids": retrieved,
                "relevant_ids": relevant,
                "relevance_scores": list(scores.items()) if scores is not None else None,
                "qtype": None if i % 7 == 0 else rng.choice(["faq", "nav", "long"]),
                "tier": i % 3,
                "region": rng.choice(["eu", "us"]),
                "meta": {
                    "lang": None if i % 5 == 0 else rng.choice(["en", "de"]),
                    "latency_ms": float(rng.randint(1, 300)),
                },
            }
        )
    if count == ROWS:
        rows[FIRST_INVALID]["retrieved_ids"] = None  # required field missing
        rows[1234]["retrieved_ids"] = ["d1", "", "d2"]  # an empty document ID
        rows[2222]["relevant_ids"] = None
        rows[2222]["relevance_scores"] = [("d1", -1)]  # a negative grade
    return rows


def write_parts(folder, table, parts=3):
    """The table as Parquet part files of several row groups each."""
    folder.mkdir(parents=True, exist_ok=True)
    size = -(-table.num_rows // parts)
    for part in range(parts):
        piece = table.slice(part * size, size)
        pq.write_table(piece, folder / f"part-{part:05d}.parquet", row_group_size=200)
    return folder


@pytest.fixture(scope="module")
def parquet_dir(tmp_path_factory):
    table = pa.Table.from_pylist(_records(ROWS), schema=SCHEMA)
    return write_parts(tmp_path_factory.mktemp("traces"), table)


@pytest.fixture(scope="module")
def traces(spark, parquet_dir):
    return spark.read.parquet(str(parquet_dir))


# --- comparing --------------------------------------------------------------------------------


def assert_same(spark_run, local_run):
    """Every number and verdict equal; reprs compare floats exactly and treat NaN as NaN."""
    assert spark_run.metrics == local_run.metrics
    assert spark_run.judged == local_run.judged
    assert spark_run.query_ids == local_run.query_ids
    assert list(spark_run.values) == list(local_run.values)
    for spec, column in local_run.values.items():
        np.testing.assert_array_equal(spark_run.values[spec], column, err_msg=str(spec))
    assert repr(spark_run.overall) == repr(local_run.overall)
    assert [g.name for g in spark_run.segments] == [g.name for g in local_run.segments]
    for ours, theirs in zip(spark_run.segments, local_run.segments, strict=True):
        assert repr(ours) == repr(theirs)
    assert repr(spark_run.gates) == repr(local_run.gates)
    assert repr(spark_run.coverage_checks) == repr(local_run.coverage_checks)
    assert spark_run.passed == local_run.passed
    ours, theirs = spark_run.summary, local_run.summary
    counts = (
        "read",
        "scored",
        "skipped",
        "labeled",
        "duplicates_dropped",
        "labels_removed_stale",
        "labels_removed_expired",
        "lost_all_relevant",
    )
    assert {name: getattr(ours, name) for name in counts} == {
        name: getattr(theirs, name) for name in counts
    }
    # Locations differ by design (spark partition P row R); what was wrong may not.
    assert [(e.field, e.problem) for e in ours.invalid_examples] == [
        (e.field, e.problem) for e in theirs.invalid_examples
    ]
    assert spark_run.examples == ()


def arrow_of(df):
    """The DataFrame's rows as an Arrow table, in Spark's order (pyspark 3.5 lacks toArrow)."""
    if hasattr(df, "toArrow"):
        return df.toArrow()
    from pyspark.sql.pandas.types import to_arrow_schema

    batches = df._collect_as_arrow()
    return pa.Table.from_batches(batches, None if batches else to_arrow_schema(df.schema))


def partition_offsets(df) -> list[int]:
    """Rows before each partition, in partition order."""
    from pyspark.sql import functions as F

    counted = df.groupBy(F.spark_partition_id().alias("p")).count().collect()
    sizes = dict.fromkeys(range(df.rdd.getNumPartitions()), 0)
    sizes.update({row["p"]: row["count"] for row in counted})
    return [int(x) for x in np.concatenate(([0], np.cumsum(list(sizes.values()))[:-1]))]


def global_row(location: str, offsets: list[int]) -> int:
    found = re.fullmatch(r"spark partition (\d+) row (\d+)", location)
    assert found, location
    return offsets[int(found[1])] + int(found[2])


# --- tests ------------------------------------------------------------------------------------


def test_the_data_is_spread_over_several_partitions(traces):
    assert traces.rdd.getNumPartitions() >= 4


CASES = {
    "segments-gates-coverage": dict(
        metrics=["ndcg@10", "mrr", "p@5"],
        gates=["ndcg@10>=0.2", "mrr>0.9"],
        settings=Settings(on_invalid="skip", segment_by=("qtype", "tier"), seed=7, resamples=200),
        # region is segmented only because a rule names it; recall@20 is computed only because
        # that rule's gate names it.
        policy=GatePolicy(
            min_coverage=0.5,
            min_queries=20,
            rules=(
                SegmentRule(
                    SegmentKey("region", "eu"),
                    gates=(parse_gate("recall@20>=0.1"),),
                    min_queries=5,
                ),
            ),
        ),
    ),
    "zero-threshold-nested-segment": dict(
        metrics=None,
        gates=["map>=0.01"],
        settings=Settings(
            on_invalid="skip",
            empty_relevant="zero",
            relevance_threshold=2,
            segment_by=("meta.lang",),
            # Labels on documents outside the corpus are dropped, and counted as stale.
            label_filter=LabelFilter(corpus=frozenset(f"d{i}" for i in range(30))),
            resamples=100,
        ),
        policy=GatePolicy(gate_on="lower_bound", strict_segments=True),
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_same_results_as_the_local_engine(traces, case):
    arguments = CASES[case]
    spark_run = engine.evaluate(traces, **arguments)
    local_run = rankgate.evaluate(arrow_of(traces), **arguments)

    assert_same(spark_run, local_run)
    summary = spark_run.summary
    assert summary.read == ROWS
    assert summary.read == summary.scored + sum(summary.skipped.values())
    assert summary.skipped["invalid"] == 3
    assert summary.skipped["unlabeled"] > 0
    if arguments["settings"].empty_relevant == "skip":
        assert summary.skipped["no_relevant"] > 0
    if arguments["settings"].label_filter.active:
        assert summary.labels_removed_stale > 0
    assert summary.duplicates_dropped > 0


def test_segments_name_the_records_without_the_field(traces):
    arguments = CASES["segments-gates-coverage"]
    run = engine.evaluate(traces, **arguments)

    names = [group.name for group in run.segments]
    assert f"qtype={MISSING_VALUE}" in names
    assert [g.name for g in run.segments if g.key.field == "tier"] == ["tier=0", "tier=1", "tier=2"]


def test_a_segment_field_no_record_has_is_refused_as_the_local_engine_refuses_it(traces):
    # A misspelled --segment-by would put every query in one (missing) segment and turn
    # per-segment gates into one overall check; both engines refuse it, naming the fields that exist.
    arguments = dict(CASES["segments-gates-coverage"])
    arguments["settings"] = replace(arguments["settings"], segment_by=("qtype", "channel"))
    with pytest.raises(UsageError) as spark_refusal:
        engine.evaluate(traces, **arguments)
    with pytest.raises(UsageError) as local_refusal:
        rankgate.evaluate(arrow_of(traces), **arguments)
    assert "'channel'" in str(spark_refusal.value)
    assert "'qtype'" in str(spark_refusal.value)
    assert str(spark_refusal.value) == str(local_refusal.value)


def test_unnamed_queries_are_named_by_their_row_in_the_whole_input(traces):
    run = engine.evaluate(traces, ["mrr"], settings=Settings(on_invalid="skip", resamples=0))
    local = rankgate.evaluate(arrow_of(traces), ["mrr"], settings=Settings(on_invalid="skip"))

    unnamed = [query_id for query_id in run.query_ids if query_id.startswith("#")]
    assert unnamed  # every 101st record has no ID, and some of them are scored
    assert unnamed == [query_id for query_id in local.query_ids if query_id.startswith("#")]


def test_per_query_table_matches_including_attributes(traces):
    arguments = CASES["segments-gates-coverage"]
    spark_table = engine.evaluate(traces, **arguments).to_arrow()
    local_table = rankgate.evaluate(arrow_of(traces), **arguments).to_arrow()

    assert spark_table.column_names == local_table.column_names
    assert {"qtype", "tier", "region"} <= set(spark_table.column_names)
    assert engine.ROW_COLUMN not in spark_table.column_names
    assert spark_table.equals(local_table)


def test_records_nested_under_input(spark, tmp_path):
    # The design note's shape: trace fields inside an `input` struct, other fields beside it.
    # Attributes then come from inside the record, which only the validator knows how to read.
    rows = [
        {
            "input": {
                "query_id": None if i % 50 == 0 else f"q{i}",
                "retrieved_ids": record["retrieved_ids"],
                "relevant_ids": record["relevant_ids"],
                "channel": record["qtype"],
            },
            "qtype": record["qtype"],
            "tier": record["tier"],
        }
        for i, record in enumerate(_records(1200, seed=5))
    ]
    df = spark.read.parquet(str(write_parts(tmp_path / "nested", pa.Table.from_pylist(rows))))
    arguments = dict(
        metrics=["ndcg@10", "mrr"],
        settings=Settings(on_invalid="skip", segment_by=("qtype", "channel"), resamples=100),
    )
    run = engine.evaluate(df, **arguments)
    local = rankgate.evaluate(arrow_of(df), **arguments)

    assert_same(run, local)
    assert run.summary.scored > 0
    assert any(query_id.startswith("#") for query_id in run.query_ids)
    assert list(run.attributes) == list(local.attributes)
    assert {"channel", "qtype", "tier"} <= set(run.attributes[0])


def test_invalid_query_ids_are_skipped_as_the_local_engine_skips_them(spark, tmp_path):
    records = _records(1200, seed=3)
    for i in (10, 700):
        records[i]["query_id"] = ""  # refused by the validator
    table = pa.Table.from_pylist(records, schema=SCHEMA)
    df = spark.read.parquet(str(write_parts(tmp_path / "bad-ids", table)))
    settings = Settings(on_invalid="skip", segment_by=("qtype",), resamples=50)
    run = engine.evaluate(df, ["mrr", "ndcg@10"], settings=settings)
    local = rankgate.evaluate(arrow_of(df), ["mrr", "ndcg@10"], settings=settings)

    assert_same(run, local)
    assert sum(e.field == "query_id" for e in run.summary.invalid_examples) == 2
    assert list(run.attributes) == list(local.attributes)


def test_attributes_of_every_column_type(spark, tmp_path):
    # Scalar columns are kept as they are; nested, decimal and timestamp ones only when null.
    import datetime
    import decimal

    count = 900
    table = pa.table(
        {
            "query_id": [f"q{i}" for i in range(count)],
            "retrieved_ids": [["a", "b", "c"]] * count,
            "relevant_ids": [["b"] if i % 4 else ["z"] for i in range(count)],
            "tiny": pa.array([i % 100 for i in range(count)], pa.int8()),
            "small": pa.array([i for i in range(count)], pa.int16()),
            "ratio": pa.array([i / 7 for i in range(count)], pa.float32()),
            "score": [None if i % 6 == 0 else i / 3 for i in range(count)],
            "flag": [i % 3 == 0 for i in range(count)],
            "note": [None if i % 5 == 0 else f"n{i % 4}" for i in range(count)],
            "amount": pa.array(
                [None if i % 2 else decimal.Decimal(i) / 4 for i in range(count)],
                pa.decimal128(10, 2),
            ),
            "when": pa.array(
                [None if i % 3 else datetime.datetime(2024, 1, 1 + i % 28) for i in range(count)],
                pa.timestamp("us", tz="UTC"),
            ),
            "tags": [None if i % 4 == 0 else ["x", str(i % 2)] for i in range(count)],
            "meta": [None if i % 7 == 0 else {"lang": "en"} for i in range(count)],
            # A prompt column named like the design note's nested record, but text: an attribute.
            "input": [f"question {i}" for i in range(count)],
        }
    )
    df = spark.read.parquet(str(write_parts(tmp_path / "types", table)))
    settings = Settings(segment_by=("flag", "note", "ratio", "meta.lang"), resamples=0)
    run = engine.evaluate(df, ["mrr"], settings=settings)
    local = rankgate.evaluate(arrow_of(df), ["mrr"], settings=settings)

    assert_same(run, local)
    assert list(run.attributes) == list(local.attributes)
    assert run.to_arrow().equals(local.to_arrow())


def _job(table, settings):
    from pyspark.sql.pandas.types import from_arrow_schema

    return engine._plan(["mrr"], (), settings, GatePolicy(), from_arrow_schema(table.schema))


@pytest.mark.parametrize(
    ("columns", "settings", "by_columns"),
    [
        ({"query_id": ["a", None]}, Settings(), True),
        ({"query_id": pa.array([7, None], pa.int32())}, Settings(), True),
        ({}, Settings(), True),  # no ID column: every query is named by its row
        ({"query_id": ["a", ""]}, Settings(), False),  # "" is refused by the validator
        ({"query_id": [1.5, None]}, Settings(), False),
        ({"query_id": [None, None]}, Settings(), True),
        ({"query_id": ["a", "b"], "input": ["text", "text"]}, Settings(), True),
        ({"query_id": ["a", "b"]}, Settings(segment_by=("query_id",)), False),
        ({"query_id": ["a", "b"]}, Settings(fields=FieldMap(query_id="meta.id")), False),
    ],
)
def test_which_partitions_are_read_off_the_columns(columns, settings, by_columns):
    table = pa.table({**columns, "retrieved_ids": [["x"], ["y"]], "relevant_ids": [["x"], ["z"]]})
    assert engine._by_columns(_job(table, settings), table) is by_columns


def test_records_nested_under_input_are_read_record_by_record():
    nested = pa.table({"input": [{"retrieved_ids": ["x"], "relevant_ids": ["x"]}]})
    assert not engine._by_columns(_job(nested, Settings()), nested)
    # With retrieved_ids of its own, a record never looks inside `input`.
    beside = nested.append_column("retrieved_ids", pa.array([["x"]]))
    assert engine._by_columns(_job(beside, Settings()), beside)


def test_invalid_examples_name_partition_and_row(traces):
    run = engine.evaluate(traces, ["mrr"], settings=Settings(on_invalid="skip", resamples=0))
    offsets = partition_offsets(traces)
    rows = arrow_of(traces)

    examples = run.summary.invalid_examples
    assert len(examples) == 3
    for example in examples:
        row = global_row(example.location, offsets)
        # The row named is one of the three broken ones.
        record = rows.slice(row - 1, 1).to_pylist()[0]
        broken = (
            record["retrieved_ids"] is None
            or "" in record["retrieved_ids"]
            or any(grade < 0 for _, grade in record["relevance_scores"] or ())
        )
        assert broken, (example, record)


def test_fail_raises_input_error_at_the_first_invalid_record(traces):
    with pytest.raises(InputError) as raised:
        engine.evaluate(traces, ["mrr"])
    with pytest.raises(InputError) as local:
        rankgate.evaluate(arrow_of(traces), ["mrr"])

    problem = raised.value
    assert isinstance(problem.location, Location)
    assert re.fullmatch(r"spark partition \d+ row \d+", str(problem.location))
    assert str(problem) == f"{problem.location}: field '{problem.field}': {problem.problem}"
    assert global_row(str(problem.location), partition_offsets(traces)) == local.value.location.row
    assert (problem.field, problem.problem) == (local.value.field, local.value.problem)


def test_an_empty_dataframe(spark, traces):
    empty = traces.limit(0)
    run = engine.evaluate(empty, ["mrr"], ["mrr>=0.5"], settings=Settings(segment_by=("qtype",)))
    local = rankgate.evaluate(
        arrow_of(empty), ["mrr"], ["mrr>=0.5"], settings=Settings(segment_by=("qtype",))
    )

    assert_same(run, local)
    assert run.summary.read == 0
    assert not run.passed


def test_bad_metric_is_refused_before_any_spark_job(traces):
    with pytest.raises(SpecError):
        engine.evaluate(traces, ["ndcg@ten"])
    with pytest.raises(SpecError):
        engine.evaluate(traces, ["mrr"], ["mrr>>0.5"])


def test_reserved_column_is_refused(traces):
    from pyspark.sql import functions as F

    with pytest.raises(UsageError, match=engine.ROW_COLUMN):
        engine.evaluate(traces.withColumn(engine.ROW_COLUMN, F.lit(1)), ["mrr"])


def test_evaluate_path_reads_a_folder_of_parquet_files(spark, parquet_dir):
    settings = Settings(on_invalid="skip", segment_by=("qtype",), resamples=50)
    run = engine.evaluate_path(parquet_dir, ["ndcg@5", "mrr"], ["mrr>=0.1"], settings)
    local = rankgate.evaluate(
        arrow_of(spark.read.parquet(str(parquet_dir))),
        ["ndcg@5", "mrr"],
        ["mrr>=0.1"],
        settings=settings,
    )

    assert_same(run, local)


def test_evaluate_path_reads_a_single_file(spark, parquet_dir):
    path = parquet_dir / "part-00001.parquet"
    settings = Settings(on_invalid="skip", resamples=0)
    run = engine.evaluate_path(path, ["mrr"], settings=settings)
    local = rankgate.evaluate(path, ["mrr"], settings=settings)

    # A file read in order: even the query order equals reading the file locally.
    assert_same(run, local)


def test_evaluate_path_problems_are_usage_errors(spark, tmp_path):
    with pytest.raises(UsageError, match="no such file"):
        engine.evaluate_path(tmp_path / "absent.parquet", ["mrr"])
    master = spark.sparkContext.master
    with pytest.raises(UsageError, match="already running"):
        engine.evaluate_path(tmp_path, ["mrr"], master="local[3]" if master != "local[3]" else "x")


def test_evaluate_path_names_an_unreadable_file(tmp_path, spark):
    path = tmp_path / "notes.parquet"
    path.write_text("not parquet at all\n")
    with pytest.raises(InputError, match="cannot read as Parquet"):
        engine.evaluate_path(path, ["mrr"])


def test_missing_pyspark_is_a_usage_error(monkeypatch, traces):
    monkeypatch.setitem(sys.modules, "pyspark", None)
    with pytest.raises(UsageError, match=re.escape("pip install 'rankgate[spark]'")):
        engine.evaluate(traces, ["mrr"])
