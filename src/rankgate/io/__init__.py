"""Readers for every supported trace source, and the validator they all feed.

``open_source`` is the one entry point: it takes a path, ``-``, several paths, a glob, a folder, an
``s3://``/``gs://`` URL, a list of dicts, a table or an IR toolkit's run (``ir_objects``) and
returns a ``TraceSource`` yielding located ``RawRecord``s, which ``validate_record`` turns into
``Trace``s.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from rankgate.errors import UsageError
from rankgate.io.datasets import ChainedSource, DatasetSource, TimeWindow, open_paths
from rankgate.io.ir_objects import run_source
from rankgate.io.json_records import JsonSource
from rankgate.io.otlp import OtlpOptions, OtlpSource, OtlpStats
from rankgate.io.source import (
    FORMATS,
    TraceSource,
    detect_format,
    file_size,
    names_many_files,
    refuse_otlp_export,
    require_file,
)
from rankgate.io.tables import ArrowSource, CsvSource, RecordsSource, arrow_table
from rankgate.io.trec import TrecSource
from rankgate.io.validate import FieldMap, RawRecord, Trace, validate_record

__all__ = [
    "FORMATS",
    "ChainedSource",
    "DatasetSource",
    "FieldMap",
    "OtlpOptions",
    "OtlpSource",
    "OtlpStats",
    "RawRecord",
    "TimeWindow",
    "Trace",
    "TraceSource",
    "TrecSource",
    "open_source",
    "validate_record",
]

STDIN = "-"


def _is_source(data: Any) -> bool:
    """Anything shaped like a ``TraceSource`` (a store's reader, a caller's own) passes through."""
    return (
        callable(getattr(data, "done", None))
        and hasattr(data, "total")
        and isinstance(getattr(data, "name", None), str)
        and hasattr(data, "__iter__")
    )


# Sources built by hand (e.g. a TrecSource) pass straight through open_source.
SOURCE_TYPES = (
    JsonSource,
    ArrowSource,
    CsvSource,
    RecordsSource,
    TrecSource,
    OtlpSource,
    ChainedSource,
)


def open_source(
    data: Any, input_format: str | None = None, *, window: TimeWindow | None = None
) -> TraceSource:
    """A trace source for a path (str or Path; ``-`` is stdin), several paths (a list), a glob, a
    folder, an ``s3://`` or ``gs://`` URL, a trace store URL, a list of dicts, a table, or a run
    as IR toolkits hold it (``{qid: {doc: score}}``, a ranx ``Run``, ir_measures ``ScoredDoc``
    tuples: see ``io.ir_objects``).

    ``input_format`` (one of ``FORMATS``) overrides detection from the file name and content.
    ``"otlp"`` reads an OpenTelemetry export file, or every export file in a folder, with default
    ``OtlpOptions``; pass an ``OtlpSource`` built by hand for other options.

    ``window`` keeps only the traces recorded in it: by date partition (``date=YYYY-MM-DD``
    folders, whose other days are never opened) and by each trace's ``timestamp``; for a store
    URL, by the time the store recorded.
    """
    if input_format is not None and input_format not in FORMATS:
        raise UsageError(f"unknown input format {input_format!r} (formats: {', '.join(FORMATS)})")
    windowed = window is not None and window.active
    if isinstance(data, str) and "://" in data:
        from rankgate.store import StoreSource, Window, is_store_url

        if is_store_url(data):
            if input_format is not None:
                raise UsageError("a trace store URL has no input format to choose")
            if window is not None and windowed:
                return StoreSource(data, Window(since=window.since, until=window.until))
            return StoreSource(data)
    if input_format != "otlp" and (names_many_files(data) or (windowed and _is_path(data))):
        return open_paths(
            list(data) if isinstance(data, (list, tuple)) else [data],
            input_format,
            window=window,
        )
    if windowed:
        raise UsageError(
            "--since/--until select among files, folders, datasets and trace stores; "
            f"not in a {type(data).__name__}"
        )
    if isinstance(data, str) and data == STDIN:
        if input_format not in (None, "json"):
            raise UsageError("standard input is read as JSON Lines or a JSON array only")
        return JsonSource.from_stdin()
    if isinstance(data, (str, Path)):
        path = Path(data)
        if input_format == "otlp":
            return OtlpSource(path)  # a folder is fine here: every export file in it is read
        require_file(path)
        chosen = input_format or detect_format(path)
        size = file_size(path) if path.is_file() else None
        if chosen == "parquet":
            return ArrowSource.parquet(path)
        if chosen in ("csv", "tsv"):
            return CsvSource(path, "\t" if chosen == "tsv" else ",", size)
        refuse_otlp_export(path)
        return JsonSource.from_path(path, size)
    if isinstance(data, SOURCE_TYPES):
        return data
    if _is_source(data):
        source: TraceSource = data
        return source
    utf8: set[str] = set()
    table = arrow_table(data, utf8)
    if table is not None:
        converted = ArrowSource.table(f"<{type(data).__name__}>", table)
        converted.utf8_columns = frozenset(utf8)
        return converted
    # A run as pytrec_eval, ranx or ir_measures hold it; an iterator comes back peeked.
    data, run = run_source(data)
    if run is not None:
        return run
    if isinstance(data, Iterable) and not isinstance(data, (str, bytes, Mapping)):
        return RecordsSource(data)
    raise UsageError(
        f"cannot read traces from a {type(data).__name__}: give a path, a list (or any iterable) "
        "of dicts, a pandas, polars or Arrow table, or a run ({query_id: {doc_id: score}})"
    )


def _is_path(data: Any) -> bool:
    return isinstance(data, Path) or (isinstance(data, str) and data != STDIN)
