"""Fixtures of the judge tests: fake chat-completions endpoints on 127.0.0.1, stopped after each
test, and an environment with no proxy and no real API key in the way."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fake_openai import KEY_ENV, FakeOpenAI, StartFake


@pytest.fixture(autouse=True)
def _local_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """httpx honours proxy variables; a proxy set on the machine must not see 127.0.0.1 traffic."""
    for name in (
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv(KEY_ENV, raising=False)


@pytest.fixture
def fake_openai() -> Iterator[StartFake]:
    """``fake_openai(truth, **options)``: a started ``FakeOpenAI``; all are stopped afterwards."""
    started: list[FakeOpenAI] = []

    def start(truth: Any, **options: Any) -> FakeOpenAI:
        fake = FakeOpenAI(truth, **options).start()
        started.append(fake)
        return fake

    yield start
    for fake in started:
        fake.stop()
