"""JSON Lines and JSON arrays, plain or gzip-compressed, from a file or standard input.

A ``.jsonl`` / ``.ndjson`` file is always read as lines. For ``.json`` and stdin the first non-blank
character decides (``[`` starts an array), so either shape works there. Every record keeps its line
number. gzip is recognised by its first bytes, whatever the file is called.
"""

from __future__ import annotations

import codecs
import json
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

from rankgate.errors import InputError, Location, UsageError
from rankgate.io import limits
from rankgate.io.bounded import (
    NestingError,
    bounded_lines,
    cannot_read,
    decode_json,
    open_binary,
    size_text,
    too_long_problem,
)
from rankgate.io.source import GZIP_ERRORS, bytes_done, data_suffix, decompressed
from rankgate.io.validate import RawRecord

__all__ = ["JsonSource", "OversizedLine", "line_record"]

LINES_SUFFIXES = (".jsonl", ".ndjson")
_BOM = b"\xef\xbb\xbf"
_BLANK = b" \t\r\n"


def _refuse_constant(name: str) -> Any:
    # Python's json accepts NaN and Infinity; JSON does not, and a NaN grade must not slip through.
    raise ValueError(f"{name} is not valid JSON")


_DECODER = json.JSONDecoder(parse_constant=_refuse_constant)
# JSON arrays are read in blocks of this many bytes; an element longer than what is held so far
# makes the next read as long again, so a long element costs linear time.
_ARRAY_BLOCK = 1 << 20
_SPACE = re.compile(r"[ \t\r\n]*")

_line_breaks: Callable[[Any], tuple[int, int]]
try:
    from rankgate._jsonl import line_breaks as _line_breaks
except ImportError:  # built without a C compiler

    def _line_breaks(data: Any) -> tuple[int, int]:
        held = bytes(data)
        return held.count(b"\n"), held.rfind(b"\n")


@dataclass(frozen=True, slots=True)
class OversizedLine:
    """A line longer than ``MAX_RECORD_BYTES`` that ``line_chunks`` reads past instead of yielding:
    its number, and the offset of its first byte."""

    line: int
    start: int


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
        # How far ``line_chunks`` has read, noted by the thread that reads: asking the shared
        # reader (``tell``) waited for its lock while a block was being read, about a millisecond
        # of the consumer's time per chunk.
        self._read_to: int | None = None
        self.rereadable = False

    @classmethod
    def from_path(cls, path: Path, total: int | None) -> JsonSource:
        lines_only = data_suffix(path) in LINES_SUFFIXES
        source = cls(str(path), lambda: open_binary(path), total, lines_only=lines_only)
        # Only a regular file can be probed and read again; a pipe's bytes are read once.
        source.rereadable = path.is_file()
        return source

    @classmethod
    def from_stdin(cls) -> JsonSource:
        if sys.stdin is None:
            raise UsageError("standard input is closed; name a trace file instead of -")
        return cls("<stdin>", lambda: sys.stdin.buffer, None, owns_handle=False)

    def done(self) -> int:
        read_to = self._read_to
        return bytes_done(self._raw, self.total) if read_to is None else read_to

    def __iter__(self) -> Iterator[RawRecord]:
        raw = self._raw = self._open_raw()
        try:
            stream = decompressed(raw)
            first_line = _skip_leading_blank(stream)
            if not self._lines_only and stream.peek(1)[:1] == b"[":
                yield from self._array(stream, first_line)
            else:
                yield from self._lines(stream, first_line)
        except GZIP_ERRORS as problem:
            raise InputError(
                self.name, None, f"corrupt or truncated gzip data ({problem})"
            ) from None
        except OSError as problem:  # an I/O error while reading (a bad disk, a vanished mount)
            raise cannot_read(self.name, problem) from None
        finally:
            if self._owns_handle:
                raw.close()

    def _lines(self, stream: IO[bytes], first_line: int) -> Iterator[RawRecord]:
        ordinal = 0
        for number, (line, too_long) in enumerate(bounded_lines(stream), start=first_line):
            if too_long:
                ordinal += 1
                yield RawRecord(
                    Location(self.name, line=number), None, ordinal, problem=too_long_problem()
                )
                continue
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

    def line_chunks(
        self, chunk_bytes: int
    ) -> Iterator[tuple[bytearray | memoryview, int, int] | OversizedLine]:
        """The lines in chunks of about ``chunk_bytes`` that end at a line break: (bytes, number of
        the chunk's first line, offset of the chunk in the decompressed stream).

        A line that grows past ``MAX_RECORD_BYTES`` before its line break comes as an
        ``OversizedLine`` in its place, and is then read past without being held, so memory stays
        within about ``MAX_RECORD_BYTES + chunk_bytes`` whatever the input. A line that ends
        within a chunk but is still too long is left to the caller to refuse.
        """
        raw = self._raw = self._open_raw()
        try:
            stream = decompressed(raw)
            # Read, not peeked: a pipe's peek may hold fewer than the three bytes of a BOM.
            opening = stream.read(3)
            offset = 3 if opening == _BOM else 0
            line = 1
            # The bytes after the last line break so far (a view into the last buffer read).
            pending: Any = memoryview(opening)[offset:]
            while True:
                # Each chunk is read straight into a buffer of its own behind the unfinished line:
                # no copy of the block under the GIL, and the new pages are touched by the read,
                # which runs without it. A long unfinished line is read on in blocks as long as
                # itself (up to the record bound), so its bytes are copied a few times, not once
                # per block.
                head = len(pending)
                more = max(chunk_bytes, min(head, limits.MAX_RECORD_BYTES + 1 - head))
                buffer = np.empty(head + more, dtype=np.uint8).data
                buffer[:head] = pending
                got = stream.readinto(buffer[head:])
                if not got:
                    break
                self._read_to = bytes_done(raw, self.total)
                filled = head + got
                # The unfinished line is scanned again: it is short, or read in growing blocks.
                breaks, last = _line_breaks(buffer[:filled])
                if last < 0:
                    pending = buffer[:filled]
                    if filled > limits.MAX_RECORD_BYTES:
                        yield OversizedLine(line, offset)
                        skipped, rest = _skip_line(stream)
                        offset += filled + skipped
                        line += 1
                        whole = rest.rfind(b"\n") + 1  # lines read along with the skip's end
                        if whole:
                            yield bytearray(rest[:whole]), line, offset
                            line += rest.count(b"\n", 0, whole)
                            offset += whole
                        pending = memoryview(rest)[whole:]
                    continue
                cut = last + 1
                yield buffer[:cut], line, offset
                line += breaks
                offset += cut
                pending = buffer[cut:filled]
            if len(pending):
                yield pending, line, offset
        except GZIP_ERRORS as problem:
            raise InputError(
                self.name, None, f"corrupt or truncated gzip data ({problem})"
            ) from None
        except OSError as problem:
            raise cannot_read(self.name, problem) from None
        finally:
            self._read_to = None
            if self._owns_handle:
                raw.close()

    def _array(self, stream: IO[bytes], first_line: int) -> Iterator[RawRecord]:
        """The elements of a JSON array, read in blocks: the file is never held whole, and an
        element is never held past ``MAX_RECORD_BYTES``."""
        stream.read(1)  # the opening bracket
        text = _ArrayText(stream, self.name, first_line)
        ordinal = 0
        while True:
            char = text.next_char()
            if not char:
                raise InputError(text.location(), None, "JSON array is not closed")
            if char == "]":
                break
            if ordinal:
                if char != ",":
                    raise InputError(
                        text.location(),
                        None,
                        "not valid JSON (expected ',' or ']' after an array element)",
                    )
                text.pos += 1
                text.next_char()
            ordinal += 1
            location = text.location()
            yield RawRecord(location, text.element(), ordinal)
        text.pos += 1
        if text.next_char():
            raise InputError(
                text.location(),
                None,
                "unexpected content after the JSON array (one array per file, or use JSON Lines)",
            )


def _skip_line(stream: IO[bytes]) -> tuple[int, bytes]:
    """Read past the rest of a line in bounded pieces: the bytes skipped through its line break,
    and what was read after the break."""
    skipped = 0
    while True:
        block = stream.read(1 << 20)
        if not block:
            return skipped, b""
        cut = block.find(b"\n") + 1
        if cut:
            return skipped + cut, block[cut:]
        skipped += len(block)


class _ArrayText:
    """The decoded text of a JSON array, read a block at a time, with a position in it and the line
    of that position. Text before the position is dropped now and then, so only about one element
    is held at once."""

    def __init__(self, stream: IO[bytes], name: str, line: int) -> None:
        self._stream = stream
        self._name = name
        self._decoder = codecs.getincrementaldecoder("utf-8")()
        self.text = ""
        self.pos = 0
        self.line = line
        self.ended = False

    def location(self) -> Location:
        return Location(self._name, line=self.line)

    def _more(self, at_least: int = 0) -> bool:
        """Read at least ``at_least`` more bytes when there are; False at the end of the file."""
        if self.ended:
            return False
        block = self._stream.read(max(at_least, _ARRAY_BLOCK))
        try:
            decoded = self._decoder.decode(block, final=not block)
        except UnicodeDecodeError as problem:
            raise InputError(
                self._name, None, f"file is not valid UTF-8 ({problem.reason})"
            ) from None
        if not block:
            self.ended = True
        if self.pos > _ARRAY_BLOCK:
            self.text = self.text[self.pos :]
            self.pos = 0
        self.text += decoded
        return True

    def next_char(self) -> str:
        """The next character that is not white space ("" at the end), moving up to it."""
        while True:
            end = _SPACE.match(self.text, self.pos).end()  # type: ignore[union-attr]
            self.line += self.text.count("\n", self.pos, end)
            self.pos = end
            if end < len(self.text):
                return self.text[end]
            if not self._more():
                return ""

    def element(self) -> Any:
        """The JSON value at the position, moving past it; reads on while it may be cut short."""
        while True:
            start = self.pos
            held = len(self.text) - start
            try:
                value, end = _DECODER.raw_decode(self.text, start)
            except RecursionError:
                raise InputError(self.location(), None, str(NestingError())) from None
            except ValueError as problem:
                # Inside an array a broken element leaves no safe place to resume: stop here.
                if not self.ended and _maybe_cut_short(problem, self.text):
                    self._read_on(held)
                    continue
                raise InputError(
                    self.location(), None, f"not valid JSON ({_reason(problem)})"
                ) from None
            if end == len(self.text) and not self.ended:
                self._read_on(held)  # a number at the very end may go on in the next block
                continue
            self._check_size(start, end)
            self.line += self.text.count("\n", start, end)
            self.pos = end
            return value

    def _read_on(self, held: int) -> None:
        if held > limits.MAX_RECORD_BYTES:
            raise InputError(
                self.location(),
                None,
                f"array element is longer than {size_text(limits.MAX_RECORD_BYTES)} (the limit on "
                "one record), or not closed",
            )
        self._more(held)

    def _check_size(self, start: int, end: int) -> None:
        chars = end - start
        if chars * 4 > limits.MAX_RECORD_BYTES and (
            len(self.text[start:end].encode("utf-8", "surrogatepass")) > limits.MAX_RECORD_BYTES
        ):
            raise InputError(self.location(), None, too_long_problem())


def _maybe_cut_short(problem: ValueError, text: str) -> bool:
    """Whether a decoding error may only mean the text held so far ends inside the element."""
    if not isinstance(problem, json.JSONDecodeError):
        return False  # NaN or Infinity: refused whatever follows
    return problem.pos >= len(text) - 6 or problem.msg.startswith("Unterminated string")


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


def _reason(problem: ValueError) -> str:
    return problem.msg if isinstance(problem, json.JSONDecodeError) else str(problem)


def line_record(name: str, line: bytes | bytearray, number: int, ordinal: int) -> RawRecord:
    """One line of JSON Lines decoded as the record reader does (``number``: its line number,
    ``ordinal``: its place among non-blank lines)."""
    location = Location(name, line=number)
    if len(line) - line.endswith(b"\n") > limits.MAX_RECORD_BYTES:
        return RawRecord(location, None, ordinal, problem=too_long_problem())
    try:
        value = decode_json(_DECODER, line.decode("utf-8"))
    except UnicodeDecodeError:
        return RawRecord(location, None, ordinal, problem="line is not valid UTF-8")
    except NestingError as problem:
        return RawRecord(location, None, ordinal, problem=str(problem))
    except ValueError as problem:
        return RawRecord(location, None, ordinal, problem=f"not valid JSON ({_reason(problem)})")
    return RawRecord(location, value, ordinal)
