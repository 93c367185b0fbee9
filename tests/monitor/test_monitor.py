"""The monitor, in-process and over HTTP: the numbers it exposes are ``rankgate eval``'s numbers
on the same events; labels that come late are joined; every event is accounted for; the HTTP
side refuses what it should and survives what it cannot read; state survives a restart."""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from rankgate import evaluate
from rankgate.errors import InputError
from rankgate.monitor.core import Monitor, MonitorConfig, parse_monitor_table
from rankgate.monitor.server import MonitorServer, StateFile

ROOT = Path(__file__).parents[2]
TOKEN = "test-token-0123456789"
DAY_AFTER = datetime(2026, 12, 1, tzinfo=UTC)


def examples() -> list[dict[str, Any]]:
    lines = (ROOT / "examples" / "traces.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


def config(**overrides: Any) -> MonitorConfig:
    table = {"metrics": ["mrr", "precision@5", "ndcg@10"], "views": ["24h"], **overrides}
    return parse_monitor_table(table)


def test_window_means_are_evals_means() -> None:
    records = examples()
    # A 48-hour view, so the whole day of events is still in it after the label waits run out.
    monitor = Monitor(config(segment_by=["query_type"], views=["48h"]), clock=lambda: DAY_AFTER)
    outcomes = [monitor.ingest(record) for record in records]
    later = DAY_AFTER + timedelta(hours=2)
    monitor.tick(later)  # every label wait has run out
    window = monitor.window(timedelta(hours=48), later)
    expected = evaluate(records, ["mrr", "precision@5", "ndcg@10"])
    for spec, mean in expected.means.items():
        count, got = window[(str(spec), "overall")]
        assert count == expected.summary.scored
        assert got == pytest.approx(mean, abs=1e-12)
    factual = [r for r in records if r["query_type"] == "factual"]
    count, got = window[("mrr", "query_type=factual")]
    assert got == pytest.approx(evaluate(factual, ["mrr"]).means[expected.metrics[0]], abs=1e-12)
    # Every event accounted for: scored, or skipped under a named reason.
    counts = monitor.counts
    assert (
        counts["received"] == len(records) == outcomes.count("scored") + outcomes.count("waiting")
    )
    assert counts["scored"] == expected.summary.scored
    assert counts["unlabeled"] == expected.summary.skipped["unlabeled"]
    assert counts["no_relevant"] == expected.summary.skipped["no_relevant"]


def test_labels_that_come_later_are_joined_within_the_wait() -> None:
    now = [DAY_AFTER]
    monitor = Monitor(config(label_wait="30m"), clock=lambda: now[0])
    event = {
        "query_id": "q1",
        "retrieved_ids": ["a", "b", "c"],
        "timestamp": "2026-12-01T00:00:00Z",
    }
    assert monitor.ingest(event) == "waiting"
    assert monitor.ingest({**event, "query_id": "q2"}) == "waiting"
    assert monitor.label("q1", {"b": 2}) == 1
    now[0] += timedelta(minutes=31)
    monitor.tick()
    assert monitor.counts["scored"] == 1 and monitor.counts["unlabeled"] == 1
    count, mrr = monitor.window(timedelta(hours=24), now[0])[("mrr", "overall")]
    assert (count, mrr) == (1, 0.5)
    # A later trace of a labeled query is scored at once.
    assert monitor.ingest({**event, "retrieved_ids": ["b"]}) == "scored"


def test_sampling_is_seeded_per_query_and_per_segment() -> None:
    records = [
        {"query_id": f"q{i}", "retrieved_ids": ["a"], "relevant_ids": ["a"], "kind": k}
        for i in range(2000)
        for k in ["faq" if i % 2 else "chat"]
    ]
    settings = config(segment_by=["kind"], sample={"faq": 0.1, "*": 0.5}, seed=3)
    first, second = Monitor(settings), Monitor(settings)
    kept = [first.ingest(r) for r in records]
    assert kept == [second.ingest(r) for r in records]
    faq = sum(o == "scored" for o, r in zip(kept, records, strict=True) if r["kind"] == "faq")
    chat = sum(o == "scored" for o, r in zip(kept, records, strict=True) if r["kind"] == "chat")
    assert 60 < faq < 140 and 420 < chat < 580
    assert first.counts["sampled_out"] == 2000 - faq - chat


def test_a_bad_event_is_counted_and_named() -> None:
    monitor = Monitor(config())
    with pytest.raises(InputError, match="retrieved_ids"):
        monitor.ingest({"query_id": "q", "retrieved_ids": "a,b"})
    with pytest.raises(InputError, match="query_id"):
        monitor.ingest({"retrieved_ids": ["a"]})
    assert monitor.counts["invalid"] == 2 and monitor.counts["received"] == 2


# --- over HTTP --------------------------------------------------------------------------------


@pytest.fixture
def served(tmp_path: Path) -> Iterator[MonitorServer]:
    monitor = Monitor(config(segment_by=["query_type"], views=["48h"]), clock=lambda: DAY_AFTER)
    server = MonitorServer(
        monitor, token=TOKEN, port=0, max_body=200_000, state=StateFile(tmp_path / "m.db"),
        tick_seconds=0.2,
    )  # fmt: skip
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        thread.join(5)


def request(
    server: MonitorServer, method: str, path: str, body: bytes | None = None, token: str = TOKEN
) -> tuple[int, bytes]:
    host, port = server.address
    connection = http.client.HTTPConnection(host, port, timeout=10)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    connection.request(method, path, body=body, headers=headers)
    response = connection.getresponse()
    data = response.read()
    connection.close()
    return response.status, data


def test_metrics_endpoint_matches_eval(served: MonitorServer) -> None:
    records = examples()
    half = len(records) // 2
    for part in (records[:half], records[half:]):
        body = "".join(json.dumps(r) + "\n" for r in part).encode()
        status, reply = request(served, "POST", "/v1/events", body)
        assert status == 202, reply
    served.monitor.tick(DAY_AFTER + timedelta(hours=2))
    status, text = request(served, "GET", "/metrics", token="")
    assert status == 200
    families = {f.name: f for f in text_string_to_metric_families(text.decode())}
    sums: dict[str, float] = {}
    counts: dict[str, float] = {}
    for sample in families["rankgate_query_value"].samples:
        if sample.labels.get("segment") != "all":
            continue
        metric = sample.labels["metric"]
        if sample.name.endswith("_sum"):
            sums[metric] = sums.get(metric, 0.0) + sample.value
        elif sample.name.endswith("_count"):
            counts[metric] = counts.get(metric, 0.0) + sample.value
    expected = evaluate(records, ["mrr", "precision@5", "ndcg@10"])
    for spec, mean in expected.means.items():
        assert counts[str(spec)] == expected.summary.scored
        assert sums[str(spec)] / counts[str(spec)] == pytest.approx(mean, abs=1e-9)
    events = {s.labels["outcome"]: s.value for s in families["rankgate_events"].samples}
    assert events["received"] == len(records)
    assert events["scored"] + events["unlabeled"] + events["no_relevant"] == len(records)


def test_write_endpoints_refuse_what_they_should(served: MonitorServer) -> None:
    event = json.dumps({"query_id": "q", "retrieved_ids": ["a"], "relevant_ids": ["a"]}).encode()
    assert request(served, "POST", "/v1/events", event, token="")[0] == 401
    assert request(served, "POST", "/v1/events", event, token="wrong-token-0123456789")[0] == 401
    assert request(served, "POST", "/v1/events", b"x" * 300_000)[0] == 413
    status, reply = request(
        served, "POST", "/v1/events", event + b"\n{not json\n" + b'{"query_id": 5}\n'
    )
    answer = json.loads(reply)
    assert status == 400 and answer["accepted"] == 1 and answer["rejected"] == 2
    assert any("not valid JSON" in e for e in answer["errors"])
    assert any("retrieved_ids" in e for e in answer["errors"])
    assert request(served, "GET", "/healthz", token="") == (200, b"ok\n")
    assert served.monitor.counts["invalid"] == 2
    assert served.address[0] == "127.0.0.1"
    status, page = request(served, "GET", "/", token="")
    assert status == 200 and b"rankgate monitor" in page


def test_state_survives_a_restart(tmp_path: Path) -> None:
    state = StateFile(tmp_path / "state.db")
    first = Monitor(config(), clock=lambda: DAY_AFTER)
    for record in examples():
        first.ingest(record)
    first.tick(DAY_AFTER)
    state.save(first.state())
    second = Monitor(config(), clock=lambda: DAY_AFTER)
    loaded = state.load()
    assert loaded is not None
    second.restore(loaded)
    view = timedelta(hours=24)
    assert second.window(view, DAY_AFTER) == first.window(view, DAY_AFTER)
    assert second.counts == first.counts


# --- replay: a drop at a known time fires, a control stream never does -------------------------

START = datetime(2026, 11, 1, tzinfo=UTC)
BUCKETS = 200  # most of a day of five-minute buckets
DROP_AT = 140  # the bucket where quality drops
PER_BUCKET = 100
ALERTS = {
    # h = 12 rather than the default 8: over a day-long control stream a false alarm is then
    # astronomically unlikely, and a 0.12 drop in MRR (about 3 standard errors of a 100-query
    # bucket) is still caught in a handful of buckets.
    "mrr_drop": {"metric": "mrr", "detector": "cusum", "h": 12.0, "groups": ["overall"]},
    "mrr_low": {"metric": "mrr", "below": 0.6, "for": "30m", "groups": ["overall"]},
}


def stream(seed: int, drop: bool) -> list[tuple[int, list[dict[str, Any]]]]:
    """Per bucket, 100 labeled events whose relevant document sits at rank 1 with probability
    0.62 (0.48 after a drop), else at ranks 2-10 or nowhere: MRR about 0.70, then about 0.58."""
    import random

    rng = random.Random(seed)
    docs = [f"d{i}" for i in range(10)]
    buckets = []
    for bucket in range(BUCKETS):
        top = 0.48 if drop and bucket >= DROP_AT else 0.62
        events = []
        for n in range(PER_BUCKET):
            draw = rng.random()
            rank = 0 if draw < top else (rng.randrange(1, 10) if draw < 0.9 else None)
            moment = START + timedelta(minutes=5 * bucket, seconds=n)
            events.append(
                {
                    "query_id": f"b{bucket}-{n}",
                    "retrieved_ids": docs,
                    "relevant_ids": ["missing"] if rank is None else [docs[rank]],
                    "timestamp": moment.isoformat(),
                }
            )
        buckets.append((bucket, events))
    return buckets


def replay(seed: int, drop: bool, restart_at: int | None = None) -> list[Any]:
    from rankgate.monitor.alerts import AlertEngine, parse_rules

    rules = parse_rules(ALERTS)
    settings = config(metrics=["mrr"], views=["24h"], label_wait="1m")
    clock = [START]
    monitor = Monitor(settings, AlertEngine(rules), clock=lambda: clock[0])
    fired = []
    for bucket, events in stream(seed, drop):
        clock[0] = START + timedelta(minutes=5 * (bucket + 1))
        if bucket == restart_at:
            saved = json.loads(json.dumps(monitor.state()))
            monitor = Monitor(settings, AlertEngine(rules), clock=lambda: clock[0])
            monitor.restore(saved)
        for event in events:
            monitor.ingest(event)
        # One minute past the bucket's end, its label wait is over and it is judged.
        fired += monitor.tick(START + timedelta(minutes=5 * (bucket + 1) + 1, seconds=1))
    return fired


@pytest.mark.parametrize("seed", [1, 2])
def test_a_drop_fires_within_the_expected_windows_and_a_control_never(seed: int) -> None:
    events = replay(seed, drop=True)
    firing = [e for e in events if e.state == "firing"]
    assert {e.rule for e in firing} == {"mrr_drop", "mrr_low"}
    first = {
        rule: min((e.at - START) / timedelta(minutes=5) for e in firing if e.rule == rule)
        for rule in ("mrr_drop", "mrr_low")
    }
    # CUSUM: within 12 buckets (an hour) of the drop; the threshold rule needs its 30 minutes.
    assert DROP_AT < first["mrr_drop"] <= DROP_AT + 12, first
    assert DROP_AT + 6 <= first["mrr_low"] <= DROP_AT + 20, first
    assert not [
        e for e in events if e.state == "firing" and e.at < START + timedelta(minutes=5 * DROP_AT)
    ]
    control = replay(seed, drop=False)
    assert [e for e in control if e.state == "firing"] == []


def test_a_restart_mid_drop_keeps_the_timers() -> None:
    uninterrupted = [(e.rule, e.state, e.at) for e in replay(1, drop=True)]
    restarted = [(e.rule, e.state, e.at) for e in replay(1, drop=True, restart_at=DROP_AT + 3)]
    assert restarted == uninterrupted


def test_polling_a_trace_store_takes_each_trace_once(tmp_path: Path) -> None:
    from rankgate.cli.monitor_command import poll_store
    from rankgate.store import TraceRecorder

    url = f"sqlite:///{tmp_path / 'traces.db'}"
    records = examples()[:60]
    with TraceRecorder(url) as recorder:
        for record in records:
            recorder.record(
                record["query_id"], record["retrieved_ids"], recorded_at=record["timestamp"]
            )
            for document in record.get("relevant_ids") or ():
                recorder.label(record["query_id"], document, 1)
    monitor = Monitor(config(), clock=lambda: DAY_AFTER)
    stop = threading.Event()
    since = datetime(2026, 11, 30, tzinfo=UTC)
    poller = threading.Thread(target=poll_store, args=(monitor, url, 0.05, stop, since))
    poller.start()
    deadline = time.monotonic() + 10
    while monitor.counts["received"] < len(records) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)  # a few more polls: nothing may come twice
    stop.set()
    poller.join(5)
    assert monitor.counts["received"] == len(records)


def test_group_labels_stay_bounded_whatever_clients_send() -> None:
    monitor = Monitor(config(segment_by=["kind"], max_values=3))
    for number in range(50):
        monitor.ingest(
            {
                "query_id": f"q{number}",
                "retrieved_ids": ["a"],
                "relevant_ids": ["a"],
                "variant": f"v{number}",
                "kind": f"k{number}",
            }
        )
    groups = {group for _, group in monitor.window(timedelta(hours=1))}
    assert groups == {
        "overall",
        "variant=v0", "variant=v1", "variant=v2", "variant=(other)",
        "kind=k0", "kind=k1", "kind=k2", "kind=(other)",
    }  # fmt: skip


def test_late_labels_reach_the_alerts_and_odd_times_are_counted() -> None:
    from rankgate.monitor.alerts import AlertEngine, parse_rules

    rules = parse_rules({"low": {"metric": "mrr", "below": 0.6, "min_queries": 1}})
    now = [DAY_AFTER]
    monitor = Monitor(config(label_wait="30m"), AlertEngine(rules), clock=lambda: now[0])
    for n in range(10):
        monitor.ingest(
            {"query_id": f"q{n}", "retrieved_ids": ["a", "b"], "timestamp": now[0].isoformat()}
        )
    now[0] += timedelta(minutes=10)
    assert monitor.tick() == []  # the bucket has ended, but its labels may still come
    for n in range(10):
        monitor.label(f"q{n}", {"b": 1})  # MRR 0.5 each, five minutes after the bucket ended
    now[0] += timedelta(minutes=30)
    fired = monitor.tick()
    assert sorted((e.rule, e.group, e.state) for e in fired) == [
        ("low", "overall", "firing"),
        ("low", "variant=default", "firing"),
    ]
    # A date in the future or beyond the longest view is counted, not windowed.
    future = {
        "query_id": "f",
        "retrieved_ids": ["a"],
        "relevant_ids": ["a"],
        "timestamp": "2030-01-01",
    }
    assert monitor.ingest(future) == "out_of_range"
    assert monitor.ingest({**future, "timestamp": "2020-01-01"}) == "out_of_range"
    assert monitor.counts["out_of_range"] == 2


def test_a_restart_keeps_waiting_traces(tmp_path: Path) -> None:
    first = Monitor(config(), clock=lambda: DAY_AFTER)
    for n in range(5):
        first.ingest(
            {"query_id": f"q{n}", "retrieved_ids": ["a"], "timestamp": DAY_AFTER.isoformat()}
        )
    second = Monitor(config(), clock=lambda: DAY_AFTER)
    second.restore(json.loads(json.dumps(first.state())))
    assert second.label("q1", {"a": 1}) == 1
    second.tick(DAY_AFTER + timedelta(hours=2))
    counts = second.counts
    assert counts["received"] == 5 and counts["scored"] == 1 and counts["unlabeled"] == 4


def test_bodies_of_every_shape_and_misshape(served: MonitorServer) -> None:
    event = {"query_id": "q", "retrieved_ids": ["a"], "relevant_ids": ["a"]}
    pretty = json.dumps(event, indent=2).encode()
    status, reply = request(served, "POST", "/v1/events", pretty)
    assert status == 202 and json.loads(reply)["accepted"] == 1
    status, reply = request(served, "POST", "/v1/events", b"[" * 100_000)
    assert status == 400 and b"not valid JSON" in reply
    host, port = served.address
    connection = http.client.HTTPConnection(host, port, timeout=10)
    connection.putrequest("POST", "/v1/events")
    connection.putheader("Authorization", f"Bearer {TOKEN}")
    connection.putheader("Content-Length", "\u00b2")
    connection.endheaders()
    assert connection.getresponse().status == 411
    connection.close()
    assert request(served, "GET", "/healthz", token="") == (200, b"ok\n")
