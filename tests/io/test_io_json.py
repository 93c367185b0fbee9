"""JSON Lines and JSON arrays: line numbers, blank lines, BOM, gzip, stdin, and what is refused."""

from __future__ import annotations

import gzip
import io
import sys

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


def first_error(source) -> InputError:
    with pytest.raises(InputError) as caught:
        read_traces(source)
    return caught.value


class FakeStdin:
    def __init__(self, data: bytes) -> None:
        self.buffer = io.BytesIO(data)


# --- JSON Lines ---------------------------------------------------------------------------------


def test_error_message_names_file_line_and_field(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text(
        '{"query_id": "a", "retrieved_ids": ["d1"]}\n'
        '{"query_id": "b", "retrieved_ids": []}\n'
        '{"query_id": "c", "retrieved_ids": "d1 d2"}\n',
        encoding="utf-8",
    )
    error = first_error(path)
    assert error.location == Location(str(path), line=3)
    assert error.field == "retrieved_ids"
    assert error.problem == "expected a list of IDs, got string"
    assert str(error) == f"{path}:3: field 'retrieved_ids': expected a list of IDs, got string"


def test_blank_lines_are_not_records_and_do_not_shift_line_numbers(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(
        "\n"
        '{"retrieved_ids": ["a"]}\n'
        "   \n"
        "\t\r\n"
        '{"retrieved_ids": ["b"]}\n'
        "\n"
        '{"retrieved_ids": 3}\n'
        "\n",
        encoding="utf-8",
    )
    raws = list(open_source(path))
    assert [raw.location.line for raw in raws] == [2, 5, 7]
    first, second = (validate_record(raw, FieldMap()) for raw in raws[:2])
    # records are numbered by position among records, not by line
    assert (first.query_id, second.query_id) == ("#1", "#2")
    with pytest.raises(InputError, match=r"t\.jsonl:7: field 'retrieved_ids'"):
        validate_record(raws[2], FieldMap())


def test_crlf_line_endings(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_bytes(b'{"query_id": "a", "retrieved_ids": ["x"]}\r\n\r\n{"retrieved_ids": []}\r\n')
    traces = read_traces(path)
    assert [(t.query_id, t.location.line) for t in traces] == [("a", 1), ("#2", 3)]


def test_bom_does_not_break_the_first_record(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_bytes(
        b'\xef\xbb\xbf{"query_id": "a", "retrieved_ids": ["x"]}\n{"retrieved_ids": 1}\n'
    )
    raws = list(open_source(path))
    assert validate_record(raws[0], FieldMap()).query_id == "a"
    with pytest.raises(InputError) as caught:
        validate_record(raws[1], FieldMap())
    assert caught.value.location == Location(str(path), line=2)


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_non_json_number_literals_are_refused(tmp_path, literal):
    path = tmp_path / "t.jsonl"
    path.write_text(
        '{"retrieved_ids": ["a"], "relevant_ids": ["a"]}\n'
        f'{{"retrieved_ids": ["a"], "relevance_scores": {{"a": {literal}}}}}\n',
        encoding="utf-8",
    )
    error = first_error(path)
    assert error.location == Location(str(path), line=2)
    assert error.field is None
    assert error.problem.startswith("not valid JSON")
    assert literal in error.problem


def test_malformed_json_line_names_its_line(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"retrieved_ids": []}\n{"retrieved_ids": [}\n', encoding="utf-8")
    error = first_error(path)
    assert str(error.location) == f"{path}:2"
    assert error.problem.startswith("not valid JSON (")


def test_invalid_utf8_line_names_its_line(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_bytes(b'{"retrieved_ids": ["a"]}\n{"retrieved_ids": ["\xff\xfe"]}\n')
    error = first_error(path)
    assert error.location == Location(str(path), line=2)
    assert error.problem == "line is not valid UTF-8"


@pytest.mark.parametrize(
    ("line", "kind"),
    [("[1, 2]", "list"), ('"just text"', "string"), ("42", "integer"), ("null", "null")],
)
def test_a_record_that_is_not_an_object_is_refused(tmp_path, line, kind):
    path = tmp_path / "t.jsonl"
    path.write_text('{"retrieved_ids": []}\n' + line + "\n", encoding="utf-8")
    error = first_error(path)
    assert (str(error.location), error.field, error.problem) == (
        f"{path}:2",
        None,
        f"expected an object, got {kind}",
    )


def test_a_json_file_may_hold_json_lines(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(
        '{"query_id": "a", "retrieved_ids": []}\n{"query_id": "b", "retrieved_ids": []}\n'
    )
    assert [t.query_id for t in read_traces(path)] == ["a", "b"]


def test_gzip_is_detected_by_magic_bytes_whatever_the_name(tmp_path):
    data = gzip.compress(b'{"query_id": "z", "retrieved_ids": ["caf\xc3\xa9"]}\n')
    for name in ("t.jsonl.gz", "t.json", "t.jsonl", "no-suffix", "t.log"):
        path = tmp_path / name
        path.write_bytes(data)
        [trace] = read_traces(path)
        assert (trace.query_id, trace.retrieved_ids, str(trace.location)) == (
            "z",
            ["café"],
            f"{path}:1",
        ), name


# --- JSON arrays ---------------------------------------------------------------------------------

PRETTY_ARRAY = """\
[
  {
    "query_id": "q1",
    "retrieved_ids": ["a", "b"],
    "relevant_ids": ["b"]
  },
  {"query_id": "q2", "retrieved_ids": []},

  {
    "query_id": "q3",
    "retrieved_ids": [
      "c",
      "d"
    ]
  }, {"query_id": "q4", "retrieved_ids": ["e"]}
]
"""


def test_array_elements_are_located_at_the_line_they_start(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(PRETTY_ARRAY, encoding="utf-8")
    traces = read_traces(path)
    assert [(t.query_id, t.location.line) for t in traces] == [
        ("q1", 2),
        ("q2", 7),
        ("q3", 9),
        ("q4", 15),
    ]
    assert traces[0].grades == {"b": 1.0}
    assert traces[2].retrieved_ids == ["c", "d"]


def test_array_validation_error_names_the_elements_line(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(PRETTY_ARRAY.replace('"retrieved_ids": []', '"retrieved_ids": {}'))
    error = first_error(path)
    assert str(error) == f"{path}:7: field 'retrieved_ids': expected a list of IDs, got object"


def test_array_on_one_line(tmp_path):
    path = tmp_path / "t.json"
    path.write_text('[{"retrieved_ids": ["a"]}, {"retrieved_ids": ["b"]}]')
    traces = read_traces(path)
    assert [(t.query_id, t.retrieved_ids, t.location.line) for t in traces] == [
        ("#1", ["a"], 1),
        ("#2", ["b"], 1),
    ]


def test_array_with_leading_blank_lines_bom_and_gzip(tmp_path):
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(b'\xef\xbb\xbf\n\n  [\n{"retrieved_ids": ["\xe6\x96\x87"]}\n]'))
    [trace] = read_traces(path)
    assert (trace.retrieved_ids, trace.location.line) == (["文"], 4)


def test_empty_array_has_no_records(tmp_path):
    path = tmp_path / "t.json"
    path.write_text("[ ]\n")
    assert read_traces(path) == []


def test_broken_array_element_stops_with_its_line(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(
        "[\n"
        '  {"query_id": "q1", "retrieved_ids": []},\n'
        '  {"query_id": "q2", "retrieved_ids": [1 2]},\n'
        '  {"query_id": "q3", "retrieved_ids": []}\n'
        "]\n"
    )
    seen = []
    with pytest.raises(InputError) as caught:
        for raw in open_source(path):
            seen.append(validate_record(raw, FieldMap()).query_id)
    assert seen == ["q1"]
    assert caught.value.location == Location(str(path), line=3)
    assert caught.value.problem.startswith("not valid JSON")


def test_broken_element_spanning_lines_is_located_within_it(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(
        '[\n  {"query_id": "q1", "retrieved_ids": []},\n  {\n    "query_id": "q2",\n'
        '    "retrieved_ids": [1, 2,]\n  }\n]\n'
    )
    error = first_error(path)
    assert error.location.source == str(path)
    assert 3 <= error.location.line <= 6  # the element occupies lines 3 to 6


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ('[\n  {"retrieved_ids": []}\n  {"retrieved_ids": []}\n]', 3),  # missing comma
        ('[\n  {"retrieved_ids": []},\n  {"retrieved_ids": []}\n', 4),  # never closed
        ('[\n  {"retrieved_ids": []},\n]', 3),  # trailing comma
        ('[\n  {"retrieved_ids": [NaN]}\n]', 2),  # NaN is not JSON here either
    ],
)
def test_malformed_array_names_a_line(tmp_path, text, line):
    path = tmp_path / "t.json"
    path.write_text(text)
    error = first_error(path)
    assert error.location == Location(str(path), line=line)


# --- standard input ------------------------------------------------------------------------------


def test_stdin_is_read_from_its_binary_buffer(monkeypatch):
    monkeypatch.setattr(
        sys,
        "stdin",
        FakeStdin('{"query_id": "é", "retrieved_ids": [1]}\n\n{"retrieved_ids": "x"}\n'.encode()),
    )
    raws = list(open_source("-"))
    trace = validate_record(raws[0], FieldMap())
    assert (trace.query_id, trace.retrieved_ids, str(trace.location)) == ("é", ["1"], "<stdin>:1")
    with pytest.raises(InputError, match=r"^<stdin>:3: field 'retrieved_ids'"):
        validate_record(raws[1], FieldMap())


def test_stdin_may_hold_a_json_array(monkeypatch):
    monkeypatch.setattr(sys, "stdin", FakeStdin(PRETTY_ARRAY.encode()))
    evaluation = rankgate.evaluate("-", ["mrr"], input_format="json")
    assert evaluation.summary.read == 4
    assert evaluation.query_ids == ("q1",)
    assert evaluation.per_query() == [{"query_id": "q1", "mrr": 0.5}]


@pytest.mark.parametrize("fmt", ["csv", "tsv", "parquet"])
def test_stdin_is_json_only(monkeypatch, fmt):
    monkeypatch.setattr(sys, "stdin", FakeStdin(b""))
    with pytest.raises(UsageError):
        open_source("-", input_format=fmt)


def test_array_after_much_leading_whitespace(tmp_path):
    path = tmp_path / "t.json"
    path.write_text("\n" * 70 + '[{"query_id": "q1", "retrieved_ids": ["a"]}]\n')
    [trace] = read_traces(path)
    assert (trace.query_id, trace.location.line) == ("q1", 71)
