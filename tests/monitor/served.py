"""Helpers for driving the monitor over real sockets: an in-process server with scaled-down limits,
raw requests that report every response and whether the server closed, and the CLI as a process."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from rankgate.monitor.core import Monitor, MonitorConfig, parse_monitor_table
from rankgate.monitor.http import DEFAULT_LIMITS, HttpLimits
from rankgate.monitor.server import MonitorServer, StateFile

TOKEN = "test-token-0123456789"
AUTH = f"Authorization: Bearer {TOKEN}\r\n".encode()
# Scaled down so that a test of a deadline takes seconds, not minutes.
FAST = replace(DEFAULT_LIMITS, header_timeout=1.0, body_timeout=1.0, keep_alive=1.0)


def settings(**table: Any) -> MonitorConfig:
    return parse_monitor_table({"metrics": ["mrr", "precision@5"], "views": ["24h"], **table})


@contextlib.contextmanager
def serving(
    folder: Path | None = None,
    *,
    limits: HttpLimits = FAST,
    config: MonitorConfig | None = None,
    max_body: int = 200_000,
) -> Iterator[MonitorServer]:
    monitor = Monitor(config or settings(segment_by=["query_type"]))
    state = None if folder is None else StateFile(folder / "state.db")
    server = MonitorServer(
        monitor, token=TOKEN, port=0, max_body=max_body, state=state, tick_seconds=0.2,
        limits=limits,
    )  # fmt: skip
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        thread.join(10)


def exchange(
    address: tuple[str, int], data: bytes, *, wait: float = 5.0, close_write: bool = False
) -> tuple[list[int], bytes, bool]:
    """Send ``data`` on a fresh connection and read until the server closes it or ``wait``
    seconds pass; returns the status of every response seen, all bytes read, and whether the
    server closed the connection."""
    with socket.create_connection(address, timeout=wait) as connection:
        connection.sendall(data)
        if close_write:
            connection.shutdown(socket.SHUT_WR)
        received = b""
        closed = False
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            connection.settimeout(max(deadline - time.monotonic(), 0.01))
            try:
                chunk = connection.recv(65536)
            except TimeoutError:
                break
            except ConnectionResetError:
                closed = True
                break
            if not chunk:
                closed = True
                break
            received += chunk
    return response_statuses(received), received, closed


def response_statuses(received: bytes) -> list[int]:
    """The status of each response in a stream of them (each framed by its Content-Length)."""
    statuses = []
    position = 0
    while received.startswith(b"HTTP/1.", position):
        head_end = received.find(b"\r\n\r\n", position)
        if head_end < 0:
            break
        head = received[position:head_end].decode("latin-1")
        statuses.append(int(head.split(" ", 2)[1]))
        length = re.search(r"(?im)^content-length: *(\d+)", head)
        position = head_end + 4 + (int(length.group(1)) if length else 0)
    return statuses


def get(address: tuple[str, int], path: str, wait: float = 10.0) -> tuple[int, bytes]:
    request = f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode()
    statuses, received, _ = exchange(address, request, wait=wait)
    assert statuses, f"no response to GET {path}: {received[:200]!r}"
    return statuses[0], received.split(b"\r\n\r\n", 1)[1]


def post(address: tuple[str, int], path: str, body: bytes, token: str = TOKEN) -> tuple[int, bytes]:
    import http.client

    connection = http.client.HTTPConnection(*address, timeout=30)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    connection.request("POST", path, body=body, headers=headers)
    response = connection.getresponse()
    data = response.read()
    connection.close()
    return response.status, data


class MonitorProcess:
    """``rankgate monitor`` as a real process on a free port, in ``folder``."""

    def __init__(self, folder: Path, *args: str, config: str | None = None) -> None:
        if config is not None:
            (folder / "monitor.toml").write_text(config, encoding="utf-8")
            args = ("--config", str(folder / "monitor.toml"), *args)
        else:
            args = ("--no-config", *args)
        environment = {**os.environ, "RANKGATE_MONITOR_TOKEN": TOKEN}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "rankgate", "monitor", "--port", "0",
             "--state", str(folder / "state.db"), *args],
            cwd=folder, env=environment, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        self.lines: list[str] = []
        self.address = ("127.0.0.1", 0)
        assert self.process.stderr is not None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = self.process.stderr.readline()
            if not line:
                break
            self.lines.append(line)
            found = re.search(r"listening on http://([^ ]+):(\d+) ", line)
            if found:
                self.address = (found.group(1), int(found.group(2)))
                break
        if not self.address[1]:
            self.process.kill()
            raise AssertionError("the monitor did not start: " + "".join(self.lines))
        self._drain = threading.Thread(target=self._read_rest, daemon=True)
        self._drain.start()

    def _read_rest(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.append(line)

    def stop(self, sig: int = signal.SIGTERM) -> int:
        self.process.send_signal(sig)
        code = self.process.wait(30)
        self._drain.join(5)
        if self.process.stderr is not None:
            self.process.stderr.close()
        return code

    def metric(self, name: str, **labels: str) -> float | None:
        from prometheus_client.parser import text_string_to_metric_families

        status, text = get(self.address, "/metrics")
        assert status == 200
        for family in text_string_to_metric_families(text.decode()):
            for sample in family.samples:
                if sample.name == name and all(
                    sample.labels.get(k) == v for k, v in labels.items()
                ):
                    return float(sample.value)
        return None


def run_monitor_cli(folder: Path, *args: str, wait: float = 30) -> subprocess.CompletedProcess[str]:
    """The CLI run to completion (for start-up refusals)."""
    environment = {**os.environ, "RANKGATE_MONITOR_TOKEN": TOKEN}
    return subprocess.run(
        [sys.executable, "-m", "rankgate", "monitor", "--no-config", "--port", "0", *args],
        cwd=folder, env=environment, capture_output=True, text=True, timeout=wait,
    )  # fmt: skip
