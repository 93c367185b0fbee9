"""Hostile clients against a real ``rankgate monitor`` process on a localhost port.

Raw sockets send what an HTTP library would refuse to: ambiguous framing (Content-Length with
Transfer-Encoding, two Content-Lengths: request smuggling), huge headers, requests that trickle in,
broken bodies, lone surrogates and megabytes in segment values, wrong tokens, clients that hang up
mid-request. After every test the service must still answer ``/healthz``, serve a ``/metrics`` the
official Prometheus parser reads and a status page, still be running, and never have logged a
traceback. No request may ever get a 5xx, and a request smuggled inside another must never be served.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from adversarial_helpers import EXAMPLES, PHASES, encode, environment
from hostile_strategies import json_lines, records
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

TOKEN = "adversarial-token-0123456789abcdef"
AUTH = f"Authorization: Bearer {TOKEN}\r\n".encode()
CONFIG = """
[monitor]
metrics = ["mrr", "ndcg@10"]
views = ["1h"]
segment_by = ["query_type"]
"""
PROBE = b"GET /smuggled-probe HTTP/1.1\r\nHost: x\r\n\r\n"
_STATUS = re.compile(rb"(?:^|\r\n)HTTP/1\.[01] (\d{3})")


@dataclass
class Service:
    folder: Path
    port: int
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def address(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _get(service: Service, path: str, timeout: float = 10) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection(*service.address, timeout=timeout)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def start(folder: Path, *extra: str) -> Service:
    (folder / "token").write_text(TOKEN + "\n", encoding="utf-8")
    (folder / "rankgate.toml").write_text(CONFIG, encoding="utf-8")
    port = _free_port()
    log = folder / "monitor.log"
    with log.open("ab") as sink:
        process = subprocess.Popen(
            [
                sys.executable, "-m", "rankgate", "monitor", "--config", "rankgate.toml",
                "--host", "127.0.0.1", "--port", str(port), "--token-file", "token",
                "--state", "state.db", "--tick", "0.3", "--max-body", "4000000", *extra,
            ],
            cwd=folder,
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=sink,
            env=environment(),
        )  # fmt: skip
    service = Service(folder, port, process, log)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"the monitor exited {process.returncode}: {log.read_text()[-3000:]}")
        with contextlib.suppress(OSError):
            if _get(service, "/healthz", timeout=2)[0] == 200:
                return service
        time.sleep(0.2)
    stop(service)
    pytest.fail(f"the monitor did not answer /healthz within 60 s: {log.read_text()[-3000:]}")


def stop(service: Service) -> int:
    if service.process.poll() is None:
        service.process.send_signal(signal.SIGTERM)
        try:
            service.process.wait(30)
        except subprocess.TimeoutExpired:
            service.process.kill()
            service.process.wait(10)
            pytest.fail("the monitor ignored SIGTERM for 30 s")
    return int(service.process.returncode)


@pytest.fixture(scope="module")
def service() -> Iterator[Service]:
    with tempfile.TemporaryDirectory(prefix="rankgate-monitor-fuzz-") as name:
        running = start(Path(name))
        try:
            yield running
        finally:
            stop(running)


def assert_healthy(service: Service) -> None:
    """Alive, /healthz 200, /metrics parses, the status page answers, no traceback logged."""
    assert service.process.poll() is None, f"the monitor died: {service.log.read_text()[-3000:]}"
    status, body = _get(service, "/healthz")
    assert status == 200, body[:300]
    status, body = _get(service, "/metrics")
    assert status == 200, body[:300]
    families = list(text_string_to_metric_families(body.decode("utf-8")))
    assert families, "an empty /metrics"
    status, page = _get(service, "/")
    assert status == 200, page[:300]
    log = service.log.read_text(encoding="utf-8", errors="replace")
    assert "Traceback" not in log, log[-4000:]


def exchange(
    service: Service, parts: Sequence[bytes], *, pause: float = 0.0, wait: float = 2.0
) -> bytes:
    """Send ``parts`` on one connection (``pause`` between them), then read until the server
    closes or stays quiet for ``wait`` seconds. A reset counts as the server hanging up."""
    received = b""
    with socket.create_connection(service.address, timeout=10) as connection:
        try:
            for part in parts:
                connection.sendall(part)
                if pause:
                    time.sleep(pause)
            connection.settimeout(wait)
            while True:
                chunk = connection.recv(65536)
                if not chunk:
                    break
                received += chunk
        except (TimeoutError, ConnectionResetError, BrokenPipeError):
            pass
    return received


def statuses(received: bytes) -> list[int]:
    return [int(code) for code in _STATUS.findall(received)]


def assert_no_server_error(received: bytes, allowed: Sequence[int] = ()) -> list[int]:
    """No 5xx (a crash) unless ``allowed``: 501 is the RFC's answer to a method or transfer
    coding the server does not implement, a refusal rather than a failure."""
    codes = statuses(received)
    assert all(code < 500 or code in allowed for code in codes), received[:2000]
    return codes


def _post(path: str, body: bytes, *extra_headers: bytes) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: x\r\n".encode()
        + AUTH
        + b"Content-Type: application/json\r\n"
        + b"".join(extra_headers)
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )


EVENT = b'{"query_id":"q1","retrieved_ids":["d1","d2"],"relevant_ids":["d2"],"query_type":"a"}'


# --- framing -------------------------------------------------------------------------------------


def _cl_te(smuggled: bytes) -> bytes:
    """Content-Length covers everything; the chunked framing ends before the smuggled request."""
    body = b"0\r\n\r\n" + smuggled
    return (
        b"POST /v1/events HTTP/1.1\r\nHost: x\r\n" + AUTH
        + f"Content-Length: {len(body)}\r\n".encode()
        + b"Transfer-Encoding: chunked\r\n\r\n" + body
    )  # fmt: skip


def _te_cl(smuggled: bytes) -> bytes:
    """The chunked framing covers everything; Content-Length ends before the smuggled request."""
    size = f"{len(smuggled):x}\r\n".encode()
    body = size + smuggled + b"\r\n0\r\n\r\n"
    return (
        b"POST /v1/events HTTP/1.1\r\nHost: x\r\n" + AUTH
        + f"Content-Length: {len(size)}\r\n".encode()
        + b"Transfer-Encoding: chunked\r\n\r\n" + body
    )  # fmt: skip


def _te_first(smuggled: bytes) -> bytes:
    body = b"0\r\n\r\n" + smuggled
    return (
        b"POST /v1/events HTTP/1.1\r\nHost: x\r\n" + AUTH
        + b"Transfer-Encoding: chunked\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode() + body
    )  # fmt: skip


def _two_lengths(smuggled: bytes) -> bytes:
    body = EVENT + smuggled
    return (
        b"POST /v1/events HTTP/1.1\r\nHost: x\r\n" + AUTH
        + f"Content-Length: {len(EVENT)}\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body
    )  # fmt: skip


def _two_lengths_reversed(smuggled: bytes) -> bytes:
    body = EVENT + smuggled
    return (
        b"POST /v1/events HTTP/1.1\r\nHost: x\r\n" + AUTH
        + f"Content-Length: {len(body)}\r\nContent-Length: {len(EVENT)}\r\n\r\n".encode() + body
    )  # fmt: skip


def _length_list(smuggled: bytes) -> bytes:
    body = EVENT + smuggled
    return (
        b"POST /v1/events HTTP/1.1\r\nHost: x\r\n" + AUTH
        + f"Content-Length: {len(EVENT)}, {len(body)}\r\n\r\n".encode() + body
    )  # fmt: skip


def _obfuscated_te(smuggled: bytes) -> bytes:
    body = b"0\r\n\r\n" + smuggled
    return (
        b"POST /v1/events HTTP/1.1\r\nHost: x\r\n" + AUTH
        + f"Content-Length: {len(body)}\r\n".encode()
        + b"Transfer-Encoding: xchunked\r\nTransfer-Encoding : chunked\r\n\r\n" + body
    )  # fmt: skip


SMUGGLING = {
    "cl-te": _cl_te,
    "te-cl": _te_cl,
    "te-then-cl": _te_first,
    "two-lengths": _two_lengths,
    "two-lengths-reversed": _two_lengths_reversed,
    "length-list": _length_list,
    "obfuscated-te": _obfuscated_te,
}


@pytest.mark.parametrize("attack", list(SMUGGLING), ids=list(SMUGGLING))
def test_ambiguous_framing_never_serves_a_smuggled_request(service: Service, attack: str) -> None:
    received = exchange(service, [SMUGGLING[attack](PROBE)])
    codes = assert_no_server_error(received)
    # One request was sent: one answer at most (a refusal and a close), never a second answer to
    # the request hidden in the body.
    assert len(codes) <= 1, f"{len(codes)} responses to one request: {received[:2000]!r}"
    assert b"smuggled-probe" not in received
    assert_healthy(service)


@pytest.mark.parametrize(
    "attack", ["two-lengths", "two-lengths-reversed", "length-list", "cl-te", "te-then-cl"]
)
def test_ambiguous_framing_is_refused(service: Service, attack: str) -> None:
    """RFC 9112 6.3: differing lengths are an unrecoverable error; CL with TE "ought to be handled
    as an error". Either way the answer is a 400 (or a closed connection), never a 202."""
    codes = assert_no_server_error(exchange(service, [SMUGGLING[attack](b"")]))
    assert all(400 <= code < 500 for code in codes), codes


BAD_FRAMING = {
    "negative-length": b"POST /v1/events HTTP/1.1\r\nHost: x\r\n" + AUTH
    + b"Content-Length: -5\r\n\r\n" + EVENT,
    "text-length": b"POST /v1/events HTTP/1.1\r\nHost: x\r\n" + AUTH
    + b"Content-Length: abc\r\n\r\n" + EVENT,
    "huge-length": b"POST /v1/events HTTP/1.1\r\nHost: x\r\n" + AUTH
    + b"Content-Length: 99999999999999999999999\r\n\r\n" + EVENT,
    "plus-length": b"POST /v1/events HTTP/1.1\r\nHost: x\r\n" + AUTH
    + b"Content-Length: +10\r\n\r\n" + EVENT,
    "bad-chunk-size": b"POST /v1/events HTTP/1.1\r\nHost: x\r\n" + AUTH
    + b"Transfer-Encoding: chunked\r\n\r\nzz\r\n" + EVENT + b"\r\n0\r\n\r\n",
    "huge-chunk-size": b"POST /v1/events HTTP/1.1\r\nHost: x\r\n" + AUTH
    + b"Transfer-Encoding: chunked\r\n\r\nffffffffffffffffff\r\n" + EVENT,
    "gzip-te": b"POST /v1/events HTTP/1.1\r\nHost: x\r\n" + AUTH
    + b"Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
    "folded-header": b"POST /v1/events HTTP/1.1\r\nHost: x\r\n" + AUTH
    + b"Content-Length: 3\r\n  0\r\n\r\n" + EVENT,
    "space-before-colon": b"POST /v1/events HTTP/1.1\r\nHost: x\r\n" + AUTH
    + b"Content-Length : 5\r\n\r\n" + EVENT,
    "nul-in-header": b"GET /healthz HTTP/1.1\r\nHost: x\x00y\r\n\r\n",
    "bare-lf": b"GET /healthz HTTP/1.1\nHost: x\n\n",
    "bad-version": b"GET /healthz HTTP/9.9\r\nHost: x\r\n\r\n",
    "no-version": b"GET /healthz\r\n\r\n",
    "absolute-uri": b"GET http://evil.example/healthz HTTP/1.1\r\nHost: x\r\n\r\n",
    "long-uri": b"GET /" + b"a" * 200_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
    "tls-hello": bytes.fromhex("160301002a0100002603030000") + os.urandom(40),
    "binary-garbage": bytes(range(256)) * 4,
    "connect": b"CONNECT evil.example:443 HTTP/1.1\r\nHost: evil.example\r\n\r\n",
    "options-star": b"OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n",
    "delete-metrics": b"DELETE /metrics HTTP/1.1\r\nHost: x\r\n" + AUTH + b"\r\n",
    "get-events": b"GET /v1/events HTTP/1.1\r\nHost: x\r\n" + AUTH + b"\r\n",
    "path-traversal": b"GET /../../../../etc/passwd HTTP/1.1\r\nHost: x\r\n\r\n",
    "huge-header": b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * 300_000 + b"\r\n\r\n",
    "many-headers": b"GET /healthz HTTP/1.1\r\nHost: x\r\n"
    + b"".join(f"X-H{i}: v\r\n".encode() for i in range(5_000)) + b"\r\n",
    "body-over-limit": b"POST /v1/events HTTP/1.1\r\nHost: x\r\n" + AUTH
    + b"Content-Length: 50000000\r\n\r\n" + EVENT,
}  # fmt: skip


@pytest.mark.parametrize("request_bytes", list(BAD_FRAMING.values()), ids=list(BAD_FRAMING))
def test_malformed_requests_get_a_4xx_or_a_close(service: Service, request_bytes: bytes) -> None:
    received = exchange(service, [request_bytes], wait=2.0)
    codes = assert_no_server_error(received, allowed=[501])
    assert len(codes) <= 1, received[:2000]
    assert_healthy(service)


# --- slow and vanishing clients ----------------------------------------------------------------


def test_slow_clients_do_not_starve_the_service(service: Service) -> None:
    openers = [
        b"POST /v1/events HTTP/1.1\r\nHost: x\r\n",  # headers that never end
        b"POST /v1/events HTTP/1.1\r\nHost: x\r\n" + AUTH + b"Content-Length: 1000\r\n\r\n{",
        b"GET /metr",  # a request line that never ends
    ]
    slow: list[socket.socket] = []
    try:
        for i in range(120):
            connection = socket.create_connection(service.address, timeout=5)
            slow.append(connection)
            with contextlib.suppress(OSError):
                connection.sendall(openers[i % len(openers)])
        started = time.monotonic()
        status, _ = _get(service, "/healthz", timeout=10)
        assert status == 200
        assert time.monotonic() - started < 5, "healthz waited behind the slow clients"
        # They trickle on: one more header line each, as the probe's clients did.
        for connection in slow:
            with contextlib.suppress(OSError):
                connection.sendall(b"X-Slow: 1\r\n")
        assert_healthy(service)
    finally:
        for connection in slow:
            connection.close()
    assert_healthy(service)


def _closed_by_server(connection: socket.socket) -> bool:
    """True once the server has hung up (EOF or reset), whatever it said before."""
    try:
        connection.setblocking(False)
        while True:
            chunk = connection.recv(65536)
            if not chunk:
                return True
    except BlockingIOError:
        return False
    except OSError:
        return True


def test_trickling_clients_are_cut_off_at_the_documented_timeouts() -> None:
    """A header line every half second must not keep a connection past --header-timeout, nor a
    body byte every half second past --body-timeout (the probe's clients held theirs 90 s past the
    30 s promised)."""
    timeout = 2.0
    with tempfile.TemporaryDirectory(prefix="rankgate-monitor-slow-") as name:
        service = start(
            Path(name), "--header-timeout", str(timeout), "--body-timeout", str(timeout)
        )
        clients: list[tuple[socket.socket, bytes]] = []
        try:
            for i in range(30):
                connection = socket.create_connection(service.address, timeout=5)
                if i % 2:
                    connection.sendall(b"POST /v1/events HTTP/1.1\r\nHost: x\r\n")
                    clients.append((connection, b"X-Slow: 1\r\n"))
                else:
                    connection.sendall(
                        _post("/v1/events", b"").replace(b"Length: 0", b"Length: 9999")
                    )
                    clients.append((connection, b" "))
            started = time.monotonic()
            still_open = clients
            while still_open and time.monotonic() - started < timeout + 6:
                for connection, drip in still_open:
                    with contextlib.suppress(OSError):
                        connection.sendall(drip)
                time.sleep(0.5)
                still_open = [(c, d) for c, d in still_open if not _closed_by_server(c)]
            assert not still_open, (
                f"{len(still_open)} of {len(clients)} trickling clients still connected "
                f"{time.monotonic() - started:.1f} s after a {timeout} s timeout"
            )
            assert_healthy(service)
        finally:
            for connection, _ in clients:
                connection.close()
            stop(service)


def _reset(connection: socket.socket) -> None:
    """Close with an RST instead of a FIN, as a crashed client does."""
    connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    connection.close()


def test_clients_that_hang_up_mid_request(service: Service) -> None:
    body = b"\n".join([EVENT] * 2000)
    half = _post("/v1/events", body)[: len(body) // 2]
    for ending in ("close", "reset"):
        for request in (
            half,
            _post("/v1/events", EVENT),
            b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
        ):
            connection = socket.create_connection(service.address, timeout=5)
            connection.sendall(request)
            if ending == "reset":
                _reset(connection)
            else:
                connection.close()
    time.sleep(0.5)
    assert_healthy(service)


# --- tokens ------------------------------------------------------------------------------------

BAD_AUTH = [
    b"",
    b"Authorization: Bearer wrong-token-0123456789abcdef\r\n",
    b"Authorization: Bearer " + TOKEN[:-1].encode() + b"\r\n",
    b"Authorization: Bearer " + TOKEN.encode() + b"x\r\n",
    b"Authorization: bearer " + TOKEN.upper().encode() + b"\r\n",
    b"Authorization: Basic " + TOKEN.encode() + b"\r\n",
    b"Authorization: Bearer\r\n",
    b"Authorization: Bearer " + b"\xff" * 20 + b"\r\n",
    b"Authorization: Bearer " + b"t" * 100_000 + b"\r\n",
    b"Authorization: Bearer \x00" + TOKEN.encode() + b"\r\n",
]


@pytest.mark.parametrize("header", BAD_AUTH, ids=range(len(BAD_AUTH)))
@pytest.mark.parametrize("path", ["/v1/events", "/v1/labels"])
def test_a_wrong_or_missing_token_is_never_accepted(
    service: Service, header: bytes, path: str
) -> None:
    request = (
        f"POST {path} HTTP/1.1\r\nHost: x\r\n".encode()
        + header
        + f"Content-Length: {len(EVENT)}\r\nConnection: close\r\n\r\n".encode()
        + EVENT
    )
    codes = assert_no_server_error(exchange(service, [request]))
    assert len(codes) <= 1
    assert all(code in (400, 401, 403, 431) for code in codes), codes


def test_a_token_in_the_query_string_is_not_a_token(service: Service) -> None:
    request = (
        f"POST /v1/events?token={TOKEN} HTTP/1.1\r\nHost: x\r\n".encode()
        + f"Content-Length: {len(EVENT)}\r\nConnection: close\r\n\r\n".encode()
        + EVENT
    )
    codes = assert_no_server_error(exchange(service, [request]))
    assert all(code in (400, 401, 403) for code in codes), codes


# --- hostile bodies ----------------------------------------------------------------------------

fuzz = settings(
    max_examples=EXAMPLES * 8,
    deadline=None,
    phases=PHASES,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.function_scoped_fixture,
        HealthCheck.data_too_large,
    ],
)


@st.composite
def bodies(draw: st.DrawFn) -> bytes:
    shape = draw(st.sampled_from(["lines", "array", "object", "bytes", "deep"]))
    if shape == "lines":
        return b"\n".join(draw(st.lists(json_lines(), min_size=1, max_size=5)))
    if shape == "array":
        return encode(draw(st.lists(records(), max_size=5)), ascii_only=draw(st.booleans()))
    if shape == "object":
        return encode(draw(records()), ascii_only=draw(st.booleans()))
    if shape == "deep":
        return b"[" * 200_000 + b"]" * 200_000
    return draw(st.binary(max_size=200))


@fuzz
@given(bodies(), st.sampled_from(["/v1/events", "/v1/labels"]))
def test_hostile_bodies_are_answered_never_crashed_on(
    service: Service, body: bytes, path: str
) -> None:
    received = exchange(service, [_post(path, body, b"Connection: close\r\n")], wait=10)
    codes = assert_no_server_error(received)
    assert len(codes) == 1, f"no answer to a complete request: {received[:500]!r}"
    assert codes[0] in (202, 400, 413, 415, 422), received[:2000]
    head, _, content = received.partition(b"\r\n\r\n")
    if codes[0] in (202, 400) and b"chunked" not in head.lower():
        payload = json.loads(content)
        assert isinstance(payload, dict), payload


_HEADER_NAMES = st.sampled_from(
    [b"Content-Length", b"content-length", b"Transfer-Encoding", b"Host", b"Authorization",
     b"Content-Type", b"Connection", b"Expect", b"X-\xff", b"", b"Bad Name", b"Content-Length "]
)  # fmt: skip
_HEADER_VALUES = st.one_of(
    st.sampled_from(
        [b"0", b"5", b"-1", b"99999999999999999999", b"chunked", b"gzip", b"chunked, chunked",
         b"close", b"keep-alive", b"100-continue", b"Bearer " + TOKEN.encode(), b"\x00", b"\xff",
         b"application/json", b"x" * 20_000]
    ),
    st.binary(max_size=30).filter(lambda b: b"\r" not in b and b"\n" not in b),
)  # fmt: skip


@st.composite
def raw_requests(draw: st.DrawFn) -> bytes:
    method = draw(st.sampled_from([b"GET", b"POST", b"PUT", b"HEAD", b"get", b"", b"P\x00ST"]))
    path = draw(
        st.sampled_from([b"/v1/events", b"/v1/labels", b"/metrics", b"/healthz", b"/", b"*",
                         b"/v1/events?x=\xff", b"//", b"/%00", b"/" + b"a" * 9000])
    )  # fmt: skip
    version = draw(st.sampled_from([b"HTTP/1.1", b"HTTP/1.1", b"HTTP/1.0", b"HTTP/2.0", b""]))
    headers = draw(st.lists(st.tuples(_HEADER_NAMES, _HEADER_VALUES), max_size=6))
    newline = draw(st.sampled_from([b"\r\n", b"\r\n", b"\n"]))
    body = draw(st.one_of(bodies(), st.just(b"")))
    head = method + b" " + path + b" " + version + newline
    head += b"".join(name + b": " + value + newline for name, value in headers)
    return head + newline + body


@fuzz
@given(raw_requests())
def test_generated_raw_requests_never_get_a_server_error(service: Service, raw: bytes) -> None:
    received = exchange(service, [raw], wait=1.0)
    assert_no_server_error(received, allowed=[501])


def test_service_is_healthy_after_hostile_bodies(service: Service) -> None:
    time.sleep(1.0)  # a tick or three, so whatever was accepted reaches the exported windows
    assert_healthy(service)


# --- unencodable and enormous values, and a restart on the state they left ------------------


def _scored_event(segment_value: bytes, query_id: str) -> bytes:
    return (
        b'{"query_id":"' + query_id.encode() + b'","retrieved_ids":["d1","d2"],'
        b'"relevant_ids":["d1"],"query_type":' + segment_value + b"}"
    )


HOSTILE_SEGMENTS = [
    b'"x\\ud800y"',  # a lone surrogate, escaped
    b'"\\udfff"',
    b'"x\xed\xa0\x80y"',  # the same surrogate as raw (invalid) UTF-8
    b'"\\u0000nul"',
    b'"\\u202eevil"',
    b'"line\\u2028sep"',
    b'"quote\\"brace}\\\\n"',
    b'"' + b"m" * 2_000_000 + b'"',  # 2 MB in one value
]


def _post_ok(service: Service, body: bytes) -> int:
    codes = assert_no_server_error(
        exchange(service, [_post("/v1/events", body, b"Connection: close\r\n")], wait=15)
    )
    assert len(codes) == 1
    return codes[0]


def test_hostile_segment_values_survive_export_and_restart() -> None:
    with tempfile.TemporaryDirectory(prefix="rankgate-monitor-restart-") as name:
        folder = Path(name)
        first = start(folder)
        try:
            for i, value in enumerate(HOSTILE_SEGMENTS):
                assert _post_ok(first, _scored_event(value, f"s{i}")) in (202, 400, 413)
            time.sleep(1.5)  # buckets close every 0.3 s
            assert_healthy(first)
            _, metrics = _get(first, "/metrics")
            _, page = _get(first, "/")
            # One 2 MB event once made every scrape 106 MB: stored and echoed text is bounded.
            assert len(metrics) < 4_000_000, len(metrics)
            assert len(page) < 4_000_000, len(page)
            assert b"\x00" not in page
        finally:
            code = stop(first)
        assert code == 0, first.log.read_text()[-3000:]
        state = folder / "state.db"
        assert state.stat().st_size < 4_000_000, state.stat().st_size
        # What was saved must not break the next start either.
        second = start(folder)
        try:
            assert_healthy(second)
        finally:
            stop(second)
        log = second.log.read_text(encoding="utf-8", errors="replace")
        assert "Traceback" not in log, log[-4000:]
