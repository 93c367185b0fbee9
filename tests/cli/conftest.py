"""Shared helpers for the command-line tests.

* ``write_jsonl`` writes a JSON Lines file in ``tmp_path`` (dicts are dumped, strings written as is);
* ``run_cli`` runs ``python -m rankgate ...`` as a real subprocess;
* ``cli`` runs ``rankgate.cli.main([...])`` in-process and captures its output;
* ``hand`` is a small trace file whose metric values were worked out by hand (see ``cli_helpers``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import HAND_PER_QUERY, HAND_RECORDS, Handmade, Result, clean_env

from rankgate.cli import main

WriteJsonl = Callable[..., Path]


@pytest.fixture
def write_jsonl(tmp_path: Path) -> WriteJsonl:
    """``write_jsonl(records, name="traces.jsonl")``: dicts/lists are dumped, strings kept as is."""

    def write(records: Iterable[Any], name: str = "traces.jsonl") -> Path:
        lines = [item if isinstance(item, str) else json.dumps(item) for item in records]
        path = tmp_path / name
        path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        return path

    return write


@pytest.fixture
def hand(write_jsonl: WriteJsonl) -> Handmade:
    return Handmade(write_jsonl(HAND_RECORDS, "hand.jsonl"), HAND_PER_QUERY)


RunCli = Callable[..., Result]


@pytest.fixture
def run_cli(tmp_path: Path) -> RunCli:
    """Run ``python -m rankgate ARGS`` in a subprocess (cwd: tmp_path unless given)."""

    def run(
        *args: str | Path,
        input: str | None = None,
        cwd: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> Result:
        proc = subprocess.run(
            [sys.executable, "-m", "rankgate", *map(str, args)],
            input=input,
            capture_output=True,
            text=True,
            encoding="utf-8",
            cwd=cwd or tmp_path,
            env=env or clean_env(),
            timeout=60,
            stdin=None if input is not None else subprocess.DEVNULL,
        )
        return Result(proc.returncode, proc.stdout, proc.stderr)

    return run


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> RunCli:
    """Run ``rankgate.cli.main(ARGS)`` in-process; a SystemExit becomes the exit code."""
    for name in ("NO_COLOR", "FORCE_COLOR"):
        monkeypatch.delenv(name, raising=False)

    def run(*args: str | Path) -> Result:
        capsys.readouterr()
        try:
            code = main([str(arg) for arg in args])
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else 2
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return run
