"""The wire under ``rankgate.judge_client``: one chat-completions request read as a stream with
bounds on size and time, the pace requests keep, and the reading of a response.

An endpoint is untrusted: it may answer with a body that never ends, inflates (gzip), or arrives a
byte now and then, and it may claim any token count or ``Retry-After``. Everything here keeps such
an answer to one failed pair, never a stalled or exhausted run.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from types import ModuleType
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit, urlunsplit

from rankgate.errors import MissingExtraError

if TYPE_CHECKING:
    import httpx

__all__ = [
    "CHAT_PATH",
    "MAX_RESPONSE_BYTES",
    "MAX_RETRY_AFTER_SECONDS",
    "MAX_TOKEN_COUNT",
    "Overdue",
    "Pacer",
    "Target",
    "TooLarge",
    "header_safe",
    "import_httpx",
    "post",
    "read_completion",
    "retry_after_seconds",
]

#: The longest ``Retry-After`` honoured: a misconfigured server asking for an hour's pause
#: should not hang a CI job for an hour.
MAX_RETRY_AFTER_SECONDS = 120.0
#: The largest response body read: a chat completion holding a grade is a few hundred bytes.
MAX_RESPONSE_BYTES = 1 << 20
#: The most tokens one response may claim to have used; more is not believed (counted as 0).
MAX_TOKEN_COUNT = 10_000_000
#: Appended to the endpoint: the base URL a user gives ends where the OpenAI API paths begin.
CHAT_PATH = "/chat/completions"


class Pacer:
    """Spaces requests at least ``1 / requests_per_second`` apart, across all threads.

    Each request reserves the next free slot under a lock and sleeps outside it until its slot;
    no bursts, so a provider's per-second limit is met even at the first second.
    """

    def __init__(self, requests_per_second: float | None) -> None:
        self.interval = 1.0 / requests_per_second if requests_per_second else 0.0
        self.next_slot = 0.0
        self.lock = threading.Lock()

    def wait(self, stop: threading.Event) -> bool:
        """Sleep until this request's slot; False when ``stop`` was set meanwhile."""
        if not self.interval:
            return True
        with self.lock:
            now = time.monotonic()
            slot = max(now, self.next_slot)
            self.next_slot = slot + self.interval
        delay = slot - now
        return not (delay > 0 and stop.wait(delay))


@dataclass(frozen=True, slots=True)
class Target:
    """The request URL (no user-info) and the basic-auth pair taken out of it, if any."""

    url: str
    basic_auth: tuple[str, str] | None

    @classmethod
    def of(cls, endpoint: str) -> Target:
        parts = urlsplit(endpoint.strip())
        host = parts.hostname or ""
        if ":" in host:
            host = f"[{host}]"
        netloc = host if parts.port is None else f"{host}:{parts.port}"
        path = parts.path.rstrip("/") + CHAT_PATH
        url = urlunsplit((parts.scheme.lower(), netloc, path, parts.query, ""))
        auth = None
        if parts.username is not None or parts.password is not None:
            auth = (unquote(parts.username or ""), unquote(parts.password or ""))
        return cls(url, auth)


class TooLarge(Exception):
    """A response body past ``MAX_RESPONSE_BYTES``."""


class Overdue(Exception):
    """A response still arriving past the request's deadline (a server dripping bytes)."""


def post(
    client: httpx.Client, url: str, body: dict[str, object], headers: dict[str, str], timeout: float
) -> tuple[int, Mapping[str, str], bytes]:
    """One request: its status, headers and body, read as a stream so that neither a body without
    end (nor one that inflates, gzip) nor a server sending a byte now and then can hold the run:
    httpx's timeouts bound each read, this bounds the size and the whole request
    (``timeout * 2``: connecting and sending, then receiving)."""
    deadline = time.monotonic() + 2 * timeout
    with client.stream("POST", url, json=body, headers=headers) as response:
        received = bytearray()
        for chunk in response.iter_bytes():  # decoded: the cap counts inflated bytes
            received += chunk
            if len(received) > MAX_RESPONSE_BYTES:
                raise TooLarge
            if time.monotonic() > deadline:
                raise Overdue
        # httpx's Headers, which look names up regardless of case (a dict of them would not).
        return response.status_code, response.headers, bytes(received)


def read_completion(raw: bytes) -> tuple[str | None, int, int]:
    """The first choice's message content (None when the body is not a chat completion) and the
    usage's prompt and completion tokens (0 where absent)."""
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        return None, 0, 0
    if not isinstance(body, dict):
        return None, 0, 0
    usage = body.get("usage")
    prompt_tokens = completion_tokens = 0
    if isinstance(usage, dict):
        prompt_tokens = _token_count(usage.get("prompt_tokens"))
        completion_tokens = _token_count(usage.get("completion_tokens"))
    content: str | None = None
    choices = body.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        message = choices[0].get("message")
        if isinstance(message, dict) and isinstance(message.get("content"), str):
            content = message["content"]
    return content, prompt_tokens, completion_tokens


def _token_count(value: object) -> int:
    """A usage count as reported, or 0 when it is not a plausible one (a hostile endpoint may
    claim any number; the cache stores 64-bit integers)."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 < value <= MAX_TOKEN_COUNT:
        return value
    return 0


def retry_after_seconds(header: str | None) -> float | None:
    """Seconds a ``Retry-After`` header asks for (delta-seconds or an HTTP date), capped at
    ``MAX_RETRY_AFTER_SECONDS``; None when absent or unreadable."""
    if header is None:
        return None
    text = header.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = parsedate_to_datetime(text)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - datetime.now(UTC)).total_seconds()
    if not math.isfinite(seconds):
        return None
    return min(max(seconds, 0.0), MAX_RETRY_AFTER_SECONDS)


def header_safe(value: str) -> bool:
    return value.isascii() and all(32 <= ord(character) < 127 for character in value)


def import_httpx() -> ModuleType:
    # Not evaluate.require_extra: that names the extra after the package (httpx), and
    # this extra is named after the feature.
    try:
        import httpx
    except ImportError:
        raise MissingExtraError(
            "rankgate labels judge needs httpx: pip install 'rankgate[judge]'"
        ) from None
    return httpx
