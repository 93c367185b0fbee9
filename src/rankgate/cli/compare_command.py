"""``rankgate compare``: baseline against candidates on the same queries; exit 0, 1 or 2."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Any

from rankgate.baseline import is_saved_baseline
from rankgate.cli.options import (
    add_kept_labels_options,
    add_mlflow_options,
    add_otel_options,
    add_report_options,
    add_scoring_options,
    add_store_options,
    check_common,
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
    SourceProgress,
    style_for,
    write_extra_report,
    write_report,
)
from rankgate.compare import (
    AUTO_PAIRED_SHARE,
    PAIRINGS,
    TESTS,
    Comparison,
    Significance,
    compare,
)
from rankgate.compare_unjudged import DEFAULT_UNJUDGED_TOLERANCE, write_unjudged_pairs
from rankgate.errors import UsageError
from rankgate.evaluate import Settings
from rankgate.gates import GatePolicy
from rankgate.io import TrecSource
from rankgate.io.source import require_file
from rankgate.report.console import Style, render_comparison, render_comparison_verdict
from rankgate.report.html import render_comparison_html
from rankgate.report.json_report import comparison_report, render_json
from rankgate.report.junit import render_comparison_junit
from rankgate.report.markdown import (
    render_comparison_markdown,
    render_comparison_pr_markdown,
)
from rankgate.stats import CORRECTIONS, DEFAULT_PERMUTATIONS
from rankgate.store import is_store_url

# The store's column that names a trace's retrieval configuration.
STORE_VARIANT_FIELD = "variant"


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "compare",
        help="compare retrieval configurations (paired or traffic-split A/B)",
        description="Compare a baseline with one or more candidates: per metric and segment, the "
        "delta, its 95% interval, an adjusted p-value and a flag; paired on the queries they "
        "share, or unpaired when each served its own queries (--pairing). Exit 0 (nothing "
        "flagged), 1 (a regression or a missed gate) or 2 (bad input).",
    )
    parser.add_argument(
        "sources",
        nargs="+",
        metavar="SOURCE",
        help="BASELINE CANDIDATE [CANDIDATE ...] trace files (JSON Lines, JSON array, Parquet, "
        "CSV/TSV; .gz ok), or one file with --variant-field, or one trace store URL "
        "(its variant column splits the sides)",
    )
    variants = parser.add_argument_group("one file holding every variant")
    variants.add_argument(
        "--variant-field",
        metavar="FIELD",
        help="split the one trace file into sides by this field (e.g. config)",
    )
    variants.add_argument(
        "--baseline",
        metavar="VALUE",
        dest="baseline_value",
        help="the baseline's value of --variant-field (required with it)",
    )
    variants.add_argument(
        "--candidate",
        action="append",
        default=[],
        metavar="VALUE",
        dest="candidate_values",
        help="a candidate's value of --variant-field (repeatable; default: every other value)",
    )
    add_kept_labels_options(
        parser,
        "labels for the queries: a label file (one judgment or one query per record), "
        "a TREC qrels file (*.qrels), or a trace store URL",
    )
    parser.add_argument(
        "--ppi",
        type=Path,
        metavar="SAMPLE",
        help="also report prediction-powered deltas: each side scored with judge labels on every "
        "query, corrected by the human labels of the declared random sample SAMPLE (the file "
        "`rankgate labels todo --sample-queries` wrote, graded); --labels gives both kinds",
    )
    parser.add_argument(
        "--qrels",
        type=Path,
        metavar="FILE",
        help="the sources are TREC run files, labeled by this TREC qrels file",
    )
    tests = parser.add_argument_group("statistics")
    tests.add_argument(
        "--pairing",
        choices=PAIRINGS,
        default="auto",
        help="paired: the same queries on both sides (per-query deltas; a replay); unpaired: each "
        "side its own queries (Welch's t-test on the means; a traffic-split A/B test); auto "
        f"(default): paired when at least {AUTO_PAIRED_SHARE * 100:.0f}%% of the smaller side's queries "
        "are on both sides. Every report says which was used and why",
    )
    tests.add_argument(
        "--test",
        choices=TESTS,
        default="t",
        help="paired t-test (default) or sign-flip randomization test (paired comparisons; "
        "unpaired ones use Welch's t-test)",
    )
    tests.add_argument(
        "--permutations",
        type=int,
        default=DEFAULT_PERMUTATIONS,
        metavar="B",
        help=f"random sign flips for --test randomization (default {DEFAULT_PERMUTATIONS}; "
        "exact enumeration when 2^n <= B)",
    )
    tests.add_argument(
        "--correction",
        choices=CORRECTIONS,
        default="holm",
        help="multiple-comparison correction across metric x segment cells (default holm)",
    )
    tests.add_argument(
        "--alpha", type=float, default=0.05, help="significance level (default 0.05)"
    )
    tests.add_argument(
        "--margin",
        type=float,
        default=0.0,
        help="practical margin: flag only deltas beyond it, in the metric's units (default 0)",
    )
    tests.add_argument(
        "--min-detectable",
        type=float,
        metavar="DELTA",
        help="fail a cell that is not flagged unless the comparison could detect a change of "
        "DELTA (80%% power): an under-powered 'no regression' is not a pass (rankgate.toml: "
        "min_detectable, per segment too)",
    )
    unjudged = parser.add_argument_group("unjudged documents")
    unjudged.add_argument(
        "--unjudged-tolerance",
        type=float,
        default=DEFAULT_UNJUDGED_TOLERANCE,
        metavar="SHARE",
        help="how much less of its top k one arm may have judged than the other (mean judged@k, "
        f"a share of the top k; default {DEFAULT_UNJUDGED_TOLERANCE:g}) before a cell whose "
        "verdict changes with the unjudged documents' labels is label-limited",
    )
    unjudged.add_argument(
        "--fail-on-label-limited",
        action="store_true",
        help="exit 1 when a cell is label-limited (by default such cells are reported and pass)",
    )
    unjudged.add_argument(
        "--unjudged-pairs",
        metavar="FILE",
        help="write the unjudged (query, document) pairs that decide the label-limited cells to "
        "FILE as JSON Lines: query_id, doc_id, rank, side, candidate ('-': standard output)",
    )
    add_report_options(parser, ("table", "json", "markdown", "markdown-pr", "junit", "html"))
    parser.add_argument(
        "--per-query",
        action="store_true",
        help="include every paired query's values and deltas (JSON)",
    )
    add_scoring_options(parser)
    add_store_options(parser, variants=False)
    add_otel_options(parser)
    add_mlflow_options(parser)
    engines = parser.add_argument_group("engines")
    engines.add_argument(
        "--engine",
        choices=("local", "spark"),
        default="local",
        help="score in this process (default) or on Spark: Parquet files or folders, any URL "
        "Spark reads (needs rankgate[spark]); paired and unpaired alike",
    )
    engines.add_argument(
        "--master",
        metavar="URL",
        help="Spark master for --engine spark (default: the launcher's, else local[*])",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    check_common(args)
    if args.per_query and args.report_format != "json":
        raise UsageError("--per-query applies to --format json")
    if "-" in args.sources and args.labels == "-":
        # Standard input can be read once: one side would find it already consumed.
        raise UsageError(
            "standard input is named twice (a side and --labels); give --labels a file"
        )
    config = load_project_config(args)
    settings = settings_from(args, config)
    policy = policy_from(args, config)
    significance = Significance(
        test=args.test,
        permutations=args.permutations,
        correction=args.correction,
        alpha=args.alpha,
        margin=args.margin,
        unjudged_tolerance=args.unjudged_tolerance,
        fail_on_label_limited=args.fail_on_label_limited,
    )
    variant_field = args.variant_field
    if variant_field is None and len(args.sources) == 1 and is_store_url(args.sources[0]):
        variant_field = STORE_VARIANT_FIELD
    if args.master is not None and args.engine != "spark":
        raise UsageError("--master applies to --engine spark")
    _check_saved_baseline_use(args)
    if args.ppi is not None:
        _check_ppi(args, variant_field)
    if args.engine == "spark":
        return _report(args, _compare_on_spark(args, config, settings, policy, significance))
    sides: list[Any] = _sides(args, variant_field)
    if variant_field is not None:
        # Read only the variants compared, when they are named.
        named = (args.baseline_value, *args.candidate_values) if args.candidate_values else ()
        sides[0] = source_for(sides[0], args, settings, tuple(v for v in named if v))
    else:
        sides = [source_for(side, args, settings) for side in sides]
    if args.qrels is not None:
        if args.variant_field is not None or args.input_format is not None:
            raise UsageError(
                "--qrels reads TREC run files; it does not go with --variant-field "
                "or --input-format"
            )
        for path in (args.qrels, *args.sources):
            require_file(Path(path))
        sides = [TrecSource(path, args.qrels) for path in args.sources]
    baseline, *candidates = sides
    bar = SourceProgress(sys.stderr, enabled=not args.no_progress)
    try:
        comparison = compare(
            baseline,
            *candidates,
            metrics=metrics_from(args, config),
            gates=gates_from(args, config),
            settings=settings,
            policy=policy,
            significance=significance,
            labels=args.labels,
            labels_format=args.labels_format,
            variant_field=variant_field,
            input_format=args.input_format,
            pairing=args.pairing,
            # None without a bar: a store's source then never counts its window for one.
            progress=None if args.no_progress else bar.update,
            list_unjudged=args.unjudged_pairs is not None,
        )
    finally:
        bar.close()
    if args.ppi is not None:
        comparison = _with_ppi(args, comparison, settings, significance, metrics_from(args, config))
    if args.unjudged_pairs is not None:
        write_unjudged_pairs(comparison.unjudged_pairs or (), args.unjudged_pairs)
    for side in sides:
        for note in source_notes(side):
            sys.stderr.write(note + "\n")
    return _report(args, comparison)


def _report(args: argparse.Namespace, comparison: Comparison) -> int:
    """Render the comparison in the asked format, write it, and return the verdict's exit code."""
    style = style_for(sys.stdout, args.color)
    if args.report_format == "json":
        text = render_json(comparison_report(comparison, per_query=args.per_query))
    elif args.report_format == "markdown":
        text = render_comparison_markdown(comparison)
    elif args.report_format == "markdown-pr":
        text = render_comparison_pr_markdown(comparison)
    elif args.report_format == "junit":
        text = render_comparison_junit(comparison)
    elif args.report_format == "html":
        text = render_comparison_html(comparison)
    else:
        text = render_comparison(comparison, style if args.output is None else Style(False))
    if args.html is not None:
        # The artifact first: a path it cannot be written to is exit 2 before any verdict shows.
        write_extra_report(render_comparison_html(comparison), args.html)
    log_to_mlflow(args, comparison, [])
    write_report(text, args.output, render_comparison_verdict(comparison, style))
    return EXIT_OK if comparison.passed else EXIT_FAILED


def _compare_on_spark(
    args: argparse.Namespace,
    config: Any,
    settings: Settings,
    policy: GatePolicy,
    significance: Significance,
) -> Comparison:
    """The same comparison scored on Spark: Parquet inputs by path or URL, labels read here."""
    refused = [
        ("--qrels", args.qrels is not None),
        ("standard input", "-" in args.sources),
        ("a trace store", any(is_store_url(text) for text in args.sources)),
        ("--per-query", args.per_query),
        ("--input-format other than parquet", args.input_format not in (None, "parquet")),
        (
            "--otel-* options",
            bool(args.otel_span_kind or args.otel_query_id or args.otel_doc_id_key),
        ),
        ("--since/--until", args.since is not None or args.until is not None),
        ("--sample", args.sample is not None),
        ("--sql/--param", args.sql is not None or bool(args.param)),
    ]
    if args.unjudged_pairs is not None:
        raise UsageError(
            "--unjudged-pairs lists document IDs, and on --engine spark the rankings stay on the "
            "executors: list the pairs with --engine local (Spark computes the same label-limited "
            "cells and pair counts)"
        )
    for name, given in refused:
        if given:
            raise UsageError(
                f"--engine spark reads Parquet files and folders; {name} does not apply"
            )
    from rankgate.engines.spark_compare import compare_on_spark

    variant_field = args.variant_field
    if variant_field is not None:
        if len(args.sources) != 1 or args.baseline_value is None or not args.candidate_values:
            raise UsageError(
                "with --variant-field, name one input and the variants: --baseline A --candidate B"
            )
        baseline: Any = args.sources[0]
        candidates: list[Any] = [args.baseline_value, *args.candidate_values]
    else:
        if len(args.sources) < 2:
            raise UsageError("name a baseline and at least one candidate")
        baseline, *candidates = args.sources
    return compare_on_spark(
        baseline,
        *candidates,
        metrics=metrics_from(args, config),
        gates=gates_from(args, config),
        settings=settings,
        policy=policy,
        significance=significance,
        labels=args.labels,
        labels_format=args.labels_format,
        variant_field=variant_field,
        pairing=args.pairing,
        master=args.master,
        progress=not args.no_progress,
    )


def _check_saved_baseline_use(args: argparse.Namespace) -> None:
    """A saved baseline (``.rgb``) is the first source of a file comparison; say so up front
    for every use it cannot serve, rather than failing late or reading it as traces."""
    saved = [index for index, text in enumerate(args.sources) if is_saved_baseline(text)]
    if not saved:
        return
    name = args.sources[saved[0]]
    if saved != [0]:
        raise UsageError(
            f"{name} is a saved baseline: it goes first, and only once "
            f"(rankgate compare {name} CANDIDATE...)"
        )
    refused = [
        ("--engine spark", args.engine == "spark"),
        ("--variant-field", args.variant_field is not None),
        ("--qrels", args.qrels is not None),
    ]
    for option, given in refused:
        if given:
            raise UsageError(
                f"{name} is a saved baseline, compared with candidate trace files: {option} does "
                "not apply (compare against the baseline's traces instead)"
            )
    if args.unjudged_pairs is not None:
        raise UsageError(
            f"--unjudged-pairs lists the unjudged documents of both sides' rankings, and {name} "
            "keeps no rankings: compare against the baseline's traces, or list the candidate's "
            "pairs with `rankgate labels todo CANDIDATE`"
        )


def _check_ppi(args: argparse.Namespace, variant_field: str | None) -> None:
    require_file(args.ppi)
    if args.labels is None:
        raise UsageError(
            "--ppi needs --labels: the graded sample and the judge's labels (repeat --labels)"
        )
    refused = [
        ("--engine spark", args.engine == "spark"),
        ("--variant-field or a store of variants", variant_field is not None),
        ("--qrels", args.qrels is not None),
        ("standard input", "-" in args.sources),
        ("a saved baseline", any(is_saved_baseline(text) for text in args.sources)),
        ("--mlflow", args.mlflow is not None),
        (
            f"--format {args.report_format}",
            args.report_format not in ("table", "json") or args.html is not None,
        ),
    ]
    for name, given in refused:
        if given:
            raise UsageError(
                f"--ppi does not combine with {name}: each side is read again with each kind "
                "of label, and the deltas are reported in the table or JSON"
            )


def _with_ppi(
    args: argparse.Namespace,
    comparison: Comparison,
    settings: Settings,
    significance: Any,
    metrics: list[str],
) -> Comparison:
    from rankgate.ppi_eval import compare_ppi

    def side(text: str) -> tuple[str, Any]:
        return text, lambda: source_for(text, args, settings)

    found = compare_ppi(
        side(args.sources[0]),
        [side(text) for text in args.sources[1:]],
        metrics,
        labels=args.labels,
        sample=args.ppi,
        settings=settings,
        correction=significance.correction,
        alpha=significance.alpha,
        input_format=args.input_format,
        labels_format=args.labels_format,
    )
    return dataclasses.replace(comparison, ppi=found)


def _sides(args: argparse.Namespace, variant_field: str | None) -> list[str]:
    if variant_field is None:
        if args.baseline_value is not None or args.candidate_values:
            raise UsageError("--baseline and --candidate name values of --variant-field")
        if len(args.sources) < 2:
            raise UsageError(
                "name a baseline and at least one candidate (or one file with --variant-field)"
            )
        return list(args.sources)
    if len(args.sources) != 1:
        raise UsageError("with --variant-field, give one trace file holding every variant")
    if args.baseline_value is None:
        raise UsageError("with --variant-field, name the baseline's value with --baseline VALUE")
    return [args.sources[0], args.baseline_value, *args.candidate_values]
