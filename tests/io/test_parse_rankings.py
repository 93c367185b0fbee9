"""A store's ranking column read by the compiled scanner (``jsonl_arrow.parse_rankings``) against
``json.loads`` and the validator: a row the scanner reads holds exactly the IDs the record path
gets, and text that is anything but one array of IDs is left to the validator."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rankgate.errors import InputError, Location
from rankgate.io import jsonl_arrow
from rankgate.io.validate import FieldMap, RawRecord, validate_record

pytestmark = pytest.mark.skipif(not jsonl_arrow.available(), reason="built without the scanner")

ID = st.text(max_size=6) | st.integers(-(10**20), 10**20)
SPACE = st.sampled_from(["", " ", "\n", "\t ", "\r\n"])


@st.composite
def ranking_texts(draw):
    ids = draw(st.lists(ID, max_size=5))
    text = json.dumps(ids, ensure_ascii=draw(st.booleans()))
    text = draw(SPACE) + text + draw(SPACE)
    damage = draw(st.sampled_from(["", "cut", "tail", "key", "null", "object", "nan"]))
    if damage == "cut":
        text = text[: draw(st.integers(0, max(len(text) - 1, 0)))]
    elif damage == "tail":
        text += draw(st.sampled_from([" x", ",[]", "]", '"', "{}"]))
    elif damage == "key":
        text += ',"relevance_scores":{"a":3}'
    elif damage == "null":
        text = "null"
    elif damage == "object":
        text = '{"a": 1}'
    elif damage == "nan":
        text = "[NaN]"
    return text


def record_path(text: str | None):
    """The IDs the record path reads from this stored text, or None when it refuses it."""
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    record = {"query_id": "q", "retrieved_ids": value}
    try:
        trace = validate_record(RawRecord(Location("s", row=1), record, 1), FieldMap())
    except InputError:
        return None
    return trace.retrieved_ids


@settings(max_examples=400, deadline=None)
@given(st.lists(st.none() | ranking_texts(), max_size=20), st.booleans(), st.integers(0, 3))
def test_read_rankings_equal_the_record_paths(texts, large, cut):
    column = pa.array(texts, pa.large_string() if large else pa.string())
    column = column.slice(min(cut, len(texts)))  # an offset into the buffers
    rankings, slow = jsonl_arrow.parse_rankings(column)
    assert len(rankings) == len(slow) == len(column)
    for text, ids, unread in zip(column.to_pylist(), rankings.to_pylist(), slow, strict=True):
        expected = record_path(text)
        if unread:
            continue  # the validator's row: it reads the text itself
        assert expected is not None, text
        assert ids == expected, text


@pytest.mark.parametrize(
    "text",
    ['["d1"],"query_id":"forged"', '["d1"],"relevance_scores":{"d1":3}', '["d1"]]', "", "[", "1"],
)
def test_anything_but_one_array_is_the_validators(text):
    _, slow = jsonl_arrow.parse_rankings(pa.array([text]))
    assert slow.tolist() == [True]


def test_rankings_with_white_space_and_escapes_are_read():
    rankings, slow = jsonl_arrow.parse_rankings(pa.array(['[\n "d1",\t"d\\u00e9" ]', "[]", "[7]"]))
    assert rankings.to_pylist() == [["d1", "dé"], [], ["7"]]
    assert slow.tolist() == [False, False, False]
