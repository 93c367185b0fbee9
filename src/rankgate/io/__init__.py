"""Readers for every supported trace source, and the validator they all feed.

``open_source`` is the one entry point: it takes a path, ``-``, a list of dicts or a table and
returns a ``TraceSource`` yielding located ``RawRecord``s, which ``validate_record`` turns into
``Trace``s.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from rankgate.errors import UsageError
from rankgate.io.json_records import JsonSource
from rankgate.io.source import FORMATS, TraceSource, detect_format, file_size, require_file
from rankgate.io.tables import ArrowSource, CsvSource, RecordsSource, arrow_table
from rankgate.io.trec import TrecSource
from rankgate.io.validate import FieldMap, RawRecord, Trace, validate_record

__all__ = [
    "FORMATS",
    "FieldMap",
    "RawRecord",
    "Trace",
    "TraceSource",
    "TrecSource",
    "open_source",
    "validate_record",
]

STDIN = "-"
# Sources built by hand (e.g. a TrecSource) pass straight through open_source.
SOURCE_TYPES = (JsonSource, ArrowSource, CsvSource, RecordsSource, TrecSource)


def open_source(data: Any, input_format: str | None = None) -> TraceSource:
    """A trace source for a path (str or Path; ``-`` is stdin), a list of dicts, or a table.

    ``input_format`` (one of ``FORMATS``) overrides detection from the file name and content.
    """
    if input_format is not None and input_format not in FORMATS:
        raise UsageError(f"unknown input format {input_format!r} (formats: {', '.join(FORMATS)})")
    if isinstance(data, str) and data == STDIN:
        if input_format not in (None, "json"):
            raise UsageError("standard input is read as JSON Lines or a JSON array only")
        return JsonSource.from_stdin()
    if isinstance(data, (str, Path)):
        path = Path(data)
        require_file(path)
        chosen = input_format or detect_format(path)
        size = file_size(path) if path.is_file() else None
        if chosen == "parquet":
            return ArrowSource.parquet(path)
        if chosen in ("csv", "tsv"):
            return CsvSource(path, "\t" if chosen == "tsv" else ",", size)
        return JsonSource.from_path(path, size)
    if isinstance(data, SOURCE_TYPES):
        return data
    table = arrow_table(data)
    if table is not None:
        return ArrowSource.table(f"<{type(data).__name__}>", table)
    if isinstance(data, Iterable) and not isinstance(data, (str, bytes, Mapping)):
        return RecordsSource(data)
    raise UsageError(
        f"cannot read traces from a {type(data).__name__}: give a path, a list (or any iterable) "
        "of dicts, or a pandas, polars or Arrow table"
    )
