"""The compiled JSON Lines reader (rankgate._jsonl via io/jsonl_arrow.py) against the Python reader.

The Python path is the oracle: ``json_records.line_record`` (strict UTF-8, then json with NaN and
Infinity refused), ``validate_record`` and ``segment_value``. For every non-blank line the compiled
reader either says "slow" (the caller re-reads the line in Python) or gives exactly what the Python
path gives; a line Python refuses must always be slow. Being slow on a line Python accepts is
allowed (it only costs time), so the hand-written cases also pin down which lines stay fast.
"""

from __future__ import annotations

import io
import json
import math
import random
import threading
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rankgate.errors import InputError
from rankgate.io import jsonl_arrow, limits
from rankgate.io.json_records import JsonSource, line_record
from rankgate.io.source import GZIP_MAGIC
from rankgate.io.validate import FieldMap, validate_record
from rankgate.segments import MISSING_VALUE, segment_value

pytestmark = pytest.mark.skipif(not jsonl_arrow.available(), reason="rankgate._jsonl is not built")

FIELDS = FieldMap()
KEYS = (FIELDS.query_id, FIELDS.retrieved_ids, FIELDS.relevant_ids, FIELDS.relevance_scores)
SEGMENTS = ("query_type", "tier")
# An ordinal no record names itself after, so a wrongly missing query ID cannot pass unnoticed.
ORDINAL = 987_654_321
UNNAMED = f"#{ORDINAL}"
NO_SEGMENTS = [MISSING_VALUE] * len(SEGMENTS)

Outcome = tuple[str, list[str], list[tuple[str, float, float]] | None, list[str]]


# ---------------------------------------------------------------------------------------------
# The two paths, reduced to comparable values


def _grades(grades: dict[str, float] | None) -> list[tuple[str, float, float]] | None:
    # The sign is compared too: float("-0.0") keeps it, the int -0 does not.
    if grades is None:
        return None
    return [(key, value, math.copysign(1.0, value)) for key, value in grades.items()]


def python_path(
    line: bytes, fields: FieldMap = FIELDS, segments: tuple[str, ...] = SEGMENTS
) -> Outcome | None:
    """What the Python reader makes of one line; None when it refuses it."""
    try:
        raw = line_record("t.jsonl", line, 1, ORDINAL)
        trace = validate_record(raw, fields)
    except InputError:
        return None
    except RecursionError:  # Python's own nesting limit: not a trace either way
        return None
    return (
        trace.query_id,
        trace.retrieved_ids,
        _grades(trace.grades),
        [segment_value(trace.attributes, name) for name in segments],
    )


def fast_rows(parsed: jsonl_arrow.ParsedLines, segments: tuple[str, ...]) -> list[Outcome | None]:
    """The compiled reader's rows in the same shape; None for slow rows."""
    out: list[Outcome | None] = []
    for slow, row in zip(parsed.slow.tolist(), parsed.table.to_pylist(), strict=True):
        if slow:
            # a slow row carries nothing
            assert row["query_id"] is None and row["retrieved_ids"] == []
            assert row["relevant_ids"] is None and row["relevance_scores"] is None
            assert all(row["segment:" + name] is None for name in segments)
            out.append(None)
            continue
        relevant, scores = row["relevant_ids"], row["relevance_scores"]
        grades: dict[str, float] | None = None
        if relevant is not None or scores is not None:
            grades = dict.fromkeys(relevant or (), 1.0)
            grades.update(scores or ())  # repeated keys: the last one wins, as in a dict
        out.append(
            (
                UNNAMED if row["query_id"] is None else row["query_id"],
                row["retrieved_ids"],
                _grades(grades),
                [
                    MISSING_VALUE if (text := row["segment:" + name]) is None else text
                    for name in segments
                ],
            )
        )
    return out


def check(
    data: bytes,
    fields: FieldMap = FIELDS,
    segments: tuple[str, ...] = SEGMENTS,
    first_line: int = 1,
) -> list[tuple[Outcome | None, Outcome | None]]:
    """Parse ``data`` and hold every row to the Python path; returns (fast, python) per row."""
    keys = (fields.query_id, fields.retrieved_ids, fields.relevant_ids, fields.relevance_scores)
    parsed = jsonl_arrow.parse_chunk(data, keys, segments, first_line)
    parsed.table.validate(full=True)
    assert parsed.table.schema == jsonl_arrow.schema(segments)
    lines = list(io.BytesIO(data))  # split exactly as iterating a binary file does
    records = [(number, line) for number, line in enumerate(lines) if line.strip()]
    assert len(parsed) == len(records) == parsed.table.num_rows
    results = []
    for row, (fast, (number, line)) in enumerate(
        zip(fast_rows(parsed, segments), records, strict=True)
    ):
        assert parsed.line[row] == first_line + number
        start, end = int(parsed.start[row]), int(parsed.end[row])
        assert data[start:end] == line.removesuffix(b"\n")
        expected = python_path(line, fields, segments)
        if expected is None:
            assert fast is None, f"Python refuses {line!r}, the fast reader accepted it"
        elif fast is not None:
            assert fast == expected, line
        results.append((fast, expected))
    return results


def one(line: str | bytes, **kwargs: Any) -> Outcome | None:
    """The fast reader's verdict on a single line (checked against Python)."""
    data = line.encode("utf-8") if isinstance(line, str) else line
    [(fast, _)] = check(data, **kwargs)
    return fast


def is_fast(line: str | bytes, **kwargs: Any) -> bool:
    """A line both readers accept, on which the fast reader did not give up."""
    data = line.encode("utf-8") if isinstance(line, str) else line
    [(fast, expected)] = check(data, **kwargs)
    assert (fast is None) or (expected is not None)
    return fast is not None


def record(**fields: Any) -> str:
    base: dict[str, Any] = {"query_id": "q", "retrieved_ids": ["d1", "d2"]}
    base.update(fields)
    return json.dumps({key: value for key, value in base.items() if value is not ...})


# ---------------------------------------------------------------------------------------------
# By hand


def test_ordinary_record() -> None:
    line = json.dumps(
        {
            "query_id": "q-17",
            "retrieved_ids": ["d3", "d9", "d1", "d9"],
            "relevant_ids": ["d1", "d4"],
            "relevance_scores": {"d1": 3, "d4": 1, "d9": 0.5},
            "query_type": "factual",
            "other": {"nested": [1, {"x": None}], "t": True},
        }
    )
    assert one(line) == (
        "q-17",
        ["d3", "d9", "d1", "d9"],  # duplicates kept: de-duplication happens later
        [("d1", 3.0, 1.0), ("d4", 1.0, 1.0), ("d9", 0.5, 1.0)],
        ["factual", MISSING_VALUE],
    )


def test_escapes_and_unicode() -> None:
    line = (
        r'{"query_id": "q\"\\\/\b\f\n\r\t\u00e9\u4E2D", "retrieved_ids": ["a\u0041", '
        r'"\ud83e\udd80", "caf\u00e9", "\u0000"], "query_type": "文档 🦀 é"}'
    )
    fast = one(line)
    assert fast is not None
    assert fast[0] == 'q"\\/\b\f\n\r\t\u00e9\u4e2d'
    assert fast[1] == ["aA", "🦀", "café", "\x00"]
    assert fast[3][0] == "文档 🦀 é"


@pytest.mark.parametrize(
    "text",
    [r"\ud800", r"\udc00", r"\ud800\u0041", r"\ud800x", r"\udfff\ud800", r"\ud83e\ud83e"],
)
def test_lone_surrogate_escapes_are_slow(text: str) -> None:
    # Python keeps a lone surrogate in the str; no UTF-8 column can hold it.
    assert not is_fast('{"retrieved_ids": ["' + text + '"]}')
    assert not is_fast('{"retrieved_ids": [], "other": "' + text + '"}')


@pytest.mark.parametrize(
    "raw",
    [
        b"\xff",
        b"\x80",
        b"\xc0\xaf",  # overlong "/"
        b"\xc1\xbf",
        b"\xe0\x80\xaf",  # overlong, 3 bytes
        b"\xf0\x80\x80\xaf",  # overlong, 4 bytes
        b"\xed\xa0\x80",  # an encoded surrogate
        b"\xed\xbf\xbf",
        b"\xf4\x90\x80\x80",  # past U+10FFFF
        b"\xf5\x80\x80\x80",
        b"\xe4\xb8",  # truncated
        b"\xe4\xb8x",
        b"\xf0\x9f\xa6",
    ],
)
def test_invalid_utf8_is_slow(raw: bytes) -> None:
    for line in (
        b'{"retrieved_ids": ["a' + raw + b'"]}',
        b'{"retrieved_ids": [], "x": "' + raw + b'"}',
        b'{"retrieved_ids": []} ' + raw,
        b'{"retrieved_ids": [], ' + raw + b"}",
    ):
        assert one(line) is None


@pytest.mark.parametrize(
    "raw",
    [
        b"\xc2\x80",
        b"\xdf\xbf",
        b"\xe0\xa0\x80",
        b"\xed\x9f\xbf",
        b"\xee\x80\x80",
        b"\xef\xbf\xbf",
        b"\xf0\x90\x80\x80",
        b"\xf4\x8f\xbf\xbf",
        b"\x7f",
    ],
)
def test_valid_utf8_edges_are_fast(raw: bytes) -> None:
    fast = one(b'{"retrieved_ids": ["a' + raw + b'"], "query_type": "' + raw + b'"}')
    assert fast is not None
    assert fast[1] == ["a" + raw.decode("utf-8")]


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_are_slow(constant: str) -> None:
    assert one('{"retrieved_ids": ["a"], "relevance_scores": {"a": ' + constant + "}}") is None
    assert one('{"retrieved_ids": ["a"], "other": [' + constant + "]}") is None


@pytest.mark.parametrize(
    ("item", "fast_text"),
    [
        ("12", "12"),
        ("-5", "-5"),
        ("0", "0"),
        ("123456789012345678901234567890", "123456789012345678901234567890"),
        ("-0", None),  # str(int("-0")) is "0"
        ("1e2", None),
        ("1.0", None),
        ("1E2", None),
        ('""', None),
        ("true", None),
        ("false", None),
        ("null", None),
        ("[]", None),
        ('{"a": 1}', None),
        ("01", None),
        ("+1", None),
        ("- 1", None),
    ],
)
def test_document_ids(item: str, fast_text: str | None) -> None:
    fast = one('{"retrieved_ids": ["x", ' + item + "]}")
    assert fast == (None if fast_text is None else (UNNAMED, ["x", fast_text], None, NO_SEGMENTS))
    fast = one('{"retrieved_ids": [], "relevant_ids": [' + item + "]}")
    grades = [(fast_text, 1.0, 1.0)]
    assert fast == (None if fast_text is None else (UNNAMED, [], grades, NO_SEGMENTS))


def test_integer_ids_past_pythons_digit_limit_are_slow() -> None:
    # Python refuses int() of more than 4300 digits (by default), even in an unused field.
    long = "9" * 5000
    assert one('{"retrieved_ids": [' + long + "]}") is None
    assert one('{"retrieved_ids": [], "other": ' + long + "}") is None
    fine = "9" * 500
    assert one('{"retrieved_ids": [' + fine + "]}") == (UNNAMED, [fine], None, NO_SEGMENTS)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ('"q-1"', "q-1"),
        ("17", "17"),
        ("-17", "-17"),
        ("null", UNNAMED),
        (..., UNNAMED),
        ('"#1"', "#1"),
        ('""', None),
        ("-0", None),
        ("1.5", None),
        ("1e3", None),
        ("true", None),
        ("[]", None),
        ("{}", None),
    ],
)
def test_query_id(value: Any, expected: str | None) -> None:
    line = '{"retrieved_ids": []' + ("" if value is ... else ', "query_id": ' + value) + "}"
    fast = one(line)
    if expected is None:
        assert fast is None
    else:
        assert fast is not None and fast[0] == expected


@pytest.mark.parametrize(
    ("value", "grade"),
    [
        ("0", 0.0),
        ("-0", 0.0),
        ("-0.0", -0.0),
        ("3", 3.0),
        ("2.5", 2.5),
        ("1000", 1000.0),
        ("1000.0", 1000.0),
        ("1e2", 100.0),
        ("1E+2", 100.0),
        ("5e-1", 0.5),
        ("1e-400", 0.0),
        ("0.30000000000000004", 0.30000000000000004),
        ("0.1", 0.1),
        ("123.456789012345678901234567890", 123.45678901234568),
        ("1000.00000000000001", 1000.0),  # rounds to 1000.0, which passes in Python too
        ("0." + "0" * 390 + "1", 0.0),
        ("1000.5", None),
        ("1001", None),
        ("1e400", None),
        ("-1", None),
        ("-0.001", None),
        ("true", None),
        ("null", None),
        ('"1"', None),
        ("[1]", None),
        ("0." + "0" * 500 + "1", None),  # too long to copy for strtod: left to Python
    ],
)
def test_grades(value: str, grade: float | None) -> None:
    fast = one('{"retrieved_ids": ["a"], "relevance_scores": {"a": ' + value + "}}")
    if grade is None:
        assert fast is None
    else:
        assert fast is not None
        assert fast[2] == [("a", grade, math.copysign(1.0, grade))]


def test_grade_keys() -> None:
    assert one('{"retrieved_ids": [], "relevance_scores": {"": 1}}') is None
    fast = one(r'{"retrieved_ids": [], "relevance_scores": {"\u00e9": 1, "b": 2, "\u00e9": 3}}')
    assert fast is not None and fast[2] == [("é", 3.0, 1.0), ("b", 2.0, 1.0)]
    # relevant IDs first at grade 1, then the map's own grades override
    fast = one('{"retrieved_ids": [], "relevant_ids": ["x", "y"], "relevance_scores": {"y": 0}}')
    assert fast is not None and fast[2] == [("x", 1.0, 1.0), ("y", 0.0, 1.0)]
    fast = one('{"retrieved_ids": [], "relevant_ids": [], "relevance_scores": {}}')
    assert fast is not None and fast[2] == []


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ('"factual"', "factual"),
        ('""', ""),
        ("true", "true"),
        ("false", "false"),
        ("42", "42"),
        ("-7", "-7"),
        ("null", MISSING_VALUE),
        (..., MISSING_VALUE),
        ('"(missing)"', MISSING_VALUE),
        ("-0", None),
        ("1.5", None),
        ("1e2", None),
        ("[1]", None),
        ('{"a": 1}', None),
    ],
)
def test_segment_values(value: Any, text: str | None) -> None:
    line = '{"retrieved_ids": []' + ("" if value is ... else ', "query_type": ' + value) + "}"
    fast = one(line)
    if text is None:
        assert fast is None
    else:
        assert fast is not None and fast[3] == [text, MISSING_VALUE]


@pytest.mark.parametrize(
    "line",
    [
        '{"retrieved_ids": null}',
        '{"retrieved_ids": "d1"}',
        '{"retrieved_ids": {"d1": 1}}',
        '{"query_id": "q"}',
        "{}",
        '{"input": {"retrieved_ids": ["a"]}}',
        '{"retrieved_ids": [], "relevant_ids": "d1"}',
        '{"retrieved_ids": [], "relevant_ids": {}}',
        '{"retrieved_ids": [], "relevance_scores": []}',
        '{"retrieved_ids": [], "relevance_scores": {"a": true}}',
        '{"retrieved_ids": [], "relevance_scores": {"a": "1"}}',
        '{"retrieved_ids": [], "relevance_scores": "{}"}',
    ],
)
def test_shapes_left_to_python(line: str) -> None:
    assert one(line) is None


def test_fields_beside_input_are_fast() -> None:
    line = '{"input": {"retrieved_ids": ["z"]}, "retrieved_ids": ["a"], "query_id": "q"}'
    assert one(line) == ("q", ["a"], None, NO_SEGMENTS)


def test_null_fields() -> None:
    line = record(query_id=None, relevant_ids=None, relevance_scores=None, query_type=None)
    assert one(line) == (UNNAMED, ["d1", "d2"], None, NO_SEGMENTS)


@pytest.mark.parametrize(
    "line",
    [
        "[]",
        "42",
        '"text"',
        "null",
        '{"retrieved_ids": []} x',
        '{"retrieved_ids": []}{}',
        '{"retrieved_ids": []},',
        '{"retrieved_ids": [],}',
        '{"retrieved_ids": [1,]}',
        '{"retrieved_ids": [,1]}',
        '{"retrieved_ids" []}',
        "{retrieved_ids: []}",
        "{'retrieved_ids': []}",
        '{"retrieved_ids": []',
        '\ufeff{"retrieved_ids": []}',
        '\x0b{"retrieved_ids": []}',
        '{"retrieved_ids": []}\x0c',
        '{"retrieved_ids": ["a\tb"]}',  # raw control character
        '{"retrieved_ids": ["a\x00b"]}',
        '{"retrieved_ids": ["\\x41"]}',
        '{"retrieved_ids": ["\\u00g1"]}',
        '{"retrieved_ids": ["\\u00"]}',
        '{"retrieved_ids": ["\\',
    ],
)
def test_not_one_json_object(line: str) -> None:
    assert one(line + "\n") is None


def test_white_space_between_tokens() -> None:
    line = ' \t{ "retrieved_ids" :\t[ "a" ,\r"b" ] , "query_id":"q" \r}\t \r'
    assert one(line) == ("q", ["a", "b"], None, NO_SEGMENTS)


def test_nested_values_elsewhere_are_skipped() -> None:
    deep = "[" * 60 + "]" * 60
    line = (
        '{"a": {"b": [1, 2.5e3, -0, -0.0, true, false, null, "x", {"c": {}}, []]}, "d": '
        + deep
        + ', "retrieved_ids": ["r"], "e": "\\ud83e\\udd80"}'
    )
    assert one(line) == (UNNAMED, ["r"], None, NO_SEGMENTS)


@pytest.mark.parametrize("depth", [63, 64, 65, 100, 500])
def test_deep_nesting(depth: int) -> None:
    line = '{"retrieved_ids": [], "x": ' + "[" * depth + "]" * depth + "}"
    assert is_fast(line) == (depth <= 63)  # the record itself is the 64th level
    broken = '{"retrieved_ids": [], "x": ' + "[" * depth + "]" * (depth - 1) + "}"
    assert one(broken) is None


def test_repeated_keys() -> None:
    # A repeated key that matters is left to Python (json.loads keeps the last)...
    assert one('{"retrieved_ids": ["a"], "retrieved_ids": ["b"]}') is None
    assert one('{"retrieved_ids": ["a"], "query_id": "x", "query_id": "y"}') is None
    assert one('{"retrieved_ids": ["a"], "query_type": "x", "query_type": "y"}') is None
    assert one('{"retrieved_ids": ["a"], "retrieved\\u005fids": ["b"]}') is None
    # ... any other may repeat.
    assert one('{"retrieved_ids": ["a"], "x": 1, "x": [2]}') == (
        UNNAMED,
        ["a"],
        None,
        NO_SEGMENTS,
    )


def test_escaped_keys_are_matched_by_their_text() -> None:
    line = r'{"retrieved\u005fids": ["a"], "query\u005Fid": "q", "query_t\u0079pe": "t"}'
    assert one(line) == ("q", ["a"], None, ["t", MISSING_VALUE])


def test_lines_blank_lines_and_endings() -> None:
    data = (
        b"\n"
        + record(query_id="a").encode()
        + b"\r\n"
        + b"   \t\r\n"
        + b"\x0b\x0c\n"
        + b"\x0c\n"
        + record(query_id="b").encode()
        + b"\n\n"
        + b"[]\n"
        + record(query_id="c").encode()  # the last line has no "\n"
    )
    results = check(data, first_line=10)
    assert [fast[0] if fast else None for fast, _ in results] == ["a", "b", None, "c"]
    parsed = jsonl_arrow.parse_chunk(data, KEYS, SEGMENTS, 10)
    assert parsed.line.tolist() == [11, 15, 17, 18]
    assert parsed.slow.tolist() == [False, False, True, False]


def test_empty_and_blank_chunks() -> None:
    for data in (b"", b"\n", b"\n\n  \n", b"\x0b"):
        parsed = jsonl_arrow.parse_chunk(data, KEYS, SEGMENTS, 1)
        assert len(parsed) == 0 and parsed.table.num_rows == 0
        parsed.table.validate(full=True)


def test_every_prefix_of_a_line() -> None:
    line = record(
        query_id=7,
        relevant_ids=["d1", 3],
        relevance_scores={"d1": 2.5, "é": 1e-3},
        query_type="🦀",
        extra={"a": [None, True, "\\u"]},
    )
    data = line.encode()
    for cut in range(len(data) + 1):
        results = check(data[:cut])
        if cut == len(data):
            assert results[0][0] is not None
        else:
            assert all(fast is None for fast, _ in results)


def test_custom_field_names() -> None:
    fields = FieldMap(
        query_id="qid", retrieved_ids="docs", relevant_ids="gold", relevance_scores="grades"
    )
    line = '{"qid": 5, "docs": ["a"], "gold": ["b"], "grades": {"a": 2}, "retrieved_ids": 1}'
    assert one(line, fields=fields, segments=("kind",)) == (
        "5",
        ["a"],
        [("b", 1.0, 1.0), ("a", 2.0, 1.0)],
        [MISSING_VALUE],
    )


def test_segment_names_that_are_fields_or_repeated() -> None:
    # A field is never an attribute, so segmenting by one always gives "(missing)".
    segments = ("query_id", "tier", "tier")
    line = '{"query_id": "q", "retrieved_ids": [], "tier": "gold"}'
    assert one(line, segments=segments) == ("q", [], None, [MISSING_VALUE, "gold", "gold"])


def test_dotted_segment_names() -> None:
    segments = ("meta.kind",)
    assert one('{"retrieved_ids": [], "meta": {"kind": "x"}}', segments=segments) is None
    line = '{"retrieved_ids": [], "meta.kind": "y", "meta": {"kind": "x"}}'
    assert one(line, segments=segments) == (UNNAMED, [], None, ["y"])
    assert one('{"retrieved_ids": [], "meta": 3}', segments=segments) == (
        UNNAMED,
        [],
        None,
        [MISSING_VALUE],
    )


def test_repeated_field_names_leave_everything_to_python() -> None:
    fields = FieldMap(relevant_ids="retrieved_ids")
    assert one('{"retrieved_ids": ["a"]}', fields=fields) is None


def test_inputs_of_every_buffer_kind() -> None:
    data = (record(query_id="a") + "\n" + record(query_id="b") + "\n").encode()
    expected = jsonl_arrow.parse_chunk(data, KEYS, SEGMENTS, 1).table
    for buffer in (bytearray(data), memoryview(data), memoryview(bytearray(data)).toreadonly()):
        assert jsonl_arrow.parse_chunk(buffer, KEYS, SEGMENTS, 1).table.equals(expected)


def test_bad_arguments() -> None:
    from rankgate import _jsonl

    with pytest.raises(ValueError):
        _jsonl.parse(b"", KEYS[:3], ())  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        _jsonl.parse(b"", (*KEYS[:3], 4), ())  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        _jsonl.parse(b"", KEYS, ("a", None))  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        _jsonl.parse("text", KEYS, ())  # type: ignore[arg-type]
    with pytest.raises(UnicodeEncodeError):
        _jsonl.parse(b"", KEYS, ("\ud800",))


def test_output_layout() -> None:
    from rankgate import _jsonl

    data = b'{"retrieved_ids": ["ab", 7], "relevance_scores": {"ab": 2}, "t": "x"}\n\n[]\n'
    out: dict[str, Any] = _jsonl.parse(data, KEYS, ("t",))

    def ints(key: str) -> list[int]:
        return np.frombuffer(out[key], np.int64).tolist()

    assert out["rows"] == 2
    assert bytes(out["status"]) == b"\x00\x01"
    first = data.index(b"\n")
    assert ints("line_index") == [0, 2]
    assert (ints("line_start"), ints("line_end")) == ([0, first + 2], [first, first + 4])
    assert (ints("retrieved_lists"), ints("retrieved_offsets")) == ([0, 2, 2], [0, 2, 3])
    assert bytes(out["retrieved_data"]) == b"ab7"
    assert bytes(out["relevant_valid"]) == b"\x00\x00"
    assert ints("relevant_lists") == [0, 0, 0] and ints("relevant_offsets") == [0]
    assert bytes(out["scores_valid"]) == b"\x01\x00" and ints("scores_entries") == [0, 1, 1]
    assert np.frombuffer(out["scores_values"], np.float64).tolist() == [2.0]
    [(valid, offsets, text)] = out["segments"]
    assert (bytes(valid), bytes(text)) == (b"\x01\x00", b"x")
    assert np.frombuffer(offsets, np.int64).tolist() == [0, 1, 1]
    # the arrays are read-only views of the parser's memory, alive as long as anything uses them
    assert isinstance(out["retrieved_data"], _jsonl.Block) and len(out["retrieved_data"]) == 3
    view = memoryview(out["retrieved_data"])
    assert view.readonly
    out.clear()  # the dict was the only other owner
    assert view.tobytes() == b"ab7"
    empty = _jsonl.parse(b"", KEYS, ())
    assert bytes(empty["status"]) == b"" and len(memoryview(empty["query_id_data"])) == 0


# ---------------------------------------------------------------------------------------------
# Random records and random damage

_CHARS = st.characters() | st.sampled_from(
    ["\ud800", "\udfff", "\ud83e", "\udd80", "\x00", "\x1f", "\x7f", '"', "\\", "é", "🦀", "/"]
)
_TEXT = st.text(_CHARS, max_size=6)
_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(10**40), max_value=10**40)
    | st.floats()
    | _TEXT
)
_JSON = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
    max_leaves=8,
)


def _mostly(good: st.SearchStrategy[Any], odd: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``good`` nine times in ten: random shapes alone would almost never make a valid trace, and
    only valid ones test that the two readers agree on values."""
    return st.integers(0, 9).flatmap(lambda k: odd if k == 0 else good)


_CLEAN_TEXT = st.text(st.characters(codec="utf-8"), max_size=6)
_ID = _mostly(
    st.one_of(_CLEAN_TEXT.filter(bool), st.integers(), st.sampled_from(["d1", "d2", "x"])),
    st.one_of(_TEXT, st.just(""), _SCALARS),
)
_IDS = _mostly(st.lists(_ID, max_size=5), _JSON)
_GRADE = _mostly(
    st.one_of(
        st.integers(min_value=0, max_value=3),
        st.floats(min_value=0, max_value=1000),
        st.sampled_from([0, 1000, 1000.0, -0.0, 1e-320, 999.9999999999999, 0.1, 2.5]),
    ),
    st.one_of(st.integers(min_value=-3, max_value=1003), st.floats(), _SCALARS),
)
_SCORES = _mostly(
    st.dictionaries(st.one_of(_CLEAN_TEXT.filter(bool), st.sampled_from(["d1", "d2"])), _GRADE),
    st.one_of(st.dictionaries(_TEXT, _GRADE), _JSON),
)
_SEGMENT = _mostly(
    st.one_of(_CLEAN_TEXT, st.booleans(), st.integers(), st.none()), st.one_of(_SCALARS, _JSON)
)
_TRACE = st.fixed_dictionaries(
    {"retrieved_ids": _IDS},
    optional={
        "query_id": _mostly(st.one_of(_CLEAN_TEXT.filter(bool), st.integers()), _SCALARS),
        "relevant_ids": _mostly(st.one_of(st.none(), _IDS), _JSON),
        "relevance_scores": _mostly(st.one_of(st.none(), _SCORES), _JSON),
        "query_type": _SEGMENT,
        "tier": _SEGMENT,
        "input": _JSON,
        "other": _JSON,
        "": _JSON,
    },
)
# Mostly traces; sometimes any JSON at all, or a record that may lack its ranking.
_RECORDS = _mostly(
    _TRACE,
    st.one_of(
        _JSON,
        st.dictionaries(
            st.sampled_from(["query_id", "retrieved_ids", "relevant_ids", "input", "tier"]), _JSON
        ),
    ),
)


@st.composite
def _lines(draw: st.DrawFn) -> bytes:
    value = draw(_RECORDS)
    separators = draw(st.sampled_from([(", ", ": "), (",", ":"), (" ,\t", " :\r ")]))
    text = json.dumps(value, ensure_ascii=draw(st.booleans()), separators=separators)
    # keep key order random-ish as well: json.dumps keeps insertion order, hypothesis varies it
    return text.encode("utf-8", "surrogatepass")


_INTERESTING = b'"\\{}[],: \t\r\n\x0b0-1eE.\x80\xbf\xc0\xc3\xe0\xed\xf0\xf4\xffnul'


@st.composite
def _damaged(draw: st.DrawFn) -> bytes:
    data = bytearray(draw(_lines()))
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        kind = draw(st.sampled_from(["flip", "insert", "delete", "truncate"]))
        at = draw(st.integers(min_value=0, max_value=len(data)))
        byte = draw(st.sampled_from(list(_INTERESTING)) | st.integers(0, 255))
        if kind == "flip" and at < len(data):
            data[at] = byte
        elif kind == "insert":
            data.insert(at, byte)
        elif kind == "delete" and at < len(data):
            del data[at]
        elif kind == "truncate":
            del data[at:]
    return bytes(data)


_ENDINGS = st.sampled_from([b"\n", b"\r\n", b"\n\n", b"\n \x0b\t\n", b" \n"])


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(_lines(), _ENDINGS), min_size=1, max_size=6), st.booleans())
def test_random_records(lines: list[tuple[bytes, bytes]], final_newline: bool) -> None:
    data = b"".join(line + ending for line, ending in lines)
    if not final_newline:
        data = data.rstrip(b"\n")
    check(data)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_damaged(), min_size=1, max_size=4))
def test_random_damage(lines: list[bytes]) -> None:
    check(b"\n".join(lines))


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes(data: bytes) -> None:
    check(data)


def test_valid_random_records_are_mostly_fast() -> None:
    # The fuzzing above would pass a reader that gives up on everything; this one would not.
    rng = random.Random(7)
    lines = []
    for i in range(2000):
        retrieved: list[Any] = [f"doc-{rng.randrange(10**6)}" for _ in range(rng.randrange(20))]
        retrieved += [rng.randrange(-(10**12), 10**12) for _ in range(rng.randrange(3))]
        lines.append(
            json.dumps(
                {
                    "query_id": f"q{i}" if i % 3 else i,
                    "retrieved_ids": retrieved,
                    "relevant_ids": retrieved[:2] if i % 2 else None,
                    "relevance_scores": {
                        doc: rng.choice([0, 1, 2.5, rng.random()]) for doc in retrieved[1:4]
                    },
                    "query_type": rng.choice(["factual", "über", "文档", True, 12]),
                },
                ensure_ascii=bool(i % 2),
            )
        )
    results = check("\n".join(lines).encode())
    assert all(fast is not None for fast, _ in results)


# ---------------------------------------------------------------------------------------------
# Scale, threads, chunking


def _big_chunk(lines: int) -> tuple[bytes, int, int, int]:
    """A chunk of ``lines`` lines: blank ones, broken ones, and records; returns the data and the
    numbers of rows, of slow rows and of retrieved IDs expected in fast rows."""
    parts = []
    rows = slow = ids = 0
    for i in range(lines):
        kind = i % 10
        if kind == 0:
            parts.append(b"  ")
        elif kind == 1:
            parts.append(b'{"retrieved_ids": ["broken"')
            rows += 1
            slow += 1
        else:
            count = i % 7
            docs = ",".join(f'"d{i}-{j}"' for j in range(count))
            parts.append(
                f'{{"query_id": "q{i}", "retrieved_ids": [{docs}], "relevance_scores": '
                f'{{"d{i}-0": {i % 4}}}, "query_type": "t{i % 5}"}}'.encode()
            )
            rows += 1
            ids += count
    return b"\n".join(parts) + b"\n", rows, slow, ids


def test_the_pool_serves_each_parse_of_a_chunk_after_the_first() -> None:
    """Chunk after chunk, a parse takes its output buffers back from the pool of spares, those of
    64 KiB included (arrays of 6,000 int64 grow to that size): the pool's buffers stay as many,
    where a buffer mapped afresh per parse would add to them until the slots were full."""
    from rankgate import _jsonl

    data, _, _, _ = _big_chunk(6000)
    _jsonl.release()
    held = []
    for _ in range(6):
        out = _jsonl.parse(data, KEYS, SEGMENTS)
        assert out["rows"]
        del out  # every block freed: its buffer goes back to the pool
        held.append(_jsonl.pooled())
    assert held[0][1] >= 5  # line index, start and end, query ID offsets, status...
    # The first parse learns the sizes; from the second on, each takes what the last gave back.
    assert held[2:] == held[1:-1], held
    _jsonl.release()
    assert _jsonl.pooled() == (0, 0)


def test_a_200k_line_chunk() -> None:
    data, rows, slow, ids = _big_chunk(200_000)
    parsed = jsonl_arrow.parse_chunk(data, KEYS, SEGMENTS, 1)
    table = parsed.table
    table.validate(full=True)
    assert len(parsed) == rows
    assert int(parsed.slow.sum()) == slow
    assert len(table.column("retrieved_ids").flatten()) == ids
    assert table.column("query_id").null_count == slow
    assert table.column("relevance_scores").null_count == slow
    assert table.column("segment:tier").null_count == rows
    # spot checks against the Python path
    lines = data.split(b"\n")
    for row in range(0, rows, 9973):
        line = lines[int(parsed.line[row]) - 1]
        assert data[int(parsed.start[row]) : int(parsed.end[row])] == line
        expected = python_path(line)
        assert (expected is None) == bool(parsed.slow[row])


def test_threads_parse_at_once() -> None:
    data, _, _, _ = _big_chunk(50_000)
    expected = jsonl_arrow.parse_chunk(data, KEYS, SEGMENTS, 1).table
    results: list[Any] = [None] * 4

    def work(index: int) -> None:
        results[index] = jsonl_arrow.parse_chunk(data, KEYS, SEGMENTS, 1).table

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(table.equals(expected) for table in results)


class _Trickle(io.RawIOBase):
    """A stream whose reads return at most a few bytes, like a pipe."""

    def __init__(self, data: bytes, most: int) -> None:
        self._data, self._at, self._most = data, 0, most

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        size = self._most if size < 0 else min(size, self._most)
        out = self._data[self._at : self._at + size]
        self._at += len(out)
        return out

    def readinto(self, buffer: Any) -> int:  # what a buffered reader reads with
        out = self.read(len(buffer))
        buffer[: len(out)] = out
        return len(out)


def _assert_chunking(data: bytes, chunks: list[tuple[bytes, int, int]], skip: int) -> None:
    assert b"".join(chunk for chunk, _, _ in chunks) == data[skip:]
    offset, line = skip, 1
    for index, (chunk, first_line, at) in enumerate(chunks):
        assert chunk
        assert (at, first_line) == (offset, line)
        if index < len(chunks) - 1:
            assert chunk.endswith(b"\n")
        offset += len(chunk)
        line += chunk.count(b"\n")


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.binary(max_size=30).map(lambda b: b.replace(b"\n", b"")), max_size=8),
    st.booleans(),
    st.booleans(),
    st.integers(min_value=1, max_value=40),
    st.integers(min_value=1, max_value=50),
)
def test_read_chunks(
    lines: list[bytes], bom: bool, final_newline: bool, chunk_bytes: int, most: int
) -> None:
    data = b"\n".join(lines) + (b"\n" if final_newline and lines else b"")
    if bom:
        data = b"\xef\xbb\xbf" + data
    skip = 3 if data.startswith(b"\xef\xbb\xbf") else 0  # generated lines may bring one too
    for stream in (io.BytesIO(data), _Trickle(data, most)):
        chunks = list(jsonl_arrow.read_chunks(stream, chunk_bytes))
        _assert_chunking(data, chunks, skip)
    # The reader that feeds the scanner (each chunk read into a buffer of its own, its line
    # breaks counted in C) cuts a stream the same way, and says it read the whole file. (Bytes
    # that open with gzip's magic number are a gzip stream to it, whatever the file's name.)
    if data.startswith(GZIP_MAGIC):
        return
    for opened in (lambda: io.BytesIO(data), lambda: _Trickle(data, most)):
        source = JsonSource("traces.jsonl", opened, len(data), lines_only=True)
        chunks = [(bytes(chunk), line, at) for chunk, line, at in source.line_chunks(chunk_bytes)]
        _assert_chunking(data, chunks, skip)
        assert source.done() == len(data)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.integers(0, 20))
def test_line_breaks_are_counted_and_the_last_found(data: bytes, start: int) -> None:
    from rankgate import _jsonl

    view = memoryview(data)[min(start, len(data)) :]  # any alignment of the 16-byte scan
    held = bytes(view)
    assert _jsonl.line_breaks(view) == (held.count(b"\n"), held.rfind(b"\n"))


def test_read_chunks_and_parse_together() -> None:
    data, rows, slow, _ = _big_chunk(5000)
    total = fast = 0
    for chunk, first_line, _ in jsonl_arrow.read_chunks(io.BytesIO(data), 4096):
        parsed = jsonl_arrow.parse_chunk(chunk, KEYS, SEGMENTS, first_line)
        start, end = int(parsed.start[0]), int(parsed.end[0])
        assert data.split(b"\n")[int(parsed.line[0]) - 1] == chunk[start:end]
        total += len(parsed)
        fast += int((~parsed.slow).sum())
    assert (total, fast) == (rows, rows - slow)


def test_read_chunks_refuses_empty_chunks() -> None:
    with pytest.raises(ValueError):
        list(jsonl_arrow.read_chunks(io.BytesIO(b"x"), 0))


# ---------------------------------------------------------------------------------------------
# The bounds of io/limits.py: past one, Python refuses and the fast reader must be slow; at one,
# both accept (and agree).


def _id_of(units: list[str], escaped: bool) -> str:
    """JSON string text for the characters ``units``, escaped as \\uXXXX or written raw."""
    if escaped:
        return "".join(f"\\u{ord(c):04x}" if ord(c) < 0x10000 else c for c in units)
    return "".join(units)


@pytest.mark.parametrize("escaped", [False, True])
@pytest.mark.parametrize("where", ["retrieved", "relevant", "score_key", "query_id"])
@pytest.mark.parametrize("extra", [0, 1])
def test_id_byte_limit(where: str, escaped: bool, extra: int) -> None:
    # é is two bytes in UTF-8; escaped it is six bytes of JSON text for the same two.
    text = _id_of(["é"] * (limits.MAX_ID_BYTES // 2), escaped) + "x" * extra
    item = f'"{text}"'
    line = {
        "retrieved": '{"retrieved_ids": ["a", ' + item + "]}",
        "relevant": '{"retrieved_ids": ["a"], "relevant_ids": [' + item + "]}",
        "score_key": '{"retrieved_ids": ["a"], "relevance_scores": {' + item + ": 1}}",
        "query_id": '{"retrieved_ids": ["a"], "query_id": ' + item + "}",
    }[where]
    [(fast, expected)] = check(line.encode())
    assert (expected is None) == bool(extra)
    assert (fast is not None) == (not extra)


@pytest.mark.parametrize("extra", [0, 1])
@pytest.mark.parametrize("key", ["query_type", "notes"])
def test_text_byte_limit(key: str, extra: int) -> None:
    line = json.dumps({"retrieved_ids": ["a"], key: "t" * (limits.MAX_TEXT_BYTES + extra)})
    [(fast, expected)] = check(line.encode())
    assert (expected is None) == bool(extra)
    assert (fast is not None) == (not extra)


def test_text_limit_is_on_decoded_bytes() -> None:
    # Escapes make the JSON text longer than the limit while the text itself is within it: the
    # fast reader may go slow there, and Python accepts.
    value = "\\u0074" * limits.MAX_TEXT_BYTES
    [(_, expected)] = check(('{"retrieved_ids": [], "notes": "' + value + '"}').encode())
    assert expected is not None


def test_field_name_byte_limit() -> None:
    for extra in (0, 1):
        key = "k" * (limits.MAX_TEXT_BYTES + extra)
        [(fast, expected)] = check(json.dumps({"retrieved_ids": [], key: 1}).encode())
        assert (expected is None) == bool(extra)
        assert (fast is not None) == (not extra)


def test_ranking_and_label_count_limits() -> None:
    n = limits.MAX_IDS_PER_RANKING
    ids = ",".join(["1"] * n)
    rows = check(
        (
            '{"retrieved_ids": [' + ids + "]}\n"
            '{"retrieved_ids": [' + ids + ",2]}\n"
            '{"retrieved_ids": [], "relevant_ids": [' + ids + "]}\n"
            '{"retrieved_ids": [], "relevant_ids": [' + ids + '], "relevance_scores": {"a": 1}}\n'
            '{"retrieved_ids": [], "relevant_ids": ["b"], "relevance_scores": {'
            + ",".join(f'"k{i}": 1' for i in range(limits.MAX_LABELS_PER_QUERY))
            + "}}\n"
        ).encode()
    )
    assert [(fast is not None, expected is not None) for fast, expected in rows] == [
        (True, True),
        (False, False),
        (True, True),
        (False, False),
        (False, False),
    ]


def test_repeated_score_keys_count_in_python_as_one() -> None:
    # The fast reader counts a repeated key each time and goes slow; Python's dict holds one.
    over = limits.MAX_LABELS_PER_QUERY
    body = ",".join(['"a": 1'] * (over + 1))
    [(fast, expected)] = check(
        ('{"retrieved_ids": [], "relevance_scores": {' + body + "}}").encode()
    )
    assert fast is None and expected is not None


_NEAR_LIMIT = st.integers(-2, 2)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(["retrieved_ids", "relevant_ids", "query_id", "relevance_scores", "tier"]),
    _NEAR_LIMIT,
    st.lists(
        st.sampled_from(["a", "é", "文", "🦀", "\\n", '\\"', "\\u00e9", "\\ud83e\\udd80"]),
        max_size=8,
    ),
)
def test_random_values_near_the_byte_limits(field: str, delta: int, pieces: list[str]) -> None:
    tail = "".join(pieces)
    size = limits.MAX_TEXT_BYTES if field == "tier" else limits.MAX_ID_BYTES
    text = "x" * (size + delta - 8) + tail
    item = f'"{text}"'
    value = {
        "retrieved_ids": "[" + item + "]",
        "relevant_ids": "[" + item + "]",
        "query_id": item,
        "relevance_scores": "{" + item + ": 2}",
        "tier": item,
    }[field]
    extra = "" if field == "retrieved_ids" else '"retrieved_ids": ["r"], '
    check(("{" + extra + f'"{field}": ' + value + "}").encode())
