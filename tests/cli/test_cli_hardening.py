"""The command line under failure: a crash is exit 3 in one line (never 1, which a CI job reads as
a failed gate), options are never matched by prefix, sibling commands share option names, a report
file's name decides its format, and every count reads in the right grammatical number."""

from __future__ import annotations

import argparse
import errno
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import Result, clean_env

from conftest import RunCli, WriteJsonl
from rankgate.cli import build_parser
from rankgate.report.console import counted

ONE = {"query_id": "q1", "retrieved_ids": ["a", "b"], "relevant_ids": ["a"]}
INTERNAL_PREFIX = "rankgate: internal error: "
DEBUG_HINT = "(run with --debug for the traceback)"


def assert_internal_error(result: Result, *fragments: str) -> str:
    """Exit 3, no traceback, one line on stderr that names the exception and asks for --debug."""
    assert result.code == 3, f"exit {result.code}, stderr:\n{result.err}"
    assert "Traceback" not in result.err
    lines = result.err.strip().splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got:\n{result.err}"
    line = lines[0]
    assert line.startswith(INTERNAL_PREFIX), line
    assert line.endswith(DEBUG_HINT), line
    for fragment in fragments:
        assert fragment in line, f"{fragment!r} not in {line!r}"
    return line


@pytest.fixture
def one(write_jsonl: WriteJsonl) -> Path:
    return write_jsonl([ONE], "one.jsonl")


def _raiser(problem: BaseException) -> Any:
    def fail(*args: Any, **kwargs: Any) -> Any:
        raise problem

    return fail


# --------------------------------------------------------------------------------------------------
# A crash is exit 3 and one line; the traceback only on request.
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("problem", "fragment"),
    [
        pytest.param(
            RuntimeError("kernel exploded"), "RuntimeError: kernel exploded", id="runtime"
        ),
        pytest.param(ValueError("bad cast"), "ValueError: bad cast", id="value"),
        pytest.param(KeyError("ndcg@10"), "KeyError: 'ndcg@10'", id="key"),
        pytest.param(RecursionError("too deep"), "RecursionError: too deep", id="recursion"),
        pytest.param(MemoryError(), "MemoryError: ran out of memory", id="memory"),
    ],
)
def test_unexpected_exception_is_exit_3_in_one_line(
    cli: RunCli, one: Path, monkeypatch: pytest.MonkeyPatch, problem: BaseException, fragment: str
) -> None:
    monkeypatch.delenv("RANKGATE_DEBUG", raising=False)
    monkeypatch.setattr("rankgate.cli.eval_command.evaluate", _raiser(problem))
    result = cli("eval", one, "--gate", "mrr>=0.5")
    assert_internal_error(result, fragment)
    assert result.out == ""


def test_internal_error_in_every_command_handler(
    cli: RunCli, one: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """compare, metrics and labels from-clicks go through the same net as eval."""
    monkeypatch.delenv("RANKGATE_DEBUG", raising=False)
    monkeypatch.setattr("rankgate.cli.compare_command.compare", _raiser(TypeError("no pairing")))
    other = tmp_path / "two.jsonl"
    other.write_text(one.read_text())
    assert_internal_error(cli("compare", one, other), "TypeError: no pairing")

    monkeypatch.setattr(
        "rankgate.cli.metrics_command.render_metrics_text", _raiser(ValueError("registry"))
    )
    assert_internal_error(cli("metrics"), "ValueError: registry")

    monkeypatch.setattr(
        "rankgate.cli.clicks_command.read_click_log", _raiser(ZeroDivisionError("rank 0"))
    )
    result = cli("labels", "from-clicks", one, "-o", tmp_path / "labels.jsonl")
    assert_internal_error(result, "ZeroDivisionError: rank 0")


def test_a_library_exception_is_named_with_its_module(
    cli: RunCli, one: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sqlite3

    monkeypatch.delenv("RANKGATE_DEBUG", raising=False)
    monkeypatch.setattr(
        "rankgate.cli.eval_command.evaluate",
        _raiser(sqlite3.OperationalError("database is locked")),
    )
    assert_internal_error(cli("eval", one), "sqlite3.OperationalError: database is locked")


def test_internal_error_message_stays_one_line_and_masks_passwords(
    cli: RunCli, one: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RANKGATE_DEBUG", raising=False)
    message = (
        "could not connect to postgresql://ci:s3cret@db/traces\n"
        "rankgate: error: forged second line\r\npassword=hunter2 host=db"
    )
    monkeypatch.setattr("rankgate.cli.eval_command.evaluate", _raiser(RuntimeError(message)))
    line = assert_internal_error(cli("eval", one), "postgresql://ci:***@db/traces")
    assert "s3cret" not in line and "hunter2" not in line
    assert "password=***" in line


def test_a_huge_message_is_clipped(cli: RunCli, one: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RANKGATE_DEBUG", raising=False)
    monkeypatch.setattr("rankgate.cli.eval_command.evaluate", _raiser(ValueError("x" * 100_000)))
    line = assert_internal_error(cli("eval", one))
    assert len(line) < 1000


@pytest.mark.parametrize(
    "position",
    [pytest.param("before", id="before-command"), pytest.param("after", id="after-command")],
)
def test_debug_flag_shows_the_traceback(
    cli: RunCli, one: Path, monkeypatch: pytest.MonkeyPatch, position: str
) -> None:
    monkeypatch.delenv("RANKGATE_DEBUG", raising=False)
    monkeypatch.setattr("rankgate.cli.eval_command.evaluate", _raiser(RuntimeError("kaboom")))
    args = ["--debug", "eval", one] if position == "before" else ["eval", one, "--debug"]
    result = cli(*args)
    assert result.code == 3
    assert "Traceback (most recent call last)" in result.err
    assert "eval_command.py" in result.err  # the frames, not only the message
    last = result.err.strip().splitlines()[-1]
    assert last == "rankgate: internal error: RuntimeError: kaboom"


@pytest.mark.parametrize(
    ("value", "traceback"), [("1", True), ("yes", True), ("0", False), ("", False)]
)
def test_debug_environment_variable(
    cli: RunCli, one: Path, monkeypatch: pytest.MonkeyPatch, value: str, traceback: bool
) -> None:
    monkeypatch.setenv("RANKGATE_DEBUG", value)
    monkeypatch.setattr("rankgate.cli.eval_command.evaluate", _raiser(RuntimeError("kaboom")))
    result = cli("eval", one)
    assert result.code == 3
    assert ("Traceback" in result.err) is traceback
    if not traceback:
        assert_internal_error(result, "kaboom")


def test_debug_does_not_change_a_user_error(run_cli: RunCli, tmp_path: Path) -> None:
    result = run_cli("--debug", "eval", tmp_path / "nope.jsonl")
    result.assert_one_line_error("nope.jsonl")


def test_real_process_exits_3_not_1(one: Path, tmp_path: Path) -> None:
    """Through a real interpreter exit, as CI sees it: Python's own default for an uncaught
    exception is 1, the code of a failed gate."""
    driver = (
        "import sys\n"
        "import rankgate.cli.eval_command as command\n"
        "def boom(*args, **kwargs):\n"
        "    raise RuntimeError('deliberate')\n"
        "command.evaluate = boom\n"
        "from rankgate.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    env = clean_env()
    env.pop("RANKGATE_DEBUG", None)
    proc = subprocess.run(
        [sys.executable, "-c", driver, "eval", str(one), "--gate", "mrr>=0.5"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
    )
    assert_internal_error(Result(proc.returncode, proc.stdout, proc.stderr), "deliberate")


def test_keyboard_interrupt_is_130(cli: RunCli, one: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("rankgate.cli.eval_command.evaluate", _raiser(KeyboardInterrupt()))
    result = cli("eval", one)
    assert result.code == 130
    assert result.err == "rankgate: interrupted\n"


def test_broken_pipe_is_quiet(cli: RunCli, one: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("rankgate.cli.eval_command.evaluate", _raiser(BrokenPipeError(32, "pipe")))
    result = cli("eval", one)
    assert result.code == 141
    assert result.err == ""


def test_reader_leaving_early_keeps_the_verdict(write_jsonl: WriteJsonl, tmp_path: Path) -> None:
    """``rankgate eval ... | head -1`` on a real pipe: no traceback, and the verdict's exit code."""
    records = [
        {"query_id": f"q{i}", "retrieved_ids": [f"d{j}" for j in range(50)], "relevant_ids": ["d0"]}
        for i in range(3000)
    ]
    traces = write_jsonl(records, "many.jsonl")
    proc = subprocess.Popen(
        [sys.executable, "-m", "rankgate", "eval", str(traces), "--format", "json", "--per-query"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=clean_env(),
        cwd=tmp_path,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.read(10)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    proc.stderr.close()
    assert proc.wait(timeout=60) == 0
    assert "Traceback" not in err and "error" not in err


# --------------------------------------------------------------------------------------------------
# Operating-system refusals that are the user's to fix: exit 2, one line, the path.
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("problem_type", "code", "reason"),
    [
        pytest.param(PermissionError, errno.EACCES, "Permission denied", id="permission"),
        pytest.param(IsADirectoryError, errno.EISDIR, "Is a directory", id="is-a-directory"),
        pytest.param(OSError, errno.ENOSPC, "No space left on device", id="disk-full"),
    ],
)
def test_environment_oserror_is_exit_2_with_the_path(
    cli: RunCli,
    one: Path,
    monkeypatch: pytest.MonkeyPatch,
    problem_type: type[OSError],
    code: int,
    reason: str,
) -> None:
    problem = problem_type(code, os.strerror(code), str(one))
    monkeypatch.setattr("rankgate.cli.eval_command.evaluate", _raiser(problem))
    cli("eval", one).assert_one_line_error(str(one), reason)


def test_missing_file_the_user_named_is_exit_2(
    cli: RunCli, one: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    corpus = tmp_path / "corpus.txt"
    problem = FileNotFoundError(errno.ENOENT, "No such file or directory", str(corpus))
    monkeypatch.setattr("rankgate.cli.eval_command.evaluate", _raiser(problem))
    cli("eval", one, f"--html={corpus}").assert_one_line_error(str(corpus), "No such file")


def test_missing_file_nobody_named_is_an_internal_error(
    cli: RunCli, one: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file rankgate itself expected (a packaged schema, say) is rankgate's bug, not the user's."""
    monkeypatch.delenv("RANKGATE_DEBUG", raising=False)
    problem = FileNotFoundError(errno.ENOENT, "No such file or directory", "/opt/pkg/schema.json")
    monkeypatch.setattr("rankgate.cli.eval_command.evaluate", _raiser(problem))
    assert_internal_error(cli("eval", one), "FileNotFoundError", "schema.json")


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
@pytest.mark.parametrize("option", ["-o", "--html"])
def test_report_on_a_full_disk(run_cli: RunCli, one: Path, option: str) -> None:
    result = run_cli("eval", one, "--format", "table", option, "/dev/full")
    result.assert_one_line_error("/dev/full", "No space left on device")
    assert result.out == ""  # no verdict printed before the failure


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_unreadable_trace_file(run_cli: RunCli, one: Path) -> None:
    one.chmod(0)
    try:
        run_cli("eval", one).assert_one_line_error(str(one.name))
    finally:
        one.chmod(0o644)


# --------------------------------------------------------------------------------------------------
# Observed cases, through a real process.
# --------------------------------------------------------------------------------------------------


def test_enormous_cutoff_is_a_usage_error(run_cli: RunCli, one: Path) -> None:
    run_cli("eval", one, "-m", "ndcg@99999999999999999999").assert_one_line_error(
        "99999999999999999999"
    )


def test_lower_bound_gate_without_resamples_is_refused(run_cli: RunCli, one: Path) -> None:
    """Without resamples there is no interval: gating on its bound would check the mean while
    the report says "(lower)"."""
    result = run_cli(
        "eval", one, "--gate", "mrr>=0.5", "--gate-on", "lower_bound", "--resamples", "0"
    )
    result.assert_one_line_error("lower_bound", "resamples")


def test_lower_bound_gate_without_resamples_from_config_is_refused(
    run_cli: RunCli, one: Path, tmp_path: Path
) -> None:
    config = tmp_path / "nightly.toml"
    config.write_text('gate_on = "lower_bound"\nresamples = 0\n[gates]\n"mrr" = 0.5\n')
    run_cli("eval", one, "--config", config).assert_one_line_error("lower_bound", "resamples")


# --------------------------------------------------------------------------------------------------
# No prefix matching, anywhere.
# --------------------------------------------------------------------------------------------------


def _parsers(parser: argparse.ArgumentParser, name: str = "rankgate") -> Iterator[tuple[str, Any]]:
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command, sub in action.choices.items():
                yield from _parsers(sub, f"{name} {command}")


def test_every_parser_refuses_abbreviations() -> None:
    found = dict(_parsers(build_parser()))
    for expected in ("rankgate eval", "rankgate compare", "rankgate labels from-clicks",
                     "rankgate trace import", "rankgate store info", "rankgate monitor"):  # fmt: skip
        assert expected in found
    loose = [name for name, parser in found.items() if parser.allow_abbrev]
    assert loose == []


@pytest.mark.parametrize(
    ("args", "unknown"),
    [
        pytest.param(
            ["compare", "a.jsonl", "b.jsonl", "--variant", "x"], "--variant", id="variant"
        ),
        pytest.param(["eval", "a.jsonl", "--segment", "query_type"], "--segment", id="segment"),
        pytest.param(["eval", "a.jsonl", "--min-cov", "0.5"], "--min-cov", id="min-cov"),
        pytest.param(["eval", "a.jsonl", "--form", "json"], "--form", id="form"),
        pytest.param(["compare", "a", "b", "--perm", "10"], "--perm", id="perm"),
        pytest.param(["labels", "from-clicks", "c.jsonl", "--outp", "x"], "--outp", id="outp"),
        pytest.param(
            ["trace", "import", "a.jsonl", "--store", "sqlite:///x.db", "--time", "ts"],
            "--time",
            id="time",
        ),
        pytest.param(["monitor", "--tok", "t"], "--tok", id="tok"),
        pytest.param(["--vers"], "--vers", id="top-level"),
    ],
)
def test_a_prefix_of_an_option_is_unknown(
    run_cli: RunCli, write_jsonl: WriteJsonl, args: list[str], unknown: str
) -> None:
    write_jsonl([ONE], "a.jsonl")
    write_jsonl([ONE], "b.jsonl")
    result = run_cli(*args)
    assert result.code == 2, result.err
    assert "Traceback" not in result.err
    assert "unrecognized arguments" in result.err and unknown in result.err


def test_equals_form_of_a_prefix_is_unknown_too(run_cli: RunCli, one: Path) -> None:
    result = run_cli("eval", one, "--segment=query_type")
    assert result.code == 2 and "unrecognized arguments: --segment=query_type" in result.err


def test_short_options_still_combine(cli: RunCli, one: Path) -> None:
    result = cli("eval", one, "-mmrr", "-gmrr>=0.5")
    assert result.code == 0, result.err
    assert "mrr" in result.out and "PASS" in result.out


# --------------------------------------------------------------------------------------------------
# -o/--output on every command that writes a file.
# --------------------------------------------------------------------------------------------------


@pytest.fixture
def clicks(write_jsonl: WriteJsonl) -> Path:
    records = [
        {"query_id": f"q{q}", "document_id": d, "rank": rank, "clicked": rank == 1}
        for q in range(3)
        for rank, d in enumerate("abc", start=1)
    ]
    return write_jsonl(records, "clicks.jsonl")


@pytest.mark.parametrize("option", ["-o", "--output", "--out"])
def test_from_clicks_output_option(cli: RunCli, clicks: Path, tmp_path: Path, option: str) -> None:
    out = tmp_path / "labels.jsonl"
    result = cli("labels", "from-clicks", clicks, option, out, "--propensity", "power:1")
    assert result.code == 0, result.err
    assert out.is_file()
    assert f"to {out}" in result.out


def test_from_clicks_help_shows_only_the_shared_name(cli: RunCli) -> None:
    result = cli("labels", "from-clicks", "--help")
    assert "-o FILE, --output FILE" in result.out
    assert "--out " not in result.out and "--out\n" not in result.out


def test_from_clicks_needs_an_output(cli: RunCli, clicks: Path) -> None:
    cli("labels", "from-clicks", clicks).assert_one_line_error("-o/--output")


def test_from_clicks_output_named_twice(cli: RunCli, clicks: Path, tmp_path: Path) -> None:
    result = cli("labels", "from-clicks", clicks, "-o", tmp_path / "a", "--out", tmp_path / "b")
    result.assert_one_line_error("--out")


# --------------------------------------------------------------------------------------------------
# The name of the report file decides its format, or contradicts --format.
# --------------------------------------------------------------------------------------------------


def _check_json(text: str) -> None:
    assert isinstance(json.loads(text), dict)


def _check_markdown(text: str) -> None:
    assert text.startswith("### rankgate")


def _check_junit(text: str) -> None:
    assert ET.fromstring(text.split("\n", 1)[1]).tag == "testsuites"


def _check_html(text: str) -> None:
    assert text.lstrip().lower().startswith("<!doctype html")


def _check_table(text: str) -> None:
    assert text.startswith("rankgate ") and "{" not in text and "<" not in text


@pytest.mark.parametrize(
    ("name", "check"),
    [
        ("report.json", _check_json),
        ("report.JSON", _check_json),
        ("report.md", _check_markdown),
        ("report.markdown", _check_markdown),
        ("rankgate.xml", _check_junit),
        ("report.html", _check_html),
        ("report.htm", _check_html),
        ("report.txt", _check_table),
        ("report", _check_table),
        ("report.log", _check_table),
    ],
)
@pytest.mark.parametrize("command", ["eval", "compare"])
def test_output_extension_chooses_the_format(
    cli: RunCli, one: Path, tmp_path: Path, name: str, check: Any, command: str
) -> None:
    out = tmp_path / name
    sources = [one] if command == "eval" else [one, _copy(one, tmp_path / "other.jsonl")]
    result = cli(command, *sources, "-o", out, "--gate", "mrr>=0.5")
    assert result.code == 0, result.err
    check(out.read_text(encoding="utf-8"))
    assert result.out.startswith("PASS") and f"report written to {out}" in result.out


@pytest.mark.parametrize(
    ("name", "given", "implied"),
    [
        ("report.json", "table", "json"),
        ("report.md", "json", "markdown"),
        ("report.xml", "html", "junit"),
        ("report.html", "markdown", "html"),
        ("report.txt", "json", "table"),
    ],
)
@pytest.mark.parametrize("command", ["eval", "compare"])
def test_output_extension_contradicting_format_is_refused(
    run_cli: RunCli, one: Path, tmp_path: Path, name: str, given: str, implied: str, command: str
) -> None:
    sources = [one] if command == "eval" else [one, _copy(one, tmp_path / "other.jsonl")]
    result = run_cli(command, *sources, "--format", given, "-o", tmp_path / name)
    result.assert_one_line_error(name, implied, given)
    assert not (tmp_path / name).exists()


def test_format_agreeing_with_the_extension_is_fine(cli: RunCli, one: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.xml"
    assert cli("eval", one, "--format", "junit", "-o", out).code == 0
    _check_junit(out.read_text())


def test_html_extension_and_html_option_together(cli: RunCli, one: Path, tmp_path: Path) -> None:
    result = cli("eval", one, "-o", tmp_path / "a.html", "--html", tmp_path / "b.html")
    result.assert_one_line_error("a.html", "drop --html")


def test_per_query_follows_the_implied_json(cli: RunCli, one: Path, tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    assert cli("eval", one, "--per-query", "-o", out).code == 0
    assert json.loads(out.read_text())["per_query"]


def _copy(source: Path, target: Path) -> Path:
    target.write_text(source.read_text())
    return target


# --------------------------------------------------------------------------------------------------
# Words: plurals, help texts, the implicit config, the no-gates verdict.
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("number", "noun", "expected"),
    [
        (0, "query", "0 queries"),
        (1, "query", "1 query"),
        (2, "query", "2 queries"),
        (1, "record", "1 record"),
        (1234567, "record", "1,234,567 records"),
        (1, "scored query", "1 scored query"),
        (3, "scored query", "3 scored queries"),
        (2, "index", "2 indices"),
    ],
)
def test_counted(number: int, noun: str, expected: str) -> None:
    plural = "indices" if noun == "index" else None
    assert counted(number, noun, plural) == expected


_WRONG_PLURALS = ("1 queries", "1 records", "1 labels", "1 checks", "1 judgments", "1 cells")


def _assert_no_wrong_plural(text: str) -> None:
    for wrong in _WRONG_PLURALS:
        assert wrong not in text, f"{wrong!r} in:\n{text}"


@pytest.mark.parametrize("report_format", ["table", "markdown", "junit"])
def test_one_query_reads_in_the_singular(cli: RunCli, one: Path, report_format: str) -> None:
    result = cli("eval", one, "--gate", "mrr>=0.5", "--format", report_format)
    assert result.code == 0, result.err
    _assert_no_wrong_plural(result.out)
    if report_format == "table":
        assert "1 record read: 1 scored" in result.out
        assert result.out.rstrip().splitlines()[-1] == (
            "PASS · 1 of 1 check passed · 1 query scored"
        )
    if report_format == "markdown":
        assert "**PASS** · 1 of 1 check passed · 1 record read" in result.out


def test_one_failing_gate_reads_in_the_singular(cli: RunCli, one: Path) -> None:
    result = cli("eval", one, "--gate", "mrr>0.99", "--gate", "precision@5>=0.5")
    assert result.code == 1
    last = result.out.rstrip().splitlines()[-1]
    assert last.startswith("FAIL · 1 of 2 checks failed: precision@5 = 0.2000")
    assert last.endswith("(margin -0.3000, 1 query)")


def test_compare_one_paired_query(cli: RunCli, one: Path, tmp_path: Path) -> None:
    other = _copy(one, tmp_path / "other.jsonl")
    for report_format in ("table", "markdown", "junit"):
        result = cli("compare", one, other, "--format", report_format)
        assert result.code == 0, result.err
        _assert_no_wrong_plural(result.out)
    assert "1 query paired" in cli("compare", one, other).out


def test_from_clicks_counts_in_the_singular(
    cli: RunCli, write_jsonl: WriteJsonl, tmp_path: Path
) -> None:
    log = write_jsonl(
        [
            {"query_id": "q", "document_id": "a", "rank": 1, "clicked": True},
            {"query_id": "q", "document_id": "b", "rank": 0, "clicked": False},
        ],
        "clicks.jsonl",
    )
    result = cli(
        "labels", "from-clicks", log, "-o", tmp_path / "l.jsonl",
        "--on-invalid", "skip", "--propensity", "power:1",
    )  # fmt: skip
    assert result.code == 0, result.err
    assert "skipped as invalid: 1 record\n" in result.out


def test_no_gates_is_worded_the_same_in_every_format(cli: RunCli, one: Path) -> None:
    table = cli("eval", one).out
    assert table.rstrip().splitlines()[-1] == "no gates set · 1 query scored"
    markdown = cli("eval", one, "--format", "markdown").out
    assert "**no gates set** · 1 record read" in markdown
    assert "0 of 0" not in markdown and "PASS" not in markdown


def test_color_option_has_help(cli: RunCli) -> None:
    for command in ("eval", "compare"):
        text = cli(command, "--help").out
        option = text[text.index("  --color {auto,always,never}") :]
        assert "NO_COLOR" in option.split("--no-progress")[0]


def test_help_texts_print_single_percent_signs(cli: RunCli) -> None:
    for command in ("eval", "compare", "monitor", "metrics"):
        assert "%%" not in cli(command, "--help").out
    assert "95% interval" in cli("compare", "--help").out
    assert "%%" not in cli("--help").out


def test_top_level_help_documents_exit_codes_and_debug(cli: RunCli) -> None:
    text = cli("--help").out
    assert "exit codes:" in text
    for line in ("0 ", "1 ", "2 ", "3 ", "130"):
        assert any(row.strip().startswith(line) for row in text.splitlines()), line
    assert "internal error" in text and "RANKGATE_DEBUG=1" in text and "--debug" in text


def test_implicit_config_is_named_on_stderr(run_cli: RunCli, one: Path, tmp_path: Path) -> None:
    (tmp_path / "rankgate.toml").write_text('[gates]\n"mrr" = 0.5\n')
    result = run_cli("eval", one, "--format", "json", cwd=tmp_path)
    assert result.code == 0, result.err
    assert result.err == "using config ./rankgate.toml (--no-config ignores it)\n"
    assert json.loads(result.out)["gates"][0]["threshold"] == 0.5  # stdout stays the report

    named = run_cli("eval", one, "--config", tmp_path / "rankgate.toml", cwd=tmp_path)
    assert named.code == 0 and named.err == ""
    ignored = run_cli("eval", one, "--no-config", cwd=tmp_path)
    assert ignored.code == 0 and ignored.err == ""


def test_implicit_config_named_for_compare(run_cli: RunCli, one: Path, tmp_path: Path) -> None:
    (tmp_path / "rankgate.toml").write_text('metrics = ["mrr"]\n')
    other = _copy(one, tmp_path / "other.jsonl")
    result = run_cli("compare", one, other, cwd=tmp_path)
    assert result.code == 0, result.err
    assert "using config ./rankgate.toml" in result.err


def test_output_dash_is_stdout(
    cli: RunCli, one: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result = cli("eval", one, "--no-config", "--format", "json", "-o", "-")
    assert result.code == 0, result.err
    assert json.loads(result.out)["summary"]["read"] == 1
    assert not (tmp_path / "-").exists()
