"""The judge cache: what it keys on, what it keeps out, and which files it refuses."""

from __future__ import annotations

import hashlib
import sqlite3
import threading
from pathlib import Path

import pytest

from rankgate.errors import InputError, UsageError
from rankgate.judge_cache import JudgeCache, cache_key, endpoint_for_key


def test_a_grade_round_trips_under_its_key(tmp_path: Path) -> None:
    key = cache_key("http://localhost:8000/v1", "m", "umbrela-1", "q", "document text")
    path = tmp_path / "judge.db"
    with JudgeCache(path) as cache:
        assert cache.get(key) is None
        cache.put(key, 2, prompt_tokens=120, completion_tokens=5)
        assert cache.get(key) == 2
        cache.put(key, 3, prompt_tokens=120, completion_tokens=5)  # a later grade replaces it
    with JudgeCache(path) as cache:
        assert cache.get(key) == 3
        for other in (
            cache_key("http://localhost:8000/v1", "m", "umbrela-2", "q", "document text"),
            cache_key("http://localhost:8000/v1", "other", "umbrela-1", "q", "document text"),
            cache_key("http://localhost:8000/v1", "m", "umbrela-1", "q", "document text, edited"),
            cache_key("http://localhost:9000/v1", "m", "umbrela-1", "q", "document text"),
        ):
            assert cache.get(other) is None


def test_the_key_holds_a_digest_and_no_credentials() -> None:
    key = cache_key(
        "HTTPS://alice:hunter2@Judge.Example:8443/v1/?token=t0ps3cret#frag", "m", "p", "q", "doc"
    )
    assert key.endpoint == "https://judge.example:8443/v1"
    assert key.document_sha256 == hashlib.sha256(b"doc").hexdigest()
    # Rotating a token in the URL keeps the cached grades.
    assert endpoint_for_key("https://judge.example:8443/v1?token=new") == key.endpoint
    assert endpoint_for_key("http://[::1]:8000/v1/") == "http://[::1]:8000/v1"


def test_grades_outside_0_to_3_are_refused(tmp_path: Path) -> None:
    key = cache_key("http://h/v1", "m", "p", "q", "d")
    with JudgeCache(tmp_path / "judge.db") as cache, pytest.raises(ValueError):
        cache.put(key, 4, 0, 0)


def test_a_file_that_is_not_sqlite_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "notes.db"
    path.write_text("these are my notes, not a database\n" * 100)
    with pytest.raises(InputError) as refused:
        JudgeCache(path)
    assert str(path) in str(refused.value) and "\n" not in str(refused.value)
    assert path.read_text().startswith("these are my notes")  # left as it was


def test_another_sqlite_database_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "traces.db"
    with sqlite3.connect(path) as other:
        other.execute("CREATE TABLE traces (query_id TEXT)")
    other.close()
    with pytest.raises(InputError, match="not a rankgate judge cache") as refused:
        JudgeCache(path)
    assert str(path) in str(refused.value)


def test_another_schema_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "judge.db"
    JudgeCache(path).close()
    with sqlite3.connect(path) as raw:
        raw.execute("UPDATE judge_cache_schema SET version = 99")
    raw.close()
    with pytest.raises(InputError, match="version 99"):
        JudgeCache(path)


def test_a_cache_locked_beyond_the_timeout_is_a_one_line_error(tmp_path: Path) -> None:
    path = tmp_path / "judge.db"
    JudgeCache(path).close()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    try:
        with JudgeCache(path, busy_timeout_seconds=0.1) as cache:
            with pytest.raises(UsageError, match="locked") as refused:
                cache.put(cache_key("http://h/v1", "m", "p", "q", "d"), 1, 0, 0)
            assert str(path) in str(refused.value)
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_a_missing_folder_is_a_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot open"):
        JudgeCache(tmp_path / "no such folder" / "judge.db")


def test_many_threads_share_one_cache(tmp_path: Path) -> None:
    keys = [cache_key("http://h/v1", "m", "p", f"q{n}", f"d{n}") for n in range(200)]
    with JudgeCache(tmp_path / "judge.db") as cache:

        def work(offset: int) -> None:
            for key in keys[offset::8]:
                cache.put(key, len(key.query) % 4, 1, 1)
                assert cache.get(key) == len(key.query) % 4

        threads = [threading.Thread(target=work, args=(offset,)) for offset in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert [cache.get(key) for key in keys] == [len(key.query) % 4 for key in keys]


def test_a_closed_cache_refuses_use(tmp_path: Path) -> None:
    cache = JudgeCache(tmp_path / "judge.db")
    cache.close()
    cache.close()
    with pytest.raises(UsageError, match="closed"):
        cache.get(cache_key("http://h/v1", "m", "p", "q", "d"))
