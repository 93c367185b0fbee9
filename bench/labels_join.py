"""Labels kept apart from the traces: time ``rankgate.evaluate(traces, labels=...)`` against the
same traces with their labels inline.

    python bench/labels_join.py --traces 200000 --ids 100

Three runs, each in its own subprocess: the JSON Lines traces with labels inline (the reference),
the traces without labels joined to a label file of one record per query (``query_id``,
``relevance_scores``), and the same traces joined to those labels given as an Arrow table
(``rankgate.labels.label_table``, read before timing: the join alone). The parent reports the
evaluation's wall time (timed inside the child around ``evaluate``, the label file's reading
included), the child's peak RSS and the ratios to the reference; the target is 1.3x.
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
RUNS = ("inline", "label_file", "label_table")
TARGET = 1.3


def write_inputs(folder: Path, traces: int, ids: int, docs: int, seed: int) -> None:
    """Seeded traces: ``ids`` retrieved of ``docs``, 1-10 graded labels (0-3) among the top 30,
    one query in ten unlabeled; written inline, and apart (traces, then one label record per
    labeled query)."""
    rng = random.Random(seed)
    with (
        open(folder / "inline.jsonl", "w", encoding="utf-8") as inline,
        open(folder / "bare.jsonl", "w", encoding="utf-8") as bare,
        open(folder / "labels.jsonl", "w", encoding="utf-8") as labels,
    ):
        for number in range(traces):
            query_id = f"q{number}"
            ranked = [f"d{doc}" for doc in rng.sample(range(docs), ids)]
            trace: dict[str, Any] = {"query_id": query_id, "retrieved_ids": ranked}
            bare.write(json.dumps(trace) + "\n")
            if rng.random() > 0.1:
                graded = rng.sample(ranked[:30], rng.randint(1, 10))
                grades = {doc: rng.randint(0, 3) for doc in graded}
                trace["relevance_scores"] = grades
                labels.write(json.dumps({"query_id": query_id, "relevance_scores": grades}) + "\n")
            inline.write(json.dumps(trace) + "\n")


def child(run: str, folder: Path) -> None:
    """One evaluation: print its wall time, queries scored and means."""
    import rankgate
    from rankgate.labels import label_table

    labels: Any = None
    traces = folder / ("inline.jsonl" if run == "inline" else "bare.jsonl")
    if run == "label_table":
        labels = label_table(folder / "labels.jsonl")
    start = time.perf_counter()
    if run == "label_file":
        evaluation = rankgate.evaluate(traces, METRICS, labels=folder / "labels.jsonl")
    else:
        evaluation = rankgate.evaluate(traces, METRICS, labels=labels)
    seconds = time.perf_counter() - start
    means = {str(spec): value for spec, value in evaluation.overall.means.items()}
    print(
        json.dumps({"seconds": seconds, "scored": evaluation.summary.scored, "means": repr(means)})
    )


def measure(run: str, folder: Path) -> tuple[float, float, dict[str, Any]]:
    """(evaluate seconds, peak RSS in GB, the child's report) for one run."""
    process = subprocess.Popen(
        [sys.executable, __file__, "--child", run, str(folder)], stdout=subprocess.PIPE
    )
    assert process.stdout is not None
    output = process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"the {run} run failed")
    report = json.loads(output)
    return report["seconds"], usage.ru_maxrss / (1 << 20), report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--traces", type=int, default=200_000)
    parser.add_argument("--ids", type=int, default=100)
    parser.add_argument("--docs", type=int, default=100_000, help="distinct document IDs")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--child", nargs=2, metavar=("RUN", "FOLDER"), help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.child:
        child(arguments.child[0], Path(arguments.child[1]))
        return 0
    with tempfile.TemporaryDirectory(prefix="rankgate-labels-") as name:
        folder = Path(name)
        started = time.perf_counter()
        write_inputs(folder, arguments.traces, arguments.ids, arguments.docs, arguments.seed)
        print(
            f"{arguments.traces:,} traces x {arguments.ids} IDs "
            f"(written in {time.perf_counter() - started:.1f} s)"
        )
        results = {run: measure(run, folder) for run in RUNS}
    base_seconds, base_rss, base = results["inline"]
    print(f"{'run':<12} {'evaluate s':>10} {'peak GB':>8} {'x time':>7} {'x RSS':>6}")
    missed = False
    for run, (seconds, rss, report) in results.items():
        ratio = seconds / base_seconds
        print(f"{run:<12} {seconds:>10.2f} {rss:>8.2f} {ratio:>7.2f} {rss / base_rss:>6.2f}")
        if report["scored"] != base["scored"] or report["means"] != base["means"]:
            print(f"{run}: results differ from the inline labels", file=sys.stderr)
            missed = True
        if run == "label_file" and ratio > TARGET:
            missed = True
    print(f"target (--labels within {TARGET}x of inline labels):", "missed" if missed else "met")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
