"""The C conversion of Python cells (io/cells.py) against pyarrow's own conversion of the same
cells, and the cells it must refuse (the caller then leaves the column to pyarrow)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rankgate
from rankgate import fast
from rankgate.io.cells import grade_map_array, text_list_array

pytestmark = pytest.mark.skipif(not fast.available(), reason="built without the C extensions")

TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.none() | st.lists(TEXT, max_size=6), max_size=30))
def test_text_lists_equal_pyarrows_conversion(cells):
    converted = text_list_array(cells)
    assert converted is not None
    converted.validate(full=True)
    assert converted.type == pa.list_(pa.string())
    assert converted.equals(pa.array(cells, pa.list_(pa.string())))
    assert converted.null_count == sum(cell is None for cell in cells)


GRADE = st.none() | st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.none() | st.dictionaries(TEXT, GRADE, max_size=5), max_size=30))
def test_grade_maps_equal_pyarrows_conversion(cells):
    converted = grade_map_array(cells)
    assert converted is not None
    converted.validate(full=True)
    grades = [value for cell in cells if cell for value in cell.values() if value is not None]
    whole = all(type(value) is int for value in grades)
    kind = pa.map_(pa.large_string(), pa.int64() if whole else pa.float64())
    assert converted.type == kind
    expected = [None if cell is None else list(cell.items()) for cell in cells]
    if not whole:  # pyarrow takes ints into a double map the same way
        expected = [
            None if cell is None else [(k, None if v is None else float(v)) for k, v in cell]
            for cell in expected
        ]
    assert converted.to_pylist() == expected


def test_nan_grades_stay_nan():
    converted = grade_map_array([{"a": math.nan}])
    assert math.isnan(converted.to_pylist()[0][0][1])


class Items(list):
    pass


class Text(str):
    pass


class Grades(dict):
    pass


@pytest.mark.parametrize(
    "cells",
    [
        [["a", 1]],  # not text
        [("a", "b")],  # a tuple, not a list
        [Items(["a"])],  # a subclass could run Python code between the two walks
        [["a", Text("b")]],
        [["\ud800"]],  # a lone surrogate: no UTF-8
        [np.array(["a"], dtype=object)],
        ["a"],
    ],
)
def test_text_lists_refuse_other_cells(cells):
    assert text_list_array(cells) is None


@pytest.mark.parametrize(
    "cells",
    [
        [{"a": True}],  # a bool is not a grade here (the validator words it)
        [{"a": 2**64}],
        [{1: 2}],
        [{"a": "2"}],
        [{"a": np.int64(2)}],  # numpy scalars go to the Python conversion
        [Grades(a=1)],
        [{"\udc80": 1}],
        [["a"]],
    ],
)
def test_grade_maps_refuse_other_cells(cells):
    assert grade_map_array(cells) is None


def records(count):
    rng = np.random.default_rng(3)
    names = [f"doc-{i}" for i in range(40)] + ["é-doc", "文書"]
    out = []
    for number in range(count):
        ranked = [names[i] for i in rng.integers(0, len(names), 20)]
        grades = {ranked[i]: int(rng.integers(0, 4)) for i in rng.integers(0, 20, 3)}
        out.append({"query_id": f"q{number}", "retrieved_ids": ranked, "relevance_scores": grades})
    out[5]["retrieved_ids"] = None  # invalid: named by the validator in every form
    out[7]["relevance_scores"] = None  # unlabeled
    return out


def test_dataframe_and_dicts_score_as_the_json_lines_do(tmp_path):
    import json

    rows = records(300)
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    metrics = ["ndcg@10", "map", "recall@10"]
    skip = rankgate.Settings(on_invalid="skip")
    expected = rankgate.evaluate(path, metrics, settings=skip)
    assert expected.summary.skipped.get("invalid") == 1
    for source in (pd.DataFrame(rows), rows):
        found = rankgate.evaluate(source, metrics, settings=skip)
        assert found.overall.means == pytest.approx(expected.overall.means, abs=1e-12)
        assert found.summary.scored == expected.summary.scored
        assert found.summary.skipped == expected.summary.skipped
        assert [e.field for e in found.summary.invalid_examples] == ["retrieved_ids"]
    # A table cell cannot tell a null from an absent field; a dict says null, as JSON Lines does.
    found = rankgate.evaluate(rows, metrics, settings=skip).summary.invalid_examples
    assert [e.problem for e in found] == [e.problem for e in expected.summary.invalid_examples]


def test_dicts_with_many_distinct_keys_still_read_in_one_pass(tmp_path):
    """Each record with a key of its own: converted by Arrow's inference, not per key."""
    rows = records(200)
    for number, row in enumerate(rows):
        row[f"note-{number}"] = number
    skip = rankgate.Settings(on_invalid="skip")
    found = rankgate.evaluate(rows, ["map"], settings=skip)
    expected = rankgate.evaluate(pd.DataFrame(records(200)), ["map"], settings=skip)
    assert found.overall.means == pytest.approx(expected.overall.means, abs=1e-12)
