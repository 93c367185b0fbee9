"""Fixtures of the power tests: the command line run in-process, and A/B trace files written once
per test (``ab_data``: a baseline, a control candidate that only shuffles neighbours, and a
regressed one)."""

from __future__ import annotations

from pathlib import Path

import pytest
from power_helpers import AbFiles, Ran, Rankgate, write_jsonl

from ab_data import ab_traces
from rankgate.cli import main


@pytest.fixture
def rankgate(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Rankgate:
    """``rankgate ARGS`` in this process, in ``tmp_path`` (so no ./rankgate.toml is found)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NO_COLOR", "1")

    def run(*args: str | Path) -> Ran:
        capsys.readouterr()
        try:
            code = main([str(arg) for arg in args])
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else 2
        captured = capsys.readouterr()
        return Ran(code, captured.out, captured.err)

    return run


@pytest.fixture
def ab_files(tmp_path: Path) -> AbFiles:
    baseline, regressed, control = ab_traces(queries=300, seed=5)
    return AbFiles(
        write_jsonl(tmp_path / "baseline.jsonl", baseline),
        write_jsonl(tmp_path / "control.jsonl", control),
        write_jsonl(tmp_path / "regressed.jsonl", regressed),
    )
