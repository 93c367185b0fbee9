"""Grading (query, document) pairs through an OpenAI-compatible chat-completions endpoint.

This is the engine under ``rankgate labels judge``: given the pairs a pool calls for, it asks an
LLM judge for a 0-3 grade of each (the prompt and the strict reading of the reply are
``rankgate.judge_prompt``'s), and returns one ``JudgeResult`` per pair. The endpoint is anything
that speaks ``POST {endpoint}/chat/completions``: OpenAI, Azure-style gateways, vLLM, llama.cpp,
Ollama, a company proxy.

What a judge run must survive, and how:

* **Reruns.** Every pair is looked up in the ``JudgeCache`` first; only misses are sent, and a
  rerun over the same pool sends nothing. Identical (query text, document text) pairs in one run
  are sent once and share the grade.
* **A flaky or busy endpoint.** Connection errors, timeouts, 408, 429 and 5xx are retried up to
  ``max_retries`` times with exponential backoff (``backoff_seconds * 2**n``, capped at
  ``MAX_BACKOFF_SECONDS``, with jitter so parallel workers do not retry in lock-step); a
  ``Retry-After`` header on the response is honoured instead, up to ``MAX_RETRY_AFTER_SECONDS``.
  Other 4xx responses are not retried: the same request would fail the same way.
  ``requests_per_second`` spaces requests evenly across all worker threads.
* **A judge that does not answer the question.** A reply without a readable grade is re-asked
  once, then the pair fails with "malformed reply". A failed pair has grade None: it is left for
  a person, never filled with a guess.
* **A refused key.** 401 or 403 stops the whole run with a ``UsageError``: every other request
  would be refused too, and each would cost a round trip.

**The API key stays secret.** It is read from the environment variable ``api_key_env`` names, at
call time, sent only as an ``Authorization: Bearer`` header, and never stored: not in the
settings, the results, any message, or the cache. Endpoints are shown with user-info and query
string masked (``masked_endpoint``), since people do put tokens in URLs. User-info in the endpoint
(``https://user:password@host/v1``) is sent as HTTP basic auth when no API key is set, as curl
would; it is kept out of the request URL so that no HTTP log line can show it. A query string
(``?api-version=...``) is sent as given, since gateways need it: it is masked in messages and
stripped from cache keys, but an HTTP debug log of the request line would show it.

httpx is an optional extra (``pip install 'rankgate[judge]'``), imported only when a request is
about to be sent: a fully cached run needs no HTTP client at all.
"""

from __future__ import annotations

import math
import os
import random
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

from rankgate.errors import ConfigError, UsageError
from rankgate.judge_cache import CacheKey, JudgeCache, cache_key
from rankgate.judge_http import (
    CHAT_PATH,
    MAX_RETRY_AFTER_SECONDS,
    Overdue,
    Pacer,
    Target,
    TooLarge,
    header_safe,
    import_httpx,
    post,
    read_completion,
    retry_after_seconds,
)
from rankgate.judge_prompt import PROMPT_VERSION, JudgeReplyError, judge_messages, parse_grade

if TYPE_CHECKING:
    import httpx

__all__ = [
    "CANCELLED",
    "CONNECTION_ERROR",
    "MALFORMED_REPLY",
    "MALFORMED_RESPONSE",
    "MAX_BACKOFF_SECONDS",
    "MAX_RETRY_AFTER_SECONDS",
    "REQUEST_ERROR",
    "TIMEOUT",
    "JudgeItem",
    "JudgeResult",
    "JudgeRun",
    "JudgeSettings",
    "judge_pairs",
    "masked_endpoint",
]

#: The longest backoff between two retries of one pair, whatever ``backoff_seconds`` and the
#: number of retries make of it.
MAX_BACKOFF_SECONDS = (
    30.0  #: Bounds of the settings that would otherwise overflow a timer or stall a run for good.
)
MAX_TIMEOUT_SECONDS = 3600.0
MIN_REQUESTS_PER_SECOND = 0.01

# Failure reasons, as they appear in ``JudgeResult.error`` and ``JudgeRun.failures`` (an HTTP
# failure reads "HTTP 500", or "HTTP 500 after 5 retries" once retries ran out; likewise the rest).
MALFORMED_REPLY = "malformed reply"
MALFORMED_RESPONSE = "malformed response"
TIMEOUT = "timeout"
CONNECTION_ERROR = "connection error"
REQUEST_ERROR = "request error"
CANCELLED = "cancelled"

_RETRYABLE_4XX = frozenset({408, 429})
_REFUSED = frozenset({401, 403})


@dataclass(frozen=True, repr=False)
class JudgeSettings:
    """Where and how to ask the judge. Validated on construction (``ConfigError``).

    ``endpoint`` is the base URL (``http://localhost:8000/v1``); requests go to
    ``{endpoint}/chat/completions``. The API key is read from the environment variable
    ``api_key_env`` when ``judge_pairs`` runs; when that variable is unset or empty no
    ``Authorization`` header is sent. ``timeout_seconds`` bounds each phase of a request (connect,
    send, wait for the reply). ``requests_per_second`` (None: unlimited) counts every request
    sent, retries included.
    """

    endpoint: str
    model: str
    api_key_env: str = "OPENAI_API_KEY"
    concurrency: int = 4
    requests_per_second: float | None = None
    max_retries: int = 5
    backoff_seconds: float = 1.0
    timeout_seconds: float = 60.0
    temperature: float = 0.0
    max_tokens: int = 50

    def __post_init__(self) -> None:
        _check_endpoint(self.endpoint)
        if not isinstance(self.model, str) or not self.model.strip():
            raise ConfigError(f"judge model: expected a model name, got {self.model!r}")
        if not isinstance(self.api_key_env, str) or not self.api_key_env.strip():
            raise ConfigError(
                f"judge api_key_env: expected an environment variable name, got {self.api_key_env!r}"
            )
        _check_number("concurrency", self.concurrency, integer=True, minimum=1)
        if self.requests_per_second is not None:
            _check_number("requests_per_second", self.requests_per_second, positive=True)
            if self.requests_per_second < MIN_REQUESTS_PER_SECOND:
                raise ConfigError(
                    f"judge requests_per_second: at least {MIN_REQUESTS_PER_SECOND:g}, got "
                    f"{self.requests_per_second!r}"
                )
        if isinstance(self.timeout_seconds, (int, float)) and self.timeout_seconds > (
            MAX_TIMEOUT_SECONDS
        ):
            raise ConfigError(
                f"judge timeout_seconds: at most {MAX_TIMEOUT_SECONDS:g}, got "
                f"{self.timeout_seconds!r}"
            )
        if any(ord(character) < 32 or ord(character) == 127 for character in self.model):
            raise ConfigError(f"judge model: a name holds no control character, got {self.model!r}")
        _check_number("max_retries", self.max_retries, integer=True, minimum=0)
        _check_number("backoff_seconds", self.backoff_seconds, minimum=0)
        _check_number("timeout_seconds", self.timeout_seconds, positive=True)
        _check_number("temperature", self.temperature, minimum=0)
        _check_number("max_tokens", self.max_tokens, integer=True, minimum=1)

    def __repr__(self) -> str:
        # The endpoint may carry a password or token: the repr shows it masked, like every message.
        return (
            f"JudgeSettings(endpoint={masked_endpoint(self.endpoint)!r}, model={self.model!r}, "
            f"api_key_env={self.api_key_env!r}, concurrency={self.concurrency}, "
            f"requests_per_second={self.requests_per_second!r}, max_retries={self.max_retries}, "
            f"backoff_seconds={self.backoff_seconds!r}, timeout_seconds={self.timeout_seconds!r}, "
            f"temperature={self.temperature!r}, max_tokens={self.max_tokens})"
        )


@dataclass(frozen=True, slots=True)
class JudgeItem:
    """One pair to grade: the IDs it is labeled under, and the texts the judge reads."""

    query_id: str
    document_id: str
    query: str
    document_text: str


@dataclass(frozen=True, slots=True)
class JudgeResult:
    """The outcome for one ``JudgeItem``: a grade 0-3, or None with a short ``error`` reason
    ("malformed reply", "HTTP 500 after 5 retries", "timeout", ...). ``cached`` is True when the
    grade came from the cache and no request was sent for it."""

    item: JudgeItem
    grade: int | None
    cached: bool
    error: str | None


@dataclass
class JudgeRun:
    """Everything ``judge_pairs`` did: one result per item in input order, and the accounting.

    ``judged + cached + failed == len(results)``. ``requests`` counts HTTP requests actually sent,
    retries included; the token counts add up the responses' ``usage`` (0 where a server reports
    none); ``failures`` counts failed pairs by reason.
    """

    results: list[JudgeResult] = field(default_factory=list)
    judged: int = 0
    cached: int = 0
    failed: int = 0
    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    failures: dict[str, int] = field(default_factory=dict)


def masked_endpoint(endpoint: str) -> str:
    """``endpoint`` fit to print: user-info and query string replaced by ``***``.

    >>> masked_endpoint("https://alice:s3cret@api.example.com/v1?key=abc")
    'https://***@api.example.com/v1?***'
    """
    try:
        parts = urlsplit(endpoint.strip())
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return "(invalid URL)"
    if ":" in host:
        host = f"[{host}]"
    netloc = host if port is None else f"{host}:{port}"
    if parts.username is not None or parts.password is not None:
        netloc = f"***@{netloc}"
    return urlunsplit((parts.scheme, netloc, parts.path, "***" if parts.query else "", ""))


def judge_pairs(
    items: Sequence[JudgeItem],
    settings: JudgeSettings,
    cache: JudgeCache | None,
    *,
    progress: Callable[[int], None] | None = None,
) -> JudgeRun:
    """Grade every item, from ``cache`` where it can and through the endpoint otherwise.

    Successes are written to ``cache``. ``progress(1)`` is called once per finished item, cached
    ones included, from the calling thread. Raises ``UsageError`` when the endpoint refuses the
    key (401/403), and ``MissingExtraError`` when a request is needed and httpx is not installed.
    """
    run = JudgeRun()
    results: list[JudgeResult | None] = [None] * len(items)
    # Items still to judge, grouped by key: identical pairs share one request.
    pending: dict[CacheKey, list[int]] = {}
    for index, item in enumerate(items):
        key = cache_key(
            settings.endpoint, settings.model, PROMPT_VERSION, item.query, item.document_text
        )
        grade = cache.get(key) if cache is not None else None
        if grade is None:
            pending.setdefault(key, []).append(index)
            continue
        results[index] = JudgeResult(item, grade, cached=True, error=None)
        run.cached += 1
        if progress is not None:
            progress(1)

    if pending:
        for key, outcome in _outcomes(items, pending, settings):
            run.requests += outcome.requests
            run.prompt_tokens += outcome.prompt_tokens
            run.completion_tokens += outcome.completion_tokens
            if outcome.grade is not None and cache is not None:
                cache.put(key, outcome.grade, outcome.prompt_tokens, outcome.completion_tokens)
            for index in pending[key]:
                results[index] = JudgeResult(items[index], outcome.grade, False, outcome.error)
                if outcome.grade is None:
                    run.failed += 1
                    reason = outcome.error or "unknown"
                    run.failures[reason] = run.failures.get(reason, 0) + 1
                else:
                    run.judged += 1
                if progress is not None:
                    progress(1)

    run.results = [result for result in results if result is not None]
    return run


@dataclass(frozen=True, slots=True)
class _Outcome:
    """What asking for one pair came to, with what it cost."""

    grade: int | None
    error: str | None
    requests: int
    prompt_tokens: int
    completion_tokens: int


class _Refused(Exception):
    """The endpoint answered 401/403: the key (or its absence) is refused."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


def _outcomes(
    items: Sequence[JudgeItem], pending: dict[CacheKey, list[int]], settings: JudgeSettings
) -> Iterator[tuple[CacheKey, _Outcome]]:
    """Ask the endpoint for every pending key, ``concurrency`` at a time; outcomes as they finish.

    A generator, so the caller writes the cache and reports progress from its own thread while
    the workers go on; closing it early stops the workers.
    """
    httpx = import_httpx()
    api_key = os.environ.get(settings.api_key_env) or None
    if api_key is not None and not header_safe(api_key):
        # Never shown: only said to be unusable as a header value.
        raise UsageError(
            f"the API key in ${settings.api_key_env} is not a valid HTTP header value (it holds "
            "a line break, a control character or a non-ASCII character): check how it was set"
        )
    target = Target.of(settings.endpoint)
    headers = {"Accept": "application/json", "User-Agent": "rankgate-judge"}
    if api_key is not None:
        headers["Authorization"] = f"Bearer {api_key}"
    auth = target.basic_auth if api_key is None else None
    workers = min(settings.concurrency, len(pending))
    stop = threading.Event()
    session = _Session(settings, target.url, headers, Pacer(settings.requests_per_second), stop)
    limits = httpx.Limits(max_connections=workers, max_keepalive_connections=workers)
    with (
        httpx.Client(
            timeout=httpx.Timeout(settings.timeout_seconds),
            limits=limits,
            follow_redirects=False,  # a redirect would carry the Authorization header elsewhere
            auth=auth,
        ) as client,
        ThreadPoolExecutor(max_workers=workers, thread_name_prefix="rankgate-judge") as pool,
    ):
        futures: dict[Future[_Outcome], CacheKey] = {
            pool.submit(session.judge, client, httpx, items[indexes[0]]): key
            for key, indexes in pending.items()
        }
        try:
            for future in as_completed(futures):
                yield futures[future], future.result()
        except _Refused as refused:
            # Every other request would be refused too: stop the workers (their sleeps wake on
            # the event), drop what has not started, and report once.
            stop.set()
            pool.shutdown(wait=True, cancel_futures=True)
            raise UsageError(
                _refusal_message(settings, refused.status, api_key is not None)
            ) from None
        except BaseException:
            stop.set()
            pool.shutdown(wait=True, cancel_futures=True)
            raise


class _Session:
    """The per-run state every worker shares: where to send, what to send, and the pace."""

    def __init__(
        self,
        settings: JudgeSettings,
        url: str,
        headers: dict[str, str],
        pacer: Pacer,
        stop: threading.Event,
    ) -> None:
        self.settings = settings
        self.url = url
        self.headers = headers
        self.pacer = pacer
        self.stop = stop
        # Jitter only spreads retries in time; it never touches a grade, so it needs no seed.
        self.jitter = random.Random()

    def judge(self, client: httpx.Client, httpx: ModuleType, item: JudgeItem) -> _Outcome:
        """Ask for one pair's grade, retrying what is worth retrying."""
        settings = self.settings
        body = {
            "model": settings.model,
            "messages": judge_messages(item.query, item.document_text),
            "temperature": settings.temperature,
            "max_tokens": settings.max_tokens,
        }
        requests = prompt_tokens = completion_tokens = retries = 0
        reasked = False

        def outcome(grade: int | None, error: str | None) -> _Outcome:
            return _Outcome(grade, error, requests, prompt_tokens, completion_tokens)

        while True:
            if self.stop.is_set() or not self.pacer.wait(self.stop):
                return outcome(None, CANCELLED)
            requests += 1
            retry_after: float | None = None
            try:
                status, headers, content = post(
                    client, self.url, body, self.headers, settings.timeout_seconds
                )
            except (httpx.TimeoutException, Overdue):
                failure = TIMEOUT
            except TooLarge:
                # A reply this size is no grade: the endpoint is broken or hostile.
                return outcome(None, MALFORMED_RESPONSE)
            except httpx.TransportError:
                failure = CONNECTION_ERROR
            except httpx.RequestError:
                # Anything else httpx raises for one request (an undecodable body, say) fails
                # this attempt only, never the run.
                failure = REQUEST_ERROR
            else:
                if status in _REFUSED:
                    raise _Refused(status)
                if 200 <= status < 300:
                    reply, used_prompt, used_completion = read_completion(content)
                    prompt_tokens += used_prompt
                    completion_tokens += used_completion
                    try:
                        if reply is None:
                            raise JudgeReplyError("no message content in the response")
                        return outcome(parse_grade(reply), None)
                    except JudgeReplyError:
                        # One more try: sampling, or a transient truncation, may give a readable
                        # reply. A judge that fails twice is not asked a third time.
                        if not reasked:
                            reasked = True
                            continue
                        return outcome(
                            None, MALFORMED_REPLY if reply is not None else MALFORMED_RESPONSE
                        )
                if status not in _RETRYABLE_4XX and status < 500:
                    return outcome(None, f"HTTP {status}")
                failure = f"HTTP {status}"
                retry_after = retry_after_seconds(headers.get("Retry-After"))
            if retries >= settings.max_retries:
                return outcome(
                    None, failure if retries == 0 else f"{failure} after {retries} retries"
                )
            delay = retry_after if retry_after is not None else self._backoff(retries)
            retries += 1
            if self.stop.wait(delay):
                return outcome(None, CANCELLED)

    def _backoff(self, retries: int) -> float:
        """Exponential backoff with "equal jitter": between half and all of the capped delay."""
        # The exponent is bounded so a large max_retries cannot overflow the float.
        delay = min(MAX_BACKOFF_SECONDS, self.settings.backoff_seconds * 2.0 ** min(retries, 32))
        return delay * (0.5 + 0.5 * self.jitter.random())


def _refusal_message(settings: JudgeSettings, status: int, key_sent: bool) -> str:
    shown = masked_endpoint(settings.endpoint)
    if key_sent:
        return (
            f"the judge endpoint {shown} refused the API key in ${settings.api_key_env} "
            f"(HTTP {status})"
        )
    return (
        f"the judge endpoint {shown} refused the request (HTTP {status}): no API key was sent; "
        f"set ${settings.api_key_env}"
    )


def _check_endpoint(endpoint: object) -> None:
    if not isinstance(endpoint, str):
        raise ConfigError(f"judge endpoint: expected an http(s) URL, got {type(endpoint).__name__}")
    shown = masked_endpoint(endpoint)
    try:
        parts = urlsplit(endpoint.strip())
        host = parts.hostname
        parts.port  # noqa: B018 - parsing the port is the check: a bad one raises ValueError
    except ValueError:
        raise ConfigError(f"judge endpoint {shown}: not a valid URL") from None
    if parts.scheme.lower() not in ("http", "https") or not host:
        raise ConfigError(
            f"judge endpoint {shown}: expected an http:// or https:// URL such as "
            "http://localhost:8000/v1"
        )
    if parts.path.rstrip("/").endswith(CHAT_PATH):
        raise ConfigError(
            f"judge endpoint {shown}: give the base URL (ending in /v1 or similar); "
            f"{CHAT_PATH} is appended"
        )


def _check_number(
    name: str,
    value: object,
    *,
    integer: bool = False,
    minimum: float | None = None,
    positive: bool = False,
) -> None:
    ok = False
    if isinstance(value, int | float) and not isinstance(value, bool):
        ok = math.isfinite(value) and (isinstance(value, int) or not integer)
        if minimum is not None:
            ok = ok and value >= minimum
        if positive:
            ok = ok and value > 0
    if not ok:
        expected = "an integer" if integer else "a number"
        if positive:
            expected += " above 0"
        elif minimum is not None:
            expected += f" of at least {minimum:g}"
        raise ConfigError(f"judge {name}: expected {expected}, got {value!r}")
