"""The monitor's HTTP layer: an ASGI app served by uvicorn over h11, with the guards uvicorn lacks.

Why this server: h11 is a strict, maintained HTTP/1.1 parser (one framing per message, a bounded
request head, conflicting ``Content-Length`` values refused), and uvicorn runs it on one asyncio
event loop with a cap on connections (``limit_concurrency``: a 503 past it) and a real listen
backlog. ``http.server``, which this replaces, framed a request by its first ``Content-Length``
and served the rest as a second request, held a thread per slow client, and listened with a
backlog of 5.

What is added here, because uvicorn does not do it:

* **Ambiguous framing is refused.** A request head with both ``Content-Length`` and
  ``Transfer-Encoding``, or ``Content-Length`` twice (even with equal values), gets a 400 and the
  connection is closed; nothing after it is read as another request (``_StrictConnection``).
* **A deadline for the request head.** uvicorn's keep-alive timeout is reset by every byte, so a
  client sending one header line every 15 seconds would hold its connection for ever. Here the
  head (request line and headers) must be complete within ``header_timeout`` seconds of the
  connection opening or of the previous response ending; otherwise the connection is closed (with
  a 408 if part of a request had come). See ``protocol_class``.
* **A deadline for the body.** Once its head is in, a request's body must arrive within
  ``body_timeout`` seconds, or it is answered 408 and the connection closed (``IntakeApp``).
* **Bounded request heads, with the usual answers:** a request line past ``max_request_line``
  bytes gets a 414, a head past ``max_head`` bytes a 431.
* **Bounded intake memory:** at most ``intake_slots`` bodies are read and processed at once;
  other writers wait their turn with their bodies unread (about 64 KiB buffered each), within
  their own body deadline.

The app itself never blocks the event loop: reading a body is asynchronous, and parsing, scoring
and rendering run on a small thread pool, so ``/healthz`` answers while a large batch is taken.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import math
import re
import socket
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

import h11
from uvicorn import Config, Server
from uvicorn.protocols.http.h11_impl import H11Protocol

from rankgate.errors import UsageError

__all__ = ["DEFAULT_LIMITS", "HttpLimits", "HttpServer", "IntakeApp", "Service"]

log = logging.getLogger("rankgate.monitor")

INTAKE_PATHS = ("/v1/events", "/v1/labels")
READ_PATHS = ("/metrics", "/healthz", "/")


@dataclass(frozen=True, slots=True)
class HttpLimits:
    """What one client may cost the service. Tests scale the timeouts down."""

    #: Largest request body accepted (413 above it).
    max_body: int = 10 * 1024 * 1024
    #: Seconds for a request's line and headers to arrive, from the connection opening or the
    #: previous response ending.
    header_timeout: float = 10.0
    #: Seconds for a request's body to arrive once its headers have.
    body_timeout: float = 30.0
    #: Seconds an idle keep-alive connection is kept (whole seconds, as uvicorn takes them).
    keep_alive: float = 5.0
    #: Open connections (idle ones included) past which a request is answered 503.
    max_connections: int = 1000
    #: Connections the kernel queues before the service accepts them.
    backlog: int = 2048
    #: Bytes of the request line (414 past it).
    max_request_line: int = 8 * 1024
    #: Bytes of the whole request head (431 past it).
    max_head: int = 16 * 1024
    #: Intake bodies read and processed at once (each at most ``max_body`` bytes).
    intake_slots: int = 8


DEFAULT_LIMITS = HttpLimits()


class Service(Protocol):
    """What the app serves: the monitor server implements it."""

    token: str

    def intake(self, path: str, body: bytes) -> tuple[int, dict[str, Any]]: ...

    def metrics(self) -> bytes: ...

    def status_page(self) -> str: ...


# --- the protocol: strict framing and a deadline for the request head -----------------------

_BLANK_LINE = re.compile(rb"\n\r?\n")


def _framing_problem(buffered: bytes, max_head: int) -> tuple[str, int] | None:
    """Why the request head at the start of ``buffered`` cannot be framed without doubt (or is
    too large), and the status to answer with; None when it is fine or not complete yet."""
    end = _BLANK_LINE.search(buffered, 0, max_head + 4)
    if end is None:
        if len(buffered) > max_head:
            return f"request head larger than {max_head:,} bytes", 431
        return None
    lengths: list[bytes] = []
    chunked = False
    for line in buffered[: end.start()].split(b"\n")[1:]:
        name, colon, value = line.partition(b":")
        if not colon:
            continue
        name = name.strip().lower()
        if name == b"content-length":
            lengths += [part.strip() for part in value.split(b",")]
        elif name == b"transfer-encoding":
            chunked = True
    if lengths and chunked:
        return "both Content-Length and Transfer-Encoding: the body's length is ambiguous", 400
    if len(lengths) > 1:
        return "Content-Length given more than once: the body's length is ambiguous", 400
    if lengths and not re.fullmatch(rb"[0-9]{1,15}", lengths[0]):
        return "a Content-Length in digits is required", 411
    return None


class _StrictConnection(h11.Connection):
    """h11, refusing what it would accept but a proxy in front might frame differently. The head
    is checked before h11 reads it, so nothing of a refused request is ever acted on."""

    max_request_line = DEFAULT_LIMITS.max_request_line
    max_head = DEFAULT_LIMITS.max_head
    last_error: h11.RemoteProtocolError | None = None

    def next_event(self) -> Any:
        if self.their_state is h11.IDLE:
            buffered = self.trailing_data[0]
            line_end = buffered.find(b"\n")
            if line_end > self.max_request_line or (
                line_end < 0 and len(buffered) > self.max_request_line
            ):
                self._refuse(f"request line longer than {self.max_request_line:,} bytes", 414)
            problem = _framing_problem(buffered, self.max_head)
            if problem is not None:
                self._refuse(*problem)
        try:
            return super().next_event()
        except h11.RemoteProtocolError as problem:
            self.last_error = problem
            raise

    def _refuse(self, message: str, status: int) -> None:
        self.last_error = h11.RemoteProtocolError(message, error_status_hint=status)
        raise self.last_error


def _raw_response(status: int, message: str) -> bytes:
    """A complete response that closes the connection, for refusals made below the app."""
    from http import HTTPStatus

    body = json.dumps({"error": message}).encode("ascii")
    try:
        reason = HTTPStatus(status).phrase
    except ValueError:
        reason = "Error"
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\ncache-control: no-store\r\nconnection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


def protocol_class(limits: HttpLimits) -> type[H11Protocol]:
    """uvicorn's h11 protocol with strict framing, head limits and the head deadline."""

    class _Connection(_StrictConnection):
        max_request_line = limits.max_request_line
        max_head = limits.max_head

    class GuardedH11Protocol(H11Protocol):
        _head_deadline: asyncio.TimerHandle | None = None

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.conn = _Connection(h11.SERVER, limits.max_head)

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)  # type: ignore[arg-type]
            self._watch_head()

        def connection_lost(self, exc: Exception | None) -> None:
            self._stop_watching_head()
            super().connection_lost(exc)

        def handle_events(self) -> None:
            super().handle_events()
            self._watch_head()

        def _watch_head(self) -> None:
            """Run the head's clock while a request head is awaited, and only then. The clock is
            started once per request, not reset by the bytes that trickle in."""
            waiting = self.conn.their_state is h11.IDLE and not self.transport.is_closing()
            if not waiting:
                self._stop_watching_head()
            elif self._head_deadline is None:
                self._head_deadline = self.loop.call_later(
                    limits.header_timeout, self._head_timed_out
                )

        def _stop_watching_head(self) -> None:
            if self._head_deadline is not None:
                self._head_deadline.cancel()
                self._head_deadline = None

        def _head_timed_out(self) -> None:
            self._head_deadline = None
            if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
                return
            started = bool(self.conn.trailing_data[0])
            if started:
                log.info(
                    "closed a connection from %s: no complete request head in %g s",
                    _client(self.client),
                    limits.header_timeout,
                )
            if self.transport.get_write_buffer_size():
                # A client that reads nothing either: do not wait to flush what it ignores.
                self.transport.abort()
                return
            if started:
                message = f"request head not complete within {limits.header_timeout:g} s"
                self.transport.write(_raw_response(408, message))
            self.transport.close()

        def send_400_response(self, msg: str) -> None:
            problem = getattr(self.conn, "last_error", None)
            status = 400 if problem is None else int(problem.error_status_hint)
            if status not in (400, 411, 414, 431, 501):
                status = 400
            message = msg if problem is None else str(problem)
            if len(message) > 200:
                message = message[:197] + "..."
            self.transport.write(_raw_response(status, message))
            self.transport.close()

    return GuardedH11Protocol


def _client(address: Any) -> str:
    if isinstance(address, tuple) and len(address) >= 2:
        return f"{address[0]}:{address[1]}"
    return "a client"


# --- the app --------------------------------------------------------------------------------

_Send = Callable[[dict[str, Any]], Awaitable[None]]
_Receive = Callable[[], Awaitable[dict[str, Any]]]


class _Disconnected(Exception):
    """The client went away before its request was complete."""


class IntakeApp:
    """The ASGI app: intake (token, size limit, body deadline), ``/metrics``, ``/healthz``, ``/``."""

    def __init__(self, service: Service, limits: HttpLimits, workers: ThreadPoolExecutor) -> None:
        self.service = service
        self.limits = limits
        self.workers = workers
        self._slots: asyncio.Semaphore | None = None

    async def __call__(self, scope: dict[str, Any], receive: _Receive, send: _Send) -> None:
        if scope["type"] != "http":
            return
        try:
            await self._serve(scope, receive, send)
        except _Disconnected:
            log.info("client %s left before its request was complete", _client(scope.get("client")))
        except Exception:  # a bug, not a client: say so once, keep serving
            log.exception("monitor request %s %s failed", scope.get("method"), scope.get("path"))
            await _reply(
                send, 500, _json({"error": "internal error; see the monitor's log"}), close=True
            )

    async def _serve(self, scope: dict[str, Any], receive: _Receive, send: _Send) -> None:
        method, path = scope["method"], scope["path"]
        loop = asyncio.get_running_loop()
        if path in READ_PATHS:
            if method not in ("GET", "HEAD"):
                await _reply(send, 405, _json({"error": f"{path} answers GET"}), close=True)
            elif path == "/healthz":
                await _reply(send, 200, b"ok\n", "text/plain; charset=utf-8")
            elif path == "/metrics":
                from prometheus_client import CONTENT_TYPE_LATEST

                body = await loop.run_in_executor(self.workers, self.service.metrics)
                await _reply(send, 200, body, CONTENT_TYPE_LATEST)
            else:
                page = await loop.run_in_executor(self.workers, self.service.status_page)
                await _reply(send, 200, page.encode("utf-8"), "text/html; charset=utf-8")
            return
        if path not in INTAKE_PATHS:
            await _reply(send, 404, _json({"error": f"no such page: {_clip(path)}"}), close=True)
            return
        if method != "POST":
            await _reply(send, 405, _json({"error": f"{path} takes POST"}), close=True)
            return
        # Refusals before the body is read close the connection, so an unread body is never
        # taken for the next request (and a client cannot make the service read it).
        headers = scope["headers"]
        given = [value for name, value in headers if name == b"authorization"]
        expected = f"Bearer {self.service.token}".encode()
        if len(given) != 1 or not hmac.compare_digest(given[0], expected):
            message = "a bearer token is required (Authorization: Bearer ...)"
            await _reply(send, 401, _json({"error": message}), close=True)
            return
        length_text = next((value for name, value in headers if name == b"content-length"), b"")
        if not length_text.isdigit():
            await _reply(send, 411, _json({"error": "a Content-Length is required"}), close=True)
            return
        length = int(length_text)
        if length > self.limits.max_body:
            message = f"body larger than {self.limits.max_body:,} bytes"
            await _reply(send, 413, _json({"error": message}), close=True)
            return
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.limits.intake_slots)
        # The body's deadline runs from the end of the head, waiting for a slot included: a
        # client held back behind others is still gone within body_timeout.
        deadline = loop.time() + self.limits.body_timeout
        try:
            async with asyncio.timeout_at(deadline):
                await self._slots.acquire()
        except TimeoutError:
            message = f"body not received within {self.limits.body_timeout:g} s (service busy)"
            await _reply(send, 408, _json({"error": message}), close=True)
            return
        try:
            try:
                async with asyncio.timeout_at(deadline):
                    body = await _read_body(receive)
            except TimeoutError:
                message = f"body not received within {self.limits.body_timeout:g} s"
                await _reply(send, 408, _json({"error": message}), close=True)
                return
            status, payload = await loop.run_in_executor(
                self.workers, self.service.intake, path, body
            )
        finally:
            self._slots.release()
        await _reply(send, status, _json(payload))


async def _read_body(receive: _Receive) -> bytes:
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _Disconnected
        body += message.get("body", b"")
        if not message.get("more_body", False):
            return bytes(body)


async def _reply(
    send: _Send,
    status: int,
    body: bytes,
    content_type: str = "application/json",
    *,
    close: bool = False,
) -> None:
    headers = [
        (b"content-type", content_type.encode("ascii")),
        (b"content-length", str(len(body)).encode("ascii")),
        (b"cache-control", b"no-store"),
    ]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


def _json(payload: Any) -> bytes:
    # ASCII escapes: whatever a client sent that is echoed in an error cannot break the reply.
    return json.dumps(payload, ensure_ascii=True).encode("ascii")


def _clip(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --- the server -----------------------------------------------------------------------------


def listen(host: str, port: int, backlog: int) -> socket.socket:
    """A listening TCP socket on host:port; ``UsageError`` when that is not possible."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family = infos[0][0]
        return socket.create_server((host, port), family=family, backlog=backlog)
    except (OSError, OverflowError) as problem:
        reason = getattr(problem, "strerror", None) or str(problem)
        raise UsageError(f"cannot listen on {host}:{port} ({reason})") from None


class HttpServer:
    """uvicorn serving ``service`` on an already listening socket, in a thread of its own (its
    own event loop), so the caller's thread keeps its signals and the monitor its other threads."""

    def __init__(self, service: Service, sock: socket.socket, limits: HttpLimits) -> None:
        self.socket = sock
        self.workers = ThreadPoolExecutor(max_workers=4, thread_name_prefix="rankgate-http")
        config = Config(
            IntakeApp(service, limits, self.workers),
            http=protocol_class(limits),
            ws="none",
            lifespan="off",
            loop="asyncio",
            interface="asgi3",
            log_config=None,
            access_log=False,
            proxy_headers=False,
            server_header=False,
            limit_concurrency=limits.max_connections,
            backlog=limits.backlog,
            timeout_keep_alive=max(1, math.ceil(limits.keep_alive)),
            timeout_graceful_shutdown=5,
            h11_max_incomplete_event_size=limits.max_head,
        )
        self.server = Server(config)
        self._thread: threading.Thread | None = None
        self._stopped = threading.Event()

    @property
    def connections(self) -> int:
        """Open connections right now (for tests and the status page)."""
        return len(self.server.server_state.connections)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="rankgate-http", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            asyncio.run(self.server.serve(sockets=[self.socket]))
        finally:
            self._stopped.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the server has stopped; False if ``timeout`` passed first."""
        return self._stopped.wait(timeout)

    def stop(self) -> None:
        """Stop accepting, finish the requests in flight (5 s at most), and return."""
        self.server.should_exit = True
        if self._thread is None:
            self.socket.close()
            self._stopped.set()
        elif self._thread is not threading.current_thread():
            self._thread.join(15)
        self.workers.shutdown(wait=False, cancel_futures=True)
