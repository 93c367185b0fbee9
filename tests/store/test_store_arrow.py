"""The store read as Arrow columns gives what the record path gives: values, counts, messages.

Each store is filled with awkward traces (labels old and new, labels kept in the attributes,
variants, attributes of every JSON type, IDs with quotes, backslashes and non-ASCII text,
duplicates, empty and invalid rankings, grades out of range), then scored twice: once as
``evaluate`` reads a store (the columnar path, ``StoreSource.batches``), once through the record
path (``StoreSource`` iterated record by record). The JSON of the two evaluations must be equal,
per query and to the last digit, in every window, sample and segmentation.
"""

from __future__ import annotations

import json
import os
import random
import sqlite3
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from rankgate import evaluate
from rankgate.errors import InputError
from rankgate.evaluate import Settings
from rankgate.stale import LabelFilter
from rankgate.store import StoreSource, Window
from rankgate.store.backends import LabelRow, StoreError, StoreUnavailable, TraceRow, connect

Rankgate = Callable[..., Any]  # the `rankgate` fixture: runs the CLI in-process
METRICS = ["ndcg@10", "precision@5", "recall@20", "map", "mrr"]
START = datetime(2026, 11, 30, tzinfo=UTC)
ODD_IDS = ['d"quote', "d\\back", "d\u00e9t\u00e9", "\u6587\u66f8", "a b", "d/1", "x" * 40]


class RecordPath(StoreSource):
    """The store read record by record, as before the columnar read: the reference."""

    def schema(self) -> Any:
        return None


def outcomes(url: str, **options: Any) -> list[str]:
    """The report (or the one-line error) of the columnar read and of the record path."""
    found = []
    for source_type in (StoreSource, RecordPath):
        try:
            found.append(scored(source_type, url, **dict(options))[0])
        except InputError as problem:
            found.append(str(problem))
    return found


def fill(url: str, seed: int = 5, traces: int = 420) -> None:
    """A store holding every shape the readers must agree on."""
    rng = random.Random(seed)
    backend = connect(url)
    pool = [f"d{n}" for n in range(60)] + ODD_IDS
    rows, labels = [], []
    for number in range(traces):
        query = f"q{number % 150}"
        ids = rng.sample(pool, rng.randint(1, 30))
        if rng.random() < 0.1:
            ids.append(ids[0])  # a duplicate, dropped and counted
        if number % 97 == 5:
            ids = []  # nothing retrieved
        if number % 89 == 7:
            ids = ["ok", ""]  # an empty ID: the validator's message
        attributes: dict[str, Any] = {
            "segment": rng.choice(["web", "app", "voice"]),
            "n": rng.randint(0, 3),
            "flag": rng.random() < 0.5,
            "ratio": rng.choice([0.5, 1.25, 2.0]),
        }
        if number % 5 == 0:
            attributes["nested"] = {"b": [1, "x"], "a": None}
        if number % 7 == 0:
            attributes["query_id"] = "not-this-one"  # the store's own column wins
        if number % 11 == 0:
            del attributes["segment"]
        if number % 13 == 0:
            attributes["note"] = 'line\nbreak "quoted" \\ \u00e9'
        if number % 17 == 0:
            # Labels carried by the trace itself: used when the labels table has none.
            attributes["relevance_scores"] = {ids[0] if ids else "z": 2}
        if number % 19 == 0:
            attributes["relevant_ids"] = ids[:2]
        variant = [None, "a", "b"][number % 3]
        if variant is None and number % 2:
            attributes["variant"] = "from-attributes"
        rows.append(
            TraceRow(
                trace_id=f"t{number}",
                query_id=query,
                recorded_at=START + timedelta(minutes=7 * number),
                variant=variant,
                retrieved_ids=ids,
                attributes=attributes,
            )
        )
    for number in range(150):
        if number % 10 == 3:
            continue  # unlabeled in the table
        for doc in rng.sample(pool, rng.randint(1, 6)):
            grade = float(rng.choice([0, 1, 2, 3, 0.5]))
            if number == 42:
                grade = 5000.0  # past the largest grade: the validator's message
            stamp = START - timedelta(days=rng.choice([1, 40, 400]))
            labels.append(
                LabelRow(f"q{number}", doc, grade, None if number % 9 == 0 else stamp, "test")
            )
    try:
        backend.insert_traces(rows)
        backend.upsert_labels(labels)
        backend.commit()
    finally:
        backend.close()


def scored(source_type: type[StoreSource], url: str, **options: Any) -> tuple[str, StoreSource]:
    window = options.pop("window", None)
    source = source_type(url, window, sample=options.pop("sample", None), seed=3)
    settings = Settings(resamples=50, seed=3, **options)
    evaluation = evaluate(source, METRICS, settings=settings, worst=5)
    return evaluation.to_json(per_query=True), source


CASES: dict[str, dict[str, Any]] = {
    "everything": {"on_invalid": "skip"},
    "segments": {"on_invalid": "skip", "segment_by": ("segment", "n", "flag", "variant", "nested")},
    "ratio segment": {"on_invalid": "skip", "segment_by": ("ratio", "note")},
    "window and variant": {
        "on_invalid": "skip",
        "window": Window(START + timedelta(hours=5), START + timedelta(hours=30), ("a",)),
    },
    "sample": {"on_invalid": "skip", "sample": 0.5, "segment_by": ("segment",)},
    # The store's own columns, carried in the lines only when asked for by name.
    "store columns as segments": {
        "on_invalid": "skip",
        "segment_by": ("trace_id", "timestamp"),
        "window": Window(START, START + timedelta(hours=4)),
    },
    "zero for no relevant": {"on_invalid": "skip", "empty_relevant": "zero"},
    "stale labels": {
        "on_invalid": "skip",
        "label_filter": LabelFilter(max_age=timedelta(days=100), as_of=START),
    },
}


@pytest.mark.parametrize("case", CASES)
def test_columnar_read_equals_the_record_path(store_url: str, case: str) -> None:
    fill(store_url)
    options = CASES[case]
    columnar, source = scored(StoreSource, store_url, **dict(options))
    reference, _ = scored(RecordPath, store_url, **dict(options))
    assert columnar == reference
    report = json.loads(columnar)
    assert report["summary"]["scored"] > 20
    # The columnar read was taken (with the stale-label filter, whose dates the lines do not
    # carry, every row is read again by key).
    if "label_filter" not in options:
        assert source._block_keys
    if not {"label_filter", "window", "sample"} & options.keys():
        assert report["summary"]["skipped"]["invalid"] >= 3
        assert report["summary"]["invalid_examples"]


def test_sampled_counts_and_rows_match(store_url: str) -> None:
    fill(store_url)
    _, columnar = scored(StoreSource, store_url, on_invalid="skip", sample=0.3)
    _, reference = scored(RecordPath, store_url, on_invalid="skip", sample=0.3)
    assert (columnar.stats.rows, columnar.stats.sampled_out) == (
        reference.stats.rows,
        reference.stats.sampled_out,
    )
    assert 0 < columnar.stats.sampled_out < columnar.stats.rows


def test_first_invalid_row_fails_with_the_record_paths_message(store_url: str) -> None:
    fill(store_url)
    messages = []
    for source_type in (StoreSource, RecordPath):
        with pytest.raises(InputError) as failure:
            scored(source_type, store_url)
        messages.append(str(failure.value))
    assert messages[0] == messages[1]
    assert "row " in messages[0]


def test_cli_store_eval_equals_the_record_path_per_query(
    rankgate: Rankgate, store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    fill(store_url)
    args = [
        "eval", store_url, "-m", ",".join(METRICS), "--no-config", "--format", "json",
        "--per-query", "--on-invalid", "skip", "--segment-by", "segment",
        "--since", "2026-11-30T03:00:00Z", "--until", "2026-12-01T12:00:00Z", "--variant", "b",
    ]  # fmt: skip
    columnar = rankgate(*args)
    assert columnar.code in (0, 1), columnar.err
    monkeypatch.setattr(StoreSource, "schema", RecordPath.schema)
    reference = rankgate(*args)
    assert columnar.out == reference.out
    assert columnar.json()["summary"]["read"] > 0


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'hand.db'}"


def _raw_insert(url: str, *rows: tuple[Any, ...]) -> None:
    path = url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as db:
        db.executemany("INSERT INTO rankgate_traces VALUES (?, ?, ?, ?, ?, ?)", rows)


def test_hand_edited_sqlite_rows_read_as_the_record_path_reads_them(sqlite_url: str) -> None:
    fill(sqlite_url, traces=60)
    stamp = "2026-11-30T23:00:00.000000Z"
    _raw_insert(
        sqlite_url,
        # Whitespace and line breaks between tokens: legal JSON, kept as written.
        ("h1", "q1", stamp, None, '[\n "d1",\n "d2"\n]', '{\n "segment": "web"\n}'),
        # JSON of the wrong shape: an object for the ranking, a list for the attributes.
        ("h2", "q2", stamp, None, '{"d1": 1}', "[1, 2]"),
        # Attributes left empty, a number where text belongs.
        ("h3", "q3", stamp, 7, '["d1"]', ""),
        ("h4", 12, stamp, None, '["d1", "d3"]', "null"),
    )
    for options in ({"on_invalid": "skip"}, {"on_invalid": "skip", "segment_by": ("segment",)}):
        columnar, _ = scored(StoreSource, sqlite_url, **dict(options))
        reference, _ = scored(RecordPath, sqlite_url, **dict(options))
        assert columnar == reference


@pytest.mark.parametrize(
    "attributes",
    [
        "{}",
        "{ \t}",
        '{"segment": "news"}',
        ' {"segment": "news"}\t',
        '{ "segment" : "}" , "n": 3 }',
        '{"segment": "a\\"}b", "nested": {"x": {}}}',
        '"{\\"segment\\": \\"web\\"}"',
        "[]",
        "{ }  ",
    ],
)
def test_attributes_spliced_into_the_line_read_as_the_record_path_reads_them(
    sqlite_url: str, attributes: str
) -> None:
    """The line takes the attributes' members as they are written: text the recorder writes
    (braces first and last) is spliced without trimming, anything else after trimming white
    space; an object with no member adds nothing, a value that is no object neither."""
    fill(sqlite_url, traces=40)
    stamp = "2026-11-30T23:00:00.000000Z"
    _raw_insert(
        sqlite_url,
        *((f"h{i}", f"q{i}", stamp, None, '["d1", "d2"]', attributes) for i in range(1, 4)),
    )
    for options in ({"on_invalid": "skip"}, {"on_invalid": "skip", "segment_by": ("segment",)}):
        columnar, _ = scored(StoreSource, sqlite_url, **dict(options))
        reference, _ = scored(RecordPath, sqlite_url, **dict(options))
        assert columnar == reference
    # The lines parsed: no row went to the validator (a null ranking), and each got its segment.
    import pyarrow as pa

    wanted = ["query_id", "retrieved_ids", "segment"]
    table = pa.Table.from_batches(list(StoreSource(sqlite_url).batches(columns=wanted)))
    assert table.column("retrieved_ids").to_pylist()[-3:] == [["d1", "d2"]] * 3
    parsed = json.loads(attributes)
    segment = parsed.get("segment") if isinstance(parsed, dict) else None
    assert table.column("segment").to_pylist()[-3:] == [segment] * 3


# Attributes a hand-made or damaged store may hold: JSON that is not, or is only up to a NUL byte;
# JSON nested deeper than the compiled check follows; escapes and controls of every kind.
HOSTILE_ATTRIBUTES = [
    '{"segment": "web"},"query_id":"forged",{"b": 2}',
    '{"segment": "web"}\x00,"query_id":"forged"}',
    '{"segment": "web\x00"}',
    "[" * 300 + "]" * 300,
    '{"segment": ' + "[" * 300 + "]" * 300 + "}",
    '{"segment": "\x01\x1f"}',
    '{"segment": "\\u00e9\\n\\"", "n": -0.5E-3}',
    '{"segment": 01}',
    '{"segment": 1.}',
    '{"segment": tru}',
    '{"segment": 1,}',
    '{"segment" 1}',
    '{"segment": "\\x"}',
    '{"segment": "web"',
    ' \r{"segment": "web"}\r ',
    "\x7f",
    '{"segment": "web", "n": ' + "1" * 5000 + "}",  # past Python's 4300-digit limit
    '{"segment": ' + "[" * 100_000 + "]" * 100_000 + "}",  # past any decoder's recursion
]


@pytest.mark.parametrize("reader", ["_sqlite_read", "ADBC"])
@pytest.mark.parametrize("attributes", HOSTILE_ATTRIBUTES, ids=range(len(HOSTILE_ATTRIBUTES)))
def test_hostile_attributes_read_as_the_record_path_reads_them(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch, reader: str, attributes: str
) -> None:
    """Attributes that are not one JSON value cannot add keys to a line: whichever reader
    writes the lines (``_sqlite_read.store_lines`` in C, or SQLite's SQL through ADBC), the
    report is the record path's."""
    from rankgate.store import columns

    _compiled_reader(reader == "_sqlite_read")
    monkeypatch.setattr(columns, "SQLITE_C_API", reader == "_sqlite_read")
    fill(sqlite_url, traces=40)
    stamp = "2026-11-30T23:00:00.000000Z"
    _raw_insert(sqlite_url, ("h1", "q1", stamp, None, '["d1", "d2"]', attributes))
    for options in ({"on_invalid": "skip"}, {"on_invalid": "skip", "segment_by": ("segment",)}):
        columnar, record_path = outcomes(sqlite_url, **options)
        assert columnar == record_path


def test_compiled_lines_equal_the_sql_lines(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``_sqlite_read.store_lines`` writes, byte for byte, the line SQLite's SQL writes
    (``_SQLITE_LINE``), in every combination of carried columns and ranking placement; it
    refuses (the line "!", for the validator) only JSON nested deeper than its check follows."""
    from rankgate.store import columns

    _compiled_reader(True)
    fill(sqlite_url, traces=200)
    stamp = "2026-11-30T23:00:00.000000Z"
    rows = [
        (f"h{i}", f"hostile-{i}", stamp, None, '["d1", "d2"]', text)
        for i, text in enumerate(HOSTILE_ATTRIBUTES)
    ]
    rows += [
        ("v1", 'q"\\\x01\x1f\x7f\u00e9', stamp, "v\t\n", '["a", "b"]', "{}"),
        ("v2", "q2", stamp, "a", '["a",', "{}"),  # a ranking that is no JSON
        ("v3", "q3", stamp, "a", 7, "{}"),  # a ranking that is no text
        (5, "q4", stamp, None, '["a"]', "{}"),  # a trace ID that is no text
    ]
    _raw_insert(sqlite_url, *rows)
    path = Path(sqlite_url.removeprefix("sqlite:///"))

    def lines(c_api: bool, names: list[str], apart: bool) -> list[Any]:
        monkeypatch.setattr(columns, "SQLITE_C_API", c_api)
        reader = columns.StoreReader(sqlite_url, "store", "sqlite", path, 1.0)
        try:
            found = []
            for batch in reader.traces(Window(), names, ranking_apart=apart):
                found += list(zip(*batch.to_pydict().values(), strict=True))
            return found
        finally:
            reader.close()

    for names in ([], ["trace_id", "timestamp", "variant"], ["variant"]):
        for apart in (True, False):
            compiled, sql = lines(True, names, apart), lines(False, names, apart)
            assert len(compiled) == len(sql) > 200
            assert sum(row[2] != "!\n" for row in compiled) > 200
            differ = {c[1] for c, s in zip(compiled, sql, strict=True) if c != s}
            # SQLite's json_valid follows nesting past the compiled check's 256 levels.
            assert differ == {"hostile-3", "hostile-4"}
            for c, s in zip(compiled, sql, strict=True):
                if c != s:
                    assert c[2] == "!\n" and s[2] != "!\n", (c, s)


def test_damaged_json_cannot_rewrite_a_trace(sqlite_url: str) -> None:
    """A ranking whose text is not one JSON value could, spliced into a line, set other keys; it
    is refused exactly as the record path refuses it."""
    fill(sqlite_url, traces=30)
    _raw_insert(
        sqlite_url,
        ("bad", "q1", "2026-11-30T23:00:00.000000Z", None, '["d1"],"query_id":"forged"', "{}"),
    )
    messages = []
    for source_type in (StoreSource, RecordPath):
        with pytest.raises(InputError) as failure:
            scored(source_type, sqlite_url, on_invalid="skip")
        messages.append(str(failure.value))
    assert messages[0] == messages[1]
    assert "trace 'bad'" in messages[0] and "stored JSON is damaged" in messages[0]


def test_own_sql_still_reads_records(rankgate: Rankgate, sqlite_url: str) -> None:
    fill(sqlite_url, traces=60)
    run = rankgate(
        "eval", sqlite_url, "--sql",
        "SELECT t.query_id, t.retrieved_ids, l.grades AS relevance_scores FROM rankgate_traces t "
        "JOIN (SELECT query_id, json_group_object(document_id, grade) AS grades "
        "FROM rankgate_labels GROUP BY query_id) l USING (query_id) WHERE t.rowid < 20",
        "-m", "ndcg@10", "--no-config", "--format", "json", "--on-invalid", "skip",
    )  # fmt: skip
    assert run.code in (0, 1), run.err
    assert run.json()["summary"]["read"] > 0


def test_rows_the_database_cannot_vouch_for_go_to_the_validator(sqlite_url: str) -> None:
    """Read as columns, the damaged ranking is a null (the validator's row), never forged
    labels; a line break inside a stored ranking (JSON white space) is read as json.loads reads
    it, and does not split the row."""
    import pyarrow as pa

    fill(sqlite_url, traces=30)
    _raw_insert(
        sqlite_url,
        # q3 has no labels: spliced as it is, this text would give it some.
        (
            "bad",
            "q3",
            "2026-11-30T23:00:00.000000Z",
            None,
            '["d1"],"relevance_scores":{"d1":3}',
            "{}",
        ),
        ("wrapped", "q2", "2026-11-30T23:30:00.000000Z", None, '[\n"d1"]', "{}"),
    )
    source = StoreSource(sqlite_url)
    wanted = ["query_id", "retrieved_ids", "relevance_scores"]
    table = pa.Table.from_batches(list(source.batches(columns=wanted)))
    assert table.num_rows == 32
    assert table.column("relevance_scores").to_pylist()[-2] is None
    assert table.column("retrieved_ids").to_pylist()[-2:] == [None, ["d1"]]
    (record,) = source.reread([31])
    assert record.value["trace_id"] == "wrapped" and record.value["retrieved_ids"] == ["d1"]
    assert str(record.location).endswith("row 32")


def _shuffle_labels(url: str) -> None:
    """Rewrite the labels table in a random row order: no query's labels together any more."""
    db = sqlite3.connect(url.split(":///", 1)[1])
    with db:
        db.execute("CREATE TEMP TABLE shuffled AS SELECT * FROM rankgate_labels ORDER BY random()")
        db.execute("DELETE FROM rankgate_labels")
        db.execute("INSERT INTO rankgate_labels SELECT * FROM shuffled")
    db.close()


def _compiled_reader(compiled: bool) -> None:
    """Skip a test of the compiled label read where ``_sqlite_read`` is not built (it needs
    SQLite's headers); CI builds it (RANKGATE_REQUIRE_NATIVE)."""
    from rankgate.store import columns

    if compiled and columns._sqlite_read is None and not os.environ.get("RANKGATE_REQUIRE_NATIVE"):
        pytest.skip("rankgate._sqlite_read is not built (SQLite's headers were not found)")
    if compiled:
        assert columns._sqlite_read is not None, "rankgate._sqlite_read must be built here"


@pytest.mark.parametrize("compiled", [True, False], ids=["_sqlite_read", "ADBC"])
@pytest.mark.parametrize("writer_meanwhile", [False, True])
def test_labels_read_in_two_halves_equal_the_record_path(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch, writer_meanwhile: bool, compiled: bool
) -> None:
    """Labels in no particular order, read in two halves on two connections (forced here: the
    store is small), give what the record path gives; when another connection commits during the
    read, the halves are dropped and the table is read once more on one connection. Both ways
    of reading the rows: SQLite's C API (``_sqlite_read``) and ADBC, where it is not built."""
    from rankgate.store import columns

    _compiled_reader(compiled)
    monkeypatch.setattr(columns, "SQLITE_C_API", compiled)
    fill(sqlite_url)
    _shuffle_labels(sqlite_url)
    monkeypatch.setattr(columns, "_SPLIT_LABELS_FROM", 1)
    reads: list[str] = []
    fetch = columns.StoreReader._fetch_table
    fetch_compiled = columns.StoreReader._compiled_sqlite_labels
    versions = iter(range(1000))

    def read(sql: str) -> None:
        if "FROM rankgate_labels WHERE" in sql:
            reads.append("half" if "rowid" in sql else "whole")

    def counted(self: Any, sql: str, params: list[Any], options: Any = None, **kinds: str) -> Any:
        read(sql)
        if sql == "PRAGMA data_version" and writer_meanwhile:
            import pyarrow as pa

            return pa.table({"v": [next(versions)]})
        return fetch(self, sql, params, options, **kinds)

    def counted_compiled(self: Any, sql: str, params: list[Any]) -> Any:
        assert compiled
        read(sql)
        return fetch_compiled(self, sql, params)

    monkeypatch.setattr(columns.StoreReader, "_fetch_table", counted)
    monkeypatch.setattr(columns.StoreReader, "_compiled_sqlite_labels", counted_compiled)
    for options in CASES.values():
        columnar, _ = scored(StoreSource, sqlite_url, **dict(options))
        reference, _ = scored(RecordPath, sqlite_url, **dict(options))
        assert columnar == reference
    assert "half" in reads
    assert ("whole" in reads) == writer_meanwhile


@pytest.mark.parametrize("compiled", [True, False], ids=["_sqlite_read", "ADBC"])
@pytest.mark.parametrize("later", [False, True], ids=["first batch", "later batch"])
@pytest.mark.parametrize(
    "odd",
    [
        ("q1", "d9", "not a number"),  # text where the grade's REAL affinity keeps no number
        ("q1", b"d9", 2.0),  # a BLOB document ID
        (b"q1", "d9", 2.0),  # a BLOB query ID
        ("q2", "d8", b"\x01"),  # a BLOB grade
        ("q1", 7, 2.0),  # an INTEGER document ID (TEXT affinity keeps it text: "7")
        ("q1", "d9", 3),  # an INTEGER grade
    ],
    ids=[
        "text grade",
        "blob document",
        "blob query",
        "blob grade",
        "integer document",
        "integer grade",
    ],
)
def test_labels_of_other_types_read_as_the_record_path_reads_them(
    sqlite_url: str,
    monkeypatch: pytest.MonkeyPatch,
    odd: tuple[Any, ...],
    later: bool,
    compiled: bool,
) -> None:
    """A value of another type than the columns' own, in the first rows read or later ones,
    must not change what the run reports: through ADBC, which reads without casts first
    (``_SQLITE_LABELS_BARE``), and through ``_sqlite_read``, which converts each value itself."""
    from rankgate.store import columns

    _compiled_reader(compiled)
    monkeypatch.setattr(columns, "SQLITE_C_API", compiled)
    fill(sqlite_url)
    monkeypatch.setattr(columns, "_SQLITE_LABEL_BATCH_ROWS", 8)
    path = sqlite_url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as db:
        if not later:  # the odd row first in rowid order
            db.execute("CREATE TEMP TABLE kept AS SELECT * FROM rankgate_labels")
            db.execute("DELETE FROM rankgate_labels")
        db.execute(
            "INSERT OR REPLACE INTO rankgate_labels (query_id, document_id, grade) VALUES (?, ?, ?)",
            odd,
        )
        if not later:
            db.execute("INSERT OR IGNORE INTO rankgate_labels SELECT * FROM kept")
        count = db.execute("SELECT count(*) FROM rankgate_labels").fetchone()[0]
    assert count > 3 * 8  # the odd row is read in a batch of its own kind

    def outcome(source_type: type[StoreSource], options: dict[str, Any]) -> str:
        try:
            return scored(source_type, sqlite_url, **dict(options))[0]
        except StoreError as problem:  # a BLOB grade: the record path cannot read it either
            return str(problem)

    for options in ({"on_invalid": "skip"}, {"on_invalid": "skip", "segment_by": ("segment",)}):
        assert outcome(StoreSource, options) == outcome(RecordPath, options)


@pytest.mark.parametrize("compiled", [True, False], ids=["_sqlite_read", "ADBC"])
@pytest.mark.parametrize("document", [1.5, 1e300, -0.0, 12345678901234567], ids=repr)
def test_labels_of_a_table_without_text_affinity_keep_their_text(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch, compiled: bool, document: float
) -> None:
    """A hand-made labels table whose document column has no declared type can hold a REAL or
    INTEGER document ID: it is read as SQLite's cast writes it ('1.5'), as the record path
    reads it."""
    from rankgate.store import columns

    _compiled_reader(compiled)
    monkeypatch.setattr(columns, "SQLITE_C_API", compiled)
    fill(sqlite_url, traces=30)
    path = sqlite_url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as db:
        db.execute("ALTER TABLE rankgate_labels RENAME TO kept")
        db.execute(
            "CREATE TABLE rankgate_labels (query_id TEXT NOT NULL, document_id NOT NULL, "
            "grade REAL NOT NULL, labeled_at TEXT, source TEXT, "
            "PRIMARY KEY (query_id, document_id))"
        )
        db.execute("INSERT INTO rankgate_labels VALUES ('q1', ?, 2.0, NULL, NULL)", (document,))
        db.execute("INSERT INTO rankgate_labels SELECT * FROM kept WHERE query_id <> 'q1'")
        db.execute("DROP TABLE kept")
        (cast,) = db.execute(
            "SELECT CAST(document_id AS TEXT) FROM rankgate_labels WHERE query_id = 'q1'"
        ).fetchone()
    assert cast == {1.5: "1.5", 1e300: "1.0e+300"}.get(document, cast)
    reader = columns.StoreReader(sqlite_url, "store", "sqlite", Path(path), 1.0)
    try:
        table = reader.labels(Window(), narrow=False, listed=True).table()
    finally:
        reader.close()
    (q1,) = [row for row in table.to_pylist() if row["query_id"] == "q1"]
    assert q1["relevance_scores"] == [(cast, 2.0)]
    columnar, _ = scored(StoreSource, sqlite_url, on_invalid="skip")
    reference, _ = scored(RecordPath, sqlite_url, on_invalid="skip")
    assert columnar == reference


def test_a_narrow_window_whose_labels_are_all_in_one_half(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Read in two halves, a half holding none of a narrow window's labels comes back with other
    column types than the half that does: the read still gives the window's labels."""
    from rankgate.store import columns

    fill(sqlite_url, traces=30)
    monkeypatch.setattr(columns, "_SPLIT_LABELS_FROM", 1)
    path = sqlite_url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as db:
        first_query = db.execute(
            "SELECT query_id FROM rankgate_labels ORDER BY rowid LIMIT 1"
        ).fetchone()[0]
        last = db.execute("SELECT max(rowid) FROM rankgate_labels").fetchone()[0]
        # The window's one trace asks the query labeled first; its labels all lie in the first
        # half of the rowids once a far label makes the second half its own.
        db.execute(
            "INSERT INTO rankgate_labels (rowid, query_id, document_id, grade) "
            "VALUES (?, 'far', 'd1', 1.0)",
            (last * 10 + 1000,),
        )
        db.execute(
            "INSERT INTO rankgate_traces VALUES "
            "('late', ?, '2030-01-01T00:00:00.000000Z', NULL, '[\"d1\"]', '{}')",
            (first_query,),
        )
    window = Window(since=datetime(2029, 12, 31, tzinfo=UTC))
    for read in ("compiled", "bare", "guarded"):
        if read == "compiled" and columns._sqlite_read is None:
            continue
        monkeypatch.setattr(columns, "SQLITE_C_API", read == "compiled")
        if read == "guarded":  # the guarded read splits the same way
            monkeypatch.setattr(columns, "_SQLITE_LABELS_BARE", columns._SQLITE_LABELS)
        reader = columns.StoreReader(sqlite_url, "store", "sqlite", Path(path), 1.0)
        try:
            table = reader.labels(window, narrow=True, listed=True).table()
        finally:
            reader.close()
        assert table.column("query_id").to_pylist() == [first_query]


@pytest.mark.parametrize("compiled", [True, False], ids=["_sqlite_read", "ADBC"])
def test_a_label_read_that_fails_names_the_store_in_one_line(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch, compiled: bool
) -> None:
    """A lock held past the wait, and a labels table that is gone, are the record path's
    one-line errors naming the store, whichever way the rows are read."""
    from rankgate.store import columns

    _compiled_reader(compiled)
    monkeypatch.setattr(columns, "SQLITE_C_API", compiled)
    fill(sqlite_url, traces=30)
    path = sqlite_url.removeprefix("sqlite:///")
    reader = columns.StoreReader(sqlite_url, "the-store", "sqlite", Path(path), 0.2)
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        holder.execute("PRAGMA locking_mode=EXCLUSIVE")
        holder.execute("BEGIN EXCLUSIVE")
        if compiled:
            # (The ADBC reader's connection, open before the lock was taken, still reads the
            # WAL; ``_sqlite_read`` opens one of its own, which the lock keeps out.)
            started = time.monotonic()
            with pytest.raises(StoreUnavailable) as refused:
                reader.labels(Window(), narrow=False)
            assert str(refused.value) == (
                "the-store: locked by another process; gave up after waiting 0.2 s"
            )
            assert time.monotonic() - started < 10
        holder.execute("ROLLBACK")
        holder.close()  # lets the lock go
        dropper = sqlite3.connect(path)
        with dropper:
            dropper.execute("DROP TABLE rankgate_labels")
        dropper.close()
        with pytest.raises(StoreError) as failed:
            reader.labels(Window(), narrow=False)
        message = str(failed.value)
        assert message.startswith("the-store: query failed: ") and "\n" not in message
        assert "no such table: rankgate_labels" in message
    finally:
        holder.close()
        reader.close()


def _locks_held(path: Path) -> list[str]:
    """The POSIX locks this process holds on a SQLite database or its shared-memory file."""
    inodes = {os.stat(name).st_ino for name in (path, Path(f"{path}-shm")) if os.path.exists(name)}
    held = []
    with open("/proc/locks") as locks:
        for line in locks:
            parts = line.split()
            if parts[4] == str(os.getpid()) and int(parts[5].split(":")[2]) in inodes:
                held.append(" ".join(parts[1:4]))
    return held


@pytest.mark.skipif(not os.path.exists("/proc/locks"), reason="no /proc/locks to read locks from")
def test_a_streaming_read_keeps_its_locks_when_another_connection_closes(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the traces stream, the record path (Python's sqlite3) and a label read each open
    and close a connection to the same store. With two copies of SQLite in the process (ADBC's
    driver carries its own), a close by one drops the locks the other's open reads hold, and a
    writer may then change pages under the stream; through ``_sqlite_read``, which links the
    system's SQLite as Python's sqlite3 does, the stream keeps them."""
    from rankgate.store import columns

    _compiled_reader(True)
    fill(sqlite_url, traces=3000)
    path = Path(sqlite_url.removeprefix("sqlite:///"))
    monkeypatch.setattr(columns, "_SQLITE_BATCH_ROWS", 100)
    reader = columns.StoreReader(sqlite_url, "store", "sqlite", path, 1.0)
    traces = reader.traces(Window(), ["query_id"], ranking_apart=True)
    try:
        next(traces)  # the statement is open: its read holds locks
        streaming = _locks_held(path)
        assert streaming
        other = columns.StoreReader(sqlite_url, "store", "sqlite", path, 1.0)
        other.labels(Window(), narrow=False)
        other.close()
        record_path = sqlite3.connect(path)
        record_path.execute("SELECT count(*) FROM rankgate_traces").fetchone()
        record_path.close()
        assert _locks_held(path) == streaming
    finally:
        traces.close()
        reader.close()


@pytest.mark.parametrize("reader", ["_sqlite_read", "ADBC"])
def test_a_label_without_a_document_reads_as_the_record_path_reads_it(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch, reader: str
) -> None:
    """A hand-made labels table without NOT NULL can hold a label with no document: the run
    stops with the record path's own message, on the columnar read as on the record path (the
    columnar read once left such a label out and scored the query)."""
    from rankgate.store import columns

    _compiled_reader(reader == "_sqlite_read")
    monkeypatch.setattr(columns, "SQLITE_C_API", reader == "_sqlite_read")
    fill(sqlite_url, traces=30)
    path = sqlite_url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as db:
        db.execute("ALTER TABLE rankgate_labels RENAME TO kept")
        db.execute(
            "CREATE TABLE rankgate_labels (query_id TEXT NOT NULL, document_id TEXT, "
            "grade REAL NOT NULL, labeled_at TEXT, source TEXT)"
        )
        db.execute("INSERT INTO rankgate_labels SELECT * FROM kept")
        db.execute("INSERT INTO rankgate_labels VALUES ('q1', NULL, 2.0, NULL, NULL)")
        db.execute("DROP TABLE kept")
    columnar, record_path = outcomes(sqlite_url, on_invalid="skip")
    assert columnar == record_path
    assert "stored JSON is damaged" in columnar


def test_the_window_is_counted_when_first_asked_for(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``StoreSource.total`` counts the window once, on first use, and exactly (variants
    included): a run that sizes nothing by it never pays for the count, which reads every row
    of a window filtered by variant."""
    from rankgate.store.backends import SQLiteBackend

    fill(sqlite_url, traces=120)
    counted: list[Window] = []
    count = SQLiteBackend.count

    def spy(self: SQLiteBackend, window: Window) -> int:
        counted.append(window)
        return count(self, window)

    monkeypatch.setattr(SQLiteBackend, "count", spy)
    window = Window(START + timedelta(hours=1), START + timedelta(hours=9), ("a",))
    source = StoreSource(sqlite_url, window)
    assert counted == []
    with sqlite3.connect(sqlite_url.removeprefix("sqlite:///")) as db:
        (expected,) = db.execute(
            "SELECT count(*) FROM rankgate_traces WHERE recorded_at >= ? AND recorded_at < ? "
            "AND variant = 'a'",
            ("2026-11-30T01:00:00.000000Z", "2026-11-30T09:00:00.000000Z"),
        ).fetchone()
    assert 0 < expected < 120
    assert source.total == expected
    assert source.total == expected
    assert counted == [window]


@pytest.mark.parametrize(
    "command",
    [
        ["eval"],
        ["compare", "--variant-field", "variant", "--baseline", "a", "--candidate", "b"],
    ],
    ids=["eval", "unpaired-compare"],
)
@pytest.mark.parametrize("store", ["sqlite", "postgresql"])
def test_a_store_is_read_and_scored_without_pandas(
    request: pytest.FixtureRequest, tmp_path: Path, command: list[str], store: str
) -> None:
    """pyarrow imports pandas for ``pa.array`` of numpy or of a list, ``np.asarray`` of an Arrow
    array and any ``pa.scalar``: 0.2-0.4 s of a run. The store's reader (a window's bound values
    included), its label join and the split by variant use ``fast``'s helpers instead, and a run
    that asks for no pandas gets none."""
    import subprocess
    import sys

    url = request.getfixturevalue("sqlite_url" if store == "sqlite" else "fresh_postgres")
    rng = random.Random(3)
    backend = connect(url)
    try:
        backend.insert_traces(
            [
                TraceRow(
                    f"t{number}",
                    f"q{number}",
                    START + timedelta(minutes=number),
                    "ab"[number % 2],
                    [f"d{n}" for n in rng.sample(range(80), 20)],
                    {"segment": "web"},
                )
                for number in range(300)
            ]
        )
        backend.upsert_labels(
            [
                LabelRow(f"q{number}", f"d{n}", float(rng.randint(0, 3)), START, "test")
                for number in range(300)
                for n in rng.sample(range(80), 8)
            ]
        )
        backend.commit()
    finally:
        backend.close()
    out = tmp_path / "report.json"
    argv = [command[0], url, *command[1:], "--metric", "ndcg@10", "--metric", "mrr"]
    argv += ["--since", "2026-11-30T00:10:00Z", "--until", "2026-12-02T00:00:00Z"]
    argv += ["--format", "json", "--output", str(out), "--no-progress", "--no-config"]
    code = (
        "import sys\n"
        "from rankgate.cli import main\n"
        f"code = main({argv!r})\n"
        "print(code, 'pandas' in sys.modules)\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    verdict, pandas_loaded = run.stdout.splitlines()[-1].split()
    assert verdict in {"0", "1"}, run.stderr
    assert pandas_loaded == "False"
    assert json.loads(out.read_text())
