"""Helpers of the power tests, imported by their conftest and test modules."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Ran:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)

    def one_line_error(self, *fragments: str) -> str:
        """Exit 2, exactly one ``rankgate: error:`` line on stderr holding every fragment."""
        assert self.code == 2, f"exit {self.code}, stdout:\n{self.out}\nstderr:\n{self.err}"
        lines = self.err.strip().splitlines()
        assert len(lines) == 1, f"expected one line on stderr, got:\n{self.err}"
        assert lines[0].startswith("rankgate: error: "), lines[0]
        for fragment in fragments:
            assert fragment in lines[0], f"{fragment!r} not in {lines[0]!r}"
        return lines[0]


Rankgate = Callable[..., Ran]


def write_jsonl(path: Path, records: Iterable[dict[str, Any]]) -> Path:
    """``records`` as JSON Lines at ``path``."""
    path.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
    return path


@dataclass(frozen=True)
class AbFiles:
    baseline: Path
    control: Path
    regressed: Path
