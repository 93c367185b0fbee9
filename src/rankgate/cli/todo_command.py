"""``rankgate labels todo``: the (query, document) pairs to judge next, in a file annotators use."""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
from pathlib import Path
from typing import Any

from rankgate.cli.options import (
    add_labels_format_option,
    add_otel_options,
    add_scoring_options,
    add_store_options,
    gates_from,
    load_project_config,
    metrics_from,
    policy_from,
    settings_from,
    source_for,
    source_notes,
)
from rankgate.cli.terminal import EXIT_OK, SourceProgress
from rankgate.compare import AUTO_PAIRED_SHARE, PAIRINGS, Significance
from rankgate.compare_unjudged import DEFAULT_UNJUDGED_TOLERANCE
from rankgate.errors import UsageError
from rankgate.labels_todo import DEFAULT_DEPTH, TodoList, labels_todo
from rankgate.report.console import counted
from rankgate.spec import MAX_CUTOFF
from rankgate.stats import CORRECTIONS
from rankgate.store import is_store_url

__all__ = ["add_parser", "render_summary", "todo_text"]

FORMATS = ("jsonl", "csv", "label-studio")
FORMAT_BY_SUFFIX = {".jsonl": "jsonl", ".ndjson": "jsonl", ".csv": "csv", ".json": "label-studio"}
CSV_COLUMNS = ("query_id", "query", "document_id", "grade", "priority", "rank", "ranks", "reason")
# The store's column that names a trace's retrieval configuration (as compare reads it).
STORE_VARIANT_FIELD = "variant"


def add_parser(label_commands: Any) -> None:
    parser = label_commands.add_parser(
        "todo",
        help="list the unjudged (query, document) pairs worth judging next",
        description="Pool the unjudged documents of the top --depth of every ranking of the "
        "sources and list them in the order judging them helps most: with two or more sources "
        "(a baseline and candidates, compared as `rankgate compare` does), first the pairs that "
        "decide a label-limited cell (a document in one arm's top k and not the other's), then "
        "by rank (NDCG's discount), then pairs of segments short of their minimums. Or, with "
        "--sample-queries, a stratified random sample of queries. The file (JSON Lines, CSV, or "
        "Label Studio tasks) leaves 'grade' empty; filled in, it is a label file that `rankgate "
        "label import` and --labels read as it is. Exit 0, or 2 on bad input.",
        allow_abbrev=False,
    )
    budget = add_pool_arguments(parser)
    budget.add_argument(
        "--sample-queries",
        type=positive_whole,
        metavar="N",
        help="list the pooled pairs of a stratified random sample of N queries of the first "
        "source instead (strata: the --segment-by fields; seeded by --seed): coverage grows "
        "without favouring the queries a ranker finds easy",
    )
    budget.add_argument(
        "-o",
        "--output",
        required=True,
        metavar="FILE",
        help="where to write the pairs ('-': standard output); the name's extension chooses the "
        "format: .jsonl, .csv, .json (Label Studio tasks)",
    )
    budget.add_argument(
        "--format",
        choices=FORMATS,
        dest="todo_format",
        help="jsonl (default), csv, or label-studio (a JSON list of tasks to import)",
    )
    parser.set_defaults(handler=run)


def add_pool_arguments(parser: argparse.ArgumentParser) -> Any:
    """The sources, how deep and how many pairs to pool, the labels already held, the comparison
    that finds label-limited cells, and the reading options: what ``labels todo`` and ``labels
    judge`` share. Returns the "what to list" group for the caller's own options."""
    parser.add_argument(
        "sources",
        nargs="+",
        metavar="SOURCE",
        help="trace files or a trace store URL; several: BASELINE CANDIDATE [CANDIDATE ...]; "
        "one file with --variant-field; one store URL with several variants is split by its "
        "variant column",
    )
    budget = parser.add_argument_group("what to list")
    budget.add_argument(
        "--depth",
        type=_cutoff,
        default=DEFAULT_DEPTH,
        metavar="K",
        help=f"pool the top K of every ranking (default {DEFAULT_DEPTH})",
    )
    budget.add_argument(
        "--budget",
        type=positive_whole,
        metavar="N",
        help="list at most N pairs (default: the whole pool)",
    )
    variants = parser.add_argument_group("one file holding every variant")
    variants.add_argument("--variant-field", metavar="FIELD", help="split the one file by FIELD")
    variants.add_argument(
        "--baseline", metavar="VALUE", dest="baseline_value", help="the baseline's value"
    )
    variants.add_argument(
        "--candidate",
        action="append",
        default=[],
        metavar="VALUE",
        dest="candidate_values",
        help="a candidate's value (repeatable; default: every other value)",
    )
    parser.add_argument(
        "--labels",
        metavar="FILE",
        help="labels for the queries: a label file, a TREC qrels file, or a trace store URL",
    )
    add_labels_format_option(parser)
    tests = parser.add_argument_group("the comparison that finds label-limited cells")
    tests.add_argument(
        "--pairing",
        choices=PAIRINGS,
        default="auto",
        help=f"as in compare (default auto: paired when {AUTO_PAIRED_SHARE * 100:.0f}%% of the "
        "smaller side's queries are shared)",
    )
    tests.add_argument(
        "--correction", choices=CORRECTIONS, default="holm", help="as in compare (default holm)"
    )
    tests.add_argument("--alpha", type=float, default=0.05, help="as in compare (default 0.05)")
    tests.add_argument("--margin", type=float, default=0.0, help="as in compare (default 0)")
    tests.add_argument(
        "--unjudged-tolerance",
        type=float,
        default=DEFAULT_UNJUDGED_TOLERANCE,
        metavar="SHARE",
        help=f"as in compare (default {DEFAULT_UNJUDGED_TOLERANCE:g})",
    )
    add_scoring_options(parser)
    add_store_options(parser, variants=False)
    add_otel_options(parser)
    return budget


def positive_whole(text: str) -> int:
    """An argument that must be a whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return value


def _cutoff(text: str) -> int:
    value = positive_whole(text)
    if value > MAX_CUTOFF:
        raise argparse.ArgumentTypeError(f"expected a depth from 1 to {MAX_CUTOFF:,}, got {text}")
    return value


def run(args: argparse.Namespace) -> int:
    if args.config is not None and args.no_config:
        raise UsageError("--config and --no-config contradict each other")
    if args.labels_format is not None and args.labels is None:
        raise UsageError("--labels-format describes a --labels file; give --labels FILE")
    todo_format = _format(args)
    _check_writable(args.output, [*args.sources, *([args.labels] if args.labels else [])])
    todo, sources = pool_from_args(args, sample_queries=args.sample_queries)
    text = todo_text(todo, todo_format)
    _write(text, args.output)
    for source in sources:
        for note in source_notes(source):
            sys.stderr.write(note + "\n")
    where = "standard output" if args.output == "-" else args.output
    summary = render_summary(todo) + f"wrote {counted(len(todo.pairs), 'pair')} to {where}\n"
    (sys.stderr if args.output == "-" else sys.stdout).write(summary)
    return EXIT_OK


def pool_from_args(args: argparse.Namespace, *, sample_queries: int | None = None) -> Any:
    """The pool the arguments of ``add_pool_arguments`` ask for: ``(TodoList, sources read)``."""
    config = load_project_config(args)
    settings = settings_from(args, config)
    policy = policy_from(args, config)
    significance = Significance(
        correction=args.correction,
        alpha=args.alpha,
        margin=args.margin,
        unjudged_tolerance=args.unjudged_tolerance,
    )
    variant_field = args.variant_field
    if variant_field is None and len(args.sources) == 1 and is_store_url(args.sources[0]):
        variant_field = _store_variants(args, settings)
    if variant_field is None:
        if args.baseline_value is not None or args.candidate_values:
            raise UsageError("--baseline and --candidate name values of --variant-field")
        sources = [source_for(text, args, settings) for text in args.sources]
        for text in args.sources:
            if text != "-" and not is_store_url(text) and args.input_format != "otlp":
                from rankgate.io.source import require_file

                require_file(Path(text))
    else:
        if len(args.sources) != 1:
            raise UsageError("with --variant-field, give one trace file holding every variant")
        named = (args.baseline_value, *args.candidate_values) if args.candidate_values else ()
        data = source_for(args.sources[0], args, settings, tuple(v for v in named if v))
        if args.baseline_value is None:
            raise UsageError(
                "with --variant-field, name the baseline's value with --baseline VALUE"
            )
        sources = [data, args.baseline_value, *args.candidate_values]
    bar = SourceProgress(sys.stderr, enabled=not args.no_progress)
    try:
        todo = labels_todo(
            *sources,
            labels=args.labels,
            labels_format=args.labels_format,
            variant_field=variant_field,
            input_format=args.input_format,
            metrics=metrics_from(args, config),
            gates=gates_from(args, config),
            settings=settings,
            policy=policy,
            significance=significance,
            pairing=args.pairing,
            depth=args.depth,
            budget=args.budget,
            sample_queries=sample_queries,
            progress=bar.update,
        )
    finally:
        bar.close()
    return todo, sources


def _store_variants(args: argparse.Namespace, settings: Any) -> str | None:
    """A store URL alone is compared across its variant column when it holds several (as
    compare does); a store of one variant is pooled as one side."""
    if args.baseline_value is not None or args.candidate_values:
        return STORE_VARIANT_FIELD
    return None


def _format(args: argparse.Namespace) -> str:
    implied = None if args.output == "-" else FORMAT_BY_SUFFIX.get(Path(args.output).suffix.lower())
    if args.todo_format is None:
        return implied or "jsonl"
    if implied is not None and implied != args.todo_format:
        raise UsageError(
            f"--output {args.output} names a {implied} file, but --format is {args.todo_format}: "
            "change one of them"
        )
    return str(args.todo_format)


def todo_text(todo: TodoList, todo_format: str) -> str:
    """The pairs as JSON Lines, CSV or Label Studio tasks."""
    records = list(todo.records())
    if todo_format == "jsonl":
        # ASCII with escapes: IDs round-trip exactly, whatever they hold (lone surrogates too).
        return "".join(json.dumps(record) + "\n" for record in records)
    if todo_format == "csv":
        out = io.StringIO()
        # The default "\r\n" terminator makes the writer quote any field holding \r or \n.
        writer = csv.writer(out)
        writer.writerow(CSV_COLUMNS)
        for record in records:
            ranks = ";".join(f"{arm}={rank}" for arm, rank in record["ranks"].items())
            writer.writerow(
                [
                    # IDs go out exactly as traced: the filled file must name the same pairs.
                    record["query_id"],
                    _cell(record.get("query", "")),
                    record["document_id"],
                    "",
                    record["priority"],
                    record["rank"],
                    _cell(ranks),
                    _cell(record["reason"]),
                ]
            )
        return out.getvalue()
    tasks = []
    for record in records:
        data = {key: value for key, value in record.items() if key != "grade"}
        tasks.append({"data": data})
    return json.dumps(tasks, indent=1) + "\n"


def _cell(text: Any) -> str:
    """Free text a spreadsheet will not run as a formula (query text is untrusted). IDs are
    left exact: a changed ID would label another document."""
    value = str(text)
    return "'" + value if value[:1] in ("=", "+", "-", "@", "\t", "\r") else value


def _check_writable(output: str, inputs: list[str]) -> None:
    """Refuse an output that cannot be written, or that would overwrite an input, before the
    sources are read."""
    if output == "-":
        return
    path = Path(output)
    if not output:
        raise UsageError("-o/--output needs a file name ('-' for standard output)")
    for given in inputs:
        if given != "-" and "://" not in given and Path(given).resolve() == path.resolve():
            raise UsageError(
                f"-o {output} is also an input of this run; write the pairs to a new file"
            )
    if path.suffix.lower() in (".gz", ".bz2", ".xz", ".zst", ".zip"):
        raise UsageError(f"-o {output}: the pairs are written uncompressed; drop {path.suffix}")
    if path.is_dir():
        raise UsageError(f"cannot write the pairs to {output}: it is a directory")
    if not path.parent.is_dir():
        raise UsageError(f"cannot write the pairs to {output}: no directory {path.parent}")


def _write(text: str, output: str) -> None:
    if output == "-":
        sys.stdout.write(text)
        return
    try:
        Path(output).write_text(text, encoding="utf-8")
    except OSError as problem:
        raise UsageError(f"cannot write the pairs to {output}: {problem.strerror}") from None


def render_summary(todo: TodoList) -> str:
    """What the list buys, in lines: the pool, judged@k per side now and after, the cells."""
    lines = [
        f"pooled {counted(todo.pooled, 'unjudged pair')} from the top {todo.depth} of every "
        "ranking" + (f"; budget {todo.budget:,}" if todo.budget is not None else "")
    ]
    if todo.sampled_queries is not None:
        strata = ", ".join(f"{name} {count}" for name, count in todo.sample_strata.items())
        lines.append(
            f"sampled {counted(len(todo.sampled_queries), 'query')} at random (seed {todo.seed}; "
            f"per stratum: {strata or 'none'})"
        )
        if todo.sampled_listed < len(todo.sampled_queries):
            lines.append(
                f"the budget took {todo.sampled_listed:,} of them, whole queries in sample order: "
                "raise --budget or lower --sample-queries to keep the sample whole"
            )
    elif todo.comparison is not None:
        rest = len(todo.pairs) - todo.decisive
        lines.append(
            f"{counted(todo.decisive, 'pair')} listed decide label-limited cells"
            + (f"; {rest:,} more by rank" if rest else "")
        )
    for side in todo.sides:
        if side.judged_before is None or side.judged_after is None:
            now = f"no labeled query of {side.queries:,}"
        else:
            now = (
                f"judged@{todo.depth} {side.judged_before:.1%} -> {side.judged_after:.1%} over "
                f"labeled queries ({side.labeled_queries:,} of {side.queries:,})"
            )
        first = (
            f"; {counted(side.first_labels, 'unlabeled query', 'unlabeled queries')} "
            f"{'gets its' if side.first_labels == 1 else 'get their'} first labels"
            if side.first_labels
            else ""
        )
        lines.append(
            f"  {side.name}: {now}; over every query {side.all_judged_before:.1%} -> "
            f"{side.all_judged_after:.1%}{first}"
        )
    if todo.cells:
        resolved = sum(1 for cell in todo.cells if cell.resolved)
        closed = sum(1 for cell in todo.cells if abs(cell.gap_after) <= todo.unjudged_tolerance)
        lines.append(
            f"label-limited cells: {len(todo.cells)}; the list judges every unjudged document of "
            f"both arms' top k in {resolved}, and closes the judged@k gap in {closed}"
        )
        for cell in todo.cells:
            lines.append(
                f"  {cell.cell}: judged@{cell.depth} candidate {cell.candidate_judged[0]:.1%} -> "
                f"{cell.candidate_judged[1]:.1%}, baseline {cell.baseline_judged[0]:.1%} -> "
                f"{cell.baseline_judged[1]:.1%}; {cell.listed_pairs:,} of "
                f"{counted(cell.unjudged_pairs, 'unjudged pair')} listed"
            )
    elif todo.comparison is not None:
        lines.append("no label-limited cell: the pairs are ordered by rank")
    if todo.own_labels:
        lines.append(
            f"note: {counted(todo.own_labels, 'listed pair')} "
            f"{'belongs' if todo.own_labels == 1 else 'belong'} to queries whose trace "
            "records carry labels of their own, which a --labels file does not override: record "
            "the traces and the filled file in a store (rankgate trace import, rankgate label "
            "import) and score the store, whose labels table holds both"
        )
    if todo.short_segments:
        lines.append("segments short of their minimums: " + ", ".join(todo.short_segments))
    skipped = {name: count for name, count in todo.invalid.items() if count}
    if skipped:
        lines.append(
            "skipped as invalid: "
            + ", ".join(f"{name} {counted(count, 'record')}" for name, count in skipped.items())
        )
    return "\n".join(lines) + "\n"
