"""Build the compiled kernels.

Everything else about the package is declared in pyproject.toml. The extensions are optional: where no
C compiler is available the install still succeeds and rankgate runs on its pure-Python path (the
same numbers, much slower), which ``rankgate.fast.available()`` reports.
"""

import subprocess

from setuptools import Extension, setup

_FLAGS = ["-O3", "-std=c11", "-Wall", "-Wextra", "-Wno-unused-parameter"]



def _libpq_headers() -> list[str]:
    """Where libpq's headers are: pg_config's answer (Debian's libpq-dev brings both)."""
    try:
        found = subprocess.run(
            ["pg_config", "--includedir"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ["/usr/include/postgresql"]
    return [found] if found else []


setup(
    ext_modules=[
        Extension(
            "rankgate._join",
            sources=["src/rankgate/_join.c"],
            depends=["src/rankgate/_arrow_offsets.h"],
            extra_compile_args=_FLAGS,
            optional=True,
        ),
        Extension(
            "rankgate._cells",
            sources=["src/rankgate/_cells.c"],
            extra_compile_args=_FLAGS,
            optional=True,
        ),
        Extension(
            # Needs SQLite's headers and library (Debian: libsqlite3-dev); without them a
            # SQLite store is read through ADBC instead (a copy of SQLite of its own).
            "rankgate._sqlite_read",
            sources=["src/rankgate/_sqlite_read.c"],
            depends=["src/rankgate/_blocks.h"],
            libraries=["sqlite3"],
            extra_compile_args=_FLAGS,
            optional=True,
        ),
        Extension(
            # Needs libpq's headers and library (Debian: libpq-dev); without them a PostgreSQL
            # store's labels are read through ADBC's driver instead.
            "rankgate._pg_read",
            sources=["src/rankgate/_pg_read.c"],
            depends=["src/rankgate/_blocks.h"],
            include_dirs=_libpq_headers(),
            libraries=["pq"],
            extra_compile_args=_FLAGS,
            optional=True,
        ),
        Extension(
            "rankgate._jsonl",
            sources=["src/rankgate/_jsonl.c"],
            depends=["src/rankgate/_arrow_offsets.h"],
            extra_compile_args=_FLAGS,
            optional=True,
        ),
    ],
)
