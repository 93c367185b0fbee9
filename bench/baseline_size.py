"""The size of a saved baseline and what saving it costs: `rankgate eval` on seeded synthetic
traces (QUERIES x 100 IDs, graded labels, a query-type segment) with and without
--save-baseline, wall time of each and the size of the .rgb file.

    .venv/bin/python bench/baseline_size.py --queries 1000000
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from throughput import generate

METRICS = ["-m", "ndcg@10", "-m", "recall@100", "-m", "mrr", "-m", "precision@10", "-m", "map"]


def timed(command: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, check=False, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=1_000_000)
    parser.add_argument("--workdir", type=Path, default=Path("build/bench"))
    args = parser.parse_args()
    jsonl, _, _ = generate(args.workdir, args.queries, 100, seed=7)
    rankgate = str(Path(sys.executable).with_name("rankgate"))
    base = [rankgate, "eval", str(jsonl), *METRICS, "--no-config", "--no-progress",
            "--segment-by", "query_type"]  # fmt: skip
    plain = timed(base)
    baseline = args.workdir / f"baseline-{args.queries}.rgb"
    saving = timed([*base, "--save-baseline", str(baseline)])
    size = baseline.stat().st_size
    print(f"{args.queries:,} queries, {len(METRICS) // 2} metrics (+ the unjudged evidence)")
    print(f"eval: {plain:.1f} s; with --save-baseline: {saving:.1f} s ({saving / plain:.2f}x)")
    print(f"baseline: {size / 1e6:.1f} MB ({size / args.queries:.0f} bytes a query)")
    import pyarrow.parquet as pq

    meta = pq.ParquetFile(baseline).metadata
    unpacked = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
    print(f"unpacked (what compare holds in memory): {unpacked / 1e6:.0f} MB")


if __name__ == "__main__":
    main()
