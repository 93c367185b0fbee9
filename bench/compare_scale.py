"""``rankgate compare`` at scale against one ``rankgate eval`` of one side, in the same run.

    python bench/compare_scale.py --queries 200000             # paired: two JSON Lines files
    python bench/compare_scale.py --queries 200000 --unpaired  # two variants from one SQLite store

Paired: writes seeded synthetic traces for a baseline and a candidate (the same queries and labels;
the candidate's top ranks are shuffled on half the queries) as JSON Lines, then times
``rankgate eval BASELINE`` and ``rankgate compare BASELINE CANDIDATE`` (5 metrics, JSON report),
each in a child process of its own (wall time and the child's peak RSS from ``bench/peers.py
measure``), and prints the ratio. Unpaired: fills one SQLite trace store with two variants that
served different queries (half the traces each) and times ``rankgate eval`` of the whole store
against ``rankgate compare URL --pairing unpaired``.

Targets (issue 16): compare <= 3x one eval; paired compare at 1M queries <= 2 GB peak.
``--check`` exits 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import throughput  # noqa: E402  (the synthetic traces every benchmark shares)

METRICS = "ndcg@10,precision@10,recall@100,map,mrr"
TARGET_RATIO = 3.0
TARGET_PEAK_GB_AT_1M = 2.0


def progress(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def paired_files(workdir: Path, queries: int, depth: int, seed: int) -> tuple[Path, Path]:
    """Baseline and candidate JSON Lines: the same generator draws, so the same query IDs and
    labels; the candidate's first ten ranks are rotated by one on every other query."""
    workdir.mkdir(parents=True, exist_ok=True)
    base = workdir / f"compare-base-{queries}.jsonl"
    cand = workdir / f"compare-cand-{queries}.jsonl"
    if base.exists() and cand.exists():
        progress(f"reusing {base} and {cand}")
        return base, cand
    id_digits = max(7, len(str(queries)))
    rng = np.random.default_rng(seed)
    with open(base, "wb") as before, open(cand, "wb") as after:
        for first in range(0, queries, throughput.CHUNK_ROWS):
            chunk = throughput.Chunk(rng, first, min(throughput.CHUNK_ROWS, queries - first), depth)
            before.write(chunk.jsonl(id_digits))
            moved = chunk.retrieved.copy()
            rows = np.arange(0, len(moved), 2)
            moved[rows, :10] = np.roll(moved[rows, :10], 1, axis=1)
            chunk.retrieved = moved
            after.write(chunk.jsonl(id_digits))
    return base, cand


def unpaired_store(workdir: Path, queries: int, depth: int, seed: int) -> str:
    """A SQLite trace store whose traces are split between variants ``control`` and ``treatment``
    (every other trace; different queries each, as in a traffic split), with their labels."""
    import sqlite3

    import store_read

    from rankgate.store.backends import connect
    from rankgate.times import format_time

    path = workdir / f"compare-unpaired-{queries}.db"
    url = f"sqlite:///{path}"
    if path.exists():
        progress(f"reusing {path}")
        return url
    workdir.mkdir(parents=True, exist_ok=True)
    progress(f"filling {path} with {queries:,} traces in two variants")
    connect(url).close()
    db = sqlite3.connect(path)
    traces: list[tuple[Any, ...]] = []
    labels: list[tuple[Any, ...]] = []
    for number, row in enumerate(store_read.rows(queries, depth, seed)):
        trace_id, query_id, moment, docs, attributes, grades = row
        variant = "control" if number % 2 == 0 else "treatment"
        traces.append(
            (
                trace_id,
                query_id,
                format_time(moment),
                variant,
                json.dumps(docs),
                json.dumps(attributes),
            )
        )
        labels.extend((query_id, doc, float(g), None, "bench") for doc, g in grades.items())
        if len(traces) >= 50_000:
            store_read._flush_sqlite(db, traces, labels)
    store_read._flush_sqlite(db, traces, labels)
    db.close()
    return url


def measure(argv: list[str], logs: Path, key: str) -> dict[str, Any]:
    result = logs / f"{key}.measure.json"
    out = logs / f"{key}.out"
    err = logs / f"{key}.err"
    with open(out, "wb") as stdout, open(err, "wb") as stderr:
        subprocess.run(
            [sys.executable, str(HERE / "peers.py"), "measure", str(result), *argv],
            stdout=stdout,
            stderr=stderr,
            check=False,
        )
    figures: dict[str, Any] = json.loads(result.read_text())
    figures["peak_gb"] = figures["maxrss_kb"] * 1024 / 1e9
    if figures["exit"] not in (0, 1):
        tail = err.read_text(errors="replace").strip().splitlines()[-1:]
        raise SystemExit(f"{key} failed (exit {figures['exit']}): {' '.join(tail)}")
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=200_000)
    parser.add_argument("--ids", type=int, default=100)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--workdir", type=Path, default=Path("build/bench"))
    parser.add_argument("--unpaired", action="store_true", help="two variants from one store")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args()
    rankgate = throughput.rankgate_command()
    logs = args.workdir / "compare-logs"
    logs.mkdir(parents=True, exist_ok=True)
    common = ["-m", METRICS, "--format", "json", "--no-progress"]
    if args.unpaired:
        url = unpaired_store(args.workdir, args.queries, args.ids, args.seed)
        eval_argv = [*rankgate, "eval", url, *common]
        compare_argv = [*rankgate, "compare", url, "--pairing", "unpaired", *common]
        compare_argv += ["--baseline", "control", "--candidate", "treatment"]
        what = f"compare --pairing unpaired, {args.queries:,} traces in two variants (SQLite)"
    else:
        base, cand = paired_files(args.workdir, args.queries, args.ids, args.seed)
        eval_argv = [*rankgate, "eval", str(base), *common]
        compare_argv = [*rankgate, "compare", str(base), str(cand), *common]
        what = f"compare of {args.queries:,} paired queries (JSON Lines)"
    progress("eval ...")
    one_eval = measure(eval_argv, logs, "eval")
    progress("compare ...")
    comparison = measure(compare_argv, logs, "compare")
    ratio = comparison["wall_s"] / one_eval["wall_s"]
    print(f"| {what} | wall | peak RSS |")
    print("|---|--:|--:|")
    evaluated = "eval of the whole store" if args.unpaired else "eval of one side"
    print(f"| {evaluated} | {one_eval['wall_s']:.2f} s | {one_eval['peak_gb']:.2f} GB |")
    print(f"| compare | {comparison['wall_s']:.2f} s | {comparison['peak_gb']:.2f} GB |")
    print(f"| ratio | {ratio:.2f}x (target <= {TARGET_RATIO:g}x) | |")
    print("commands:", " ".join(eval_argv), "//", " ".join(compare_argv))
    missed = ratio > TARGET_RATIO
    if not args.unpaired and args.queries >= 1_000_000:
        missed |= comparison["peak_gb"] > TARGET_PEAK_GB_AT_1M
    return 1 if args.check and missed else 0


if __name__ == "__main__":
    raise SystemExit(main())
