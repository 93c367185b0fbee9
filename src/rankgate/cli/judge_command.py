"""``rankgate labels judge``: grade the pool ``labels todo`` would list with an LLM judge.

The pool, its order and the ``--budget`` are ``labels todo``'s (the same arguments, read by the
same code); each pair is then graded 0-3 through an OpenAI-compatible endpoint by
``rankgate.judge_client`` and written as a label file whose ``source`` is
``judge:<model>@<prompt version>``, which ``--labels`` reads and ``--label-source`` tells apart
from a human's labels. A pair the judge could not grade is left out of the file (it stays
unjudged), and counted.

The text a judge reads comes from ``--docs`` (a file of document ID and text), or from the traces
when their records carry ``retrieved_texts`` aligned with ``retrieved_ids``; the query's text from
the traces' ``query`` field (or ``query_text``, ``question``, ``text``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rankgate.cli.terminal import EXIT_OK, ProgressBar
from rankgate.cli.todo_command import add_pool_arguments, pool_from_args, positive_whole
from rankgate.errors import InputError, UsageError
from rankgate.io import open_source
from rankgate.io.paths import shown
from rankgate.judge_cache import JudgeCache
from rankgate.judge_client import JudgeItem, JudgeRun, JudgeSettings, judge_pairs, masked_endpoint
from rankgate.judge_prompt import PROMPT_VERSION
from rankgate.labels import JUDGE_SOURCE_PREFIX
from rankgate.report.console import counted, shown_query_id
from rankgate.store import is_store_url

__all__ = ["add_parser", "judge_source", "read_documents", "run"]

DEFAULT_CACHE = "rankgate-judge-cache.db"
#: Where a document's ID and text may be in a --docs record, first match wins (the names the
#: usual corpus dumps use: BEIR, MS MARCO, LangChain and LlamaIndex exports).
DOC_ID_FIELDS = ("document_id", "doc_id", "docid", "id", "_id")
DOC_TEXT_FIELDS = ("text", "contents", "content", "body", "passage", "page_content")
TITLE_FIELD = "title"
#: A trace record's document texts, aligned with its retrieved_ids.
TRACE_TEXTS_FIELD = "retrieved_texts"
NO_QUERY_TEXT = "no query text"
NO_DOCUMENT_TEXT = "no document text"


def add_parser(label_commands: Any) -> None:
    parser = label_commands.add_parser(
        "judge",
        help="grade the unjudged pairs worth judging with an LLM (OpenAI-compatible endpoint)",
        description="Pool the unjudged (query, document) pairs as `rankgate labels todo` does "
        "(same sources, depth, budget and order), grade each 0-3 through an OpenAI-compatible "
        "chat-completions endpoint with a versioned UMBRELA-style prompt, and write the grades "
        "as a label file (source 'judge:MODEL@PROMPT_VERSION') for --labels. Grades are cached "
        "in SQLite, so a rerun costs nothing; a pair the judge could not grade stays unjudged. "
        "The API key is read from an environment variable and never printed or stored. Exit 0, "
        "or 2 on bad input or when no pair could be graded.",
        allow_abbrev=False,
    )
    budget = add_pool_arguments(parser)
    budget.add_argument(
        "-o",
        "--output",
        required=True,
        metavar="FILE.jsonl",
        help="where to write the judge's labels (JSON Lines; '-': standard output)",
    )
    judge = parser.add_argument_group("the judge")
    judge.add_argument(
        "--endpoint",
        required=True,
        metavar="URL",
        help="base URL of an OpenAI-compatible API (requests go to URL/chat/completions), e.g. "
        "https://api.openai.com/v1 or http://localhost:8000/v1",
    )
    judge.add_argument("--model", required=True, metavar="NAME", help="the model to ask")
    judge.add_argument(
        "--api-key-env",
        default="OPENAI_API_KEY",
        metavar="VAR",
        help="environment variable holding the API key (default OPENAI_API_KEY; unset: no key)",
    )
    judge.add_argument(
        "--docs",
        metavar="FILE",
        help="document texts: JSON Lines, JSON, CSV or Parquet records with an ID (document_id, "
        "doc_id, docid, id or _id) and a text (text, contents, content, body, passage or "
        "page_content; a title is put first). Default: the traces' retrieved_texts",
    )
    judge.add_argument(
        "--cache",
        default=DEFAULT_CACHE,
        metavar="FILE",
        help=f"SQLite cache of grades, keyed by endpoint, model, prompt version, query and "
        f"document text (default ./{DEFAULT_CACHE})",
    )
    judge.add_argument(
        "--concurrency", type=positive_whole, default=4, metavar="N", help="requests at once (4)"
    )
    judge.add_argument(
        "--requests-per-second",
        type=_positive_float,
        metavar="R",
        help="at most R requests a second, across all of them (default: no limit)",
    )
    judge.add_argument(
        "--max-retries",
        type=_whole,
        default=5,
        metavar="N",
        help="retries of a failed request (timeouts, 429, 5xx), with backoff (default 5)",
    )
    judge.add_argument(
        "--timeout",
        type=_positive_float,
        default=60.0,
        metavar="SECONDS",
        help="per request (default 60)",
    )
    judge.add_argument(
        "--price-input",
        type=_price,
        metavar="USD",
        help="price of a million prompt tokens, to report the run's cost",
    )
    judge.add_argument(
        "--price-output",
        type=_price,
        metavar="USD",
        help="price of a million completion tokens, to report the run's cost",
    )
    parser.set_defaults(handler=run)


def _whole(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} is negative")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text} must be a positive number")
    return value


def _price(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text} must be a price of 0 or more")
    return value


def judge_source(model: str) -> str:
    """The ``source`` a judge's labels carry: ``judge:<model>@<prompt version>``."""
    return f"{JUDGE_SOURCE_PREFIX}{model}@{PROMPT_VERSION}"


def run(args: argparse.Namespace) -> int:
    if args.config is not None and args.no_config:
        raise UsageError("--config and --no-config contradict each other")
    if args.labels_format is not None and args.labels is None:
        raise UsageError("--labels-format describes a --labels file; give --labels FILE")
    settings = JudgeSettings(
        endpoint=args.endpoint,
        model=args.model,
        api_key_env=args.api_key_env,
        concurrency=args.concurrency,
        requests_per_second=args.requests_per_second,
        max_retries=args.max_retries,
        timeout_seconds=args.timeout,
    )
    inputs = [*args.sources, *(x for x in (args.labels, args.docs, args.cache) if x)]
    _check_writable(args.output, inputs)
    if args.docs is not None:
        from rankgate.io.source import require_file

        require_file(Path(args.docs))
    todo, _ = pool_from_args(args)
    wanted = {pair.document_id for pair in todo.pairs}
    texts = (
        read_documents(args.docs, wanted)
        if args.docs is not None
        else trace_documents(args.sources, wanted, args.input_format)
    )
    items: list[JudgeItem] = []
    missing: dict[str, int] = {}
    for pair in todo.pairs:
        if not isinstance(pair.query_text, str) or not pair.query_text.strip():
            missing[NO_QUERY_TEXT] = missing.get(NO_QUERY_TEXT, 0) + 1
        elif pair.document_id not in texts:
            missing[NO_DOCUMENT_TEXT] = missing.get(NO_DOCUMENT_TEXT, 0) + 1
        else:
            items.append(
                JudgeItem(pair.query_id, pair.document_id, pair.query_text, texts[pair.document_id])
            )
    if todo.pairs and not items:
        raise UsageError(_nothing_to_send(missing, args.docs is not None))
    bar = ProgressBar(f"judging with {args.model}", sys.stderr, enabled=not args.no_progress)
    done = 0

    def advance(step: int) -> None:
        nonlocal done
        done += step
        bar.update(done, done, len(items))

    try:
        with JudgeCache(args.cache) as cache:
            judged = judge_pairs(items, settings, cache, progress=advance)
    finally:
        bar.close()
    source = judge_source(args.model)
    stamp = datetime.now(UTC).isoformat(timespec="seconds")
    records = [
        {
            "query_id": result.item.query_id,
            "document_id": result.item.document_id,
            "grade": result.grade,
            "source": source,
            "labeled_at": stamp,
        }
        for result in judged.results
        if result.grade is not None
    ]
    to = sys.stderr if args.output == "-" else sys.stdout
    if items and not records:
        # An outage must not empty the file an earlier run wrote: nothing is written.
        to.write(_summary(judged, missing, len(todo.pairs), args, None))
        reasons = ", ".join(f"{reason} {count:,}" for reason, count in judged.failures.items())
        raise UsageError(
            f"the judge at {masked_endpoint(args.endpoint)} graded no pair ({reasons}); "
            f"{shown(args.output)} was left as it was"
        )
    _write_jsonl(records, args.output)
    to.write(_summary(judged, missing, len(todo.pairs), args, len(records)))
    return EXIT_OK


def _nothing_to_send(missing: dict[str, int], docs_given: bool) -> str:
    if missing.get(NO_QUERY_TEXT) and not missing.get(NO_DOCUMENT_TEXT):
        return (
            "no pooled pair has a query text for the judge to read: record the query's text in "
            "the traces' 'query' field (or query_text, question, text)"
        )
    where = (
        "--docs has none of the pooled documents' texts (check its ID field)"
        if docs_given
        else "give --docs FILE (document ID and text), or record retrieved_texts in the traces"
    )
    return f"no pooled pair has a document text for the judge to read: {where}"


def _summary(
    judged: JudgeRun,
    missing: dict[str, int],
    pooled: int,
    args: argparse.Namespace,
    written: int | None,
) -> str:
    """What the run did and cost; ``written``: the labels written (None: none were)."""
    lines = [
        f"{counted(pooled, 'pair')} pooled: {judged.judged:,} graded by {args.model} at "
        f"{masked_endpoint(args.endpoint)}, {judged.cached:,} from the cache, "
        f"{judged.failed:,} failed"
        + (
            " ("
            + ", ".join(f"{reason} {count:,}" for reason, count in judged.failures.items())
            + ")"
            if judged.failures
            else ""
        )
        + (
            "; not sent: " + ", ".join(f"{reason} {count:,}" for reason, count in missing.items())
            if missing
            else ""
        ),
        f"{counted(judged.requests, 'request')}, "
        f"{judged.prompt_tokens:,} prompt and {judged.completion_tokens:,} completion tokens"
        + _cost(judged, args.price_input, args.price_output),
    ]
    where = "standard output" if args.output == "-" else args.output
    if written is not None:
        lines.append(
            f"wrote {counted(written, 'label')} (source {judge_source(args.model)}) to {where}"
        )
    return "\n".join(lines) + "\n"


def _cost(judged: JudgeRun, price_input: float | None, price_output: float | None) -> str:
    if price_input is None and price_output is None:
        return ""
    cost = (judged.prompt_tokens * (price_input or 0.0)) / 1e6 + (
        judged.completion_tokens * (price_output or 0.0)
    ) / 1e6
    return f" (about ${cost:,.4f})"


# --- document texts ------------------------------------------------------------------------------


def read_documents(path: str | Path, wanted: Iterable[str] | None = None) -> dict[str, str]:
    """Document ID -> text from a ``--docs`` file, for the IDs in ``wanted`` (all when None). A
    record's title, when it has one, is put before its text, as retrieval corpora are judged."""
    keep = None if wanted is None else set(wanted)
    texts: dict[str, str] = {}
    for raw in open_source(path):
        record = raw.value
        if not isinstance(record, dict):
            raise InputError(raw.location, None, "expected a record with a document ID and text")
        identifier = next((record[key] for key in DOC_ID_FIELDS if key in record), None)
        if isinstance(identifier, int) and not isinstance(identifier, bool):
            identifier = str(identifier)
        if not isinstance(identifier, str) or not identifier:
            raise InputError(
                raw.location,
                DOC_ID_FIELDS[0],
                f"expected a document ID in one of {', '.join(DOC_ID_FIELDS)}",
            )
        if keep is not None and identifier not in keep:
            continue
        text = next((record[key] for key in DOC_TEXT_FIELDS if key in record), None)
        if not isinstance(text, str):
            raise InputError(
                raw.location,
                DOC_TEXT_FIELDS[0],
                f"expected the document's text in one of {', '.join(DOC_TEXT_FIELDS)}",
            )
        title = record.get(TITLE_FIELD)
        if not text.strip():
            continue  # no text to judge: the pair is counted as without one
        full = f"{title}\n{text}" if isinstance(title, str) and title.strip() else text
        if texts.setdefault(identifier, full) != full:
            raise InputError(
                raw.location,
                DOC_ID_FIELDS[0],
                f"document {shown_query_id(identifier)} is listed again with another text; "
                "which one should the judge read?",
            )
    return texts


def trace_documents(
    sources: Sequence[str], wanted: Iterable[str], input_format: str | None
) -> dict[str, str]:
    """Document ID -> text from trace files whose records carry ``retrieved_texts`` aligned with
    ``retrieved_ids`` (a store keeps no document text)."""
    keep = set(wanted)
    texts: dict[str, str] = {}
    for source in sources:
        if source == "-" or is_store_url(source) or input_format == "otlp":
            continue
        for raw in open_source(source, input_format):
            record = raw.value
            if not isinstance(record, dict):
                continue
            ids, found = record.get("retrieved_ids"), record.get(TRACE_TEXTS_FIELD)
            if not isinstance(ids, list) or not isinstance(found, list):
                continue
            if len(ids) != len(found):
                raise InputError(
                    raw.location,
                    TRACE_TEXTS_FIELD,
                    f"has {len(found):,} texts for {len(ids):,} retrieved_ids; they must align",
                )
            for identifier, text in zip(ids, found, strict=True):
                key = str(identifier) if isinstance(identifier, int) else identifier
                if isinstance(key, str) and key in keep and isinstance(text, str) and text.strip():
                    texts.setdefault(key, text)
    return texts


# --- output --------------------------------------------------------------------------------------


def _check_writable(output: str, inputs: Sequence[str]) -> None:
    """Before any request is paid for: the output is no input, and can be written."""
    if output == "-":
        return
    target = Path(output).resolve()
    for text in inputs:
        if "://" not in str(text) and text != "-" and Path(text).resolve() == target:
            raise UsageError(f"--output {shown(output)} is also an input; write to a new file")
    if target.is_dir():
        raise UsageError(f"--output {shown(output)} is a directory; name a file")
    if not target.parent.is_dir():
        raise UsageError(f"--output {shown(output)}: no directory {target.parent}")
    if target.exists() and not target.is_file():
        return  # a FIFO or a device: written as it is, in _write_jsonl
    if not os.access(target.parent, os.W_OK | os.X_OK):
        raise UsageError(f"--output {shown(output)}: cannot write in {target.parent}")


def _write_jsonl(records: list[dict[str, Any]], output: str) -> None:
    # ASCII with escapes: IDs round-trip exactly, whatever they hold.
    text = "".join(json.dumps(record) + "\n" for record in records)
    if output == "-":
        sys.stdout.write(text)
        return
    # Through a symbolic link to its target, as any writer would.
    target = Path(output).resolve()
    try:
        if target.exists() and not target.is_file():
            # A FIFO or a device (/dev/stdout, a named pipe): written to, never replaced.
            with target.open("w", encoding="utf-8") as stream:
                stream.write(text)
            return
        # Written beside the target and renamed over it: a killed run leaves the old file or the
        # new one, never half of one. The new file gets the mode a plain open would give it.
        handle, temporary = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as stream:
                stream.write(text)
            os.chmod(temporary, _created_mode(target))
            os.replace(temporary, target)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
    except OSError as problem:
        raise UsageError(
            f"--output {shown(output)}: cannot write it ({problem.strerror or problem})"
        ) from None


def _created_mode(target: Path) -> int:
    """The existing file's mode, else 0o666 less the umask (read without changing it for long:
    os.umask is the only way to read it)."""
    if target.exists():
        return target.stat().st_mode & 0o7777
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask
