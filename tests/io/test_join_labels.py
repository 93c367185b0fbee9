"""Separately kept labels joined as an Arrow operation, stale labels filtered over whole columns,
and validated rows scored by the same join: each checked against pytrec_eval, or against the same
traces with their labels inline (read by the validator, one record at a time)."""

from __future__ import annotations

import dataclasses
import json
import math
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import rankgate
from rankgate import fast
from rankgate.errors import UsageError
from rankgate.evaluate import Settings, evaluate
from rankgate.labels import label_table
from rankgate.stale import LabelFilter

pytrec_eval = pytest.importorskip("pytrec_eval")

METRICS = ["ndcg(gain=linear)@10", "precision@5", "recall@20", "map", "mrr"]
TREC = {
    "ndcg(gain=linear)@10": "ndcg_cut_10",
    "precision@5": "P_5",
    "recall@20": "recall_20",
    "map": "map",
}
AS_OF = datetime(2026, 6, 1, tzinfo=UTC)


def _traces(seed: int, queries: int = 120) -> tuple[list[dict[str, Any]], dict[str, dict]]:
    """Seeded rankings (some with repeated IDs) and, apart, graded labels per query; one query
    in ten has no labels, and some have only grade-0 labels."""
    rng = np.random.default_rng(seed)
    traces, labels = [], {}
    for i in range(queries):
        query_id = f"q{i}"
        ranking = [f"d{j}" for j in rng.integers(0, 60, size=int(rng.integers(1, 25)))]
        traces.append({"query_id": query_id, "retrieved_ids": ranking})
        if i % 10 == 3:
            continue
        documents = rng.choice(60, size=int(rng.integers(1, 8)), replace=False)
        top = 0 if i % 10 == 7 else 3
        labels[query_id] = {f"d{d}": int(rng.integers(0, top + 1)) for d in documents}
    return traces, labels


def _judgment_file(
    path: Path, labels: dict[str, dict], stamps: dict[str, str] | None = None
) -> Path:
    with path.open("w") as out:
        for query_id, grades in labels.items():
            for document, grade in grades.items():
                row = {"query_id": query_id, "document_id": document, "grade": grade}
                if stamps is not None and document in stamps:
                    row["labeled_at"] = stamps[document]
                out.write(json.dumps(row) + "\n")
    return path


def _jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    return path


def _inline(traces: list[dict], labels: dict[str, dict]) -> list[dict]:
    return [
        {**trace, "relevance_scores": labels[trace["query_id"]]}
        if trace["query_id"] in labels
        else dict(trace)
        for trace in traces
    ]


def _oracle(traces: list[dict], labels: dict[str, dict]) -> dict[str, dict[str, float]]:
    qrels = {q: {d: int(g) for d, g in grades.items()} for q, grades in labels.items()}
    run = {}
    for trace in traces:
        ranking = list(dict.fromkeys(trace["retrieved_ids"]))
        run[trace["query_id"]] = {d: float(len(ranking) - r) for r, d in enumerate(ranking)}
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, set(TREC.values()) | {"recip_rank"})
    result: dict[str, dict[str, float]] = evaluator.evaluate(
        {q: r for q, r in run.items() if q in qrels}
    )
    return result


def _same(one: rankgate.Evaluation, other: rankgate.Evaluation) -> None:
    assert list(one.query_ids) == list(other.query_ids)
    # Labels kept apart also name the query set (counted as missing_trace) and count their labels
    # by kind (human or judge); inline labels do neither.
    unnamed = {"query_set": None, "expected_queries": None, "label_sources": {}}
    assert dataclasses.replace(one.summary, **unnamed) == (
        dataclasses.replace(other.summary, **unnamed)
    )
    for spec in one.metrics:
        np.testing.assert_array_equal(one.values[spec], other.values[spec])


def _check_against_trec(evaluation: rankgate.Evaluation, traces: list, labels: dict) -> None:
    theirs = _oracle(traces, labels)
    scored = {q for q, grades in labels.items() if any(g >= 1 for g in grades.values())}
    assert set(evaluation.query_ids) == scored
    for row in evaluation.per_query():
        for ours, measure in {**TREC, "mrr": "recip_rank"}.items():
            assert math.isclose(row[ours], theirs[row["query_id"]][measure], abs_tol=1e-9)


@pytest.mark.parametrize("seed", [1, 2])
def test_a_label_file_joined_to_jsonl_traces_equals_trec_eval_and_the_inline_labels(
    tmp_path: Path, seed: int
) -> None:
    traces, labels = _traces(seed)
    path = _jsonl(tmp_path / "traces.jsonl", traces)
    joined = evaluate(path, METRICS, labels=_judgment_file(tmp_path / "labels.jsonl", labels))
    _check_against_trec(joined, traces, labels)
    inline = evaluate(_jsonl(tmp_path / "inline.jsonl", _inline(traces, labels)), METRICS)
    _same(joined, inline)
    judgments = sum(len(grades) for grades in labels.values())
    assert joined.summary.label_sources == {"human": judgments, "judge": 0}
    assert inline.summary.label_sources == {}
    no_relevant = sum(1 for g in labels.values() if not any(v >= 1 for v in g.values()))
    assert joined.summary.skipped == {
        "unlabeled": len(traces) - len(labels),
        "no_relevant": no_relevant,
        "invalid": 0,
    }


def test_a_label_table_is_taken_as_a_label_file_is(tmp_path: Path) -> None:
    traces, labels = _traces(3)
    path = _jsonl(tmp_path / "traces.jsonl", traces)
    table = label_table(_judgment_file(tmp_path / "labels.jsonl", labels))
    assert table.schema.field("query_id").type == pa.string()
    assert table.schema.field("relevance_scores").type == pa.map_(pa.string(), pa.float64())
    assert "labeled_at" not in table.schema.names
    from_table = evaluate(path, METRICS, labels=table)
    _check_against_trec(from_table, traces, labels)
    # The same table with large types, from a caller, in a different row order.
    reordered = table.take(pa.array(np.arange(table.num_rows)[::-1])).cast(
        pa.schema(
            [
                ("query_id", pa.large_string()),
                ("relevance_scores", pa.map_(pa.large_string(), pa.float64())),
            ]
        )
    )
    _same(evaluate(path, METRICS, labels=reordered), from_table)


def test_a_label_table_is_checked() -> None:
    good = pa.table(
        {
            "query_id": ["a", "a"],
            "relevance_scores": pa.array(
                [[("d", 1.0)], [("e", 2.0)]], pa.map_(pa.string(), pa.float64())
            ),
        }
    )
    with pytest.raises(UsageError, match="query_id 'a' is repeated"):
        label_table(good)
    with pytest.raises(UsageError, match="no 'relevance_scores' column"):
        label_table(pa.table({"query_id": ["a"]}))
    negative = pa.table(
        {
            "query_id": ["a"],
            "relevance_scores": pa.array([[("d", -1.0)]], pa.map_(pa.string(), pa.float64())),
        }
    )
    with pytest.raises(UsageError, match="between 0 and"):
        label_table(negative)


def test_traces_with_their_own_labels_keep_them_and_the_rest_are_joined(tmp_path: Path) -> None:
    traces, labels = _traces(4)
    # Half the traces carry their own labels (which differ from the label file's).
    own = {trace["query_id"]: {trace["retrieved_ids"][0]: 2} for trace in traces[::2]}
    records = [
        {**trace, "relevance_scores": own[trace["query_id"]]} if trace["query_id"] in own else trace
        for trace in traces
    ]
    label_file = _judgment_file(tmp_path / "labels.jsonl", labels)
    joined = evaluate(_jsonl(tmp_path / "t.jsonl", records), METRICS, labels=label_file)
    expected = {**{q: g for q, g in labels.items() if q not in own}, **own}
    _check_against_trec(joined, traces, expected)
    # The validator's path (a list of dicts) agrees, values and counts.
    _same(joined, evaluate(records, METRICS, labels=label_file))


def test_rows_the_validator_reads_are_joined_and_scored_like_the_rest(tmp_path: Path) -> None:
    traces, labels = _traces(5, queries=60)
    lines = [json.dumps(trace) for trace in traces]
    # A valid line the scanner leaves to the validator: integer IDs and extra spacing variants.
    lines[5] = json.dumps({"query_id": "q5", "retrieved_ids": [1, 2, 3]}, indent=1).replace(
        "\n", " "
    )
    traces[5] = {"query_id": "q5", "retrieved_ids": ["1", "2", "3"]}
    labels["q5"] = {"2": 3}
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(lines) + "\n")
    joined = evaluate(path, METRICS, labels=_judgment_file(tmp_path / "l.jsonl", labels))
    _check_against_trec(joined, traces, labels)


def test_without_the_compiled_kernels_the_same_batches_give_the_same_numbers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    traces, labels = _traces(6)
    path = _jsonl(tmp_path / "t.jsonl", traces)
    label_file = _judgment_file(tmp_path / "l.jsonl", labels)
    compiled = evaluate(path, METRICS, labels=label_file)
    monkeypatch.setattr(fast, "_join", None)
    plain = evaluate(path, METRICS, labels=label_file)
    assert list(plain.query_ids) == list(compiled.query_ids)
    assert plain.summary == compiled.summary
    for spec in compiled.metrics:
        np.testing.assert_allclose(plain.values[spec], compiled.values[spec], rtol=0, atol=1e-12)


# ------------------------------------------------------------------------------------------
# Stale labels over whole columns


def _filtered(grades: dict, corpus: set | None, stamps: dict, cutoff: datetime | None) -> dict:
    kept = {d: g for d, g in grades.items() if corpus is None or d in corpus}
    if cutoff is not None:
        kept = {
            d: g
            for d, g in kept.items()
            if d not in stamps or datetime.fromisoformat(stamps[d]) >= cutoff
        }
    return kept


@pytest.mark.parametrize("with_corpus", [True, False])
@pytest.mark.parametrize("with_age", [True, False])
def test_stale_labels_are_removed_over_columns_as_the_validator_removes_them(
    tmp_path: Path, with_corpus: bool, with_age: bool
) -> None:
    if not (with_corpus or with_age):
        pytest.skip("no filter")
    traces, labels = _traces(7, queries=200)
    corpus = {f"d{j}" for j in range(60) if j % 4}
    # Every document's label dated; a third of them long ago.
    stamps = {
        f"d{j}": ("2020-01-01T00:00:00+00:00" if j % 3 == 0 else "2026-05-01T00:00:00+00:00")
        for j in range(60)
    }
    label_filter = LabelFilter(
        corpus=frozenset(corpus) if with_corpus else None,
        max_age=timedelta(days=180) if with_age else None,
        as_of=AS_OF,
    )
    settings = Settings(label_filter=label_filter)
    label_file = _judgment_file(tmp_path / "l.jsonl", labels, stamps)
    path = _jsonl(tmp_path / "t.jsonl", traces)
    columnar = evaluate(path, METRICS, settings=settings, labels=label_file)
    # The validator's path over the same traces and labels (a list of dicts): same counts.
    by_validator = evaluate(traces, METRICS, settings=settings, labels=label_file)
    _same(columnar, by_validator)
    cutoff = AS_OF - timedelta(days=180) if with_age else None
    kept = {
        q: _filtered(g, corpus if with_corpus else None, stamps, cutoff) for q, g in labels.items()
    }
    _check_against_trec(columnar, traces, kept)
    removed_stale = (
        sum(sum(1 for d in g if d not in corpus) for g in labels.values()) if with_corpus else 0
    )
    assert columnar.summary.labels_removed_stale == removed_stale
    lost = sum(
        1
        for q, g in labels.items()
        if any(v >= 1 for v in g.values()) and not any(v >= 1 for v in kept[q].values())
    )
    assert columnar.summary.lost_all_relevant == lost
    if with_age:
        assert columnar.summary.labels_removed_expired > 0


def test_inline_labels_and_relevant_ids_are_filtered_by_corpus_over_columns(tmp_path: Path) -> None:
    traces, labels = _traces(8, queries=150)
    records = []
    for index, trace in enumerate(_inline(traces, labels)):
        if index % 3 == 0 and "relevance_scores" in trace:
            # Relevant IDs beside the scores: a score overrides the grade 1 they imply.
            grades = trace["relevance_scores"]
            trace = {**trace, "relevant_ids": [*list(grades)[:1], "d59", "d59"]}
        records.append(trace)
    corpus = frozenset(f"d{j}" for j in range(60) if j % 5)
    settings = Settings(label_filter=LabelFilter(corpus=corpus))
    columnar = evaluate(_jsonl(tmp_path / "t.jsonl", records), METRICS, settings=settings)
    _same(columnar, evaluate(records, METRICS, settings=settings))
    assert columnar.summary.labels_removed_stale > 0


def test_segment_column_is_aligned_with_query_ids(tmp_path: Path) -> None:
    traces, labels = _traces(9)
    records = [
        {**trace, "market": "de" if i % 3 else "fr"}
        for i, trace in enumerate(_inline(traces, labels))
    ]
    evaluation = evaluate(
        _jsonl(tmp_path / "t.jsonl", records), METRICS, settings=Settings(segment_by=("market",))
    )
    market = {r["query_id"]: r["market"] for r in records}
    column = evaluation.segment_column("market")
    assert list(column) == [market[q] for q in evaluation.query_ids]
    # A field the evaluation was not segmented by is read from the records' attributes.
    not_segmented = evaluate(_jsonl(tmp_path / "t.jsonl", records), METRICS)
    assert list(not_segmented.segment_column("market")) == list(column)
