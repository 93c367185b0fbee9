"""``rankgate monitor``: score sampled live traffic, expose Prometheus metrics, alert on sustained
drops. Runs until interrupted (Ctrl-C or SIGTERM), saving its state on the way out."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import sys
import threading
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rankgate.cli.options import first, load_project_config
from rankgate.cli.terminal import EXIT_OK
from rankgate.errors import InputError, RankgateError, UsageError
from rankgate.io import FieldMap
from rankgate.monitor.core import Monitor, MonitorConfig, parse_monitor_table
from rankgate.monitor.server import DEFAULT_MAX_BODY, MonitorServer, StateFile, Webhook
from rankgate.store import StoreSource, Window, is_store_url
from rankgate.store.backends import redact_url
from rankgate.times import parse_time

log = logging.getLogger("rankgate.monitor")

__all__ = ["add_parser", "poll_store"]

TOKEN_ENV = "RANKGATE_MONITOR_TOKEN"


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "monitor",
        help="score sampled live traffic, serve Prometheus metrics, alert on drops",
        description="Take trace events over HTTP (POST /v1/events, /v1/labels) or by following a "
        "JSON Lines file, keep rolling windows of the [monitor] metrics per variant and segment, "
        "evaluate the [alerts] rules of rankgate.toml, and serve /metrics, /healthz and a status "
        "page. Write endpoints need the bearer token from --token-file or $" + TOKEN_ENV + ".",
    )
    parser.add_argument("--config", type=Path, help="config file (default ./rankgate.toml)")
    parser.add_argument("--no-config", action="store_true", help="ignore ./rankgate.toml")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=9464, help="port (default 9464; 0: any free)")
    parser.add_argument(
        "--token-file", type=Path, metavar="FILE", help=f"bearer token (else ${TOKEN_ENV})"
    )
    parser.add_argument(
        "--state",
        type=Path,
        default=Path("rankgate-monitor.db"),
        metavar="FILE",
        help="SQLite file keeping windows and alert timers across restarts "
        "(default rankgate-monitor.db)",
    )
    parser.add_argument("--webhook", metavar="URL", help="POST alert state changes here as JSON")
    parser.add_argument(
        "--max-body",
        type=int,
        default=DEFAULT_MAX_BODY,
        metavar="BYTES",
        help=f"largest request body accepted (default {DEFAULT_MAX_BODY:,})",
    )
    parser.add_argument(
        "--tick", type=float, default=5.0, metavar="SECONDS", help="how often buckets close"
    )
    parser.add_argument(
        "--follow",
        type=Path,
        metavar="FILE",
        help="also take events from lines appended to this JSON Lines file",
    )
    parser.add_argument(
        "--poll-store",
        metavar="URL",
        help="also take the traces recorded into this trace store from now on",
    )
    parser.add_argument(
        "--poll-every",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="how often --poll-store is read (default 30)",
    )
    parser.set_defaults(handler=run)


def _token(args: argparse.Namespace) -> str:
    if args.token_file is not None:
        try:
            token = str(args.token_file.read_text(encoding="utf-8")).strip()
        except OSError as problem:
            raise UsageError(f"{args.token_file}: cannot read token ({problem.strerror})") from None
    else:
        token = str(os.environ.get(TOKEN_ENV, "")).strip()
    if not token:
        raise UsageError(
            f"the monitor accepts data over HTTP, so it needs a token: --token-file FILE or ${TOKEN_ENV}"
        )
    return token


def run(args: argparse.Namespace) -> int:
    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port {args.port}: expected 0-65535")
    for name, value in (("--tick", args.tick), ("--poll-every", args.poll_every)):
        if not value > 0:
            raise UsageError(f"{name} must be a number of seconds above 0")
    if args.max_body < 1:
        raise UsageError("--max-body must be at least 1 byte")
    token = _token(args)
    config = load_project_config(args)
    settings = MonitorConfig() if config.monitor is None else parse_monitor_table(config.monitor)
    # The project's scoring conventions, so the monitor's numbers are eval's numbers.
    settings = replace(
        settings,
        relevance_threshold=first(config.relevance_threshold, 1.0),
        empty_relevant=first(config.empty_relevant, "skip"),
        fields=FieldMap.from_assignments(config.fields),
    )
    alerts = None
    if config.alerts:
        from rankgate.monitor.alerts import AlertEngine, parse_rules

        alerts = AlertEngine(parse_rules(config.alerts))
    monitor = Monitor(settings, alerts)
    server = MonitorServer(
        monitor,
        token=token,
        host=args.host,
        port=args.port,
        max_body=args.max_body,
        state=StateFile(args.state),
        webhook=None if args.webhook is None else Webhook(args.webhook),
        tick_seconds=args.tick,
    )
    host, port = server.address
    sys.stderr.write(f"rankgate monitor listening on http://{host}:{port} (state {args.state})\n")
    sys.stderr.flush()
    if args.follow is not None:
        threading.Thread(target=_follow, args=(monitor, args.follow), daemon=True).start()
    if args.poll_store is not None:
        if not is_store_url(args.poll_store):
            raise UsageError(f"--poll-store {args.poll_store!r}: expected a trace store URL")
        threading.Thread(
            target=poll_store,
            args=(monitor, args.poll_store, args.poll_every, threading.Event()),
            daemon=True,
        ).start()

    def stop(*_: Any) -> None:
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    server.serve_forever()
    sys.stderr.write("rankgate monitor stopped; state saved\n")
    return EXIT_OK


def poll_store(
    monitor: Monitor, url: str, every: float, stop: threading.Event, since: datetime | None = None
) -> None:
    """Every ``every`` seconds, take the traces recorded into the store since the last read (with
    their labels as the store has them then). Traces at the boundary time are not taken twice."""
    since = since or datetime.now(UTC)
    taken_at_edge: set[str] = set()
    while not stop.wait(every):
        try:
            newest, edge = since, set(taken_at_edge)
            for raw in StoreSource(url, Window(since=since)):
                record = raw.value
                trace_id = str(record.get("trace_id"))
                try:
                    stamp = parse_time(record["timestamp"], "timestamp")
                except (KeyError, UsageError):
                    monitor.count_unreadable()
                    continue
                if stamp == since and trace_id in taken_at_edge:
                    continue
                with contextlib.suppress(InputError):  # counted as invalid by the monitor
                    monitor.ingest(record, source=f"{raw.location}")
                if stamp > newest:
                    newest, edge = stamp, {trace_id}
                elif stamp == newest:
                    edge.add(trace_id)
            since, taken_at_edge = newest, edge
        except (RankgateError, KeyError, ValueError, OSError) as problem:
            # The poller must outlive a bad record or a database hiccup: say so and go on.
            log.warning("polling %s failed: %s", redact_url(url), problem)


def _follow(monitor: Monitor, path: Path) -> None:
    """Take the lines appended to ``path`` from now on; a bad line is counted, never fatal."""
    while not path.exists():
        time.sleep(0.5)
    with path.open("r", encoding="utf-8", errors="replace") as handle:
        handle.seek(0, os.SEEK_END)
        number = 0
        pending = ""
        while True:
            chunk = handle.readline()
            if not chunk:
                time.sleep(0.2)
                continue
            pending += chunk
            if not pending.endswith("\n"):
                continue  # a line still being written
            line, pending = pending, ""
            number += 1
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                monitor.count_unreadable()
                continue
            with contextlib.suppress(InputError):  # counted as invalid by the monitor
                monitor.ingest(record, source=f"{path}:{number}")
