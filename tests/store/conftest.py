"""Trace stores for the tests: a SQLite file, and a fresh database on the PostgreSQL server.

The PostgreSQL server is the real one on localhost (``RANKGATE_TEST_POSTGRES`` names another,
default ``postgresql://postgres@127.0.0.1:5432/postgres``). Each test module gets a database of its
own, dropped afterwards. Without a server the PostgreSQL cases skip with the reason; ``.ci/run``
sets ``RANKGATE_REQUIRE_SERVICES=1``, which turns that into a failure.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from rankgate.cli import main

ADMIN_URL = os.environ.get(
    "RANKGATE_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/postgres"
)
REQUIRED = os.environ.get("RANKGATE_REQUIRE_SERVICES") == "1"


def _admin() -> object:
    try:
        import psycopg
    except ImportError as problem:
        return f"psycopg is not installed ({problem})"
    try:
        return psycopg.connect(ADMIN_URL, autocommit=True, connect_timeout=3)
    except psycopg.Error as problem:
        return f"no PostgreSQL server at {ADMIN_URL} ({str(problem).strip().splitlines()[0]})"


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    admin = _admin()
    if isinstance(admin, str):
        if REQUIRED:
            pytest.fail(admin + " (RANKGATE_REQUIRE_SERVICES=1)")
        pytest.skip(admin)
    name = f"rankgate_test_{uuid.uuid4().hex[:12]}"
    admin.execute(f'CREATE DATABASE "{name}"')  # type: ignore[attr-defined]
    base = ADMIN_URL.rsplit("/", 1)[0]
    try:
        yield f"{base}/{name}"
    finally:
        admin.execute(  # type: ignore[attr-defined]
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (name,)
        )
        admin.execute(f'DROP DATABASE IF EXISTS "{name}"')  # type: ignore[attr-defined]
        admin.close()  # type: ignore[attr-defined]


@pytest.fixture
def fresh_postgres(postgres_url: str) -> str:
    """The module's database, emptied."""
    import psycopg

    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute("DROP TABLE IF EXISTS rankgate_traces, rankgate_labels, rankgate_schema")
    return postgres_url


@pytest.fixture(params=["sqlite", "sqlite-through-adbc", "postgresql", "postgresql-through-adbc"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty store of each kind, read as built (SQLite's C API through
    ``rankgate._sqlite_read``; PostgreSQL's labels through ``rankgate._pg_read``, its lines
    written by ``_sqlite_read.store_lines``) and through ADBC alone, which reads it where those
    modules are not built."""
    if request.param.endswith("-through-adbc"):
        from rankgate.store import columns

        monkeypatch = request.getfixturevalue("monkeypatch")
        monkeypatch.setattr(columns, "SQLITE_C_API", False)
        monkeypatch.setattr(columns, "POSTGRES_C_API", False)
    if request.param.startswith("sqlite"):
        return f"sqlite:///{tmp_path / 'traces.db'}"
    return str(request.getfixturevalue("fresh_postgres"))


@dataclass
class Run:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)

    def one_line_error(self, *fragments: str) -> None:
        """Exit 2 with one line on stderr holding every fragment, and no traceback."""
        assert self.code == 2, f"exit {self.code}: {self.out}{self.err}"
        lines = self.err.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in self.err, self.err
        for fragment in fragments:
            assert fragment in lines[0], lines[0]


@pytest.fixture
def rankgate(capsys: pytest.CaptureFixture[str]) -> Callable[..., Run]:
    """Run ``rankgate ARGS`` in-process; a SystemExit becomes the exit code."""

    def run(*args: object) -> Run:
        capsys.readouterr()
        try:
            code = main([str(arg) for arg in args])
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else 2
        captured = capsys.readouterr()
        return Run(code, captured.out, captured.err)

    return run
