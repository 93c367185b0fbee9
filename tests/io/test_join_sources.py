"""Every source through the one columnar pipeline: lists of dicts (made an Arrow table at the edge),
and sources read record by record (CSV, JSON arrays, stdin), whose validated traces are scored by
the same join and kernels. Each compared with the same traces as a JSON Lines file, values, counts
and messages, and with pytrec_eval."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rankgate.errors import InputError
from rankgate.evaluate import Evaluation, Settings, evaluate
from rankgate.io.tables import RecordsSource

pytrec_eval = pytest.importorskip("pytrec_eval")

METRICS = ["ndcg(gain=linear)@10", "precision@5", "recall@20", "map", "mrr"]
TREC = {
    "ndcg(gain=linear)@10": "ndcg_cut_10",
    "precision@5": "P_5",
    "recall@20": "recall_20",
    "map": "map",
    "mrr": "recip_rank",
}


def _records(seed: int, queries: int = 150) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    out: list[dict[str, Any]] = []
    for i in range(queries):
        ranking = [f"d{j}" for j in rng.integers(0, 50, size=int(rng.integers(1, 20)))]
        record: dict[str, Any] = {
            "query_id": f"q{i}",
            "retrieved_ids": ranking,
            "market": ["de", "fr", "us"][i % 3],
        }
        if i % 7:
            chosen = rng.choice(50, size=int(rng.integers(1, 6)), replace=False)
            record["relevance_scores"] = {f"d{d}": int(rng.integers(0, 4)) for d in chosen}
        if i % 11 == 0:
            record["relevant_ids"] = [ranking[0]]
        out.append(record)
    return out


def _grades(record: dict[str, Any]) -> dict[str, float] | None:
    if "relevant_ids" not in record and "relevance_scores" not in record:
        return None
    grades = dict.fromkeys(record.get("relevant_ids", []), 1.0)
    grades.update(record.get("relevance_scores", {}))
    return grades


def _check_against_trec(evaluation: Evaluation, records: list[dict[str, Any]]) -> None:
    qrels = {}
    run = {}
    for record in records:
        grades = _grades(record)
        if grades is None or not any(g >= 1 for g in grades.values()):
            continue
        qrels[record["query_id"]] = {d: int(g) for d, g in grades.items()}
        ranking = list(dict.fromkeys(record["retrieved_ids"]))
        run[record["query_id"]] = {d: float(len(ranking) - r) for r, d in enumerate(ranking)}
    theirs = pytrec_eval.RelevanceEvaluator(qrels, set(TREC.values())).evaluate(run)
    assert set(evaluation.query_ids) == set(qrels)
    for row in evaluation.per_query():
        for ours, measure in TREC.items():
            assert math.isclose(row[ours], theirs[row["query_id"]][measure], abs_tol=1e-9)


def _same(one: Evaluation, other: Evaluation) -> None:
    assert list(one.query_ids) == list(other.query_ids)
    assert one.summary == other.summary
    for spec in one.metrics:
        np.testing.assert_array_equal(one.values[spec], other.values[spec])
    assert [dict(a) for a in one.attributes] == [dict(a) for a in other.attributes]
    assert [(g.key, g.read, g.scored, g.skipped) for g in one.segments] == [
        (g.key, g.read, g.scored, g.skipped) for g in other.segments
    ]


def _jsonl(path: Path, records: list[Any]) -> Path:
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    return path


def test_a_list_of_dicts_is_read_as_one_arrow_table() -> None:
    records = _records(1)
    assert RecordsSource(records).as_arrow() is not None
    evaluation = evaluate(records, METRICS, settings=Settings(segment_by=("market",)))
    _check_against_trec(evaluation, records)


def test_a_list_of_dicts_equals_the_same_json_lines(tmp_path: Path) -> None:
    records = _records(2)
    settings = Settings(segment_by=("market",))
    _same(
        evaluate(records, METRICS, settings=settings),
        evaluate(_jsonl(tmp_path / "t.jsonl", records), METRICS, settings=settings),
    )


def test_invalid_dicts_are_worded_by_the_validator_with_their_row(tmp_path: Path) -> None:
    records = _records(3, queries=40)
    records[4] = {"query_id": "q4", "relevance_scores": {"d1": 2}}  # no ranking
    records[9] = {**records[9], "relevance_scores": {"d1": -2}}  # a grade out of range
    records[12] = {**records[12], "query_id": ""}  # an empty ID
    with pytest.raises(InputError) as caught:
        evaluate(records, METRICS)
    assert str(caught.value) == "<records> row 5: field 'retrieved_ids': required field is missing"
    skip = Settings(on_invalid="skip")
    from_dicts = evaluate(records, METRICS, settings=skip)
    from_lines = evaluate(_jsonl(tmp_path / "t.jsonl", records), METRICS, settings=skip)
    assert from_dicts.summary.skipped["invalid"] == 3
    assert [e.field for e in from_dicts.summary.invalid_examples] == [
        e.field for e in from_lines.summary.invalid_examples
    ]
    assert [e.problem for e in from_dicts.summary.invalid_examples] == [
        e.problem for e in from_lines.summary.invalid_examples
    ]
    assert list(from_dicts.query_ids) == list(from_lines.query_ids)
    for spec in from_dicts.metrics:
        np.testing.assert_array_equal(from_dicts.values[spec], from_lines.values[spec])


def test_dicts_arrow_cannot_take_whole_are_read_one_by_one_with_the_same_numbers() -> None:
    records = _records(4)
    # A field holding a number in one record and text in another: no one Arrow type.
    mixed = [{**record, "note": 1 if i % 2 else "one"} for i, record in enumerate(records)]
    assert RecordsSource(mixed).as_arrow() is None
    _same(evaluate(mixed, METRICS), evaluate([*mixed], METRICS))
    _check_against_trec(evaluate(mixed, METRICS), records)


@pytest.mark.parametrize("shape", ["json_array", "csv"])
def test_sources_read_record_by_record_are_scored_by_the_same_kernels(
    tmp_path: Path, shape: str
) -> None:
    records = _records(5)
    if shape == "json_array":
        path = tmp_path / "t.json"
        path.write_text(json.dumps(records))
    else:
        path = tmp_path / "t.csv"
        lines = ["query_id,retrieved_ids,relevant_ids,relevance_scores,market"]
        for record in records:
            cells = [
                record["query_id"],
                json.dumps(record["retrieved_ids"]),
                json.dumps(record["relevant_ids"]) if "relevant_ids" in record else "",
                json.dumps(record["relevance_scores"]) if "relevance_scores" in record else "",
                record["market"],
            ]
            lines.append(",".join('"' + c.replace('"', '""') + '"' for c in cells))
        path.write_text("\n".join(lines) + "\n")
    evaluation = evaluate(path, METRICS, worst=3)
    _check_against_trec(evaluation, records)
    reference = evaluate(_jsonl(tmp_path / "t.jsonl", records), METRICS, worst=3)
    assert list(evaluation.query_ids) == list(reference.query_ids)
    assert evaluation.summary.duplicates_dropped == reference.summary.duplicates_dropped
    assert [e.query_id for e in evaluation.examples] == [e.query_id for e in reference.examples]
