"""Data the monitor must not lose: lines of a followed file through real rotations (copytruncate and
rename, as logrotate does them), labels across a restart of the process, and events answered 202
across a ``kill -9``."""

from __future__ import annotations

import json
import os
import shutil
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

from served import MonitorProcess, post

from rankgate.monitor.follow import Follower


def wait_for(condition: Callable[[], bool], seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def write(path: Path, lines: list[str]) -> None:
    with path.open("a", encoding="utf-8") as handle:
        handle.writelines(line + "\n" for line in lines)


class Collected:
    def __init__(self, path: Path) -> None:
        self.lines: list[str] = []
        self.stop = threading.Event()
        self.follower = Follower(path, self.take, poll_seconds=0.05)
        self.thread = threading.Thread(target=self.follower.run, args=(self.stop,), daemon=True)

    def take(self, line: bytes | None, number: int) -> None:
        assert line is not None
        self.lines.append(line.decode())

    def __enter__(self) -> Collected:
        self.thread.start()
        time.sleep(0.3)  # opened, and at the end of what was there before
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join(5)


def test_follow_survives_copytruncate(tmp_path: Path) -> None:
    log = tmp_path / "events.jsonl"
    write(log, ["old-1", "old-2"])  # before the follower started: not taken
    with Collected(log) as seen:
        write(log, [f"a{n}" for n in range(50)])
        assert wait_for(lambda: len(seen.lines) == 50)
        # logrotate's copytruncate: copy the file away, then cut it to nothing in place.
        shutil.copy(log, tmp_path / "events.jsonl.1")
        with log.open("r+") as handle:
            handle.truncate(0)
        time.sleep(0.3)
        write(log, ["b0", "b1", "b2"])
        assert wait_for(lambda: len(seen.lines) == 53)
        assert seen.lines == [f"a{n}" for n in range(50)] + ["b0", "b1", "b2"]
        assert seen.follower.truncations == 1


def test_follow_survives_rename_rotation_and_finishes_the_old_file(tmp_path: Path) -> None:
    log = tmp_path / "events.jsonl"
    log.touch()
    with Collected(log) as seen:
        write(log, ["a0", "a1"])
        assert wait_for(lambda: len(seen.lines) == 2)
        # logrotate's default: rename, and the writer keeps its handle for a moment...
        with log.open("a", encoding="utf-8") as writer:
            os.rename(log, tmp_path / "events.jsonl.1")
            writer.write("a2\n")
            writer.flush()
            time.sleep(0.2)
            writer.write("a3\n")
        time.sleep(0.2)
        # ...then reopens the name, which is now a new file.
        write(log, ["b0", "b1"])
        assert wait_for(lambda: len(seen.lines) == 6)
        assert seen.lines == ["a0", "a1", "a2", "a3", "b0", "b1"]
        # And once more, the file appearing a while after the rename.
        os.rename(log, tmp_path / "events.jsonl.2")
        time.sleep(0.3)
        write(log, ["c0"])
        assert wait_for(lambda: len(seen.lines) == 7)
        assert seen.lines[-1] == "c0" and seen.follower.rotations == 2


def test_monitor_follow_takes_every_line_through_rotations(tmp_path: Path) -> None:
    log = tmp_path / "events.jsonl"
    log.touch()
    service = MonitorProcess(tmp_path, "--follow", str(log))

    def event(n: int) -> str:
        return json.dumps({"query_id": f"q{n}", "retrieved_ids": ["a"], "relevant_ids": ["a"]})

    def received() -> float | None:
        return service.metric("rankgate_events_total", outcome="received")

    try:
        time.sleep(1.0)  # the follower opens the file within its first poll
        write(log, [event(n) for n in range(10)])
        assert wait_for(lambda: received() == 10)
        os.rename(log, tmp_path / "events.jsonl.1")
        write(log, [event(n) for n in range(10, 15)])
        assert wait_for(lambda: received() == 15)
        shutil.copy(log, tmp_path / "events.jsonl.2")
        with log.open("r+") as handle:
            handle.truncate(0)
        time.sleep(0.6)
        write(log, [event(15), "not json", event(16)])
        assert wait_for(lambda: received() == 18)
        assert service.metric("rankgate_events_total", outcome="invalid") == 1
    finally:
        assert service.stop() == 0


def test_labels_survive_a_restart_of_the_process(tmp_path: Path) -> None:
    first = MonitorProcess(tmp_path)
    label = {"query_id": "q1", "relevant_ids": ["b"]}
    assert post(first.address, "/v1/labels", json.dumps(label).encode())[0] == 202
    assert first.stop(signal.SIGTERM) == 0
    second = MonitorProcess(tmp_path)
    try:
        event = {"query_id": "q1", "retrieved_ids": ["a", "b"]}  # no labels of its own
        status, reply = post(second.address, "/v1/events", json.dumps(event).encode())
        assert status == 202, reply
        assert second.metric("rankgate_events_total", outcome="scored") == 1
        assert second.metric("rankgate_query_value_sum", metric="mrr", segment="all") == 0.5
    finally:
        assert second.stop() == 0


def test_kill_9_loses_nothing_that_was_answered_202(tmp_path: Path) -> None:
    """With an hour between state saves, everything below lives only in the intake journal when
    the process is killed; the restart must have all of it, labels included."""
    first = MonitorProcess(tmp_path, "--tick", "3600")
    time.sleep(0.2)
    answered = 0
    for batch in range(5):
        events = [
            {"query_id": f"q{batch}-{n}", "retrieved_ids": ["a", "b"], "relevant_ids": ["a"]}
            for n in range(40)
        ]
        body = "".join(json.dumps(e) + "\n" for e in events).encode()
        assert post(first.address, "/v1/events", body)[0] == 202
        answered += len(events)
    waiting = {"query_id": "late", "retrieved_ids": ["a", "b"]}
    assert post(first.address, "/v1/events", json.dumps(waiting).encode())[0] == 202
    label = {"query_id": "again", "relevant_ids": ["b"]}
    assert post(first.address, "/v1/labels", json.dumps(label).encode())[0] == 202
    bad = b'{"query_id": "x", "retrieved_ids": "no"}\n'
    assert post(first.address, "/v1/events", bad)[0] == 400
    assert first.stop(signal.SIGKILL) == -signal.SIGKILL
    # A batch cut short by the kill (never answered) is ignored on replay.
    journal = max(p for p in tmp_path.iterdir() if ".intake-" in p.name)
    with journal.open("ab") as handle:
        handle.write(b'{"at": "2026-12-01T00:00:00+00:00", "events": [["q", ["a"')
    second = MonitorProcess(tmp_path)
    try:
        assert second.metric("rankgate_events_total", outcome="received") == answered + 2
        assert second.metric("rankgate_events_total", outcome="scored") == answered
        assert second.metric("rankgate_events_total", outcome="invalid") == 1
        # The label from before the kill scores a later trace of its query; the waiting trace
        # is still waiting, and is scored by its label now.
        again = {"query_id": "again", "retrieved_ids": ["a", "b"]}
        assert post(second.address, "/v1/events", json.dumps(again).encode())[0] == 202
        assert (
            post(second.address, "/v1/labels", b'{"query_id": "late", "relevant_ids": ["b"]}')[0]
            == 202
        )
        assert second.metric("rankgate_events_total", outcome="scored") == answered + 2
    finally:
        assert second.stop() == 0
