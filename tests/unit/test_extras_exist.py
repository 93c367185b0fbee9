"""Every extra a message tells users to install (``pip install 'rankgate[NAME]'``) is declared in
pyproject.toml, with the package the message says it brings."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_named_extra_is_declared() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    named: set[str] = set()
    for path in (ROOT / "src" / "rankgate").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        named.update(re.findall(r"rankgate\[([a-z-]+)\]", text))
        named.update(re.findall(r"require_extra\(\s*\"([a-z-]+)\"", text))
    assert {"pandas", "polars", "mlflow", "langchain", "llamaindex"} <= named
    missing = sorted(name for name in named if name not in declared)
    assert not missing, f"extras named in messages but not in pyproject.toml: {missing}"
