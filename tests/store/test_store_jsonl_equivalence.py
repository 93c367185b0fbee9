"""A store's window scores exactly as the same traces written to a JSON Lines file.

The file is built here from what was stored, independently of either reader: each trace in the
window (time order, ties in the order recorded, the variants asked for) as its attributes with the
store's columns over them, and its query's newest labels as ``relevance_scores`` when the labels
table holds any. Both are scored with the same settings; the evaluations must be equal to the last
digit, per query, with the same counts and skip reasons.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from rankgate import evaluate
from rankgate.evaluate import Settings
from rankgate.store import StoreSource, Window
from rankgate.store.backends import LabelRow, TraceRow, connect
from rankgate.times import format_time

METRICS = ["ndcg@10", "precision@5", "recall@20", "map", "mrr"]
START = datetime(2026, 11, 30, tzinfo=UTC)
UNICODE = ["d\u00e9j\u00e0", "\u6587\u66f8-1", "\U0001f600", 'q"uote', "back\\slash", "tab\there"]


def traces() -> list[TraceRow]:
    rows = []
    for number in range(90):
        pool = [f"d{(number * 7 + k) % 40}" for k in range(12)] + UNICODE
        ids = pool[number % 5 :][: 3 + number % 15]
        if number % 23 == 4:
            ids = []  # nothing retrieved: a skip reason of its own
        attributes: dict[str, Any] = {"segment": ["web", "app"][number % 2], "n": number % 3}
        if number % 10 == 0:
            attributes["relevance_scores"] = {ids[0] if ids else "z": 3}  # used only unlabeled
        if number % 4 == 1:
            attributes["label"] = None  # a JSON null among the attributes
        rows.append(
            TraceRow(
                trace_id=f"t{number}",
                query_id=["q\u00fcery", "q1", "q2", "q3", "q4", "q5", "\u554f"][number % 7],
                # Pairs of traces share a time: the order recorded breaks the tie.
                recorded_at=START + timedelta(minutes=10 * (number // 2)),
                variant=[None, "a", "b"][number % 3],  # NULL variants too
                retrieved_ids=ids,
                attributes=attributes,
            )
        )
    return rows


def labels() -> list[LabelRow]:
    rows = []
    for query in ["q\u00fcery", "q1", "q2", "q4", "\u554f"]:  # q3 and q5 unlabeled
        for index, doc in enumerate(["d1", "d5", "d9", "d14", *UNICODE[:4]]):
            rows.append(LabelRow(query, doc, float(index % 4), START - timedelta(days=9), "old"))
    # Newer judgments replace older ones of the same (query, document).
    rows += [
        LabelRow("q1", "d1", 0.0, START - timedelta(days=1), "new"),
        LabelRow("q2", UNICODE[0], 3.0, START, "new"),
        # Doubles that 15 significant digits do not give back.
        LabelRow("q4", "d5", 0.1 + 0.2, START, "new"),
        LabelRow("q\u00fcery", "d1", 1 / 3, START, "new"),
    ]
    return rows


def fill(url: str) -> None:
    backend = connect(url)
    try:
        backend.insert_traces(traces())
        backend.upsert_labels(labels()[:-4])
        backend.commit()
        backend.upsert_labels(labels()[-4:])
        backend.commit()
    finally:
        backend.close()


def as_jsonl(path: Path, window: Window) -> Path:
    newest: dict[str, dict[str, float]] = {}
    for label in labels():  # in order: later rows are the newer judgments here
        newest.setdefault(label.query_id, {})[label.document_id] = label.grade
    with path.open("w", encoding="utf-8") as out:
        for row in sorted(traces(), key=lambda row: row.recorded_at):  # stable: ties kept
            if window.since is not None and row.recorded_at < window.since:
                continue
            if window.until is not None and row.recorded_at >= window.until:
                continue
            if window.variants and row.variant not in window.variants:
                continue
            record = dict(row.attributes)
            record.update(
                trace_id=row.trace_id,
                query_id=row.query_id,
                retrieved_ids=row.retrieved_ids,
                timestamp=format_time(row.recorded_at),
            )
            if row.variant is not None:
                record["variant"] = row.variant
            if row.query_id in newest:
                record["relevance_scores"] = newest[row.query_id]
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
    return path


WINDOWS = {
    "everything": Window(),
    "since and until": Window(START + timedelta(hours=1), START + timedelta(hours=6)),
    "variant": Window(variants=("a",)),
    "window and variants": Window(START + timedelta(minutes=30), None, ("b", "a")),
}


@pytest.mark.parametrize("segments", [(), ("segment", "n", "variant", "label")])
@pytest.mark.parametrize("window", WINDOWS)
def test_store_scores_as_the_same_traces_in_a_file(
    store_url: str, tmp_path: Path, window: str, segments: tuple[str, ...]
) -> None:
    fill(store_url)
    settings = Settings(resamples=30, seed=2, on_invalid="skip", segment_by=segments)
    source = StoreSource(store_url, WINDOWS[window])
    from_store = json.loads(evaluate(source, METRICS, settings=settings).to_json(per_query=True))
    path = as_jsonl(tmp_path / "same.jsonl", WINDOWS[window])
    from_file = json.loads(evaluate(path, METRICS, settings=settings).to_json(per_query=True))
    assert source._block_keys  # the columnar read was taken
    for report in (from_store, from_file):
        report.pop("source", None)
    _without_query_set(from_store, from_file)
    assert from_store == from_file
    assert from_store["summary"]["read"] == len(path.read_text("utf-8").splitlines()) > 0
    assert from_store["summary"]["scored"] > 0


def test_a_failed_read_is_one_line_with_the_password_masked(postgres_url: str) -> None:
    """The columnar read has a connection of its own: its errors are the store's one line,
    and the password in the URL (ignored by a server that trusts the client) is never shown."""
    import psycopg

    from rankgate.store import StoreError

    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute("DROP TABLE IF EXISTS rankgate_traces, rankgate_labels, rankgate_schema")
    fill(postgres_url)
    url = postgres_url.replace("://postgres@", "://postgres:s3cret-pw@")
    source = StoreSource(url)
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute("ALTER TABLE rankgate_labels RENAME TO rankgate_labels_gone")
    try:
        with pytest.raises(StoreError) as failure:
            list(source.batches(columns=["query_id", "retrieved_ids", "relevance_scores"]))
    finally:
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            admin.execute("ALTER TABLE rankgate_labels_gone RENAME TO rankgate_labels")
    message = str(failure.value)
    assert "s3cret-pw" not in message and "\n" not in message
    assert message.startswith(url.replace("s3cret-pw", "***") + ": ")
    assert "rankgate_labels" in message


def test_the_columnar_read_does_not_wait_for_a_writer(tmp_path: Path) -> None:
    """A store is in WAL mode: the read sees what was committed, while another process holds
    the write lock with rows not yet committed."""
    import sqlite3

    url = f"sqlite:///{tmp_path / 'busy.db'}"
    fill(url)
    writer = sqlite3.connect(tmp_path / "busy.db")
    writer.execute("BEGIN IMMEDIATE")
    writer.execute(
        "INSERT INTO rankgate_traces VALUES ('late', 'q1', ?, NULL, '[\"d1\"]', '{}')",
        (format_time(START),),
    )
    try:
        source = StoreSource(url)
        table = list(source.batches(columns=["query_id", "retrieved_ids", "relevance_scores"]))
    finally:
        writer.rollback()
        writer.close()
    assert sum(batch.num_rows for batch in table) == len(traces())


class RecordByRecord(StoreSource):
    """The store read record by record (rows the columnar read must explain are read so)."""

    def schema(self) -> Any:
        return None


@pytest.mark.parametrize("window", ["everything", "window and variants"])
def test_the_record_by_record_read_scores_as_the_file_too(
    store_url: str, tmp_path: Path, window: str
) -> None:
    fill(store_url)
    settings = Settings(resamples=0, on_invalid="skip", segment_by=("segment",))
    source = RecordByRecord(store_url, WINDOWS[window])
    from_store = json.loads(evaluate(source, METRICS, settings=settings).to_json(per_query=True))
    path = as_jsonl(tmp_path / "same.jsonl", WINDOWS[window])
    from_file = json.loads(evaluate(path, METRICS, settings=settings).to_json(per_query=True))
    for report in (from_store, from_file):
        report.pop("source", None)
    _without_query_set(from_store, from_file)
    assert from_store == from_file


def _without_query_set(from_store: dict[str, Any], from_file: dict[str, Any]) -> None:
    """A store read without a time window knows its query set (the labels table) and counts the
    labeled queries with no trace; a file of traces carrying their labels has none. Everything
    else must be equal, so only that part of the store's report is set aside."""
    keys = ("query_set", "expected_queries", "missing_trace", "missing_examples")
    for key in keys:
        from_file["summary"][key] = from_store["summary"][key]
    from_store["warnings"] = [w for w in from_store["warnings"] if "have no trace" not in w]


SKIP = Settings(resamples=0, on_invalid="skip")


def both_reads(url: str) -> list[dict[str, Any]]:
    """The JSON reports of the columnar read and of the record-by-record read, which must be
    equal."""
    reports = [
        json.loads(evaluate(kind(url), METRICS, settings=SKIP).to_json())
        for kind in (StoreSource, RecordByRecord)
    ]
    assert reports[0] == reports[1]
    return reports


def test_odd_postgres_arrays_get_the_record_paths_messages(fresh_postgres: str) -> None:
    """A ranking with two dimensions or a NULL element is the validator's to word, in both
    reads, and does not stop the rest of the window."""
    import psycopg

    connect(fresh_postgres).close()
    with psycopg.connect(fresh_postgres) as db:
        db.execute(
            "INSERT INTO rankgate_traces (trace_id, query_id, recorded_at, retrieved_ids) VALUES "
            "('a', 'q1', now(), '{{d1,d2},{d3,d4}}'), ('b', 'q1', now(), '{d1,NULL}'), "
            "('c', 'q1', now(), '{d1,d2}')"
        )
        db.execute("INSERT INTO rankgate_labels VALUES ('q1', 'd1', 1, NULL, NULL)")
    reports = both_reads(fresh_postgres)
    summary = reports[0]["summary"]
    assert (summary["scored"], summary["skipped"]["invalid"]) == (1, 2)
    assert "got list" in summary["invalid_examples"][0]
    assert "got null" in summary["invalid_examples"][1]


def test_postgres_rankings_with_the_wire_separator_score_as_the_record_path(
    fresh_postgres: str,
) -> None:
    """PostgreSQL's rankings reach the client joined by U+001F: an ID holding that character, an
    empty array, and IDs with quotes, braces, commas and backslashes score exactly as the record
    path scores them, and the ID holding the separator is not cut in two."""
    import psycopg

    connect(fresh_postgres).close()
    rankings = [
        ["d1", "d\x1fx", "d2"],  # the separator inside an ID
        [],
        ['{"q"}', "a,b", "back\\slash", " spaced ", "NULL"],
        ["d1", "d2", "d3"],
    ]
    with psycopg.connect(fresh_postgres) as db:
        for number, ranking in enumerate(rankings):
            db.execute(
                "INSERT INTO rankgate_traces (trace_id, query_id, recorded_at, retrieved_ids) "
                "VALUES (%s, %s, now(), %s)",
                (f"t{number}", f"q{number}", ranking),
            )
        db.execute("INSERT INTO rankgate_labels VALUES ('q0', 'd\x1fx', 3, NULL, NULL)")
        db.execute("INSERT INTO rankgate_labels VALUES ('q2', 'NULL', 2, NULL, NULL)")
        db.execute("INSERT INTO rankgate_labels VALUES ('q2', 'back\\slash', 1, NULL, NULL)")
        db.execute("INSERT INTO rankgate_labels VALUES ('q3', 'd3', 1, NULL, NULL)")
    both_reads(fresh_postgres)
    per_query = {
        row["query_id"]: row
        for row in evaluate(StoreSource(fresh_postgres), ["mrr"], settings=SKIP).per_query()
    }
    # q0: its one labeled ID, the one holding the separator, is at rank 2.
    assert per_query["q0"]["mrr"] == 0.5
    # q2: the ID spelled NULL is an ID like any other, found at rank 5 (back\slash at 3).
    assert per_query["q2"]["mrr"] == 1 / 3
    assert per_query["q3"]["mrr"] == 1 / 3


def test_labels_as_an_arrow_table(store_url: str) -> None:
    """One row per labeled query of the window, the newest grade per document."""
    fill(store_url)
    source = StoreSource(store_url, WINDOWS["variant"])
    table = source.labels()
    source._backend.close()  # the source was not read: its own connection is still open
    assert table.column_names == ["query_id", "relevance_scores"]
    got = {row["query_id"]: dict(row["relevance_scores"]) for row in table.to_pylist()}
    newest: dict[str, dict[str, float]] = {}
    for label in labels():
        newest.setdefault(label.query_id, {})[label.document_id] = label.grade
    in_window = {row.query_id for row in traces() if row.variant == "a"}
    assert got == {query: grades for query, grades in newest.items() if query in in_window}
    assert got["q1"]["d1"] == 0.0 and got["q4"]["d5"] == 0.1 + 0.2
