"""Chunks of JSON Lines parsed on several threads reach the reader in input order, errors included,
and rows that skip the columnar checks (compare's own tables) are still held to the label bound."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from rankgate.compare import compare
from rankgate.errors import InputError
from rankgate.evaluate import Settings, evaluate
from rankgate.io import columnar, limits


@pytest.mark.parametrize("threads", [1, 2])
def test_an_invalid_record_before_a_truncated_gzip_is_the_error(
    tmp_path: Path, threads: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(columnar, "CHUNK_BYTES", 2000)
    monkeypatch.setattr(columnar, "PARSE_THREADS", threads)
    lines = [
        json.dumps({"query_id": f"q{i}", "retrieved_ids": ["d1", "d2"], "relevant_ids": ["d1"]})
        for i in range(200)
    ]
    lines[100] = json.dumps({"query_id": "q100", "retrieved_ids": "oops"})
    packed = gzip.compress(("\n".join(lines) + "\n").encode())
    path = tmp_path / "t.jsonl.gz"
    path.write_bytes(packed[: int(len(packed) * 0.9)])
    with pytest.raises(InputError, match=r"t\.jsonl\.gz:101: field 'retrieved_ids'"):
        evaluate(path, ["precision@1"], settings=Settings(on_invalid="fail"))


def test_labels_file_past_the_per_query_bound_is_refused_in_compare(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(limits, "MAX_LABELS_PER_QUERY", 3)
    for name, ranking in (("a", ["d1", "d2", "d9"]), ("b", ["d2", "d1"])):
        (tmp_path / f"{name}.jsonl").write_text(
            "".join(
                json.dumps({"query_id": f"q{i}", "retrieved_ids": ranking}) + "\n" for i in range(4)
            )
        )
    labels = tmp_path / "labels.jsonl"
    labels.write_text(
        "".join(
            json.dumps(record) + "\n"
            for record in (
                {"query_id": "q0", "relevance_scores": {"d1": 1, "d2": 2}},
                {"query_id": "q0", "relevance_scores": {"d3": 1, "d4": 2}},
                {"query_id": "q1", "relevance_scores": {"d1": 1}},
            )
        )
    )
    with pytest.raises(InputError, match="4 labels"):
        compare(
            tmp_path / "a.jsonl",
            tmp_path / "b.jsonl",
            metrics=["recall@10"],
            settings=Settings(on_invalid="fail", resamples=20),
            labels=labels,
        )
