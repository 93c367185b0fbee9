"""Prediction-powered inference on a seeded synthetic world: how often each estimator's 95%
interval covers the true mean NDCG@10, how wide the intervals are, what the judge was worth in
human labels, and the false-positive rates of the three paired tests for two equally good systems.
The world is ``tests/ppi/ppi_world.py``'s (setup and definitions there): QUERIES queries of ten
ranked documents, a judge over-rating by --bias grades (noise 0.7), --share of the queries
labeled by humans; in the comparison the judge over-rates a's documents by 0.3 grades and b's by
0.8.

    python bench/ppi_simulation.py                       # the figures the README quotes
    python bench/ppi_simulation.py --seeds 200 --share 0.05

Prints Markdown. "Seeds" are experiments: rows drawn in turn from one seeded generator.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "ppi"))

# The world and its runs live with the tests.
from ppi_world import simulate_deltas, simulate_means

ALPHA = 0.05


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=1000, help="experiments (default 1000)")
    parser.add_argument("--queries", type=int, default=1000, help="queries per experiment")
    parser.add_argument("--share", type=float, default=0.1, help="share labeled by humans")
    parser.add_argument("--bias", type=float, default=0.5, help="the judge's grade bias")
    args = parser.parse_args(argv)

    started = time.perf_counter()
    means = simulate_means(args.seeds, queries=args.queries, share=args.share, bias=args.bias)
    deltas = simulate_deltas(args.seeds, queries=args.queries, share=args.share)
    elapsed = time.perf_counter() - started

    print(
        f"{args.seeds} experiments, {args.queries} queries each, {means.labeled} labeled by "
        f"humans, judge bias +{args.bias} grades\n"
    )
    print("| estimator | 95% interval covers the true mean | mean width |")
    print("|---|---:|---:|")
    for name, low, high in (
        ("judge only", means.judge_low, means.judge_high),
        (f"human only ({means.labeled} queries)", means.human_low, means.human_high),
        ("PPI (lambda = 1)", means.classic_low, means.classic_high),
        ("PPI++ (tuned lambda)", means.ppi_low, means.ppi_high),
    ):
        print(f"| {name} | {means.coverage(low, high):.1%} | {np.mean(high - low):.4f} |")
    narrower = np.mean((means.ppi_high - means.ppi_low) < (means.human_high - means.human_low))
    print(
        f"\nPPI++ narrower than human only in {narrower:.1%} of experiments; mean lambda "
        f"{means.lambdas.mean():.2f}; mean effective queries {means.effective_queries.mean():.1f} "
        f"(the judge was worth {means.effective_queries.mean() - means.labeled:.1f} human labels)\n"
    )
    print("Two equally good systems, judge bias +0.3 (a) and +0.8 (b) grades:\n")
    print(f"| paired test of b - a = 0 | false positives at alpha {ALPHA} |")
    print("|---|---:|")
    for name, p in (
        ("judge only (paired t-test)", deltas.judge_p),
        (f"human only ({means.labeled} queries)", deltas.human_p),
        ("PPI++, estimand population", deltas.ppi_p),
        ("PPI++, estimand evaluated (not the question)", deltas.ppi_evaluated_p),
    ):
        print(f"| {name} | {np.mean(p < ALPHA):.1%} |")
    print(f"\nmean effective queries of the delta {deltas.effective_queries.mean():.1f}")
    print(f"({elapsed:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
