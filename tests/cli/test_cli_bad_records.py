"""Malformed records: exit 2 with one line naming file, line and field (default), or skipped and
counted under ``invalid`` with their locations listed (``--on-invalid skip``)."""

from __future__ import annotations

import json

import pytest
from cli_helpers import assert_accounting

GOOD = {"query_id": "g", "retrieved_ids": ["a", "b"], "relevant_ids": ["a"]}

HUGE = "1" + "0" * 400  # a JSON integer too large for a float

# Each case is written as line 3 of bad.jsonl, after two good records.
BAD_LINES = [
    pytest.param("not json", ["JSON"], id="not-json"),
    pytest.param('{"retrieved_ids": ["a"', ["JSON"], id="truncated-json"),
    pytest.param('{"retrieved_ids": ["a"]} trailing', ["JSON"], id="extra-data"),
    pytest.param('{"retrieved_ids": "a,b"}', ["retrieved_ids"], id="ids-plain-string"),
    pytest.param('{"retrieved_ids": "[a, b"}', ["retrieved_ids"], id="ids-broken-json-text"),
    pytest.param('{"retrieved_ids": 5}', ["retrieved_ids"], id="ids-number"),
    pytest.param('{"retrieved_ids": null}', ["retrieved_ids"], id="ids-null"),
    pytest.param('{"retrieved_ids": {"a": 1}}', ["retrieved_ids"], id="ids-object"),
    pytest.param('{"query_id": "q", "relevant_ids": ["a"]}', ["retrieved_ids"], id="ids-missing"),
    pytest.param('{"retrieved_ids": ["a", 1.5]}', ["retrieved_ids[1]"], id="id-float"),
    pytest.param('{"retrieved_ids": ["a", true]}', ["retrieved_ids[1]"], id="id-bool"),
    pytest.param('{"retrieved_ids": ["a", {"id": "b"}]}', ["retrieved_ids[1]"], id="id-object"),
    pytest.param('{"retrieved_ids": ["a", ""]}', ["retrieved_ids[1]"], id="id-empty-string"),
    pytest.param('{"retrieved_ids": ["a", null]}', ["retrieved_ids[1]"], id="id-null"),
    pytest.param(
        '{"retrieved_ids": ["a"], "relevant_ids": [2.0]}', ["relevant_ids[0]"], id="rel-id-float"
    ),
    pytest.param(
        '{"retrieved_ids": ["a"], "relevant_ids": "a"}', ["relevant_ids"], id="rel-ids-string"
    ),
    pytest.param(
        '{"retrieved_ids": ["a"], "relevance_scores": {"d1": -1}}',
        ["relevance_scores.d1"],
        id="grade-negative",
    ),
    pytest.param(
        '{"retrieved_ids": ["a"], "relevance_scores": {"d1": "3"}}',
        ["relevance_scores.d1"],
        id="grade-string",
    ),
    pytest.param(
        '{"retrieved_ids": ["a"], "relevance_scores": {"d1": true}}',
        ["relevance_scores.d1"],
        id="grade-bool",
    ),
    pytest.param(
        '{"retrieved_ids": ["a"], "relevance_scores": {"d1": null}}',
        ["relevance_scores.d1"],
        id="grade-null",
    ),
    pytest.param(
        '{"retrieved_ids": ["a"], "relevance_scores": {"d1": [1]}}',
        ["relevance_scores.d1"],
        id="grade-list",
    ),
    pytest.param(
        '{"retrieved_ids": ["a"], "relevance_scores": {"d1": NaN}}', ["NaN"], id="grade-nan-literal"
    ),
    pytest.param(
        '{"retrieved_ids": ["a"], "relevance_scores": {"d1": Infinity}}',
        ["Infinity"],
        id="grade-inf-literal",
    ),
    pytest.param(
        '{"retrieved_ids": ["a"], "relevance_scores": {"d1": 1e999}}',
        ["relevance_scores.d1"],
        id="grade-overflowing-float",
    ),
    pytest.param(
        '{"retrieved_ids": ["a"], "relevance_scores": {"d1": ' + HUGE + "}}",
        ["relevance_scores.d1"],
        id="grade-huge-integer",
    ),
    pytest.param(
        '{"retrieved_ids": ["a"], "relevance_scores": 3}', ["relevance_scores"], id="grades-number"
    ),
    pytest.param(
        '{"retrieved_ids": ["a"], "relevance_scores": {"": 1}}',
        ["relevance_scores"],
        id="grade-empty-id",
    ),
    pytest.param('{"retrieved_ids": ["a"], "query_id": 1.5}', ["query_id"], id="query-id-float"),
    pytest.param('{"retrieved_ids": ["a"], "query_id": false}', ["query_id"], id="query-id-bool"),
    pytest.param("[1, 2]", ["object"], id="line-is-array"),
    pytest.param('"retrieved_ids"', ["object"], id="line-is-string"),
    pytest.param("42", ["object"], id="line-is-number"),
    pytest.param("null", ["object"], id="line-is-null"),
]


@pytest.mark.parametrize(("line", "fragments"), BAD_LINES)
def test_bad_record_exits_2_with_one_line(run_cli, write_jsonl, line: str, fragments) -> None:
    path = write_jsonl([GOOD, GOOD, line], "bad.jsonl")
    result = run_cli("eval", path, "--gate", "mrr>=0.5")
    result.assert_one_line_error("bad.jsonl:3", *fragments)
    assert result.out == ""  # no half-finished report


@pytest.mark.parametrize(("line", "fragments"), BAD_LINES)
def test_bad_record_is_skipped_and_counted(cli, write_jsonl, line: str, fragments) -> None:
    path = write_jsonl([GOOD, GOOD, line, GOOD], "bad.jsonl")
    result = cli("eval", path, "--on-invalid", "skip", "--format", "json", "--gate", "mrr>=0.5")
    assert result.code == 0, result.err
    summary = result.json()["summary"]
    assert summary["read"] == 4
    assert summary["scored"] == 3
    assert summary["skipped"] == {"unlabeled": 0, "no_relevant": 0, "invalid": 1}
    assert_accounting(summary)
    [example] = summary["invalid_examples"]
    assert "bad.jsonl:3" in example
    for fragment in fragments:
        assert fragment in example
    assert result.json()["metrics"]["mrr"] == 1.0


def test_line_numbers_count_blank_lines(run_cli, tmp_path) -> None:
    path = tmp_path / "gaps.jsonl"
    path.write_text(json.dumps(GOOD) + "\n\n\n" + '{"retrieved_ids": 7}\n', encoding="utf-8")
    run_cli("eval", path).assert_one_line_error("gaps.jsonl:4", "retrieved_ids")


def test_first_bad_record_is_reported(run_cli, write_jsonl) -> None:
    path = write_jsonl([GOOD, '{"retrieved_ids": 1}', "oops"], "bad.jsonl")
    run_cli("eval", path).assert_one_line_error("bad.jsonl:2", "retrieved_ids")


def test_bad_record_on_stdin_is_located(run_cli) -> None:
    text = json.dumps(GOOD) + "\n" + '{"retrieved_ids": ["a"], "relevance_scores": {"d1": -2}}\n'
    result = run_cli("eval", "-", input=text)
    result.assert_one_line_error("<stdin>:2", "relevance_scores.d1")


def test_bad_row_in_csv_names_the_line(run_cli, tmp_path) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(
        'query_id,retrieved_ids,relevant_ids\nq1,"[""a"",""b""]","[""a""]"\nq2,"a;b","[""a""]"\n',
        encoding="utf-8",
    )
    run_cli("eval", path).assert_one_line_error("bad.csv:3", "retrieved_ids")


def test_bad_row_in_parquet_names_the_row(run_cli, tmp_path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table(
        {
            "query_id": ["q1", "q2"],
            "retrieved_ids": [["a", "b"], ["b", "a"]],
            "relevance_scores": [[("a", 2)], [("a", -1)]],
        },
        schema=pa.schema(
            [
                ("query_id", pa.string()),
                ("retrieved_ids", pa.list_(pa.string())),
                ("relevance_scores", pa.map_(pa.string(), pa.int64())),
            ]
        ),
    )
    pq.write_table(table, tmp_path / "bad.parquet")
    result = run_cli("eval", tmp_path / "bad.parquet")
    result.assert_one_line_error("bad.parquet row 2", "relevance_scores.a")


# --------------------------------------------------------------------------------------------------
# --on-invalid skip in more detail
# --------------------------------------------------------------------------------------------------


def test_skip_lists_the_first_ten_invalid_records(cli, write_jsonl) -> None:
    lines = [GOOD] + [f"broken {i}" for i in range(15)] + [{"retrieved_ids": ["a"]}]
    result = cli(
        "eval", write_jsonl(lines, "many.jsonl"), "--on-invalid", "skip", "--format", "json"
    )
    assert result.code == 0, result.err
    summary = result.json()["summary"]
    assert summary["read"] == 17
    assert summary["scored"] == 1
    assert summary["skipped"] == {"unlabeled": 1, "no_relevant": 0, "invalid": 15}
    assert_accounting(summary)
    examples = summary["invalid_examples"]
    assert len(examples) == 10
    assert [example.split(":")[1] for example in examples] == [str(n) for n in range(2, 12)]
    assert all("many.jsonl" in example for example in examples)


def test_skip_lists_invalid_records_in_the_table(cli, write_jsonl) -> None:
    path = write_jsonl(
        [
            GOOD,
            '{"retrieved_ids": 3}',
            GOOD,
            '{"retrieved_ids": ["a"], "relevance_scores": {"x": -1}}',
        ],
        "bad.jsonl",
    )
    result = cli("eval", path, "--on-invalid", "skip")
    assert result.code == 0, result.err
    assert "4 records read: 2 scored, 2 skipped" in result.out
    assert "invalid 2" in result.out
    listed = [line.strip() for line in result.out.splitlines() if "bad.jsonl:" in line]
    assert len(listed) == 2
    assert "bad.jsonl:2" in listed[0] and "retrieved_ids" in listed[0]
    assert "bad.jsonl:4" in listed[1] and "relevance_scores.x" in listed[1]


def test_on_invalid_skip_from_config(cli, write_jsonl, tmp_path) -> None:
    config = tmp_path / "c.toml"
    config.write_text('on_invalid = "skip"\n', encoding="utf-8")
    path = write_jsonl([GOOD, "nope"], "bad.jsonl")
    result = cli("eval", path, "--config", config, "--format", "json")
    assert result.code == 0, result.err
    assert result.json()["summary"]["skipped"]["invalid"] == 1
    # the command line wins over the config file
    assert cli("eval", path, "--config", config, "--on-invalid", "fail").code == 2


def test_skip_with_everything_invalid_still_fails_a_gate(cli, write_jsonl) -> None:
    result = cli(
        "eval",
        write_jsonl(["x", "y"]),
        "--on-invalid",
        "skip",
        "--gate",
        "mrr>=0.1",
        "--format",
        "json",
    )
    assert result.code == 1
    report = result.json()
    assert report["summary"]["scored"] == 0
    assert report["metrics"]["mrr"] is None
    assert report["gates"][0]["value"] is None
    assert report["gates"][0]["passed"] is False


def test_skip_when_the_first_line_is_an_array(cli, write_jsonl) -> None:
    path = write_jsonl(["[1, 2]", GOOD, GOOD], "bad.jsonl")
    result = cli("eval", path, "--on-invalid", "skip", "--format", "json")
    summary = result.json()["summary"]
    assert summary["read"] == 3
    assert summary["scored"] == 2
    assert summary["skipped"]["invalid"] == 1


def test_content_after_a_json_array_is_not_ignored(run_cli, tmp_path) -> None:
    path = tmp_path / "traces.json"
    path.write_text(f"[{json.dumps(GOOD)}]\n{json.dumps(GOOD)}\n", encoding="utf-8")
    result = run_cli("eval", path, "--format", "json")
    # Either read both records, or refuse the file; never score one and drop the other silently.
    if result.code == 0:
        assert result.json()["summary"]["read"] == 2
    else:
        result.assert_one_line_error("traces.json")
