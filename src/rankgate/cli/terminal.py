"""What the CLI shares: exit codes, the one path to a clean error, colour rules, the progress bar."""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path
from typing import NoReturn, TextIO

from rankgate.errors import UsageError
from rankgate.report.console import Style, counted
from rankgate.store.urls import SECRET_PARAMETERS

__all__ = [
    "EXIT_FAILED",
    "EXIT_INTERNAL",
    "EXIT_OK",
    "EXIT_USAGE",
    "ProgressBar",
    "SourceProgress",
    "abort",
    "mask_credentials",
    "one_line",
    "style_for",
    "write_extra_report",
    "write_report",
    "write_stdout",
]

EXIT_OK = 0
EXIT_FAILED = 1  # a gate failed
EXIT_USAGE = 2  # bad arguments or bad input
EXIT_INTERNAL = 3  # a bug in rankgate: never a verdict, never the user's input

# scheme://user:password@ and password=... as they appear in connection strings and URLs.
_URL_PASSWORD = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^\s:/@]*:)[^\s@/]*@")
_KEY_PASSWORD = re.compile(
    rf"(?i)(?P<head>\b(?:{SECRET_PARAMETERS})\s*=\s*)(?P<value>'[^']*'|\"[^\"]*\"|[^\s&;]*)"
)
# What may follow a value masked already: the punctuation of the sentence around it.
_MASKED = re.compile(r"\*\*\*[:,.;)\]'\"]*")


def abort(message: str) -> NoReturn:
    """Print one line to stderr and exit 2: the only way a user error leaves the CLI."""
    sys.stderr.write(f"rankgate: error: {one_line(mask_credentials(message))}\n")
    raise SystemExit(EXIT_USAGE)


def one_line(message: str) -> str:
    """``message`` on a single line: a line break inside (a driver's multi-line message, a
    hostile ID) would make one error read as several, or forge a line of its own."""
    return " ".join(message.splitlines())


def mask_credentials(text: str) -> str:
    """``text`` with the passwords of URLs and secret settings (``password=``, ``token=`` ...)
    replaced by ``***``: an exception from a database driver or a tracking server may quote the
    URL it was given."""
    text = _URL_PASSWORD.sub(lambda match: match.group("head") + "***@", text)

    def masked(match: re.Match[str]) -> str:
        value = match.group("value")
        # Masked by an earlier pass: keep the punctuation that followed it ("...=***: refused").
        return match.group(0) if _MASKED.fullmatch(value) else match.group("head") + "***"

    return _KEY_PASSWORD.sub(masked, text)


def write_stdout(text: str) -> None:
    """Write to stdout; a reader that went away (``| head``) is not an error and keeps the exit code."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        # Point stdout at /dev/null so the interpreter's final flush does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def write_report(text: str, output: Path | None, verdict: str) -> None:
    """The report to stdout, or to ``output`` with only the verdict line on stdout. ``-o -`` is
    stdout, as for most command-line tools."""
    if output is None or str(output) == "-":
        write_stdout(text)
        return
    try:
        # A lone surrogate from a broken trace ID is written escaped, never a crash mid-report.
        output.write_text(text, encoding="utf-8", errors="backslashreplace")
    except OSError as problem:
        raise UsageError(f"{output}: cannot write report ({problem.strerror})") from None
    write_stdout(f"{verdict}\nreport written to {output}\n")


def write_extra_report(text: str, output: Path) -> None:
    """A second report (``--html``) to a file; the notice goes to stderr so stdout stays the main
    report's."""
    try:
        output.write_text(text, encoding="utf-8", errors="backslashreplace")
    except OSError as problem:
        raise UsageError(f"{output}: cannot write report ({problem.strerror})") from None
    sys.stderr.write(f"HTML report written to {output}\n")


def style_for(stream: TextIO, choice: str) -> Style:
    """Colour when asked, or on a terminal that has not opted out (NO_COLOR, TERM=dumb)."""
    if choice == "always":
        return Style(True)
    if choice == "never" or os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return Style(False)
    return Style(stream.isatty())


class ProgressBar:
    """A one-line progress bar on stderr, drawn only on a terminal and only for slow inputs.

    It appears after ``delay`` seconds, so short runs print nothing, and redraws at most ten times
    a second.
    """

    WIDTH = 28

    def __init__(self, label: str, stream: TextIO, enabled: bool, delay: float = 0.5) -> None:
        self._label = label
        self._stream = stream
        self._enabled = enabled and stream.isatty()
        self._started = time.monotonic()
        self._delay = delay
        self._last_draw = 0.0
        self._drawn = False

    def update(self, records: int, done: int, total: int | None) -> None:
        if not self._enabled:
            return
        now = time.monotonic()
        if now - self._started < self._delay or now - self._last_draw < 0.1:
            return
        self._last_draw = now
        if total:
            fraction = min(done / total, 1.0)
            filled = int(fraction * self.WIDTH)
            bar = "#" * filled + "." * (self.WIDTH - filled)
            text = f"reading {self._label} [{bar}] {fraction:4.0%}  {counted(records, 'record')}"
        else:
            text = f"reading {self._label}  {counted(records, 'record')}"
        self._stream.write("\r" + text[:120] + "\x1b[K")
        self._stream.flush()
        self._drawn = True

    def close(self) -> None:
        if self._drawn:
            self._stream.write("\r\x1b[K")
            self._stream.flush()


class SourceProgress:
    """One progress bar per source, each drawn only while that source is read: the ``progress``
    callback of ``compare`` and of ``labels_todo`` (source name, records, units done, total)."""

    def __init__(self, stream: TextIO, enabled: bool) -> None:
        self._stream = stream
        self._enabled = enabled
        self._name: str | None = None
        self._bar: ProgressBar | None = None

    def update(self, name: str, records: int, done: int, total: int | None) -> None:
        if self._bar is None or name != self._name:
            self.close()
            self._name = name
            self._bar = ProgressBar(name, self._stream, enabled=self._enabled)
        self._bar.update(records, done, total)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
