"""``rankgate trace import``, ``rankgate label import``, ``rankgate store info`` and
``rankgate store init``: fill a trace store from files, and see what it holds.

Every one of them names its store the same two ways: as a positional URL (after the file, for the
imports) or as ``--store URL``. ``traces`` and ``labels`` are aliases of ``trace`` and ``label``.
Reading a store is ``rankgate eval URL`` / ``rankgate compare URL``; production services write with
``rankgate.store.TraceRecorder``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from rankgate.cli import agreement_command, clicks_command, judge_command, todo_command
from rankgate.cli.options import fields_from
from rankgate.cli.terminal import EXIT_OK, write_stdout
from rankgate.errors import InputError, UsageError
from rankgate.io import FORMATS, FieldMap, open_source, validate_record
from rankgate.labels import LABEL_FORMATS, Judgment, LabelReading, judgments_of, read_judgments
from rankgate.report.console import counted
from rankgate.store.backends import (
    LOCK_WAIT_SECONDS,
    SCHEMA_VERSION,
    Backend,
    LabelRow,
    StoreUnavailable,
    TraceRow,
    connect,
    is_store_url,
    redact_url,
    sqlite_url_for,
)
from rankgate.times import parse_time

__all__ = ["add_parsers"]

WRITE_BATCH = 5000
T = TypeVar("T")


URL_HELP = "sqlite:///FILE.db (relative) or sqlite:////abs/FILE.db, or postgresql://USER@HOST/DB"


def add_parsers(commands: Any) -> None:
    trace = commands.add_parser(
        "trace", aliases=["traces"], help="write traces into a trace store", allow_abbrev=False
    )
    trace_commands = trace.add_subparsers(title="trace commands", metavar="ACTION")
    importer = trace_commands.add_parser(
        "import",
        help="record the traces of a file into a store",
        description="Record every trace of a file (JSON Lines, JSON, Parquet, CSV) into a trace "
        "store, with the labels the records carry unless --no-labels. Importing the same record "
        "twice stores it once, so an import cut short can simply be run again.",
        allow_abbrev=False,
    )
    importer.add_argument("file", help="trace file (as rankgate eval reads them)")
    _store_arguments(importer, writes=True)
    importer.add_argument(
        "--time-field",
        default="timestamp",
        metavar="FIELD",
        help="record field with the time it was served (default: timestamp; absent: now)",
    )
    importer.add_argument(
        "--variant-field",
        metavar="FIELD",
        help="record field naming the retrieval variant (stored in the variant column)",
    )
    importer.add_argument(
        "--variant", metavar="NAME", help="the variant of every trace in the file"
    )
    importer.add_argument(
        "--no-labels", action="store_true", help="store only the traces, not their labels"
    )
    _common(importer, FORMATS[:4])
    importer.set_defaults(handler=run_trace_import)

    label = commands.add_parser(
        "label",
        aliases=["labels"],
        help="store relevance labels, or make them from click logs",
        allow_abbrev=False,
    )
    label_commands = label.add_subparsers(title="label commands", metavar="ACTION")
    clicks_command.add_parser(label_commands)
    todo_command.add_parser(label_commands)
    judge_command.add_parser(label_commands)
    agreement_command.add_parser(label_commands)
    labels = label_commands.add_parser(
        "import",
        help="store the judgments of an annotation export",
        description="Store labels: one judgment per record (query_id, document_id, grade, "
        "optional labeled_at and source), one query per record (relevant_ids / "
        "relevance_scores), or TREC qrels. A newer judgment of a (query, document) replaces an "
        "older one; labels apply to every trace of their query.",
        allow_abbrev=False,
    )
    labels.add_argument("file", help="label file (JSON Lines, JSON, Parquet, CSV, *.qrels)")
    _store_arguments(labels, writes=True)
    labels.add_argument(
        "--source",
        metavar="NAME",
        help="who or what gave labels whose records do not say (default: the file name)",
    )
    _common(labels, LABEL_FORMATS)
    labels.set_defaults(handler=run_label_import)

    store = commands.add_parser("store", help="create or inspect a trace store", allow_abbrev=False)
    store_commands = store.add_subparsers(title="store commands", metavar="ACTION")
    info = store_commands.add_parser("info", help="what a store holds", allow_abbrev=False)
    _store_arguments(info, writes=False)
    info.add_argument(
        "--format",
        choices=("table", "json"),
        dest="report_format",
        help="table (default) or json; an --output name ending in .json implies json",
    )
    info.add_argument("-o", "--output", type=Path, metavar="FILE", help="write to this file")
    info.set_defaults(handler=run_info)
    init = store_commands.add_parser(
        "init", help="create a store's tables (also done on first use)", allow_abbrev=False
    )
    _store_arguments(init, writes=True)
    init.set_defaults(handler=run_init)


def _store_arguments(parser: argparse.ArgumentParser, *, writes: bool) -> None:
    """The store, named either way: a positional URL or ``--store URL``."""
    parser.add_argument("url", nargs="?", metavar="URL", help=f"the store: {URL_HELP}")
    parser.add_argument(
        "--store", metavar="URL", help="the store, as an option (the same as the URL argument)"
    )
    if writes:
        parser.add_argument(
            "--lock-timeout",
            type=float,
            default=LOCK_WAIT_SECONDS,
            metavar="SECONDS",
            help="how long to wait while another process holds the store's write lock, then "
            f"fail with exit 2 (default: {LOCK_WAIT_SECONDS:g})",
        )


def _store_url(args: argparse.Namespace) -> str:
    """The store the command names, by its positional URL or ``--store``."""
    given = [url for url in (args.url, args.store) if url is not None]
    if not given:
        raise UsageError(f"name the store: a URL argument or --store URL ({URL_HELP})")
    if len(given) == 2 and given[0] != given[1]:
        raise UsageError(
            f"two stores named ({redact_url(given[0])} and --store {redact_url(given[1])}): "
            "give one"
        )
    url: str = given[0]
    if not is_store_url(url):
        meant = sqlite_url_for(url)
        hint = f"; for this SQLite file write {meant}" if meant else ""
        raise UsageError(f"{redact_url(url)!r} is not a store URL: expected {URL_HELP}{hint}")
    return url


def _lock_timeout(args: argparse.Namespace) -> float:
    seconds: float = args.lock_timeout
    if not 0 < seconds < 1e6:
        raise UsageError(f"--lock-timeout {seconds:g}: expected a number of seconds above 0")
    return seconds


def _connect_for_import(url: str, args: argparse.Namespace) -> Backend:
    try:
        return connect(url, lock_wait=_lock_timeout(args))
    except StoreUnavailable as problem:
        raise StoreUnavailable(f"{problem} (--lock-timeout SECONDS waits longer)") from None


def _common(parser: argparse.ArgumentParser, formats: tuple[str, ...]) -> None:
    parser.add_argument("--input-format", choices=formats, help="override detection")
    parser.add_argument(
        "--field",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="where a trace field lives, e.g. query_id=request.qid",
    )
    parser.add_argument(
        "--on-invalid",
        choices=("fail", "skip"),
        help="malformed records: stop with exit 2 (default) or skip and count them",
    )


def _settings(args: argparse.Namespace) -> tuple[str, FieldMap, str]:
    return _store_url(args), fields_from(args), args.on_invalid or "fail"


def _cut_short(problem: StoreUnavailable, stored: int, what: str) -> StoreUnavailable:
    """A store that stopped taking writes mid-import: say what is already in, and that running
    the import again is safe (stored records are kept once)."""
    done = f"{stored:,} {what} stored before that; " if stored else ""
    return StoreUnavailable(
        f"{problem} ({done}--lock-timeout SECONDS waits longer; running the import again is safe)"
    )


def run_trace_import(args: argparse.Namespace) -> int:
    url, fields, on_invalid = _settings(args)
    if args.variant is not None and args.variant_field is not None:
        raise UsageError("give --variant or --variant-field, not both")
    importer = _TraceImport(args, fields, on_invalid)
    backend = _connect_for_import(url, args)
    traces_written = traces_known = labels_written = 0
    try:
        for chunk in _chunks(importer.rows(), WRITE_BATCH):
            traces = [row for row in chunk if isinstance(row, TraceRow)]
            labels = [row for row in chunk if isinstance(row, LabelRow)]
            new = backend.insert_traces(traces)
            if labels:
                backend.upsert_labels(labels)
            backend.commit()
            traces_written += new
            traces_known += len(traces) - new
            labels_written += len(labels)
    except StoreUnavailable as problem:
        raise _cut_short(problem, traces_written, "traces") from None
    finally:
        backend.close()
    skipped = f", {importer.invalid:,} invalid skipped" if importer.invalid else ""
    known = f", {traces_known:,} already stored" if traces_known else ""
    write_stdout(
        f"{redact_url(url)}: {counted(importer.read, 'record')} read from {args.file}: "
        f"{counted(traces_written, 'trace')} stored{known}, {counted(labels_written, 'label')}"
        f"{skipped}\n"
    )
    if importer.judged_empty:
        sys.stderr.write(
            f"note: {counted(importer.judged_empty, 'record')} judged with no document (an empty "
            "relevant_ids): a store keeps judgments per document, so they read back as "
            "unlabeled; a grade-0 judgment keeps a query judged\n"
        )
    return EXIT_OK


class _TraceImport:
    """Store rows from a trace file, counting records read and skipped as invalid."""

    def __init__(self, args: argparse.Namespace, fields: FieldMap, on_invalid: str) -> None:
        self.args = args
        self.fields = fields
        self.on_invalid = on_invalid
        self.read = 0
        self.invalid = 0
        self.judged_empty = 0

    def _place(self, location: Any) -> str:
        path = Path(self.args.file)
        name = str(path.resolve()) if path.exists() else str(self.args.file)
        return f"{name}:{getattr(location, 'line', None) or getattr(location, 'row', None)}"

    def rows(self) -> Iterator[TraceRow | LabelRow]:
        args = self.args
        now = datetime.now(UTC)
        for raw in open_source(args.file, args.input_format):
            self.read += 1
            try:
                trace = validate_record(raw, self.fields, require_query_id=True)
                attributes = dict(trace.attributes)
                stamp = attributes.get(args.time_field)
                recorded_at = now if stamp is None else _time(stamp, raw.location, args.time_field)
                variant = args.variant
                if args.variant_field is not None:
                    value = attributes.get(args.variant_field)
                    variant = None if value is None else str(value)
                judgments = [] if args.no_labels else list(judgments_of(trace, args.file))
                _require_storable(
                    raw.location,
                    {
                        "query_id": trace.query_id,
                        "retrieved_ids": trace.retrieved_ids,
                        "variant": variant,
                        "relevance_scores": [j.document_id for j in judgments],
                        **attributes,
                    },
                )
            except InputError:
                if self.on_invalid == "fail":
                    raise
                self.invalid += 1
                continue
            attributes.pop("labeled_at", None)
            # The same record imported twice gets the same ID, so the store keeps it once: it is
            # named by its content and time, or where it sits in the file when it has no time.
            when = recorded_at.isoformat() if stamp is not None else self._place(raw.location)
            identity = json.dumps(
                [trace.query_id, when, variant, trace.retrieved_ids], ensure_ascii=False
            )
            given = attributes.pop("trace_id", None)
            trace_id = (
                str(given)
                if given not in (None, "")
                else hashlib.sha256(identity.encode("utf-8", "surrogatepass")).hexdigest()[:32]
            )
            yield TraceRow(
                trace_id, trace.query_id, recorded_at, variant, trace.retrieved_ids, attributes
            )
            if trace.grades == {} and not args.no_labels:
                self.judged_empty += 1
            for j in judgments:
                yield LabelRow(j.query_id, j.document_id, j.grade, j.labeled_at, j.source)


def _require_storable(location: Any, values: dict[str, Any]) -> None:
    """Refuse text a store cannot hold. JSON may carry lone surrogates (``"\\ud800"``), which are
    not Unicode text, so neither SQLite nor PostgreSQL can keep them; ``eval`` of the file scores
    such IDs as written, but a store needs them fixed at the source."""
    for name, value in values.items():
        try:
            json.dumps([name, value], ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            shown = name.encode("utf-8", "backslashreplace").decode("utf-8")
            raise InputError(
                location, shown, "holds a lone surrogate, which is not text a store can keep"
            ) from None


def _storable(judgments: Iterable[Judgment], source: str) -> Iterator[Judgment]:
    for judgment in judgments:
        _require_storable(
            f"{source} (query {judgment.query_id!r})",
            {"query_id": judgment.query_id, "document_id": judgment.document_id},
        )
        yield judgment


def _time(value: Any, location: Any, field_name: str) -> datetime:
    try:
        return parse_time(value, field_name)
    except UsageError:
        raise InputError(
            location, field_name, f"expected an ISO 8601 timestamp, got {value!r}"
        ) from None


def run_label_import(args: argparse.Namespace) -> int:
    url, fields, on_invalid = _settings(args)
    reading = LabelReading()
    judgments = read_judgments(
        args.file,
        fields=fields,
        input_format=args.input_format,
        source=args.source,
        on_invalid=on_invalid,
        reading=reading,
    )
    backend = _connect_for_import(url, args)
    queries: set[str] = set()
    stored = 0
    try:
        for chunk in _chunks(_storable(judgments, args.file), WRITE_BATCH):
            backend.upsert_labels(
                [
                    LabelRow(j.query_id, j.document_id, j.grade, j.labeled_at, j.source)
                    for j in chunk
                ]
            )
            backend.commit()
            stored += len(chunk)
            queries.update(j.query_id for j in chunk)
    except StoreUnavailable as problem:
        raise _cut_short(problem, stored, "judgments") from None
    finally:
        backend.close()
    skipped = "".join(
        f", {count:,} {reason.replace('_', ' ')}" for reason, count in reading.skipped.items()
    )
    write_stdout(
        f"{redact_url(url)}: {counted(reading.records, 'record')} read from {args.file}: "
        f"{counted(reading.judgments, 'judgment')} of {counted(len(queries), 'query')} stored"
        f"{skipped}\n"
    )
    for example in reading.invalid_examples:
        sys.stderr.write(f"  invalid: {example}\n")
    return EXIT_OK


def run_info(args: argparse.Namespace) -> int:
    url = _store_url(args)
    backend = connect(url, read_only=True)
    try:
        summary = backend.summary()
    finally:
        backend.close()
    report_format = args.report_format or (
        "json" if args.output is not None and args.output.suffix.lower() == ".json" else "table"
    )
    if report_format == "json":
        text = json.dumps(summary, default=str, indent=2) + "\n"
    else:
        variants = ", ".join(
            f"{name or '(none)'} {count:,}" for name, count in summary["variants"].items()
        )
        text = (
            f"{redact_url(url)} (schema version {summary['schema_version']})\n"
            f"traces: {summary['traces']:,}, recorded {summary['first']} to {summary['last']}\n"
            f"variants: {variants or 'none'}\n"
            f"labels: {counted(summary['labels'], 'judgment')} of "
            f"{counted(summary['labeled_queries'], 'query')}\n"
        )
    if args.output is None:
        write_stdout(text)
        return EXIT_OK
    try:
        args.output.write_text(text, encoding="utf-8")
    except OSError as problem:
        raise UsageError(f"--output {args.output}: cannot write ({problem.strerror})") from None
    sys.stderr.write(f"wrote {args.output}\n")
    return EXIT_OK


def run_init(args: argparse.Namespace) -> int:
    url = _store_url(args)
    _connect_for_import(url, args).close()
    write_stdout(f"{redact_url(url)}: ready (schema version {SCHEMA_VERSION})\n")
    return EXIT_OK


def _chunks(items: Iterable[T], size: int) -> Iterator[list[T]]:
    chunk: list[T] = []
    for item in items:
        chunk.append(item)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk
