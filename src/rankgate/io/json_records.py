"""JSON Lines and JSON arrays, plain or gzip-compressed, from a file or standard input.

Which of the two a source holds is decided by its first non-blank character (``[`` starts an array),
so a ``.json`` file of either shape and ``-`` both work. Every record keeps its line number.
"""

from __future__ import annotations

import gzip
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from rankgate.errors import InputError, Location
from rankgate.io.validate import RawRecord

__all__ = ["JsonSource"]

_GZIP_MAGIC = b"\x1f\x8b"
_BOM = b"\xef\xbb\xbf"


def _refuse_constant(name: str) -> Any:
    # Python's json accepts NaN and Infinity; JSON does not, and a NaN grade must not slip through.
    raise ValueError(f"{name} is not valid JSON")


_DECODER = json.JSONDecoder(parse_constant=_refuse_constant)


class JsonSource:
    """Records from JSON Lines or a JSON array; ``name`` is the path or ``<stdin>``."""

    def __init__(self, name: str, raw: IO[bytes], total: int | None) -> None:
        self.name = name
        self.total = total
        self._raw = raw

    @classmethod
    def open(cls, path: Path, total: int | None) -> JsonSource:
        return cls(str(path), path.open("rb"), total)

    def done(self) -> int:
        try:
            return self._raw.tell()
        except (OSError, ValueError):
            return 0

    def __iter__(self) -> Iterator[RawRecord]:
        with self._raw:
            stream = self._decompressed()
            head = stream.peek(64)[:64].lstrip(_BOM).lstrip()
            if head.startswith(b"["):
                yield from self._array(stream.read())
            else:
                yield from self._lines(stream)

    def _decompressed(self) -> Any:
        buffered = self._raw if hasattr(self._raw, "peek") else _buffer(self._raw)
        if buffered.peek(2)[:2] == _GZIP_MAGIC:
            return _buffer(gzip.GzipFile(fileobj=buffered, mode="rb"))
        return buffered

    def _lines(self, stream: IO[bytes]) -> Iterator[RawRecord]:
        ordinal = 0
        for number, line in enumerate(stream, start=1):
            if number == 1:
                line = line.removeprefix(_BOM)
            if not line.strip():
                continue  # blank lines separate nothing and are not records
            ordinal += 1
            location = Location(self.name, line=number)
            try:
                value = _DECODER.decode(line.decode("utf-8"))
            except UnicodeDecodeError:
                yield RawRecord(location, None, ordinal, problem="line is not valid UTF-8")
            except ValueError as problem:
                yield RawRecord(
                    location, None, ordinal, problem=f"not valid JSON ({_reason(problem)})"
                )
            else:
                yield RawRecord(location, value, ordinal)

    def _array(self, data: bytes) -> Iterator[RawRecord]:
        try:
            text = data.removeprefix(_BOM).decode("utf-8")
        except UnicodeDecodeError as problem:
            raise InputError(
                self.name, None, f"file is not valid UTF-8 ({problem.reason})"
            ) from None
        position = text.index("[") + 1
        line = 1 + text.count("\n", 0, position)
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


def _skip_space(text: str, position: int, line: int) -> tuple[int, int]:
    while position < len(text) and text[position] in " \t\r\n":
        if text[position] == "\n":
            line += 1
        position += 1
    return position, line


def _reason(problem: ValueError) -> str:
    return problem.msg if isinstance(problem, json.JSONDecodeError) else str(problem)


def _buffer(handle: Any) -> io.BufferedReader:
    return io.BufferedReader(handle)
