"""What every reader provides, and how a file's format is chosen."""

from __future__ import annotations

import gzip
import io
import os
import re
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, Protocol
from urllib.parse import quote

from rankgate.errors import InputError, UsageError
from rankgate.io.bounded import cannot_read, open_binary
from rankgate.io.validate import RawRecord

__all__ = [
    "FORMATS",
    "GZIP_ERRORS",
    "TraceSource",
    "bytes_done",
    "decompressed",
    "detect_format",
    "has_glob",
    "is_remote_url",
    "names_many_files",
    "refuse_otlp_export",
]

GZIP_MAGIC = b"\x1f\x8b"
SQLITE_MAGIC = b"SQLite format 3\x00"
PARQUET_MAGIC = b"PAR1"
# An OTLP/JSON export is one object whose first key is resourceSpans (protobuf's JSON mapping
# writes fields in order; the proto name is accepted too). Only the head of the file is looked at.
_OTLP_HEAD = re.compile(
    rb'\A(?:\xef\xbb\xbf)?[ \t\r\n]*\{[ \t\r\n]*"(?:resourceSpans|resource_spans)"'
)
_OTLP_PROBE_BYTES = 4096
# What a corrupt or truncated gzip stream raises while it is being read.
GZIP_ERRORS = (gzip.BadGzipFile, EOFError, zlib.error)

# "otlp" is never detected (an OTLP export is also plain JSON): it is chosen by name, and reads a
# file or every export file in a folder.
FORMATS = ("json", "parquet", "csv", "tsv", "otlp")

_SUFFIXES = {
    ".jsonl": "json",
    ".ndjson": "json",
    ".json": "json",
    ".parquet": "parquet",
    ".pq": "parquet",
    ".csv": "csv",
    ".tsv": "tsv",
}


class TraceSource(Protocol):
    """A stream of raw records plus what a progress bar needs.

    ``total`` and ``done()`` are in one unit (bytes of the file, or rows), so their ratio is the
    fraction read; ``total`` is None when it cannot be known in advance (stdin).
    """

    name: str
    total: int | None

    def __iter__(self) -> Iterator[RawRecord]: ...

    def done(self) -> int: ...


# Object storage read through pyarrow's file systems (credentials from the environment).
REMOTE_SCHEMES = ("s3", "gs", "gcs")
GLOB_CHARACTERS = frozenset("*?[")
_URL_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")


def is_remote_url(text: object) -> bool:
    """True for an object-storage URL: ``s3://bucket/key``, ``gs://bucket/key``."""
    match = _URL_SCHEME.match(text) if isinstance(text, str) else None
    return match is not None and match.group(1).lower() in REMOTE_SCHEMES


def has_glob(text: str) -> bool:
    return any(character in GLOB_CHARACTERS for character in text)


def names_many_files(data: object) -> bool:
    """Whether ``data`` names an input read as a set of files (``io/datasets.py``): a list of
    paths, a glob, a folder, or an object-storage URL. A path that exists as written is itself,
    even when its name holds a glob character."""
    if isinstance(data, (list, tuple)):
        return bool(data) and all(isinstance(item, (str, Path)) for item in data)
    if isinstance(data, Path):
        return data.is_dir()
    if not isinstance(data, str) or data == "-":
        return False
    if is_remote_url(data):
        return True
    if _URL_SCHEME.match(data):
        return False
    return os.path.isdir(data) or (has_glob(data) and not os.path.exists(data))


def data_suffix(path: Path) -> str:
    """The suffix that names the data format, lower-cased, looking past ``.gz``: ``.jsonl``."""
    suffixes = [s.lower() for s in path.suffixes if s.lower() != ".gz"]
    return suffixes[-1] if suffixes else ""


def detect_format(path: Path) -> str:
    """Format from the file name (ignoring ``.gz``), else from the first bytes of a regular file.

    A pipe or FIFO (``<(cmd)``, ``/dev/stdin``) is never probed, since what a probe reads is gone:
    without a telling name it is read as JSON, whose reader handles gzip and both shapes itself.
    An SQLite database is refused whatever its name, with the store URL that reads it.
    """
    head = b""
    if path.is_file():
        with open_binary(path) as probe:
            try:
                head = probe.read(len(SQLITE_MAGIC))
            except OSError as problem:
                raise cannot_read(path, problem) from None
    if head.startswith(SQLITE_MAGIC):
        raise InputError(
            str(path),
            None,
            "is an SQLite database, not a trace file; to read a rankgate trace store, pass "
            f"{sqlite_url(path)}",
        )
    suffix = data_suffix(path)
    if suffix in _SUFFIXES:
        return _SUFFIXES[suffix]
    if head.startswith(PARQUET_MAGIC):
        return "parquet"
    return "json"


def sqlite_url(path: Path) -> str:
    """The store URL of an SQLite file, in the form ``store.backends.connect`` reads: three slashes
    and the path as given, so an absolute path gives four (``sqlite:////abs/traces.db``)."""
    return "sqlite:///" + quote(str(path), safe="/~:@+=,")


def refuse_otlp_export(path: Path) -> None:
    """An ``InputError`` when a file to be read as trace records is an OTLP/JSON export, which
    would otherwise be read as one record without a ranking. Only regular files are probed."""
    if not path.is_file():
        return
    with open_binary(path) as raw:
        try:
            head = decompressed(raw).peek(_OTLP_PROBE_BYTES)[:_OTLP_PROBE_BYTES]
        except (OSError, *GZIP_ERRORS):
            return  # the reader itself reports an unreadable or corrupt file
    if _OTLP_HEAD.match(head):
        raise InputError(
            str(path),
            None,
            "looks like an OpenTelemetry (OTLP) trace export (it holds resourceSpans), not trace "
            "records; pass --input-format otlp to read its retriever spans",
        )


def require_file(path: Path) -> None:
    """A usage error unless ``path`` names something readable that is not a folder."""
    if path.is_dir():
        raise UsageError(f"{path}: is a folder; name a file")
    if not path.exists():
        raise UsageError(f"{path}: no such file")


def file_size(path: Path) -> int | None:
    try:
        return os.path.getsize(path)
    except OSError:
        return None


def decompressed(raw: IO[bytes]) -> Any:
    """``raw`` buffered (it has ``peek``), with gzip undone when its first two bytes say gzip,
    whatever the file is called."""
    buffered: Any = raw if isinstance(raw, io.BufferedReader) else io.BufferedReader(raw)
    if buffered.peek(2)[:2] == GZIP_MAGIC:
        return io.BufferedReader(gzip.GzipFile(fileobj=buffered, mode="rb"))
    return buffered


def bytes_done(raw: IO[bytes] | None, total: int | None) -> int:
    """How far a reader has got in its (compressed) file, for the progress bar."""
    if raw is None:
        return 0
    if raw.closed:
        return total or 0  # read to the end
    try:
        return raw.tell()
    except (OSError, ValueError):
        return 0  # not seekable (a pipe): the bar shows a record count instead
