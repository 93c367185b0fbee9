"""Row-shaped sources: Parquet (map, struct and JSON-text grades), CSV/TSV, in-memory tables."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import rankgate
from rankgate import InputError, UsageError
from rankgate.errors import Location
from rankgate.io import FieldMap, open_source, validate_record


def read_traces(source, **kwargs):
    """Every trace of a source; closes the reader even when a record is invalid."""
    raws = iter(open_source(source, **kwargs))
    try:
        return [validate_record(raw, FieldMap()) for raw in raws]
    finally:
        raws.close()


def first_error(source, **kwargs) -> InputError:
    with pytest.raises(InputError) as caught:
        read_traces(source, **kwargs)
    return caught.value


def write_parquet(path, columns):
    pq.write_table(pa.table(columns), path)
    return path


# --- Parquet -------------------------------------------------------------------------------------


def test_struct_grades_treat_null_fields_as_absent(tmp_path):
    """A struct column gets one field per document seen in any row; the rest of a row is null."""
    scores = pa.array([{"d1": 2}, {"d2": 1}, None])
    assert scores.type == pa.struct([("d1", pa.int64()), ("d2", pa.int64())])
    path = write_parquet(
        tmp_path / "t.parquet",
        {"retrieved_ids": [["d1", "d2"], ["d2"], ["d3"]], "relevance_scores": scores},
    )
    traces = read_traces(path)
    assert [t.grades for t in traces] == [{"d1": 2.0}, {"d2": 1.0}, None]


def test_null_grade_in_json_is_an_error_not_an_absence(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"retrieved_ids": ["d1"], "relevance_scores": {"d1": 2, "d2": null}}\n')
    error = first_error(path)
    assert (error.field, error.problem) == (
        "relevance_scores.d2",
        "grade must be a number >= 0, got null",
    )


def test_map_grades_with_integer_keys(tmp_path):
    scores = pa.array([[(1, 3), (2, 0)]], type=pa.map_(pa.int64(), pa.int64()))
    path = write_parquet(
        tmp_path / "t.parquet",
        {
            "query_id": pa.array([5]),
            "retrieved_ids": pa.array([[2, 1]]),
            "relevance_scores": scores,
        },
    )
    [trace] = read_traces(path)
    assert (trace.query_id, trace.retrieved_ids, trace.grades) == (
        "5",
        ["2", "1"],
        {"1": 3.0, "2": 0.0},
    )


def test_map_grades_with_float_values(tmp_path):
    scores = pa.array([[("d1", 0.5)]], type=pa.map_(pa.string(), pa.float64()))
    path = write_parquet(
        tmp_path / "t.parquet", {"retrieved_ids": [["d1"]], "relevance_scores": scores}
    )
    assert read_traces(path)[0].grades == {"d1": 0.5}


def test_parquet_error_names_the_row(tmp_path):
    scores = pa.array([{"d1": 1}, {"d1": -2}], type=pa.map_(pa.string(), pa.int64()))
    path = write_parquet(
        tmp_path / "t.parquet", {"retrieved_ids": [["d1"], ["d1"]], "relevance_scores": scores}
    )
    error = first_error(path)
    assert error.location == Location(str(path), row=2)
    assert (
        str(error)
        == f"{path} row 2: field 'relevance_scores.d1': grade must be a number >= 0, got -2"
    )


def test_parquet_json_text_grades_that_are_not_json(tmp_path):
    path = write_parquet(
        tmp_path / "t.parquet",
        {"retrieved_ids": [["d1"], ["d1"]], "relevance_scores": ['{"d1": 1}', '{"d1": 1,']},
    )
    error = first_error(path)
    assert (str(error.location), error.field) == (f"{path} row 2", "relevance_scores")
    assert error.problem.startswith("text is not valid JSON")


def test_parquet_json_text_grades_keyed_by_a_lone_surrogate_score_as_in_json_lines(tmp_path):
    # A JSON escape can spell a lone surrogate, which Arrow text cannot hold: the row goes to the
    # validator, as the same record in a JSON Lines file does, never to an internal error.
    grades = {"\ud800": 1, "d1": 2}
    pq.write_table(
        pa.table(
            {
                "query_id": ["q1"],
                "retrieved_ids": [["d1"]],
                "relevance_scores": [json.dumps(grades)],
            }
        ),
        tmp_path / "t.parquet",
    )
    lines = tmp_path / "t.jsonl"
    lines.write_text(
        json.dumps({"query_id": "q1", "retrieved_ids": ["d1"], "relevance_scores": grades}) + "\n"
    )
    from_parquet = rankgate.evaluate(tmp_path / "t.parquet", ["ndcg@10", "p@1"])
    from_lines = rankgate.evaluate(lines, ["ndcg@10", "p@1"])
    assert from_parquet.summary == from_lines.summary
    assert from_parquet.means == from_lines.means
    assert from_parquet.summary.scored == 1


def test_parquet_null_element_in_a_list_is_refused(tmp_path):
    path = write_parquet(tmp_path / "t.parquet", {"retrieved_ids": [["d1", None]]})
    error = first_error(path)
    assert (error.field, error.problem) == (
        "retrieved_ids[1]",
        "expected a string or integer ID, got null",
    )


def test_parquet_is_detected_by_magic_bytes(tmp_path):
    path = write_parquet(tmp_path / "traces.data", {"query_id": ["q"], "retrieved_ids": [["文"]]})
    [trace] = read_traces(path)
    assert (trace.query_id, trace.retrieved_ids, str(trace.location)) == (
        "q",
        ["文"],
        f"{path} row 1",
    )


def test_a_file_that_is_not_parquet(tmp_path):
    path = tmp_path / "t.parquet"
    path.write_text('{"retrieved_ids": []}\n')
    error = first_error(path)
    assert str(error.location) == str(path)
    assert error.problem.startswith("cannot read as Parquet")


def test_nested_struct_under_input_in_parquet(tmp_path):
    path = write_parquet(
        tmp_path / "t.parquet",
        {
            "input": pa.array(
                [
                    {"query_id": "q1", "retrieved_ids": ["a", "b"], "relevant_ids": ["b"]},
                    {"query_id": "q2", "retrieved_ids": ["c"], "relevant_ids": None},
                ]
            ),
            "split": ["dev", "test"],
        },
    )
    assert [(t.query_id, t.retrieved_ids, t.grades, t.attributes) for t in read_traces(path)] == [
        ("q1", ["a", "b"], {"b": 1.0}, {"split": "dev"}),
        ("q2", ["c"], None, {"split": "test"}),
    ]


# --- CSV and TSV ---------------------------------------------------------------------------------


def test_csv_empty_cells_are_missing(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text(
        "query_id,retrieved_ids,relevant_ids,relevance_scores,query_type\n"
        ',"[""a"", ""b""]",,,\n'
        'q2,[],"[""x""]",,factual\n'
        'q3,"[1, 2]",,"{""2"": 2}",\n'
    )
    assert [(t.query_id, t.retrieved_ids, t.grades, t.attributes) for t in read_traces(path)] == [
        ("#1", ["a", "b"], None, {"query_type": None}),
        ("q2", [], {"x": 1.0}, {"query_type": "factual"}),
        ("q3", ["1", "2"], {"2": 2.0}, {"query_type": None}),
    ]


def test_csv_error_message_names_file_and_line(tmp_path):
    path = tmp_path / "x.csv"
    path.write_text("query_id,retrieved_ids\nq1,[]\nq2,d1\n")
    error = first_error(path)
    assert str(error) == f"{path}:3: field 'retrieved_ids': expected a list of IDs, got string"


def test_csv_cell_with_broken_json(tmp_path):
    path = tmp_path / "x.csv"
    path.write_text('query_id,retrieved_ids\nq1,"[""a"","\n')
    error = first_error(path)
    assert (str(error.location), error.field) == (f"{path}:2", "retrieved_ids")
    assert error.problem.startswith("text is not valid JSON")


def test_csv_row_with_too_many_cells(tmp_path):
    path = tmp_path / "x.csv"
    path.write_text("query_id,retrieved_ids\nq1,[]\nq2,[],surplus\n")
    error = first_error(path)
    assert (str(error.location), error.field, error.problem) == (
        f"{path}:3",
        None,
        "row has more cells than the header has columns",
    )


def test_csv_row_with_too_few_cells_is_refused_naming_the_first_missing_column(tmp_path):
    # Issue 15: a short row used to read as unlabeled. Which cell is missing cannot be known, so
    # the row is refused; an empty cell is how a CSV says "missing".
    path = tmp_path / "x.csv"
    path.write_text('retrieved_ids,query_id,relevant_ids\n"[""a""]"\n')
    error = first_error(path)
    assert (str(error.location), error.field) == (f"{path}:2", "query_id")
    assert error.problem.startswith("row has 1 cell, the header has 3 columns")


def test_csv_blank_lines_keep_line_numbers(tmp_path):
    path = tmp_path / "x.csv"
    path.write_text("query_id,retrieved_ids\n\nq1,[]\n\n\nq2,[]\nq3,nope\n")
    raws = list(open_source(path))
    assert [raw.location.line for raw in raws] == [3, 6, 7]


def test_csv_rows_after_a_multiline_cell_keep_their_line_numbers(tmp_path):
    path = tmp_path / "x.csv"
    path.write_text('query_id,retrieved_ids\nq1,"[""a"",\n""b""]"\nq2,[]\n')
    traces = read_traces(path)
    assert [(t.query_id, t.retrieved_ids) for t in traces] == [("q1", ["a", "b"]), ("q2", [])]
    assert traces[1].location.line == 4


def test_csv_row_spanning_lines_is_located_where_it_starts(tmp_path):
    path = tmp_path / "x.csv"
    path.write_text('query_id,retrieved_ids\nq1,"[""a"",\n1.5]"\n')
    error = first_error(path)
    assert error.field == "retrieved_ids[1]"
    assert error.location == Location(str(path), line=2)


def test_csv_invalid_utf8_names_its_line(tmp_path):
    path = tmp_path / "x.csv"
    path.write_bytes(b'query_id,retrieved_ids\nq1,[]\nq2,[]\nq3,"[""\xff""]"\n')
    error = first_error(path)
    assert error.location == Location(str(path), line=4)


def test_csv_invalid_utf8_is_an_input_error(tmp_path):
    path = tmp_path / "x.csv"
    path.write_bytes(b'query_id,retrieved_ids\nq1,"[""\xff""]"\n')
    error = first_error(path)
    assert error.location.source == str(path)
    assert error.problem == "line is not valid UTF-8"


def test_tsv_with_json_cells(tmp_path):
    path = tmp_path / "t.tsv"
    path.write_text(
        'query_id\tretrieved_ids\trelevance_scores\nq-1\t["café", 3]\t{"café": 1, "3": 0}\n',
        encoding="utf-8",
    )
    [trace] = read_traces(path)
    assert (trace.query_id, trace.retrieved_ids, trace.grades) == (
        "q-1",
        ["café", "3"],
        {"café": 1.0, "3": 0.0},
    )
    assert str(trace.location) == f"{path}:2"


def test_input_format_overrides_the_file_name(tmp_path):
    path = tmp_path / "export.txt"
    path.write_text('query_id,retrieved_ids\nq1,"[""a""]"\n')
    [trace] = read_traces(path, input_format="csv")
    assert (trace.query_id, trace.retrieved_ids) == ("q1", ["a"])
    tsv = tmp_path / "export.csv"
    tsv.write_text('query_id\tretrieved_ids\nq1\t["a"]\n')
    [trace] = read_traces(tsv, input_format="tsv")
    assert trace.retrieved_ids == ["a"]


# --- in-memory tables ----------------------------------------------------------------------------


def test_table_error_names_the_row(table_fmt, write_as):
    records = [
        {"query_id": "q1", "retrieved_ids": ["a"], "relevance_scores": {"a": 1}},
        {"query_id": "q2", "retrieved_ids": ["a", "b"], "relevance_scores": {"a": -1}},
    ]
    built = write_as(table_fmt, records)
    error = first_error(built.source)
    assert str(error.location) == built.locations[1]
    assert (error.field, error.problem) == (
        "relevance_scores.a",
        "grade must be a number >= 0, got -1",
    )


def test_text_format_error_names_the_line(text_fmt, write_as):
    records = [
        {"query_id": "q1", "retrieved_ids": ["a"], "relevant_ids": ["a"]},
        {"query_id": "q2", "retrieved_ids": ["a", "b"], "relevant_ids": ["a", 2.5]},
    ]
    built = write_as(text_fmt, records)
    error = first_error(built.source)
    assert str(error.location) == built.locations[1]
    assert (error.field, error.problem) == (
        "relevant_ids[1]",
        "expected a string or integer ID, got number",
    )


def test_arrow_record_batch_is_accepted():
    batch = pa.RecordBatch.from_pylist(
        [{"query_id": "q", "retrieved_ids": ["a"], "relevant_ids": ["a"]}]
    )
    evaluation = rankgate.evaluate(batch, ["mrr"])
    assert evaluation.per_query() == [{"query_id": "q", "mrr": 1.0}]


def test_pandas_frame_that_arrow_cannot_hold_is_a_usage_error():
    import pandas as pd

    frame = pd.DataFrame({"retrieved_ids": [["a"], [1]]})  # text and integers in one column
    with pytest.raises(UsageError, match="cannot convert the DataFrame to Arrow"):
        open_source(frame)


def test_pandas_frame_with_a_non_default_index():
    import pandas as pd

    frame = pd.DataFrame(
        {"query_id": ["q1", "q2"], "retrieved_ids": [["a"], ["b"]]}, index=[10, 20]
    )
    traces = read_traces(frame)
    assert [(t.query_id, t.attributes, str(t.location)) for t in traces] == [
        ("q1", {}, "<DataFrame> row 1"),
        ("q2", {}, "<DataFrame> row 2"),
    ]


def test_polars_struct_grades_with_missing_keys():
    import polars as pl

    frame = pl.DataFrame(
        [
            {"query_id": "q1", "retrieved_ids": ["a"], "relevance_scores": {"a": 2}},
            {"query_id": "q2", "retrieved_ids": ["b"], "relevance_scores": {"b": 1}},
        ]
    )
    assert [t.grades for t in read_traces(frame)] == [{"a": 2.0}, {"b": 1.0}]


@pytest.mark.parametrize("thing", [42, 4.5, {"retrieved_ids": []}, object()])
def test_unreadable_inputs_are_usage_errors(thing):
    with pytest.raises(UsageError):
        open_source(thing)


def test_missing_file_folder_and_unknown_format(tmp_path):
    with pytest.raises(UsageError, match="no such file"):
        open_source(tmp_path / "nope.jsonl")
    with pytest.raises(UsageError, match="is a folder"):
        open_source(tmp_path)
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"retrieved_ids": []}))
    with pytest.raises(UsageError, match="unknown input format"):
        open_source(path, input_format="xml")
