"""Fixtures for the GitHub Action tests.

* ``ab_files``: seeded A/B trace files (``ab_data``): a baseline, a candidate that regresses on
  ``multi_hop``, and a control candidate that changes nothing that matters;
* ``runner``: a simulated runner in ``tmp_path`` with a pull_request event and a fake ``gh``
  (see ``action_runner``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from action_runner import FAKE_GH, PULL_REQUEST, QUERIES, REPOSITORY, TOKEN, Runner, write_jsonl

from ab_data import ab_traces


@pytest.fixture(scope="session")
def ab_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("ab")
    baseline, regressed, control = ab_traces(queries=QUERIES, seed=11)
    return {
        "baseline": write_jsonl(root / "baseline.jsonl", baseline),
        "regressed": write_jsonl(root / "regressed.jsonl", regressed),
        "control": write_jsonl(root / "control.jsonl", control),
    }


@pytest.fixture
def runner(tmp_path: Path) -> Runner:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    gh = bin_dir / "gh"
    gh.write_text(FAKE_GH.format(python=sys.executable), encoding="utf-8")
    gh.chmod(0o755)
    (tmp_path / "runner_temp").mkdir()
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("GITHUB_", "INPUT_", "GH_", "RUNNER_", "FAKE_GH_"))
        and key not in ("CI", "RANKGATE_DEBUG")
    }
    env.update(
        PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        CI="true",
        GITHUB_ACTIONS="true",
        GITHUB_STEP_SUMMARY=str(tmp_path / "step_summary.md"),
        GITHUB_OUTPUT=str(tmp_path / "github_output.txt"),
        GITHUB_REPOSITORY=REPOSITORY,
        GITHUB_SERVER_URL="https://github.com",
        GITHUB_API_URL="https://api.github.com",
        GITHUB_RUN_ID="4242",
        GITHUB_WORKSPACE=str(tmp_path),
        RUNNER_TEMP=str(tmp_path / "runner_temp"),
        FAKE_GH_LOG=str(tmp_path / "gh_calls.jsonl"),
        # What action.yml passes when an input is left at its default.
        INPUT_COMMAND="compare",
        INPUT_COMMENT="false",
        INPUT_COMMENT_AUTHOR="github-actions[bot]",
        INPUT_DELETE_COMMENT_ON_PASS="true",
        INPUT_GITHUB_TOKEN=TOKEN,
        INPUT_ARTIFACT_NAME="rankgate-report",
    )
    (tmp_path / "step_summary.md").touch()
    (tmp_path / "github_output.txt").touch()
    made = Runner(tmp_path, env)
    made.event({"action": "synchronize", "number": PULL_REQUEST, "pull_request": {"number": 7}})
    return made
