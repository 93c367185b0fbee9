"""Fixtures and checks shared by the LangChain and LlamaIndex recorder tests.

Not a conftest.py, so the other tests in this folder do not get them: a test module takes the
fixtures it wants by naming them (``store = recorder_helpers.store``), which pytest collects like
fixtures defined in the module itself.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import logging
import math
import socket
import sqlite3
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from rankgate import RankgateError, cli
from rankgate.errors import MissingExtraError
from rankgate.store import TraceRecorder

# The words of the four-document corpus both tests retrieve from with a keyword retriever.
CORPUS_TEXTS = {
    "d1": "cats purr softly",
    "d2": "dogs bark at cats",
    "d3": "fish swim in water",
    "d4": "dogs and cats play",
}


def keyword_ranking(query: str, texts: Sequence[str], k: int) -> list[tuple[int, int]]:
    """``(shared words, position)`` of the ``k`` texts sharing most words with ``query``, most
    first (ties in order); texts sharing no word are left out."""
    words = set(query.lower().split())
    overlaps = [(len(words & set(text.split())), position) for position, text in enumerate(texts)]
    return sorted((o for o in overlaps if o[0] > 0), key=lambda o: (-o[0], o[1]))[:k]


@pytest.fixture
def store(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'traces.db'}"


@pytest.fixture
def recorder(store: str) -> Iterator[TraceRecorder]:
    with TraceRecorder(store, flush_interval=0.01) as recorder:
        yield recorder


def refuse_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sockets cannot connect for the rest of the test."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise OSError("network access in a test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def stored(store: str) -> list[dict[str, Any]]:
    """The store's traces in the order recorded, as plain rows."""
    path = store.removeprefix("sqlite:///")
    with sqlite3.connect(path) as connection:
        rows = connection.execute(
            "SELECT trace_id, query_id, variant, retrieved_ids, attributes FROM rankgate_traces "
            "ORDER BY rowid"
        ).fetchall()
    return [
        {
            "trace_id": trace_id,
            "query_id": query_id,
            "variant": variant,
            "retrieved_ids": json.loads(ids),
            "attributes": json.loads(attributes),
        }
        for trace_id, query_id, variant, ids, attributes in rows
    ]


def metrics_of(source: str, output: Path, *options: str) -> dict[str, float]:
    """``rankgate eval`` of ``source`` for ndcg@3 and recall@3, as the JSON report's metrics."""
    code = cli.main(
        [
            "eval",
            source,
            "-m",
            "ndcg@3",
            "-m",
            "recall@3",
            "--format",
            "json",
            "-o",
            str(output),
            *options,
        ]
    )
    assert code == 0
    metrics: dict[str, float] = json.loads(output.read_text())["metrics"]
    return metrics


def sha256_prefix(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


# Grades for the two queries of the hand-computed test: "cats and dogs" (q-cats) retrieves
# d4 d2 d1, "fish in water" (q-fish) retrieves d3.
HAND_GRADES = {"q-cats": {"d1": 2, "d2": 0, "d3": 1}, "q-fish": {"d3": 1}}


def check_scores_as_computed_by_hand(store: str, recorder: TraceRecorder, tmp_path: Path) -> None:
    """Label the two recorded queries with ``HAND_GRADES``, close the recorder, and check that
    ``rankgate eval`` of the store gives the values worked out by hand, and the values of the
    same calls written as a JSONL file."""
    for query, judged in HAND_GRADES.items():
        for document, grade in judged.items():
            recorder.label(query, document, grade)
    recorder.close()

    # q-cats: d4 (unjudged), d2 (grade 0), d1 (grade 2); exponential gain 2^g - 1.
    # DCG@3 = 0 + 0 + 3/log2(4); IDCG@3 = 3/log2(2) + 1/log2(3) + 0. Recall@3: d1 of {d1, d3}.
    # q-fish: d3 at rank 1, the only relevant document: NDCG 1, recall 1.
    ndcg_cats = (3 / math.log2(4)) / (3 / math.log2(2) + 1 / math.log2(3))
    expected = {"ndcg@3": (ndcg_cats + 1.0) / 2, "recall@3": (0.5 + 1.0) / 2}
    from_store = metrics_of(store, tmp_path / "store.json")
    assert from_store == pytest.approx(expected, abs=1e-12)

    # The same two calls written by hand as a trace file give the same numbers.
    lines = [
        {
            "query_id": "q-cats",
            "retrieved_ids": ["d4", "d2", "d1"],
            "relevance_scores": HAND_GRADES["q-cats"],
        },
        {"query_id": "q-fish", "retrieved_ids": ["d3"], "relevance_scores": HAND_GRADES["q-fish"]},
    ]
    traces = tmp_path / "traces.jsonl"
    traces.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert metrics_of(str(traces), tmp_path / "file.json") == pytest.approx(from_store, abs=1e-12)


def check_one_warning_per_failure_kind(caplog: pytest.LogCaptureFixture) -> None:
    """The failing-recorder tests' log: one warning per kind of failure (ValueError for a NUL in
    an ID, TypeError for a query ID of the wrong type, RuntimeError for a closed recorder), not
    one per call."""
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 3
    assert any("rankgate_query_id" in message for message in warnings)
    assert any("closed" in message for message in warnings)


def check_import_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, module: str, framework: str, extra: str
) -> None:
    """With ``framework`` (a top-level package) and its submodules unimportable, importing
    ``module`` raises ``MissingExtraError``, an ``ImportError`` naming ``pip install
    'rankgate[extra]'``."""
    for name in [m for m in sys.modules if m == framework or m.startswith(framework + ".")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, framework, None)
    monkeypatch.delitem(sys.modules, module)
    with pytest.raises(ImportError) as raised:
        importlib.import_module(module)
    assert isinstance(raised.value, MissingExtraError)
    assert isinstance(raised.value, RankgateError)
    assert f"pip install 'rankgate[{extra}]'" in str(raised.value)


def check_not_imported_by_rankgate(*frameworks: str) -> None:
    """A fresh ``import rankgate`` (and its integrations, store and CLI packages) imports none of
    the top-level packages ``frameworks``."""
    probe = (
        "import sys, rankgate, rankgate.integrations, rankgate.store, rankgate.cli; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        f"{frameworks!r}))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    assert result.stdout.strip() == "[]"
