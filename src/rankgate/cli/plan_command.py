"""``rankgate plan``: how many queries a decision needs, and the smallest change a run of a given
size could detect (topic-set-size design; ``rankgate.power``); exit 0, or 2 on bad input."""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from rankgate import __version__
from rankgate.cli.options import (
    add_labels_format_option,
    add_report_options,
    add_scoring_options,
    check_common,
    load_project_config,
    policy_from,
    settings_from,
)
from rankgate.cli.terminal import EXIT_OK, style_for, write_report
from rankgate.compare import PAIRINGS, compare
from rankgate.errors import InputError, UsageError
from rankgate.evaluate import evaluate
from rankgate.power import (
    DETECTABLE_POWER,
    Plan,
    PlanRow,
    Spread,
    check_request,
    plan,
    spreads_from_cells,
    spreads_from_evaluation,
    spreads_from_report,
)
from rankgate.report.console import Style, counted
from rankgate.report.json_report import render_json
from rankgate.spec import MetricSpec, parse_metric_list

# A rankgate JSON report starts with its schema version (``render_json`` writes it first).
_REPORT_START = re.compile(r'^\s*\{\s*"schema_version"\s*:')
_HEAD_BYTES = 4096
REFERENCES = (
    "topic-set-size design (Sakai, Information Retrieval Journal 2016; Webber, Moffat & Zobel, "
    "CIKM 2008): noncentral t, as statsmodels' TTestPower and TTestIndPower"
)


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "plan",
        help="queries needed to detect a change, and the smallest change a run could detect",
        description="Plan an evaluation from the per-query variance of a past one: for a metric, "
        "the queries a two-sided t-test needs to detect a change of --delta with probability "
        "--power at --alpha, paired (from the spread of per-query differences) and unpaired "
        "(two samples, from each arm's spread), overall and per segment; and the minimum "
        "detectable effect with --queries N (default: the queries observed). Exit 0, or 2 on "
        "bad input.",
    )
    parser.add_argument(
        "sources",
        nargs="+",
        metavar="SOURCE",
        help="a rankgate JSON report (`compare --format json`, or `eval --format json "
        "--per-query`; - for stdin), or trace files: one run (its variance; unpaired figures "
        "only), or BASELINE CANDIDATE (compared, paired when they share queries)",
    )
    wanted = parser.add_argument_group("the plan")
    wanted.add_argument(
        "--delta",
        type=float,
        metavar="D",
        help="the change to detect, in the metric's units (e.g. 0.02); without it only the "
        "minimum detectable effect is shown",
    )
    wanted.add_argument(
        "--power",
        type=float,
        default=DETECTABLE_POWER,
        help=f"probability of detecting it (default {DETECTABLE_POWER:g})",
    )
    wanted.add_argument(
        "--alpha",
        type=float,
        help="two-sided significance level (default: a compare report's per-cell level, the "
        "one its 'could detect' figures use, alpha / cells; else 0.05)",
    )
    wanted.add_argument(
        "--queries",
        type=int,
        metavar="N",
        help="the minimum detectable effect with N queries (paired) or N per arm (unpaired) "
        "(default: the queries observed)",
    )
    wanted.add_argument(
        "--candidate",
        metavar="NAME",
        help="the candidate of a compare report that compares several",
    )
    wanted.add_argument(
        "--pairing",
        choices=PAIRINGS,
        help="traces: how BASELINE CANDIDATE are compared (default auto, as compare)",
    )
    parser.add_argument(
        "--labels",
        metavar="FILE",
        help="traces: labels kept apart from them (a label file, *.qrels, or a store URL)",
    )
    add_labels_format_option(parser)
    add_report_options(parser, ("table", "json"))
    add_scoring_options(parser)
    # The shared options, as they read here: one metric, and no gate or HTML (refused if given).
    for action in parser._actions:
        if action.dest == "metric":
            action.help = "the metric to plan for, e.g. ndcg@10 (one; required)"
        elif action.dest in _NOT_HERE:
            action.help = argparse.SUPPRESS
    parser.set_defaults(handler=run)


# Shared options that mean nothing to a plan: hidden from its help.
_NOT_HERE = ("gate", "html", "gate_on", "min_coverage", "strict_segments")


def run(args: argparse.Namespace) -> int:
    check_common(args)
    if args.html is not None:
        raise UsageError("--html: plan writes a table or JSON (--format json)")
    if args.gate:
        raise UsageError("plan checks no gates; drop --gate")
    metric = _one_metric(args.metric)
    alpha = args.alpha if args.alpha is not None else DEFAULT_ALPHA
    check_request(args.delta, args.power, alpha, args.queries)
    report = _report_in(args.sources)
    if report is not None:
        _refuse_trace_options(args)
        try:
            spreads, source, notes = spreads_from_report(
                report, metric, source=args.sources[0], candidate=args.candidate
            )
            if args.alpha is None:
                alpha, notes = _compare_level(report, metric, notes)
                check_request(args.delta, args.power, alpha, args.queries)
        except (AttributeError, TypeError, KeyError, ValueError, IndexError) as problem:
            raise InputError(
                args.sources[0], None, f"not a rankgate JSON report this version reads ({problem})"
            ) from None
    else:
        spreads, source, notes = _spreads_from_traces(args, metric)
    try:
        found = plan(
            spreads,
            metric,
            delta=args.delta,
            power=args.power,
            alpha=alpha,
            queries=args.queries,
            source=source,
            notes=notes,
        )
    except (ValueError, OverflowError, ZeroDivisionError) as problem:
        raise InputError(
            source or args.sources[0],
            None,
            f"nothing sensible to plan from these figures ({problem})",
        ) from None
    if args.report_format == "json":
        text = render_json(
            {"tool": {"name": "rankgate", "version": __version__}, **found.to_dict()}
        )
    else:
        style = style_for(sys.stdout, args.color)
        text = render_plan(found, style if args.output is None else Style(False))
    write_report(text, args.output, _headline(found))
    return EXIT_OK


DEFAULT_ALPHA = 0.05


def _compare_level(report: dict[str, Any], metric: MetricSpec, notes: Any) -> tuple[float, Any]:
    """The per-cell level a compare report's own "could detect" figures use, so that plan and
    compare agree by default; 0.05 for any other report."""
    levels = {
        cell.get("detectable_alpha")
        for cell in report.get("cells") or ()
        if isinstance(cell, dict) and cell.get("metric") == str(metric)
    }
    levels.discard(None)
    if len(levels) != 1:
        return DEFAULT_ALPHA, notes
    (level,) = levels
    if not isinstance(level, (int, float)) or isinstance(level, bool) or not 0 < level < 1:
        return DEFAULT_ALPHA, notes
    note = (
        f"alpha {level:.4g} per cell: the level compare's own 'could detect' figures use "
        "(alpha / cells); --alpha sets another"
    )
    return float(level), [*notes, note]


def _one_metric(texts: list[str]) -> MetricSpec:
    specs = parse_metric_list(texts)
    if len(specs) != 1:
        named = ", ".join(str(spec) for spec in specs) or "none"
        raise UsageError(f"plan takes one metric (--metric ndcg@10), got {named}")
    return specs[0]


def _report_in(sources: list[str]) -> dict[str, Any] | None:
    """The parsed JSON report when the one source is one, else None (trace files)."""
    first = sources[0]
    if first == "-":
        text = sys.stdin.read()
        if not _REPORT_START.match(text):
            raise UsageError(
                "standard input is not a rankgate JSON report; give trace files by path"
            )
    else:
        path = Path(first)
        if not path.is_file():
            return None
        with path.open("rb") as handle:
            head = handle.read(_HEAD_BYTES).decode("utf-8", errors="replace")
        if not _REPORT_START.match(head):
            return None
        try:
            text = path.read_text("utf-8")
        except UnicodeDecodeError:
            raise InputError(first, None, "not a rankgate JSON report (not UTF-8)") from None
    if len(sources) > 1:
        raise UsageError("plan reads one JSON report at a time")
    try:
        parsed = json.loads(text)
    except RecursionError:
        raise InputError(first, None, "not a rankgate JSON report (nested too deep)") from None
    except json.JSONDecodeError as problem:
        raise InputError(
            first, None, f"not valid JSON ({problem.msg} at line {problem.lineno})"
        ) from None
    if not isinstance(parsed, dict):
        raise InputError(first, None, "not a rankgate JSON report")
    return parsed


def _refuse_trace_options(args: argparse.Namespace) -> None:
    """Options that choose how traces are scored mean nothing for a report already scored."""
    given = [
        name
        for name, value in (
            ("--labels", args.labels),
            ("--pairing", args.pairing),
            ("--segment-by", args.segment_by),
            ("--field", args.field),
            ("--doc-id", args.doc_id),
            ("--relevance-threshold", args.relevance_threshold),
            ("--empty-relevant", args.empty_relevant),
            ("--input-format", args.input_format),
            ("--config", args.config),
        )
        if value
    ]
    if given:
        raise UsageError(
            f"{given[0]} applies to trace files; a JSON report is already scored (its "
            "settings are the ones it was written with)"
        )


def _spreads_from_traces(
    args: argparse.Namespace, metric: MetricSpec
) -> tuple[list[Spread], str, list[str]]:
    """One run scored with ``evaluate``, or a baseline and a candidate with ``compare``."""
    if args.candidate is not None:
        raise UsageError(
            "--candidate names a side of a compare report; traces are BASELINE CANDIDATE"
        )
    if len(args.sources) > 2:
        raise UsageError("give one run, or a baseline and a candidate (two trace sources)")
    config = load_project_config(args)
    settings = settings_from(args, config)
    policy = policy_from(args, config)
    if len(args.sources) == 1:
        if args.pairing is not None:
            raise UsageError("--pairing applies to a baseline and a candidate (two trace sources)")
        evaluation = evaluate(
            args.sources[0],
            [metric],
            settings=settings,
            policy=policy,
            input_format=args.input_format,
            labels=args.labels,
            labels_format=args.labels_format,
        )
        return (
            spreads_from_evaluation(evaluation, metric),
            f"{args.sources[0]} (one run)",
            ["one run: both arms are assumed to vary as it did; paired figures need a comparison"],
        )
    comparison = compare(
        args.sources[0],
        args.sources[1],
        metrics=[metric],
        settings=settings,
        policy=policy,
        labels=args.labels,
        labels_format=args.labels_format,
        input_format=args.input_format,
        pairing=args.pairing or "auto",
    )
    result = comparison.results[0]
    source = f"{args.sources[0]} vs {args.sources[1]} ({result.design}: {result.pairing.reason})"
    return spreads_from_cells(result.cells, metric), source, []


# --- the table ------------------------------------------------------------------------------


def render_plan(found: Plan, style: Style) -> str:
    """The terminal table: one row per group and design, then notes and the method."""
    at = (
        "the queries observed"
        if found.queries is None
        else f"{counted(found.queries, 'query')} (per arm when unpaired)"
    )
    target = f"to detect |Δ| = {found.delta:g}" if found.delta is not None else "no --delta given"
    lines = [
        style.bold("rankgate plan") + f"  {found.metric} · {found.source}",
        f"two-sided t-test at alpha {found.alpha:g}, {found.power:.0%} power · {target} · could "
        f"detect: the smallest |Δ| with {at}",
        "",
    ]
    rows: list[tuple[str, ...]] = [
        ("group", "design", "queries", "sd", "queries needed", "could detect")
    ]
    previous = None
    for row in found.rows:
        rows.append(
            (
                row.group if row.group != previous else "",
                row.design,
                _counts(row.baseline_queries, row.candidate_queries, row.design),
                "n/a" if row.sd is None else f"{row.sd:.4f}",
                _needed(row, found.delta),
                "n/a" if row.detectable is None else f"≥{row.detectable:.4f}",
            )
        )
        previous = row.group
    widths = [max(len(cells[i]) for cells in rows) for i in range(len(rows[0]))]
    for number, cells in enumerate(rows):
        text = "  " + "  ".join(
            cell.rjust(widths[i]) if i >= 2 else cell.ljust(widths[i])
            for i, cell in enumerate(cells)
        )
        lines.append(style.dim(text.rstrip()) if number == 0 else text.rstrip())
    for row in found.rows:
        if row.note is not None:
            lines.append(f"  {row.group} ({row.design}): {row.note}")
    lines.append("")
    lines += [f"note: {note}" for note in found.notes]
    if any(row.design == "paired" for row in found.rows):
        lines.append(style.dim("paired: from the variance of the per-query differences"))
    lines.append(
        style.dim(
            "unpaired: queries per arm with equal arms, from each arm's variance (Welch's "
            "noncentrality)"
        )
    )
    lines.append(style.dim(f"method: {REFERENCES}"))
    return "\n".join(lines) + "\n"


def _counts(baseline: int, candidate: int, design: str) -> str:
    if design == "paired":
        return f"{baseline:,}"
    return f"{baseline:,}+{candidate:,}"


def _needed(row: PlanRow, delta: float | None) -> str:
    if delta is None:
        return "-"
    if row.queries_needed is None:
        return "n/a"
    unit = "" if row.design == "paired" else " per arm"
    return f"{row.queries_needed:,}{unit}"


def _headline(found: Plan) -> str:
    """One line for the terminal when the plan goes to a file: the overall paired figure if
    there is one, else the unpaired."""
    overall = [row for row in found.rows if row.segment is None]
    row = overall[0]
    if found.delta is not None and row.queries_needed is not None:
        unit = "paired queries" if row.design == "paired" else "queries per arm"
        return (
            f"{found.metric}: {row.queries_needed:,} {unit} to detect {found.delta:g} at "
            f"{found.power:.0%} power (overall)"
        )
    detectable = "n/a" if row.detectable is None else f"{row.detectable:.4f}"
    return f"{found.metric}: could detect |Δ| >= {detectable} ({row.design}, overall)"
