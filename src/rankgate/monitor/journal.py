"""The intake journal: what the monitor answered 202 for is on disk before the answer leaves.

The state file is written as buckets close (every few seconds), which leaves a window in which a
``kill -9`` or a power cut would lose events already acknowledged. The journal closes it: each
accepted batch (the events as the monitor kept them, or the labels) is appended as one JSON line
and, under the default ``sync=True``, ``fsync``-ed before the reply is sent. With ``sync=False``
the line is handed to the operating system before the reply: it survives the process being
killed, not the machine losing power.

Journals come in generations, ``<state>.intake-<n>.jsonl``. Saving the state takes a snapshot and
switches to generation ``n + 1`` at the same instant (under the intake lock, so no batch falls in
between); the saved state records ``n + 1``, and only after that save are the older generations
deleted. On start, the generations at or after the one the state records are replayed, in order,
onto the restored state: a crash at any point neither loses an acknowledged batch nor applies one
twice. A last line cut short by a crash was never acknowledged and is ignored.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from rankgate.errors import UsageError

__all__ = ["Journal"]


class Journal:
    """Generations of append-only JSON Lines files beside the state file ``base``."""

    def __init__(self, base: Path, *, sync: bool = True) -> None:
        self.base = base
        self.sync = sync
        self.generation = 0
        self._handle: BinaryIO | None = None

    def _path(self, generation: int) -> Path:
        return self.base.with_name(f"{self.base.name}.intake-{generation}.jsonl")

    def generations(self) -> list[int]:
        """The generations on disk, oldest first."""
        pattern = re.compile(re.escape(self.base.name) + r"\.intake-([0-9]{1,18})\.jsonl")
        found = []
        for path in self.base.parent.iterdir():
            match = pattern.fullmatch(path.name)
            if match:
                found.append(int(match.group(1)))
        return sorted(found)

    def replay(self, since: int) -> Iterator[tuple[str, dict[str, Any]]]:
        """(file:line, batch) of generations ``since`` and later, in the order they were written."""
        for generation in self.generations():
            if generation < since:
                continue
            path = self._path(generation)
            try:
                data = path.read_bytes()
            except OSError as problem:
                raise UsageError(
                    f"{path}: cannot read the intake journal ({problem.strerror})"
                ) from None
            lines = data.split(b"\n")
            # The text after the last newline is a batch cut short by a crash: never answered.
            for number, line in enumerate(lines[:-1], start=1):
                try:
                    entry = json.loads(line)
                except (ValueError, RecursionError):
                    entry = None
                if not isinstance(entry, dict):
                    raise UsageError(
                        f"{path}:{number}: not an intake journal entry; move the file away to "
                        "start without it"
                    )
                yield f"{path}:{number}", entry

    def open(self, generation: int) -> None:
        """Append from now on to ``generation`` (a new file, or one left by a crash)."""
        self.close()
        self.generation = generation
        path = self._path(generation)
        try:
            self._handle = path.open("ab")
        except OSError as problem:
            raise UsageError(
                f"{path}: cannot write the intake journal ({problem.strerror})"
            ) from None

    def append(self, entry: dict[str, Any]) -> None:
        """Write one batch; on return it is with the OS (and on disk if ``sync``)."""
        if self._handle is None:
            raise RuntimeError("the intake journal is not open")
        line = json.dumps(entry, separators=(",", ":")).encode("utf-8") + b"\n"
        self._handle.write(line)
        self._handle.flush()
        if self.sync:
            os.fsync(self._handle.fileno())

    def rotate(self) -> int:
        """Start the next generation; returns it (the first one a snapshot taken now lacks)."""
        self.open(self.generation + 1)
        return self.generation

    def discard_before(self, generation: int) -> None:
        """Delete the generations older than ``generation`` (their batches are in the state)."""
        for old in self.generations():
            if old < generation:
                self._path(old).unlink(missing_ok=True)

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None
