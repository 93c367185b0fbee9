"""Every crash the hardening probe saw (issue 15), driven through the command line as a user runs it.

Exit 1 is a verdict ("a gate failed", "a regression"): a CI job acts on it, so a crash must never
produce it. Each case here once ended in a Python traceback and exit 1. A known failure must be one
line on stderr and exit 2; an unexpected exception one "internal error" line and exit 3, with the
traceback only under ``RANKGATE_DEBUG=1``.

Every run is a real ``python -m rankgate`` subprocess with a timeout, so a hang, a signal or a
traceback printed by the interpreter itself is seen exactly as a CI job would see it.
"""

from __future__ import annotations

import gzip
import json
import os
import resource
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

TOKEN = "crash-case-token-0123456789"
GOOD = {"query_id": "q1", "retrieved_ids": ["a", "b"], "relevant_ids": ["a"]}
NESTING = 1_500  # the probe's depth: far past Python's recursion limit for json


@dataclass(frozen=True)
class Run:
    code: int
    out: str
    err: str


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RANKGATE_")}
    env.update({"NO_COLOR": "1", "PYTHONDONTWRITEBYTECODE": "1"})
    env.update(extra)
    return env


def run(
    args: Sequence[str | Path],
    *,
    cwd: Path,
    prefix: Sequence[str] = (),
    stdin: Any = subprocess.DEVNULL,
    env: dict[str, str] | None = None,
    preexec_fn: Callable[[], None] | None = None,
    timeout: float = 120,
) -> Run:
    """``python -m rankgate ARGS``; a hang is a test failure, not a stuck suite."""
    command = [*prefix, sys.executable, "-m", "rankgate", *map(str, args)]
    try:
        proc = subprocess.run(
            command,
            cwd=cwd,
            stdin=stdin,
            capture_output=True,
            env=env or _env(),
            timeout=timeout,
            preexec_fn=preexec_fn,
        )
    except subprocess.TimeoutExpired as hung:
        pytest.fail(f"rankgate {' '.join(map(str, args))} still running after {hung.timeout} s")
    return Run(
        proc.returncode,
        proc.stdout.decode("utf-8", "replace"),
        proc.stderr.decode("utf-8", "replace"),
    )


def assert_one_line_error(result: Run, *fragments: str, code: int = 2) -> str:
    """Exit ``code``, no traceback, exactly one non-empty line on stderr holding every fragment."""
    assert result.code >= 0, f"killed by signal {-result.code}; stderr:\n{result.err[-2000:]}"
    assert result.code == code, f"exit {result.code}, stderr:\n{result.err[-3000:]}"
    assert "Traceback" not in result.err, result.err[-3000:]
    lines = result.err.strip().splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got {len(lines)}:\n{result.err[-3000:]}"
    line = lines[0]
    assert line.strip(), "the one line on stderr is blank"
    for fragment in fragments:
        assert fragment in line, f"{fragment!r} not in {line!r}"
    return line


def write_jsonl(path: Path, records: Sequence[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


# --- JSON nested 1,500 deep ------------------------------------------------------------------


def _deep_ranking() -> str:
    return '{"query_id":"q","retrieved_ids":' + "[" * NESTING + "]" * NESTING + "}"


def _deep_grades() -> str:
    inner = '{"x":' * NESTING + "1" + "}" * NESTING
    return '{"query_id":"q","retrieved_ids":["a"],"relevance_scores":{"a":' + inner + "}}"


@pytest.mark.parametrize("record", [_deep_ranking(), _deep_grades()], ids=["ranking", "grades"])
def test_json_lines_nested_1500_deep_is_a_located_refusal(tmp_path: Path, record: str) -> None:
    path = tmp_path / "deep.jsonl"
    path.write_text(json.dumps(GOOD) + "\n" + record + "\n", encoding="utf-8")
    # Line 2: the good record before it must not hide where the bad one is.
    result = run(["eval", path.name, "--no-config"], cwd=tmp_path)
    assert_one_line_error(result, "deep.jsonl:2")


@pytest.mark.parametrize("record", [_deep_ranking(), _deep_grades()], ids=["ranking", "grades"])
def test_json_array_nested_1500_deep_is_a_refusal(tmp_path: Path, record: str) -> None:
    path = tmp_path / "deep.json"
    path.write_text("[" + json.dumps(GOOD) + "," + record + "]", encoding="utf-8")
    assert_one_line_error(run(["eval", path.name, "--no-config"], cwd=tmp_path), "deep.json")


def test_nesting_on_stdin_is_a_refusal(tmp_path: Path) -> None:
    data = (_deep_ranking() + "\n").encode()
    with tempfile.TemporaryFile() as stdin:
        stdin.write(data)
        stdin.seek(0)
        result = run(["eval", "-", "--no-config"], cwd=tmp_path, stdin=stdin)
    assert_one_line_error(result, "stdin")


def test_nesting_is_skipped_and_counted_under_on_invalid_skip(tmp_path: Path) -> None:
    """One record past the nesting bound is one bad record: skip mode counts it and goes on."""
    path = tmp_path / "deep.jsonl"
    path.write_text(
        "\n".join([json.dumps(GOOD), _deep_ranking(), _deep_grades(), json.dumps(GOOD)]) + "\n",
        encoding="utf-8",
    )
    result = run(
        [
            "eval",
            path.name,
            "--no-config",
            "--on-invalid",
            "skip",
            "--format",
            "json",
            "-o",
            "r.json",
        ],
        cwd=tmp_path,
    )
    assert result.code == 0, result.err[-3000:]
    assert "Traceback" not in result.err
    summary = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))["summary"]
    assert summary["read"] == 4
    assert summary["scored"] == 2
    assert summary["skipped"]["invalid"] == 2


# --- unreadable files ------------------------------------------------------------------------


def _can_run_as_nobody(folder: Path) -> str | None:
    """None when ``nobody`` can run this interpreter and import rankgate; else why not."""
    if shutil.which("setpriv") is None:
        return "setpriv is not installed, and root reads chmod-000 files anyway"
    probe = subprocess.run(
        [*_AS_NOBODY, sys.executable, "-c", "import rankgate.cli"],
        cwd=folder,
        capture_output=True,
        env=_env(HOME=str(folder)),
        timeout=60,
    )
    if probe.returncode != 0:
        return "user nobody cannot run this venv's python: " + probe.stderr.decode()[-300:]
    return None


_AS_NOBODY = ("setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups")


@pytest.fixture
def shared_folder() -> Iterator[Path]:
    """A folder every user may enter: pytest's tmp_path sits under a root-only folder."""
    folder = Path(tempfile.mkdtemp(prefix="rankgate-unreadable-"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _unreadable_run(folder: Path, args: Sequence[str | Path]) -> Run:
    """Run as a user who cannot read the chmod-000 file: root reads it regardless of its mode."""
    prefix: tuple[str, ...] = ()
    if os.geteuid() == 0:
        reason = _can_run_as_nobody(folder)
        if reason is not None:
            pytest.skip(reason)
        prefix = _AS_NOBODY
    return run(args, cwd=folder, prefix=prefix, env=_env(HOME=str(folder)))


def _make(folder: Path, name: str, content: bytes, mode: int = 0o644) -> Path:
    path = folder / name
    path.write_bytes(content)
    path.chmod(mode)
    return path


_GOOD_LINE = (json.dumps(GOOD) + "\n").encode()


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("traces.jsonl", _GOOD_LINE),
        ("traces.csv", b'query_id,retrieved_ids,relevant_ids\nq1,"[""a""]","[""a""]"\n'),
        ("traces.jsonl.gz", gzip.compress(_GOOD_LINE)),
    ],
)
def test_an_unreadable_trace_file_is_one_line(
    shared_folder: Path, name: str, content: bytes
) -> None:
    _make(shared_folder, name, content, mode=0o000)
    result = _unreadable_run(shared_folder, ["eval", name, "--no-config"])
    assert_one_line_error(result, name)


def test_an_unreadable_labels_file_is_one_line(shared_folder: Path) -> None:
    _make(shared_folder, "traces.jsonl", b'{"query_id":"q1","retrieved_ids":["a"]}\n')
    _make(shared_folder, "labels.jsonl", b'{"query_id":"q1","relevant_ids":["a"]}\n', mode=0)
    result = _unreadable_run(
        shared_folder, ["eval", "traces.jsonl", "--labels", "labels.jsonl", "--no-config"]
    )
    assert_one_line_error(result, "labels.jsonl")


def test_an_unreadable_corpus_file_is_one_line(shared_folder: Path) -> None:
    _make(shared_folder, "traces.jsonl", _GOOD_LINE)
    _make(shared_folder, "corpus.txt", b"a\nb\n", mode=0)
    result = _unreadable_run(
        shared_folder, ["eval", "traces.jsonl", "--corpus", "corpus.txt", "--no-config"]
    )
    assert_one_line_error(result, "corpus.txt")


@pytest.mark.parametrize(
    "args",
    [
        ["eval", "traces.jsonl", "--no-config"],
        ["eval", "ok.jsonl", "--labels", "traces.jsonl", "--no-config"],
        ["eval", "ok.jsonl", "--corpus", "traces.jsonl", "--no-config"],
        ["trace", "import", "traces.jsonl", "--store", "sqlite:///s.db"],
    ],
    ids=["traces", "labels", "corpus", "trace-import"],
)
def test_a_folder_where_a_file_is_expected_is_one_line(tmp_path: Path, args: list[str]) -> None:
    (tmp_path / "traces.jsonl").mkdir()
    write_jsonl(tmp_path / "ok.jsonl", [GOOD])
    assert_one_line_error(run(args, cwd=tmp_path), "traces.jsonl")


# --- Parquet grade of 2**62 --------------------------------------------------------------------


def test_parquet_int64_grade_of_2_to_the_62_is_a_located_refusal(tmp_path: Path) -> None:
    grades = pa.array([[("a", 1)], [("a", 2**62), ("b", 1)]], type=pa.map_(pa.string(), pa.int64()))
    table = pa.table(
        {"query_id": ["q1", "q2"], "retrieved_ids": [["a"], ["a", "b"]], "relevance_scores": grades}
    )
    pq.write_table(table, tmp_path / "grades.parquet")
    result = run(["eval", "grades.parquet", "--no-config"], cwd=tmp_path)
    # The same grade in JSON Lines is refused naming the field; Parquet must say as much.
    assert_one_line_error(result, "grades.parquet", "relevance_scores")


# --- an absurd cutoff --------------------------------------------------------------------------


@pytest.mark.parametrize("metric", ["ndcg@99999999999999999999", "precision@1e400"])
def test_an_absurd_cutoff_is_a_usage_error(tmp_path: Path, metric: str) -> None:
    write_jsonl(tmp_path / "t.jsonl", [GOOD])
    result = run(["eval", "t.jsonl", "--no-config", "-m", metric], cwd=tmp_path)
    assert_one_line_error(result, metric.split("@")[1])


# --- stores with a broken schema table ---------------------------------------------------------


def _store(tmp_path: Path, name: str) -> Path:
    """A real store made by ``trace import``, so its layout is the current one."""
    write_jsonl(tmp_path / "seed.jsonl", [GOOD])
    made = run(["trace", "import", "seed.jsonl", "--store", f"sqlite:///{name}"], cwd=tmp_path)
    assert made.code == 0, made.err
    return tmp_path / name


def _rewrite_schema_versions(path: Path, versions: Sequence[Any]) -> None:
    with sqlite3.connect(path) as connection:
        connection.execute("DELETE FROM rankgate_schema")
        connection.executemany(
            "INSERT INTO rankgate_schema (version) VALUES (?)", [(v,) for v in versions]
        )
    connection.close()


STORE_COMMANDS = [
    ["eval", "sqlite:///{db}", "--no-config"],
    ["store", "info", "sqlite:///{db}"],
    ["trace", "import", "seed.jsonl", "--store", "sqlite:///{db}"],
]


@pytest.mark.parametrize("command", STORE_COMMANDS, ids=["eval", "store-info", "trace-import"])
@pytest.mark.parametrize("versions", [["two"], [1, 2], [1, 1], [1.5]], ids=repr)
def test_a_store_with_a_bad_schema_version_is_refused(
    tmp_path: Path, command: list[str], versions: list[Any]
) -> None:
    db = _store(tmp_path, "broken.db")
    _rewrite_schema_versions(db, versions)
    args = [part.format(db=db.name) for part in command]
    assert_one_line_error(run(args, cwd=tmp_path), "broken.db")


# --- trace import while another process holds the write lock -------------------------------------

_HOLD_LOCK = """
import sqlite3, sys, time
connection = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)
connection.execute("BEGIN IMMEDIATE")  # the write lock, as a busy writer holds it
print("locked", flush=True)
hold = float(sys.argv[2])
if hold < 0:
    sys.stdin.readline()  # until the test says so
else:
    time.sleep(hold)
connection.execute("ROLLBACK")
print("released", flush=True)
"""


def _hold_write_lock(path: Path, seconds: float) -> subprocess.Popen[str]:
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD_LOCK, str(path), str(seconds)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None
    assert holder.stdout.readline().strip() == "locked"
    return holder


def _let_go(holder: subprocess.Popen[str]) -> None:
    """Tell the holder to release (if it waits for that), then reap it and close its pipes."""
    assert holder.stdin is not None and holder.stdout is not None
    try:
        holder.stdin.write("\n")
        holder.stdin.close()
    except BrokenPipeError:
        pass  # it released on its own timer
    holder.wait(30)
    holder.stdout.close()


def _trace_count(path: Path) -> int:
    with sqlite3.connect(path) as connection:
        (count,) = connection.execute("SELECT COUNT(*) FROM rankgate_traces").fetchone()
    connection.close()
    return int(count)


def test_trace_import_under_a_lock_held_past_the_busy_timeout_is_one_line(tmp_path: Path) -> None:
    db = _store(tmp_path, "locked.db")
    write_jsonl(tmp_path / "more.jsonl", [{**GOOD, "query_id": "q2"}])
    holder = _hold_write_lock(db, -1)  # held until the import has given up
    try:
        result = run(
            ["trace", "import", "more.jsonl", "--store", "sqlite:///locked.db"],
            cwd=tmp_path,
            timeout=180,
        )
    finally:
        _let_go(holder)
    assert_one_line_error(result, "locked.db")
    assert _trace_count(db) == 1  # nothing half-written


def test_trace_import_waits_for_a_lock_released_in_time(tmp_path: Path) -> None:
    db = _store(tmp_path, "locked.db")
    write_jsonl(tmp_path / "more.jsonl", [{**GOOD, "query_id": "q2"}])
    holder = _hold_write_lock(db, 1.5)
    started = time.monotonic()
    try:
        result = run(
            ["trace", "import", "more.jsonl", "--store", "sqlite:///locked.db"], cwd=tmp_path
        )
    finally:
        _let_go(holder)
    assert result.code == 0, result.err[-3000:]
    assert "Traceback" not in result.err
    assert time.monotonic() - started >= 1.0  # it really met the lock
    assert _trace_count(db) == 2


# --- a corrupt monitor state file --------------------------------------------------------------

_STATE_DDL = (
    "CREATE TABLE rankgate_monitor_state "
    "(id INTEGER PRIMARY KEY CHECK (id = 1), saved_at REAL, state TEXT NOT NULL)"
)

CORRUPT_STATES = {
    "not-json": "{not json",
    "array": "[1, 2]",
    "short-bucket": '{"version": 1, "buckets": [[1, 2]]}',
    "counts-list": '{"version": 1, "counts": [1]}',
    "short-waiting": '{"version": 1, "waiting": [["q"]]}',
    "closed-through-text": '{"version": 1, "closed_through": "x"}',
    "values-number": '{"version": 1, "values": 7}',
    "nested-deep": '{"version": 1, "counts": ' + "[" * NESTING + "]" * NESTING + "}",
}


def _monitor_with_state(folder: Path, state: str) -> Run:
    return run(
        ["monitor", "--no-config", "--host", "127.0.0.1", "--port", "0", "--state", state],
        cwd=folder,
        env=_env(RANKGATE_MONITOR_TOKEN=TOKEN),
        timeout=60,
    )


@pytest.mark.parametrize("state", list(CORRUPT_STATES), ids=list(CORRUPT_STATES))
def test_monitor_refuses_a_corrupt_state_file_in_one_line(tmp_path: Path, state: str) -> None:
    path = tmp_path / "monitor-state.db"
    with sqlite3.connect(path) as connection:
        connection.execute(_STATE_DDL)
        connection.execute(
            "INSERT INTO rankgate_monitor_state VALUES (1, 0, ?)", (CORRUPT_STATES[state],)
        )
    connection.close()
    # Refusing means exiting: a monitor that kept running on a half-restored state hits the timeout.
    assert_one_line_error(_monitor_with_state(tmp_path, path.name), "monitor-state.db")


def test_monitor_refuses_a_state_file_that_is_not_sqlite(tmp_path: Path) -> None:
    (tmp_path / "monitor-state.db").write_bytes(os.urandom(4096))
    assert_one_line_error(_monitor_with_state(tmp_path, "monitor-state.db"), "monitor-state.db")


# --- endless input -----------------------------------------------------------------------------

ADDRESS_SPACE = 2 * 1024**3


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def test_eval_dev_zero_stops_with_one_line_in_bounded_memory(tmp_path: Path) -> None:
    result = run(
        ["eval", "/dev/zero", "--no-config"], cwd=tmp_path, preexec_fn=_limit_memory, timeout=300
    )
    assert "MemoryError" not in result.err, result.err[-2000:]
    assert_one_line_error(result, "/dev/zero")


def test_eval_endless_stdin_stops_with_one_line_in_bounded_memory(tmp_path: Path) -> None:
    with open("/dev/zero", "rb") as zeros:
        result = run(
            ["eval", "-", "--no-config"],
            cwd=tmp_path,
            stdin=zeros,
            preexec_fn=_limit_memory,
            timeout=300,
        )
    assert "MemoryError" not in result.err, result.err[-2000:]
    assert_one_line_error(result, "stdin")


# --- an unexpected exception -------------------------------------------------------------------

# Replaces one function the command calls with one that fails in a way no user input explains, then
# runs the real entry point, exactly as ``python -m rankgate`` does.
_BREAK_AND_RUN = """
import sys
import importlib
module_name, attribute, error = sys.argv[1], sys.argv[2], sys.argv[3]
module = importlib.import_module(module_name)
assert hasattr(module, attribute), f"{module_name}.{attribute} is gone: update this test"
def broken(*args, **kwargs):
    raise {"RuntimeError": RuntimeError, "KeyError": KeyError}[error]("planted by the test")
setattr(module, attribute, broken)
from rankgate.cli import main
sys.exit(main(sys.argv[4:]))
"""

BREAKS = [
    ("rankgate.cli.eval_command", "evaluate", "RuntimeError", ["eval", "t.jsonl", "--no-config"]),
    ("rankgate.cli.eval_command", "evaluate", "KeyError", ["eval", "t.jsonl", "--no-config"]),
    ("rankgate.cli.metrics_command", "run", "RuntimeError", ["metrics"]),
]


def _broken_run(tmp_path: Path, brk: tuple[str, str, str, list[str]], **env: str) -> Run:
    write_jsonl(tmp_path / "t.jsonl", [GOOD])
    module, attribute, error, args = brk
    proc = subprocess.run(
        [sys.executable, "-c", _BREAK_AND_RUN, module, attribute, error, *args],
        cwd=tmp_path,
        capture_output=True,
        stdin=subprocess.DEVNULL,
        env=_env(**env),
        timeout=120,
    )
    return Run(proc.returncode, proc.stdout.decode(), proc.stderr.decode())


@pytest.mark.parametrize("brk", BREAKS, ids=lambda b: f"{b[1]}-{b[2]}")
def test_an_unexpected_exception_is_one_internal_error_line_and_exit_3(
    tmp_path: Path, brk: tuple[str, str, str, list[str]]
) -> None:
    result = _broken_run(tmp_path, brk)
    assert "is gone: update this test" not in result.err, result.err
    line = assert_one_line_error(result, code=3)
    assert "internal error" in line.lower()


@pytest.mark.parametrize("brk", BREAKS[:1], ids=lambda b: f"{b[1]}-{b[2]}")
def test_rankgate_debug_shows_the_traceback_of_an_internal_error(
    tmp_path: Path, brk: tuple[str, str, str, list[str]]
) -> None:
    result = _broken_run(tmp_path, brk, RANKGATE_DEBUG="1")
    assert result.code == 3, result.err[-3000:]
    assert "Traceback" in result.err
    assert "planted by the test" in result.err
