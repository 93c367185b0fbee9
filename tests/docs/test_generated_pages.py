"""The generated pages of the site say what the code says.

The command-line reference is checked against the parser walked here independently of the
generator: every command and sub-command has its section, and every option it accepts (all but
those hidden from ``--help``) is listed there with its help text. The committed pages must equal
what ``docs/gen_reference.py`` writes today, so an option added without regenerating the docs fails.
"""

from __future__ import annotations

import argparse
import inspect
import re
import runpy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import rankgate
from rankgate.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
REGENERATE = "regenerate it: python docs/gen_reference.py (or make docs)"


@pytest.fixture(scope="module")
def generator() -> dict[str, Any]:
    # run_path, not import: no module named after a docs script, and no bytecode left in docs/.
    return runpy.run_path(str(DOCS / "gen_reference.py"), run_name="rankgate_docs_generator")


def _commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser, list[str]]]:
    """(path, parser, other spellings of its last word) for every parser under ``parser``."""
    yield path, parser, []
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        spellings: dict[int, list[str]] = {}
        for name, child in action.choices.items():
            spellings.setdefault(id(child), []).append(name)
        for names in spellings.values():
            child = action.choices[names[0]]
            for sub_path, sub_parser, aliases in _commands(child, (*path, names[0])):
                # Everything under an aliased command is also reachable by the alias.
                yield sub_path, sub_parser, aliases + names[1:]


def _sections(page: str) -> dict[str, str]:
    """The page's ``## rankgate ...`` sections by heading."""
    sections: dict[str, str] = {}
    heading = None
    for line in page.splitlines():
        if line.startswith("## "):
            heading = line[3:].strip()
            sections[heading] = ""
        elif heading is not None:
            sections[heading] += line + "\n"
    return sections


def _plain(markdown: str) -> str:
    """Markdown escapes undone and white space collapsed, to find help text in a section."""
    text = re.sub(r"\\([\\`*_{}\[\]()#+\-.!|])", r"\1", markdown)
    text = text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
    return " ".join(text.split())


def _help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """Help text as --help prints it (argparse's own substitution of %(name)s and %%)."""
    if not action.help:
        return ""
    params = {key: value for key, value in vars(action).items() if value is not argparse.SUPPRESS}
    if params.get("choices") is not None:
        params["choices"] = ", ".join(str(choice) for choice in params["choices"])
    return " ".join((action.help % dict(params, prog=parser.prog)).split())


def _listed_actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [
        action
        for action in parser._actions
        if action.help != argparse.SUPPRESS and not isinstance(action, argparse._SubParsersAction)
    ]


def test_the_reference_has_a_section_for_every_command_and_no_other() -> None:
    page = (DOCS / "cli-reference.md").read_text(encoding="utf-8")
    sections = _sections(page)
    expected = {" ".join(("rankgate", *path)) for path, _, _ in _commands(build_parser())}
    assert set(sections) == expected, REGENERATE
    # Every sub-command this suite knows of is there: the commands the pages explain.
    for command in (
        "eval",
        "compare",
        "metrics",
        "plan",
        "monitor",
        "trace import",
        "label import",
        "label todo",
        "label from-clicks",
        "store info",
        "store init",
    ):
        assert f"rankgate {command}" in sections


def test_the_reference_lists_every_option_of_every_command_with_its_help() -> None:
    sections = _sections((DOCS / "cli-reference.md").read_text(encoding="utf-8"))
    checked = 0
    for path, parser, aliases in _commands(build_parser()):
        name = " ".join(("rankgate", *path))
        body = sections.get(name)
        assert body is not None, f"no section for {name}; {REGENERATE}"
        plain = _plain(body)
        for action in _listed_actions(parser):
            for option in action.option_strings:
                assert re.search(rf"`{re.escape(option)}[ `]", body), (
                    f"{name}: option {option} is not listed; {REGENERATE}"
                )
            if not action.option_strings:
                shown = action.metavar or action.dest
                assert re.search(rf"`\[?{re.escape(str(shown))}\b", body), (
                    f"{name}: argument {shown} is not listed; {REGENERATE}"
                )
            help_text = _help(parser, action)
            assert help_text in plain, f"{name}: the help of {action.dest} differs; {REGENERATE}"
            checked += 1
        for alias in aliases:
            assert f" {alias}" in body, f"{name}: its alias {alias} is not named"
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for choice in action._choices_actions:
                    assert f"{name} {choice.dest}`" in body, f"{name}: {choice.dest} not listed"
                    assert " ".join((choice.help or "").split()) in plain
    assert checked > 200  # every option of every command, not a handful


def test_options_hidden_from_help_stay_out_of_the_reference() -> None:
    sections = _sections((DOCS / "cli-reference.md").read_text(encoding="utf-8"))
    for path, parser, _ in _commands(build_parser()):
        body = sections[" ".join(("rankgate", *path))]
        visible = {option for action in _listed_actions(parser) for option in action.option_strings}
        for action in parser._actions:
            if action.help == argparse.SUPPRESS:
                for option in set(action.option_strings) - visible:
                    assert not re.search(rf"`{re.escape(option)}[ `]", body), option


@pytest.mark.parametrize("page", ["cli-reference.md", "api.md", "metrics.md"])
def test_the_committed_page_is_what_the_generator_writes_today(
    generator: dict[str, Any], page: str
) -> None:
    committed = (DOCS / page).read_text(encoding="utf-8")
    assert committed == generator["RENDERERS"][page](), f"docs/{page} is out of date; {REGENERATE}"


def test_a_new_option_changes_the_reference(generator: dict[str, Any]) -> None:
    """What makes the test above fail when someone adds an option and forgets the docs."""
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    commands.choices["eval"].add_argument("--brand-new-option", metavar="X", help="a new knob")
    page = generator["render_cli_reference"](parser)
    assert "| `--brand-new-option X` | a new knob |" in page
    assert page != (DOCS / "cli-reference.md").read_text(encoding="utf-8")


def test_the_api_page_documents_exactly_the_public_api() -> None:
    page = (DOCS / "api.md").read_text(encoding="utf-8")
    documented = re.findall(r"^### `([^`]+)`$", page, re.MULTILINE)
    assert sorted(documented) == sorted(rankgate.__all__)
    # Each function's parameters are in its signature block.
    for name in ("evaluate", "compare", "save_baseline", "parse_gate"):
        section = page.split(f"### `{name}`", 1)[1].split("\n### ", 1)[0]
        for parameter in inspect.signature(getattr(rankgate, name)).parameters:
            assert re.search(rf"\b{parameter}\b", section), (name, parameter)


def test_the_check_mode_reports_a_stale_page(generator: dict[str, Any], tmp_path: Path) -> None:
    main = generator["main"]
    assert main(["--out", str(tmp_path)]) == 0
    assert main(["--out", str(tmp_path), "--check"]) == 0
    (tmp_path / "api.md").write_text("# stale\n", encoding="utf-8")
    assert main(["--out", str(tmp_path), "--check"]) == 1
