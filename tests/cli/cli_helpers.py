"""Data and helpers shared by the command-line tests (imported by conftest and test modules)."""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

# --------------------------------------------------------------------------------------------------
# The hand-computed trace file.
#
# Gain 2^g - 1, discount log2(rank + 1), ideal DCG from *all* labels (sorted by grade) cut at k;
# a document is relevant when its grade >= 1; relevant_ids give grade 1.
#
# q1  retrieved a b c d     grades a=3 c=1 x=2 (x never retrieved)          R = 3
#     ndcg@3: DCG = 7/1 + 0 + 1/log2(4) = 7.5 ; IDCG = 7/1 + 3/log2(3) + 1/log2(4)
#     P@3 = 2/3, R@3 = 2/3, RR = 1, AP = (1/1 + 2/3) / 3 = 5/9, R-prec = |{a,c}| / 3 = 2/3
# q2  retrieved e e f g     relevant g (the repeated e is dropped: g moves to rank 3)   R = 1
#     ndcg@3: DCG = 1/log2(4) = 0.5 ; IDCG = 1 -> 0.5
#     P@3 = 1/3, R@3 = 1, RR = 1/3, AP = (1/3) / 1, R-prec = 0 (rank 1 is e)
# q3  retrieved h           relevant h i                                     R = 2
#     ndcg@3: DCG = 1 ; IDCG = 1 + 1/log2(3)
#     P@3 = 1/3 (divides by k, not by the 1 retrieved), R@3 = 1/2, RR = 1, AP = 1/2, R-prec = 1/2
# q4  unlabeled                       -> skipped as unlabeled
# q5  relevant_ids: []                -> labeled, nothing relevant: no_relevant
# q6  relevance_scores {z: 0}         -> labeled, nothing relevant: no_relevant
# --------------------------------------------------------------------------------------------------

HAND_RECORDS: list[dict[str, Any]] = [
    {
        "query_id": "q1",
        "retrieved_ids": ["a", "b", "c", "d"],
        "relevance_scores": {"a": 3, "c": 1, "x": 2},
    },
    {"query_id": "q2", "retrieved_ids": ["e", "e", "f", "g"], "relevant_ids": ["g"]},
    {"query_id": "q3", "retrieved_ids": ["h"], "relevant_ids": ["h", "i"]},
    {"query_id": "q4", "retrieved_ids": ["a", "b"]},
    {"query_id": "q5", "retrieved_ids": ["a", "b"], "relevant_ids": []},
    {"query_id": "q6", "retrieved_ids": ["z", "y"], "relevance_scores": {"z": 0}},
]

_L3 = math.log2(3)
HAND_PER_QUERY: dict[str, dict[str, float]] = {
    "q1": {
        "ndcg@3": 7.5 / (7 + 3 / _L3 + 0.5),
        "ndcg(gain=linear)@3": (3 + 0.5) / (3 + 2 / _L3 + 0.5),
        "dcg@3": 7.5,
        "precision@3": 2 / 3,
        "precision@5": 2 / 5,
        "recall@3": 2 / 3,
        "mrr": 1.0,
        "map": 5 / 9,
        "r_precision": 2 / 3,
        "hit_rate@1": 1.0,
    },
    "q2": {
        "ndcg@3": 0.5,
        "ndcg(gain=linear)@3": 0.5,
        "dcg@3": 0.5,
        "precision@3": 1 / 3,
        "precision@5": 1 / 5,
        "recall@3": 1.0,
        "mrr": 1 / 3,
        "map": 1 / 3,
        "r_precision": 0.0,
        "hit_rate@1": 0.0,
    },
    "q3": {
        "ndcg@3": 1 / (1 + 1 / _L3),
        "ndcg(gain=linear)@3": 1 / (1 + 1 / _L3),
        "dcg@3": 1.0,
        "precision@3": 1 / 3,
        "precision@5": 1 / 5,
        "recall@3": 0.5,
        "mrr": 1.0,
        "map": 0.5,
        "r_precision": 0.5,
        "hit_rate@1": 1.0,
    },
}
HAND_METRICS = list(HAND_PER_QUERY["q1"])


@dataclass(frozen=True)
class Handmade:
    path: Path
    per_query: dict[str, dict[str, float]]

    def mean(self, metric: str, scored: int = 3) -> float:
        """Mean over ``scored`` queries; queries beyond q1..q3 (empty_relevant=zero) add 0."""
        return math.fsum(values[metric] for values in self.per_query.values()) / scored


def clean_env(**extra: str) -> dict[str, str]:
    """The current environment without colour switches, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR", "TERM")}
    env["TERM"] = "xterm-256color"
    env.update(extra)
    return env


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)

    def assert_one_line_error(self, *fragments: str) -> str:
        """Exit 2, no traceback, exactly one line on stderr containing every fragment."""
        assert self.code == 2, f"exit {self.code}, stderr:\n{self.err}"
        assert "Traceback" not in self.err
        lines = self.err.strip().splitlines()
        assert len(lines) == 1, f"expected one line on stderr, got:\n{self.err}"
        line = lines[0]
        assert line.startswith("rankgate: error: "), line
        for fragment in fragments:
            assert fragment in line, f"{fragment!r} not in {line!r}"
        return line


def assert_accounting(summary: dict[str, Any]) -> None:
    """read == scored + sum(skipped), and coverage == labeled / read."""
    assert summary["read"] == summary["scored"] + sum(summary["skipped"].values())
    if summary["read"]:
        assert summary["coverage"] == pytest.approx(summary["labeled"] / summary["read"])
    else:
        assert summary["coverage"] is None
