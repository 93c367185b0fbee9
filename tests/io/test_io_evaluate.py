"""evaluate() over the readers: skip accounting for invalid records, and the per-query tables."""

from __future__ import annotations

import math

import pytest

import rankgate
from rankgate import InputError, Settings
from rankgate.errors import Location

SKIP = Settings(on_invalid="skip")


def check_accounting(summary):
    assert summary.read == summary.scored + sum(summary.skipped.values())


# --- on_invalid="skip" ------------------------------------------------------------------------------


def test_mixed_json_lines_file_is_fully_accounted_for(tmp_path):
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(
        b'{"query_id": "q1", "retrieved_ids": ["a", "b"], "relevant_ids": ["b"]}\n'  # 1 scored
        b"\n"  # 2 blank: not a record
        b'{"query_id": "bad-list", "retrieved_ids": "a b"}\n'  # 3 invalid
        b'{"retrieved_ids": ["a"], "relevance_scores": {"a": NaN}}\n'  # 4 invalid: not JSON
        b'{"retrieved_ids": ["\xc3\x28"]}\n'  # 5 invalid: not UTF-8
        b"[1, 2]\n"  # 6 invalid: not an object
        b'{"query_id": "q-unlabeled", "retrieved_ids": ["a"]}\n'  # 7 unlabeled
        b'{"query_id": "q-none", "retrieved_ids": ["a"], "relevant_ids": []}\n'  # 8 no_relevant
        b'{"retrieved_ids": ["a"], "relevance_scores": {"a": -3}}\n'  # 9 invalid
        b'{"retrieved_ids": [\n'  # 10 invalid: broken JSON
        b"   \n"  # 11 blank
        b'{"query_id": 2, "retrieved_ids": [7, 8], "relevance_scores": {"8": 2}}\n'  # 12 scored
    )
    evaluation = rankgate.evaluate(path, ["mrr"], settings=SKIP)
    summary = evaluation.summary

    assert summary.read == 10
    assert summary.scored == 2
    assert summary.skipped == {"unlabeled": 1, "no_relevant": 1, "invalid": 6}
    check_accounting(summary)
    assert evaluation.query_ids == ("q1", "2")
    assert [(e.location, e.field) for e in summary.invalid_examples] == [
        (f"{path}:3", "retrieved_ids"),
        (f"{path}:4", None),
        (f"{path}:5", None),
        (f"{path}:6", None),
        (f"{path}:9", "relevance_scores.a"),
        (f"{path}:10", None),
    ]
    assert str(summary.invalid_examples[0]) == (
        f"{path}:3: field 'retrieved_ids': expected a list of IDs, got string"
    )
    assert summary.invalid_examples[2].problem == "line is not valid UTF-8"


MIXED = [
    {"query_id": "q1", "retrieved_ids": ["a", "b"], "relevant_ids": ["b"]},
    {"query_id": "q-bad", "retrieved_ids": "a"},
    {"query_id": "q-neg", "retrieved_ids": ["a"], "relevance_scores": {"a": -1}},
    {"query_id": "q-unlabeled", "retrieved_ids": ["a"]},
    {"query_id": "q-none", "retrieved_ids": ["a"], "relevance_scores": {"a": 0}},
    {"query_id": "q-float", "retrieved_ids": [1.5]},
    {"query_id": "q2", "retrieved_ids": ["c"], "relevance_scores": {"c": 1}},
]


@pytest.mark.parametrize(
    "fmt", ["records", "jsonl", "jsonl.gz", "json-array", "stdin", "csv", "tsv"]
)
def test_skip_counts_invalid_records_in_every_format_that_can_hold_them(fmt, write_as):
    built = write_as(fmt, MIXED)
    evaluation = rankgate.evaluate(built.source, ["mrr", "ndcg@10"], settings=SKIP)
    summary = evaluation.summary

    assert (summary.read, summary.scored, summary.labeled) == (7, 2, 3)
    assert summary.skipped == {"unlabeled": 1, "no_relevant": 1, "invalid": 3}
    check_accounting(summary)
    assert evaluation.query_ids == ("q1", "q2")
    assert [e.location for e in summary.invalid_examples] == [
        built.locations[1],
        built.locations[2],
        built.locations[5],
    ]
    assert [e.field for e in summary.invalid_examples] == [
        "retrieved_ids",
        "relevance_scores.a",
        "retrieved_ids[0]",
    ]


@pytest.mark.parametrize("fmt", ["records", "jsonl", "csv"])
def test_by_default_the_first_invalid_record_stops_evaluation(fmt, write_as):
    built = write_as(fmt, MIXED)
    with pytest.raises(InputError) as caught:
        rankgate.evaluate(built.source, ["mrr"])
    assert str(caught.value.location) == built.locations[1]
    assert caught.value.field == "retrieved_ids"


def test_invalid_examples_are_capped_but_counted(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(
        '{"retrieved_ids": 1}\n' * 25 + '{"retrieved_ids": ["a"], "relevant_ids": ["a"]}\n'
    )
    summary = rankgate.evaluate(path, ["mrr"], settings=SKIP).summary
    assert (summary.read, summary.scored, summary.skipped["invalid"]) == (26, 1, 25)
    assert len(summary.invalid_examples) == 10
    assert summary.invalid_examples[-1].location == f"{path}:10"


def test_all_invalid_leaves_nothing_scored(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text("nope\n[]\n")
    evaluation = rankgate.evaluate(path, ["mrr"], settings=SKIP)
    assert evaluation.summary.skipped["invalid"] == 2
    assert evaluation.query_ids == ()
    assert math.isnan(evaluation.mean("mrr"))
    assert evaluation.to_arrow().num_rows == 0


# --- per-query tables ----------------------------------------------------------------------------------

TABLE_RECORDS = [
    {
        "query_id": "q1",
        "retrieved_ids": ["a", "b"],
        "relevant_ids": ["b"],
        "query_type": "factual",
        "latency_ms": 12,
        "shard": 3,
        "meta": {"region": "eu"},
        "tags": ["x"],
    },
    {
        "input": {"query_id": "q2", "retrieved_ids": ["c"], "relevance_scores": {"c": 2}},
        "query_type": "navigational",
        "latency_ms": 40,
        "shard": "s-7",
    },
    {
        "query_id": "q3",
        "retrieved_ids": ["d", "e", "f"],
        "relevance_scores": {"f": 1, "e": 0},
        "query_type": "factual",
        "latency_ms": 5,
        "shard": 1,
    },
]
EXPECTED_TABLE = [
    # ndcg@10 by hand: q1 b at rank 2 -> 1/log2(3); q2 c(2) at rank 1 -> 1; q3 f(1) at rank 3 -> 1/2
    {
        "query_id": "q1",
        "ndcg@10": 1 / math.log2(3),
        "mrr": 0.5,
        "precision@5": 0.2,
        "query_type": "factual",
        "latency_ms": 12,
        "shard": "3",
    },
    {
        "query_id": "q2",
        "ndcg@10": 1.0,
        "mrr": 1.0,
        "precision@5": 0.2,
        "query_type": "navigational",
        "latency_ms": 40,
        "shard": "s-7",
    },
    {
        "query_id": "q3",
        "ndcg@10": 0.5,
        "mrr": 1 / 3,
        "precision@5": 0.2,
        "query_type": "factual",
        "latency_ms": 5,
        "shard": "1",
    },
]


@pytest.fixture
def evaluation():
    # metrics named by aliases: the tables use canonical names
    return rankgate.evaluate(TABLE_RECORDS, ["ndcg@10", "recip_rank", "P_5"])


def assert_rows(actual, expected):
    assert len(actual) == len(expected)
    for got, want in zip(actual, expected, strict=True):
        assert list(got) == list(want)
        assert got == pytest.approx(want)


def test_to_arrow_columns_and_rows(evaluation):
    table = evaluation.to_arrow()
    # query_id, one column per metric (canonical names, requested order), then scalar attributes;
    # nested attributes (meta, tags) are left out; "shard" mixes numbers and text, so it is text
    assert table.column_names == [
        "query_id",
        "ndcg@10",
        "mrr",
        "precision@5",
        "query_type",
        "latency_ms",
        "shard",
    ]
    assert_rows(table.to_pylist(), EXPECTED_TABLE)


def test_to_pandas_has_the_same_rows(evaluation):
    frame = evaluation.to_pandas()
    assert list(frame.columns) == list(EXPECTED_TABLE[0])
    assert_rows(frame.to_dict("records"), EXPECTED_TABLE)


def test_to_polars_has_the_same_rows(evaluation):
    frame = evaluation.to_polars()
    assert frame.columns == list(EXPECTED_TABLE[0])
    assert_rows(frame.to_dicts(), EXPECTED_TABLE)


def test_per_query_values_and_means_agree(evaluation):
    metric_rows = [
        {key: row[key] for key in ("query_id", "ndcg@10", "mrr", "precision@5")}
        for row in EXPECTED_TABLE
    ]
    assert_rows(evaluation.per_query(), metric_rows)
    assert evaluation.query_ids == ("q1", "q2", "q3")
    ndcg = evaluation.values[rankgate.parse_metric("ndcg@10")]
    assert ndcg.tolist() == pytest.approx([row["ndcg@10"] for row in EXPECTED_TABLE])
    assert evaluation.mean("ndcg@10") == pytest.approx((1 / math.log2(3) + 1.0 + 0.5) / 3)
    assert evaluation.mean("mrr") == pytest.approx((0.5 + 1 + 1 / 3) / 3)
    assert evaluation.mean("p@5") == evaluation.mean("precision@5") == pytest.approx(0.2)
    with pytest.raises(KeyError):
        evaluation.mean("map")


def test_missing_attribute_is_null_in_the_table():
    evaluation = rankgate.evaluate(
        [
            {
                "query_id": "a",
                "retrieved_ids": ["x"],
                "relevant_ids": ["x"],
                "query_type": "factual",
            },
            {"query_id": "b", "retrieved_ids": ["x"], "relevant_ids": ["x"]},
        ],
        ["mrr"],
    )
    assert evaluation.to_arrow().column("query_type").to_pylist() == ["factual", None]
    assert evaluation.to_polars()["query_type"].to_list() == ["factual", None]


def test_tables_from_every_format_agree(fmt, write_as):
    evaluation = rankgate.evaluate(write_as(fmt).source, ["ndcg@10", "mrr"])
    arrow_rows = evaluation.to_arrow().to_pylist()
    assert [row["query_id"] for row in arrow_rows] == ["q-17", "q-ünï", "q-empty", "#5"]
    assert [row["query_type"] for row in arrow_rows] == [
        "factual",
        "navigational",
        "factual",
        "troubleshooting",
    ]
    assert evaluation.to_pandas().to_dict("records") == arrow_rows
    assert evaluation.to_polars().to_dicts() == arrow_rows


def test_invalid_example_location_is_the_printed_location():
    """Locations in invalid examples are plain strings, as printed."""
    evaluation = rankgate.evaluate([{"retrieved_ids": 5}], ["mrr"], settings=SKIP)
    [example] = evaluation.summary.invalid_examples
    assert example.location == str(Location("<records>", row=1)) == "<records> row 1"


def test_dataframe_with_columns_named_done_and_total():
    import pandas as pd

    frame = pd.DataFrame(
        [{"query_id": "q", "retrieved_ids": ["a"], "relevant_ids": ["a"], "done": True, "total": 3}]
    )
    evaluation = rankgate.evaluate(frame, ["mrr"])
    assert evaluation.per_query() == [{"query_id": "q", "mrr": 1.0}]
