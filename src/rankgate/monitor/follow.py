"""Following a JSON Lines file by name, as ``tail -F`` does, through log rotation.

The file is opened when it appears and read from its end (lines written before the monitor started
are not taken). Whenever the reader has caught up with the end, it looks at the file twice:

* by the open handle: a size below the position read so far means the file was truncated in place
  (logrotate's ``copytruncate``); reading goes on from its start.
* by name: a path that now names another file (a different device or inode) means the file was
  rotated by renaming (logrotate's default ``create``). The old file has just been read to its
  end; the new one is read from its start.

Lines that a writer adds to the old file after the switch, and lines written between logrotate's
copy and its truncation, are beyond any follower's reach (tail -F loses them too); a writer that
reopens its log on rotation (the usual ``postrotate`` signal) leaves nothing behind.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

__all__ = ["Follower"]

log = logging.getLogger("rankgate.monitor")

_READ_SIZE = 64 * 1024


class Follower:
    """Calls ``on_line(line, number)`` for each complete line appended to ``path`` (without its
    newline; ``number`` counts from 1 in the file being read). A line longer than ``max_line``
    bytes is passed as None, once, and the rest of it skipped."""

    def __init__(
        self,
        path: Path,
        on_line: Callable[[bytes | None, int], None],
        *,
        poll_seconds: float = 0.2,
        max_line: int = 16 * 1024 * 1024,
    ) -> None:
        self.path = path
        self.on_line = on_line
        self.poll_seconds = poll_seconds
        self.max_line = max_line
        self.rotations = 0
        self.truncations = 0

    def run(self, stop: threading.Event) -> None:
        handle: BinaryIO | None = None
        identity: tuple[int, int] = (0, 0)
        first_open = True
        pending = bytearray()
        skipping = False
        number = 0
        try:
            while not stop.is_set():
                if handle is None:
                    handle = self._open()
                    if handle is None:
                        stop.wait(self.poll_seconds)
                        continue
                    status = os.fstat(handle.fileno())
                    identity = (status.st_dev, status.st_ino)
                    if first_open:
                        handle.seek(0, os.SEEK_END)
                    first_open = False
                    pending.clear()
                    skipping = False
                    number = 0
                chunk = handle.read(_READ_SIZE)
                if chunk:
                    pending += chunk
                    while True:
                        end = pending.find(b"\n")
                        if end < 0:
                            break
                        number += 1
                        line = bytes(pending[:end])
                        del pending[: end + 1]
                        if skipping:
                            skipping = False  # the end of an over-long line, already reported
                        else:
                            self.on_line(line, number)
                    if len(pending) > self.max_line and not skipping:
                        self.on_line(None, number + 1)
                        skipping = True
                    if skipping:
                        pending.clear()
                    continue
                # Caught up: was the file truncated, or rotated away?
                if os.fstat(handle.fileno()).st_size < handle.tell():
                    log.info("%s was truncated; reading it from the start", self.path)
                    self.truncations += 1
                    handle.seek(0)
                    pending.clear()
                    skipping = False
                    number = 0
                    continue
                try:
                    named = os.stat(self.path)
                except OSError:
                    named = None
                if named is not None and (named.st_dev, named.st_ino) != identity:
                    if pending and not skipping:
                        # The old file ended without a newline: its last line is complete.
                        self.on_line(bytes(pending), number + 1)
                    log.info("%s was rotated; reading the new file from the start", self.path)
                    self.rotations += 1
                    handle.close()
                    handle = None
                    continue
                stop.wait(self.poll_seconds)
        finally:
            if handle is not None:
                handle.close()

    def _open(self) -> BinaryIO | None:
        try:
            return self.path.open("rb")
        except FileNotFoundError:
            return None
        except OSError as problem:
            log.warning("cannot read %s (%s); trying again", self.path, problem.strerror)
            return None
