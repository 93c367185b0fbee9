"""``rankgate labels judge`` end to end, against a local chat-completions server: the pool is
filled, a rerun is free, a flaky server is retried, a malformed reply leaves its pair unjudged,
and no secret reaches any output or file. Then the judge's labels in ``eval`` through
``--label-source``."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from fake_openai import KEY_ENV, FakeOpenAI, StartFake

from rankgate.cli import main

SECRET = "sk-test-Very5ecretKey"

# Three queries, four documents each; the true grades (by text) the server grades from.
DOCS = {f"d{q}{i}": f"passage {i} about topic {q}" for q in range(3) for i in range(4)}
TRUTH = {
    (f"what about topic {q}", DOCS[f"d{q}{i}"]): grade
    for q in range(3)
    for i, grade in enumerate((3, 0, 1, 2))
}
TRACES = [
    {
        "query_id": f"q{q}",
        "query": f"what about topic {q}",
        "retrieved_ids": [f"d{q}{i}" for i in range(4)],
    }
    for q in range(3)
]


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str


def _run(capsys: pytest.CaptureFixture[str], *args: Any) -> Result:
    capsys.readouterr()
    try:
        code = main([str(arg) for arg in args])
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else 2
    captured = capsys.readouterr()
    return Result(code, captured.out, captured.err)


def _write(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
    return path


@pytest.fixture
def corpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(KEY_ENV, SECRET)
    return {
        "traces": _write(tmp_path / "traces.jsonl", TRACES),
        "docs": _write(
            tmp_path / "docs.jsonl", [{"doc_id": key, "text": text} for key, text in DOCS.items()]
        ),
    }


def _judge(
    capsys: pytest.CaptureFixture[str], corpus: dict[str, Path], fake: FakeOpenAI, *extra: Any
) -> Result:
    return _run(capsys, "labels", "judge", corpus["traces"], "--docs", corpus["docs"],
                "--endpoint", fake.base_url, "--model", "m1", "--api-key-env", KEY_ENV,
                "-o", "judge.jsonl", "--no-progress", "--no-config", *extra)  # fmt: skip


def _labels(path: Path) -> dict[tuple[str, str], dict[str, Any]]:
    records = [json.loads(line) for line in path.read_text().splitlines()]
    return {(record["query_id"], record["document_id"]): record for record in records}


def test_the_pool_is_graded_cached_and_written_as_judge_labels(
    capsys: pytest.CaptureFixture[str], corpus: dict[str, Path], fake_openai: StartFake
) -> None:
    fake = fake_openai(TRUTH, require_key=SECRET)
    result = _judge(capsys, corpus, fake)
    assert result.code == 0, result.err
    written = _labels(Path("judge.jsonl"))
    assert len(written) == 12 == fake.count
    for (query_id, document_id), record in written.items():
        query = f"what about topic {query_id[1:]}"
        assert record["grade"] == TRUTH[(query, DOCS[document_id])]
        assert record["source"] == "judge:m1@umbrela-1"
    assert "12 graded by m1" in result.out and "0 from the cache" in result.out

    again = _judge(capsys, corpus, fake)
    assert again.code == 0, again.err
    assert fake.count == 12  # a rerun sends nothing
    assert "0 graded by m1" in again.out and "12 from the cache" in again.out
    assert _labels(Path("judge.jsonl")).keys() == written.keys()

    # The key went to the server as a bearer token and nowhere else.
    assert all(r.headers.get("Authorization") == f"Bearer {SECRET}" for r in fake.requests)
    for text in (result.out, result.err, again.out, again.err):
        assert SECRET not in text
    for path in Path().iterdir():
        assert SECRET.encode() not in path.read_bytes(), path


def test_a_flaky_server_is_retried_and_a_malformed_reply_stays_unjudged(
    capsys: pytest.CaptureFixture[str], corpus: dict[str, Path], fake_openai: StartFake
) -> None:
    bad = ("what about topic 1", DOCS["d12"])
    fake = fake_openai(TRUTH, fail_every=3, malformed=[bad])
    result = _judge(capsys, corpus, fake, "--max-retries", "6")
    assert result.code == 0, result.err
    written = _labels(Path("judge.jsonl"))
    assert ("q1", "d12") not in written  # never a guess
    assert len(written) == 11
    assert fake.count > 12  # the failures were retried
    assert "1 failed (malformed reply 1)" in result.out


def test_the_budget_and_existing_labels_limit_the_pool(
    capsys: pytest.CaptureFixture[str],
    corpus: dict[str, Path],
    fake_openai: StartFake,
    tmp_path: Path,
) -> None:
    human = _write(tmp_path / "human.jsonl",
                   [{"query_id": "q0", "document_id": f"d0{i}", "grade": 1} for i in range(4)])  # fmt: skip
    fake = fake_openai(TRUTH)
    result = _judge(capsys, corpus, fake, "--labels", human, "--budget", "5")
    assert result.code == 0, result.err
    written = _labels(Path("judge.jsonl"))
    assert len(written) == 5
    assert not any(query_id == "q0" for query_id, _ in written)  # judged by a human already


def test_without_document_text_or_with_a_refused_key_it_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str],
    corpus: dict[str, Path],
    fake_openai: StartFake,
    tmp_path: Path,
) -> None:
    fake = fake_openai(TRUTH, require_key="another-key")
    result = _run(capsys, "labels", "judge", corpus["traces"], "--endpoint", fake.base_url,
                  "--model", "m1", "-o", "judge.jsonl", "--no-config")  # fmt: skip
    assert result.code == 2
    assert "no pooled pair has a document text" in result.err
    assert len(result.err.strip().splitlines()) == 1
    refused = _judge(capsys, corpus, fake)
    assert refused.code == 2
    line = refused.err.strip().splitlines()[-1]
    assert line.startswith("rankgate: error:") and KEY_ENV in line
    assert SECRET not in refused.err + refused.out


def test_texts_recorded_in_the_traces_are_judged_without_docs(
    capsys: pytest.CaptureFixture[str], corpus: dict[str, Path], fake_openai: StartFake
) -> None:
    with_texts = [
        {**trace, "retrieved_texts": [DOCS[doc] for doc in trace["retrieved_ids"]]}
        for trace in TRACES
    ]
    traces = _write(Path("with_texts.jsonl"), with_texts)
    fake = fake_openai(TRUTH)
    result = _run(capsys, "labels", "judge", traces, "--endpoint", fake.base_url, "--model", "m1",
                  "-o", "judge.jsonl", "--no-progress", "--no-config")  # fmt: skip
    assert result.code == 0, result.err
    assert len(_labels(Path("judge.jsonl"))) == 12


def test_label_source_chooses_which_labels_eval_uses(
    capsys: pytest.CaptureFixture[str], corpus: dict[str, Path], fake_openai: StartFake
) -> None:
    # The judge over-rates by a grade: it calls d?1 (truly 0) relevant.
    fake = fake_openai(TRUTH, bias=1.0)
    assert _judge(capsys, corpus, fake).code == 0
    human = _write(Path("human.jsonl"), [
        {"query_id": f"q{q}", "document_id": f"d{q}{i}", "grade": grade, "source": "annotators"}
        for q in range(3) for i, grade in enumerate((3, 0, 1, 2))
    ])  # fmt: skip

    def precision_at_4(*options: Any) -> tuple[float, dict[str, Any]]:
        result = _run(capsys, "eval", corpus["traces"], "--labels", human, "--labels",
                      "judge.jsonl", "-m", "p@4", "--format", "json", "--no-config",
                      "--no-progress", *options)  # fmt: skip
        assert result.code == 0, result.err
        report = json.loads(result.out)
        return report["metrics"]["precision@4"], report["summary"]["label_sources"]

    # Humans: 3 of 4 relevant (grades 3, 1, 2); the judge: all 4 (grades 3, 1, 2, 3 after +1).
    assert precision_at_4("--label-source", "human") == (0.75, {"human": 12, "judge": 0})
    assert precision_at_4("--label-source", "judge") == (1.0, {"human": 0, "judge": 12})
    # Both: a human's grade wins over the judge's for the same pair.
    assert precision_at_4() == (0.75, {"human": 12, "judge": 0})
    assert precision_at_4("--label-source", "all") == (0.75, {"human": 12, "judge": 0})


# --- what an attack review found ---------------------------------------------------------------


class _Hostile(BaseHTTPRequestHandler):
    """Answers 200, then a body without end (``/flood``) or a byte now and then (``/drip``)."""

    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        started = time.monotonic()
        try:
            while time.monotonic() - started < 20:
                piece = b"x" * 65536 if self.path.startswith("/flood") else b" "
                self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
                self.wfile.flush()
                if self.path.startswith("/drip"):
                    time.sleep(0.2)
        except OSError:
            pass  # the client gave up, as it should
        self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def hostile() -> Any:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hostile)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize(("mode", "reason"), [("flood", "malformed response"), ("drip", "timeout")])
def test_an_endless_or_dripping_body_fails_its_pair_without_holding_the_run(
    capsys: pytest.CaptureFixture[str],
    corpus: dict[str, Path],
    hostile: str,
    mode: str,
    reason: str,
) -> None:
    started = time.monotonic()
    result = _run(capsys, "labels", "judge", corpus["traces"], "--docs", corpus["docs"],
                  "--endpoint", f"{hostile}/{mode}/v1", "--model", "m1", "--budget", "2",
                  "--timeout", "0.5", "--max-retries", "0", "-o", "judge.jsonl", "--no-progress",
                  "--no-config")  # fmt: skip
    assert time.monotonic() - started < 15
    assert result.code == 2
    assert f"{reason} 2" in result.err and "graded no pair" in result.err


def test_an_outage_leaves_the_earlier_file_as_it_was(
    capsys: pytest.CaptureFixture[str], corpus: dict[str, Path]
) -> None:
    earlier = Path("judge.jsonl")
    earlier.write_text('{"query_id": "q0", "document_id": "d00", "grade": 3}\n')
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = _run(capsys, "labels", "judge", corpus["traces"], "--docs", corpus["docs"],
                  "--endpoint", f"http://127.0.0.1:{port}/v1", "--model", "m1",
                  "--max-retries", "0", "-o", earlier, "--no-progress", "--no-config")  # fmt: skip
    assert result.code == 2 and "was left as it was" in result.err
    assert earlier.read_text() == '{"query_id": "q0", "document_id": "d00", "grade": 3}\n'


def test_a_key_that_is_no_header_value_is_one_line_and_never_shown(
    capsys: pytest.CaptureFixture[str],
    corpus: dict[str, Path],
    fake_openai: StartFake,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-Secret\nX-Evil: 1")
    result = _judge(capsys, corpus, fake_openai(TRUTH))
    assert result.code == 2
    [line] = result.err.strip().splitlines()
    assert "not a valid HTTP header value" in line and KEY_ENV in line
    assert "sk-Secret" not in result.err + result.out


def test_the_output_is_written_through_a_link_with_the_usual_mode(
    capsys: pytest.CaptureFixture[str], corpus: dict[str, Path], fake_openai: StartFake
) -> None:
    Path("real.jsonl").write_text("")
    Path("link.jsonl").symlink_to("real.jsonl")
    fake = fake_openai(TRUTH)
    result = _run(capsys, "labels", "judge", corpus["traces"], "--docs", corpus["docs"],
                  "--endpoint", fake.base_url, "--model", "m1", "-o", "link.jsonl",
                  "--no-progress", "--no-config")  # fmt: skip
    assert result.code == 0, result.err
    assert Path("link.jsonl").is_symlink()
    assert len(Path("real.jsonl").read_text().splitlines()) == 12
    fresh = _run(capsys, "labels", "judge", corpus["traces"], "--docs", corpus["docs"],
                 "--endpoint", fake.base_url, "--model", "m1", "-o", "new.jsonl",
                 "--no-progress", "--no-config")  # fmt: skip
    assert fresh.code == 0
    mask = os.umask(0)
    os.umask(mask)
    assert Path("new.jsonl").stat().st_mode & 0o777 == 0o666 & ~mask


def test_blank_texts_are_not_sent_and_conflicting_documents_are_refused(
    capsys: pytest.CaptureFixture[str], corpus: dict[str, Path], fake_openai: StartFake
) -> None:
    fake = fake_openai(TRUTH)
    docs = [{"doc_id": key, "text": "" if key == "d00" else text} for key, text in DOCS.items()]
    _write(corpus["docs"], docs)
    result = _judge(capsys, corpus, fake)
    assert result.code == 0, result.err
    assert "no document text 1" in result.out and fake.count == 11
    _write(corpus["docs"], [*docs, {"doc_id": "d01", "text": "another text"}])
    refused = _judge(capsys, corpus, fake)
    assert refused.code == 2 and "listed again with another text" in refused.err
