"""JSON Lines and JSON arrays, plain or gzip-compressed, from a file or standard input.

A ``.jsonl`` / ``.ndjson`` file is always read as lines. For ``.json`` and stdin the first non-blank
character decides (``[`` starts an array), so either shape works there. Every record keeps its line
number. gzip is recognised by its first bytes, whatever the file is called.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from rankgate.errors import InputError, Location, UsageError
from rankgate.io.source import GZIP_ERRORS, bytes_done, data_suffix, decompressed
from rankgate.io.validate import RawRecord

__all__ = ["JsonSource", "line_record"]

LINES_SUFFIXES = (".jsonl", ".ndjson")
_BOM = b"\xef\xbb\xbf"
_BLANK = b" \t\r\n"


def _refuse_constant(name: str) -> Any:
    # Python's json accepts NaN and Infinity; JSON does not, and a NaN grade must not slip through.
    raise ValueError(f"{name} is not valid JSON")


_DECODER = json.JSONDecoder(parse_constant=_refuse_constant)


class JsonSource:
    """Records from JSON Lines or a JSON array; ``name`` is the path or ``<stdin>``.

    The file is opened when iteration starts and closed when it ends, so a source that is never read
    holds no file handle.
    """

    def __init__(
        self,
        name: str,
        open_raw: Callable[[], IO[bytes]],
        total: int | None,
        *,
        lines_only: bool = False,
        owns_handle: bool = True,
    ) -> None:
        self.name = name
        self.total = total
        self._open_raw = open_raw
        self._lines_only = lines_only
        self._owns_handle = owns_handle
        self._raw: IO[bytes] | None = None
        self.rereadable = False

    @classmethod
    def from_path(cls, path: Path, total: int | None) -> JsonSource:
        lines_only = data_suffix(path) in LINES_SUFFIXES
        source = cls(str(path), lambda: path.open("rb"), total, lines_only=lines_only)
        # Only a regular file can be probed and read again; a pipe's bytes are read once.
        source.rereadable = path.is_file()
        return source

    @classmethod
    def from_stdin(cls) -> JsonSource:
        if sys.stdin is None:
            raise UsageError("standard input is closed; name a trace file instead of -")
        return cls("<stdin>", lambda: sys.stdin.buffer, None, owns_handle=False)

    def done(self) -> int:
        return bytes_done(self._raw, self.total)

    def __iter__(self) -> Iterator[RawRecord]:
        raw = self._raw = self._open_raw()
        try:
            stream = decompressed(raw)
            first_line = _skip_leading_blank(stream)
            if not self._lines_only and stream.peek(1)[:1] == b"[":
                yield from self._array(stream.read(), first_line)
            else:
                yield from self._lines(stream, first_line)
        except GZIP_ERRORS as problem:
            raise InputError(
                self.name, None, f"corrupt or truncated gzip data ({problem})"
            ) from None
        finally:
            if self._owns_handle:
                raw.close()

    def _lines(self, stream: IO[bytes], first_line: int) -> Iterator[RawRecord]:
        ordinal = 0
        for number, line in enumerate(stream, start=first_line):
            if not line.strip():
                continue  # blank lines separate nothing and are not records
            ordinal += 1
            yield line_record(self.name, line, number, ordinal)

    def reopen(self) -> IO[bytes]:
        """A new handle on the file, for reading some lines again (not for standard input)."""
        if not self.rereadable:
            raise UsageError(f"{self.name} cannot be read twice (not a regular file)")
        return self._open_raw()

    def is_lines(self) -> bool:
        """True when the source is a regular file of JSON Lines rather than one JSON array (peeks
        when unsure); the columnar reader takes only those."""
        if not self.rereadable:
            return False  # a pipe cannot be peeked, nor read again for attributes
        if self._lines_only:
            return True
        raw = self._open_raw()
        try:
            stream = decompressed(raw)
            _skip_leading_blank(stream)
            return bool(stream.peek(1)[:1] != b"[")
        except GZIP_ERRORS:
            return False  # the record reader reports it
        finally:
            raw.close()

    def line_chunks(self, chunk_bytes: int) -> Iterator[tuple[bytes, int, int]]:
        """The lines in chunks of about ``chunk_bytes`` that end at a line break: (bytes, number of
        the chunk's first line, offset of the chunk in the decompressed stream)."""
        raw = self._raw = self._open_raw()
        try:
            stream = decompressed(raw)
            offset = 3 if stream.peek(3)[:3] == _BOM else 0
            stream.read(offset)
            line = 1
            pending = b""
            while True:
                block = stream.read(chunk_bytes)
                if not block:
                    break
                data = pending + block
                cut = data.rfind(b"\n") + 1
                if cut == 0:
                    pending = data  # a line longer than a chunk: keep reading
                    continue
                yield data[:cut], line, offset
                line += data.count(b"\n", 0, cut)
                offset += cut
                pending = data[cut:]
            if pending:
                yield pending, line, offset
        except GZIP_ERRORS as problem:
            raise InputError(
                self.name, None, f"corrupt or truncated gzip data ({problem})"
            ) from None
        finally:
            if self._owns_handle:
                raw.close()

    def _array(self, data: bytes, first_line: int) -> Iterator[RawRecord]:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as problem:
            raise InputError(
                self.name, None, f"file is not valid UTF-8 ({problem.reason})"
            ) from None
        position, line = 1, first_line  # just past the opening bracket
        ordinal = 0
        while True:
            position, line = _skip_space(text, position, line)
            if position >= len(text):
                raise InputError(Location(self.name, line=line), None, "JSON array is not closed")
            if text[position] == "]":
                break
            if ordinal:
                if text[position] != ",":
                    raise InputError(
                        Location(self.name, line=line),
                        None,
                        "not valid JSON (expected ',' or ']' after an array element)",
                    )
                position, line = _skip_space(text, position + 1, line)
            ordinal += 1
            try:
                value, end = _DECODER.raw_decode(text, position)
            except ValueError as problem:
                # Inside an array a broken element leaves no safe place to resume: stop here.
                raise InputError(
                    Location(self.name, line=line), None, f"not valid JSON ({_reason(problem)})"
                ) from None
            yield RawRecord(Location(self.name, line=line), value, ordinal)
            line += text.count("\n", position, end)
            position = end
        position, line = _skip_space(text, position + 1, line)
        if position < len(text):
            raise InputError(
                Location(self.name, line=line),
                None,
                "unexpected content after the JSON array (one array per file, or use JSON Lines)",
            )


def _skip_leading_blank(stream: Any) -> int:
    """Consume a byte-order mark and leading white space; return the line the content starts on."""
    if stream.peek(3)[:3] == _BOM:
        stream.read(3)
    line = 1
    while True:
        chunk = stream.peek(1)
        if not chunk:
            return line
        rest = chunk.lstrip(_BLANK)
        consumed = len(chunk) - len(rest)
        line += int(chunk.count(b"\n", 0, consumed))
        stream.read(consumed)
        if rest:
            return line


def _skip_space(text: str, position: int, line: int) -> tuple[int, int]:
    while position < len(text) and text[position] in " \t\r\n":
        if text[position] == "\n":
            line += 1
        position += 1
    return position, line


def _reason(problem: ValueError) -> str:
    return problem.msg if isinstance(problem, json.JSONDecodeError) else str(problem)


def line_record(name: str, line: bytes, number: int, ordinal: int) -> RawRecord:
    """One line of JSON Lines decoded as the record reader does (``number``: its line number,
    ``ordinal``: its place among non-blank lines)."""
    location = Location(name, line=number)
    try:
        value = _DECODER.decode(line.decode("utf-8"))
    except UnicodeDecodeError:
        return RawRecord(location, None, ordinal, problem="line is not valid UTF-8")
    except ValueError as problem:
        return RawRecord(location, None, ordinal, problem=f"not valid JSON ({_reason(problem)})")
    return RawRecord(location, value, ordinal)
