"""Trace stores, SQLite and PostgreSQL alike: what goes in through the recorder or the import
commands comes out of ``rankgate eval URL`` as exactly the numbers the same records give from JSONL.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rankgate import evaluate
from rankgate.store import StoreSource, TraceRecorder, Window, sampled
from rankgate.store.backends import connect

ROOT = Path(__file__).parents[2]
EXAMPLES = ROOT / "examples"
METRICS = ["-m", "ndcg@5,10", "-m", "mrr", "-m", "recall@20", "-m", "map"]
Rankgate = Callable[..., Any]  # the `rankgate` fixture: runs the CLI in-process


def example_records() -> list[dict[str, Any]]:
    return [json.loads(line) for line in (EXAMPLES / "traces.jsonl").read_text().splitlines()]


def per_query(report: dict[str, Any]) -> dict[str, dict[str, float]]:
    return {row["query_id"]: row for row in report["per_query"]}


def record_examples(url: str, records: list[dict[str, Any]], threads: int) -> TraceRecorder:
    """Record traces and their labels from several threads at once, as a service would."""
    recorder = TraceRecorder(url, batch_size=64, flush_interval=0.05)

    def work(part: list[dict[str, Any]]) -> None:
        for record in part:
            attributes = {
                key: value
                for key, value in record.items()
                if key not in ("query_id", "retrieved_ids", "relevant_ids", "relevance_scores")
            }
            recorder.record(
                record["query_id"],
                record["retrieved_ids"],
                attributes=attributes,
                recorded_at=record["timestamp"],
            )
            grades = dict.fromkeys(record.get("relevant_ids") or (), 1)
            grades.update(record.get("relevance_scores") or {})
            for document, grade in grades.items():
                recorder.label(record["query_id"], document, grade, source="test")

    workers = [threading.Thread(target=work, args=(records[i::threads],)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    recorder.close()
    return recorder


def test_recorded_from_threads_scores_like_the_jsonl(rankgate: Rankgate, store_url: str) -> None:
    records = example_records()
    recorder = record_examples(store_url, records, threads=8)
    assert recorder.stats.traces_written == len(records) == 400
    assert recorder.stats.dropped == 0 and recorder.stats.write_errors == 0

    common = [*METRICS, "--segment-by", "query_type", "--no-config", "--format", "json"]
    from_file = rankgate("eval", EXAMPLES / "traces.jsonl", *common, "--per-query").json()
    stored = rankgate("eval", store_url, *common, "--per-query", "--since", "2026-11-30").json()
    assert stored["summary"] == from_file["summary"]
    assert stored["metrics"] == from_file["metrics"]
    # Threads interleave, so the order differs: per query the values are identical.
    assert per_query(stored).keys() == per_query(from_file).keys()
    for query_id, row in per_query(from_file).items():
        assert per_query(stored)[query_id] == row
    for mine, theirs in zip(stored["segments"], from_file["segments"], strict=True):
        assert mine["metrics"] == theirs["metrics"] and mine["scored"] == theirs["scored"]


def test_imported_store_gives_the_files_numbers_to_the_last_digit(
    rankgate: Rankgate, store_url: str
) -> None:
    assert (
        rankgate(
            "trace", "import", EXAMPLES / "traces.jsonl", "--store", store_url, "--no-labels"
        ).code
        == 0
    )
    imported = rankgate("label", "import", EXAMPLES / "labels.jsonl", "--store", store_url)
    assert imported.code == 0
    assert "1,707 judgments of 352 queries stored" in imported.out
    config = ["--config", EXAMPLES / "rankgate.toml", "--format", "json"]
    from_file = rankgate("eval", EXAMPLES / "traces.jsonl", *config).json()
    window = ["--since", "2026-11-30", "--until", "2026-12-01"]
    stored = rankgate("eval", store_url, *window, *config).json()
    # Same order as the file, so even the bootstrap intervals agree exactly.
    for key in ("summary", "metrics", "intervals", "gates", "segments", "passed"):
        assert stored[key] == from_file[key], key
    # Importing again changes nothing: a stored trace is kept once, a label replaced by itself.
    rankgate("trace", "import", EXAMPLES / "traces.jsonl", "--store", store_url, "--no-labels")
    rankgate("label", "import", EXAMPLES / "labels.jsonl", "--store", store_url)
    assert rankgate("eval", store_url, *window, *config).json()["summary"] == from_file["summary"]


def test_time_window_and_variants_select_what_they_say(
    rankgate: Rankgate, store_url: str, tmp_path: Path
) -> None:
    records = example_records()
    rankgate("trace", "import", EXAMPLES / "traces.jsonl", "--store", store_url, "--variant", "a")
    rankgate(
        "trace", "import", EXAMPLES / "candidate.jsonl", "--store", store_url, "--variant", "b"
    )
    since, until = "2026-11-30T06:00:00Z", "2026-11-30T18:00:00Z"
    chosen = [r for r in records if since <= r["timestamp"] < until]
    assert 0 < len(chosen) < len(records)
    subset = tmp_path / "subset.jsonl"
    subset.write_text("".join(json.dumps(r) + "\n" for r in chosen))
    args = [*METRICS, "--no-config", "--format", "json"]
    from_file = rankgate("eval", subset, *args).json()
    stored = rankgate(
        "eval", store_url, *args, "--since", since, "--until", until, "--variant", "a"
    ).json()
    assert stored["summary"] == from_file["summary"]
    assert stored["metrics"] == from_file["metrics"]
    # Without --variant both variants are read.
    both = rankgate("eval", store_url, *args, "--since", since, "--until", until).json()
    assert both["summary"]["read"] > from_file["summary"]["read"]


def test_compare_reads_the_variants_of_one_store(rankgate: Rankgate, store_url: str) -> None:
    rankgate(
        "trace", "import", EXAMPLES / "traces.jsonl", "--store", store_url, "--variant", "base"
    )
    rankgate(
        "trace", "import", EXAMPLES / "candidate.jsonl", "--store", store_url, "--variant", "new"
    )
    args = [*METRICS, "--segment-by", "query_type", "--no-config", "--format", "json"]
    files = rankgate(
        "compare", EXAMPLES / "traces.jsonl", EXAMPLES / "candidate.jsonl", *args
    ).json()
    stored = rankgate("compare", store_url, "--baseline", "base", "--candidate", "new", *args)
    assert stored.code == files_code(files), stored.err
    mine = stored.json()
    assert len(mine["cells"]) == len(files["cells"])
    for a, b in zip(mine["cells"], files["cells"], strict=True):
        for key in ("metric", "segment", "queries", "delta", "p_adjusted", "flag", "wins"):
            assert a[key] == b[key], key


def test_variants_read_again_for_their_rankings_read_no_labels(
    rankgate: Rankgate, store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With every ranking let go (as past ``HELD_RANKING_BYTES`` at scale), each side of a store
    split into variants is read again for its rankings only: the report is the one made with the
    rankings held, and the labels table is read once, by the first read, not once per side."""
    from rankgate import compare_read
    from rankgate.store import columns

    rankgate(
        "trace", "import", EXAMPLES / "traces.jsonl", "--store", store_url, "--variant", "base"
    )
    rankgate(
        "trace", "import", EXAMPLES / "candidate.jsonl", "--store", store_url, "--variant", "new"
    )
    rankgate("labels", "import", EXAMPLES / "traces.jsonl", "--store", store_url)
    args = [*METRICS, "--segment-by", "query_type", "--no-config", "--format", "json"]
    command = ("compare", store_url, "--baseline", "base", "--candidate", "new", *args)
    held = rankgate(*command)
    reads: list[str] = []
    labels = columns.StoreReader.labels

    def counted(self: Any, *a: Any, **k: Any) -> Any:
        reads.append(self.name)
        return labels(self, *a, **k)

    monkeypatch.setattr(columns.StoreReader, "labels", counted)
    monkeypatch.setattr(compare_read, "HELD_RANKING_BYTES", 0)
    streamed = rankgate(*command)
    assert streamed.code == held.code, streamed.err
    assert streamed.json()["cells"] == held.json()["cells"]
    assert len(reads) == 1


def files_code(report: dict[str, Any]) -> int:
    return 0 if report["passed"] else 1


def test_sample_is_seeded_by_query_and_reported(rankgate: Rankgate, store_url: str) -> None:
    rankgate("trace", "import", EXAMPLES / "traces.jsonl", "--store", store_url)
    args = ["-m", "mrr", "--no-config", "--format", "json", "--per-query", "--sample", "0.3"]
    first = rankgate("eval", store_url, *args, "--seed", "5")
    again = rankgate("eval", store_url, *args, "--seed", "5").json()
    other = rankgate("eval", store_url, *args, "--seed", "6").json()
    kept = {row["query_id"] for row in first.json()["per_query"]}
    assert kept == {row["query_id"] for row in again["per_query"]}
    assert kept != {row["query_id"] for row in other["per_query"]}
    expected = {r["query_id"] for r in example_records() if sampled(r["query_id"], 0.3, 5)}
    read = first.json()["summary"]["read"]
    assert read == len(expected) and 80 < read < 160
    assert f"{read:,} of 400 traces kept" in first.err


def test_own_sql_binds_values_and_cannot_write(
    rankgate: Rankgate, store_url: str, tmp_path: Path
) -> None:
    rankgate("trace", "import", EXAMPLES / "traces.jsonl", "--store", store_url)
    sqlite = store_url.startswith("sqlite")
    marker = ":wanted" if sqlite else "%(wanted)s"
    labels = (
        "(SELECT json_group_object(document_id, grade) FROM rankgate_labels l "
        "WHERE l.query_id = t.query_id)"
        if sqlite
        else "(SELECT jsonb_object_agg(document_id, grade) FROM rankgate_labels l "
        "WHERE l.query_id = t.query_id)"
    )
    sql = (
        f"SELECT t.query_id AS qid, t.retrieved_ids AS ids, {labels} AS grades "
        f"FROM rankgate_traces t WHERE t.query_id = {marker}"
    )
    fields = ["--field", "query_id=qid", "--field", "retrieved_ids=ids", "--field",
              "relevance_scores=grades"]  # fmt: skip
    args = ["-m", "mrr", "--no-config", "--format", "json", "--sql", sql, *fields]
    one = rankgate("eval", store_url, *args, "--param", "wanted=q-0003")
    assert one.code == 0, one.err
    assert one.json()["summary"]["read"] == 1 and one.json()["summary"]["scored"] == 1
    # A value is bound, never spliced into the text: this matches no query at all.
    injected = rankgate("eval", store_url, *args, "--param", "wanted=x' OR '1'='1")
    assert injected.json()["summary"]["read"] == 0
    # Writes are refused by the database itself (read-only connection).
    for statement in ("DELETE FROM rankgate_traces", "DROP TABLE rankgate_labels"):
        refused = rankgate("eval", store_url, "--no-config", "--sql", statement)
        refused.one_line_error("query failed")
    backend = connect(store_url, read_only=True)
    try:
        assert backend.summary()["traces"] == 400
    finally:
        backend.close()


def test_labels_newest_judgment_wins(rankgate: Rankgate, store_url: str, tmp_path: Path) -> None:
    rows = [
        {"query_id": "q", "document_id": "a", "grade": 3, "labeled_at": "2026-01-02T00:00:00Z"},
        {"query_id": "q", "document_id": "a", "grade": 0, "labeled_at": "2026-01-01T00:00:00Z"},
        {"query_id": "q", "doc_id": "b", "relevance": "2", "labeled_at": "2026-01-01T00:00:00Z"},
    ]
    path = tmp_path / "judgments.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert rankgate("label", "import", path, "--store", store_url).code == 0
    later = tmp_path / "later.jsonl"
    later.write_text(
        json.dumps({"query_id": "q", "document_id": "b", "grade": 1, "labeled_at": "2026-02-01"})
        + "\n"
    )
    rankgate("label", "import", later, "--store", store_url)
    recorder = TraceRecorder(store_url)
    recorder.record("q", ["b", "a"], recorded_at="2026-03-01T00:00:00Z")
    recorder.close()
    (record,) = [raw.value for raw in StoreSource(store_url, Window())]
    assert record["relevance_scores"] == {"a": 3.0, "b": 1.0}
    assert set(record["labeled_at"]) == {"a", "b"}


def test_bad_label_and_trace_records_name_file_line_and_field(
    rankgate: Rankgate, store_url: str, tmp_path: Path
) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(
        json.dumps({"query_id": "q", "document_id": "a", "grade": 2})
        + "\n"
        + json.dumps({"query_id": "q", "document_id": "b", "grade": "high"})
        + "\n"
    )
    rankgate("label", "import", path, "--store", store_url).one_line_error(
        f"{path}:2", "grade", "expected a number"
    )
    skipped = rankgate("label", "import", path, "--store", store_url, "--on-invalid", "skip")
    assert skipped.code == 0 and "2 records read" in skipped.out and "1 invalid" in skipped.out
    traces = tmp_path / "traces.jsonl"
    traces.write_text(json.dumps({"query_id": "q", "retrieved_ids": "a,b"}) + "\n")
    rankgate("trace", "import", traces, "--store", store_url).one_line_error(
        f"{traces}:1", "retrieved_ids"
    )


def test_store_errors_are_one_line(rankgate: Rankgate, tmp_path: Path) -> None:
    rankgate("eval", "sqlite://relative.db", "--no-config").one_line_error("sqlite:///")
    rankgate("eval", f"sqlite:///{tmp_path}/none.db", "--no-config").one_line_error(
        "no such store file"
    )
    rankgate("eval", "postgresql://nobody@127.0.0.1:1/none", "--no-config").one_line_error(
        "cannot connect"
    )
    rankgate("eval", EXAMPLES / "traces.jsonl", "--variant", "a", "--no-config").one_line_error(
        "--variant applies only to a trace store URL"
    )
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    rankgate("eval", f"sqlite:///{empty}", "--no-config").one_line_error("rankgate_traces")


def test_a_store_from_a_newer_release_is_refused(rankgate: Rankgate, store_url: str) -> None:
    backend = connect(store_url)
    backend._execute("UPDATE rankgate_schema SET version = 99")
    backend.commit()
    backend.close()
    rankgate("trace", "import", EXAMPLES / "traces.jsonl", "--store", store_url).one_line_error(
        "schema version 99 is newer"
    )


def test_recorder_never_stalls_the_caller_and_flushes_on_close(tmp_path: Path) -> None:
    import sqlite3
    import time

    url = f"sqlite:///{tmp_path / 'busy.db'}"
    recorder = TraceRecorder(url, batch_size=2, max_queued=4, block_seconds=0.02)
    # Another process holds the write lock, so the recorder's writer cannot commit for now.
    blocker = sqlite3.connect(tmp_path / "busy.db")
    blocker.execute("BEGIN EXCLUSIVE")
    started = time.monotonic()
    for number in range(40):
        recorder.record(f"q{number}", ["a"])
    assert time.monotonic() - started < 5  # at most block_seconds per call, never the lock's wait
    assert recorder.stats.dropped > 0
    blocker.rollback()
    blocker.close()
    recorder.close()
    written = recorder.stats.traces_written
    assert written + recorder.stats.dropped == 40
    assert sum(1 for _ in StoreSource(url, Window())) == written


def test_recorder_rejects_malformed_calls_at_once(tmp_path: Path) -> None:
    with TraceRecorder(f"sqlite:///{tmp_path / 'x.db'}") as recorder:
        with pytest.raises(TypeError):
            recorder.record("q", "a,b")  # type: ignore[arg-type]
        with pytest.raises(ValueError):
            recorder.label("q", "a", 1001)
        with pytest.raises(TypeError):
            recorder.label("q", "a", True)
        with pytest.raises(ValueError):
            recorder.record("", ["a"])
    with pytest.raises(RuntimeError):
        recorder.record("q", ["a"])


def test_evaluate_reads_a_store_url_from_python(store_url: str) -> None:
    record_examples(store_url, example_records()[:50], threads=2)
    evaluation = evaluate(store_url, ["mrr"])
    assert evaluation.summary.read == 50


def test_info_init_and_labels_for_compare(rankgate: Rankgate, store_url: str) -> None:
    assert rankgate("store", "init", store_url).code == 0
    rankgate("label", "import", EXAMPLES / "labels.jsonl", "--store", store_url)
    rankgate("trace", "import", EXAMPLES / "traces.jsonl", "--store", store_url, "--variant", "a")
    info = rankgate("store", "info", store_url, "--format", "json").json()
    assert info["traces"] == 400 and info["labels"] == 1707 and info["variants"] == {"a": 400}
    assert "traces: 400" in rankgate("store", "info", store_url).out
    # Labels from the store agree with those the baseline records carry, so compare accepts both.
    args = ["-m", "mrr", "--no-config", "--format", "json"]
    files = [EXAMPLES / "traces.jsonl", EXAMPLES / "candidate.jsonl"]
    with_store = rankgate("compare", *files, *args, "--labels", store_url).json()
    without = rankgate("compare", *files, *args).json()
    assert with_store["cells"] == without["cells"]


def test_a_password_never_reaches_a_report(rankgate: Rankgate) -> None:
    failed = rankgate("eval", "postgresql://user:s3cret@127.0.0.1:1/db", "--no-config")
    failed.one_line_error("cannot connect")
    assert "s3cret" not in failed.err and "***" in failed.err


def test_own_sql_cannot_write_sideways_either(
    rankgate: Rankgate, store_url: str, tmp_path: Path
) -> None:
    if store_url.startswith("sqlite"):
        # A '#' in the file name must not cut the read-only mode off the URI.
        odd = tmp_path / "odd#name.db"
        store_url = f"sqlite:///{odd}"
        rankgate("trace", "import", EXAMPLES / "traces.jsonl", "--store", store_url)
        (tmp_path / "odd").write_bytes(odd.read_bytes())
        rankgate("eval", store_url, "--no-config", "--sql", "DROP TABLE rankgate_labels")
        attached = tmp_path / "attached.db"
        attach = rankgate("eval", store_url, "--no-config", "--sql", f"ATTACH '{attached}' AS x")
        attach.one_line_error("query failed")
        assert not attached.exists()
        for path in (odd, tmp_path / "odd"):
            backend = connect(f"sqlite:///{path}", read_only=True)
            try:
                assert backend.summary()["labels"] == 1707
            finally:
                backend.close()
        return
    import psycopg

    rankgate("trace", "import", EXAMPLES / "traces.jsonl", "--store", store_url)
    sql = "SELECT lo_from_bytea(0, 'x') AS l, 'a' AS query_id, ARRAY['d'] AS retrieved_ids"
    rankgate("eval", store_url, "--no-config", "--sql", sql)
    with psycopg.connect(store_url) as connection:
        assert connection.execute("SELECT count(*) FROM pg_largeobject_metadata").fetchone() == (0,)
    # A literal % needs no doubling when there is nothing to bind.
    like = "SELECT query_id, retrieved_ids FROM rankgate_traces WHERE query_id LIKE 'q-000%'"
    found = rankgate(
        "eval", store_url, "--no-config", "-m", "mrr", "--sql", like, "--format", "json"
    )
    assert found.code == 0, found.err
    assert found.json()["summary"]["read"] == 9


def test_passwords_are_masked_everywhere(rankgate: Rankgate, postgres_url: str) -> None:
    import psycopg

    with_password = postgres_url.replace("://postgres@", "://postgres:s3cret@")
    rankgate("store", "init", with_password)
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute("UPDATE rankgate_schema SET version = 99")
    try:
        failed = rankgate("store", "init", with_password)
        failed.one_line_error("newer")
        assert "s3cret" not in failed.err
    finally:
        with psycopg.connect(postgres_url, autocommit=True) as connection:
            connection.execute("DROP TABLE rankgate_schema, rankgate_traces, rankgate_labels")
    in_query = rankgate("eval", "postgresql://u@127.0.0.1:1/x?password=s3cret", "--no-config")
    in_query.one_line_error("cannot connect")
    assert "s3cret" not in in_query.err
    broken = rankgate("eval", "postgresql://u:s3cret@[::1/x", "--no-config")
    assert broken.code == 2 and "s3cret" not in broken.err and "Traceback" not in broken.err


def test_import_without_times_or_ids_stores_each_record_once(
    rankgate: Rankgate, store_url: str, tmp_path: Path
) -> None:
    rows = [
        {"query_id": "a", "retrieved_ids": ["x"], "relevant_ids": ["x"]},
        {"query_id": "a", "retrieved_ids": ["x"], "relevant_ids": ["x"]},
        {"query_id": "b", "retrieved_ids": ["y"], "trace_id": None},
        {"query_id": "c", "retrieved_ids": ["z"], "trace_id": None},
        {"query_id": "d", "retrieved_ids": ["z"], "relevant_ids": []},
    ]
    path = tmp_path / "untimed.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    first = rankgate("trace", "import", path, "--store", store_url)
    assert "5 traces stored" in first.out
    assert "1 record judged with no document" in first.err
    again = rankgate("trace", "import", path, "--store", store_url)
    assert "0 traces stored, 5 already stored" in again.out
    assert sum(1 for _ in StoreSource(store_url, Window())) == 5


def test_recorder_drops_only_the_row_the_store_refuses(store_url: str) -> None:
    recorder = TraceRecorder(store_url, batch_size=50)
    for number in range(20):
        recorder.record(f"good-{number}", ["a"])
    recorder.record("\ud800", ["a"])  # a lone surrogate: no database can store it
    for number in range(20, 40):
        recorder.record(f"good-{number}", ["a"])
    recorder.close()
    assert recorder.stats.traces_written == 40
    assert recorder.stats.dropped == 1
    with pytest.raises(ValueError):
        TraceRecorder(store_url).record("q", ["a"], attributes={"x": float("nan")})


def test_close_counts_what_an_unreachable_store_never_took(tmp_path: Path) -> None:
    import sqlite3
    import time

    url = f"sqlite:///{tmp_path / 'stuck.db'}"
    recorder = TraceRecorder(url, batch_size=5)
    blocker = sqlite3.connect(tmp_path / "stuck.db")
    blocker.execute("BEGIN EXCLUSIVE")
    try:
        for number in range(50):
            recorder.record(f"q{number}", ["a"])
        started = time.monotonic()
        recorder.close(timeout=0.5)
        assert time.monotonic() - started < 3
        # Whatever the writer had not taken is counted, not silently lost.
        assert recorder.stats.dropped >= 50 - 2 * 5
    finally:
        blocker.rollback()
        blocker.close()
