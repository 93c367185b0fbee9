"""Options that ``eval`` and ``compare`` share, and how they become settings.

Each value comes from the command line first, then ``rankgate.toml``, then the library's default, so
both commands read a project's config the same way.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import sqlite3
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from rankgate.config import DEFAULT_CONFIG_NAME, Config, load_config
from rankgate.doc_ids import DocIdMapping, parse_doc_id_option
from rankgate.errors import UsageError
from rankgate.evaluate import DEFAULT_METRICS, Evaluation, Settings, require_extra
from rankgate.gates import DEFAULT_MIN_QUERIES, GATE_ON, Gate, GatePolicy, merge_gates, parse_gate
from rankgate.io import FORMATS, FieldMap, OtlpOptions, OtlpSource, TimeWindow, open_source
from rankgate.io.paths import shown
from rankgate.labels import LABEL_FORMATS, LABEL_SOURCES
from rankgate.report.console import counted
from rankgate.spec import MAX_CUTOFF
from rankgate.stale import LabelFilter, parse_age, read_corpus
from rankgate.stats import DEFAULT_RESAMPLES
from rankgate.store import StoreSource, Window, is_store_url
from rankgate.times import parse_moment

if TYPE_CHECKING:
    from rankgate.compare import Comparison

__all__ = [
    "add_kept_labels_options",
    "add_labels_format_option",
    "add_mlflow_options",
    "add_otel_options",
    "add_query_set_options",
    "add_report_options",
    "add_scoring_options",
    "add_store_options",
    "check_common",
    "fields_from",
    "gates_from",
    "load_project_config",
    "log_to_mlflow",
    "metrics_from",
    "policy_from",
    "resolve_report_format",
    "settings_from",
    "source_for",
    "source_notes",
    "store_source",
]


def add_scoring_options(parser: argparse.ArgumentParser) -> None:
    """Metrics, gates, config, field mapping, conventions, segments and stale-label options."""
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
        "--doc-id",
        metavar="RULE",
        help="score documents when IDs name chunks (or labels name chunks): RULE is a separator "
        "('#': doc42#c3 -> doc42), 're:PATTERN' with one group, or 'map:FILE[,CHUNK_COL,DOC_COL]' "
        "(CSV/TSV/JSON Lines/Parquet; columns chunk_id, doc_id). Rankings collapse to each "
        "document's first chunk; chunk labels aggregate by the highest grade (rankgate.toml: [ids])",
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
        "--color",
        choices=("auto", "always", "never"),
        default="auto",
        help="colour the terminal report: auto (default) colours a terminal unless NO_COLOR is "
        "set or TERM=dumb; a report written with --output never has colour",
    )
    parser.add_argument("--no-progress", action="store_true", help="never draw a progress bar")
    segments = parser.add_argument_group("segments, intervals and coverage")
    segments.add_argument(
        "--segment-by",
        action="append",
        default=[],
        metavar="FIELD",
        help="report every metric per value of this field (a key or dotted "
        "path; repeatable); default gates apply to every segment",
    )
    segments.add_argument(
        "--min-queries",
        type=int,
        metavar="N",
        help=f"a segment with fewer scored queries is 'insufficient data' "
        f"(default {DEFAULT_MIN_QUERIES})",
    )
    segments.add_argument(
        "--strict-segments",
        action="store_true",
        default=None,
        help="fail the run when a segment has insufficient data",
    )
    segments.add_argument(
        "--gate-on",
        choices=GATE_ON,
        help="compare thresholds with the mean (default), a bound of its 95%% interval "
        "(lower_bound: pass only when the bound clears it), or the pessimistic mean "
        "(pessimistic: the metric with every unjudged document counted non-relevant)",
    )
    segments.add_argument(
        "--min-coverage",
        type=float,
        metavar="SHARE",
        help="fail when the labeled share of records (overall or in a segment) is below this",
    )
    segments.add_argument("--seed", type=int, help="seed for the bootstrap (default 0)")
    segments.add_argument(
        "--resamples",
        type=int,
        metavar="B",
        help=f"bootstrap resamples per interval (default {DEFAULT_RESAMPLES}; "
        "0 computes none, in eval only)",
    )
    stale = parser.add_argument_group("stale labels")
    stale.add_argument(
        "--corpus",
        type=Path,
        metavar="FILE",
        help="document IDs still in the corpus (text, one a line; or Parquet/CSV "
        "with an 'id' column): labels for other documents are removed",
    )
    stale.add_argument(
        "--label-max-age",
        metavar="AGE",
        help="remove labels older than this (e.g. 180d) by the record's labeled_at",
    )
    stale.add_argument(
        "--as-of",
        metavar="TIME",
        help="the moment label ages are measured from (ISO 8601; default now)",
    )


def add_query_set_options(parser: argparse.ArgumentParser) -> None:
    """The query set a run should cover, what a query of it without a trace gets, and the depth
    users are served (``rankgate eval``)."""
    group = parser.add_argument_group("query set and served depth")
    group.add_argument(
        "--queries",
        type=Path,
        metavar="FILE",
        help="golden query set the traces should cover: one query ID per line, or JSON Lines/"
        "JSON/CSV/Parquet records with a query_id. Without it the set is the labels' (--labels, "
        "--qrels, or a store's labels when read without --since/--until/--sql: with a time "
        "window only --queries names queries as missing). Its queries with no trace count as "
        "missing_trace; traces of queries outside it are scored and counted as outside_set",
    )
    group.add_argument(
        "--missing-trace",
        choices=("skip", "zero"),
        help="a query of the query set with no trace: leave it out of the means (default) or "
        "score it as an empty ranking (0; rbp_residual 1), in means, intervals and the (missing) segment (trec_eval -c)",
    )
    group.add_argument(
        "--served-k",
        type=_positive_int,
        metavar="K",
        help="how many results users are shown (rankgate.toml: served_k); a gate on a metric "
        "cut at another depth is warned about",
    )


def _doc_id_option(args: argparse.Namespace) -> DocIdMapping | None:
    """``--doc-id`` read (a mapping file relative to the working directory), None when not given."""
    value = getattr(args, "doc_id", None)
    return None if value is None else parse_doc_id_option(value)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not 1 <= value <= MAX_CUTOFF:
        raise argparse.ArgumentTypeError(f"{text} is not a whole number from 1 to {MAX_CUTOFF:,}")
    return value


def add_store_options(parser: argparse.ArgumentParser, *, variants: bool) -> None:
    """Options that choose what to read from a trace store URL."""
    store = parser.add_argument_group(
        "trace stores (a source written sqlite:///FILE.db or postgresql://USER@HOST/DB)"
    )
    store.add_argument(
        "--since",
        metavar="WHEN",
        help="traces recorded at or after this: an age (24h, 7d) or an ISO 8601 time or date; "
        "for a store, its recorded time; for files, their 'timestamp' field, and date=YYYY-MM-DD "
        "partitions outside the window are not read",
    )
    store.add_argument(
        "--until", metavar="WHEN", help="traces recorded before this (same forms as --since)"
    )
    if variants:
        store.add_argument(
            "--variant",
            action="append",
            default=[],
            metavar="NAME",
            help="only traces of this retrieval variant (repeatable)",
        )
    store.add_argument(
        "--sample",
        type=float,
        metavar="FRACTION",
        help="a seeded sample of this share of queries (e.g. 0.1; the seed is --seed)",
    )
    store.add_argument(
        "--sql",
        metavar="QUERY",
        help="your own read-only SELECT instead of the store's tables; map its columns with "
        "--field; values go in --param, never into the text",
    )
    store.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a bound parameter of --sql (:NAME in SQLite, %%(NAME)s in PostgreSQL); "
        "--since/--until are bound as since/until",
    )


def add_otel_options(parser: argparse.ArgumentParser) -> None:
    """Options for OpenTelemetry exports (``--input-format otlp``)."""
    otel = parser.add_argument_group(
        "OpenTelemetry exports (--input-format otlp: a file or a folder)"
    )
    otel.add_argument(
        "--otel-span-kind",
        action="append",
        default=[],
        choices=("RETRIEVER", "RERANKER"),
        help="OpenInference span kinds that are traces (repeatable; default RETRIEVER)",
    )
    otel.add_argument(
        "--otel-query-id",
        action="append",
        default=[],
        metavar="ATTRIBUTE",
        help="span or resource attribute holding the query ID, tried in order (repeatable; "
        "default query.id, rankgate.query_id, input.value)",
    )
    otel.add_argument(
        "--otel-doc-id-key",
        metavar="KEY",
        help="when a document has no document.id, take this key of its metadata",
    )


def add_mlflow_options(parser: argparse.ArgumentParser) -> None:
    """``--mlflow [TRACKING_URI]``, ``--mlflow-experiment`` and ``--mlflow-run-name``."""
    group = parser.add_argument_group("MLflow (needs rankgate[mlflow]; see docs/mlflow.md)")
    group.add_argument(
        "--mlflow",
        nargs="?",
        const="",
        metavar="TRACKING_URI",
        help="also log the results to an MLflow run: metrics, settings as params, verdicts as "
        "tags, the JSON and HTML reports as artifacts. Without a URI, MLflow's own choice "
        "(MLFLOW_TRACKING_URI, else ./mlflow.db); a failing run is logged too",
    )
    group.add_argument(
        "--mlflow-experiment",
        metavar="NAME",
        help="the run's experiment, created when missing (default: MLflow's, "
        "MLFLOW_EXPERIMENT_NAME or Default)",
    )
    group.add_argument("--mlflow-run-name", metavar="NAME", help="the run's name")


# What a tracking URI starts with: a scheme, or one of MLflow's bare names.
_TRACKING_URI = re.compile(r"^(?:[A-Za-z][A-Za-z0-9+.-]*:|databricks(?:-uc)?$|uc$)")


def _check_mlflow(args: argparse.Namespace) -> None:
    """Before any scoring: the MLflow options agree, and mlflow is installed."""
    uri = getattr(args, "mlflow", None)
    if uri is None:
        for option, value in (
            ("--mlflow-experiment", getattr(args, "mlflow_experiment", None)),
            ("--mlflow-run-name", getattr(args, "mlflow_run_name", None)),
        ):
            if value is not None:
                raise UsageError(f"{option} applies to --mlflow")
        return
    if uri and not _TRACKING_URI.match(uri):
        # argparse gives the optional URI the next word, which may be an input meant as such.
        raise UsageError(
            f"--mlflow {uri}: not a tracking URI (http://HOST:5000, sqlite:////ABS/mlflow.db, "
            "databricks); for MLflow's default, write --mlflow after the inputs"
        )
    if uri and _is_trace_store(uri, args):
        # MLflow would add its own tables to the store, and the input meant is gone.
        raise UsageError(
            f"--mlflow {shown(uri)}: that is a rankgate trace store, not an MLflow tracking "
            "store; if it is an input, write --mlflow after the inputs (or --mlflow=URI)"
        )
    require_extra("mlflow", "--mlflow")


def _is_trace_store(uri: str, args: argparse.Namespace) -> bool:
    """Whether the tracking URI given is one of the inputs, or a SQLite file holding rankgate's
    tables."""
    inputs = [
        str(item) for item in getattr(args, "sources", None) or getattr(args, "traces", None) or []
    ]
    if uri in inputs:
        return True
    if not uri.lower().startswith("sqlite:///"):
        return False
    path = Path(unquote(uri[len("sqlite:///") :]))
    if not path.is_file():
        return False
    try:
        location = f"{path.resolve().as_uri()}?mode=ro"
        with contextlib.closing(sqlite3.connect(location, uri=True)) as db:
            names = [row[0] for row in db.execute("SELECT name FROM sqlite_master")]
    except sqlite3.Error:
        return False  # not SQLite, or locked: MLflow will say what is wrong with it
    return any(str(name).startswith("rankgate_") for name in names)


def log_to_mlflow(
    args: argparse.Namespace, result: Evaluation | Comparison, sources: list[str]
) -> None:
    """With ``--mlflow``: log the result, passed or failed, before its report is written, so that
    a run MLflow cannot take is exit 2 before a verdict shows."""
    if getattr(args, "mlflow", None) is None:
        return
    from rankgate.integrations.mlflow import log_comparison, log_evaluation

    where = {
        "tracking_uri": args.mlflow or None,
        "experiment": args.mlflow_experiment,
        "run_name": args.mlflow_run_name,
    }
    if isinstance(result, Evaluation):
        logged = log_evaluation(result, sources=sources, **where)
    else:
        logged = log_comparison(result, **where)
    sys.stderr.write(
        f"logged to MLflow run {logged.run_id} (experiment {logged.experiment_id}) at "
        f"{shown(logged.tracking_uri)}\n"
    )


def source_for(
    text: Any, args: argparse.Namespace, settings: Settings, variants: tuple[str, ...] = ()
) -> Any:
    """What to read for one source argument: a store URL becomes a ``StoreSource``, a path with
    ``--input-format otlp`` an ``OtlpSource`` with the --otel-* options; anything else as it is."""
    otel_given = args.otel_span_kind or args.otel_query_id or args.otel_doc_id_key is not None
    if args.input_format == "otlp" and isinstance(text, str) and not is_store_url(text):
        options = OtlpOptions(
            span_kinds=tuple(dict.fromkeys(args.otel_span_kind)) or OtlpOptions().span_kinds,
            query_id_attributes=tuple(args.otel_query_id) or OtlpOptions().query_id_attributes,
            doc_id_metadata_key=args.otel_doc_id_key,
        )
        store_source(None, args, settings)  # store options make no sense here: say so
        return OtlpSource(text, options)
    if otel_given:
        raise UsageError("--otel-* options apply to --input-format otlp")
    return store_source(text, args, settings, variants)


def source_notes(source: Any) -> list[str]:
    """What a reader passed over that the report does not show: sampled-out traces, spans of other
    kinds, spans whose ranking may be truncated."""
    notes = []
    if isinstance(source, StoreSource) and source.sample is not None:
        kept = source.stats.rows - source.stats.sampled_out
        notes.append(
            f"{source.name}: sampled {source.sample:.4g} of queries (seed {source.seed}): "
            f"{kept:,} of {source.stats.rows:,} traces kept"
        )
    if isinstance(source, OtlpSource):
        stats = source.stats
        notes.append(
            f"{source.name}: {counted(stats.spans_seen, 'span')} in "
            f"{counted(stats.files, 'file')}: "
            f"{stats.spans_used + stats.spans_invalid:,} taken as traces, "
            f"{stats.spans_other_kind:,} of other kinds passed over"
        )
        if stats.truncated:
            first = ", ".join(stats.truncated_examples[:3])
            notes.append(
                f"warning: {stats.truncated:,} span(s) had attributes dropped by the SDK's limit "
                f"(droppedAttributesCount > 0), so their rankings may be cut short; first: {first}"
            )
    return notes


def store_source(
    text: Any, args: argparse.Namespace, settings: Settings, variants: tuple[str, ...] = ()
) -> Any:
    """A ``StoreSource`` for a store URL, with the window and sample the options ask for; anything
    else is returned as it is (and then the store options are an error)."""
    given = [
        name
        for name, value in (
            ("--since", args.since),
            ("--until", args.until),
            ("--variant", getattr(args, "variant", None)),
            ("--sample", args.sample),
            ("--sql", args.sql),
            ("--param", args.param),
        )
        if value
    ]
    stores = [text] if isinstance(text, str) else list(text) if isinstance(text, list) else []
    if text is None or not any(is_store_url(item) for item in stores):
        store_only = [name for name in given if name not in ("--since", "--until")]
        if store_only:
            raise UsageError(
                f"{', '.join(store_only)} "
                f"{'applies' if len(store_only) == 1 else 'apply'} only to a trace store URL "
                "(sqlite:///..., postgresql://...)"
            )
        if text is None or "-" in stores:
            if given:
                raise UsageError("--since/--until select among files and trace stores, not stdin")
            return text
        if not given:
            return text
        # Files, folders, globs, datasets: a window that prunes partitions and filters rows.
        since, until = _window_ends(args)
        return open_source(text, args.input_format, window=TimeWindow(since=since, until=until))
    if args.param and args.sql is None:
        raise UsageError("--param binds values of --sql")
    since, until = _window_ends(args)
    window = Window(
        since=since,
        until=until,
        variants=(*getattr(args, "variant", ()), *variants) if args.sql is None else (),
    )
    params = {}
    for pair in args.param:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise UsageError(f"--param {pair!r}: expected NAME=VALUE")
        params[name.strip()] = value
    return StoreSource(
        text,
        window,
        sample=args.sample,
        seed=settings.seed,
        sql=args.sql,
        params=params,
        fields=settings.fields,
    )


def _window_ends(args: argparse.Namespace) -> tuple[datetime | None, datetime | None]:
    """--since and --until as aware UTC times, measured from one "now"."""
    now = datetime.now(UTC)
    since = None if args.since is None else parse_moment(args.since, "--since", now)
    until = None if args.until is None else parse_moment(args.until, "--until", now)
    if since is not None and until is not None and since >= until:
        raise UsageError("--since must be before --until")
    return since, until


# The report format a file name implies, for ``-o`` without ``--format``.
FORMAT_BY_EXTENSION = {
    ".json": "json",
    ".md": "markdown",
    ".markdown": "markdown",
    ".xml": "junit",
    ".html": "html",
    ".htm": "html",
    ".txt": "table",
}


def add_kept_labels_options(parser: argparse.ArgumentParser, what: str) -> None:
    """``--labels`` (repeatable), ``--labels-format`` and ``--label-source``: labels kept apart
    from the traces, as eval and compare take them."""
    parser.add_argument(
        "--labels",
        action="append",
        metavar="FILE|URL",
        help=f"{what} (repeatable: several files are one set of labels, a human's grade of a "
        "pair winning over a model judge's)",
    )
    add_labels_format_option(parser)
    parser.add_argument(
        "--label-source",
        choices=LABEL_SOURCES,
        help="which --labels to use: all (default; a human's grade of a pair wins over a "
        "judge's), human (labels whose source does not start with 'judge:'), or judge (only "
        "those written by `rankgate labels judge`)",
    )


def add_labels_format_option(parser: argparse.ArgumentParser) -> None:
    """``--labels-format``, for a label file that detection would misread (a qrels file that
    starts with a comment, say)."""
    parser.add_argument(
        "--labels-format",
        choices=LABEL_FORMATS,
        help="format of the --labels file (default: detected; qrels by name or by its "
        "four-column layout)",
    )


def add_report_options(parser: argparse.ArgumentParser, formats: tuple[str, ...]) -> None:
    """``--format`` (the first of ``formats`` by default) and ``-o/--output``."""
    implied = ", ".join(
        f"{extension} {name}" for extension, name in FORMAT_BY_EXTENSION.items() if name in formats
    )
    parser.add_argument(
        "--format",
        choices=formats,
        dest="report_format",
        help=f"report format (default: {formats[0]}, or what the --output name implies)",
    )
    parser.add_argument(
        "-o",
        "--output",
        type=Path,
        help=f"write the report to this file; the terminal still gets the verdict. Without "
        f"--format, the name's extension chooses the format ({implied}; any other: "
        f"{formats[0]})",
    )
    parser.add_argument(
        "--html",
        type=Path,
        metavar="PATH",
        help="also write the HTML report to PATH, whatever --format is (for CI artifacts)",
    )


def resolve_report_format(args: argparse.Namespace, default: str) -> None:
    """Set ``args.report_format``: as given, or as the ``--output`` name implies, or ``default``.

    A name that implies one format while ``--format`` asks for another is refused: a JSON
    pipeline that reads ``report.json`` must not find a text table in it.
    """
    implied = None
    if args.output is not None:
        implied = FORMAT_BY_EXTENSION.get(args.output.suffix.lower())
    if args.report_format is None:
        args.report_format = implied or default
    elif (
        implied is not None
        and implied != args.report_format
        and not (
            # A pull request's Markdown is Markdown too.
            implied == "markdown" and args.report_format == "markdown-pr"
        )
    ):
        raise UsageError(
            f"--output {args.output} names a {implied} file, but --format is "
            f"{args.report_format}: change one of them"
        )


def check_common(args: argparse.Namespace) -> None:
    """Options that cannot mean anything together are an error, not silently ignored."""
    resolve_report_format(args, "table")
    if args.config is not None and args.no_config:
        raise UsageError("--config and --no-config contradict each other")
    labels = getattr(args, "labels", None)
    if isinstance(labels, list):
        # One --labels is one source, as it always was; several are read as one set.
        if len(labels) > 1 and "-" in labels:
            raise UsageError("standard input (-) can be the only --labels; give the others alone")
        if len(set(labels)) < len(labels):
            raise UsageError("the same --labels is given twice")
        args.labels = labels[0] if len(labels) == 1 else labels
    if getattr(args, "labels_format", None) is not None and getattr(args, "labels", None) is None:
        raise UsageError("--labels-format describes a --labels file; give --labels FILE")
    if getattr(args, "label_source", None) not in (None, "all") and labels is None:
        raise UsageError("--label-source chooses among --labels; give --labels FILE")
    if args.html is not None and args.report_format == "html":
        if args.output is not None and args.output.suffix.lower() in (".html", ".htm"):
            raise UsageError(
                f"--output {args.output} is already the HTML report (its name implies --format "
                "html, which already writes HTML); drop --html"
            )
        raise UsageError("--format html already writes HTML; use --output for its path")
    if (
        args.html is not None
        and args.output is not None
        and args.html.resolve() == args.output.resolve()
    ):
        raise UsageError("--html and --output name the same file")
    seen: dict[tuple[str, str], str] = {}
    for text in args.gate:
        gate = parse_gate(text)
        key = (str(gate.metric), gate.op)
        if key in seen:
            raise UsageError(f"--gate {text!r} repeats --gate {seen[key]!r}; keep one of them")
        seen[key] = text
    # Last, since it imports mlflow (seconds): a contradiction found above is told at once.
    _check_mlflow(args)


def load_project_config(args: argparse.Namespace) -> Config:
    """The config named by --config, else ``./rankgate.toml`` when present (said on stderr, since
    a file nobody named changes the verdict), else none."""
    if args.config is not None:
        return load_config(args.config)
    default = Path(DEFAULT_CONFIG_NAME)
    if not args.no_config and default.is_file():
        config = load_config(default)
        sys.stderr.write(f"using config ./{DEFAULT_CONFIG_NAME} (--no-config ignores it)\n")
        return config
    return Config()


def settings_from(args: argparse.Namespace, config: Config) -> Settings:
    return Settings(
        relevance_threshold=first(args.relevance_threshold, config.relevance_threshold, 1.0),
        empty_relevant=first(args.empty_relevant, config.empty_relevant, "skip"),
        on_invalid=first(args.on_invalid, config.on_invalid, "fail"),
        fields=FieldMap.from_assignments({**config.fields, **_assignments(args.field)}),
        segment_by=tuple(dict.fromkeys([*(config.segment_by or ()), *args.segment_by])),
        label_filter=_label_filter(args, config),
        seed=first(args.seed, config.seed, 0),
        resamples=first(args.resamples, config.resamples, DEFAULT_RESAMPLES),
        # Only ``rankgate eval`` has these options; rankgate.toml may state both for every command.
        missing_trace=first(getattr(args, "missing_trace", None), config.missing_trace, "skip"),
        served_k=first(getattr(args, "served_k", None), config.served_k, _UNSET),
        doc_ids=first(_doc_id_option(args), config.doc_ids, _UNSET),
        label_source=getattr(args, "label_source", None) or "all",
    )


def policy_from(args: argparse.Namespace, config: Config) -> GatePolicy:
    return GatePolicy(
        gate_on=first(args.gate_on, config.gate_on, "mean"),
        min_queries=first(args.min_queries, config.min_queries, DEFAULT_MIN_QUERIES),
        strict_segments=first(args.strict_segments, config.strict_segments, False),
        min_coverage=first(args.min_coverage, config.min_coverage, _UNSET),
        # Only ``rankgate compare`` has the option; rankgate.toml may state it for every command.
        min_detectable=first(getattr(args, "min_detectable", None), config.min_detectable, _UNSET),
        rules=config.rules,
    )


def gates_from(args: argparse.Namespace, config: Config) -> list[Gate]:
    return merge_gates(config.gates, [parse_gate(text) for text in args.gate])


def metrics_from(args: argparse.Namespace, config: Config) -> list[str]:
    return list(args.metric or config.metrics or DEFAULT_METRICS)


def fields_from(args: argparse.Namespace) -> FieldMap:
    """The field mapping of --field options alone (commands that read no config)."""
    return FieldMap.from_assignments(_assignments(args.field))


def _assignments(pairs: list[str]) -> dict[str, str]:
    assignments = {}
    for pair in pairs:
        name, sep, path = pair.partition("=")
        if not sep:
            raise UsageError(f"--field {pair!r}: expected NAME=PATH, e.g. retrieved_ids=meta.ids")
        assignments[name.strip()] = path.strip()
    return assignments


def first(*values: Any) -> Any:
    """The first value that is set (not None); ``_UNSET`` as a default stands for None itself."""
    chosen = next(value for value in values if value is not None)
    return None if chosen is _UNSET else chosen


# A default of "not set" for first(), where None itself is the value meant.
_UNSET = object()


def _label_filter(args: argparse.Namespace, config: Config) -> LabelFilter:
    corpus_path = args.corpus if args.corpus is not None else config.corpus
    max_age = args.label_max_age if args.label_max_age is not None else config.label_max_age
    as_of = None
    if args.as_of is not None:
        try:
            as_of = datetime.fromisoformat(args.as_of.replace("Z", "+00:00"))
        except ValueError:
            raise UsageError(f"--as-of {args.as_of!r}: expected an ISO 8601 time") from None
        if as_of.tzinfo is None:
            as_of = as_of.replace(tzinfo=UTC)
    return LabelFilter(
        corpus=None if corpus_path is None else read_corpus(corpus_path),
        max_age=None if max_age is None else parse_age(max_age),
        as_of=as_of,
    )
