"""The shapes a table of traces takes: time ``rankgate.evaluate`` on the same traces stored as a
Parquet file with map grades (the reference), a Parquet file with struct grades (what
``pyarrow.Table.from_pylist(records)`` and ``DataFrame(records).to_parquet()`` write), a pandas
DataFrame built from dicts, and a Parquet file with grades as JSON text.

    python bench/table_shapes.py --traces 200000 --ids 100 --docs 5000

Each shape is evaluated in its own subprocess; the parent reports the evaluation's wall time (timed
inside the child, around ``evaluate`` only) and the child's peak RSS (``os.wait4``), and the ratio
of each to the map-grade Parquet file. The issue's target: struct grades and the DataFrame within
1.5x of map grades.

Struct grades have one field per distinct document ID, and Arrow holds every field densely (a value
slot per row, null or not), so memory grows with rows x distinct documents: ``--docs`` keeps that
realistic (thousands, not the millions a map column takes in its stride). The DataFrame's peak RSS
includes building it from the dicts, which the child does before timing.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

METRICS = ["ndcg@10", "precision@10", "recall@100", "map", "mrr"]
SHAPES = ("map", "struct", "dataframe", "json")


def records(traces: int, ids: int, docs: int, seed: int) -> list[dict[str, Any]]:
    """Seeded traces: ``ids`` distinct retrieved documents out of ``docs``, 1-10 graded labels
    (0-3) among the top 30, one query in ten unlabeled."""
    rng = random.Random(seed)
    out = []
    for number in range(traces):
        ranked = [f"d{doc}" for doc in rng.sample(range(docs), ids)]
        # An unlabeled query says so with a null: from_pylist takes its columns from the first
        # record, which must therefore name the grades column.
        record: dict[str, Any] = {
            "query_id": f"q{number}",
            "retrieved_ids": ranked,
            "relevance_scores": None,
        }
        if rng.random() > 0.1:
            graded = rng.sample(ranked[:30], rng.randint(1, 10))
            record["relevance_scores"] = {doc: rng.randint(0, 3) for doc in graded}
        out.append(record)
    return out


def write_inputs(folder: Path, traces: int, ids: int, docs: int, seed: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = records(traces, ids, docs, seed)
    with open(folder / "traces.jsonl", "w", encoding="utf-8") as out:
        for row in rows:
            out.write(json.dumps(row) + "\n")
    as_map = pa.schema(
        [
            ("query_id", pa.string()),
            ("retrieved_ids", pa.list_(pa.string())),
            ("relevance_scores", pa.map_(pa.string(), pa.int64())),
        ]
    )
    map_rows = [
        {**row, "relevance_scores": list(row["relevance_scores"].items())}
        if row["relevance_scores"] is not None
        else row
        for row in rows
    ]
    pq.write_table(pa.Table.from_pylist(map_rows, schema=as_map), folder / "map.parquet")
    del map_rows
    # The shape users get from dicts: one struct field per document ID.
    pq.write_table(pa.Table.from_pylist(rows), folder / "struct.parquet")
    # Grades as JSON text, as a database dump or a CSV-minded export keeps them.
    as_text = [
        {
            **row,
            "relevance_scores": None
            if row["relevance_scores"] is None
            else json.dumps(row["relevance_scores"]),
        }
        for row in rows
    ]
    pq.write_table(pa.Table.from_pylist(as_text), folder / "json.parquet")


def child(shape: str, folder: Path) -> None:
    """Run one evaluation and print its wall time and the number of queries scored."""
    import rankgate

    source: Any
    if shape == "dataframe":
        import pandas as pd

        with open(folder / "traces.jsonl", encoding="utf-8") as lines:
            source = pd.DataFrame([json.loads(line) for line in lines])
    else:
        source = folder / f"{shape}.parquet"
    start = time.perf_counter()
    evaluation = rankgate.evaluate(source, METRICS)
    seconds = time.perf_counter() - start
    means = {str(spec): value for spec, value in evaluation.overall.means.items()}
    print(
        json.dumps({"seconds": seconds, "scored": evaluation.summary.scored, "means": repr(means)})
    )


def measure(shape: str, folder: Path) -> tuple[float, float, dict[str, Any]]:
    """(evaluate seconds, peak RSS in GB, the child's report) for one shape."""
    process = subprocess.Popen(
        [sys.executable, __file__, "--child", shape, str(folder)], stdout=subprocess.PIPE
    )
    assert process.stdout is not None
    output = process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"the {shape} run failed")
    report = json.loads(output)
    # ru_maxrss is in KiB on Linux.
    return report["seconds"], usage.ru_maxrss / (1 << 20), report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--traces", type=int, default=200_000)
    parser.add_argument("--ids", type=int, default=100)
    parser.add_argument("--docs", type=int, default=5_000, help="distinct document IDs")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--child", nargs=2, metavar=("SHAPE", "FOLDER"), help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.child:
        child(arguments.child[0], Path(arguments.child[1]))
        return 0
    with tempfile.TemporaryDirectory(prefix="rankgate-shapes-") as name:
        folder = Path(name)
        started = time.perf_counter()
        write_inputs(folder, arguments.traces, arguments.ids, arguments.docs, arguments.seed)
        print(
            f"{arguments.traces:,} traces x {arguments.ids} IDs, {arguments.docs:,} distinct "
            f"documents (written in {time.perf_counter() - started:.1f} s)"
        )
        results = {shape: measure(shape, folder) for shape in SHAPES}
    base_seconds, base_rss, base = results["map"]
    print(f"{'shape':<10} {'evaluate s':>10} {'peak GB':>8} {'x time':>7} {'x RSS':>6}")
    missed = False
    for shape, (seconds, rss, report) in results.items():
        ratio = seconds / base_seconds
        print(f"{shape:<10} {seconds:>10.2f} {rss:>8.2f} {ratio:>7.2f} {rss / base_rss:>6.2f}")
        if report["scored"] != base["scored"] or report["means"] != base["means"]:
            print(f"{shape}: results differ from map grades", file=sys.stderr)
            missed = True
        if shape in ("struct", "dataframe") and ratio > 1.5:
            missed = True
    print("target (struct and DataFrame <= 1.5x map):", "missed" if missed else "met")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
