"""The targets of issue 16, measured in one run on the same seeded traces, with the peers' table.

    python bench/targets.py                      # 1,000,000 queries x 100 retrieved IDs
    python bench/targets.py --queries 20000      # a quick look
    python bench/targets.py --big                # 10,000,000 queries: peak memory only

One run: the trace files of ``bench/throughput.py`` (JSON Lines and Parquet with map grades), and
from the same generator draws a SQLite store, a PostgreSQL store, a candidate for a paired compare
(top ten rotated on every other query), and the same store split into two variants by an SQL
UPDATE for an unpaired compare. Every run is a child process of its own, measured by
``bench/peers.py measure`` (wall time around the whole child, peak RSS from wait4). Then it prints
the peers' table (throughput.py's: floors, rankgate, ranx, pytrec_eval) and the issue's target
table.

Struct grades cannot be the same traces: Arrow holds a struct column densely, one value slot per
row and per distinct document, and these traces have millions of distinct documents. So the
struct/DataFrame rows use traces of their own (same size, 100 retrieved IDs, 5-15 labels per query)
whose labeled documents come from a vocabulary of ``--vocabulary`` IDs, written as Parquet with map
grades (the reference), Parquet with struct grades (written in row groups that share one schema),
and a pandas DataFrame built from dicts. Those three are timed inside the child, around
``rankgate.evaluate`` only (building the DataFrame is not counted; its memory is).

The ratio targets are judged at 1M queries and more (below that, start-up dominates them: a quick
look prints them unjudged). Exit 1 when rankgate misses a target, disagrees with a peer's means or
its own (store, compare and file runs must give the same means and counts), or fails; a peer that
fails is a row saying so.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sqlite3
import sys
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import throughput  # noqa: E402  (the generator, the launcher and the peers' table)
from throughput import Step, progress  # noqa: E402

WINDOW = ["--since", "2026-11-30", "--until", "2026-12-01"]
DAY_START = datetime(2026, 11, 30, tzinfo=UTC)
PG_ADMIN = os.environ.get(
    "RANKGATE_BENCH_POSTGRES", "postgresql://postgres@127.0.0.1:5432/postgres"
)
PG_DATABASE = "rankgate_bench"
SHAPE_METRICS = ["ndcg(gain=linear)@10", "precision@10", "recall@100", "map", "mrr"]
POOL = 100_000  # unlabeled documents of the shape traces
BIG_PEAK_GB = 1.5


def rankgate_flags() -> list[str]:
    flags = [flag for metric in throughput.METRICS for flag in ("--metric", metric)]
    return [*flags, "--format", "json", "--no-progress", "--no-config"]


def chunks(queries: int, depth: int, seed: int) -> Iterator[throughput.Chunk]:
    """The generator's draws in the order ``throughput.generate`` made them: the same traces."""
    rng = np.random.default_rng(seed)
    for first in range(0, queries, throughput.CHUNK_ROWS):
        yield throughput.Chunk(rng, first, min(throughput.CHUNK_ROWS, queries - first), depth)


def id_digits(queries: int) -> int:
    return max(7, len(str(queries)))


def chunk_rows(chunk: throughput.Chunk, queries: int) -> Iterator[tuple[Any, ...]]:
    """(query ID, retrieved IDs as a JSON array, query type, labeled IDs, grades, row number) for
    every query of a chunk, as bytes where they are text."""
    digits = id_digits(queries)
    rows, depth = chunk.retrieved.shape
    qids = throughput.digit_bytes(chunk.numbers, b"q", digits).view(f"S{digits + 1}")[:, 0]
    width = throughput.ID_DIGITS + 1
    docs = throughput.digit_bytes(chunk.retrieved, b"d", throughput.ID_DIGITS)
    docs = docs.reshape(rows * depth, width).view(f"S{width}")[:, 0].reshape(rows, depth)
    labels = throughput.digit_bytes(chunk.labeled_ids, b"d", throughput.ID_DIGITS)
    labels = labels.view(f"S{width}")[:, :, 0].tolist()
    for qid, ranked, kind, ids, marks, count, number in zip(
        qids.tolist(),
        docs.tolist(),
        chunk.types.tolist(),
        labels,
        chunk.grades.tolist(),
        chunk.labeled.tolist(),
        chunk.numbers.tolist(),
        strict=True,
    ):
        yield qid, ranked, throughput.QUERY_TYPES[kind], ids[:count], marks[:count], number


def moment(number: int, queries: int) -> datetime:
    return DAY_START + timedelta(seconds=(number - 1) * 86_400 / queries)


# ---------------------------------------------------------------------------------------------
# Stores filled with the same traces


def fill_sqlite(path: Path, queries: int, depth: int, seed: int) -> None:
    from rankgate.store.backends import connect
    from rankgate.times import format_time

    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    connect(f"sqlite:///{path}").close()
    db = sqlite3.connect(path)
    db.execute("PRAGMA synchronous = OFF")
    for chunk in chunks(queries, depth, seed):
        traces = []
        labels = []
        for qid, ranked, kind, ids, marks, number in chunk_rows(chunk, queries):
            query = qid.decode()
            retrieved = (b'["' + b'","'.join(ranked) + b'"]').decode()
            traces.append(
                (
                    f"t{number}",
                    query,
                    format_time(moment(number, queries)),
                    None,
                    retrieved,
                    f'{{"query_type": "{kind}"}}',
                )
            )
            labels.extend(
                (query, doc.decode(), float(grade), None, "bench")
                for doc, grade in zip(ids, marks, strict=True)
            )
        db.executemany("INSERT INTO rankgate_traces VALUES (?, ?, ?, ?, ?, ?)", traces)
        db.executemany("INSERT INTO rankgate_labels VALUES (?, ?, ?, ?, ?)", labels)
        db.commit()
    db.close()


def postgres_url() -> tuple[str | None, str]:
    """The bench database's URL (created when missing), or None and why there is none."""
    try:
        import psycopg
    except ImportError:
        return None, "psycopg is not installed"
    try:
        with psycopg.connect(PG_ADMIN, autocommit=True, connect_timeout=5) as admin:
            found = admin.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s", (PG_DATABASE,)
            ).fetchone()
            if found is None:
                admin.execute(f"CREATE DATABASE {PG_DATABASE}")
    except psycopg.Error as problem:
        reason = str(problem).strip().splitlines()[0] if str(problem).strip() else "no answer"
        return None, f"PostgreSQL not reachable at {PG_ADMIN.rsplit('@', 1)[-1]} ({reason})"
    return f"{PG_ADMIN.rsplit('/', 1)[0]}/{PG_DATABASE}", ""


def drop_postgres() -> None:
    import psycopg

    with psycopg.connect(PG_ADMIN, autocommit=True, connect_timeout=5) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {PG_DATABASE}")


def warm_postgres(url: str) -> None:
    """Read the store's tables once, so that the server finds them in the page cache."""
    import psycopg

    with psycopg.connect(url) as db:
        # A scan of every heap page: no index may answer the count.
        for setting in ("enable_indexscan", "enable_indexonlyscan", "enable_bitmapscan"):
            db.execute(f"SET {setting} = off")
        for table in ("rankgate_traces", "rankgate_labels"):
            db.execute(f"SELECT count(*) FROM {table}")  # fixed names: nothing spliced


def fill_postgres(url: str, queries: int, depth: int, seed: int) -> None:
    """COPY in text format, the rows written as bytes (no Python object per ID)."""
    import psycopg

    from rankgate.store.backends import connect

    connect(url).close()
    with psycopg.connect(url) as db:
        db.execute("TRUNCATE rankgate_traces, rankgate_labels")
        db.execute("ALTER TABLE rankgate_labels SET UNLOGGED")
        db.execute("ALTER TABLE rankgate_traces SET UNLOGGED")
        with db.cursor() as cursor:
            label_lines = io.BytesIO()
            with cursor.copy(
                "COPY rankgate_traces (trace_id, query_id, recorded_at, variant, retrieved_ids, "
                "attributes) FROM STDIN"
            ) as copy:
                for chunk in chunks(queries, depth, seed):
                    lines = []
                    for qid, ranked, kind, ids, marks, number in chunk_rows(chunk, queries):
                        stamp = moment(number, queries).isoformat().encode()
                        lines.append(
                            b't%d\t%s\t%s\t\\N\t{%s}\t{"query_type": "%s"}\n'
                            % (number, qid, stamp, b",".join(ranked), kind.encode())
                        )
                        label_lines.write(
                            b"".join(
                                b"%s\t%s\t%d\n" % (qid, doc, grade)
                                for doc, grade in zip(ids, marks, strict=True)
                            )
                        )
                    copy.write(b"".join(lines))
            with cursor.copy(
                "COPY rankgate_labels (query_id, document_id, grade) FROM STDIN"
            ) as copy:
                copy.write(label_lines.getvalue())
        db.execute("ANALYZE rankgate_traces")
        db.execute("ANALYZE rankgate_labels")


# ---------------------------------------------------------------------------------------------
# The paired compare's candidate


def candidate_file(workdir: Path, queries: int, depth: int, seed: int) -> Path:
    """The same traces with the first ten ranks rotated by one on every other query."""
    path = workdir / f"candidate-{queries}.jsonl"
    part = path.with_suffix(".jsonl.part")
    with open(part, "wb") as out:
        for chunk in chunks(queries, depth, seed):
            moved = chunk.retrieved.copy()
            rows = np.arange(0, len(moved), 2)
            moved[rows, :10] = np.roll(moved[rows, :10], 1, axis=1)
            chunk.retrieved = moved
            out.write(chunk.jsonl(id_digits(queries)))
    part.replace(path)
    return path


def kept_apart_files(workdir: Path, queries: int, depth: int, seed: int) -> tuple[Path, Path]:
    """The same traces without their labels, and the labels as TREC qrels: ``eval --labels``."""
    rankings = workdir / f"rankings-{queries}.jsonl"
    qrels = workdir / f"labels-{queries}.qrels"
    with open(rankings, "wb") as ranking_out, open(qrels, "wb") as qrels_out:
        for chunk in chunks(queries, depth, seed):
            lines, labels = chunk.kept_apart(id_digits(queries))
            ranking_out.write(lines)
            qrels_out.write(labels)
    return rankings, qrels


# ---------------------------------------------------------------------------------------------
# Table shapes: map grades, struct grades, a DataFrame of dicts


class ShapeChunk:
    """Shape traces: 100 retrieved IDs from a pool of POOL documents, 5-15 labeled documents from
    a vocabulary of ``vocabulary`` (about 60% of them retrieved, towards the top)."""

    def __init__(self, rng: np.random.Generator, rows: int, depth: int, vocabulary: int) -> None:
        band = POOL // depth
        ranked = rng.integers(0, band, size=(rows, depth)) + np.arange(depth) * band
        ranked = rng.permuted(ranked, axis=1)
        slots = throughput.MAX_LABELED
        label_band = vocabulary // slots
        labeled = rng.integers(0, label_band, size=(rows, slots)) + np.arange(slots) * label_band
        self.labeled_ids = rng.permuted(labeled, axis=1) + POOL  # indices into the name table
        self.counts = rng.integers(throughput.MIN_LABELED, slots + 1, size=rows)
        found = rng.binomial(self.counts, throughput.RETRIEVED_LABEL_SHARE)
        keys = rng.exponential(size=(rows, depth)) * (1.0 + np.arange(depth) / 8.0)
        ranks = np.argpartition(keys, slots, axis=1)[:, :slots]
        put = np.arange(slots) < found[:, None]
        row_of = np.repeat(np.arange(rows), slots).reshape(rows, slots)
        ranked[row_of[put], ranks[put]] = self.labeled_ids[put]
        self.ranked = ranked
        grades = rng.choice(
            len(throughput.GRADE_SHARES), p=throughput.GRADE_SHARES, size=(rows, slots)
        )
        sure = rng.integers(0, self.counts)
        grades[np.arange(rows), sure] = np.maximum(grades[np.arange(rows), sure], 1)
        self.grades = grades
        self.in_use = np.arange(slots) < self.counts[:, None]


def shape_names(vocabulary: int) -> list[str]:
    return [f"d{number:05d}" for number in range(POOL)] + [f"v{n:04d}" for n in range(vocabulary)]


def shape_chunks(queries: int, depth: int, seed: int, vocabulary: int) -> Iterator[ShapeChunk]:
    rng = np.random.default_rng(seed + 1)
    for first in range(0, queries, throughput.CHUNK_ROWS):
        yield ShapeChunk(rng, min(throughput.CHUNK_ROWS, queries - first), depth, vocabulary)


def write_shapes(folder: Path, queries: int, depth: int, seed: int, vocabulary: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    names = pa.array(shape_names(vocabulary))
    vocab = [f"v{n:04d}" for n in range(vocabulary)]
    map_schema = pa.schema(
        [
            ("query_id", pa.string()),
            ("retrieved_ids", pa.list_(pa.string())),
            ("relevance_scores", pa.map_(pa.string(), pa.int64())),
        ]
    )
    grade_struct = pa.struct([(name, pa.int64()) for name in vocab])
    struct_schema = pa.schema(
        [
            ("query_id", pa.string()),
            ("retrieved_ids", pa.list_(pa.string())),
            ("relevance_scores", grade_struct),
        ]
    )
    first = 0
    with (
        pq.ParquetWriter(folder / "map.parquet", map_schema) as as_map,
        pq.ParquetWriter(folder / "struct.parquet", struct_schema) as as_struct,
    ):
        for chunk in shape_chunks(queries, depth, seed, vocabulary):
            rows = len(chunk.counts)
            qids = pa.array([f"q{n}" for n in range(first + 1, first + rows + 1)])
            first += rows
            ranked = pa.ListArray.from_arrays(
                pa.array(np.arange(0, (rows + 1) * depth, depth, dtype=np.int32)),
                names.take(pa.array(chunk.ranked.reshape(-1))),
            )
            keys = names.take(pa.array(chunk.labeled_ids[chunk.in_use]))
            grades = pa.MapArray.from_arrays(
                throughput.list_offsets(chunk.counts), keys, pa.array(chunk.grades[chunk.in_use])
            )
            as_map.write_table(
                pa.Table.from_arrays([qids, ranked, grades], schema=map_schema),
                row_group_size=rows,
            )
            # The struct: one column per vocabulary document, null where the query lacks it.
            dense = np.full((rows, vocabulary), -1, dtype=np.int64)
            row_of = np.repeat(np.arange(rows), chunk.in_use.shape[1]).reshape(chunk.in_use.shape)
            dense[row_of[chunk.in_use], chunk.labeled_ids[chunk.in_use] - POOL] = chunk.grades[
                chunk.in_use
            ]
            fields = [pa.array(dense[:, j], mask=dense[:, j] < 0) for j in range(vocabulary)]
            struct = pa.StructArray.from_arrays(fields, fields=list(grade_struct))
            as_struct.write_table(
                pa.Table.from_arrays([qids, ranked, struct], schema=struct_schema),
                row_group_size=rows,
            )


def shape_records(queries: int, depth: int, seed: int, vocabulary: int) -> list[dict[str, Any]]:
    """The shape traces as dicts, IDs shared between records (as a real list would hold them)."""
    table = np.array(shape_names(vocabulary), dtype=object)
    records: list[dict[str, Any]] = []
    for chunk in shape_chunks(queries, depth, seed, vocabulary):
        ranked = table[chunk.ranked].tolist()
        labeled = table[chunk.labeled_ids].tolist()
        for ids, docs, marks, count in zip(
            ranked, labeled, chunk.grades.tolist(), chunk.counts.tolist(), strict=True
        ):
            number = len(records) + 1
            records.append(
                {
                    "query_id": f"q{number}",
                    "retrieved_ids": ids,
                    "relevance_scores": dict(zip(docs[:count], marks[:count], strict=True)),
                }
            )
    return records


def shape_child(shape: str, folder: Path, queries: int, depth: int, seed: int, vocab: int) -> None:
    import rankgate

    source: Any
    if shape == "dataframe":
        import pandas as pd

        source = pd.DataFrame(shape_records(queries, depth, seed, vocab))
    else:
        source = folder / f"{shape}.parquet"
    started = time.perf_counter()
    evaluation = rankgate.evaluate(source, SHAPE_METRICS)
    seconds = time.perf_counter() - started
    # Only the five metrics asked for (the report may carry others, such as judged@k).
    named = {str(spec): value for spec, value in evaluation.overall.means.items()}
    means = {mine: named[theirs] for theirs, mine in throughput.RANKGATE_KEYS.items()}
    print(json.dumps({"seconds": seconds, "rows": evaluation.summary.scored, "means": means}))


# ---------------------------------------------------------------------------------------------
# The run


# The targets are set at a million traces; below that, interpreter start-up dominates the ratios,
# so a quick look shows them without judging them.
JUDGED_FROM = 1_000_000


class Target:
    judged = True

    def __init__(self, path: str, measured: str, value: float | None, limit: float, unit: str):
        self.path = path
        self.measured = measured
        self.value = value
        self.limit = limit
        self.unit = unit

    @property
    def verdict(self) -> str:
        if self.value is None:
            return "not measured"
        if not self.judged:
            return f"not judged below {JUDGED_FROM:,} queries"
        return "met" if self.value <= self.limit else "**missed**"


def ratio_of(top: Step | None, bottom: Step | None) -> float | None:
    if top is None or bottom is None or not top.ok or not bottom.ok or not bottom.wall:
        return None
    return (top.wall or 0.0) / bottom.wall


def figure(step: Step | None) -> str:
    if step is None:
        return "not run"
    if not step.ok:
        return step.status
    text = f"{step.wall:.1f} s, {step.peak_gb:.2f} GB"
    if step.report.get("seconds") is not None:
        text = f"evaluate {step.report['seconds']:.1f} s ({text} whole child)"
    return text


STEP_NAMES = {
    "sqlite": "SQLite",
    "postgres": "PostgreSQL",
    "compare": "paired `compare`",
    "unpaired": "unpaired `compare`",
    "labels": "`eval --labels`",
}


def cpu_line(named: list[tuple[str, Step | None]]) -> str:
    """CPU seconds of each run: rankgate's own, and the whole machine's over the same span, which
    holds a database server's work. On two cores, half the machine's figure is the least wall
    time the run could take however its work overlapped."""
    parts = [
        f"{name} {step.cpu_s:.1f} / {step.machine_cpu_s:.1f}"
        for name, step in named
        if step is not None and step.ok and step.cpu_s is not None and step.machine_cpu_s
    ]
    if not parts:
        return ""
    return (
        "CPU seconds of the fastest run, rankgate's process / the whole machine over the same "
        "span (a database server's processes included): " + "; ".join(parts) + "."
    )


def shape_seconds(step: Step | None) -> float | None:
    return step.report.get("seconds") if step is not None and step.ok else None


def run(step: Step, logs: Path, timeout: float, cap: int, repeat: int = 1) -> Step:
    """Run ``step``, ``repeat`` times when it succeeds, keeping the figures of the fastest run:
    a ratio of two single runs moved by a third between runs on this two-core machine."""
    progress(f"{step.key}: {' '.join(step.argv[-3:])}")
    throughput.run_step(step, logs, timeout, cap)
    progress(f"  {throughput.describe(step)}")
    for _ in range(repeat - 1):
        if not step.ok:
            break
        again = Step(
            step.key, step.tool, step.source, step.argv, capped=step.capped, ok_exits=step.ok_exits
        )
        throughput.run_step(again, logs, timeout, cap)
        progress(f"  again: {throughput.describe(again)}")
        if not again.ok:
            step.status, step.means = again.status, None
        elif (again.wall or 0.0) < (step.wall or 0.0):
            step.__dict__.update(again.__dict__)
    return step


def main_big(args: argparse.Namespace) -> int:
    jsonl, parquet, made = throughput.generate(args.workdir, args.queries, args.depth, args.seed)
    sizes = (jsonl.stat().st_size / 1e9, parquet.stat().st_size / 1e9)
    logs = args.workdir / f"logs-{args.queries}"
    logs.mkdir(parents=True, exist_ok=True)
    flags = rankgate_flags()
    rankgate = throughput.rankgate_command()
    steps = []
    try:
        throughput.warm_cache([jsonl])
        steps.append(
            run(
                Step(
                    "rankgate_jsonl",
                    "rankgate",
                    "JSONL",
                    [*rankgate, "eval", str(jsonl), *flags],
                    capped=False,
                ),
                logs,
                args.timeout,
                0,
            )
        )
        throughput.warm_cache([parquet])
        steps.append(
            run(
                Step(
                    "rankgate_parquet",
                    "rankgate",
                    "Parquet",
                    [*rankgate, "eval", str(parquet), *flags],
                    capped=False,
                ),
                logs,
                args.timeout,
                0,
            )
        )
    finally:
        if made and not args.keep_data:
            for path in (jsonl, parquet, jsonl.with_name(f"traces-{args.queries}.params.json")):
                path.unlink(missing_ok=True)
            progress("removed the generated trace files")
    problems = throughput.compare(steps, args.queries)
    print(
        f"{args.queries:,} queries x {args.depth} retrieved IDs (seed {args.seed}); "
        f"JSONL {sizes[0]:.1f} GB, Parquet {sizes[1]:.1f} GB (deleted after the run)"
    )
    print()
    print("| path | measured | peak RSS | target | |")
    print("|---|---|--:|--:|---|")
    missed = False
    for step in steps:
        value = step.peak_gb if step.ok else None
        verdict = (
            "not measured" if value is None else ("met" if value <= BIG_PEAK_GB else "**missed**")
        )
        missed |= verdict != "met"
        print(
            f"| `eval` {step.source}, {args.queries:,} traces | {figure(step)} | "
            f"{'' if value is None else f'{value:.2f} GB'} | <= {BIG_PEAK_GB:g} GB | {verdict} |"
        )
    for line in problems:
        print(line)
    return 1 if missed or problems else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=None)
    parser.add_argument("--depth", type=int, default=100)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--vocabulary", type=int, default=256, help="labeled documents of the struct-grade traces"
    )
    parser.add_argument("--workdir", type=Path, default=Path("build/bench"))
    parser.add_argument(
        "--big", action="store_true", help="10M traces, JSONL and Parquet peak memory only"
    )
    parser.add_argument("--skip-peers", action="store_true", help="skip pytrec_eval and ranx")
    parser.add_argument(
        "--skip",
        default="",
        help="comma-separated: peers, sqlite, postgres, compare, unpaired, shapes, dataframe, labels",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=3,
        help="runs of each rankgate step and floor, the fastest kept (peers run once)",
    )
    parser.add_argument("--keep-data", action="store_true", help="keep what this run generated")
    parser.add_argument("--json", type=Path, metavar="OUT", help="also write the figures here")
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument(
        "--memory-cap-gb", type=float, default=min(20.0, 0.85 * throughput.total_memory() / 1e9)
    )
    parser.add_argument("--shape-child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.queries is None:
        args.queries = 10_000_000 if args.big else 1_000_000
    if args.shape_child:
        shape_child(
            args.shape_child[0],
            Path(args.shape_child[1]),
            args.queries,
            args.depth,
            args.seed,
            args.vocabulary,
        )
        return 0
    throughput.compile_rankgate()
    if args.big:
        return main_big(args)
    skipped = {name.strip() for name in args.skip.split(",") if name.strip()}
    if args.skip_peers:
        skipped.add("peers")

    queries, depth, seed = args.queries, args.depth, args.seed
    jsonl, parquet, made = throughput.generate(args.workdir, queries, depth, seed)
    sizes = {"JSONL": jsonl.stat().st_size, "Parquet": parquet.stat().st_size}
    logs = args.workdir / f"logs-{queries}"
    logs.mkdir(parents=True, exist_ok=True)
    cap = int(args.memory_cap_gb * 1e9)
    rankgate = throughput.rankgate_command()
    flags = rankgate_flags()
    store_path = args.workdir / f"store-{queries}.db"
    sqlite_url = f"sqlite:///{store_path}"
    made_files: list[Path] = []
    pg_url: str | None = None
    pg_note = ""
    fills: dict[str, float] = {}
    extra: dict[str, Step] = {}
    try:
        if "sqlite" not in skipped or "unpaired" not in skipped:
            progress(f"filling {store_path} with the same traces")
            started = time.perf_counter()
            fill_sqlite(store_path, queries, depth, seed)
            fills["SQLite"] = time.perf_counter() - started
            made_files += [store_path, Path(f"{store_path}-wal"), Path(f"{store_path}-shm")]
            progress(f"  {fills['SQLite']:.0f} s")
        if "postgres" not in skipped:
            pg_url, pg_note = postgres_url()
            if pg_url is not None:
                progress(f"filling PostgreSQL database {PG_DATABASE} with the same traces")
                started = time.perf_counter()
                try:
                    fill_postgres(pg_url, queries, depth, seed)
                    fills["PostgreSQL"] = time.perf_counter() - started
                    progress(f"  {fills['PostgreSQL']:.0f} s")
                except Exception as problem:  # a store that cannot be filled is a row, not a crash
                    pg_note = f"could not fill PostgreSQL ({type(problem).__name__}: {problem})"
                    pg_url = None
        candidate = None
        if "compare" not in skipped:
            progress("writing the paired compare's candidate")
            candidate = candidate_file(args.workdir, queries, depth, seed)
            made_files.append(candidate)
        kept_apart = None
        if "labels" not in skipped:
            progress("writing the traces without labels, and their labels as qrels")
            kept_apart = kept_apart_files(args.workdir, queries, depth, seed)
            made_files += list(kept_apart)
        shapes = args.workdir / f"shapes-{queries}"
        if "shapes" not in skipped:
            progress(f"writing the shape traces (struct grades over {args.vocabulary} documents)")
            shapes.mkdir(parents=True, exist_ok=True)
            write_shapes(shapes, queries, depth, seed, args.vocabulary)
            made_files += [shapes / "map.parquet", shapes / "struct.parquet"]

        progress("reading the files once to warm the page cache")
        throughput.warm_cache([jsonl, parquet, *(p for p in made_files if p.exists())])

        skip_groups = {"pytrec_eval", "ranx"} if "peers" in skipped else set()
        steps = throughput.plan(jsonl, parquet, skip_groups)
        for number, step in enumerate(steps, start=1):
            progress(f"({number}/{len(steps)}) peers' table")
            # The peers take minutes: once each. The floors and rankgate, the ratios' terms,
            # keep their fastest run.
            repeat = 1 if step.tool in ("pytrec_eval", "ranx") else args.repeat
            run(step, logs, args.timeout, cap, repeat)
        by_key = {step.key: step for step in steps}

        def rankgate_step(
            key: str,
            source: str,
            argv: list[str],
            tool: str = "rankgate",
            warm: Sequence[Path] = (),
            warm_url: str | None = None,
        ) -> Step:
            # The peers (pytrec_eval holds 17 GB) push the inputs out of the page cache: each
            # step reads its own back first, as the JSONL eval, run before them, found them.
            throughput.warm_cache([path for path in warm if path.exists()])
            if warm_url is not None:
                warm_postgres(warm_url)
            ok_exits = (0, 1) if tool == "rankgate compare" else (0,)
            step = Step(
                key, tool, source, [*rankgate, *argv, *flags], capped=False, ok_exits=ok_exits
            )
            extra[key] = run(step, logs, args.timeout, cap, args.repeat)
            return step

        if "sqlite" not in skipped:
            rankgate_step(
                "sqlite", "SQLite store", ["eval", sqlite_url, *WINDOW], warm=[store_path]
            )
        if pg_url is not None:
            rankgate_step(
                "postgres", "PostgreSQL store", ["eval", pg_url, *WINDOW], warm_url=pg_url
            )
        if candidate is not None:
            rankgate_step(
                "compare",
                "JSONL x 2",
                ["compare", str(jsonl), str(candidate)],
                "rankgate compare",
                warm=[jsonl, candidate],
            )
        if kept_apart is not None:
            rankings, qrels = kept_apart
            rankgate_step(
                "labels",
                "JSONL + qrels",
                ["eval", str(rankings), "--labels", str(qrels)],
                warm=[rankings, qrels],
            )
        if "unpaired" not in skipped:
            db = sqlite3.connect(store_path)
            db.execute(
                "UPDATE rankgate_traces SET variant = "
                "CASE WHEN rowid % 2 = 1 THEN 'control' ELSE 'treatment' END"
            )
            db.commit()
            db.close()
            rankgate_step(
                "unpaired",
                "SQLite store, 2 variants",
                [
                    "compare",
                    sqlite_url,
                    "--pairing",
                    "unpaired",
                    "--baseline",
                    "control",
                    "--candidate",
                    "treatment",
                    *WINDOW,
                ],
                "rankgate compare",
                warm=[store_path],
            )
        if "shapes" not in skipped:
            wanted = ("map", "struct") if "dataframe" in skipped else ("map", "struct", "dataframe")
            for shape in wanted:
                argv = [
                    sys.executable,
                    str(Path(__file__).resolve()),
                    "--queries",
                    str(queries),
                    "--depth",
                    str(depth),
                    "--seed",
                    str(seed),
                    "--vocabulary",
                    str(args.vocabulary),
                    "--shape-child",
                    shape,
                    str(shapes),
                ]
                extra[f"shape_{shape}"] = run(
                    Step(f"shape_{shape}", "rankgate shape", shape, argv, capped=False),
                    logs,
                    args.timeout,
                    cap,
                    args.repeat,
                )
    finally:
        if not args.keep_data:
            for path in made_files:
                path.unlink(missing_ok=True)
            if made:
                for path in (jsonl, parquet, jsonl.with_name(f"traces-{queries}.params.json")):
                    path.unlink(missing_ok=True)
            if pg_url is not None:
                drop_postgres()
            progress("removed the generated data (--keep-data keeps it)")

    peers_table, figures = throughput.render(
        argparse.Namespace(
            queries=queries,
            depth=depth,
            seed=seed,
            repeat=1,
            memory_cap_gb=args.memory_cap_gb,
            timeout=args.timeout,
        ),
        throughput.environment(),
        by_key,
        sizes,
    )

    # Agreement: the peers with rankgate (throughput's rule), and rankgate's own runs of the same
    # traces with its JSONL eval; the unpaired baseline scores half the queries, the shapes their
    # own traces.
    problems = throughput.compare(steps, queries)
    same = [
        by_key.get("rankgate_jsonl"),
        *(extra.get(k) for k in ("sqlite", "postgres", "compare", "labels")),
    ]
    problems += throughput.compare([s for s in same if s is not None], queries)
    shape_steps = [extra[k] for k in ("shape_map", "shape_struct", "shape_dataframe") if k in extra]
    problems += throughput.compare(shape_steps, queries)
    unpaired = extra.get("unpaired")
    if unpaired is not None and unpaired.ok:
        sides = (unpaired.report.get("baseline_queries"), unpaired.report.get("candidate_queries"))
        if sides != ((queries + 1) // 2, queries // 2):
            problems.append(
                f"DISAGREE unpaired: sides of {sides}, "
                f"expected {(queries + 1) // 2} and {queries // 2}"
            )
        design = (unpaired.report.get("design") or {}).get("design")
        if design != "unpaired":
            problems.append(f"DISAGREE unpaired: compare chose {design!r}")
    problems = list(dict.fromkeys(problems))

    jsonl_eval = by_key.get("rankgate_jsonl")
    parquet_eval = by_key.get("rankgate_parquet")
    floor = throughput.fastest([s for k, s in by_key.items() if k in ("read_json", "open_json")])
    targets: list[Target] = []
    if "sqlite" not in skipped:
        step = extra.get("sqlite")
        targets.append(
            Target(
                "`eval` from the SQLite store / `eval` of the JSONL",
                figure(step),
                ratio_of(step, jsonl_eval),
                2.0,
                "x",
            )
        )
    if "postgres" not in skipped:
        step = extra.get("postgres")
        targets.append(
            Target(
                "`eval` from the PostgreSQL store / `eval` of the JSONL",
                figure(step) if step else pg_note,
                ratio_of(step, jsonl_eval),
                2.5,
                "x",
            )
        )
    if "shapes" not in skipped:
        base = extra.get("shape_map")
        for key, label in (
            ("shape_struct", "Parquet, struct grades"),
            ("shape_dataframe", "pandas DataFrame from dicts"),
        ):
            if key == "shape_dataframe" and "dataframe" in skipped:
                continue
            step = extra.get(key)
            top, bottom = shape_seconds(step), shape_seconds(base)
            value = None if top is None or not bottom else top / bottom
            targets.append(
                Target(
                    f"{label} / Parquet, map grades (map: {figure(base)})",
                    figure(step),
                    value,
                    1.5,
                    "x",
                )
            )
    if "compare" not in skipped:
        step = extra.get("compare")
        targets.append(
            Target(
                f"`compare` of {queries:,} paired queries / `eval` of the JSONL",
                figure(step),
                ratio_of(step, jsonl_eval),
                3.0,
                "x",
            )
        )
        if queries >= 1_000_000:
            targets.append(
                Target(
                    "`compare` paired, peak RSS",
                    figure(step),
                    step.peak_gb if step and step.ok else None,
                    2.0,
                    "GB",
                )
            )
    if "unpaired" not in skipped:
        step = extra.get("unpaired")
        store_eval = extra.get("sqlite")
        value = ratio_of(step, store_eval) if store_eval is not None else ratio_of(step, jsonl_eval)
        versus = "`eval` of the same store" if store_eval is not None else "`eval` of the JSONL"
        note = (
            ""
            if ratio_of(step, jsonl_eval) is None
            else f"; {ratio_of(step, jsonl_eval):.2f}x the JSONL eval"
        )
        targets.append(
            Target(
                f"`compare --pairing unpaired`, 2 x {queries // 2:,} queries of one SQLite "
                f"store / {versus}",
                figure(step) + note,
                value,
                3.0,
                "x",
            )
        )
    targets.append(
        Target(
            "`eval` of the JSONL / the bare pyarrow read (floor)",
            f"{figure(jsonl_eval)}; floor {figure(floor)}",
            ratio_of(jsonl_eval, floor),
            1.2,
            "x",
        )
    )
    if parquet_eval is not None:
        parquet_floor = throughput.fastest(
            [s for k, s in by_key.items() if k in ("read_table", "iter_batches")]
        )
        pr = ratio_of(parquet_eval, parquet_floor)
        times = "" if pr is None else f"{pr:.2f}x"
        parquet_line = (
            f"(for information: `eval` of the Parquet file {figure(parquet_eval)}, {times} its "
            f"floor {figure(parquet_floor)})"
        )
    else:
        parquet_line = ""

    for target in targets:
        target.judged = queries >= JUDGED_FROM
    lines = [
        f"## Targets (issue 16): {queries:,} queries x {depth} retrieved IDs, 5 metrics, one run",
        "",
        "| path | measured (wall, peak RSS) | ratio | target | |",
        "|---|---|--:|--:|---|",
    ]
    for target in targets:
        shown = (
            ""
            if target.value is None
            else f"{target.value:.2f}{' GB' if target.unit == 'GB' else 'x'}"
        )
        limit = f"<= {target.limit:g}{' GB' if target.unit == 'GB' else 'x'}"
        lines.append(
            f"| {target.path} | {target.measured} | {shown} | {limit} | {target.verdict} |"
        )
    lines.append(
        f"| 10M traces, JSONL and Parquet, peak RSS | `make bench-10m` | | "
        f"<= {BIG_PEAK_GB:g} GB | see there |"
    )
    lines += ["", parquet_line]
    labels_step = extra.get("labels")
    if labels_step is not None:
        ratio = ratio_of(labels_step, jsonl_eval)
        lines.append(
            "(for information: `eval --labels`, the traces without their labels and the labels "
            f"as a qrels file, {figure(labels_step)}"
            + ("" if ratio is None else f", {ratio:.2f}x the JSONL `eval`")
            + ")"
        )
    if args.repeat > 1:
        lines.append(
            f"Each rankgate and floor figure is the fastest of {args.repeat} runs; the peers ran "
            "once. The stores and the compares' files were read back into the page cache before "
            "their steps (the peers evict them)."
        )
    cpu = cpu_line(
        [
            ("JSONL `eval`", jsonl_eval),
            *((STEP_NAMES[key], extra.get(key)) for key in STEP_NAMES),
        ]
    )
    if cpu:
        lines.append(cpu)
    if fills:
        lines.append(
            "Stores filled in "
            + ", ".join(f"{k} {v:.0f} s" for k, v in fills.items())
            + " (not timed as targets)."
        )
    if "shapes" not in skipped:
        lines.append(
            f"Struct/DataFrame rows: traces of their own ({queries:,} x {depth} IDs, labels from "
            f"a vocabulary of {args.vocabulary} documents, so the struct has {args.vocabulary} "
            "fields), timed around `rankgate.evaluate` in the child."
        )
    print(peers_table)
    print()
    print("\n".join(lines))
    for line in problems:
        print(line)
    rankgate_failed = [
        s
        for s in [*(by_key.get(k) for k in ("rankgate_jsonl", "rankgate_parquet")), *extra.values()]
        if s is not None and not s.ok
    ]
    for step in rankgate_failed:
        print(f"FAILED {step.key}: {step.status} (logs in {logs})")
    missed = [
        t
        for t in targets
        if t.verdict != "met"
        and t.judged
        and not (
            t.value is None and t.path.startswith("`eval` from the PostgreSQL") and pg_url is None
        )
    ]
    if args.json:
        figures["targets"] = [
            {
                "path": t.path,
                "measured": t.measured,
                "value": t.value,
                "limit": t.limit,
                "verdict": t.verdict,
            }
            for t in targets
        ]
        figures["extra"] = {
            k: {
                "status": s.status,
                "wall_s": s.wall,
                "peak_gb": s.peak_gb,
                "cpu_s": s.cpu_s,
                "machine_cpu_s": s.machine_cpu_s,
                "report": s.report,
            }
            for k, s in extra.items()
        }
        figures["disagreements"] = problems
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(figures, indent=2, default=str) + "\n")
    return 1 if missed or problems or rankgate_failed else 0


if __name__ == "__main__":
    sys.exit(main())
