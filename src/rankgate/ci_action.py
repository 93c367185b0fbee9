"""The GitHub Action's step: ``python -m rankgate.ci_action``, run by ``action.yml``.

A runner hands a step its context as environment variables and files. This module reads them, runs
``eval`` or ``compare`` through the library, and writes back:

* the pull-request Markdown (``render_eval_pr_markdown`` / ``render_comparison_pr_markdown``) to
  ``$GITHUB_STEP_SUMMARY``, and to ``REPORT_DIR/summary.md``;
* the HTML report to ``REPORT_DIR/report.html`` (the action uploads it as an artifact);
* outputs to ``$GITHUB_OUTPUT`` (see ``OUTPUTS``), each in the ``name<<DELIMITER`` form with a
  random delimiter, so that no value (a verdict quoting a segment value with a line break in it)
  can end its own value early and set another output;
* with ``comment: true`` on a pull request, when the run failed: ``REPORT_DIR/comment.md`` (the
  hidden marker ``COMMENT_MARKER``, then the Markdown), posted as one comment, or written over the
  earlier comment that starts with the marker, through the ``gh`` CLI and the job's token. A run
  that passes posts nothing and deletes the earlier comment (unless ``delete-comment-on-pass`` is
  false), so a rankgate comment on a pull request always describes a failing latest run.

Inputs arrive as ``INPUT_*`` variables (``action.yml`` maps each input to one; none is pasted into
a shell script). ``args`` holds further ``rankgate eval`` / ``compare`` options, parsed by the
command line's own parser, so each means what it means there.

Exit codes are rankgate's, and come after the summary and the outputs are written: 0 pass, 1 a gate
failed or a regression was flagged, 2 bad input or usage, 3 an internal error. A comment that cannot
be posted (a fork's read-only token, no ``gh``) is a warning: it never changes the verdict.

While it runs under Actions, the step stops the runner's workflow commands
(``::stop-commands::``), since the log quotes file names and messages that data could fill with
``::set-output`` lines; its own annotations come after it resumes them.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import shlex
import sys
import traceback
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rankgate.ci_comment import (
    COMMENT_MARKER,
    DEFAULT_AUTHOR,
    GhError,
    GhRunner,
    PullRequestComment,
    gh_environment,
    pull_request_number,
    run_gh,
)
from rankgate.cli import build_parser
from rankgate.cli.compare_command import STORE_VARIANT_FIELD
from rankgate.cli.eval_command import DEFAULT_WORST
from rankgate.cli.options import (
    check_common,
    first,
    gates_from,
    load_project_config,
    metrics_from,
    policy_from,
    settings_from,
    source_for,
)
from rankgate.compare import Comparison, Significance, compare
from rankgate.compare_unjudged import write_unjudged_pairs
from rankgate.errors import RankgateError, SpecError, UsageError
from rankgate.evaluate import Evaluation, evaluate
from rankgate.io import TrecSource
from rankgate.io.paths import shown
from rankgate.io.source import require_file
from rankgate.report.console import Style, render_comparison_verdict, render_verdict
from rankgate.report.html import render_comparison_html, render_eval_html
from rankgate.report.markdown import (
    PR_DETAIL_ROWS,
    PR_ROWS,
    render_comparison_pr_markdown,
    render_eval_pr_markdown,
)
from rankgate.spec import MetricSpec, parse_metric
from rankgate.store import is_store_url

__all__ = [
    "COMMENT_LIMIT",
    "INPUTS",
    "OUTPUTS",
    "ActionInputs",
    "Outcome",
    "main",
    "read_inputs",
    "run",
    "write_outputs",
]

#: GitHub refuses a comment body longer than 65,536 characters; this leaves room for the footer.
COMMENT_LIMIT = 60_000

#: Each action input, by the environment variable ``action.yml`` passes it in.
INPUTS = {
    "command": "INPUT_COMMAND",
    "sources": "INPUT_SOURCES",
    "baseline": "INPUT_BASELINE",
    "config": "INPUT_CONFIG",
    "args": "INPUT_ARGS",
    "delta-metric": "INPUT_DELTA_METRIC",
    "comment": "INPUT_COMMENT",
    "comment-author": "INPUT_COMMENT_AUTHOR",
    "delete-comment-on-pass": "INPUT_DELETE_COMMENT_ON_PASS",
    "github-token": "INPUT_GITHUB_TOKEN",
    "report-dir": "INPUT_REPORT_DIR",
    "artifact-name": "INPUT_ARTIFACT_NAME",
}

#: Every output the step sets, always (empty when it does not apply).
OUTPUTS = (
    "passed",
    "exit-code",
    "regressions",
    "gate-misses",
    "underpowered",
    "label-limited",
    "delta",
    "mean",
    "verdict",
    "html-report",
    "summary-file",
    "comment-file",
)

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3
COMMANDS = ("eval", "compare")
# Options whose work the action does itself (its reports) or cannot do in one step.
_MANAGED = (
    ("report_format", "--format"),
    ("output", "--output"),
    ("html", "--html"),
    ("per_query", "--per-query"),
    ("save_baseline", "--save-baseline"),
    ("mlflow", "--mlflow"),
)
_REPOSITORY = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
_ARTIFACT_NAME = re.compile(r"^[A-Za-z0-9_. -]{1,100}$")


@dataclass(frozen=True)
class ActionInputs:
    """The action's inputs, read and checked (see ``read_inputs``)."""

    command: str
    sources: tuple[str, ...]
    baseline: str | None
    config: str | None
    args: tuple[str, ...]
    delta_metric: MetricSpec | None
    comment: bool
    comment_author: str
    delete_comment_on_pass: bool
    github_token: str
    report_dir: Path
    artifact_name: str


def read_inputs(environ: Mapping[str, str]) -> ActionInputs:
    """The inputs from their ``INPUT_*`` variables: ``sources`` and ``args`` split as a shell
    would split them (quotes keep a path with spaces whole; nothing is expanded), booleans
    ``true`` or ``false``.

    Raises:
        UsageError: an input that is malformed, naming it and the value received.
    """

    def text(name: str, default: str = "") -> str:
        return environ.get(INPUTS[name], "").strip() or default

    command = text("command", "compare")
    if command not in COMMANDS:
        raise UsageError(f"input command: expected eval or compare, got {command!r}")
    metric = text("delta-metric")
    report_dir = text("report-dir")
    if not report_dir:
        temp = environ.get("RUNNER_TEMP", "").strip()
        report_dir = str(Path(temp) / "rankgate") if temp else "rankgate-report"
    return ActionInputs(
        command=command,
        sources=tuple(_words("sources", text("sources"))),
        baseline=text("baseline") or None,
        config=text("config") or None,
        args=tuple(_words("args", text("args"))),
        delta_metric=_metric(metric) if metric else None,
        comment=_flag("comment", text("comment", "false")),
        # Set but empty (comment-author: ''): any author's comment with the marker counts.
        comment_author=environ.get(INPUTS["comment-author"], DEFAULT_AUTHOR).strip(),
        delete_comment_on_pass=_flag(
            "delete-comment-on-pass", text("delete-comment-on-pass", "true")
        ),
        github_token=text("github-token"),
        report_dir=Path(report_dir).absolute(),
        artifact_name=text("artifact-name", "rankgate-report"),
    )


def _metric(text: str) -> MetricSpec:
    try:
        return parse_metric(text)
    except SpecError as problem:
        raise UsageError(f"input delta-metric: {problem}") from None


def _words(name: str, value: str) -> list[str]:
    try:
        return shlex.split(value)
    except ValueError as problem:
        raise UsageError(f"input {name}: {problem} in {value!r}") from None


def _flag(name: str, value: str) -> bool:
    lowered = value.lower()
    if lowered not in ("true", "false"):
        raise UsageError(f"input {name}: expected true or false, got {value!r}")
    return lowered == "true"


@dataclass(frozen=True)
class Outcome:
    """What a run found: the exit code, the reports, and the numbers the outputs carry."""

    exit_code: int
    markdown: str
    verdict: str
    html: str | None = None
    comment_markdown: str | None = None
    regressions: int = 0
    gate_misses: int = 0
    underpowered: int = 0
    label_limited: int = 0
    delta: float | None = None
    mean: float | None = None
    warnings: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        return self.exit_code == EXIT_OK


# --- scoring ---------------------------------------------------------------------------------------


def _arguments(inputs: ActionInputs) -> argparse.Namespace:
    """The inputs as ``rankgate eval``/``compare`` arguments, parsed by the command line's parser."""
    argv = [inputs.command]
    if inputs.command == "compare" and inputs.baseline is not None:
        argv.append(inputs.baseline)
    elif inputs.baseline is not None:
        raise UsageError("input baseline applies to command compare")
    argv += inputs.sources
    if inputs.config is not None:
        argv += ["--config", inputs.config]
    argv += [*inputs.args, "--no-progress"]
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said), contextlib.redirect_stdout(said):
            args = build_parser().parse_args(argv)
    except SystemExit as stop:
        lines = said.getvalue().strip().splitlines()
        if stop.code == 0:
            raise UsageError("input args: --help and --version do not run a check") from None
        raise UsageError(lines[-1] if lines else "input args: not understood") from None
    for name, option in _MANAGED:
        # A bare --mlflow parses to "": given, though falsy.
        if getattr(args, name, None) not in (None, False):
            raise UsageError(
                f"input args: {option} is the action's to set (it writes the job summary, the "
                "HTML report and the outputs); "
                + (
                    "save a baseline with `rankgate eval --save-baseline` in a step of its own"
                    if option == "--save-baseline"
                    else "log to MLflow with `rankgate ... --mlflow` in a step of its own"
                    if option == "--mlflow"
                    else "drop it"
                )
            )
    if args.engine != "local" or args.master is not None:
        raise UsageError("input args: the action scores with --engine local (no --master)")
    check_common(args)
    return args


def _score(inputs: ActionInputs) -> Outcome:
    args = _arguments(inputs)
    if inputs.command == "eval":
        evaluation, sources = _evaluate(args)
        return _eval_outcome(evaluation, sources, inputs.delta_metric)
    return _comparison_outcome(_compare(args), inputs.delta_metric)


def _evaluate(args: argparse.Namespace) -> tuple[Evaluation, list[str]]:
    config = load_project_config(args)
    settings = settings_from(args, config)
    traces: Any
    if args.run is not None or args.qrels is not None:
        if args.run is None or args.qrels is None or args.traces:
            raise UsageError("--run and --qrels go together, without input sources")
        for path in (args.run, args.qrels):
            require_file(path)
        traces, sources = TrecSource(args.run, args.qrels), [str(args.run), str(args.qrels)]
    elif not args.traces:
        raise UsageError("input sources: name the trace files to score")
    else:
        sources = [shown(text) for text in args.traces]
        traces = list(args.traces) if len(args.traces) > 1 else args.traces[0]
        traces = source_for(traces, args, settings)
    evaluation = evaluate(
        traces,
        metrics_from(args, config),
        gates_from(args, config),
        settings=settings,
        policy=policy_from(args, config),
        input_format=args.input_format,
        worst=first(args.worst, DEFAULT_WORST),
        labels=args.labels,
        labels_format=args.labels_format,
        queries=args.queries,
    )
    return evaluation, sources


def _compare(args: argparse.Namespace) -> Comparison:
    config = load_project_config(args)
    settings = settings_from(args, config)
    given: list[str] = list(args.sources)
    variant_field = args.variant_field
    if variant_field is None and len(given) == 1 and is_store_url(given[0]):
        variant_field = STORE_VARIANT_FIELD
    sides: list[Any]
    if variant_field is not None:
        if len(given) != 1 or args.baseline_value is None:
            raise UsageError(
                "with --variant-field, give one source holding every variant (no input "
                "baseline) and name the baseline's value with --baseline VALUE"
            )
        named = (args.baseline_value, *args.candidate_values) if args.candidate_values else ()
        sides = [
            source_for(given[0], args, settings, tuple(named)),
            args.baseline_value,
            *args.candidate_values,
        ]
    elif len(given) < 2:
        raise UsageError("name a baseline (input baseline) and a candidate (input sources)")
    elif args.qrels is not None:
        for path in (args.qrels, *given):
            require_file(Path(path))
        sides = [TrecSource(path, args.qrels) for path in given]
    else:
        sides = [source_for(side, args, settings) for side in given]
    significance = Significance(
        test=args.test,
        permutations=args.permutations,
        correction=args.correction,
        alpha=args.alpha,
        margin=args.margin,
        unjudged_tolerance=args.unjudged_tolerance,
        fail_on_label_limited=args.fail_on_label_limited,
    )
    baseline, *candidates = sides
    comparison = compare(
        baseline,
        *candidates,
        metrics=metrics_from(args, config),
        gates=gates_from(args, config),
        settings=settings,
        policy=policy_from(args, config),
        significance=significance,
        labels=args.labels,
        labels_format=args.labels_format,
        variant_field=variant_field,
        input_format=args.input_format,
        pairing=args.pairing,
        list_unjudged=args.unjudged_pairs is not None,
    )
    if args.unjudged_pairs is not None:
        write_unjudged_pairs(comparison.unjudged_pairs or (), args.unjudged_pairs)
    return comparison


def _eval_outcome(evaluation: Evaluation, sources: list[str], metric: MetricSpec | None) -> Outcome:
    warnings: list[str] = []
    mean = None
    if metric is not None:
        try:
            mean = evaluation.mean(metric)
        except KeyError:
            warnings.append(_not_computed(metric, evaluation.metrics))
    misses = sum(not o.passed for o in evaluation.gates)
    misses += sum(not c.passed for c in evaluation.coverage_checks)
    return Outcome(
        exit_code=EXIT_OK if evaluation.passed else EXIT_FAILED,
        markdown=render_eval_pr_markdown(evaluation, sources),
        comment_markdown=_fitted(
            lambda rows, detail: render_eval_pr_markdown(
                evaluation, sources, rows=rows, detail_rows=detail
            )
        ),
        verdict=_one_line(render_verdict(evaluation, Style(False))),
        html=render_eval_html(evaluation, sources),
        gate_misses=misses,
        mean=mean,
        warnings=tuple(warnings),
    )


def _comparison_outcome(comparison: Comparison, metric: MetricSpec | None) -> Outcome:
    warnings: list[str] = []
    delta = mean = None
    if metric is not None:
        first = comparison.results[0]
        if len(comparison.results) > 1:
            warnings.append(f"delta-metric: the delta shown is candidate {first.name}'s")
        try:
            cell = comparison.cell(metric, None, first.name)
            delta, mean = cell.delta, cell.candidate_mean
        except KeyError:
            warnings.append(_not_computed(metric, first.baseline.metrics))
    return Outcome(
        exit_code=EXIT_OK if comparison.passed else EXIT_FAILED,
        markdown=render_comparison_pr_markdown(comparison),
        comment_markdown=_fitted(
            lambda rows, detail: render_comparison_pr_markdown(
                comparison, rows=rows, detail_rows=detail
            )
        ),
        verdict=_one_line(render_comparison_verdict(comparison, Style(False))),
        html=render_comparison_html(comparison),
        regressions=len(comparison.regressions),
        gate_misses=sum(len(result.gate_failures) for result in comparison.results),
        underpowered=len(comparison.underpowered),
        label_limited=len(comparison.label_limited),
        delta=delta,
        mean=mean,
        warnings=tuple(warnings),
    )


def _one_line(text: str) -> str:
    """The verdict as one line: it quotes segment values, which may hold line breaks."""
    return " ".join(text.split())


def _not_computed(metric: MetricSpec, computed: Sequence[MetricSpec]) -> str:
    return (
        f"delta-metric {metric} was not computed (computed: {', '.join(map(str, computed))}); "
        "its outputs are empty"
    )


def _fitted(render: Callable[[int, int], str]) -> str:
    """The report with as many rows as fit a comment: fewer rows until it fits, then cut."""
    for rows, detail in ((PR_ROWS, PR_DETAIL_ROWS), (10, 30), (5, 0)):
        text = render(rows, detail)
        if len(text) <= COMMENT_LIMIT:
            return text
    # Only pathological input gets here (every row at its longest): keep the verdict and say so.
    cut = text[:COMMENT_LIMIT].rsplit("\n", 1)[0]
    return cut + "\n\n(cut to fit a comment: see the job summary and the HTML report)\n"


def _failure(command: str, code: int, message: str) -> Outcome:
    """The outcome of a run that could not give a verdict, with its one line in the summary."""
    kind = "internal error, a bug in rankgate" if code == EXIT_INTERNAL else "bad input or usage"
    flat = " ".join(message.split()).removeprefix("rankgate: error: ")[:1000].replace("`", "'")
    markdown = (
        f"**rankgate {command}: ERROR** (exit {code}: {kind}; no verdict)\n\n```text\n{flat}\n```\n"
    )
    return Outcome(exit_code=code, markdown=markdown, verdict=f"rankgate: error: {flat}")


# --- the runner's files ----------------------------------------------------------------------------


def write_outputs(path: Path, values: Mapping[str, str]) -> None:
    """Append ``values`` to the runner's output file, each as ``name<<DELIMITER``, value,
    ``DELIMITER``: a delimiter drawn at random and not found in the value."""
    with path.open("a", encoding="utf-8") as handle:
        for name, value in values.items():
            delimiter = f"ghadelimiter_{uuid.uuid4()}"
            while delimiter in value:
                delimiter = f"ghadelimiter_{uuid.uuid4()}"
            handle.write(f"{name}<<{delimiter}\n{value}\n{delimiter}\n")


def _outputs(outcome: Outcome, files: Mapping[str, Path | None]) -> dict[str, str]:
    def number(value: float | None) -> str:
        return "" if value is None else repr(float(value))

    def path(name: str) -> str:
        found = files.get(name)
        return "" if found is None else str(found)

    return {
        "passed": "true" if outcome.passed else "false",
        "exit-code": str(outcome.exit_code),
        "regressions": str(outcome.regressions),
        "gate-misses": str(outcome.gate_misses),
        "underpowered": str(outcome.underpowered),
        "label-limited": str(outcome.label_limited),
        "delta": number(outcome.delta),
        "mean": number(outcome.mean),
        "verdict": outcome.verdict,
        "html-report": path("html-report"),
        "summary-file": path("summary-file"),
        "comment-file": path("comment-file"),
    }


def _comment(
    inputs: ActionInputs,
    environ: Mapping[str, str],
    outcome: Outcome,
    gh: GhRunner,
) -> tuple[Path | None, list[str], list[str]]:
    """Post, update or delete the pull-request comment as the outcome asks: the comment file
    written (None when no comment is due), what was done, and warnings."""
    if not inputs.comment or outcome.exit_code not in (EXIT_OK, EXIT_FAILED):
        return None, [], []
    number = pull_request_number(environ)
    if number is None:
        return None, ["comment: not a pull-request event, so no comment"], []
    failed = outcome.exit_code == EXIT_FAILED
    body_file = None
    if failed:
        body_file = inputs.report_dir / "comment.md"
        body = f"{COMMENT_MARKER}\n{outcome.comment_markdown or outcome.markdown}"
        body_file.write_text(body + _footer(environ, inputs.artifact_name), encoding="utf-8")
    repository = environ.get("GITHUB_REPOSITORY", "")
    if not _REPOSITORY.match(repository):
        return body_file, [], [f"comment: GITHUB_REPOSITORY {repository!r} is not owner/name"]
    if not inputs.github_token:
        return body_file, [], ["comment: no github-token, so no comment"]
    client = PullRequestComment(
        repository,
        number,
        inputs.comment_author,
        gh_environment(environ, inputs.github_token),
        gh,
    )
    try:
        if body_file is not None:
            client.post(body_file)
        elif inputs.delete_comment_on_pass:
            client.delete(client.existing())
    except GhError as problem:
        # A fork's pull request runs with a read-only token: the summary still has the report.
        return body_file, client.done, [f"comment: {problem}"]
    return body_file, client.done, []


def _footer(environ: Mapping[str, str], artifact: str) -> str:
    server = environ.get("GITHUB_SERVER_URL", "").rstrip("/")
    repository = environ.get("GITHUB_REPOSITORY", "")
    run_id = environ.get("GITHUB_RUN_ID", "")
    if not (server.startswith("https://") and _REPOSITORY.match(repository) and run_id.isdigit()):
        return ""
    where = f"{server}/{repository}/actions/runs/{run_id}"
    named = f" (artifact `{artifact}`)" if _ARTIFACT_NAME.match(artifact) else ""
    return f"\nThe full report is on [the workflow run]({where}){named}.\n"


# --- the step --------------------------------------------------------------------------------------


def _annotation(kind: str, message: str) -> str:
    """A workflow command line, its message escaped so it stays one command."""
    data = message.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return f"::{kind} title=rankgate::{data}"


def run(
    environ: Mapping[str, str],
    gh: GhRunner = run_gh,
    stdout: Any = None,
    stderr: Any = None,
) -> int:
    """One run of the step, with the runner's environment; returns the exit code."""
    out = sys.stdout if stdout is None else stdout
    err = sys.stderr if stderr is None else stderr
    on_actions = environ.get("GITHUB_ACTIONS") == "true"
    resume = uuid.uuid4().hex
    if on_actions:
        # On both streams: the runner reads them apart, and either may be read first.
        for stream in (out, err):
            stream.write(f"::stop-commands::{resume}\n")
            stream.flush()
    command = environ.get(INPUTS["command"], "").strip() or "compare"
    inputs: ActionInputs | None = None
    try:
        inputs = read_inputs(environ)
        with contextlib.redirect_stdout(err):
            outcome = _score(inputs)
    except RankgateError as problem:
        outcome = _failure(command, EXIT_USAGE, str(problem))
    except OSError as problem:
        where = "" if problem.filename is None else f"{os.fsdecode(problem.filename)}: "
        outcome = _failure(command, EXIT_USAGE, f"{where}{problem.strerror or problem}")
    except Exception as problem:  # the step must still write its summary and outputs
        traceback.print_exc(file=err)
        outcome = _failure(command, EXIT_INTERNAL, f"{type(problem).__name__}: {problem}")
    report_dir = (
        inputs.report_dir
        if inputs is not None
        else Path(environ.get("RUNNER_TEMP") or ".") / "rankgate"
    )
    report_dir = report_dir.absolute()
    report_dir.mkdir(parents=True, exist_ok=True)
    files: dict[str, Path | None] = {"summary-file": report_dir / "summary.md"}
    (report_dir / "summary.md").write_text(outcome.markdown, encoding="utf-8")
    if outcome.html is not None:
        files["html-report"] = report_dir / "report.html"
        (report_dir / "report.html").write_text(outcome.html, encoding="utf-8")
    done: list[str] = []
    warnings = list(outcome.warnings)
    if inputs is not None:
        files["comment-file"], done, problems = _comment(inputs, environ, outcome, gh)
        warnings += problems
    summary = environ.get("GITHUB_STEP_SUMMARY", "")
    if summary:
        with Path(summary).open("a", encoding="utf-8") as handle:
            handle.write(outcome.markdown + "\n")
    output = environ.get("GITHUB_OUTPUT", "")
    if output:
        write_outputs(Path(output), _outputs(outcome, files))
    out.write(outcome.verdict + "\n")
    for line in done:
        out.write(line + "\n")
    for name in ("html-report", "summary-file", "comment-file"):
        if files.get(name) is not None:
            out.write(f"{name}: {files[name]}\n")
    if on_actions:
        out.write(f"::{resume}::\n")
        for warning in warnings:
            out.write(_annotation("warning", warning) + "\n")
        if outcome.exit_code != EXIT_OK:
            out.write(_annotation("error", _headline(command, outcome)) + "\n")
    else:
        for warning in warnings:
            err.write(f"rankgate: warning: {warning}\n")
    out.flush()
    return outcome.exit_code


def _headline(command: str, outcome: Outcome) -> str:
    """The error annotation: counts only, no text from the data."""
    if outcome.exit_code == EXIT_FAILED:
        parts = [
            f"{value} {name}"
            for name, value in (
                ("regression(s)", outcome.regressions),
                ("missed gate(s)", outcome.gate_misses),
                ("underpowered cell(s)", outcome.underpowered),
            )
            if value
        ]
        return f"rankgate {command} failed: {', '.join(parts) or 'see the job summary'}"
    return f"rankgate {command} could not run (exit {outcome.exit_code}): see the log"


def main() -> None:
    # Exit 0 and 1 are verdicts: a step that cannot write its files (a report directory that is
    # a file, a summary path that is a directory) must not read as one.
    try:
        code = run(os.environ)
    except OSError as problem:
        sys.stderr.write(f"rankgate: error: cannot write the step's files: {problem}\n")
        code = 2
    raise SystemExit(code)


if __name__ == "__main__":
    main()
