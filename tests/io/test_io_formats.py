"""The same logical dataset, read from every supported format, gives the same traces and numbers."""

from __future__ import annotations

import math

import pytest

import rankgate
from rankgate.io import FieldMap, open_source, validate_record

METRICS = ["ndcg@10", "mrr", "p@5", "recall@20"]

# Per scored query, by hand (exponential gain 2^g - 1, log2(rank + 1) discount):
#   q-17:    d3 d9 d1(3); labels d1=3, d4=1      DCG = 7/log2(4); IDCG = 7 + 1/log2(3)
#   q-ünï:   文档-1 café(2) 🦀-doc(1) d4         DCG = 3/log2(3) + 1/log2(4); IDCG = 3 + 1/log2(3)
#   q-empty: nothing retrieved, d2 relevant      all zero
#   #5:      d7 d8(1)                            DCG = 1/log2(3); IDCG = 1
# q-unlabeled is skipped as unlabeled, q-zero (only a grade-0 label) as no_relevant.
LOG2_3 = math.log2(3)
EXPECTED_ROWS = [
    {
        "query_id": "q-17",
        "ndcg@10": 3.5 / (7 + 1 / LOG2_3),
        "mrr": 1 / 3,
        "precision@5": 1 / 5,
        "recall@20": 1 / 2,
        "query_type": "factual",
    },
    {
        "query_id": "q-ünï",
        "ndcg@10": (3 / LOG2_3 + 0.5) / (3 + 1 / LOG2_3),
        "mrr": 1 / 2,
        "precision@5": 2 / 5,
        "recall@20": 1.0,
        "query_type": "navigational",
    },
    {
        "query_id": "q-empty",
        "ndcg@10": 0.0,
        "mrr": 0.0,
        "precision@5": 0.0,
        "recall@20": 0.0,
        "query_type": "factual",
    },
    {
        "query_id": "#5",
        "ndcg@10": 1 / LOG2_3,
        "mrr": 1 / 2,
        "precision@5": 1 / 5,
        "recall@20": 1.0,
        "query_type": "troubleshooting",
    },
]


def read_traces(source, fields=None):
    """Every trace of a source; closes the reader even when a record is invalid."""
    raws = iter(open_source(source))
    try:
        return [validate_record(raw, fields or FieldMap()) for raw in raws]
    finally:
        raws.close()


def as_tuples(traces):
    return [(t.query_id, t.retrieved_ids, t.grades, t.attributes) for t in traces]


def assert_rows_match(actual, expected):
    assert [row["query_id"] for row in actual] == [row["query_id"] for row in expected]
    for got, want in zip(actual, expected, strict=True):
        assert got.keys() == want.keys(), got["query_id"]
        for key, value in want.items():
            if isinstance(value, float):
                assert got[key] == pytest.approx(value, abs=1e-12), (got["query_id"], key)
            else:
                assert got[key] == value, (got["query_id"], key)


def test_every_format_gives_the_expected_traces(fmt, write_as, expected_traces):
    built = write_as(fmt)
    assert as_tuples(read_traces(built.source)) == expected_traces


def test_every_format_locates_each_record(fmt, write_as):
    built = write_as(fmt)
    traces = read_traces(built.source)
    assert [str(trace.location) for trace in traces] == built.locations


def test_every_format_gives_the_same_evaluation(fmt, write_as):
    evaluation = rankgate.evaluate(write_as(fmt).source, METRICS)

    summary = evaluation.summary
    assert (summary.read, summary.scored, summary.labeled) == (6, 4, 5)
    assert summary.skipped == {"unlabeled": 1, "no_relevant": 1, "invalid": 0}
    assert evaluation.query_ids == ("q-17", "q-ünï", "q-empty", "#5")
    assert_rows_match(evaluation.to_arrow().to_pylist(), EXPECTED_ROWS)
    assert evaluation.mean("ndcg@10") == pytest.approx(
        math.fsum(row["ndcg@10"] for row in EXPECTED_ROWS) / 4
    )
    assert evaluation.mean("mrr") == pytest.approx((1 / 3 + 1 / 2 + 0 + 1 / 2) / 4)


def test_sources_report_their_size(fmt, write_as):
    source = open_source(write_as(fmt).source)
    list(source)
    if fmt.startswith("stdin"):
        assert source.total is None  # a stream's size cannot be known in advance
    elif fmt in ("records", "arrow", "pandas", "polars") or fmt.startswith("parquet"):
        assert source.total == 6
        assert source.done() == 6
    else:
        assert source.total is not None and source.total > 0


INTEGER_ID_RECORDS = [
    {"query_id": 7, "retrieved_ids": [1, 2, 3], "relevant_ids": [3], "relevance_scores": {"1": 2}},
    {"query_id": 8, "retrieved_ids": [40, 10], "relevant_ids": [10]},
]


def test_integer_ids_read_as_strings_in_every_format(fmt, write_as):
    built = write_as(fmt, INTEGER_ID_RECORDS)
    assert as_tuples(read_traces(built.source)) == [
        ("7", ["1", "2", "3"], {"3": 1.0, "1": 2.0}, {}),
        ("8", ["40", "10"], {"10": 1.0}, {}),
    ]


def test_integer_and_string_ids_name_the_same_document():
    """Within one JSON record, 1 and "1" match: a label given as text hits a ranking of integers."""
    records = [
        {"query_id": 1, "retrieved_ids": [5, "1"], "relevant_ids": ["5"], "relevance_scores": {}},
        {"query_id": "2", "retrieved_ids": ["9", 4], "relevance_scores": {"4": 1}},
    ]
    evaluation = rankgate.evaluate(records, ["mrr"])
    assert evaluation.query_ids == ("1", "2")
    assert evaluation.values[rankgate.parse_metric("mrr")].tolist() == [1.0, 0.5]


def test_integer_and_string_query_ids_give_one_query_id_across_formats(write_as):
    """Query 7 written as an integer (JSON Lines) and as text (CSV) is the same query "7"."""
    from_json = rankgate.evaluate(write_as("jsonl", INTEGER_ID_RECORDS).source, ["mrr"])
    as_text = [dict(r, query_id=str(r["query_id"])) for r in INTEGER_ID_RECORDS]
    from_text = rankgate.evaluate(as_text, ["mrr"])
    assert from_json.query_ids == from_text.query_ids == ("7", "8")
    assert from_json.per_query() == from_text.per_query()
