"""What the user names as one input, resolved into data files.

Several paths, folders, globs (``*`` and ``?`` within a folder, ``**`` across folders) and
``s3://``/``gs://`` URLs become ``DataFile``s: a pyarrow file system, a path on it, the name
reports show (a URL's credentials masked), the file's format and the hive partitions
(``key=value`` folders) above it. Nothing is opened here but folder listings; which files are then
read is ``io/datasets.py``'s choice.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

from rankgate.errors import UsageError
from rankgate.io.source import data_suffix, detect_format, has_glob, is_remote_url

__all__ = ["DATA_SUFFIXES", "DATE_PARTITIONS", "DataFile", "filesystem_for", "resolve", "shown"]

# Hive partition keys read as a trace's day, in the order looked for.
DATE_PARTITIONS = ("date", "day", "dt")
# Suffixes of files a folder or a glob contributes (``.gz`` looked past); others are passed over.
DATA_SUFFIXES = {
    ".jsonl": "json",
    ".ndjson": "json",
    ".json": "json",
    ".parquet": "parquet",
    ".pq": "parquet",
    ".csv": "csv",
    ".tsv": "tsv",
}
_DAY = re.compile(r"\d{4}-\d{2}-\d{2}\Z")
_URL = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")


@dataclass(frozen=True, slots=True)
class DataFile:
    """One data file of an input: where it is, what reports call it, its format, its partitions."""

    filesystem: Any
    path: str
    name: str
    format: str
    partitions: dict[str, str] = field(default_factory=dict)
    local: bool = True

    def day(self) -> date | None:
        """The day of the file's date partition (the first of ``DATE_PARTITIONS`` present)."""
        for key in DATE_PARTITIONS:
            value = self.partitions.get(key)
            if value is None:
                continue
            try:
                if not _DAY.match(value):
                    raise ValueError(value)
                return date.fromisoformat(value)
            except ValueError:
                raise UsageError(
                    f"{self.name}: partition {key}={value} is not a YYYY-MM-DD date, so "
                    "--since/--until cannot select by it"
                ) from None
        return None


def shown(text: str) -> str:
    """A path or URL as messages show it: any credentials in a URL masked."""
    if not _URL.match(text):
        return text
    from rankgate.store.urls import redact_url

    return redact_url(text)


def _storage_problem(spec: str, problem: BaseException) -> UsageError:
    """One line for a failure of object storage (no bucket, refused credentials, no answer),
    with any secret the URL or the message carries masked."""
    from rankgate.store.urls import describe_error

    text = describe_error(problem, spec)
    return UsageError(f"{shown(spec)}: {text}")


def filesystem_for(spec: str) -> tuple[Any, str, bool]:
    """The pyarrow file system a spec lives on, the path on it, and whether it is local.

    Object storage takes its credentials, region and endpoint from the environment and the usual
    configuration files (``AWS_*``, ``~/.aws``, ``GOOGLE_APPLICATION_CREDENTIALS``), or from the
    URL's own options (``?endpoint_override=...``)."""
    import pyarrow.fs as pafs

    if is_remote_url(spec):
        try:
            filesystem, path = pafs.FileSystem.from_uri(spec)
        except (OSError, ValueError) as problem:  # ArrowInvalid is a ValueError
            raise _storage_problem(spec, problem) from None
        return filesystem, path, False
    return pafs.LocalFileSystem(), os.path.abspath(spec), True


def resolve(
    specs: Sequence[str | Path], input_format: str | None = None, filesystem: Any = None
) -> list[DataFile]:
    """The data files that ``specs`` name, in order, each once. A folder or glob gives its data
    files (names starting with ``.`` or ``_`` passed over, as Spark and pyarrow do), sorted by
    path. ``filesystem`` (a pyarrow file system) replaces the local one, for tests and wrappers."""
    files: list[DataFile] = []
    seen: set[tuple[int, str]] = set()
    for spec in specs:
        text = str(spec)
        if text == "-":
            raise UsageError("standard input cannot be read together with other inputs")
        if _URL.match(text) and not is_remote_url(text):
            raise UsageError(
                f"{shown(text)}: only files, folders, globs and s3:// or gs:// URLs can be "
                "read together as one input"
            )
        for found in _files_of(text, input_format, filesystem):
            key = (id(found.filesystem) if not found.local else 0, found.path)
            if key not in seen:
                seen.add(key)
                files.append(found)
    return files


def _files_of(spec: str, input_format: str | None, replacement: Any) -> list[DataFile]:
    import pyarrow.fs as pafs

    filesystem, path, local = filesystem_for(spec)
    if replacement is not None and local:
        filesystem = replacement
    try:
        if has_glob(path) and not (local and os.path.exists(path)):
            return _globbed(spec, filesystem, path, local, input_format)
        info = filesystem.get_file_info(path)
    except (OSError, ValueError) as problem:
        if local:
            raise UsageError(f"{spec}: {getattr(problem, 'strerror', None) or problem}") from None
        raise _storage_problem(spec, problem) from None
    if info.type == pafs.FileType.NotFound:
        raise UsageError(f"{shown(spec)}: no such file or folder")
    if info.type == pafs.FileType.Directory:
        found = _listed(spec, filesystem, path, local, input_format, None)
        if not found:
            raise UsageError(
                f"{shown(spec)}: is a folder without trace files (looked for "
                f"{', '.join(sorted(DATA_SUFFIXES))}, also gzipped)"
            )
        return found
    chosen = input_format or _format_of(path, local, named=True)
    return [DataFile(filesystem, path, shown(spec), chosen, _partitions(path), local)]


def _format_of(path: str, local: bool, *, named: bool) -> str:
    """A file's format: from its name; a file named on its own (not found by a folder or glob)
    is probed when local, as a single file always was."""
    if named and local:
        return detect_format(Path(path))
    return DATA_SUFFIXES.get(data_suffix(Path(path)), "json")


def _globbed(
    spec: str, filesystem: Any, path: str, local: bool, input_format: str | None
) -> list[DataFile]:
    parts = path.split("/")
    fixed = next(index for index, part in enumerate(parts) if has_glob(part))
    base = "/".join(parts[:fixed]) or "/"
    pattern = _glob_pattern(path)
    import pyarrow.fs as pafs

    if filesystem.get_file_info(base).type != pafs.FileType.Directory:
        raise UsageError(f"{shown(spec)}: no file matches")
    found = _listed(spec, filesystem, base, local, input_format, pattern)
    if not found:
        raise UsageError(f"{shown(spec)}: no file matches")
    return found


def _glob_pattern(path: str) -> re.Pattern[str]:
    """A path glob as a regular expression: ``*`` and ``?`` stay within one folder, ``**`` spans
    folders, ``[...]`` is a character class."""
    pieces: list[str] = []
    index = 0
    while index < len(path):
        character = path[index]
        if path.startswith("**/", index):
            pieces.append("(?:[^/]*/)*")
            index += 3
            continue
        if path.startswith("**", index):
            pieces.append(".*")
            index += 2
            continue
        if character == "*":
            pieces.append("[^/]*")
        elif character == "?":
            pieces.append("[^/]")
        elif character == "[":
            end = path.find("]", index + 2)
            if end < 0:
                pieces.append(re.escape(character))
            else:
                inner = path[index + 1 : end]
                if inner.startswith("!"):
                    inner = "^" + inner[1:]
                pieces.append(f"[{inner.replace(chr(92), chr(92) * 2)}]")
                index = end
        else:
            pieces.append(re.escape(character))
        index += 1
    return re.compile("".join(pieces) + r"\Z")


def _listed(
    spec: str,
    filesystem: Any,
    base: str,
    local: bool,
    input_format: str | None,
    pattern: re.Pattern[str] | None,
) -> list[DataFile]:
    """Data files under ``base`` (matching ``pattern`` when given), sorted by path."""
    import pyarrow.fs as pafs

    infos = filesystem.get_file_info(pafs.FileSelector(base, recursive=True))
    prefix = base.rstrip("/") + "/"
    # What reports call each file: the user's own spelling of the folder, then the rest.
    written = spec if pattern is None else _written_base(spec)
    found = []
    for info in sorted(infos, key=lambda item: item.path):
        if info.type != pafs.FileType.File:
            continue
        relative = info.path[len(prefix) :] if info.path.startswith(prefix) else info.path
        if any(part.startswith((".", "_")) for part in relative.split("/")):
            continue
        if pattern is not None and not pattern.match(info.path):
            continue
        suffix = data_suffix(Path(info.path))
        if suffix not in DATA_SUFFIXES and input_format is None:
            continue
        name = shown(written.rstrip("/") + "/" + relative) if written else relative
        chosen = input_format or DATA_SUFFIXES[suffix]
        found.append(DataFile(filesystem, info.path, name, chosen, _partitions(relative), local))
    return found


def _written_base(spec: str) -> str:
    """The folders of a glob before its first wildcard, as the user wrote them."""
    parts = spec.split("/")
    fixed = next(index for index, part in enumerate(parts) if has_glob(part))
    return "/".join(parts[:fixed])


def _partitions(path: str) -> dict[str, str]:
    """The ``key=value`` folders of a path (hive partitioning), percent-decoded."""
    from urllib.parse import unquote

    found = {}
    for part in path.split("/")[:-1]:
        key, equals, value = part.partition("=")
        if equals and key:
            found[unquote(key)] = unquote(value)
    return found
