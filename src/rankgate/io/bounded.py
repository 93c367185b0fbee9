"""Reading untrusted input within the bounds of ``io/limits.py``.

Three things every reader needs and none should write twice: opening a file so that an unreadable
one is a one-line ``InputError`` (never an ``OSError`` traceback), reading a line without holding
more than ``MAX_RECORD_BYTES`` of it (``rankgate eval /dev/zero`` must stop, not exhaust memory),
and decoding JSON whose nesting is bounded (Python's decoder recurses, and raises ``RecursionError``
near a thousand levels).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from rankgate.errors import InputError
from rankgate.io import limits

__all__ = [
    "NestingError",
    "bounded_lines",
    "cannot_read",
    "decode_json",
    "deeper_than",
    "open_binary",
    "size_text",
    "too_long_problem",
    "utf8_length",
]

# Lines longer than this are read past in pieces of this size, so skipping costs bounded memory.
_SKIP_PIECE = 1 << 20
_CONTAINERS = (dict, list, tuple)


def cannot_read(path: Path | str, problem: OSError) -> InputError:
    """The one-line error for a file the system will not let us read: ``cannot read: permission
    denied``."""
    # strerror of the errno, not the exception's own text: pyarrow fills strerror with a sentence.
    reason = os.strerror(problem.errno) if problem.errno else type(problem).__name__
    return InputError(str(path), None, f"cannot read: {reason[:1].lower()}{reason[1:]}")


def open_binary(path: Path) -> IO[bytes]:
    """``path`` opened for reading bytes; an ``OSError`` becomes a located ``InputError``."""
    try:
        return path.open("rb")
    except OSError as problem:
        raise cannot_read(path, problem) from None


def size_text(count: int) -> str:
    """A byte count for messages: ``256 MiB``, ``8 KiB``, ``1000 bytes``."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= size and count % size == 0:
            return f"{count // size} {unit}"
    return f"{count:,} bytes"


def too_long_problem() -> str:
    return f"record is longer than {size_text(limits.MAX_RECORD_BYTES)} (the limit on one record)"


def bounded_lines(stream: IO[bytes]) -> Iterator[tuple[bytes, bool]]:
    """Every line of ``stream`` (with its ``\\n``) and False; for a line longer than
    ``MAX_RECORD_BYTES``, ``(b"", True)`` as soon as that is known. The rest of such a line is read
    past in bounded pieces only when the next line is asked for, so a caller that stops at the
    first refusal stops at once (``rankgate eval /dev/zero`` ends), and memory stays bounded."""
    limit = limits.MAX_RECORD_BYTES
    while True:
        line = stream.readline(limit + 1)
        if not line:
            return
        if len(line) <= limit or line.endswith(b"\n"):
            yield line, False
            continue
        del line
        yield b"", True
        while True:
            piece = stream.readline(_SKIP_PIECE)
            if not piece or piece.endswith(b"\n"):
                break


class NestingError(ValueError):
    """JSON nested deeper than ``MAX_NESTING_DEPTH``."""

    def __init__(self) -> None:
        super().__init__(
            f"nested deeper than {limits.MAX_NESTING_DEPTH} levels of objects and arrays "
            "(the limit on one record)"
        )


def decode_json(decoder: json.JSONDecoder, text: str) -> Any:
    """``decoder.decode(text)``, with Python's own nesting limit (a ``RecursionError``) turned into
    ``NestingError``, a ``ValueError`` like every other way the text can be refused. The exact
    bound, ``MAX_NESTING_DEPTH``, is checked on the decoded value by ``deeper_than``."""
    try:
        return decoder.decode(text)
    except RecursionError:
        raise NestingError() from None
    except json.JSONDecodeError:
        raise
    except ValueError as problem:
        # Python refuses to convert integers of more than sys.get_int_max_str_digits() digits
        # (a guard against quadratic parsing); that is malformed input like any other.
        if "digits" not in str(problem):
            raise
        raise json.JSONDecodeError("a number with too many digits", text, 0) from None


def deeper_than(value: Any, limit: int) -> bool:
    """Whether containers (dicts, lists, tuples) nest more than ``limit`` levels in ``value``,
    ``value`` itself being level 1. Level by level, never recursing, so any depth is safe to
    measure; the kinds of a container's items are collected in C, so a flat ranking of a million
    IDs costs one pass and no Python loop."""
    level = [value] if isinstance(value, _CONTAINERS) else []
    depth = 1
    while level:
        if depth > limit:
            return True
        below: list[Any] = []
        for item in level:
            children = item.values() if isinstance(item, dict) else item
            if any(issubclass(kind, _CONTAINERS) for kind in set(map(type, children))):
                below.extend(child for child in children if isinstance(child, _CONTAINERS))
        level = below
        depth += 1
    return False


def utf8_length(text: str) -> int:
    """Bytes of ``text`` in UTF-8 (a lone surrogate, which JSON can carry, counts its 3 bytes)."""
    if text.isascii():
        return len(text)
    return len(text.encode("utf-8", "surrogatepass"))
