"""Throughput of ``rankgate eval`` against a bare read of the same file and two peers.

    python bench/throughput.py                     # 1,000,000 queries x 100 retrieved IDs
    python bench/throughput.py --queries 20000     # a quick look, well under a minute
    python bench/throughput.py --skip pytrec_eval --json build/bench/throughput.json

Writes seeded synthetic traces to ``<workdir>/traces-<N>.jsonl`` and ``.parquet`` (reused while a
sidecar ``traces-<N>.params.json`` says they were made with the same parameters), then runs every
tool in a child process of its own, so each peak RSS belongs to one tool:

- ``floor``: pyarrow reading the file and nothing else (the JSONL without ``relevance_scores``,
  which pyarrow's JSON reader cannot turn into a map; see the table's notes);
- ``rankgate``: the CLI on the JSONL and on the Parquet file;
- ``pytrec_eval``: JSON parsing into trec_eval's dicts, then RelevanceEvaluator;
- ``ranx``: its dict path (Qrels/Run.from_dict) and its kernels fed arrays built straight from the
  parsed lines; the faster is the ``ranx`` row.

Every tool prints its means; they must agree to 1e-6 (relative) and every run must count all the
queries, or the run prints DISAGREE and exits 1; a run that fails for a reason other than the
memory cap or the timeout makes it exit 2. The table on stdout is Markdown; progress goes to
stderr. The peer runners, and the launcher that measures each run, live in ``bench/peers.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

HERE = Path(__file__).resolve().parent
PEERS = HERE / "peers.py"

# Bumped whenever the generator changes what it writes, so old files are not reused.
GENERATOR_VERSION = 1
CHUNK_ROWS = 65_536  # queries generated (and Parquet row group size) per step
ID_SPACE = 10_000_000  # document IDs are d0000000 .. d9999999
ID_DIGITS = 7
MAX_LABELED = 15  # 5-15 labeled documents per query
MIN_LABELED = 5
QUERY_TYPES = ("factual", "navigational", "how_to", "comparison")
GRADE_SHARES = (0.35, 0.35, 0.18, 0.12)  # grades 0, 1, 2, 3 of a labeled document
RETRIEVED_LABEL_SHARE = 0.6  # chance that a labeled document is among the retrieved ones

# The metrics every tool computes, under one name each. ndcg_cut is trec_eval's NDCG (linear
# gain); rankgate reads ndcg_cut@10 as ndcg(gain=linear)@10.
METRICS = ("ndcg_cut@10", "precision@10", "recall@100", "map", "mrr")
RANKGATE_KEYS = {
    "ndcg(gain=linear)@10": "ndcg_cut@10",
    "precision@10": "precision@10",
    "recall@100": "recall@100",
    "map": "map",
    "mrr": "mrr",
}
TOLERANCE = 1e-6


def progress(message: str) -> None:
    stamp = time.strftime("%H:%M:%S")
    print(f"[{stamp}] {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# Synthetic traces


def digit_bytes(numbers: np.ndarray, prefix: bytes, digits: int) -> np.ndarray:
    """``prefix`` followed by the zero-padded decimal digits of each number, as a uint8 array with
    one more axis of length ``len(prefix) + digits``."""
    out = np.empty((*numbers.shape, len(prefix) + digits), dtype=np.uint8)
    out[..., : len(prefix)] = np.frombuffer(prefix, dtype=np.uint8)
    rest = numbers.astype(np.int64, copy=True)
    for place in range(digits - 1, -1, -1):
        out[..., len(prefix) + place] = rest % 10 + ord("0")
        rest //= 10
    return out


def string_array(fixed: np.ndarray) -> pa.Array:
    """A pyarrow string array over rows of equal-width ASCII bytes (a 2-D uint8 array), built
    from the buffers without a Python object per string."""
    count, width = fixed.shape
    offsets = np.arange(0, (count + 1) * width, width, dtype=np.int32)
    data = np.ascontiguousarray(fixed).reshape(-1)
    return pa.StringArray.from_buffers(count, pa.py_buffer(offsets), pa.py_buffer(data))


def list_offsets(lengths: np.ndarray) -> pa.Array:
    offsets = np.zeros(len(lengths) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    return pa.array(offsets)


PARQUET_SCHEMA = pa.schema(
    [
        ("query_id", pa.string()),
        ("retrieved_ids", pa.list_(pa.string())),
        ("relevant_ids", pa.list_(pa.string())),
        ("relevance_scores", pa.map_(pa.string(), pa.int64())),
        ("query_type", pa.string()),
    ]
)


class Chunk:
    """One block of queries, as arrays: the retrieved IDs (rows x depth) and the labeled IDs and
    their grades (rows x MAX_LABELED, the first ``labeled[i]`` of row i in use)."""

    def __init__(self, rng: np.random.Generator, first: int, rows: int, depth: int) -> None:
        # Distinct IDs per query without a rejection loop: split the ID space into one band per
        # column, draw one ID inside each band, then shuffle each row's columns. The first
        # ``depth`` columns are the ranking; the others are labeled documents it missed.
        columns = depth + MAX_LABELED
        band = ID_SPACE // columns
        ids = rng.integers(0, band, size=(rows, columns)) + np.arange(columns) * band
        ids = rng.permuted(ids, axis=1)
        self.retrieved = ids[:, :depth]
        missed = ids[:, depth:]

        self.labeled = rng.integers(MIN_LABELED, MAX_LABELED + 1, size=rows)
        found = rng.binomial(self.labeled, RETRIEVED_LABEL_SHARE)
        # Ranks of the labeled documents that were retrieved, drawn towards the top: the
        # MAX_LABELED smallest of exponential keys stretched with the rank.
        keys = rng.exponential(size=(rows, depth)) * (1.0 + np.arange(depth) / 8.0)
        ranks = np.argpartition(keys, MAX_LABELED, axis=1)[:, :MAX_LABELED]
        slot = np.arange(MAX_LABELED)
        from_ranking = np.take_along_axis(self.retrieved, ranks, axis=1)
        from_missed = np.take_along_axis(
            missed, np.clip(slot - found[:, None], 0, MAX_LABELED - 1), axis=1
        )
        labeled_ids = np.where(slot < found[:, None], from_ranking, from_missed)
        in_use = slot < self.labeled[:, None]
        # Shuffle the labels in use so the retrieved ones do not always come first.
        order = np.argsort(np.where(in_use, rng.random((rows, MAX_LABELED)), 2.0), axis=1)
        self.labeled_ids = np.take_along_axis(labeled_ids, order, axis=1)
        grades = rng.choice(len(GRADE_SHARES), p=GRADE_SHARES, size=(rows, MAX_LABELED))
        # Every query gets at least one relevant document (retrieved or not), so no tool has to
        # decide what a query without one scores.
        sure = rng.integers(0, self.labeled)
        row = np.arange(rows)
        grades[row, sure] = np.maximum(grades[row, sure], 1)
        self.grades = grades
        self.in_use = in_use
        self.numbers = np.arange(first + 1, first + rows + 1)
        self.types = rng.integers(0, len(QUERY_TYPES), size=rows)

    def jsonl(self, id_digits: int) -> bytes:
        rows, depth = self.retrieved.shape
        qids = digit_bytes(self.numbers, b"q", id_digits).view(f"S{id_digits + 1}")[:, 0]
        # The whole retrieved_ids array of a row is fixed-width text: "d1234567", repeated.
        width = ID_DIGITS + 4
        cells = np.empty((rows, depth, width), dtype=np.uint8)
        cells[:, :, 0] = ord('"')
        cells[:, :, 1 : width - 2] = digit_bytes(self.retrieved, b"d", ID_DIGITS)
        cells[:, :, width - 2] = ord('"')
        cells[:, :, width - 1] = ord(",")
        flat = cells.reshape(rows, depth * width)[:, :-1]
        rankings = np.ascontiguousarray(flat).view(f"S{depth * width - 1}")[:, 0]
        labels = digit_bytes(self.labeled_ids, b"d", ID_DIGITS).view(f"S{ID_DIGITS + 1}")
        labels = labels[:, :, 0].tolist()
        grades = self.grades.tolist()
        types = [QUERY_TYPES[t].encode() for t in self.types.tolist()]
        lines = []
        for qid, ranking, ids, marks, count, kind in zip(
            qids.tolist(),
            rankings.tolist(),
            labels,
            grades,
            self.labeled.tolist(),
            types,
            strict=True,
        ):
            pairs = list(zip(ids[:count], marks[:count], strict=True))
            relevant = b",".join(b'"%s"' % doc for doc, grade in pairs if grade >= 1)
            scores = b",".join(b'"%s":%d' % pair for pair in pairs)
            lines.append(
                b'{"query_id":"%s","retrieved_ids":[%s],"relevant_ids":[%s],'
                b'"relevance_scores":{%s},"query_type":"%s"}\n'
                % (qid, ranking, relevant, scores, kind)
            )
        return b"".join(lines)

    def kept_apart(self, id_digits: int) -> tuple[bytes, bytes]:
        """The same queries as JSON Lines without their labels, and the labels as TREC qrels
        (``qid 0 docno grade``): what ``eval --labels`` joins back."""
        qids = digit_bytes(self.numbers, b"q", id_digits).view(f"S{id_digits + 1}")[:, 0].tolist()
        labels = digit_bytes(self.labeled_ids, b"d", ID_DIGITS).view(f"S{ID_DIGITS + 1}")
        labels = labels[:, :, 0].tolist()
        grades = self.grades.tolist()
        qrels = [
            b"%s 0 %s %d\n" % (qid, doc, grade)
            for qid, ids, marks, count in zip(
                qids, labels, grades, self.labeled.tolist(), strict=True
            )
            for doc, grade in zip(ids[:count], marks[:count], strict=True)
        ]
        lines = [
            line[: line.index(b',"relevant_ids"')] + line[line.index(b',"query_type"') :]
            for line in self.jsonl(id_digits).splitlines(keepends=True)
        ]
        return b"".join(lines), b"".join(qrels)

    def table(self, id_digits: int) -> pa.Table:
        rows, depth = self.retrieved.shape
        qids = string_array(digit_bytes(self.numbers, b"q", id_digits))
        ranking_ids = string_array(digit_bytes(self.retrieved.reshape(-1), b"d", ID_DIGITS))
        rankings = pa.ListArray.from_arrays(
            pa.array(np.arange(0, (rows + 1) * depth, depth, dtype=np.int32)), ranking_ids
        )
        label_ids = digit_bytes(self.labeled_ids[self.in_use], b"d", ID_DIGITS)
        label_grades = self.grades[self.in_use]
        scores = pa.MapArray.from_arrays(
            list_offsets(self.labeled), string_array(label_ids), pa.array(label_grades)
        )
        relevant = (self.grades >= 1) & self.in_use
        relevant_ids = pa.ListArray.from_arrays(
            list_offsets(relevant.sum(axis=1)),
            string_array(digit_bytes(self.labeled_ids[relevant], b"d", ID_DIGITS)),
        )
        kinds = pa.DictionaryArray.from_arrays(
            pa.array(self.types.astype(np.int8)), pa.array(QUERY_TYPES)
        ).cast(pa.string())
        return pa.Table.from_arrays(
            [qids, rankings, relevant_ids, scores, kinds], schema=PARQUET_SCHEMA
        )


def generate(workdir: Path, queries: int, depth: int, seed: int) -> tuple[Path, Path, bool]:
    """The two trace files, made now or reused; the flag says whether they were made now."""
    workdir.mkdir(parents=True, exist_ok=True)
    jsonl = workdir / f"traces-{queries}.jsonl"
    parquet = workdir / f"traces-{queries}.parquet"
    sidecar = workdir / f"traces-{queries}.params.json"
    params = {"generator": GENERATOR_VERSION, "queries": queries, "depth": depth, "seed": seed}
    if sidecar.exists() and jsonl.exists() and parquet.exists():
        try:
            known = json.loads(sidecar.read_text())
        except ValueError:
            known = {}
        if known.get("params") == params and known.get("sizes") == [
            jsonl.stat().st_size,
            parquet.stat().st_size,
        ]:
            progress(f"reusing {jsonl} and {parquet} (same parameters)")
            return jsonl, parquet, False
    sidecar.unlink(missing_ok=True)
    progress(f"generating {queries:,} queries x {depth} IDs (seed {seed}) into {workdir}")
    id_digits = max(7, len(str(queries)))
    rng = np.random.default_rng(seed)
    started = time.perf_counter()
    part_jsonl = jsonl.with_suffix(".jsonl.part")
    part_parquet = parquet.with_suffix(".parquet.part")
    with (
        open(part_jsonl, "wb") as text,
        pq.ParquetWriter(part_parquet, PARQUET_SCHEMA) as writer,
    ):
        for first in range(0, queries, CHUNK_ROWS):
            chunk = Chunk(rng, first, min(CHUNK_ROWS, queries - first), depth)
            text.write(chunk.jsonl(id_digits))
            writer.write_table(chunk.table(id_digits), row_group_size=CHUNK_ROWS)
            done = first + len(chunk.numbers)
            if done == queries or (done // CHUNK_ROWS) % 4 == 0:
                elapsed = time.perf_counter() - started
                progress(f"  generated {done:,}/{queries:,} queries ({elapsed:.0f} s)")
    part_jsonl.replace(jsonl)
    part_parquet.replace(parquet)
    sizes = [jsonl.stat().st_size, parquet.stat().st_size]
    sidecar.write_text(json.dumps({"params": params, "sizes": sizes}, indent=2) + "\n")
    progress(
        f"  wrote {sizes[0] / 1e9:.2f} GB of JSONL and {sizes[1] / 1e9:.2f} GB of Parquet "
        f"in {time.perf_counter() - started:.0f} s"
    )
    return jsonl, parquet, True


# ---------------------------------------------------------------------------------------------
# Running one tool


class Step:
    """One child process: what it runs, on which input, and what it reported."""

    def __init__(
        self,
        key: str,
        tool: str,
        source: str,
        argv: list[str],
        *,
        capped: bool,
        ok_exits: tuple[int, ...] = (0,),
    ) -> None:
        self.key = key
        self.tool = tool
        self.source = source  # "JSONL" or "Parquet" (bench/targets.py: any input's name)
        self.argv = argv
        self.capped = capped
        # Exit codes that mean the run did its job: compare exits 1 when it flags a regression.
        self.ok_exits = ok_exits
        self.status = "not run"  # ok | out of memory | timeout | failed (...)
        self.wall: float | None = None
        self.peak_gb: float | None = None
        #: CPU seconds of the child, and of the whole machine while it ran (a server included).
        self.cpu_s: float | None = None
        self.machine_cpu_s: float | None = None
        self.report: dict[str, Any] = {}
        self.means: dict[str, float] | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def compile_rankgate() -> None:
    """Write the bytecode of rankgate's modules, as installing the package from a wheel does.

    An editable install leaves only sources, and with PYTHONDONTWRITEBYTECODE set (as on the
    machines here) every run compiled all of them again: 0.35 s of each ``rankgate eval``, paid by
    no installed copy and by no peer, whose packages come with their bytecode."""
    import compileall
    import importlib.util

    found = importlib.util.find_spec("rankgate")
    if found is None or not found.submodule_search_locations:
        return
    for folder in found.submodule_search_locations:
        compileall.compile_dir(folder, quiet=1)


def rankgate_command() -> list[str]:
    script = Path(sys.executable).with_name("rankgate")
    return [str(script)] if script.exists() else [sys.executable, "-m", "rankgate"]


def run_step(step: Step, logs: Path, timeout: float, memory_cap: int) -> None:
    """Run the step's command under ``peers.py measure``, which forks it from a small process
    and reports its wall time and the peak RSS the kernel returns for exactly that child
    (os.wait4). The whole process group is killed after ``timeout`` seconds."""
    out_path = logs / f"{step.key}.out"
    err_path = logs / f"{step.key}.err"
    measured = logs / f"{step.key}.measure.json"
    measured.unlink(missing_ok=True)
    env = dict(os.environ)
    if step.capped:
        env["BENCH_MEMORY_CAP"] = str(memory_cap)
    argv = [sys.executable, str(PEERS), "measure", str(measured), *step.argv]
    expired = threading.Event()
    reaped = threading.Event()
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        started = time.perf_counter()
        launcher = subprocess.Popen(argv, stdout=out, stderr=err, env=env, start_new_session=True)

        def stop() -> None:
            if not reaped.is_set():
                expired.set()
                os.killpg(launcher.pid, signal.SIGKILL)

        timer = threading.Timer(timeout, stop)
        timer.start()
        try:
            launcher.wait()
        finally:
            reaped.set()
            timer.cancel()
        outer_wall = time.perf_counter() - started
    if expired.is_set():
        step.wall = outer_wall
        step.status = f"timeout (> {timeout:.0f} s)"
        return
    try:
        figures = json.loads(measured.read_text())
    except (OSError, ValueError):
        step.status = f"failed (no measurement; launcher exit {launcher.returncode})"
        return
    step.wall = figures["wall_s"]
    step.peak_gb = figures["maxrss_kb"] * 1024 / 1e9  # Linux reports kilobytes
    step.cpu_s = figures.get("cpu_s")
    step.machine_cpu_s = figures.get("machine_cpu_s")
    code = figures["exit"]
    stdout = out_path.read_text(errors="replace")
    stderr = err_path.read_text(errors="replace")
    last = stdout.strip().splitlines()[-1] if stdout.strip() else ""
    hints = ("MemoryError", "bad_alloc", "out of memory", "Cannot allocate memory")
    if (code == 3 and not step.tool.startswith("rankgate")) or (
        code != 0 and any(hint in stderr for hint in hints)
    ):
        step.status = "out of memory"
        return
    if code < 0:
        cap = " under the memory cap" if step.capped else ""
        step.status = f"killed by signal {-code}{cap}"
        return
    if code not in step.ok_exits:
        tail = (stderr.strip().splitlines() or ["(no message)"])[-1]
        step.status = f"failed (exit {code}: {tail[:120]})"
        return
    try:
        if step.tool == "rankgate":
            report = json.loads(stdout)
            step.means = {RANKGATE_KEYS[name]: value for name, value in report["metrics"].items()}
            step.report = {"summary": report.get("summary")}
        elif step.tool == "rankgate compare":
            # The baseline's means stand for the run (they must equal eval's of the same traces).
            report = json.loads(stdout)
            cells = [cell for cell in report["cells"] if cell.get("segment") is None]
            step.means = {
                RANKGATE_KEYS[cell["metric"]]: cell["baseline_mean"]
                for cell in cells
                if cell["metric"] in RANKGATE_KEYS
            }
            result = report["results"][0]
            step.report = {
                "read": report.get("read"),
                "rows": result.get("scored"),
                "design": result.get("design"),
                "baseline_queries": cells[0]["baseline_queries"] if cells else None,
                "candidate_queries": cells[0]["candidate_queries"] if cells else None,
                "regressions": report.get("regressions"),
            }
        else:
            step.report = json.loads(last)
            step.means = step.report.get("means")
    except (ValueError, KeyError) as problem:
        step.status = f"failed (unreadable output: {problem})"
        return
    step.status = "ok"


def describe(step: Step) -> str:
    if not step.ok:
        return step.status
    return f"{step.wall:.1f} s, {step.peak_gb:.2f} GB"


# ---------------------------------------------------------------------------------------------
# Agreement, table, environment


def counted(step: Step) -> int | None:
    """Queries the run read (floor) or scored (the others), as it reported them."""
    if step.tool == "rankgate":
        summary = step.report.get("summary") or {}
        return summary.get("scored")
    return step.report.get("rows")


def compare(steps: list[Step], queries: int) -> list[str]:
    """DISAGREE lines for every run that did not read or score all the queries, and for every
    mean that differs from the reference run's by more than the tolerance (relative); the
    reference is rankgate on the JSONL when it ran."""
    problems = [
        f"DISAGREE queries: {step.key} counted {counted(step)!r} of {queries}"
        for step in steps
        if step.ok and counted(step) != queries
    ]
    scored = [(step, step.means) for step in steps if step.ok and step.means is not None]
    if len(scored) < 2:
        return problems
    reference, expected = scored[0]
    for step, means in scored[1:]:
        for metric in METRICS:
            want = expected.get(metric)
            got = means.get(metric)
            if want is None or got is None:
                problems.append(f"DISAGREE {metric}: missing from {reference.key} or {step.key}")
                continue
            if abs(got - want) > TOLERANCE * max(abs(want), abs(got), 1e-12):
                problems.append(
                    f"DISAGREE {metric}: {reference.key} {want!r} vs {step.key} {got!r}"
                )
    return problems


def largest_difference(steps: list[Step]) -> float:
    scored = [step.means for step in steps if step.ok and step.means is not None]
    worst = 0.0
    for metric in METRICS:
        values = [means[metric] for means in scored if metric in means]
        if len(values) > 1:
            top = max(abs(v) for v in values) or 1.0
            worst = max(worst, (max(values) - min(values)) / top)
    return worst


def package_version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"


def environment() -> dict[str, Any]:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        usable: int | None = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        usable = os.cpu_count()
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": platform.machine(),
        "cpu": model,
        "cpus": usable,
        "memory_gb": round(total_memory() / 1e9, 1),
        "python": platform.python_version(),
        "versions": {
            name: package_version(name)
            for name in ("rankgate", "pyarrow", "numpy", "ranx", "numba", "pytrec-eval-terrier")
        },
    }


def total_memory() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 32 * 1024**3


def seconds(step: Step | None) -> float | None:
    """Wall time of a run that finished well, else None."""
    return step.wall if step is not None and step.ok else None


def exact_ratio(numerator: Step | None, denominator: Step | None) -> float | None:
    top, bottom = seconds(numerator), seconds(denominator)
    return None if top is None or not bottom else round(top / bottom, 4)


def ratio(numerator: Step | None, denominator: Step | None) -> str:
    value = exact_ratio(numerator, denominator)
    return "" if value is None else f"{value:.2f}"


def fastest(steps: list[Step]) -> Step | None:
    done = [step for step in steps if seconds(step) is not None]
    return min(done, key=lambda step: seconds(step) or 0.0) if done else None


def render(
    args: argparse.Namespace, env: dict[str, Any], steps: dict[str, Step], sizes: dict[str, int]
) -> tuple[str, dict[str, object]]:
    """The Markdown table with its notes, and the same figures as a dict for --json."""
    floors = {
        "JSONL": fastest([s for k, s in steps.items() if k in ("read_json", "open_json")]),
        "Parquet": fastest([s for k, s in steps.items() if k in ("read_table", "iter_batches")]),
    }
    rankgate = {"JSONL": steps.get("rankgate_jsonl"), "Parquet": steps.get("rankgate_parquet")}
    ranx_runs = [steps[k] for k in ("ranx_arrays", "ranx_dict") if k in steps]
    ranx = fastest(ranx_runs) or (ranx_runs[0] if ranx_runs else None)

    names = {
        "read_json": "floor: pyarrow.json.read_json",
        "open_json": "floor: pyarrow.json.open_json (streamed)",
        "read_table": "floor: pyarrow.parquet.read_table",
        "iter_batches": "floor: ParquetFile.iter_batches (streamed)",
        "rankgate_jsonl": "**rankgate eval**",
        "rankgate_parquet": "**rankgate eval**",
        "pytrec_eval": "pytrec_eval",
        "ranx_arrays": "ranx (kernels fed arrays)",
        "ranx_dict": "ranx (Qrels/Run.from_dict)",
    }
    order = ["read_json", "open_json", "rankgate_jsonl", "pytrec_eval"]
    if ranx is not None:
        order.append(ranx.key)
    order += ["read_table", "iter_batches", "rankgate_parquet"]

    lines = [
        f"{args.queries:,} queries x {args.depth} retrieved IDs (seed {args.seed}); "
        f"JSONL {sizes['JSONL'] / 1e9:.2f} GB, Parquet {sizes['Parquet'] / 1e9:.2f} GB.",
        "",
        "| tool | input | wall (s) | peak RSS (GB) | time / rankgate's | time / floor's |",
        "|---|---|--:|--:|--:|--:|",
    ]
    for key in order:
        step = steps.get(key)
        if step is None:
            continue
        name = names[key]
        if step is floors[step.source]:
            name += " (floor)"
        if step.ok:
            wall, peak = f"{step.wall:.1f}", f"{step.peak_gb:.2f}"
        else:
            wall, peak = step.status, ""
        versus_rankgate = "" if step.tool == "rankgate" else ratio(step, rankgate[step.source])
        versus_floor = ratio(step, floors[step.source]) if step.tool == "rankgate" else ""
        lines.append(
            f"| {name} | {step.source} | {wall} | {peak} | {versus_rankgate} | {versus_floor} |"
        )

    notes = [
        "Each tool ran in a child process of its own, the files already in the page cache. Wall "
        "time is measured around the whole child (interpreter start and imports included); peak "
        "RSS is that child's ru_maxrss as returned by wait4 (GB = 10^9 bytes)."
        + (f" Each figure is the fastest of {args.repeat} runs." if args.repeat > 1 else ""),
        "Metrics: ndcg_cut@10 (linear gain, trec_eval's), precision@10, recall@100, map, mrr; "
        "rankgate ran `rankgate eval FILE "
        + " ".join(f"--metric {m}" for m in METRICS)
        + " --format json --no-progress --no-config` (its default 1000 bootstrap resamples "
        "per interval included).",
        "Floor on JSONL: pyarrow's JSON reader cannot read an object into a map column "
        "(explicit map<string, int64> raises ArrowNotImplementedError) and infers one as a struct "
        "with a field per distinct document ID, so the floor reads query_id, retrieved_ids, "
        "relevant_ids and query_type with an explicit schema and skips relevance_scores "
        "(unexpected_field_behavior='ignore'): it reads less than the tools do. On Parquet it "
        "reads every column, map included.",
    ]
    parser = next(
        (str(s.report.get("parser")) for s in steps.values() if s.ok and s.report.get("parser")),
        "orjson or json",
    )
    if "pytrec_eval" in steps:
        notes.append(
            f"pytrec_eval: lines parsed with {parser} into {{qid: {{doc: grade}}}} and "
            "{qid: {doc: score}} (score falling with the rank), RelevanceEvaluator over "
            "ndcg_cut.10, P.10, recall.100, map, recip_rank; means over queries in Python."
        )
    if ranx is not None:
        text = [
            f"ranx: the row is the faster of the paths that ran, each parsing lines with {parser} "
            "and timed from process start: (a) ranx's kernels fed its typed lists of "
            "[document hash, score] arrays built per block of 65,536 lines with numpy, then "
            "ranx.evaluate(); (b) Qrels.from_dict / Run.from_dict from nested dicts, then "
            "evaluate()."
        ]
        for step in ranx_runs:
            label = "(a)" if step.key == "ranx_arrays" else "(b)"
            detail = describe(step)
            if step.ok and step.report.get("warm_up_s") is not None:
                detail += f", of which {step.report['warm_up_s']:.1f} s numba warm-up"
            phases = step.report.get("phases") if step.ok else None
            if isinstance(phases, dict):
                detail += "; " + ", ".join(f"{k} {v:.1f} s" for k, v in phases.items())
            text.append(f"{label}: {detail}.")
        text.append(
            "The warm-up, a tiny evaluation run first and counted in the wall time, is numba "
            "compiling ranx's kernels (the first time ever) or loading them from its cache."
        )
        notes.append(" ".join(text))
    if any(step.capped for step in steps.values()):
        notes.append(
            f"pytrec_eval and ranx ran with their address space capped at "
            f"{args.memory_cap_gb:g} GB (RLIMIT_AS) and every run with a {args.timeout:g} s "
            "timeout."
        )
    scored = [(s, s.means) for s in steps.values() if s.ok and s.means is not None]
    if scored:
        first, values = scored[0]
        means = ", ".join(f"{m} {values[m]:.6f}" for m in METRICS if m in values)
        spread = largest_difference(list(steps.values()))
        notes.append(
            f"Means ({first.key}): {means}. Largest relative difference between the {len(scored)} "
            f"runs that computed them: {spread:.1e} (tolerance {TOLERANCE:g})."
        )
    versions: dict[str, str] = env["versions"]
    notes.append(
        f"{env['date']}; {env['machine']}, {env['cpus']} CPUs ({env['cpu']}), "
        f"{env['memory_gb']} GB RAM; Python {env['python']}; "
        + ", ".join(f"{k} {v}" for k, v in versions.items())
        + "."
    )
    lines.append("")
    lines += [f"{number}. {note}" for number, note in enumerate(notes, start=1)]

    figures: dict[str, object] = {
        "parameters": {
            "queries": args.queries,
            "depth": args.depth,
            "seed": args.seed,
            "repeat": args.repeat,
        },
        "files": {"jsonl_bytes": sizes["JSONL"], "parquet_bytes": sizes["Parquet"]},
        "environment": env,
        "floor": {source: step.key if step else None for source, step in floors.items()},
        "ranx": ranx.key if ranx else None,
        "runs": {
            step.key: {
                "tool": step.tool,
                "input": step.source,
                "status": step.status,
                "wall_s": round(step.wall, 3) if step.wall is not None else None,
                "peak_rss_gb": round(step.peak_gb, 3) if step.peak_gb is not None else None,
                "cpu_s": step.cpu_s,
                "machine_cpu_s": step.machine_cpu_s,
                "time_vs_rankgate": exact_ratio(step, rankgate[step.source])
                if step.tool != "rankgate"
                else None,
                "time_vs_floor": exact_ratio(step, floors[step.source])
                if step.tool == "rankgate"
                else None,
                "means": step.means,
                "detail": step.report,
                "command": step.argv,
            }
            for step in steps.values()
        },
    }
    return "\n".join(lines), figures


# ---------------------------------------------------------------------------------------------


STEP_GROUPS = {
    "floor": ("read_json", "open_json", "read_table", "iter_batches"),
    "rankgate": ("rankgate_jsonl", "rankgate_parquet"),
    "pytrec_eval": ("pytrec_eval",),
    "ranx": ("ranx_arrays", "ranx_dict"),
    "ranx_arrays": ("ranx_arrays",),
    "ranx_dict": ("ranx_dict",),
}


def plan(jsonl: Path, parquet: Path, skipped: set[str]) -> list[Step]:
    python = sys.executable
    rankgate_flags = [flag for metric in METRICS for flag in ("--metric", metric)]
    rankgate_flags += ["--format", "json", "--no-progress", "--no-config"]

    def peer(key: str, tool: str, source: str, path: Path) -> Step:
        capped = tool in ("pytrec_eval", "ranx")
        return Step(key, tool, source, [python, str(PEERS), key, str(path)], capped=capped)

    steps = [
        peer("read_json", "floor", "JSONL", jsonl),
        peer("open_json", "floor", "JSONL", jsonl),
        Step(
            "rankgate_jsonl",
            "rankgate",
            "JSONL",
            [*rankgate_command(), "eval", str(jsonl), *rankgate_flags],
            capped=False,
        ),
        peer("pytrec_eval", "pytrec_eval", "JSONL", jsonl),
        peer("ranx_arrays", "ranx", "JSONL", jsonl),
        peer("ranx_dict", "ranx", "JSONL", jsonl),
        peer("read_table", "floor", "Parquet", parquet),
        peer("iter_batches", "floor", "Parquet", parquet),
        Step(
            "rankgate_parquet",
            "rankgate",
            "Parquet",
            [*rankgate_command(), "eval", str(parquet), *rankgate_flags],
            capped=False,
        ),
    ]
    dropped = {key for name in skipped for key in STEP_GROUPS[name]}
    return [step for step in steps if step.key not in dropped]


def warm_cache(paths: list[Path]) -> None:
    """Read the files once so the first tool does not pay for the disk and the others not."""
    for path in paths:
        with open(path, "rb", buffering=0) as stream:
            while stream.read(16 << 20):
                pass


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=1_000_000)
    parser.add_argument("--depth", type=int, default=100, help="retrieved IDs per query")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--workdir", type=Path, default=Path("build/bench"))
    parser.add_argument("--skip-peers", action="store_true", help="skip pytrec_eval and ranx")
    parser.add_argument(
        "--skip", default="", help=f"comma-separated steps to skip: {', '.join(STEP_GROUPS)}"
    )
    parser.add_argument(
        "--keep-data",
        action="store_true",
        help="keep trace files this run generated (files found in place are always kept)",
    )
    parser.add_argument("--json", type=Path, metavar="OUT", help="also write the figures here")
    parser.add_argument(
        "--timeout", type=float, default=1800, help="seconds before a run is killed"
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        metavar="N",
        help="run every step N times and keep the fastest (for a machine with other load)",
    )
    parser.add_argument(
        "--memory-cap-gb",
        type=float,
        default=min(20.0, 0.85 * total_memory() / 1e9),
        help="address-space cap of the peer runs (default 20, or 85%% of RAM when less)",
    )
    args = parser.parse_args()
    if args.queries < 1 or args.repeat < 1:
        parser.error("--queries and --repeat must be positive")
    if not MAX_LABELED < args.depth <= 1000:
        parser.error(f"--depth must be between {MAX_LABELED + 1} and 1000")
    skipped = {name.strip() for name in args.skip.split(",") if name.strip()}
    unknown = skipped - set(STEP_GROUPS)
    if unknown:
        parser.error(
            f"--skip: unknown {', '.join(sorted(unknown))}; known: {', '.join(STEP_GROUPS)}"
        )
    if args.skip_peers:
        skipped |= {"pytrec_eval", "ranx"}

    jsonl, parquet, made = generate(args.workdir, args.queries, args.depth, args.seed)
    sizes = {"JSONL": jsonl.stat().st_size, "Parquet": parquet.stat().st_size}
    logs = args.workdir / f"logs-{args.queries}"
    logs.mkdir(parents=True, exist_ok=True)
    try:
        progress("reading both files once to warm the page cache")
        warm_cache([jsonl, parquet])
        steps = plan(jsonl, parquet, skipped)
        cap = int(args.memory_cap_gb * 1e9)
        for number, step in enumerate(steps, start=1):
            progress(f"({number}/{len(steps)}) {step.key}: {' '.join(step.argv[-2:])}")
            run_step(step, logs, args.timeout, cap)
            progress(f"  {describe(step)}")
            for _ in range(args.repeat - 1):
                if not step.ok:
                    break
                again = Step(step.key, step.tool, step.source, step.argv, capped=step.capped)
                run_step(again, logs, args.timeout, cap)
                progress(f"  again: {describe(again)}")
                if not again.ok:
                    step.status, step.means = again.status, None
                elif (again.wall or 0.0) < (step.wall or 0.0):
                    steps[number - 1] = step = again
    finally:
        if made and not args.keep_data:
            for path in (jsonl, parquet, jsonl.with_name(f"traces-{args.queries}.params.json")):
                path.unlink(missing_ok=True)
            progress("removed the generated trace files (--keep-data keeps them)")

    by_key = {step.key: step for step in steps}
    table, figures = render(args, environment(), by_key, sizes)
    problems = compare(steps, args.queries)
    failures = [
        step
        for step in steps
        if not step.ok
        and step.status not in ("out of memory",)
        and not step.status.startswith("timeout")
    ]
    figures["agree"] = not problems
    figures["disagreements"] = problems
    print(table)
    for line in problems:
        print(line)
    for step in failures:
        print(f"FAILED {step.key}: {step.status} (logs in {logs})")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(figures, indent=2, default=str) + "\n")
        progress(f"wrote {args.json}")
    if problems:
        return 1
    return 2 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
