"""Trace stores under hostile conditions (issue 15): a lock held by another process, a damaged
schema table, a database that is not rankgate's, passwords a driver would echo, URLs of every
shape. Locks are taken by a real second process; every refusal is one line and exit 2.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from rankgate.errors import RankgateError
from rankgate.store import StoreSource, TraceRecorder, Window, is_store_url
from rankgate.store.backends import (
    StoreError,
    StoreUnavailable,
    connect,
    describe_error,
    redact_url,
)

ROOT = Path(__file__).parents[2]
REQUIRED = os.environ.get("RANKGATE_REQUIRE_SERVICES") == "1"  # as conftest.py reads it
EXAMPLES = ROOT / "examples"
Rankgate = Callable[..., Any]  # the `rankgate` fixture: runs the CLI in-process

# The second process: take the store's write lock, say so, hold it until the given seconds pass
# or the test says so (a line on stdin), then let go.
_HOLD = """
import select, sys, time
seconds = float(sys.argv[3])
if sys.argv[1] == "sqlite":
    import sqlite3
    connection = sqlite3.connect(sys.argv[2], isolation_level=None)
    connection.execute("BEGIN IMMEDIATE")
else:
    import psycopg
    connection = psycopg.connect(sys.argv[2])
    connection.execute("LOCK TABLE rankgate_traces, rankgate_labels IN EXCLUSIVE MODE")
print("locked", flush=True)
select.select([sys.stdin], [], [], seconds)
connection.rollback()
"""


@contextmanager
def lock_held(url: str, seconds: float) -> Iterator[None]:
    """Another process holds the store's write lock for ``seconds`` from when this yields, or
    until the block ends, whichever comes first."""
    if url.startswith("sqlite"):
        dialect, target = "sqlite", url[len("sqlite:///") :]
    else:
        dialect, target = "postgresql", url
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD, dialect, target, str(seconds)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        if holder.stdout.readline().strip() != "locked":
            _, problem = holder.communicate(timeout=30)
            raise AssertionError(f"the lock holder did not start: {problem}")
        yield
    finally:
        # communicate() sends the release line (if the holder still listens) and reaps it.
        _, problem = holder.communicate("release\n", timeout=30)
    assert holder.returncode == 0, problem


def stored_traces(url: str) -> int:
    return sum(1 for _ in StoreSource(url, Window()))


def losses(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "rankgate.recorder"]


# --- 1. the recorder under another process's lock ------------------------------------------------


def test_recorder_waits_out_a_lock_shorter_than_its_bound(
    store_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    recorder = TraceRecorder(store_url, batch_size=8, flush_interval=0.01, retry_seconds=20)
    try:
        with lock_held(store_url, 1.5):
            started = time.monotonic()
            for number in range(30):
                recorder.record(f"q{number}", ["a", "b"])
            recorder.label("q1", "a", 2)
            assert recorder.flush(timeout=30)
            # The lock really kept the writer out until the second process let go.
            assert time.monotonic() - started > 1.0
    finally:
        recorder.close()
    assert recorder.stats.traces_written == 30 and recorder.stats.labels_written == 1
    assert recorder.stats.dropped == recorder.unwritten == 0
    assert losses(caplog) == []
    assert stored_traces(store_url) == 30


def test_recorder_counts_what_a_lock_longer_than_its_bound_keeps_out(
    store_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="rankgate.recorder")
    recorder = TraceRecorder(store_url, batch_size=5, flush_interval=0.01, retry_seconds=0.6)
    try:
        with lock_held(store_url, 60):
            started = time.monotonic()
            for number in range(10):
                recorder.record(f"held-{number}", ["a"])
            assert recorder.flush(timeout=30)
            # Waited out the bound, and given up soon after it, not after minutes.
            assert 0.6 <= time.monotonic() - started < 4
            assert recorder.unwritten == recorder.stats.unwritten == 10
            assert recorder.stats.dropped == 10 and recorder.stats.traces_written == 0
            for number in range(10, 15):
                recorder.record(f"held-{number}", ["a"])
            assert recorder.flush(timeout=30)
            assert recorder.unwritten == 15
        # Once the lock is gone, the recorder writes again on its own.
        for number in range(3):
            recorder.record(f"after-{number}", ["a"])
        assert recorder.flush(timeout=30)
    finally:
        recorder.close()
    assert recorder.stats.traces_written == 3
    assert recorder.stats.traces_written + recorder.stats.dropped == recorder.stats.traces_queued
    # Counted every time, logged once, naming the store as given and the counter.
    (line,) = losses(caplog)
    assert "stats.unwritten" in line and redact_url(store_url) in line
    assert stored_traces(store_url) == 3


def test_a_recorder_cannot_start_on_a_store_locked_past_its_bound(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'new.db'}"
    with lock_held(url, 60), pytest.raises(StoreUnavailable) as refused:
        TraceRecorder(url, retry_seconds=0.3)
    assert isinstance(refused.value, RankgateError)
    assert str(refused.value).startswith(f"{url}: locked by another process")


# --- 2. trace import and label import under the lock ---------------------------------------------


def test_import_waits_for_a_short_lock(rankgate: Rankgate, store_url: str) -> None:
    assert rankgate("store", "init", store_url).code == 0
    with lock_held(store_url, 1.5):
        imported = rankgate("trace", "import", EXAMPLES / "traces.jsonl", store_url)
        labels = rankgate("label", "import", EXAMPLES / "labels.jsonl", "--store", store_url)
    assert imported.code == 0, imported.err
    assert imported.out.startswith(f"{store_url}: 400 records read")
    assert labels.code == 0 and "1,707 judgments" in labels.out, labels.err
    assert stored_traces(store_url) == 400


def test_import_under_a_long_lock_fails_in_one_line(rankgate: Rankgate, store_url: str) -> None:
    assert rankgate("store", "init", store_url).code == 0
    with lock_held(store_url, 60):
        for command in (
            ("trace", "import", EXAMPLES / "traces.jsonl"),
            ("label", "import", EXAMPLES / "labels.jsonl"),
        ):
            started = time.monotonic()
            failed = rankgate(*command, "--store", store_url, "--lock-timeout", "0.5")
            assert time.monotonic() - started < 4
            failed.one_line_error(f"{store_url}: locked by another", "--lock-timeout")
    assert stored_traces(store_url) == 0
    # Running it again once the lock is gone is all it takes.
    assert rankgate("trace", "import", EXAMPLES / "traces.jsonl", store_url).code == 0
    assert stored_traces(store_url) == 400


# --- 3. a damaged schema table -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        ("INSERT INTO rankgate_schema (version) VALUES (1)", "holds 2 versions (1, 1)"),
        ("UPDATE rankgate_schema SET version = 0", "holds version 0"),
        ("DELETE FROM rankgate_schema; INSERT INTO rankgate_schema VALUES (1), (2)", "2 versions"),
    ],
)
def test_a_schema_table_that_is_not_one_version_is_refused(
    rankgate: Rankgate, store_url: str, damage: str, expected: str
) -> None:
    rankgate("trace", "import", EXAMPLES / "traces.jsonl", store_url)
    _run_sql(store_url, damage)
    for command in (
        ("eval", store_url, "--no-config"),
        ("trace", "import", EXAMPLES / "traces.jsonl", store_url),
        ("store", "info", store_url),
        ("store", "init", store_url),
    ):
        rankgate(*command).one_line_error(store_url, expected)


def test_a_schema_version_that_is_not_a_number_is_refused(
    rankgate: Rankgate, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'odd.db'}"
    rankgate("store", "init", url)
    _run_sql(url, "UPDATE rankgate_schema SET version = 'two'")
    rankgate("eval", url, "--no-config").one_line_error("holds version 'two'")
    rankgate("trace", "import", EXAMPLES / "traces.jsonl", url).one_line_error("'two'")
    with pytest.raises(StoreError):
        TraceRecorder(url)


def _run_sql(url: str, script: str) -> None:
    if url.startswith("sqlite"):
        with sqlite3.connect(url[len("sqlite:///") :]) as connection:
            connection.executescript(script)
        connection.close()
        return
    import psycopg

    with psycopg.connect(url, autocommit=True) as connection:
        for statement in script.split(";"):
            connection.execute(statement)


# --- 4. --sql on any database --------------------------------------------------------------------

SEARCHES = [
    ("q1", '["a", "b", "c"]', '{"a": 1}', "2026-11-30T01:00:00Z"),
    ("q2", '["x", "y"]', '{"y": 2}', "2026-11-30T02:00:00Z"),
    ("q3", '["m"]', '{"n": 1}', "2026-11-30T03:00:00Z"),
]
OWN_SQL = "SELECT qid AS query_id, ids AS retrieved_ids, grades AS relevance_scores FROM searches"
REPORT = ["-m", "mrr", "--no-config", "--format", "json"]


def own_sqlite(tmp_path: Path) -> str:
    path = tmp_path / "own.db"
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE searches (qid TEXT, ids TEXT, grades TEXT, at TEXT)")
        connection.executemany("INSERT INTO searches VALUES (?, ?, ?, ?)", SEARCHES)
    connection.close()
    return f"sqlite:///{path}"


def test_own_sql_reads_a_database_rankgate_never_wrote(rankgate: Rankgate, tmp_path: Path) -> None:
    url = own_sqlite(tmp_path)
    scored = rankgate("eval", url, *REPORT, "--sql", OWN_SQL)
    assert scored.code == 0, scored.err
    assert scored.json()["summary"]["read"] == 3
    assert scored.json()["metrics"]["mrr"] == pytest.approx((1 + 1 / 2 + 0) / 3)
    # Reading it did not make it a rankgate store.
    with sqlite3.connect(tmp_path / "own.db") as connection:
        tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master")}
    connection.close()
    assert tables == {"searches"}
    # Without --sql there is nothing to read, and the message says what would work.
    rankgate("eval", url, "--no-config").one_line_error(url, "not a rankgate trace store", "--sql")


def test_since_and_until_must_be_used_by_the_sql(rankgate: Rankgate, tmp_path: Path) -> None:
    url = own_sqlite(tmp_path)
    window = ["--since", "2026-11-30T01:30:00Z", "--until", "2026-11-30T02:30:00Z"]
    rankgate("eval", url, *REPORT, "--sql", OWN_SQL, *window).one_line_error(
        "--since with --sql binds :since"
    )
    only_since = f"{OWN_SQL} WHERE at >= :since"
    rankgate("eval", url, *REPORT, "--sql", only_since, *window).one_line_error("--until")
    # A ':since' inside a string or a comment is not a use of it.
    quoted = f"{OWN_SQL} WHERE at != ':since' -- :until"
    rankgate("eval", url, *REPORT, "--sql", quoted, *window).one_line_error("--since")
    both = f"{OWN_SQL} WHERE at >= :since AND at < :until"
    windowed = rankgate("eval", url, *REPORT, "--sql", both, *window)
    assert windowed.code == 0, windowed.err
    assert windowed.json()["summary"]["read"] == 1
    clash = ["--param", "since=2026-01-01"]
    rankgate("eval", url, *REPORT, "--sql", both, *window, *clash).one_line_error("give one")


def test_own_sql_works_for_a_role_that_may_only_select(
    rankgate: Rankgate, fresh_postgres: str
) -> None:
    import psycopg

    postgres_url = fresh_postgres  # a database without rankgate's tables

    role = f"rankgate_reader_{uuid.uuid4().hex[:10]}"
    database = postgres_url.rsplit("/", 1)[1]
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute("DROP TABLE IF EXISTS searches")
        admin.execute("CREATE TABLE searches (qid TEXT, ids TEXT[], grades JSONB, at TIMESTAMPTZ)")
        for qid, ids, grades, at in SEARCHES:
            admin.execute(
                "INSERT INTO searches VALUES (%s, %s, %s, %s)", (qid, json.loads(ids), grades, at)
            )
        try:
            admin.execute(f'CREATE ROLE "{role}" LOGIN')
        except psycopg.Error as problem:
            reason = f"this server does not let the test create a role ({problem})"
            if REQUIRED:
                pytest.fail(reason)
            pytest.skip(reason)
        try:
            admin.execute(f'GRANT CONNECT ON DATABASE "{database}" TO "{role}"')
            admin.execute(f'GRANT USAGE ON SCHEMA public TO "{role}"')
            admin.execute(f'GRANT SELECT ON searches TO "{role}"')
            admin.execute(f'REVOKE CREATE ON SCHEMA public FROM "{role}"')
            reader = postgres_url.replace("://postgres@", f"://{role}@")
            assert reader != postgres_url
            scored = rankgate("eval", reader, *REPORT, "--sql", OWN_SQL)
            assert scored.code == 0, scored.err
            assert scored.json()["summary"]["read"] == 3
            assert scored.json()["metrics"]["mrr"] == pytest.approx((1 + 1 / 2 + 0) / 3)
            windowed = rankgate(
                "eval",
                reader,
                *REPORT,
                "--sql",
                f"{OWN_SQL} WHERE at >= %(since)s",
                "--since",
                "2026-11-30T01:30:00Z",
            )
            assert windowed.code == 0 and windowed.json()["summary"]["read"] == 2, windowed.err
            rankgate("eval", reader, *REPORT, "--sql", OWN_SQL, "--since", "1d").one_line_error(
                "%(since)s"
            )
            # SQLite's :since is not psycopg's parameter style: it does not count as a use.
            sqlite_style = f"{OWN_SQL} WHERE at >= :since"
            rankgate(
                "eval", reader, *REPORT, "--sql", sqlite_style, "--since", "1d"
            ).one_line_error("%(since)s")
            rankgate("eval", reader, "--no-config").one_line_error("not a rankgate trace store")
        finally:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                (role,),
            )
            admin.execute(f'DROP OWNED BY "{role}"')
            admin.execute(f'DROP ROLE "{role}"')
            admin.execute("DROP TABLE searches")


# --- 5. passwords, the driver's messages included ------------------------------------------------

PASSWORDS = [
    ("pa ss", ["pa ss", "pa%20ss"]),  # a space: psycopg quoted it back
    ("pa%zzss", ["pa%zzss"]),  # a bad percent-escape: libpq quoted it back
    ("s3cr%00et", ["s3cr%00et"]),  # an escape libpq forbids: it quotes the token
    ("p@ssw0rd", ["p@ssw0rd", "ssw0rd"]),  # libpq cuts at the first '@', the rest is the host
    ("pa/ss", ["pa/ss"]),
    ("pa?ss#x", ["pa?ss#x", "ss#x"]),
]


@pytest.mark.parametrize(("password", "secrets"), PASSWORDS)
def test_a_password_is_never_echoed(
    rankgate: Rankgate, tmp_path: Path, password: str, secrets: list[str]
) -> None:
    url = f"postgresql://someone:{password}@127.0.0.1:1/db"
    runs = [
        rankgate("eval", url, "--no-config"),
        rankgate("trace", "import", EXAMPLES / "traces.jsonl", url),
        rankgate("store", "info", "--store", url),
        rankgate("compare", EXAMPLES / "traces.jsonl", EXAMPLES / "candidate.jsonl",
                 "--labels", url, "--no-config"),
    ]  # fmt: skip
    for run in runs:
        run.one_line_error("postgresql://someone:***@127.0.0.1:1/db")
        for secret in secrets:
            assert secret not in run.err + run.out


def test_a_password_in_a_parameter_is_never_echoed(rankgate: Rankgate) -> None:
    for value in ("x%zzy", "x%00y", "x y"):
        url = f"postgresql://someone@127.0.0.1:1/db?password={value}&application_name=t"
        run = rankgate("eval", url, "--no-config")
        run.one_line_error("postgresql://someone@127.0.0.1:1/db?password=***&application_name=t")
        assert value not in run.err


def test_driver_text_is_scrubbed_of_the_password_raw_and_decoded() -> None:
    url = "postgresql://u:s%C3%A9cr%2Bt@h/db"
    problem = Exception(f'no luck for "s%C3%A9cr%2Bt", "sécr+t" or {url}\nDETAIL: "sécr+t"')
    line = describe_error(problem, url)
    assert line == 'no luck for "***", "***" or postgresql://u:***@h/db DETAIL: "***"'


# --- 6. URLs as given ----------------------------------------------------------------------------


def test_store_urls_are_printed_as_given(
    rankgate: Rankgate, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    absolute = f"sqlite:///{tmp_path / 'abs.db'}"
    assert absolute.startswith("sqlite:////")
    for url in ("sqlite:///build.db", absolute):
        assert rankgate("store", "init", url).out == f"{url}: ready (schema version 1)\n"
        imported = rankgate("trace", "import", EXAMPLES / "traces.jsonl", url)
        assert imported.out.startswith(f"{url}: 400 records read"), imported.out
        assert rankgate("store", "info", url).out.startswith(f"{url} (schema version 1)")
        labels = rankgate("label", "import", EXAMPLES / "labels.jsonl", url)
        assert labels.out.startswith(f"{url}: 1,707 records read"), labels.out
    missing = "sqlite:///missing/traces.db"
    rankgate("eval", missing, "--no-config").one_line_error(f"{missing}: no such store file")
    rankgate("trace", "import", EXAMPLES / "traces.jsonl", missing).one_line_error(
        f"{missing}: folder missing does not exist"
    )


@pytest.mark.parametrize("url", ["mysql://x/y", "MSSQL://user:pw@host/db", "duckdb:///t.db"])
def test_an_unsupported_scheme_is_named(rankgate: Rankgate, url: str) -> None:
    scheme = url.split("://")[0].lower()
    expected = [f"unsupported scheme {scheme!r}", "sqlite:///", "postgresql://"]
    rankgate("eval", url, "--no-config").one_line_error(*expected)
    rankgate("trace", "import", EXAMPLES / "traces.jsonl", url).one_line_error(*expected)
    rankgate("store", "info", url).one_line_error(*expected)
    rankgate(
        "compare", EXAMPLES / "traces.jsonl", EXAMPLES / "candidate.jsonl", "--labels", url,
        "--no-config",
    ).one_line_error(*expected)  # fmt: skip
    assert "pw" not in rankgate("eval", url, "--no-config").err


def test_which_texts_are_store_urls() -> None:
    for url in ("sqlite:///x.db", "postgresql://h/db", "postgres://h/db", "mysql://x/y"):
        assert is_store_url(url), url
    # Files by path or by a file-system URL (read by Spark) are not stores.
    for text in ("x.db", "sqlite:/x.db", "s3a://bucket/traces", "file:///tmp/x.jsonl", "-", 7):
        assert not is_store_url(text), text


def test_a_path_to_a_database_file_gets_the_url_to_write(rankgate: Rankgate) -> None:
    rankgate("trace", "import", EXAMPLES / "traces.jsonl", "build/traces.db").one_line_error(
        "sqlite:///build/traces.db"
    )


# --- 7. one way to name the store in every command -----------------------------------------------


def test_every_store_command_takes_the_url_either_way(rankgate: Rankgate, tmp_path: Path) -> None:
    first = f"sqlite:///{tmp_path / 'one.db'}"
    second = f"sqlite:///{tmp_path / 'two.db'}"
    assert rankgate("store", "init", "--store", first).code == 0
    assert rankgate("store", "init", second).code == 0
    assert rankgate("traces", "import", EXAMPLES / "traces.jsonl", first).code == 0
    assert rankgate("trace", "import", EXAMPLES / "traces.jsonl", "--store", second).code == 0
    assert rankgate("labels", "import", EXAMPLES / "labels.jsonl", "--store", first).code == 0
    assert rankgate("label", "import", EXAMPLES / "labels.jsonl", second).code == 0
    by_option = rankgate("store", "info", "--store", first, "--format", "json").json()
    by_argument = rankgate("store", "info", second, "--format", "json").json()
    assert by_option["traces"] == by_argument["traces"] == 400
    assert by_option["labels"] == by_argument["labels"] == 1707
    # The same store both ways is fine; two different ones, or none, is an error.
    assert rankgate("store", "info", first, "--store", first).code == 0
    rankgate("store", "info", first, "--store", second).one_line_error("two stores named")
    rankgate("trace", "import", EXAMPLES / "traces.jsonl").one_line_error("name the store")


def test_options_are_not_matched_by_prefix(rankgate: Rankgate, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    for args in (
        ("trace", "import", EXAMPLES / "traces.jsonl", "--sto", url),
        ("trace", "import", EXAMPLES / "traces.jsonl", url, "--no-label"),
        ("label", "import", EXAMPLES / "labels.jsonl", url, "--lock", "3"),
        ("store", "info", url, "--form", "json"),
    ):
        refused = rankgate(*args)
        assert refused.code == 2 and "Traceback" not in refused.err, args
    assert not (tmp_path / "x.db").exists()


def test_store_info_writes_to_output(rankgate: Rankgate, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    rankgate("trace", "import", EXAMPLES / "traces.jsonl", url)
    written = rankgate("store", "info", url, "-o", tmp_path / "info.json")
    assert written.code == 0 and written.out == ""
    assert json.loads((tmp_path / "info.json").read_text())["traces"] == 400
    assert rankgate("store", "info", url, "--output", tmp_path / "info.txt").code == 0
    assert (tmp_path / "info.txt").read_text().startswith(f"{url} (schema version 1)")
    rankgate("store", "info", url, "-o", tmp_path / "no" / "x.json").one_line_error("--output")


# --- 8. every failure is a RankgateError with one line -------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "sqlite://relative.db",
        "sqlite:///",
        "sqlite:///:memory:",
        "sqlite:///no/such/folder/x.db",
        "sqlite:///x\x00y.db",
        "postgresql://u:pa ss@127.0.0.1:1/db",
        "postgresql://u@127.0.0.1:1/db",
        "postgresql://u:s3cret@[::1/x",
        "oracle://h/db",
        "not a url",
    ],
)
def test_bad_store_urls_raise_one_line_rankgate_errors(url: str) -> None:
    for read_only in (False, True):
        with pytest.raises(RankgateError) as refused:
            connect(url, read_only=read_only, lock_wait=2)
        assert "\n" not in str(refused.value) and "pa ss" not in str(refused.value)
    with pytest.raises(RankgateError):
        TraceRecorder(url, retry_seconds=2)


def test_a_file_that_is_not_a_database_is_one_line(rankgate: Rankgate, tmp_path: Path) -> None:
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not a database, only some text" * 100)
    url = f"sqlite:///{junk}"
    rankgate("eval", url, "--no-config").one_line_error(url, "not a database")
    rankgate("eval", url, "--no-config", "--sql", "SELECT 1").one_line_error(url)
    rankgate("trace", "import", EXAMPLES / "traces.jsonl", url).one_line_error(url)
    rankgate("store", "info", url).one_line_error(url)


def test_bad_own_sql_is_one_line(rankgate: Rankgate, store_url: str) -> None:
    rankgate("trace", "import", EXAMPLES / "traces.jsonl", store_url)
    for sql in ("SELEC nothing", "SELECT * FROM no_such_table", "SELECT 1/0 AS x"):
        run = rankgate("eval", store_url, "--no-config", "--sql", sql)
        assert run.code in (0, 2), run.err
        if run.code == 2:
            run.one_line_error(store_url)
    marker = ":missing" if store_url.startswith("sqlite") else "%(missing)s"
    rankgate(
        "eval", store_url, "--no-config", "--sql", f"SELECT * FROM rankgate_traces WHERE query_id = {marker}"
    ).one_line_error("query failed")  # fmt: skip


def test_every_loss_is_counted_by_its_reason_and_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="rankgate.recorder")
    url = f"sqlite:///{tmp_path / 'full.db'}"
    recorder = TraceRecorder(url, batch_size=2, max_queued=2, block_seconds=0.01, retry_seconds=20)
    try:
        with lock_held(url, 1.5):
            for number in range(30):
                recorder.record(f"q{number}", ["a"])
        assert recorder.flush(timeout=30)
        recorder.record("\ud800", ["a"])  # a lone surrogate: no database can store it
        recorder.record("\udc00", ["a"])
        assert recorder.flush(timeout=30)
    finally:
        recorder.close()
    stats = recorder.stats
    assert stats.queue_full > 1 and stats.refused == 2 and stats.unwritten == 0
    assert stats.dropped == stats.queue_full + stats.refused
    assert stats.traces_written + stats.dropped == 32
    lines = losses(caplog)
    assert len(lines) == 2, lines
    assert "stats.queue_full" in lines[0] and "stats.refused" in lines[1]
    assert stored_traces(url) == stats.traces_written
