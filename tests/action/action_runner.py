"""A simulated GitHub Actions runner for ``python -m rankgate.ci_action`` (the fixtures that make
one are in ``conftest.py``).

A ``Runner`` holds the files and variables a runner gives a step (``GITHUB_STEP_SUMMARY``,
``GITHUB_OUTPUT``, an event in ``GITHUB_EVENT_PATH``, ``GITHUB_REPOSITORY``...) in a folder, and a
fake ``gh`` first on ``PATH`` (``FAKE_GH``) that records its arguments, its token and the JSON
body it was given, and answers the comment listing from a file. No network call is made.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rankgate.ci_action import INPUTS

QUERIES = 300
PULL_REQUEST = 7
REPOSITORY = "octo/search"
TOKEN = "ghs_test_token"

FAKE_GH = """#!{python}
import json, os, sys
args = sys.argv[1:]
entry = {{"args": args, "token": os.environ.get("GH_TOKEN")}}
if "--input" in args:
    with open(args[args.index("--input") + 1], encoding="utf-8") as handle:
        entry["input"] = json.load(handle)
with open(os.environ["FAKE_GH_LOG"], "a", encoding="utf-8") as log:
    log.write(json.dumps(entry) + "\\n")
if os.environ.get("FAKE_GH_FAIL"):
    sys.stderr.write("HTTP 403: Resource not accessible by integration\\n")
    sys.exit(1)
if "--paginate" in args:
    listing = os.environ.get("FAKE_GH_COMMENTS")
    sys.stdout.write(open(listing, encoding="utf-8").read() if listing else "[]")
else:
    sys.stdout.write("{{}}")
"""


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
    return path


@dataclass
class Step:
    """One finished run of the step."""

    code: int
    out: str
    err: str
    runner: Runner

    def outputs(self) -> dict[str, str]:
        return parse_outputs(self.runner.output.read_text(encoding="utf-8"))

    def summary(self) -> str:
        return self.runner.summary.read_text(encoding="utf-8")

    def gh_calls(self) -> list[dict[str, Any]]:
        log = self.runner.gh_log
        if not log.exists():
            return []
        return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]


@dataclass
class Runner:
    root: Path
    env: dict[str, str]

    @property
    def summary(self) -> Path:
        return self.root / "step_summary.md"

    @property
    def output(self) -> Path:
        return self.root / "github_output.txt"

    @property
    def gh_log(self) -> Path:
        return self.root / "gh_calls.jsonl"

    @property
    def report_dir(self) -> Path:
        return self.root / "runner_temp" / "rankgate"

    def event(self, payload: dict[str, Any], name: str = "pull_request") -> None:
        path = self.root / "event.json"
        path.write_text(json.dumps(payload), encoding="utf-8")
        self.env.update(GITHUB_EVENT_PATH=str(path), GITHUB_EVENT_NAME=name)

    def comments(self, text: str) -> None:
        """What the fake ``gh api --paginate .../comments`` prints."""
        path = self.root / "comments.json"
        path.write_text(text, encoding="utf-8")
        self.env["FAKE_GH_COMMENTS"] = str(path)

    def run(self, **inputs: str) -> Step:
        """``python -m rankgate.ci_action`` with these inputs (``delta_metric="ndcg@10"``)."""
        env = dict(self.env)
        for name, value in inputs.items():
            env[INPUTS[name.replace("_", "-")]] = value
        done = subprocess.run(
            [sys.executable, "-m", "rankgate.ci_action"],
            cwd=self.root,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        return Step(done.returncode, done.stdout, done.stderr, self)


def parse_outputs(text: str) -> dict[str, str]:
    """``$GITHUB_OUTPUT`` read as the runner reads it: ``name=value`` lines and
    ``name<<DELIMITER`` blocks; a name set twice is an error here (the runner keeps the last)."""
    outputs: dict[str, str] = {}
    lines = text.split("\n")
    index = 0
    while index < len(lines):
        line = lines[index]
        index += 1
        if not line:
            continue
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            name, delimiter = line.split("<<", 1)
            value = []
            while lines[index] != delimiter:
                value.append(lines[index])
                index += 1
            index += 1
            parsed = "\n".join(value)
        else:
            name, parsed = line.split("=", 1)
        assert name not in outputs, f"output {name} set twice"
        outputs[name] = parsed
    return outputs
