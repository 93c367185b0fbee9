"""Compare on Spark computes the same label-limited cells as the local compare: the executors score
every metric under each unjudged policy with judged@k, and the driver's cells read them.

Skipped, with the reason shown, when pyspark or Java is missing (RANKGATE_REQUIRE_SPARK=1 fails
instead, as in tests/spark/test_spark_compare.py).
"""

from __future__ import annotations

import os
import shutil
import sys
import warnings

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from tests.unjudged_ab_data import DEPTH, unjudged_ab, unjudged_in_top, with_labels

import rankgate
from rankgate import Settings

REQUIRED = os.environ.get("RANKGATE_REQUIRE_SPARK") == "1"
PANDAS_WARNING = "PySpark does not yet fully support pandas"


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

from rankgate.engines.spark import compare_on_spark  # noqa: E402

SCHEMA = pa.schema(
    [
        ("query_id", pa.string()),
        ("topic", pa.string()),
        ("retrieved_ids", pa.list_(pa.string())),
        ("relevance_scores", pa.map_(pa.string(), pa.float64())),
    ]
)


@pytest.fixture(scope="module")
def spark():
    from pyspark.sql import SparkSession

    previous = os.environ.get("PYSPARK_PYTHON")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=PANDAS_WARNING, category=FutureWarning)
            session = (
                SparkSession.builder.master("local[2]")
                .appName("rankgate-label-limited-tests")
                .config("spark.ui.enabled", "false")
                .config("spark.ui.showConsoleProgress", "false")
                .config("spark.sql.shuffle.partitions", "3")
                .config("spark.sql.files.maxPartitionBytes", "16k")
                .config("spark.sql.files.openCostInBytes", "0")
                .getOrCreate()
            )
    except Exception as problem:
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


def _write(path, records) -> str:
    rows = [
        {
            "query_id": r["query_id"],
            "topic": r["topic"],
            "retrieved_ids": r["retrieved_ids"],
            "relevance_scores": None
            if r.get("relevance_scores") is None
            else list(r["relevance_scores"].items()),
        }
        for r in records
    ]
    pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMA), path, row_group_size=40)
    return str(path)


def test_spark_finds_the_same_label_limited_cells(spark, tmp_path):
    ab = unjudged_ab(queries=120)
    baseline = _write(tmp_path / "baseline.parquet", with_labels(ab.baseline, ab.labels))
    candidate = _write(tmp_path / "candidate.parquet", ab.surfacing)
    options = dict(
        metrics=["ndcg@10", "mrr"],
        settings=Settings(segment_by=("topic",), resamples=200, seed=5),
        pairing="paired",
    )
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=PANDAS_WARNING, category=FutureWarning)
        on_spark = compare_on_spark(baseline, candidate, **options)
    local = rankgate.compare(baseline, candidate, **options)
    assert on_spark.to_arrow().to_pylist() == local.to_arrow().to_pylist()
    assert list(on_spark.results[0].candidate.metrics) == list(local.results[0].candidate.metrics)
    assert len(on_spark.label_limited) == len(on_spark.cells) == 6
    pairs = sum(len(d) for d in unjudged_in_top(ab.surfacing, ab.labels, DEPTH).values())
    assert on_spark.cell("ndcg@10").evidence.unjudged_pairs == pairs
