"""Untrusted text and stored state: what a client sends is refused or bounded before it is kept, what
the monitor keeps can always be exported and saved, a state file that cannot be read is one line
and exit 2, errors are located within the request, and views keep the names they were given."""

from __future__ import annotations

import json
import signal
import sqlite3
import time
from datetime import timedelta
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from served import MonitorProcess, get, post, run_monitor_cli, serving, settings

from rankgate.errors import InputError
from rankgate.monitor.bounds import MAX_GROUP_VALUE_BYTES, MAX_LABEL_BYTES, MAX_WAITING_BYTES
from rankgate.monitor.core import Monitor


def scrape(address: tuple[str, int]) -> dict[str, list[tuple[dict[str, str], float]]]:
    status, text = get(address, "/metrics")
    assert status == 200
    return {
        family.name: [(dict(s.labels), s.value) for s in family.samples]
        for family in text_string_to_metric_families(text.decode("utf-8"))
    }


def test_a_lone_surrogate_is_refused_with_record_and_field_and_never_stored(tmp_path: Path) -> None:
    with serving(tmp_path) as server:
        good = (
            '{"query_id": "q1", "retrieved_ids": ["a"], "relevant_ids": ["a"], "query_type": "x"}'
        )
        bad = '{"query_id": "q2", "retrieved_ids": ["a"], "relevant_ids": ["a"], "query_type": "x\\ud800y"}'
        status, reply = post(server.address, "/v1/events", f"[{good}, {bad}]".encode())
        answer = json.loads(reply)
        assert status == 400 and answer["accepted"] == 1 and answer["rejected"] == 1
        (error,) = answer["errors"]
        assert error.startswith("request body record 2: field 'query_type': holds a lone surrogate")
        # In an ID, a grade key and the variant, too.
        for record in (
            '{"query_id": "q\\udfff", "retrieved_ids": ["a"]}',
            '{"query_id": "q", "retrieved_ids": ["a", "\\ud800"]}',
            '{"query_id": "q", "retrieved_ids": ["a"], "relevance_scores": {"\\ud800": 1}}',
            '{"query_id": "q", "retrieved_ids": ["a"], "variant": "\\udc00"}',
        ):
            status, reply = post(server.address, "/v1/events", record.encode())
            assert status == 400 and "lone surrogate" in json.loads(reply)["errors"][0], reply
        status, reply = post(
            server.address, "/v1/labels", b'{"query_id": "\\ud800", "relevant_ids": ["a"]}'
        )
        assert status == 400 and "lone surrogate" in reply.decode()
        # Everything still answers, and the saved state reloads.
        families = scrape(server.address)
        assert families["rankgate_events"]
        assert get(server.address, "/")[0] == 200
        server.save()
    state = json.loads(
        sqlite3.connect(tmp_path / "state.db")
        .execute("SELECT state FROM rankgate_monitor_state")
        .fetchone()[0]
    )
    assert "x\ud800y" not in state["values"].get("query_type", [])


def test_long_text_is_bounded_in_bytes_and_scrapes_stay_small(tmp_path: Path) -> None:
    with serving(tmp_path, max_body=10_000_000) as server:
        huge = "v" * 2_000_000
        event = {"query_id": "q", "retrieved_ids": ["a"], "relevant_ids": ["a"], "query_type": huge}
        status, reply = post(server.address, "/v1/events", json.dumps(event).encode())
        assert status == 400
        message = json.loads(reply)["errors"][0]
        assert message.startswith("request body record 1: field 'query_type': ")
        assert len(message) < 300  # the value is not echoed
        long = {**event, "query_type": "v" * 1000}
        message = json.loads(post(server.address, "/v1/events", json.dumps(long).encode())[1])[
            "errors"
        ][0]
        assert (
            "field 'query_type'" in message
            and f"at most {MAX_GROUP_VALUE_BYTES:,} bytes" in message
        )
        wide = "\u00e9" * (MAX_GROUP_VALUE_BYTES // 2 + 1)  # few characters, too many bytes
        status, _ = post(
            server.address, "/v1/events", json.dumps({**event, "query_type": wide}).encode()
        )
        assert status == 400
        for field, value in (("query_id", "q" * 9000), ("retrieved_ids", ["d" * 9000])):
            status, reply = post(
                server.address,
                "/v1/events",
                json.dumps({**event, "query_type": "x", field: value}).encode(),
            )
            assert status == 400 and f"field '{field}" in reply.decode(), reply
        many = {**event, "query_type": "x", "retrieved_ids": [f"d{i}" for i in range(10_001)]}
        assert post(server.address, "/v1/events", json.dumps(many).encode())[0] == 400
        fat = {
            **event,
            "query_type": "x",
            "retrieved_ids": [f"{i:08d}" + "d" * 200 for i in range(6000)],
        }
        status, reply = post(server.address, "/v1/events", json.dumps(fat).encode())
        assert status == 400 and "bytes of IDs" in reply.decode()
        assert (
            post(server.address, "/v1/events", json.dumps({**event, "query_type": "x"}).encode())[0]
            == 202
        )
        status, text = get(server.address, "/metrics")
        assert status == 200 and len(text) < 50_000


def test_memory_held_for_labels_and_waiting_traces_stays_in_its_budget() -> None:
    monitor = Monitor(settings(label_wait="1h"))
    ids = [f"{n:06d}" + "x" * 90 for n in range(10_000)]  # about 1.5 MB held per trace
    outcomes = [monitor.ingest({"query_id": f"q{n}", "retrieved_ids": ids}) for n in range(40)]
    assert outcomes.count("waiting") < 40 and outcomes[-1] == "unlabeled"
    for n in range(40):
        monitor.label(f"l{n}", {doc: 1.0 for doc in ids})
    waiting, labels = monitor.held_bytes
    assert 0 < waiting <= MAX_WAITING_BYTES and 0 < labels <= MAX_LABEL_BYTES
    state_bytes = len(json.dumps(monitor.state()))
    assert state_bytes < (MAX_WAITING_BYTES + MAX_LABEL_BYTES)


def test_eight_big_bodies_do_not_balloon_the_service(tmp_path: Path) -> None:
    """The probe's eight 7.9 MB bodies: memory, the state file and its saving stay bounded."""
    ids = [f"doc-{n:07d}-" + "p" * 30 for n in range(10_000)]
    body = b"\n".join(
        json.dumps({"query_id": f"q{n}", "retrieved_ids": ids}).encode() for n in range(16)
    )
    assert 7_000_000 < len(body) < 8_000_000
    service = MonitorProcess(tmp_path, "--max-body", "8000000", "--tick", "0.5")
    try:
        rss = []
        for _ in range(8):
            assert post(service.address, "/v1/events", body)[0] == 202
            rss.append(_rss_mb(service.process.pid))
        assert max(rss) < 400, rss
        time.sleep(1.5)
        state = tmp_path / "state.db"
        size = state.stat().st_size
        assert size < MAX_WAITING_BYTES + 8_000_000
        saved_at = _saved_at(state)
        time.sleep(1.5)  # three ticks with nothing new: nothing is saved again
        assert _saved_at(state) == saved_at
        assert get(service.address, "/healthz") == (200, b"ok\n")
    finally:
        assert service.stop() == 0


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _saved_at(path: Path) -> float:
    with sqlite3.connect(path) as connection:
        return float(
            connection.execute("SELECT saved_at FROM rankgate_monitor_state").fetchone()[0]
        )


def test_errors_are_located_within_the_request_not_across_requests(tmp_path: Path) -> None:
    with serving() as server:
        good = json.dumps({"query_id": "q", "retrieved_ids": ["a"]})
        for _ in range(3):
            assert post(server.address, "/v1/events", (good + "\n") * 5)[0] == 202
        lines = f'{good}\n{{"query_id": "q", "retrieved_ids": "a,b"}}\n'.encode()
        status, reply = post(server.address, "/v1/events", lines)
        assert status == 400
        assert json.loads(reply)["errors"] == [
            "request body line 2: field 'retrieved_ids': expected a list of IDs, got string"
        ]
        array = f'[{good}, {good}, {{"retrieved_ids": ["a"]}}]'.encode()
        errors = json.loads(post(server.address, "/v1/events", array)[1])["errors"]
        assert errors[0].startswith("request body record 3: field 'query_id': required field")
        status, reply = post(server.address, "/v1/labels", b'{"query_id": "q"}')
        assert status == 400 and json.loads(reply)["errors"][0].startswith("request body record 1:")


def test_views_are_exported_by_the_names_they_were_configured_with() -> None:
    config = settings(views=["1h", "24h", "90m"])
    with serving(config=config) as server:
        event = {"query_id": "q", "retrieved_ids": ["a"], "relevant_ids": ["a"]}
        assert post(server.address, "/v1/events", json.dumps(event).encode())[0] == 202
        windows = {labels["window"] for labels, _ in scrape(server.address)["rankgate_window_mean"]}
        assert windows == {"1h", "24h", "90m"}
        page = get(server.address, "/")[1].decode()
        assert "<bdi>24h</bdi>" in page and "1d" not in page


def test_hostile_group_names_are_isolated_on_the_status_page() -> None:
    with serving() as server:
        for value in ("\u202eevil", "nul\x00byte", "<script>x</script>"):
            event = {
                "query_id": "q",
                "retrieved_ids": ["a"],
                "relevant_ids": ["a"],
                "query_type": value,
            }
            assert post(server.address, "/v1/events", json.dumps(event).encode())[0] == 202
        page = get(server.address, "/")[1].decode()
        assert "<bdi>query_type=\u202eevil</bdi>" in page
        assert "\x00" not in page and "<script>" not in page


def _write_state(path: Path, text: str) -> None:
    with sqlite3.connect(path) as connection:
        connection.execute(
            "CREATE TABLE rankgate_monitor_state (id INTEGER PRIMARY KEY CHECK (id = 1), saved_at REAL, state TEXT NOT NULL)"
        )
        connection.execute("INSERT INTO rankgate_monitor_state VALUES (1, 0, ?)", (text,))


@pytest.mark.parametrize(
    "content",
    [
        b"this is not a database" * 100,
        "{not json",
        "[1, 2]",
        '{"version": 1, "buckets": [["x"]]}',
        '{"version": 1, "counts": {"received": "many"}}',
        '{"version": 1, "waiting": [["q", ["a"], [], 1, "not a time", {}]]}',
        '{"version": 1, "alerts": {"version": 9, "tracks": []}}',
        '{"version": 7}',
        "[" * 5000,
    ],
)
def test_a_state_file_that_cannot_be_read_is_one_line_and_exit_2(
    tmp_path: Path, content: bytes | str
) -> None:
    state = tmp_path / "state.db"
    if isinstance(content, bytes):
        state.write_bytes(content)
    else:
        _write_state(state, content)
    (tmp_path / "rankgate.toml").write_text('[alerts.low]\nmetric = "mrr"\nbelow = 0.5\n')
    finished = run_monitor_cli(
        tmp_path, "--state", str(state), "--config", str(tmp_path / "rankgate.toml")
    )
    assert finished.returncode == 2, finished.stderr
    lines = finished.stderr.strip().splitlines()
    assert len(lines) == 1 and str(state) in lines[0], finished.stderr
    assert "Traceback" not in finished.stderr


def test_state_from_an_older_version_with_bad_text_is_cleaned_on_load(tmp_path: Path) -> None:
    state = tmp_path / "state.db"
    group = "query_type=x\ud800y"
    stored = {
        "version": 1,
        "counts": {"received": 1, "scored": 1},
        "closed_through": -1,
        "buckets": [[int(time.time() // 300), "mrr", group, 1, 1.0, 0.0]],
        "alerts": None,
        "waiting": [],
        "values": {"query_type": ["x\ud800y", "w" * 2_000_000]},
    }
    _write_state(state, json.dumps(stored))
    (tmp_path / "rankgate.toml").write_text('[monitor]\nsegment_by = ["query_type"]\n')
    service = MonitorProcess(tmp_path, config=(tmp_path / "rankgate.toml").read_text())
    try:
        families = scrape(service.address)
        groups = {labels["group"] for labels, _ in families["rankgate_window_mean"]}
        assert "query_type=x\ufffdy" in groups
        assert get(service.address, "/")[0] == 200
    finally:
        assert service.stop() == 0


def test_sigterm_saves_the_state(tmp_path: Path) -> None:
    service = MonitorProcess(tmp_path, "--tick", "3600")
    events = "".join(
        json.dumps({"query_id": f"q{n}", "retrieved_ids": ["a"], "relevant_ids": ["a"]}) + "\n"
        for n in range(7)
    )
    assert post(service.address, "/v1/events", events.encode())[0] == 202
    assert service.stop(signal.SIGTERM) == 0
    assert "state saved" in "".join(service.lines)
    journals = [p for p in tmp_path.iterdir() if ".intake-" in p.name]
    assert all(p.stat().st_size == 0 for p in journals)  # all of it is in the state now
    again = MonitorProcess(tmp_path)
    try:
        assert again.metric("rankgate_events_total", outcome="scored") == 7
    finally:
        assert again.stop(signal.SIGINT) == 0


def test_in_process_the_same_checks_apply() -> None:
    config = settings(views=["36h"], segment_by=["kind"])
    assert config.named_views == [("36h", timedelta(hours=36))]
    monitor = Monitor(config)
    with pytest.raises(InputError, match="lone surrogate"):
        monitor.ingest({"query_id": "q", "retrieved_ids": ["\ud800"]})
    with pytest.raises(InputError, match="field 'kind'"):
        monitor.ingest({"query_id": "q", "retrieved_ids": ["a"], "kind": "k" * 300})
    assert monitor.counts["invalid"] == 2 and monitor.counts["received"] == 2
