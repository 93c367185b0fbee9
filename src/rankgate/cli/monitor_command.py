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
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rankgate.cli.options import first, load_project_config
from rankgate.cli.terminal import EXIT_OK
from rankgate.errors import InputError, Location, RankgateError, UsageError
from rankgate.io import FieldMap
from rankgate.monitor.core import Monitor, MonitorConfig, parse_monitor_table
from rankgate.monitor.follow import Follower
from rankgate.monitor.http import DEFAULT_LIMITS, HttpLimits
from rankgate.monitor.server import DEFAULT_MAX_BODY, MonitorServer, StateFile, Webhook
from rankgate.store import StoreSource, Window, is_store_url
from rankgate.store.backends import connect, redact_url
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
        "--header-timeout",
        type=float,
        default=DEFAULT_LIMITS.header_timeout,
        metavar="SECONDS",
        help="close a connection whose request line and headers are not complete after this "
        f"(default {DEFAULT_LIMITS.header_timeout:g})",
    )
    parser.add_argument(
        "--body-timeout",
        type=float,
        default=DEFAULT_LIMITS.body_timeout,
        metavar="SECONDS",
        help="answer 408 to a request whose body is not complete after this "
        f"(default {DEFAULT_LIMITS.body_timeout:g})",
    )
    parser.add_argument(
        "--max-connections",
        type=int,
        default=DEFAULT_LIMITS.max_connections,
        metavar="N",
        help="open connections past which requests are answered 503 "
        f"(default {DEFAULT_LIMITS.max_connections:,})",
    )
    parser.add_argument(
        "--no-fsync",
        action="store_true",
        help="hand each accepted batch to the OS before answering 202 instead of waiting for the "
        "disk: it then survives a crash of the monitor, not of the machine",
    )
    parser.add_argument(
        "--tick", type=float, default=5.0, metavar="SECONDS", help="how often buckets close"
    )
    parser.add_argument(
        "--follow",
        type=Path,
        metavar="FILE",
        help="also take events from lines appended to this JSON Lines file, followed by name "
        "through rotation (like tail -F)",
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
    for name, seconds in (
        ("--header-timeout", args.header_timeout),
        ("--body-timeout", args.body_timeout),
    ):
        if not 0 < seconds <= 3600:
            raise UsageError(f"{name} must be a number of seconds above 0 and at most 3600")
    if args.max_body < 1:
        raise UsageError("--max-body must be at least 1 byte")
    if args.max_connections < 2:
        raise UsageError("--max-connections must be at least 2")
    token = _token(args)
    if args.poll_store is not None:
        if not is_store_url(args.poll_store):
            raise UsageError(f"--poll-store {args.poll_store!r}: expected a trace store URL")
        # Open it once now: a wrong scheme, path or password is exit 2 at start, not a warning
        # logged every poll by a service that looks healthy.
        connect(args.poll_store, read_only=True).close()
    config = load_project_config(args)
    settings = MonitorConfig() if config.monitor is None else parse_monitor_table(config.monitor)
    # The project's scoring conventions, so the monitor's numbers are eval's numbers.
    settings = replace(
        settings,
        relevance_threshold=first(config.relevance_threshold, 1.0),
        empty_relevant=first(config.empty_relevant, "skip"),
        fields=FieldMap.from_assignments(config.fields),
    )
    if config.doc_ids is not None:
        # Said once at start: the live numbers would otherwise differ from eval's without a word.
        sys.stderr.write(
            f"warning: {config.path}: [ids] ({config.doc_ids}) is not applied by rankgate monitor;"
            " it scores retrieved and labeled IDs as they arrive\n"
        )
    alerts = None
    if config.alerts:
        from rankgate.monitor.alerts import AlertEngine, parse_rules

        alerts = AlertEngine(parse_rules(config.alerts))
    monitor = Monitor(settings, alerts)
    limits = replace(
        DEFAULT_LIMITS,
        header_timeout=args.header_timeout,
        body_timeout=args.body_timeout,
        max_connections=args.max_connections,
    )
    _allow_open_files(limits)
    server = MonitorServer(
        monitor,
        token=token,
        host=args.host,
        port=args.port,
        max_body=args.max_body,
        state=StateFile(args.state),
        webhook=None if args.webhook is None else Webhook(args.webhook),
        tick_seconds=args.tick,
        limits=limits,
        journal_sync=not args.no_fsync,
    )
    host, port = server.address
    sys.stderr.write(f"rankgate monitor listening on http://{host}:{port} (state {args.state})\n")
    sys.stderr.flush()
    if args.follow is not None:
        follower = Follower(args.follow, _line_taker(monitor, args.follow))
        threading.Thread(target=follower.run, args=(threading.Event(),), daemon=True).start()
    if args.poll_store is not None:
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


def _allow_open_files(limits: HttpLimits) -> None:
    """Raise the soft limit on open files to what the connection cap needs (within the hard
    limit): at the usual 1,024, the cap would be reached by the kernel before the monitor."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        wanted = limits.max_connections + 64
        if soft != resource.RLIM_INFINITY and soft < wanted:
            ceiling = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
            resource.setrlimit(resource.RLIMIT_NOFILE, (ceiling, hard))
    except (ImportError, ValueError, OSError):
        pass  # not on this platform, or not allowed: the cap still answers 503 past it


def _line_taker(monitor: Monitor, path: Path) -> Any:
    """What the follower does with a line: a bad line is counted, never fatal."""

    def take(line: bytes | None, number: int) -> None:
        if line is None:
            log.warning("%s:%d: line too long; skipped", path, number)
            monitor.count_unreadable()
            return
        if not line.strip():
            return
        try:
            record = json.loads(line.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            monitor.count_unreadable()
            return
        with contextlib.suppress(InputError):  # counted as invalid by the monitor
            monitor.ingest(record, source=Location(str(path), line=number))

    return take
