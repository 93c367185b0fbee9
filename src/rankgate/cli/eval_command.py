"""``rankgate eval``: score a trace file, check gates, report, and exit 0 / 1 / 2."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from rankgate.baseline import BASELINE_SUFFIX, baseline_options, save_baseline
from rankgate.cli.options import (
    add_kept_labels_options,
    add_mlflow_options,
    add_otel_options,
    add_query_set_options,
    add_report_options,
    add_scoring_options,
    add_store_options,
    check_common,
    first,
    gates_from,
    load_project_config,
    log_to_mlflow,
    metrics_from,
    policy_from,
    settings_from,
    source_for,
    source_notes,
)
from rankgate.cli.terminal import (
    EXIT_FAILED,
    EXIT_OK,
    ProgressBar,
    style_for,
    write_extra_report,
    write_report,
)
from rankgate.errors import UsageError
from rankgate.evaluate import evaluate
from rankgate.io import TrecSource
from rankgate.io.datasets import shown
from rankgate.io.source import require_file
from rankgate.labels import label_sources_of
from rankgate.report.console import Style, render_table, render_verdict
from rankgate.report.html import render_eval_html
from rankgate.report.json_report import eval_report, render_json
from rankgate.report.junit import render_eval_junit
from rankgate.report.markdown import render_eval_markdown, render_eval_pr_markdown
from rankgate.store.backends import is_store_url


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "eval",
        help="score recorded traces and check gates",
        description="Score recorded retrieval traces, check gates, and exit 0 (pass), "
        "1 (a gate failed) or 2 (bad input or usage).",
    )
    parser.add_argument(
        "traces",
        nargs="*",
        metavar="TRACES",
        help="trace files (JSON Lines, JSON array, Parquet, CSV/TSV; .gz ok), read together as "
        "one input; a folder, a quoted glob ('traces/**/*.parquet'), a hive-partitioned dataset, "
        "s3:// or gs:// URLs; - for stdin; or a trace store (sqlite:///FILE.db, "
        "postgresql://USER@HOST/DB)",
    )
    parser.add_argument(
        "--run", type=Path, help="TREC run file (with --qrels) instead of a trace file"
    )
    parser.add_argument("--qrels", type=Path, help="TREC qrels file for --run")
    add_kept_labels_options(
        parser,
        "labels kept apart from the traces, joined by query ID to traces without their own: "
        "a label file (one judgment or one query per record), *.qrels, or a store URL",
    )
    add_report_options(parser, ("table", "json", "markdown", "markdown-pr", "junit", "html"))
    parser.add_argument("--per-query", action="store_true", help="include per-query values (JSON)")
    parser.add_argument(
        "--save-baseline",
        type=Path,
        metavar="FILE.rgb",
        help="also save what a later `rankgate compare FILE.rgb CANDIDATE` needs (per-query "
        "values, segments, label digests, the scoring settings) as a small Parquet file",
    )
    parser.add_argument(
        "--worst",
        type=_count,
        metavar="N",
        help=f"HTML: list the N lowest-scoring queries per metric with their rankings "
        f"(default {DEFAULT_WORST})",
    )
    parser.add_argument(
        "--ppi",
        type=Path,
        metavar="SAMPLE",
        help="prediction-powered estimates: the metrics with judge labels on every query, "
        "corrected by the human labels of the declared random sample SAMPLE (the file `rankgate "
        "labels todo --sample-queries` wrote, graded); --labels gives both kinds of labels. "
        "Gates are decided on the corrected estimates",
    )
    add_scoring_options(parser)
    add_query_set_options(parser)
    add_store_options(parser, variants=True)
    add_otel_options(parser)
    add_mlflow_options(parser)
    engines = parser.add_argument_group("engines")
    engines.add_argument(
        "--engine",
        choices=("local", "spark"),
        default="local",
        help="score in this process (default) or on Spark: a Parquet file or folder, any URL "
        "Spark reads (needs rankgate[spark])",
    )
    engines.add_argument(
        "--master",
        metavar="URL",
        help="Spark master for --engine spark (default: the launcher's, else local[*])",
    )
    parser.set_defaults(handler=run)


DEFAULT_WORST = 20


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} is negative")
    return value


def run(args: argparse.Namespace) -> int:
    _check_combination(args)
    config = load_project_config(args)
    settings = settings_from(args, config)
    policy = policy_from(args, config)
    gates = gates_from(args, config)
    metrics = metrics_from(args, config)

    traces, sources = _traces(args)
    # The HTML report of an MLflow run lists the worst queries too.
    html = args.report_format == "html" or args.html is not None or args.mlflow is not None
    if args.engine == "spark":
        from rankgate.engines.spark import evaluate_path

        evaluation = evaluate_path(
            traces, metrics, gates, settings, policy, args.master, progress=not args.no_progress
        )
        return _report(args, evaluation, sources)
    given = traces
    traces = source_for(traces, args, settings)
    label = sources[0] if len(sources) == 1 else " + ".join(sources)
    bar = ProgressBar(label, sys.stderr, enabled=not args.no_progress)
    try:
        evaluation = evaluate(
            traces,
            metrics,
            gates,
            settings=settings,
            policy=policy,
            input_format=args.input_format,
            progress=bar.update,
            worst=first(args.worst, DEFAULT_WORST) if html else 0,
            labels=args.labels,
            labels_format=args.labels_format,
            queries=args.queries,
            **(baseline_options(metrics, gates, policy) if args.save_baseline else {}),
        )
    finally:
        bar.close()
    if args.ppi is not None:
        from rankgate.ppi_eval import evaluate_ppi

        bar = ProgressBar(
            f"{label} (judge and human labels)", sys.stderr, enabled=not args.no_progress
        )
        try:
            evaluation = evaluate_ppi(
                lambda: source_for(given, args, settings),
                metrics,
                gates,
                labels=args.labels,
                sample=args.ppi,
                settings=settings,
                policy=policy,
                input_format=args.input_format,
                labels_format=args.labels_format,
                evaluation=evaluation,
                progress=bar.update,
            )
        finally:
            bar.close()
    if args.save_baseline is not None:
        size = save_baseline(evaluation, args.save_baseline, sources=sources)
        sys.stderr.write(
            f"baseline of {evaluation.summary.scored:,} scored queries (of "
            f"{evaluation.summary.read:,} read) saved to {args.save_baseline} ({size / 1e6:.1f} MB)\n"
        )
    for note in source_notes(traces):
        sys.stderr.write(note + "\n")
    if evaluation.summary.read == 0 and (args.since is not None or args.until is not None):
        # Not an error (a quiet day is possible), but never to be mistaken for a full report.
        sys.stderr.write(f"{label}: no traces recorded in the --since/--until window\n")
    return _report(args, evaluation, sources)


def _report(args: argparse.Namespace, evaluation: Any, sources: list[str]) -> int:
    style = style_for(sys.stdout, args.color)
    if args.report_format == "json":
        text = render_json(eval_report(evaluation, sources, per_query=args.per_query))
    elif args.report_format == "markdown":
        text = render_eval_markdown(evaluation, sources)
    elif args.report_format == "markdown-pr":
        text = render_eval_pr_markdown(evaluation, sources)
    elif args.report_format == "junit":
        text = render_eval_junit(evaluation, sources)
    elif args.report_format == "html":
        text = render_eval_html(evaluation, sources)
    else:
        # A report written to a file never carries terminal colour codes.
        text = render_table(evaluation, sources, style if args.output is None else Style(False))
    if args.html is not None:
        # The artifact first: a path it cannot be written to is exit 2 before any verdict shows.
        write_extra_report(render_eval_html(evaluation, sources), args.html)
    log_to_mlflow(args, evaluation, sources)
    write_report(text, args.output, render_verdict(evaluation, style))
    return EXIT_OK if evaluation.passed else EXIT_FAILED


def _check_combination(args: argparse.Namespace) -> None:
    check_common(args)
    if args.per_query and args.report_format != "json":
        raise UsageError("--per-query applies to --format json")
    if (
        args.worst is not None
        and args.report_format != "html"
        and args.html is None
        and args.mlflow is None
    ):
        raise UsageError("--worst applies to HTML reports (--format html, --html PATH, --mlflow)")
    if "-" in args.traces:
        # Standard input can be read once: the traces would find it already consumed.
        for option, value in (("--labels", args.labels), ("--queries", args.queries)):
            if value is not None and str(value) == "-":
                raise UsageError(
                    f"standard input is named twice (traces and {option}); give {option} a file"
                )
    if args.labels is not None and args.run is not None:
        raise UsageError("--run/--qrels take their labels from the qrels file; drop --labels")
    if args.input_format is not None and (args.run is not None or args.qrels is not None):
        raise UsageError("--input-format does not apply to --run/--qrels (TREC files)")
    if args.master is not None and args.engine != "spark":
        raise UsageError("--master applies to --engine spark")
    if args.save_baseline is not None:
        if args.save_baseline.suffix.lower() != BASELINE_SUFFIX:
            raise UsageError(
                f"--save-baseline {args.save_baseline}: name it *{BASELINE_SUFFIX}, which is how "
                "compare recognises a baseline"
            )
        inputs = [*args.traces, *label_sources_of(args.labels or []), args.queries]
        inputs = [str(item) for item in inputs if item]
        target = args.save_baseline.resolve()
        if any(
            text != "-" and "://" not in str(text) and Path(text).resolve() == target
            for text in inputs
        ):
            raise UsageError(
                f"--save-baseline {args.save_baseline} is also an input of this run; "
                "save the baseline to a new file"
            )
        if not args.save_baseline.parent.is_dir():
            raise UsageError(
                f"--save-baseline {args.save_baseline}: no directory {args.save_baseline.parent}"
            )
    if args.ppi is not None:
        _check_ppi(args)
    if args.engine == "spark":
        if args.save_baseline is not None:
            raise UsageError("--save-baseline applies to the local engine")
        _check_spark(args)


def _check_ppi(args: argparse.Namespace) -> None:
    """What ``--ppi`` needs and what it does not combine with (yet)."""
    require_file(args.ppi)
    if args.labels is None:
        raise UsageError(
            "--ppi needs --labels: the graded sample and the judge's labels (repeat --labels)"
        )
    refused = [
        ("--engine spark", args.engine == "spark"),
        ("standard input", "-" in args.traces),
        ("--run/--qrels", args.run is not None),
        ("--save-baseline", args.save_baseline is not None),
        ("--mlflow", args.mlflow is not None),
        ("--gate-on pessimistic", args.gate_on == "pessimistic"),
        (
            f"--format {args.report_format}",
            args.report_format in ("html", "junit", "markdown-pr") or args.html is not None,
        ),
    ]
    for name, given in refused:
        if given:
            raise UsageError(
                f"--ppi does not combine with {name}: the traces are read three times and the "
                "estimates are reported as a table, JSON or Markdown"
            )


def _check_spark(args: argparse.Namespace) -> None:
    """What the Spark engine reads: Parquet, by path or URL, with the scoring options only."""
    refused = [
        ("--run/--qrels", args.run is not None or args.qrels is not None),
        ("--labels", args.labels is not None),
        ("--queries", args.queries is not None),
        ("--missing-trace zero", args.missing_trace == "zero"),
        ("--worst", args.worst is not None),
        ("standard input", "-" in args.traces),
        ("a trace store", any(is_store_url(text) for text in args.traces)),
        ("several inputs", len(args.traces) > 1),
        ("--since/--until", args.since is not None or args.until is not None),
        ("--variant", bool(args.variant)),
        ("--sample", args.sample is not None),
        ("--sql/--param", args.sql is not None or bool(args.param)),
        (
            "--otel-* options",
            bool(args.otel_span_kind or args.otel_query_id or args.otel_doc_id_key),
        ),
        ("--input-format other than parquet", args.input_format not in (None, "parquet")),
    ]
    for name, given in refused:
        if given:
            raise UsageError(
                f"--engine spark reads Parquet files and folders; {name} does not apply"
            )


def _traces(args: argparse.Namespace) -> tuple[Any, list[str]]:
    """What to read, and its names as reports show them (URLs without their passwords). Several
    paths are one input: a list, which ``open_source`` reads file after file."""
    if args.run is not None or args.qrels is not None:
        if args.run is None or args.qrels is None:
            raise UsageError("--run and --qrels go together")
        if args.traces:
            raise UsageError("give either a trace file or --run/--qrels, not both")
        for path in (args.run, args.qrels):
            require_file(path)
        return TrecSource(args.run, args.qrels), [str(args.run), str(args.qrels)]
    given: list[str] = args.traces
    if not given:
        raise UsageError("name a trace file (or - for stdin, or --run FILE --qrels FILE)")
    if len(given) > 1:
        for text in given:
            if text == "-" or is_store_url(text):
                raise UsageError(
                    f"{shown(text)} cannot be read together with other inputs: give it alone"
                )
        if args.input_format == "otlp":
            raise UsageError("--input-format otlp reads one export file or folder; give one path")
        return list(given), [shown(text) for text in given]
    return given[0], [shown(given[0])]
