"""A run of one command imports that command's module, not every command's: the monitor's web server,
the store drivers and the judge's client cost a third of a second to import, which every ``eval`` of
a small file paid. Help and a mistyped command still see every command."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import clean_env

from rankgate.cli import _COMMANDS, _command_named, build_parser

# Imported by commands other than eval only.
OTHER_COMMANDS_ONLY = (
    "rankgate.cli.monitor_command",
    "rankgate.monitor.http",
    "rankgate.cli.store_command",
    "rankgate.cli.judge_command",
    "rankgate.judge_client",
    "uvicorn",
)

PROBE = """
import json, sys
from rankgate.cli import main
code = main(sys.argv[1:])
print(json.dumps({"code": code, "loaded": sorted(sys.modules)}), file=sys.stderr)
"""


def _run(*arguments: str, cwd: Path) -> tuple[int, set[str], str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *arguments],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=clean_env(),
        timeout=120,
    )
    report = json.loads(done.stderr.strip().splitlines()[-1])
    return report["code"], set(report["loaded"]), done.stdout


def test_eval_imports_no_other_command(tmp_path: Path) -> None:
    traces = tmp_path / "t.jsonl"
    traces.write_text(
        json.dumps({"query_id": "q", "retrieved_ids": ["a", "b"], "relevant_ids": ["a"]}) + "\n"
    )
    code, loaded, out = _run(
        "--debug", "eval", str(traces), "--format", "json", "--no-config", cwd=tmp_path
    )
    assert code == 0
    assert json.loads(out)["summary"]["scored"] == 1
    assert "rankgate.cli.eval_command" in loaded
    assert not loaded & set(OTHER_COMMANDS_ONLY), sorted(loaded & set(OTHER_COMMANDS_ONLY))
    # Nor pandas (0.2 s): pyarrow imports it for any numpy array handed to pa.array or take.
    assert "pandas" not in loaded


@pytest.mark.parametrize("command", ["store", "labels", "monitor", "compare"])
def test_a_command_s_parser_holds_its_own_module_s_commands_alone(command: str) -> None:
    module = _COMMANDS[command][0]
    expected = {name for name, (owner, _) in _COMMANDS.items() if owner == module}
    assert _subcommand_names(build_parser(command)) == expected


def _subcommand_names(parser: object) -> set[str]:
    import argparse

    for action in parser._actions:  # type: ignore[attr-defined]
        if isinstance(action, argparse._SubParsersAction):
            return set(action.choices)
    return set()


def test_help_and_unknown_commands_see_every_command() -> None:
    everything = _subcommand_names(build_parser())
    assert set(_COMMANDS) <= everything
    assert _subcommand_names(build_parser(None)) == everything
    assert _subcommand_names(build_parser("evaluate")) == everything  # a typo: every choice named


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        (["eval", "t.jsonl"], "eval"),
        (["--debug", "compare", "a", "b"], "compare"),
        (["traces", "import", "x"], "traces"),
        (["--help"], None),
        ([], None),
        (["evaluate", "x"], None),
        (["--", "eval"], None),
    ],
)
def test_the_command_is_the_first_argument_that_is_not_an_option(
    arguments: list[str], named: str | None
) -> None:
    assert _command_named(arguments) == named
