"""A local stand-in for an OpenAI-compatible chat-completions endpoint, for the judge's tests.

The judge client is tested over real HTTP (real sockets, real status codes and headers) without
any network beyond 127.0.0.1 and without a model: this server grades each pair from hidden true
labels, optionally shifted (``bias``) and blurred (``noise``, seeded per pair so the grade of a
pair does not depend on the order concurrent requests arrive in), and can misbehave on demand:
fail every Nth call, answer garbage for chosen pairs, demand a key, or play a script of responses
(a 429 with ``Retry-After``, say). It records every request for the tests to inspect.

It reads the query and passage back out of the prompt's ``<query>``/``<passage>`` blocks, so it
depends on that layout of ``rankgate.judge_prompt``, and nothing else of it.
"""

from __future__ import annotations

import json
import random
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Pair = tuple[str, str]
Truth = Mapping[Pair, int] | Callable[[str, str], int]

#: The variable the tests keep their key in; never OPENAI_API_KEY, which a developer may have set.
KEY_ENV = "RANKGATE_TEST_JUDGE_KEY"

_QUERY = re.compile(r"<query>\n(.*?)\n</query>", re.DOTALL)
_PASSAGE = re.compile(r"<passage>\n(.*?)\n</passage>", re.DOTALL)


@dataclass(frozen=True)
class RecordedRequest:
    """One request the server received."""

    path: str
    headers: dict[str, str]
    body: Any
    received_at: float


@dataclass(frozen=True)
class Scripted:
    """A canned response, played for one call before any grading happens."""

    status: int
    headers: Mapping[str, str] = field(default_factory=dict)
    body: Any = None


class FakeOpenAI:
    """The fake endpoint; ``start()`` serves it on 127.0.0.1 (a free port) in a background thread.

    ``truth`` maps (query text, document text) to a grade 0-3, or is a callable of the two; a pair
    it does not know is graded 0. The grade sent back is ``truth + bias + N(0, noise)``, rounded and
    clipped to 0..3. ``fail_every=n`` answers 500 to every nth call; pairs in ``malformed`` get a
    reply without a grade; ``require_key`` answers 401 to any request without
    ``Authorization: Bearer <key>``; ``script`` is played, one entry per call, before all that;
    ``delay_seconds`` holds every answer back that long (to make concurrency visible).
    """

    def __init__(
        self,
        truth: Truth,
        *,
        bias: float = 0.0,
        noise: float = 0.0,
        seed: int = 0,
        fail_every: int | None = None,
        malformed: Iterable[Pair] = (),
        require_key: str | None = None,
        script: Iterable[Scripted] = (),
        delay_seconds: float = 0.0,
    ) -> None:
        self.truth = truth
        self.bias = bias
        self.noise = noise
        self.seed = seed
        self.fail_every = fail_every
        self.malformed = set(malformed)
        self.require_key = require_key
        self.script = list(script)
        self.delay_seconds = delay_seconds
        self.requests: list[RecordedRequest] = []
        self.max_in_flight = 0
        self._in_flight = 0
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        """The endpoint to give the client (``http://127.0.0.1:PORT/v1``)."""
        if self._server is None:
            raise RuntimeError("the fake endpoint is not started")
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    @property
    def count(self) -> int:
        """Requests received so far."""
        with self._lock:
            return len(self.requests)

    def grade_of(self, query: str, document: str) -> int:
        """The grade this server gives the pair (deterministic for a given seed)."""
        true = (
            self.truth(query, document)
            if callable(self.truth)
            else self.truth.get((query, document), 0)
        )
        # Seeded by the pair itself, so concurrent arrival order cannot change a pair's grade.
        draw = random.Random(f"{self.seed}\x00{query}\x00{document}").gauss(0.0, 1.0)
        return min(3, max(0, round(true + self.bias + self.noise * draw)))

    def start(self) -> FakeOpenAI:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                fake._serve(self)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # keep test output clean

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        # A short poll interval: shutdown() waits for the next poll, and tests stop many servers.
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.02},
            name="fake-openai",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def _serve(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length)
        try:
            body: Any = json.loads(raw)
        except ValueError:
            body = None
        with self._lock:
            self.requests.append(
                RecordedRequest(handler.path, dict(handler.headers.items()), body, time.monotonic())
            )
            call = len(self.requests)
            scripted = self.script.pop(0) if self.script else None
            self._in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self._in_flight)
        try:
            if self.delay_seconds:
                time.sleep(self.delay_seconds)
            status, headers, answer = self._answer(handler, call, scripted, body)
        finally:
            with self._lock:
                self._in_flight -= 1
        payload = json.dumps(answer).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(payload)))
        for name, value in headers.items():
            handler.send_header(name, value)
        handler.end_headers()
        handler.wfile.write(payload)

    def _answer(
        self, handler: BaseHTTPRequestHandler, call: int, scripted: Scripted | None, body: Any
    ) -> tuple[int, Mapping[str, str], Any]:
        if scripted is not None:
            return scripted.status, scripted.headers, scripted.body or _error("scripted")
        if handler.path.partition("?")[0] != "/v1/chat/completions":
            return 404, {}, _error("no such route")
        if self.require_key is not None and handler.headers.get("Authorization") != (
            f"Bearer {self.require_key}"
        ):
            return 401, {}, _error("Incorrect API key provided")
        if self.fail_every and call % self.fail_every == 0:
            return 500, {}, _error("the fake fails this call on purpose")
        try:
            prompt = body["messages"][-1]["content"]
            query = _QUERY.search(prompt).group(1)  # type: ignore[union-attr]
            passage = _PASSAGE.search(prompt).group(1)  # type: ignore[union-attr]
        except (TypeError, KeyError, IndexError, AttributeError):
            return 400, {}, _error("not a judge prompt")
        if (query, passage) in self.malformed:
            content = "This passage seems fairly relevant, I would say quite good."
        else:
            content = f"##final score: {self.grade_of(query, passage)}"
        prompt_tokens = len(prompt.split())
        return (
            200,
            {},
            {
                "id": f"chatcmpl-fake-{call}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body.get("model", "fake"),
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": content},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": 5,
                    "total_tokens": prompt_tokens + 5,
                },
            },
        )


def _error(message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": "fake_error", "code": None}}


#: The ``fake_openai`` fixture: ``fake_openai(truth, **options)`` starts a ``FakeOpenAI``.
StartFake = Callable[..., FakeOpenAI]
