"""Errors a user can cause, each carrying a message fit to print on one line.

The tree::

    RankgateError            anything rankgate reports to a user (the CLI exits 2 on it)
    ├── InputError           a trace record or input file is malformed; knows where (file, line, field)
    ├── SpecError            a metric or gate string does not parse, or names an unknown metric
    ├── ConfigError          rankgate.toml or an option has a bad key or value
    └── UsageError           the call itself is inconsistent (e.g. --run without --qrels)
        └── MissingExtraError  an optional extra is not installed (also an ImportError)

Modules with errors of their own subclass ``RankgateError`` beside them (for example
``rankgate.integrations.mlflow.TrackingError``: the tracking server or store failed).

Gate failures are not errors: they are results (see ``rankgate.gates``).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "ConfigError",
    "InputError",
    "Location",
    "MissingExtraError",
    "RankgateError",
    "SpecError",
    "UsageError",
]


class RankgateError(Exception):
    """Base of every error rankgate raises on purpose; its ``str`` is a one-line message."""


@dataclass(frozen=True, slots=True)
class Location:
    """Where a record came from: a source name plus a line (text formats) or a row (tables).

    ``line`` and ``row`` are 1-based; at most one of them is set.
    """

    source: str
    line: int | None = None
    row: int | None = None

    def __str__(self) -> str:
        if self.line is not None:
            return f"{self.source}:{self.line}"
        if self.row is not None:
            return f"{self.source} row {self.row}"
        return self.source


class InputError(RankgateError):
    """A record or an input file is malformed.

    The message reads ``traces.jsonl:17: field 'retrieved_ids': expected a list, got str``.
    """

    def __init__(self, location: Location | str, field: str | None, problem: str) -> None:
        self.location = location
        self.field = field
        self.problem = problem
        where = str(location)
        what = f"field '{field}': {problem}" if field else problem
        super().__init__(f"{where}: {what}")


class SpecError(RankgateError):
    """A metric or gate specification is malformed or names something unknown."""


class ConfigError(RankgateError):
    """A configuration file or option value is invalid."""


class UsageError(RankgateError):
    """The arguments of a call contradict each other or are missing."""


class MissingExtraError(UsageError, ImportError):
    """An optional framework a module needs is not installed; the message names the extra.

    Both a ``RankgateError`` (the CLI prints it as one line) and an ``ImportError`` (code that
    guards an optional import with ``except ImportError`` keeps working)."""
