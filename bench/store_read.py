"""Reading a trace store at scale: fill a store with seeded synthetic traces, then time
``rankgate eval URL`` on it against ``rankgate eval`` of the same traces as a JSON Lines file, in
one run (wall time and peak memory, by /usr/bin/time when present), and print the ratio. The two
reports must agree on every mean and count.

    python bench/store_read.py --queries 1000000 --store sqlite:///build/bench.db
    python bench/store_read.py --queries 1000000 --store postgresql://postgres@127.0.0.1/bench
    python bench/store_read.py --skip-fill --runs 3 --check ...   # the median of three turns

Targets (issue 16): the SQLite store within 2x the file, PostgreSQL within 2.5x; ``--check``
exits 1 when the ratio is over the store's target.

The store is filled through the bulk path a migration would use (executemany into SQLite, COPY
into PostgreSQL), not the recorder, so that filling does not dominate the run. Each query has
``--ids`` retrieved documents and 1-5 graded labels; ten percent are unlabeled.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from rankgate.store.backends import redact_url

METRICS = "ndcg@10,precision@10,recall@100,map,mrr"


def rows(queries: int, ids: int, seed: int):
    rng = random.Random(seed)
    start = datetime(2026, 11, 30, tzinfo=UTC)
    for number in range(queries):
        docs = [f"d{rng.randrange(1_000_000)}" for _ in range(ids)]
        labels = {}
        if rng.random() > 0.1:
            for doc in rng.sample(docs[:30], rng.randint(1, 5)):
                labels[doc] = rng.randint(0, 3)
        moment = start + timedelta(seconds=number * 86_400 / queries)
        yield f"t{number}", f"q{number}", moment, docs, {"segment": f"s{number % 8}"}, labels


def fill_sqlite(url: str, queries: int, ids: int, seed: int) -> None:
    import sqlite3

    from rankgate.store.backends import connect
    from rankgate.times import format_time

    path = Path(url.split(":///", 1)[1])
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    connect(url).close()
    db = sqlite3.connect(path)
    batch_t, batch_l = [], []
    for trace_id, query_id, moment, docs, attributes, labels in rows(queries, ids, seed):
        batch_t.append(
            (
                trace_id,
                query_id,
                format_time(moment),
                None,
                json.dumps(docs),
                json.dumps(attributes),
            )
        )
        batch_l.extend((query_id, doc, float(g), None, "bench") for doc, g in labels.items())
        if len(batch_t) >= 50_000:
            _flush_sqlite(db, batch_t, batch_l)
    _flush_sqlite(db, batch_t, batch_l)
    db.close()


def _flush_sqlite(db, traces, labels) -> None:
    db.executemany("INSERT INTO rankgate_traces VALUES (?, ?, ?, ?, ?, ?)", traces)
    db.executemany("INSERT INTO rankgate_labels VALUES (?, ?, ?, ?, ?)", labels)
    db.commit()
    traces.clear()
    labels.clear()


def fill_postgres(url: str, queries: int, ids: int, seed: int) -> None:
    import psycopg
    from psycopg.types.json import Jsonb

    from rankgate.store.backends import connect

    connect(url).close()
    with psycopg.connect(url) as db:
        db.execute("TRUNCATE rankgate_traces, rankgate_labels")
        with db.cursor() as cursor:
            with cursor.copy(
                "COPY rankgate_traces (trace_id, query_id, recorded_at, variant, retrieved_ids, "
                "attributes) FROM STDIN"
            ) as copy:
                labels = []
                for trace_id, query_id, moment, docs, attributes, grades in rows(
                    queries, ids, seed
                ):
                    copy.write_row((trace_id, query_id, moment, None, docs, Jsonb(attributes)))
                    labels.extend((query_id, doc, float(g)) for doc, g in grades.items())
            with cursor.copy(
                "COPY rankgate_labels (query_id, document_id, grade) FROM STDIN"
            ) as copy:
                for row in labels:
                    copy.write_row(row)
        db.execute("ANALYZE rankgate_traces")
        db.execute("ANALYZE rankgate_labels")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--queries", type=int, default=1_000_000)
    parser.add_argument("--ids", type=int, default=100)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--store", default="sqlite:///build/bench-store.db")
    parser.add_argument("--skip-fill", action="store_true")
    parser.add_argument(
        "--jsonl",
        default="build/bench-store.jsonl",
        help="where the same traces are written as JSON Lines, the file the store read is "
        "measured against (kept with --skip-fill when it exists)",
    )
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    parser.add_argument(
        "--runs",
        type=int,
        default=1,
        help="time the file and the store this many times, in turns, and judge the median ratio "
        "(the machine's other work shifts single runs)",
    )
    args = parser.parse_args()
    if not args.skip_fill:
        started = time.perf_counter()
        if args.store.startswith("sqlite"):
            fill_sqlite(args.store, args.queries, args.ids, args.seed)
        else:
            fill_postgres(args.store, args.queries, args.ids, args.seed)
        print(
            f"filled {redact_url(args.store)} with {args.queries:,} traces in "
            f"{time.perf_counter() - started:.1f} s"
        )
    peer = Path(args.jsonl)
    if not (args.skip_fill and peer.exists()):
        peer.parent.mkdir(parents=True, exist_ok=True)
        with peer.open("w", encoding="utf-8") as out:
            for _, query_id, _, docs, attributes, labels in rows(args.queries, args.ids, args.seed):
                record = {"query_id": query_id, "retrieved_ids": docs, **attributes}
                if labels:
                    record["relevance_scores"] = labels
                out.write(json.dumps(record) + "\n")
    window = ["--since", "2026-11-30", "--until", "2026-12-01"]
    ratios = []
    for _ in range(max(args.runs, 1)):
        file_seconds, file_report = timed(
            f"rankgate eval {peer}", [sys.executable, "-m", "rankgate", "eval", str(peer)]
        )
        store_seconds, store_report = timed(
            f"rankgate eval {redact_url(args.store)}",
            [sys.executable, "-m", "rankgate", "eval", args.store, *window],
        )
        if (file_report["summary"], file_report["metrics"]) != (
            store_report["summary"],
            store_report["metrics"],
        ):
            sys.exit("the store's report and the file's disagree")
        ratios.append(store_seconds / file_seconds)
    target = 2.0 if args.store.startswith("sqlite") else 2.5
    ratio = statistics.median(ratios)
    shown = ", ".join(f"{each:.2f}x" for each in ratios)
    print(f"store / file: {ratio:.2f}x median of [{shown}] (target <= {target:g}x)")
    if args.check and ratio > target:
        sys.exit(1)


def timed(label: str, command: list[str]) -> tuple[float, dict]:
    """Run one scoring command in a child process: wall time and that child's peak memory."""
    command = [*command, "--no-config", "-m", METRICS, "--resamples", "0", "--format", "json"]
    wrapper = ["/usr/bin/time", "-f", "%M"] if Path("/usr/bin/time").exists() else []
    started = time.perf_counter()
    result = subprocess.run([*wrapper, *command], capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if result.returncode not in (0, 1):
        sys.exit(result.stderr)
    peak = (
        f"peak RSS {int(result.stderr.strip().splitlines()[-1]) / 1024 / 1024:.2f} GB"
        if wrapper
        else ""
    )
    report = json.loads(result.stdout)
    summary = report["summary"]
    print(
        f"{label}: {summary['read']:,} traces read, {summary['scored']:,} scored in "
        f"{elapsed:.1f} s, {peak}"
    )
    return elapsed, report


if __name__ == "__main__":
    main()
