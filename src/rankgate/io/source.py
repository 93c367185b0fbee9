"""What every reader provides, and how a file's format is chosen."""

from __future__ import annotations

import gzip
import io
import os
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, Protocol

from rankgate.errors import UsageError
from rankgate.io.validate import RawRecord

__all__ = [
    "FORMATS",
    "GZIP_ERRORS",
    "TraceSource",
    "bytes_done",
    "decompressed",
    "detect_format",
]

GZIP_MAGIC = b"\x1f\x8b"
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


def data_suffix(path: Path) -> str:
    """The suffix that names the data format, lower-cased, looking past ``.gz``: ``.jsonl``."""
    suffixes = [s.lower() for s in path.suffixes if s.lower() != ".gz"]
    return suffixes[-1] if suffixes else ""


def detect_format(path: Path) -> str:
    """Format from the file name (ignoring ``.gz``), else from the first bytes of a regular file.

    A pipe or FIFO (``<(cmd)``, ``/dev/stdin``) is never probed, since what a probe reads is gone:
    without a telling name it is read as JSON, whose reader handles gzip and both shapes itself.
    """
    suffix = data_suffix(path)
    if suffix in _SUFFIXES:
        return _SUFFIXES[suffix]
    if path.is_file():
        with path.open("rb") as probe:
            if probe.read(4) == b"PAR1":
                return "parquet"
    return "json"


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
