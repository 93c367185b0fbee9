"""``rankgate monitor`` as a service: HTTP intake, Prometheus metrics, alerts to a webhook, state that
survives a restart and a crash.

Endpoints:

* ``POST /v1/events`` and ``POST /v1/labels``: JSON (one object or an array) or JSON Lines; bearer
  token required; bodies above ``max_body`` bytes are refused (413). Each record is taken on its
  own: the reply says how many were accepted and why the others were not (naming the record or
  line within the body, and the field), with 400 when any was malformed. A bad record never stops
  the service. A 202 (or the accepted part of a 400) is on disk in the intake journal before it is
  sent (``rankgate.monitor.journal``).
* ``GET /metrics``: Prometheus text format, from the official client library: a histogram of
  per-query values per metric, variant and segment (so means aggregate across instances as
  ``sum/count``), counters of events by outcome, gauges of window means and alert states.
* ``GET /healthz``: ``ok``. ``GET /``: a status page (current windows and alerts; no script).

The HTTP layer is uvicorn over h11 with strict framing, deadlines and a connection cap
(``rankgate.monitor.http`` says why and how). The server binds 127.0.0.1 unless told otherwise. A
ticker thread closes buckets, evaluates alerts and saves the state (buckets, counters, alert
timers, waiting traces, remembered labels) to a SQLite file whenever it has changed and at
shutdown, so a deploy does not reset a sustained-drop timer.
"""

from __future__ import annotations

import json
import logging
import queue
import sqlite3
import threading
import time
import unicodedata
import urllib.request
from collections.abc import Iterator
from dataclasses import asdict, is_dataclass, replace
from html import escape
from pathlib import Path
from typing import Any

from rankgate.errors import ConfigError, InputError, UsageError
from rankgate.monitor.bounds import MAX_GROUP_VALUE_BYTES, clean_text
from rankgate.monitor.core import OUTCOMES, Event, Monitor
from rankgate.monitor.http import DEFAULT_LIMITS, HttpLimits, HttpServer, listen
from rankgate.monitor.journal import Journal
from rankgate.times import parse_time

__all__ = ["HttpLimits", "MonitorServer", "StateFile", "Webhook"]

log = logging.getLogger("rankgate.monitor")

DEFAULT_MAX_BODY = DEFAULT_LIMITS.max_body
VALUE_BUCKETS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
_RETRY_SECONDS = (0.5, 1.0, 2.0, 4.0, 8.0)
ERRORS_SHOWN = 20


class StateFile:
    """The monitor's state as one JSON document in a SQLite file (written atomically)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        if not path.parent.is_dir():
            raise UsageError(f"{path}: folder {path.parent} does not exist")
        try:
            with self._connect() as connection:
                connection.execute(
                    "CREATE TABLE IF NOT EXISTS rankgate_monitor_state "
                    "(id INTEGER PRIMARY KEY CHECK (id = 1), saved_at REAL, state TEXT NOT NULL)"
                )
        except sqlite3.Error as problem:
            raise UsageError(f"{path}: not a usable monitor state file ({problem})") from None

    def _connect(self) -> sqlite3.Connection:
        try:
            return sqlite3.connect(self.path, timeout=10)
        except sqlite3.Error as problem:
            raise UsageError(f"{self.path}: cannot open monitor state ({problem})") from None

    def load(self) -> dict[str, Any] | None:
        try:
            with self._connect() as connection:
                row = connection.execute("SELECT state FROM rankgate_monitor_state").fetchone()
            if row is None:
                return None
            state = json.loads(row[0])
        except (sqlite3.Error, ValueError, TypeError, RecursionError) as problem:
            reason = str(problem)[:200]
            raise UsageError(f"{self.path}: not a readable monitor state ({reason})") from None
        if not isinstance(state, dict):
            raise UsageError(f"{self.path}: not a readable monitor state (not a JSON object)")
        return state

    def save(self, state: dict[str, Any]) -> None:
        text = json.dumps(state, separators=(",", ":"), default=str)
        with self._connect() as connection:
            connection.execute(
                "INSERT INTO rankgate_monitor_state (id, saved_at, state) VALUES (1, ?, ?) "
                "ON CONFLICT (id) DO UPDATE SET saved_at = excluded.saved_at, state = excluded.state",
                (time.time(), text),
            )


class Webhook:
    """Alert state changes POSTed as JSON to a URL, in order, retried with backoff."""

    def __init__(self, url: str, token: str | None = None) -> None:
        if not url.startswith(("http://", "https://")):
            raise UsageError(f"--webhook {url!r}: expected an http:// or https:// URL")
        self.url = url
        self.token = token
        self.delivered = 0
        self.failed = 0
        self._queue: queue.Queue[Any] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="rankgate-webhook", daemon=True)
        self._thread.start()

    def send(self, event: Any) -> None:
        self._queue.put(event)

    def close(self, timeout: float = 10.0) -> None:
        self._queue.put(None)
        self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            event = self._queue.get()
            if event is None:
                return
            body = json.dumps(_plain(event), default=str).encode("utf-8")
            headers = {"Content-Type": "application/json"}
            if self.token:
                headers["Authorization"] = f"Bearer {self.token}"
            for pause in (*_RETRY_SECONDS, None):
                try:
                    request = urllib.request.Request(self.url, body, headers, method="POST")
                    with urllib.request.urlopen(request, timeout=10) as response:
                        if 200 <= response.status < 300:
                            self.delivered += 1
                            break
                except Exception as problem:  # network, HTTP error status, timeout: retry
                    reason = str(problem)
                else:
                    reason = f"status {response.status}"
                if pause is None:
                    self.failed += 1
                    log.error("alert webhook %s failed after retries: %s", self.url, reason)
                    break
                time.sleep(pause)


def _plain(value: Any) -> Any:
    if is_dataclass(value) and not isinstance(value, type):
        return {key: _plain(item) for key, item in asdict(value).items()}
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    return value


class _Exporter:
    """Prometheus series, on a registry of their own (no process-wide globals)."""

    def __init__(self, monitor: Monitor) -> None:
        from prometheus_client import CollectorRegistry, Histogram
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        self.registry = CollectorRegistry(auto_describe=True)
        self.values = Histogram(
            "rankgate_query_value",
            "Per-query metric values of scored traffic (mean = sum / count)",
            ["metric", "variant", "segment"],
            buckets=VALUE_BUCKETS,
            registry=self.registry,
        )
        self.monitor = monitor
        segment_fields = monitor.config.segment_by

        # The histogram's children by labels: looking them up through ``labels()`` for every
        # scored query costs more than scoring it. Bounded, as the label values are.
        children: dict[tuple[str, str, str], Any] = {}

        def observe(variant: str, labels: Any, values: Any) -> None:
            segments = ["all", *(f"{name}={labels.get(name)}" for name in segment_fields)]
            for metric, value in values.items():
                for segment in segments:
                    key = (metric, variant, segment)
                    child = children.get(key)
                    if child is None:
                        child = self.values.labels(metric, _label(variant), _label(segment))
                        children[key] = child
                    child.observe(value)

        monitor.on_score = observe

        exporter = self

        class _Live:
            def collect(self) -> Iterator[Any]:
                counts = CounterMetricFamily(
                    "rankgate_events", "Events by what became of them", labels=["outcome"]
                )
                for outcome in OUTCOMES:
                    counts.add_metric([outcome], exporter.monitor.counts[outcome])
                yield counts
                means = GaugeMetricFamily(
                    "rankgate_window_mean",
                    "Mean of a metric over a trailing window",
                    labels=["metric", "group", "window"],
                )
                queries = GaugeMetricFamily(
                    "rankgate_window_queries",
                    "Scored queries in a trailing window",
                    labels=["metric", "group", "window"],
                )
                for name, view in exporter.monitor.config.named_views:
                    for (metric, group), (count, mean) in exporter.monitor.window(view).items():
                        means.add_metric([metric, _label(group), name], mean)
                        queries.add_metric([metric, _label(group), name], count)
                yield means
                yield queries
                states = GaugeMetricFamily(
                    "rankgate_alert_state",
                    "Alert state: 0 ok or resolved, 1 pending, 2 firing",
                    labels=["rule", "metric", "group"],
                )
                if exporter.monitor.alerts is not None:
                    for state in exporter.monitor.alert_states():
                        level = {"pending": 1, "firing": 2}.get(getattr(state, "state", ""), 0)
                        states.add_metric([state.rule, state.metric, _label(state.group)], level)
                yield states

        self.registry.register(_Live())

    def render(self) -> bytes:
        from prometheus_client import generate_latest

        # Score what is queued first, so histograms, counters and windows agree in one scrape.
        self.monitor.flush()
        return bytes(generate_latest(self.registry))


def _label(text: str) -> str:
    """A label value that encodes whatever state it came from (intake already refuses what
    would not; this keeps an exporter from failing on anything older)."""
    return (
        text
        if text.isascii() and len(text) <= 2 * MAX_GROUP_VALUE_BYTES
        else (clean_text(text, 2 * MAX_GROUP_VALUE_BYTES))
    )


class MonitorServer:
    """The HTTP service around a ``Monitor``; ``serve_forever`` until ``shutdown``.

    With a ``state`` file, the state is restored at start and the intake journal beside it is
    replayed, so what was answered 202 before a crash is kept; ``journal_sync`` says whether each
    journal append is ``fsync``-ed before the reply (the default) or only handed to the OS.
    """

    def __init__(
        self,
        monitor: Monitor,
        *,
        token: str,
        host: str = "127.0.0.1",
        port: int = 9464,
        max_body: int = DEFAULT_MAX_BODY,
        state: StateFile | None = None,
        webhook: Webhook | None = None,
        tick_seconds: float = 5.0,
        limits: HttpLimits | None = None,
        journal_sync: bool = True,
    ) -> None:
        if len(token) < 16:
            raise UsageError("the monitor's token must be at least 16 characters")
        self.monitor = monitor
        self.token = token
        self.limits = replace(limits or DEFAULT_LIMITS, max_body=max_body)
        self.max_body = max_body
        self.state = state
        self.webhook = webhook
        self.tick_seconds = tick_seconds
        self.exporter = _Exporter(monitor)
        previous = monitor.on_alert

        def alert(event: Any) -> None:
            log.warning("alert %s", getattr(event, "message", event))
            if webhook is not None:
                webhook.send(event)
            if previous is not None:
                previous(event)

        monitor.on_alert = alert
        # Intake (journal append + monitor) and the snapshot a save takes exclude each other, so
        # every journaled batch is either in a saved state or in a journal generation after it.
        self._intake_lock = threading.Lock()
        self._save_lock = threading.Lock()
        self._saved_changes = -1
        self.journal: Journal | None = None
        if state is not None:
            self._recover(state, journal_sync)
        self.socket = listen(host, port, self.limits.backlog)
        host_name, port_number = self.socket.getsockname()[:2]
        self._address = (str(host_name), int(port_number))
        self.http = HttpServer(self, self.socket, self.limits)
        self._stop = threading.Event()
        self._ticker = threading.Thread(target=self._tick_loop, name="rankgate-tick", daemon=True)

    @property
    def address(self) -> tuple[str, int]:
        return self._address

    def serve_forever(self) -> None:
        self._ticker.start()
        self.http.start()
        try:
            # In slices, so that a signal handler in the main thread gets its turn.
            while not self.http.wait(0.5):
                pass
        finally:
            self._stop.set()
            self._ticker.join(5)
            self.save()
            if self.journal is not None:
                self.journal.close()

    def shutdown(self) -> None:
        self.http.stop()
        if self.webhook is not None:
            self.webhook.close()

    def save(self) -> None:
        """Save the state if it changed since the last save, then drop the journal it covers."""
        if self.state is None:
            return
        with self._save_lock:
            with self._intake_lock:
                changes = self.monitor.changes
                if changes == self._saved_changes:
                    return
                snapshot = self.monitor.state()
                generation = self.journal.rotate() if self.journal is not None else 0
            snapshot["intake_generation"] = generation
            self.state.save(snapshot)
            self._saved_changes = changes
            if self.journal is not None:
                self.journal.discard_before(generation)

    def _recover(self, state: StateFile, journal_sync: bool) -> None:
        saved = state.load()
        since = 0
        if saved is not None:
            try:
                self.monitor.restore(saved)
                since = int(saved.get("intake_generation") or 0)
            except (ConfigError, TypeError, ValueError) as problem:
                raise UsageError(f"{state.path}: {problem}") from None
        journal = Journal(state.path, sync=journal_sync)
        for where, entry in journal.replay(since):
            try:
                self._apply(entry)
            except (KeyError, TypeError, ValueError, AttributeError, UsageError) as problem:
                reason = str(problem)[:200]
                raise UsageError(f"{where}: not an intake journal entry ({reason})") from None
        journal.open(max([since, *journal.generations()]) + 1)
        self.journal = journal
        self.save()  # the replayed batches into the state, and the old journals gone

    def _apply(self, entry: dict[str, Any]) -> None:
        """Redo one journaled batch on the state as it was before it."""
        received_at = parse_time(entry["at"], "at")
        if "events" in entry:
            events = [Event.from_row(row) for row in entry["events"]]
            self.monitor.take(events, invalid=int(entry.get("invalid", 0)), received_at=received_at)
        for query_id, grades in entry.get("labels", []):
            self.monitor.label(str(query_id), {str(k): float(v) for k, v in grades.items()})

    # --- what the HTTP app calls (on its worker threads) -------------------------------------

    def intake(self, path: str, body: bytes) -> tuple[int, dict[str, Any]]:
        """Take one intake body; returns the reply's status and JSON payload."""
        received_at = self.monitor.clock()
        try:
            records = list(_records(body))
        except UnicodeDecodeError as problem:
            return 400, {"error": f"body is not UTF-8 text (byte {problem.start + 1})"}
        errors: list[str] = []
        events: list[Event] = []
        labels: list[tuple[str, dict[str, float]]] = []
        for where, record in records:
            try:
                if isinstance(record, InputError):
                    raise record
                if path == "/v1/events":
                    events.append(
                        self.monitor.read_event(record, source=where, received_at=received_at)
                    )
                else:
                    labels.append(self.monitor.read_label(record, source=where))
            except InputError as problem:
                errors.append(str(problem))
        rejected = len(errors)
        entry: dict[str, Any] = {"at": received_at.isoformat()}
        if path == "/v1/events":
            entry["events"] = [event.to_row() for event in events]
            entry["invalid"] = rejected
        else:
            entry["labels"] = [[query_id, grades] for query_id, grades in labels]
        with self._intake_lock:
            if self.journal is not None:
                try:
                    self.journal.append(entry)
                except OSError as problem:
                    log.error("cannot write the intake journal: %s", problem)
                    message = f"could not write the intake journal ({problem.strerror}); nothing was taken, send again"
                    return 503, {"error": message}
            if path == "/v1/events":
                self.monitor.take(events, invalid=rejected, received_at=received_at)
            else:
                for query_id, grades in labels:
                    self.monitor.label(query_id, grades)
        status = 400 if rejected else 202
        return status, {
            "accepted": len(events) + len(labels),
            "rejected": rejected,
            "errors": errors[:ERRORS_SHOWN],
            "journaled": self.journal is not None,
        }

    def metrics(self) -> bytes:
        return self.exporter.render()

    def status_page(self) -> str:
        return _status_page(self.monitor)

    def _tick_loop(self) -> None:
        while not self._stop.wait(self.tick_seconds):
            try:
                self.monitor.tick()
                self.save()
            except (OSError, sqlite3.Error) as problem:
                log.error("saving the monitor state failed: %s", problem)
            except Exception:  # keep the service up; the log says what went wrong
                log.exception("monitor tick failed")


def _records(body: bytes) -> Iterator[tuple[str, Any]]:
    """(where in the body, record) pairs from JSON (object or array) or JSON Lines; an unreadable
    record comes back as an ``InputError`` so that the rest still count."""
    text = body.decode("utf-8")
    stripped = text.lstrip()
    if stripped.startswith(("[", "{")):
        try:
            whole = json.loads(text)
        except json.JSONDecodeError as problem:
            if stripped.startswith("["):
                yield (
                    "request body",
                    InputError("request body", None, f"not valid JSON ({problem.msg})"),
                )
                return
            whole = None  # several objects: JSON Lines
        except (RecursionError, ValueError):
            yield (
                "request body",
                InputError("request body", None, "not valid JSON (nested too deeply)"),
            )
            return
        if isinstance(whole, list):
            for number, record in enumerate(whole, start=1):
                yield f"request body record {number}", record
            return
        if whole is not None:
            yield "request body record 1", whole  # one object, however it is laid out
            return
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"request body line {number}"
        try:
            yield where, json.loads(line)
        except json.JSONDecodeError as problem:
            yield where, InputError(where, None, f"not valid JSON ({problem.msg})")
        except (RecursionError, ValueError):
            yield where, InputError(where, None, "not valid JSON (nested too deeply)")


def _html(text: Any) -> str:
    """Text from traffic, fit for a page: encodable, clipped, no control characters (NUL
    included), escaped, and isolated so that a right-to-left override cannot reorder the page."""
    clean = clean_text(str(text), 1024)
    visible = "".join("\ufffd" if unicodedata.category(char) == "Cc" else char for char in clean)
    return f"<bdi>{escape(visible)}</bdi>"


def _status_page(monitor: Monitor) -> str:
    rows = []
    for name, view in monitor.config.named_views:
        for (metric, group), (count, mean) in monitor.window(view).items():
            rows.append(
                f"<tr><td>{_html(name)}</td><td>{_html(metric)}</td><td>{_html(group)}</td>"
                f"<td>{count:,}</td><td>{mean:.4f}</td></tr>"
            )
    alerts = []
    if monitor.alerts is not None:
        for state in monitor.alert_states():
            alerts.append(
                f"<tr><td>{_html(state.rule)}</td><td>{_html(state.group)}</td>"
                f"<td>{_html(getattr(state, 'state', ''))}</td></tr>"
            )
    counts = "".join(
        f"<tr><td>{_html(k)}</td><td>{v:,}</td></tr>" for k, v in monitor.counts.items()
    )
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'">'
        "<title>rankgate monitor</title></head><body><h1>rankgate monitor</h1>"
        f"<h2>Events</h2><table>{counts}</table>"
        "<h2>Windows</h2><table><tr><th>window</th><th>metric</th><th>group</th>"
        f"<th>queries</th><th>mean</th></tr>{''.join(rows)}</table>"
        "<h2>Alerts</h2><table><tr><th>rule</th><th>group</th><th>state</th></tr>"
        f"{''.join(alerts)}</table></body></html>\n"
    )
