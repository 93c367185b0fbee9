"""``rankgate monitor`` as a service: HTTP intake, Prometheus metrics, alerts to a webhook, state that
survives a restart.

Endpoints:

* ``POST /v1/events`` and ``POST /v1/labels``: JSON (one object or an array) or JSON Lines; bearer
  token required; bodies above ``max_body`` bytes are refused (413). Each record is taken on its
  own: the reply says how many were accepted and why the others were not, with 400 when any was
  malformed. A bad record never stops the service.
* ``GET /metrics``: Prometheus text format, from the official client library: a histogram of
  per-query values per metric, variant and segment (so means aggregate across instances as
  ``sum/count``), counters of events by outcome, gauges of window means and alert states.
* ``GET /healthz``: ``ok``. ``GET /``: a status page (current windows and alerts; no script).

The server binds 127.0.0.1 unless told otherwise. A ticker thread closes buckets, evaluates alerts
and saves the state (buckets, counters, alert timers) to a SQLite file after every change of
bucket and at shutdown, so a deploy does not reset a sustained-drop timer.
"""

from __future__ import annotations

import hmac
import json
import logging
import queue
import re
import sqlite3
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import asdict, is_dataclass
from datetime import timedelta
from html import escape
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from rankgate.errors import InputError, UsageError
from rankgate.monitor.core import OUTCOMES, Monitor

__all__ = ["MonitorServer", "StateFile", "Webhook"]

log = logging.getLogger("rankgate.monitor")

DEFAULT_MAX_BODY = 10 * 1024 * 1024
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
            return None if row is None else dict(json.loads(row[0]))
        except (sqlite3.Error, ValueError, TypeError) as problem:
            raise UsageError(f"{self.path}: not a readable monitor state ({problem})") from None

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

        def observe(variant: str, labels: Any, values: Any) -> None:
            for metric, value in values.items():
                self.values.labels(metric, variant, "all").observe(value)
                for name in segment_fields:
                    self.values.labels(metric, variant, f"{name}={labels.get(name)}").observe(value)

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
                for view in exporter.monitor.config.views:
                    name = _duration_name(view)
                    for (metric, group), (count, mean) in exporter.monitor.window(view).items():
                        means.add_metric([metric, group, name], mean)
                        queries.add_metric([metric, group, name], count)
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
                        states.add_metric([state.rule, state.metric, state.group], level)
                yield states

        self.registry.register(_Live())

    def render(self) -> bytes:
        from prometheus_client import generate_latest

        # Score what is queued first, so histograms, counters and windows agree in one scrape.
        self.monitor.flush()
        return bytes(generate_latest(self.registry))


def _duration_name(span: timedelta) -> str:
    seconds = int(span.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


class MonitorServer:
    """The HTTP service around a ``Monitor``; ``serve_forever`` until ``shutdown``."""

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
    ) -> None:
        if len(token) < 16:
            raise UsageError("the monitor's token must be at least 16 characters")
        self.monitor = monitor
        self.token = token
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
        if state is not None:
            saved = state.load()
            if saved is not None:
                monitor.restore(saved)
        handler = _handler(self)
        try:
            self.httpd = ThreadingHTTPServer((host, port), handler)
        except (OSError, OverflowError) as problem:
            reason = getattr(problem, "strerror", None) or str(problem)
            raise UsageError(f"cannot listen on {host}:{port} ({reason})") from None
        self.httpd.daemon_threads = True
        self._stop = threading.Event()
        self._ticker = threading.Thread(target=self._tick_loop, name="rankgate-tick", daemon=True)

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.httpd.server_address[:2]
        return str(host), int(port)

    def serve_forever(self) -> None:
        self._ticker.start()
        try:
            self.httpd.serve_forever(poll_interval=0.2)
        finally:
            self._stop.set()
            self._ticker.join(5)
            self.save()

    def shutdown(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        if self.webhook is not None:
            self.webhook.close()

    def save(self) -> None:
        if self.state is not None:
            self.state.save(self.monitor.state())

    def _tick_loop(self) -> None:
        while not self._stop.wait(self.tick_seconds):
            try:
                self.monitor.tick()
                self.save()
            except Exception:  # keep the service up; the log says what went wrong
                log.exception("monitor tick failed")


def _records(body: bytes) -> Iterator[tuple[int, Any]]:
    """(position, record) pairs from JSON (object or array) or JSON Lines; an unreadable record
    comes back as an ``InputError``-carrying placeholder so the rest still count."""
    text = body.decode("utf-8")
    stripped = text.lstrip()
    if stripped.startswith(("[", "{")):
        try:
            whole = json.loads(text)
        except json.JSONDecodeError as problem:
            if stripped.startswith("["):
                yield 1, InputError("body", None, f"not valid JSON ({problem.msg})")
                return
            whole = None  # several objects: JSON Lines
        except (RecursionError, ValueError):
            yield 1, InputError("body", None, "not valid JSON (nested too deeply)")
            return
        if isinstance(whole, list):
            yield from enumerate(whole, start=1)
            return
        if whole is not None:
            yield 1, whole  # one object, however it is laid out
            return
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            yield number, json.loads(line)
        except json.JSONDecodeError as problem:
            yield number, InputError(f"line {number}", None, f"not valid JSON ({problem.msg})")
        except (RecursionError, ValueError):
            yield number, InputError(f"line {number}", None, "not valid JSON (nested too deeply)")


def _handler(server: MonitorServer) -> type[BaseHTTPRequestHandler]:
    monitor = server.monitor

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "rankgate-monitor"
        # A client that stops sending (a slow or half-sent request) frees its thread after this.
        timeout = 30

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("%s " + format, self.address_string(), *args)

        def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def _json(self, status: int, payload: Any) -> None:
            self._send(status, json.dumps(payload).encode("utf-8"))

        def _refuse(self, status: int, message: str) -> None:
            """An error answered before the body was read: close the connection, so the unread
            body is never taken for the next request."""
            self.close_connection = True
            self._json(status, {"error": message})

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                from prometheus_client import CONTENT_TYPE_LATEST

                self._send(200, server.exporter.render(), CONTENT_TYPE_LATEST)
            elif path == "/healthz":
                self._send(200, b"ok\n", "text/plain; charset=utf-8")
            elif path == "/":
                self._send(200, _status_page(monitor).encode("utf-8"), "text/html; charset=utf-8")
            else:
                self._json(404, {"error": f"no such page: {path}"})

        def do_POST(self) -> None:
            path = self.path.split("?", 1)[0]
            if path not in ("/v1/events", "/v1/labels"):
                self._refuse(404, f"no such endpoint: {path}")
                return
            given = self.headers.get("Authorization", "")
            expected = f"Bearer {server.token}"
            if not hmac.compare_digest(given.encode(), expected.encode()):
                self._refuse(401, "a bearer token is required (Authorization: Bearer ...)")
                return
            length = self.headers.get("Content-Length", "")
            if not re.fullmatch(r"[0-9]{1,12}", length):
                self._refuse(411, "a Content-Length in digits is required")
                return
            if int(length) > server.max_body:
                self._refuse(413, f"body larger than {server.max_body} bytes")
                return
            body = self.rfile.read(int(length))
            try:
                records = list(_records(body))
            except UnicodeDecodeError:
                self._json(400, {"error": "body is not UTF-8 text"})
                return
            accepted = 0
            errors: list[str] = []
            rejected = 0
            for number, record in records:
                try:
                    if isinstance(record, InputError):
                        raise record
                    if path == "/v1/events":
                        monitor.ingest(record, source=f"record {number}")
                    else:
                        monitor.ingest_label_record(record, source=f"record {number}")
                    accepted += 1
                except InputError as problem:
                    rejected += 1
                    if path == "/v1/events" and isinstance(record, InputError):
                        monitor.count_unreadable()
                    if len(errors) < ERRORS_SHOWN:
                        errors.append(str(problem))
            status = HTTPStatus.BAD_REQUEST if rejected else HTTPStatus.ACCEPTED
            self._json(status, {"accepted": accepted, "rejected": rejected, "errors": errors})

    return Handler


def _status_page(monitor: Monitor) -> str:
    rows = []
    for view in monitor.config.views:
        name = _duration_name(view)
        for (metric, group), (count, mean) in monitor.window(view).items():
            rows.append(
                f"<tr><td>{escape(name)}</td><td>{escape(metric)}</td><td>{escape(group)}</td>"
                f"<td>{count:,}</td><td>{mean:.4f}</td></tr>"
            )
    alerts = []
    if monitor.alerts is not None:
        for state in monitor.alert_states():
            alerts.append(
                f"<tr><td>{escape(str(state.rule))}</td><td>{escape(str(state.group))}</td>"
                f"<td>{escape(str(getattr(state, 'state', '')))}</td></tr>"
            )
    counts = "".join(
        f"<tr><td>{escape(k)}</td><td>{v:,}</td></tr>" for k, v in monitor.counts.items()
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
