"""Shared pieces of the adversarial suite: running rankgate as a user does, the contract every run
must keep, and a JSON writer that can say what ``json.dumps`` refuses to (NaN, duplicate keys,
lone surrogates as raw bytes, fragments cut anywhere).

The contract (issue 15): exit 0 or 1 only with a report whose counts add up (read = scored +
skipped, summed over the reasons), exit 2 only with exactly one line on stderr, never exit 3, never
a traceback, never a signal, never a hang.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import Phase

# A run that takes longer than this on a few kilobytes of input is hung, whatever it prints.
RUN_TIMEOUT = 120

# Hypothesis examples per reader. Every example starts one to three interpreters (~0.6 s each), so
# this sets the folder's run time; RANKGATE_FUZZ_EXAMPLES raises it for a longer hunt.
EXAMPLES = int(os.environ.get("RANKGATE_FUZZ_EXAMPLES", "6"))

# Shrinking a failure re-runs rankgate hundreds of times; by default a failure is reported as found
# (hypothesis prints it and keeps it in .hypothesis/ for the next run). RANKGATE_FUZZ_SHRINK=1 asks
# for the smallest example instead.
PHASES = tuple(
    phase
    for phase in Phase
    if phase is not Phase.shrink or os.environ.get("RANKGATE_FUZZ_SHRINK") == "1"
)

# Forces the pure-Python readers: both switches that send work to the compiled extensions report
# "not built", as on an install without a C compiler. A missing switch fails the run loudly, so the
# fallback is never silently the compiled path under another name.
_PYTHON_PATH_ONLY = """
import sys
import rankgate.fast
import rankgate.io.jsonl_arrow
for module in (rankgate.fast, rankgate.io.jsonl_arrow):
    if not hasattr(module, "available"):
        sys.exit(f"{module.__name__}.available is gone: update the adversarial suite")
    module.available = lambda: False
from rankgate.cli import main
sys.exit(main(sys.argv[1:]))
"""


@dataclass(frozen=True)
class Outcome:
    args: tuple[str, ...]
    code: int
    out: str
    err: str
    report: dict[str, Any] | None


def environment(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RANKGATE_")}
    env.update({"NO_COLOR": "1", "PYTHONDONTWRITEBYTECODE": "1"})
    env.update(extra)
    return env


def run_rankgate(
    folder: Path,
    args: Sequence[str | Path],
    *,
    stdin: bytes | None = None,
    python_path_only: bool = False,
) -> tuple[tuple[str, ...], subprocess.CompletedProcess[bytes]]:
    """``rankgate ARGS`` in ``folder`` as a subprocess; a hang fails the test."""
    full = tuple(map(str, args))
    entry = ["-c", _PYTHON_PATH_ONLY] if python_path_only else ["-m", "rankgate"]
    try:
        proc = subprocess.run(
            [sys.executable, *entry, *full],
            cwd=folder,
            input=stdin,
            stdin=None if stdin is not None else subprocess.DEVNULL,
            capture_output=True,
            env=environment(),
            timeout=RUN_TIMEOUT,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"rankgate {' '.join(full)} hung for {RUN_TIMEOUT} s in {folder}")
    return full, proc


def run_eval(
    folder: Path,
    args: Sequence[str | Path],
    *,
    stdin: bytes | None = None,
    python_path_only: bool = False,
    report_name: str = "report.json",
) -> Outcome:
    """``rankgate eval ARGS --no-config --no-progress --format json -o REPORT`` in ``folder``."""
    report = folder / report_name
    report.unlink(missing_ok=True)
    options = ("--no-config", "--no-progress", "--format", "json", "-o", report_name)
    full, proc = run_rankgate(
        folder, ["eval", *args, *options], stdin=stdin, python_path_only=python_path_only
    )
    err = proc.stderr.decode("utf-8", "replace")
    loaded = None
    if report.exists():
        text = report.read_bytes()
        try:
            loaded = json.loads(text.decode("utf-8"))
        except ValueError as problem:  # UnicodeDecodeError included
            pytest.fail(f"rankgate {' '.join(full)} wrote a report that is not JSON ({problem})")
    return Outcome(full, proc.returncode, proc.stdout.decode("utf-8", "replace"), err, loaded)


def check_refusal_only(full: Sequence[str], proc: subprocess.CompletedProcess[bytes]) -> bool:
    """For commands without a verdict (``trace import``): exit 0, or exit 2 with one line.
    Returns True on success."""
    err = proc.stderr.decode("utf-8", "replace")
    where = f"rankgate {' '.join(full)}\nstderr:\n{err[-3000:]}"
    assert proc.returncode >= 0, f"killed by signal {-proc.returncode}: {where}"
    assert "Traceback" not in err, where
    assert proc.returncode in (0, 2), f"exit {proc.returncode}: {where}"
    if proc.returncode == 2:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].strip(), f"exit 2 with {len(lines)} lines: {where}"
    return proc.returncode == 0


def check_contract(outcome: Outcome, *, name: str | None = None) -> dict[str, Any] | None:
    """Assert the contract; returns the report's summary for exit 0/1, None for exit 2.

    ``name``: the input's name, which an exit-2 line must mention.
    """
    where = f"rankgate {' '.join(outcome.args)}\nstderr:\n{outcome.err[-3000:]}"
    assert outcome.code >= 0, f"killed by signal {-outcome.code}: {where}"
    assert "Traceback" not in outcome.err, where
    assert outcome.code in (0, 1, 2), f"exit {outcome.code}: {where}"
    if outcome.code == 2:
        lines = outcome.err.strip().splitlines()
        assert len(lines) == 1, f"exit 2 with {len(lines)} lines on stderr: {where}"
        assert lines[0].strip(), f"exit 2 with a blank line: {where}"
        if name is not None:
            assert name in lines[0], f"exit 2 without naming {name!r}: {where}"
        return None
    assert outcome.report is not None, f"exit {outcome.code} without the JSON report: {where}"
    summary: dict[str, Any] = outcome.report["summary"]
    skipped = summary["skipped"]
    assert all(isinstance(n, int) and n >= 0 for n in skipped.values()), summary
    assert summary["read"] == summary["scored"] + sum(skipped.values()), f"{summary}\n{where}"
    return summary


# --- hostile JSON text -----------------------------------------------------------------------


class Raw(bytes):
    """A fragment written into the JSON text exactly as it is (NaN, 1e400, a 5,000-digit number)."""

    __slots__ = ()


class Pairs(tuple[tuple[Any, Any], ...]):
    """A JSON object as its key-value pairs in order, so a key may appear twice."""

    __slots__ = ()


def encode(value: Any, *, ascii_only: bool = True) -> bytes:
    """JSON text for ``value``. ``ascii_only=False`` writes strings as raw UTF-8, lone surrogates
    included (as the invalid three-byte sequences a careless logger writes)."""
    if isinstance(value, Raw):
        return bytes(value)
    if value is None:
        return b"null"
    if isinstance(value, bool):
        return b"true" if value else b"false"
    if isinstance(value, int):
        return str(value).encode()
    if isinstance(value, float):
        if math.isnan(value):
            return b"NaN"
        if math.isinf(value):
            return b"Infinity" if value > 0 else b"-Infinity"
        return repr(value).encode()
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")
    if isinstance(value, Pairs):
        items = (
            encode(str(k) if not isinstance(k, str) else k, ascii_only=ascii_only)
            + b":"
            + encode(v, ascii_only=ascii_only)
            for k, v in value
        )
        return b"{" + b",".join(items) + b"}"
    if isinstance(value, dict):
        return encode(Pairs(value.items()), ascii_only=ascii_only)
    if isinstance(value, list | tuple):
        return b"[" + b",".join(encode(v, ascii_only=ascii_only) for v in value) + b"]"
    raise TypeError(f"cannot encode {type(value).__name__}")


def deep_array(depth: int) -> Raw:
    return Raw(b"[" * depth + b"]" * depth)


def deep_object(depth: int) -> Raw:
    return Raw(b'{"x":' * depth + b"1" + b"}" * depth)
