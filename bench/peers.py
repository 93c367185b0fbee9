"""Child processes of ``bench/throughput.py``: one run of one tool, then its figures as JSON on the
last line of stdout.

    python bench/peers.py RUNNER FILE
    python bench/peers.py measure RESULT.json COMMAND...

Runners: ``read_json``, ``open_json`` (pyarrow on the JSONL), ``read_table``, ``iter_batches``
(pyarrow on the Parquet file), ``pytrec_eval``, ``ranx_dict`` and ``ranx_arrays`` (on the JSONL).
The last line is ``{"rows": ..., "means": {...} | null, "phases": {name: seconds}, ...}``; when
the environment variable ``BENCH_MEMORY_CAP`` is set (bytes), the address space is capped there
first, and running out of it prints ``{"error": "out of memory"}`` and exits 3.

The metric names in ``means`` are throughput.py's: ndcg_cut@10 (linear gain, as trec_eval),
precision@10, recall@100, map, mrr.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

OUT_OF_MEMORY = 3

try:  # the fastest JSON parser at hand; the report says which one ran
    import orjson

    PARSER = "orjson"
    loads: Callable[[bytes], Any] = orjson.loads
except ImportError:  # pragma: no cover - depends on the environment
    PARSER = "json"
    loads = json.loads

# The pyarrow JSON reader cannot turn an object into a map column, so the floor leaves
# relevance_scores out and reads the other fields with their types given.
FLOOR_FIELDS = ("query_id", "retrieved_ids", "relevant_ids", "query_type")
TREC_MEASURES = {"ndcg_cut.10", "P.10", "recall.100", "map", "recip_rank"}
TREC_KEYS = {
    "ndcg_cut_10": "ndcg_cut@10",
    "P_10": "precision@10",
    "recall_100": "recall@100",
    "map": "map",
    "recip_rank": "mrr",
}
# ranx's ndcg is Järvelin's (linear gain), which is trec_eval's ndcg_cut.
RANX_KEYS = {
    "ndcg@10": "ndcg_cut@10",
    "precision@10": "precision@10",
    "recall@100": "recall@100",
    "map": "map",
    "mrr": "mrr",
}
LINES_PER_BLOCK = 65_536


class Phases:
    """Wall time of the named steps of a run."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._mark = time.perf_counter()

    def done(self, name: str) -> None:
        now = time.perf_counter()
        self.seconds[name] = round(self.seconds.get(name, 0.0) + now - self._mark, 4)
        self._mark = now


def records(path: str) -> Iterator[dict[str, Any]]:
    with open(path, "rb") as stream:
        for line in stream:
            if line.strip():
                yield loads(line)


def grades_of(record: dict[str, Any]) -> dict[str, int]:
    """The record's labels as {doc: grade}: relevance_scores, plus grade 1 for any relevant_ids
    entry it does not grade (the trace format's rule)."""
    grades = record.get("relevance_scores") or {}
    for doc in record.get("relevant_ids") or ():
        grades.setdefault(doc, 1)
    return grades


# ---------------------------------------------------------------------------------------------
# The floor: pyarrow reading the file, nothing else


def floor_json_options() -> Any:
    import pyarrow as pa
    import pyarrow.json as pj

    schema = pa.schema(
        [
            ("query_id", pa.string()),
            ("retrieved_ids", pa.list_(pa.string())),
            ("relevant_ids", pa.list_(pa.string())),
            ("query_type", pa.string()),
        ]
    )
    return pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")


def run_read_json(path: str) -> dict[str, Any]:
    import pyarrow.json as pj

    phases = Phases()
    table = pj.read_json(path, parse_options=floor_json_options())
    phases.done("read")
    return {"rows": table.num_rows, "phases": phases.seconds}


def run_open_json(path: str) -> dict[str, Any]:
    import pyarrow.json as pj

    phases = Phases()
    rows = 0
    for batch in pj.open_json(path, parse_options=floor_json_options()):
        rows += batch.num_rows
    phases.done("read")
    return {"rows": rows, "phases": phases.seconds}


def run_read_table(path: str) -> dict[str, Any]:
    import pyarrow.parquet as pq

    phases = Phases()
    table = pq.read_table(path)
    phases.done("read")
    return {"rows": table.num_rows, "phases": phases.seconds}


def run_iter_batches(path: str) -> dict[str, Any]:
    import pyarrow.parquet as pq

    phases = Phases()
    rows = 0
    for batch in pq.ParquetFile(path).iter_batches(batch_size=LINES_PER_BLOCK):
        rows += batch.num_rows
    phases.done("read")
    return {"rows": rows, "phases": phases.seconds}


# ---------------------------------------------------------------------------------------------
# pytrec_eval: trec_eval's C code behind nested dicts


def trec_dicts(path: str) -> tuple[dict[str, dict[str, int]], dict[str, dict[str, int]]]:
    """{qid: {doc: grade}} and {qid: {doc: score}}, with scores falling strictly with the rank
    (trec_eval ranks by score, so the order it sees is the order served)."""
    qrels: dict[str, dict[str, int]] = {}
    run: dict[str, dict[str, int]] = {}
    for record in records(path):
        grades = grades_of(record)
        if not grades:  # unlabeled: rankgate does not score it either
            continue
        qid = record["query_id"]
        ranking = record["retrieved_ids"]
        qrels[qid] = grades
        run[qid] = dict(zip(ranking, range(len(ranking), 0, -1), strict=True))
    return qrels, run


def run_pytrec_eval(path: str) -> dict[str, Any]:
    import pytrec_eval

    phases = Phases()
    qrels, run = trec_dicts(path)
    phases.done("read")
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, TREC_MEASURES)
    results = evaluator.evaluate(run)
    phases.done("evaluate")
    sums = dict.fromkeys(TREC_KEYS, 0.0)
    for values in results.values():
        for key in sums:
            sums[key] += values[key]
    means = {TREC_KEYS[key]: total / len(results) for key, total in sums.items()}
    phases.done("means")
    return {"rows": len(results), "means": means, "phases": phases.seconds, "parser": PARSER}


# ---------------------------------------------------------------------------------------------
# ranx: numba kernels over per-query arrays of [document, score] rows, best first


def ranx_warm_up() -> float:
    """One tiny evaluation, so numba's compilation (or loading of its cache) is timed apart."""
    from ranx import Qrels, Run, evaluate  # type: ignore[import-untyped]

    started = time.perf_counter()
    qrels = Qrels.from_dict({"q1": {"a": 2, "b": 0}, "q2": {"c": 1}})
    run = Run.from_dict({"q1": {"a": 2.0, "c": 1.0}, "q2": {"b": 2.0, "c": 1.0}})
    evaluate(qrels, run, list(RANX_KEYS))
    return time.perf_counter() - started


def run_ranx_dict(path: str) -> dict[str, Any]:
    """ranx as documented: Qrels and Run from nested dicts, then evaluate()."""
    from ranx import Qrels, Run, evaluate

    warm_up = ranx_warm_up()
    phases = Phases()
    qrels_dict, run_dict = trec_dicts(path)
    phases.done("read")
    qrels = Qrels.from_dict(qrels_dict)
    del qrels_dict
    run = Run.from_dict(run_dict)
    del run_dict
    phases.done("convert")
    means = evaluate(qrels, run, list(RANX_KEYS), save_results_in_run=False)
    phases.done("evaluate")
    return {
        "rows": len(qrels),
        "means": {RANX_KEYS[key]: float(value) for key, value in means.items()},
        "phases": phases.seconds,
        "warm_up_s": round(warm_up, 3),
        "parser": PARSER,
    }


def array_builders() -> tuple[Callable[..., None], Any]:
    from numba import njit, types

    @njit(cache=True)
    def append_rows(out: Any, flat: Any, offsets: Any) -> None:  # pragma: no cover - compiled
        # Views of one block's rows, one per query, as ranx's typed lists hold them.
        for i in range(len(offsets) - 1):
            out.append(flat[offsets[i] : offsets[i + 1]])

    return append_rows, types.float64[:, ::1]


class RanxArrays:
    """The typed lists ranx's evaluate() builds from Qrels and Run (one float64 array per query:
    column 0 the document, column 1 its grade or score, sorted by it, descending), made from
    blocks of parsed lines with vectorised numpy instead of a dict and an array per query."""

    def __init__(self) -> None:
        from numba.typed import List

        self.append_rows, row_type = array_builders()
        self.qrels = List.empty_list(row_type)
        self.run = List.empty_list(row_type)

    def add_block(
        self,
        ranked: list[str],
        ranked_lengths: list[int],
        labeled: list[str],
        grades: list[int],
        labeled_lengths: list[int],
    ) -> None:
        import numpy as np

        # Documents as Python's string hash, cast to float64, as ranx's own conversion does (a
        # collision inside one query's ~115 IDs is about as likely as winning the lottery twice).
        count = len(ranked)
        run_codes = np.fromiter(map(hash, ranked), dtype=np.int64, count=count)
        label_codes = np.fromiter(map(hash, labeled), dtype=np.int64, count=len(labeled))

        lengths = np.asarray(ranked_lengths, dtype=np.int64)
        offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        run = np.empty((count, 2), dtype=np.float64)
        run[:, 0] = run_codes
        # Score = documents left from this rank on: strictly falling, so ranked order holds.
        run[:, 1] = np.repeat(offsets[1:], lengths) - np.arange(count)
        self.append_rows(self.run, run, offsets)

        lengths = np.asarray(labeled_lengths, dtype=np.int64)
        offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        grade = np.asarray(grades, dtype=np.float64)
        query = np.repeat(np.arange(len(lengths)), lengths)
        order = np.lexsort((-grade, query))  # by query, then grade descending
        qrels = np.empty((len(grade), 2), dtype=np.float64)
        qrels[:, 0] = label_codes[order]
        qrels[:, 1] = grade[order]
        self.append_rows(self.qrels, qrels, offsets)


def ranx_arrays_warm_up() -> float:
    from ranx import evaluate

    started = time.perf_counter()
    ranx_warm_up()

    arrays = RanxArrays()
    arrays.add_block(["a", "b", "c"], [2, 1], ["a", "c"], [1, 2], [1, 1])
    evaluate(arrays.qrels, arrays.run, list(RANX_KEYS), save_results_in_run=False)
    return time.perf_counter() - started


def run_ranx_arrays(path: str) -> dict[str, Any]:
    """ranx's kernels fed the typed lists directly: parse, code the IDs per block, evaluate()."""
    from ranx import evaluate

    warm_up = ranx_arrays_warm_up()
    phases = Phases()
    arrays = RanxArrays()
    ranked: list[str] = []
    ranked_lengths: list[int] = []
    labeled: list[str] = []
    grades: list[int] = []
    labeled_lengths: list[int] = []
    queries = 0
    for record in records(path):
        labels = grades_of(record)
        if not labels:  # unlabeled: rankgate does not score it either
            continue
        ranking = record["retrieved_ids"]
        ranked += ranking
        ranked_lengths.append(len(ranking))
        labeled += labels.keys()
        grades += labels.values()
        labeled_lengths.append(len(labels))
        if len(ranked_lengths) == LINES_PER_BLOCK:
            arrays.add_block(ranked, ranked_lengths, labeled, grades, labeled_lengths)
            queries += len(ranked_lengths)
            ranked, ranked_lengths, labeled, grades, labeled_lengths = [], [], [], [], []
    if ranked_lengths:
        arrays.add_block(ranked, ranked_lengths, labeled, grades, labeled_lengths)
        queries += len(ranked_lengths)
    del ranked, labeled, grades
    phases.done("read+convert")
    means = evaluate(arrays.qrels, arrays.run, list(RANX_KEYS), save_results_in_run=False)
    phases.done("evaluate")
    return {
        "rows": queries,
        "means": {RANX_KEYS[key]: float(value) for key, value in means.items()},
        "phases": phases.seconds,
        "warm_up_s": round(warm_up, 3),
        "parser": PARSER,
    }


RUNNERS: dict[str, Callable[[str], dict[str, Any]]] = {
    "read_json": run_read_json,
    "open_json": run_open_json,
    "read_table": run_read_table,
    "iter_batches": run_iter_batches,
    "pytrec_eval": run_pytrec_eval,
    "ranx_dict": run_ranx_dict,
    "ranx_arrays": run_ranx_arrays,
}


def machine_busy_seconds() -> float | None:
    """CPU time the whole machine has spent busy since boot (every core, every process: a
    database server's too), from /proc/stat; None where there is no such file."""
    try:
        with open("/proc/stat") as stat:
            fields = stat.readline().split()
        ticks = os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError):
        return None
    # cpu  user nice system idle iowait irq softirq steal ...: idle and iowait are not busy.
    values = [int(value) for value in fields[1:9]]
    return (sum(values) - values[3] - values[4]) / ticks


def measure(result_path: str, command: list[str]) -> int:
    """Run ``command`` as a child of this small process and write its wall time, peak RSS and CPU
    time to ``result_path``, with the whole machine's busy CPU time over the same span (a store's
    server does its part of the work in processes of its own).

    The benchmark starts every run through here because a child's ru_maxrss also counts the
    memory of the process that forked it, up to the exec: forked straight from throughput.py,
    every tool would be charged that process's peak. Forked from this one, the overcount is
    this interpreter's few megabytes.
    """
    import subprocess

    busy_before = machine_busy_seconds()
    started = time.perf_counter()
    child = subprocess.Popen(command)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - started
    busy_after = machine_busy_seconds()
    code = os.waitstatus_to_exitcode(status)
    machine = None
    if busy_before is not None and busy_after is not None:
        machine = busy_after - busy_before
    figures = {
        "wall_s": wall,
        "maxrss_kb": usage.ru_maxrss,
        "exit": code,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "machine_cpu_s": machine,
    }
    with open(result_path, "w") as out:
        json.dump(figures, out)
    return code if code >= 0 else 128 - code


def main() -> None:
    if len(sys.argv) > 3 and sys.argv[1] == "measure":
        sys.exit(measure(sys.argv[2], sys.argv[3:]))
    if len(sys.argv) != 3 or sys.argv[1] not in RUNNERS:
        raise SystemExit(f"usage: peers.py {{{','.join(RUNNERS)}}} FILE | measure OUT COMMAND...")
    cap = os.environ.get("BENCH_MEMORY_CAP")
    if cap:
        resource.setrlimit(resource.RLIMIT_AS, (int(cap), int(cap)))
    try:
        report = RUNNERS[sys.argv[1]](sys.argv[2])
    except MemoryError:
        print(json.dumps({"error": "out of memory"}), flush=True)
        os._exit(OUT_OF_MEMORY)  # unwinding may need memory that is not there
    report["peak_rss_kb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
