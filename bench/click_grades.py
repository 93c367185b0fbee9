"""Click grades against the truth: NDCG@10 of three rankers (good, medium, nearly random) with true,
debiased-click and raw-CTR labels, per seed, on the seeded position-based-model simulator of
``tests/clicks`` (setup and definitions: ``tests/clicks/click_grade_table.py``).

    python bench/click_grades.py                         # the docs/clicks.md table: seeds 1-5
    python bench/click_grades.py --judged list           # labels of the scored list only
    python bench/click_grades.py --grading thresholds    # the fixed thresholds of before
    python bench/click_grades.py --lists 40 --queries 300

Prints Markdown: per ranker, one row per seed with NDCG@10 under each set of labels and the two
absolute errors, then the rank correlations of click scores and grades with the true grades.
NDCG@10 comes from trec_eval (pytrec_eval, a test extra), not from rankgate.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "clicks"))

# The simulator and its tables live with the tests.
from click_grade_table import (
    JUDGED,
    LISTS_PER_QUERY,
    QUALITY,
    QUERIES,
    SEEDS,
    SeedFigures,
    figures,
    labeled,
    simulated,
)

from rankgate.clicks import DEFAULT_THRESHOLDS


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default=",".join(map(str, SEEDS)), help="e.g. 1,2,3,4,5")
    parser.add_argument("--queries", type=int, default=QUERIES)
    parser.add_argument("--lists", type=int, default=LISTS_PER_QUERY, help="lists per query")
    parser.add_argument("--judged", choices=JUDGED, default="pool")
    parser.add_argument(
        "--grading",
        choices=("fitted", "thresholds"),
        default="fitted",
        help="fitted levels (the default) or the fixed thresholds "
        + ",".join(f"{t:g}" for t in DEFAULT_THRESHOLDS)
        + ", for both sets of click labels",
    )
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    thresholds = DEFAULT_THRESHOLDS if args.grading == "thresholds" else None
    results: dict[int, SeedFigures] = {}
    for seed in seeds:
        sim, log = simulated(seed, queries=args.queries, lists_per_query=args.lists)
        results[seed] = figures(labeled(sim, log, thresholds=thresholds), args.judged)
    print(
        f"{args.queries} queries x {args.lists} lists, grading: {args.grading}, "
        f"judged: {args.judged}\n"
    )
    for index, quality in enumerate(QUALITY):
        print(f"**{quality} ranker**\n")
        print("| seed | true | debiased | raw CTR | \\|debiased - true\\| | \\|raw CTR - true\\| |")
        print("|---:|---:|---:|---:|---:|---:|")
        for seed in seeds:
            row = results[seed].rows[index]
            mark = "" if row.debiased_error < row.raw_error else " (raw CTR closer)"
            print(
                f"| {seed} | {row.true:.3f} | {row.debiased:.3f} | {row.raw:.3f} "
                f"| {row.debiased_error:.3f} | {row.raw_error:.3f}{mark} |"
            )
        print()
    print("**Spearman with the true grades** (pairs the debiased labels grade)\n")
    print("| seed | debiased score | raw CTR score | debiased grade | raw CTR grade |")
    print("|---:|---:|---:|---:|---:|")
    for seed in seeds:
        result = results[seed]
        print(
            f"| {seed} | {result.spearman_score[0]:.3f} | {result.spearman_score[1]:.3f} "
            f"| {result.spearman_grade[0]:.3f} | {result.spearman_grade[1]:.3f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
