"""A PostgreSQL store read with rankgate's compiled helpers (labels by ``_pg_read``'s COPY, trace
lines by ``_sqlite_read.store_lines``) gives what ADBC's read alone and the record path give:
values, counts and messages, for rows a hand or a hostile writer put there."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
from tests.store.test_store_arrow import START, fill, outcomes, scored

from rankgate.store import StoreSource, Window
from rankgate.store.backends import StoreError, StoreUnavailable

# "halves": compiled, a labels table of any size read in two halves of its pages at once.
READS = ["compiled", "halves", "ADBC"]


def _use(monkeypatch: pytest.MonkeyPatch, read: str) -> None:
    """Read as built, or through ADBC alone; the compiled modules must be built where CI runs."""
    from rankgate.store import columns

    compiled = read in ("compiled", "halves")
    if read == "halves":
        monkeypatch.setattr(columns, "_SPLIT_LABEL_PAGES", 1)
    if compiled and (columns._pg_read is None or columns._sqlite_read is None):
        if os.environ.get("RANKGATE_REQUIRE_NATIVE"):
            pytest.fail("rankgate._pg_read and rankgate._sqlite_read must be built here")
        pytest.skip("rankgate._pg_read is not built (libpq's headers were not found)")
    monkeypatch.setattr(columns, "POSTGRES_C_API", compiled)


def _execute(url: str, *statements: str | tuple[str, tuple[Any, ...]]) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as connection:
        for statement in statements:
            if isinstance(statement, tuple):
                connection.execute(statement[0], statement[1])
            else:
                connection.execute(statement)


_INSERT = (
    "INSERT INTO rankgate_traces (trace_id, query_id, recorded_at, variant, retrieved_ids, "
    "attributes) VALUES (%s, %s, %s, %s, %s, %s::jsonb)"
)
_STAMP = "2026-11-30T23:00:00Z"

# Rows only a hand or another program writes: IDs with the ranking's separator, control
# characters and quotes; attributes of every JSON type, nested past the line writer's depth;
# a time whose year the line does not write (the record path's driver reads years 1-9999 only,
# so a later one fails both reads alike); arrays of two dimensions and with a NULL element.
HOSTILE_ROWS: list[tuple[Any, ...]] = [
    ("h1", 'q"\\\x01\x1f\x7f\u00e9', _STAMP, "v\t\n", ["a", "b"], '{"segment": "web"}'),
    ("h2", "q2", _STAMP, None, ["a", "b\x1fc"], '{"segment": "app"}'),
    ("h3", "q3", _STAMP, "a", ["a", None], "{}"),
    ("h4", "q4", _STAMP, "b", "{{a,b},{c,d}}", '{"segment": "web"}'),
    ("h5", "q5", "0500-06-01T00:00:00Z", "a", ["a"], "{}"),
    ("h7", "q7", _STAMP, "a", ["a", "b"], '{"segment": ' + "[" * 300 + "]" * 300 + "}"),
    ("h8", "q8", _STAMP, "a", ["a", "b"], "[1, 2]"),
    ("h9", "q9", _STAMP, "a", ["a", "b"], '"text"'),
    ("h10", "q10", _STAMP, "a", ["a", "b"], '{"segment": "\\u00e9\\n\\"", "n": -0.5E-3}'),
    ("h11", "q11", _STAMP, "a", [], '{"relevance_scores": {"a": 2}}'),
    ("h12", "q12", _STAMP, None, ["d\u6587", "a"], '{"variant": "from-attributes"}'),
]


@pytest.mark.parametrize("read", READS)
def test_hostile_postgres_rows_read_as_the_record_path_reads_them(
    fresh_postgres: str, monkeypatch: pytest.MonkeyPatch, read: str
) -> None:
    _use(monkeypatch, read)
    fill(fresh_postgres, traces=80)
    _execute(fresh_postgres, *[(_INSERT, row) for row in HOSTILE_ROWS])
    cases: list[dict[str, Any]] = [
        {"on_invalid": "skip"},
        {"on_invalid": "skip", "segment_by": ("segment", "variant", "trace_id", "timestamp")},
        {},  # the first invalid row stops the run with the record path's message
    ]
    for options in cases:
        columnar, record_path = outcomes(fresh_postgres, **options)
        assert columnar == record_path, options
    report = json.loads(scored(StoreSource, fresh_postgres, on_invalid="skip")[0])
    summary = report["summary"]
    assert summary["read"] == 80 + len(HOSTILE_ROWS) and summary["scored"] > 60
    examples = " ".join(summary["invalid_examples"])
    for words in ("got null", "got list", "nested deeper than 64 levels"):
        assert words in examples
    assert report["summary"]["scored"] > 20


def _label_tables(url: str, monkeypatch: pytest.MonkeyPatch, read: str) -> list[Any]:
    from rankgate.store import columns

    _use(monkeypatch, read)
    found = []
    windows = [
        (Window(), False, False),
        (Window(), False, True),
        (Window(START, START + timedelta_hours(20), ("a",)), True, False),
        (Window(START + timedelta_hours(2), None), True, True),
    ]
    for window, narrow, listed in windows:
        reader = columns.StoreReader(url, "store", "postgresql", None, 1.0)
        try:
            groups = reader.labels(window, narrow=narrow, listed=listed)
        finally:
            reader.close()
        found.append(groups.table().to_pylist())
    return found


def timedelta_hours(hours: int) -> Any:
    from datetime import timedelta

    return timedelta(hours=hours)


def test_postgres_labels_read_by_copy_equal_adbc_read(
    fresh_postgres: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The label groups, in every window and order, are ADBC's, for IDs holding the ranking's
    separator, line breaks, quotes and text outside ASCII, and a long one."""
    fill(fresh_postgres, traces=120)
    odd = ["d\x1fe", "d\nl", 'd"q', "d\u00e9\u6587", "x" * 5000, " "]
    _execute(
        fresh_postgres,
        *[
            (
                "INSERT INTO rankgate_labels (query_id, document_id, grade) VALUES (%s, %s, %s)",
                (query, document, grade),
            )
            for query in ("q1", "q\x1f\u00e9", "q 2")
            for document, grade in zip(odd, [0.0, 1.0, 2.5, 3.0, -1.0, 1e-300], strict=True)
        ],
    )
    compiled = _label_tables(fresh_postgres, monkeypatch, "compiled")
    halves = _label_tables(fresh_postgres, monkeypatch, "halves")
    adbc = _label_tables(fresh_postgres, monkeypatch, "ADBC")
    assert compiled == adbc
    assert halves == adbc
    assert all(len(table) > 20 for table in compiled)
    everything = {row["query_id"]: dict(row["relevance_scores"]) for row in compiled[0]}
    assert everything["q\x1f\u00e9"]["x" * 5000] == -1.0


@pytest.mark.parametrize(
    "alteration",
    [
        "ALTER TABLE rankgate_labels ALTER COLUMN grade TYPE real",
        "ALTER TABLE rankgate_labels ALTER COLUMN grade TYPE integer USING round(grade)::int",
        "ALTER TABLE rankgate_labels ALTER COLUMN grade DROP NOT NULL; "
        "UPDATE rankgate_labels SET grade = NULL WHERE query_id = 'q1'",
    ],
    ids=["real", "integer", "null grade"],
)
def test_labels_of_another_shape_are_read_as_the_record_path_reads_them(
    fresh_postgres: str, monkeypatch: pytest.MonkeyPatch, alteration: str
) -> None:
    """A labels table altered by hand is not what ``_pg_read`` converts: it says so, and the
    general read takes the rows, with the record path's values or message."""
    from rankgate.store import columns

    _use(monkeypatch, "compiled")
    fill(fresh_postgres, traces=60)
    _execute(fresh_postgres, alteration)
    refused = []
    copy_labels = columns._pg_read.copy_labels

    def watched(*args: Any) -> Any:
        try:
            return copy_labels(*args)
        except columns._pg_read.Unsupported:
            refused.append(args)
            raise

    monkeypatch.setattr(columns._pg_read, "copy_labels", watched)
    columnar, record_path = outcomes(fresh_postgres, on_invalid="skip")
    assert columnar == record_path
    assert refused


def test_a_postgres_label_read_that_fails_is_one_line(
    fresh_postgres: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A labels table that is gone, a server that does not answer and a connection that is lost
    are one-line errors naming the store, its password masked."""
    from rankgate.store import columns

    _use(monkeypatch, "compiled")
    fill(fresh_postgres, traces=30)
    reader = columns.StoreReader(fresh_postgres, "the-store", "postgresql", None, 1.0)
    try:
        _execute(fresh_postgres, "DROP TABLE rankgate_labels")
        with pytest.raises(StoreError) as failed:
            reader.labels(Window(), narrow=False)
        message = str(failed.value)
        assert message.startswith("the-store: query failed: ") and "\n" not in message
        assert 'relation "rankgate_labels" does not exist' in message
        assert not isinstance(failed.value, StoreUnavailable)
    finally:
        reader.close()
    secret = "s3cr3t-word"
    gone = columns.StoreReader.__new__(columns.StoreReader)
    gone.url, gone.name = f"postgresql://someone:{secret}@127.0.0.1:1/db", "the-store"
    with pytest.raises(columns._pg_read.Error) as refused:
        columns._pg_read.copy_labels(gone.url, (), ("SELECT 1",))
    state, text, connected = refused.value.args
    assert not connected and "Connection refused" in text
    problem = gone._postgres_problem(state, f"{text} for {gone.url} password={secret}", connected)
    assert isinstance(problem, StoreUnavailable)
    assert str(problem).startswith("the-store: unavailable (") and secret not in str(problem)
    lost = gone._postgres_problem("57P01", "terminating connection", True)
    assert isinstance(lost, StoreUnavailable)


def test_the_store_size_is_the_planners_estimate_once_analyzed(fresh_postgres: str) -> None:
    """Deciding which labels a window needs reads the store's size: counted before the table
    was ever analyzed, PostgreSQL's estimate after (a count of a year of traces reads them all)."""
    from rankgate.store.backends import connect

    fill(fresh_postgres, traces=90)
    backend = connect(fresh_postgres)
    try:
        assert backend.store_size() == 90  # never analyzed: counted
        _execute(
            fresh_postgres,
            "INSERT INTO rankgate_traces SELECT 'x' || trace_id, query_id, "
            "recorded_at, variant, retrieved_ids, attributes FROM rankgate_traces",
            "ANALYZE",
        )
        _execute(fresh_postgres, "DELETE FROM rankgate_traces WHERE trace_id LIKE 'x%'")
        assert backend.store_size() == 180  # the statistics, not a count (90 rows now)
    finally:
        backend.close()
