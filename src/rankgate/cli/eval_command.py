"""``rankgate eval``: score a trace file, check gates, report, and exit 0 / 1 / 2."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from rankgate.cli.terminal import EXIT_FAILED, EXIT_OK, ProgressBar, style_for, write_stdout
from rankgate.config import DEFAULT_CONFIG_NAME, Config, load_config
from rankgate.errors import UsageError
from rankgate.evaluate import DEFAULT_METRICS, Settings, evaluate
from rankgate.gates import merge_gates, parse_gate
from rankgate.io import FORMATS, FieldMap, TrecSource
from rankgate.io.source import require_file
from rankgate.report.console import Style, render_table, render_verdict
from rankgate.report.json_report import eval_report, render_json


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "eval",
        help="score recorded traces and check gates",
        description="Score recorded retrieval traces, check gates, and exit 0 (pass), "
        "1 (a gate failed) or 2 (bad input or usage).",
    )
    parser.add_argument(
        "traces",
        nargs="?",
        help="trace file (JSON Lines, JSON array, Parquet, CSV/TSV; .gz ok), or - for stdin",
    )
    parser.add_argument(
        "--run", type=Path, help="TREC run file (with --qrels) instead of a trace file"
    )
    parser.add_argument("--qrels", type=Path, help="TREC qrels file for --run")
    parser.add_argument(
        "-m",
        "--metric",
        action="append",
        default=[],
        metavar="METRIC",
        help=f"metric(s) to compute, e.g. ndcg@5,10,20 (default: {', '.join(DEFAULT_METRICS)})",
    )
    parser.add_argument(
        "-g",
        "--gate",
        action="append",
        default=[],
        metavar="GATE",
        help="threshold on a mean, e.g. 'ndcg@10>=0.7' (repeatable)",
    )
    parser.add_argument(
        "--config", type=Path, help=f"config file (default: ./{DEFAULT_CONFIG_NAME} when present)"
    )
    parser.add_argument("--no-config", action="store_true", help=f"ignore ./{DEFAULT_CONFIG_NAME}")
    parser.add_argument(
        "--field",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="where a trace field lives, e.g. retrieved_ids=metadata.retrieval.ids",
    )
    parser.add_argument(
        "--relevance-threshold",
        "--rel",
        type=float,
        dest="relevance_threshold",
        metavar="GRADE",
        help="minimum grade that counts as relevant (default 1)",
    )
    parser.add_argument(
        "--empty-relevant",
        choices=("skip", "zero"),
        help="labeled queries with no relevant document: skip them (default) or score 0",
    )
    parser.add_argument(
        "--on-invalid",
        choices=("fail", "skip"),
        help="malformed records: stop with exit 2 (default) or skip and count them",
    )
    parser.add_argument(
        "--input-format", choices=FORMATS, help="override detection from the file name"
    )
    parser.add_argument(
        "--format",
        choices=("table", "json"),
        default="table",
        dest="report_format",
        help="report format (default: table)",
    )
    parser.add_argument(
        "-o",
        "--output",
        type=Path,
        help="write the report to this file; the terminal still gets the verdict",
    )
    parser.add_argument("--per-query", action="store_true", help="include per-query values (JSON)")
    parser.add_argument("--color", choices=("auto", "always", "never"), default="auto")
    parser.add_argument("--no-progress", action="store_true", help="never draw a progress bar")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    _check_combination(args)
    config = _config(args)
    settings = Settings(
        relevance_threshold=_first(args.relevance_threshold, config.relevance_threshold, 1.0),
        empty_relevant=_first(args.empty_relevant, config.empty_relevant, "skip"),
        on_invalid=_first(args.on_invalid, config.on_invalid, "fail"),
        fields=FieldMap.from_assignments({**config.fields, **_assignments(args.field)}),
    )
    gates = merge_gates(config.gates, [parse_gate(text) for text in args.gate])
    metrics = args.metric or list(config.metrics or DEFAULT_METRICS)

    traces, sources = _traces(args)
    label = sources[0] if len(sources) == 1 else " + ".join(sources)
    bar = ProgressBar(label, sys.stderr, enabled=not args.no_progress)
    try:
        evaluation = evaluate(
            traces,
            metrics,
            gates,
            settings=settings,
            input_format=args.input_format,
            progress=bar.update,
        )
    finally:
        bar.close()

    style = style_for(sys.stdout, args.color)
    if args.report_format == "json":
        text = render_json(eval_report(evaluation, sources, per_query=args.per_query))
    else:
        # A report written to a file never carries terminal colour codes.
        text = render_table(evaluation, sources, style if args.output is None else Style(False))
    if args.output is not None:
        try:
            args.output.write_text(text, encoding="utf-8")
        except OSError as problem:
            raise UsageError(f"{args.output}: cannot write report ({problem.strerror})") from None
        write_stdout(f"{render_verdict(evaluation, style)}\nreport written to {args.output}\n")
    else:
        write_stdout(text)
    return EXIT_OK if evaluation.passed else EXIT_FAILED


def _check_combination(args: argparse.Namespace) -> None:
    """Options that cannot mean anything together are an error, not silently ignored."""
    if args.config is not None and args.no_config:
        raise UsageError("--config and --no-config contradict each other")
    if args.per_query and args.report_format != "json":
        raise UsageError("--per-query applies to --format json")
    if args.input_format is not None and (args.run is not None or args.qrels is not None):
        raise UsageError("--input-format does not apply to --run/--qrels (TREC files)")
    seen: dict[tuple[str, str], str] = {}
    for text in args.gate:
        gate = parse_gate(text)
        key = (str(gate.metric), gate.op)
        if key in seen:
            raise UsageError(f"--gate {text!r} repeats --gate {seen[key]!r}; keep one of them")
        seen[key] = text


def _config(args: argparse.Namespace) -> Config:
    if args.config is not None:
        return load_config(args.config)
    default = Path(DEFAULT_CONFIG_NAME)
    if not args.no_config and default.is_file():
        return load_config(default)
    return Config()


def _traces(args: argparse.Namespace) -> tuple[Any, list[str]]:
    if args.run is not None or args.qrels is not None:
        if args.run is None or args.qrels is None:
            raise UsageError("--run and --qrels go together")
        if args.traces is not None:
            raise UsageError("give either a trace file or --run/--qrels, not both")
        for path in (args.run, args.qrels):
            require_file(path)
        return TrecSource(args.run, args.qrels), [str(args.run), str(args.qrels)]
    if args.traces is None:
        raise UsageError("name a trace file (or - for stdin, or --run FILE --qrels FILE)")
    return args.traces, [args.traces]


def _assignments(pairs: list[str]) -> dict[str, str]:
    assignments = {}
    for pair in pairs:
        name, sep, path = pair.partition("=")
        if not sep:
            raise UsageError(f"--field {pair!r}: expected NAME=PATH, e.g. retrieved_ids=meta.ids")
        assignments[name.strip()] = path.strip()
    return assignments


def _first(*values: Any) -> Any:
    return next(value for value in values if value is not None)
