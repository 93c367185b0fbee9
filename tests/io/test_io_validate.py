"""validate_record: what a valid trace is, and errors that name location, field and problem."""

from __future__ import annotations

import math

import pytest

from rankgate import ConfigError, InputError
from rankgate.errors import Location
from rankgate.io import FieldMap, RawRecord, validate_record

WHERE = Location("x.jsonl", line=3)


def validate(record, fields=None, ordinal=3):
    return validate_record(RawRecord(WHERE, record, ordinal), fields or FieldMap())


def error_of(record, fields=None) -> InputError:
    with pytest.raises(InputError) as caught:
        validate(record, fields)
    assert caught.value.location == WHERE
    return caught.value


# --- valid shapes ----------------------------------------------------------------------------------


def test_the_spec_example():
    trace = validate(
        {
            "query_id": "q-17",
            "retrieved_ids": ["d3", "d9", "d1"],
            "relevant_ids": ["d1", "d4"],
            "relevance_scores": {"d1": 3, "d4": 1, "d9": 0},
            "query_type": "factual",
        }
    )
    assert trace.location == WHERE
    assert trace.query_id == "q-17"
    assert trace.retrieved_ids == ["d3", "d9", "d1"]
    assert trace.grades == {"d1": 3.0, "d4": 1.0, "d9": 0.0}
    assert trace.attributes == {"query_type": "factual"}


def test_a_grade_overrides_membership_in_relevant_ids():
    trace = validate(
        {
            "retrieved_ids": [],
            "relevant_ids": ["d1", "d4", "d7"],
            "relevance_scores": {"d4": 0, "d1": 2.5, "d9": 1},
        }
    )
    assert trace.grades == {"d1": 2.5, "d4": 0.0, "d7": 1.0, "d9": 1.0}


@pytest.mark.parametrize(
    ("labels", "grades"),
    [
        ({}, None),
        ({"relevant_ids": None, "relevance_scores": None}, None),  # explicit nulls are absent too
        ({"relevant_ids": []}, {}),
        ({"relevance_scores": {}}, {}),
        ({"relevant_ids": ["a"]}, {"a": 1.0}),
        ({"relevance_scores": {"a": 0}}, {"a": 0.0}),
        ({"relevant_ids": None, "relevance_scores": {"a": 2}}, {"a": 2.0}),
    ],
)
def test_labeled_and_unlabeled(labels, grades):
    trace = validate({"retrieved_ids": ["a"], **labels})
    assert trace.grades == grades


def test_empty_retrieved_list_is_valid():
    trace = validate({"query_id": "q", "retrieved_ids": [], "relevant_ids": ["a"]})
    assert (trace.retrieved_ids, trace.grades) == ([], {"a": 1.0})


def test_ids_are_compared_as_strings():
    trace = validate(
        {
            "query_id": 17,
            "retrieved_ids": [1, "2", 3, 10**30],
            "relevant_ids": [2, "1"],
            "relevance_scores": {"3": 2},
        }
    )
    assert trace.query_id == "17"
    assert trace.retrieved_ids == ["1", "2", "3", str(10**30)]
    assert trace.grades == {"2": 1.0, "1": 1.0, "3": 2.0}


def test_tuples_are_lists_in_memory():
    trace = validate({"retrieved_ids": ("a", "b"), "relevant_ids": ("b",)})
    assert (trace.retrieved_ids, trace.grades) == (["a", "b"], {"b": 1.0})


@pytest.mark.parametrize("ordinal", [1, 5, 1234])
def test_missing_or_null_query_id_is_named_by_position(ordinal):
    assert validate({"retrieved_ids": []}, ordinal=ordinal).query_id == f"#{ordinal}"
    assert (
        validate({"query_id": None, "retrieved_ids": []}, ordinal=ordinal).query_id == f"#{ordinal}"
    )


def test_other_fields_are_attributes():
    trace = validate(
        {
            "query_id": "q",
            "retrieved_ids": [],
            "query": "how do I",
            "latency_ms": 12.5,
            "meta": {"shard": 3},
            "input": "not a nested record: just a field called input",
        }
    )
    assert trace.attributes == {
        "query": "how do I",
        "latency_ms": 12.5,
        "meta": {"shard": 3},
        "input": "not a nested record: just a field called input",
    }


def test_unicode_ids():
    trace = validate(
        {
            "query_id": "问题-1",
            "retrieved_ids": ["文档-1", "café", "🦀"],
            "relevance_scores": {"🦀": 2},
        }
    )
    assert (trace.query_id, trace.retrieved_ids, trace.grades) == (
        "问题-1",
        ["文档-1", "café", "🦀"],
        {"🦀": 2.0},
    )


# --- fields under "input" ----------------------------------------------------------------------------


def test_fields_one_level_down_under_input():
    trace = validate(
        {
            "input": {
                "query_id": "q-17",
                "retrieved_ids": ["d3", "d1"],
                "relevant_ids": ["d1"],
                "relevance_scores": {"d3": 0},
                "query_type": "factual",
            },
            "run_id": "r-9",
        }
    )
    assert (trace.query_id, trace.retrieved_ids, trace.grades) == (
        "q-17",
        ["d3", "d1"],
        {"d1": 1.0, "d3": 0.0},
    )
    assert trace.attributes == {"query_type": "factual", "run_id": "r-9"}


@pytest.mark.parametrize(
    ("inner", "field", "problem"),
    [
        ({}, "input.retrieved_ids", "required field is missing"),
        ({"retrieved_ids": "d1"}, "input.retrieved_ids", "expected a list of IDs, got string"),
        (
            {"retrieved_ids": ["a", "b", 2.0]},
            "input.retrieved_ids[2]",
            "expected a string or integer ID, got number",
        ),
        (
            {"retrieved_ids": [], "relevant_ids": [True]},
            "input.relevant_ids[0]",
            "expected a string or integer ID, got boolean",
        ),
        (
            {"retrieved_ids": [], "relevance_scores": {"d1": -1}},
            "input.relevance_scores.d1",
            "grade must be a number >= 0, got -1",
        ),
        (
            {"retrieved_ids": [], "query_id": 1.5},
            "input.query_id",
            "expected a non-empty string or an integer, got number",
        ),
    ],
)
def test_errors_under_input_name_the_nested_field(inner, field, problem):
    error = error_of({"input": inner})
    assert (error.field, error.problem) == (field, problem)
    assert str(error) == f"x.jsonl:3: field '{field}': {problem}"


# --- field mapping -------------------------------------------------------------------------------------


DOTTED = FieldMap.from_assignments(
    {
        "query_id": "meta.qid",
        "retrieved_ids": "metadata.retrieval.ids",
        "relevance_scores": "labels.grades",
    }
)


def test_dotted_paths_reach_nested_fields():
    trace = validate(
        {
            "meta": {"qid": 8},
            "metadata": {"retrieval": {"ids": ["a", "b"], "latency": 3}},
            "labels": {"grades": {"b": 2}},
            "relevant_ids": ["a"],
            "split": "dev",
        },
        DOTTED,
    )
    assert (trace.query_id, trace.retrieved_ids, trace.grades) == (
        "8",
        ["a", "b"],
        {"a": 1.0, "b": 2.0},
    )
    # Fields beside the mapped paths are kept, nested objects included (later segments may name
    # metadata.retrieval.latency); only the exact top-level keys the mapping consumed are dropped.
    assert trace.attributes == {
        "meta": {"qid": 8},
        "metadata": {"retrieval": {"ids": ["a", "b"], "latency": 3}},
        "labels": {"grades": {"b": 2}},
        "split": "dev",
    }


def test_dotted_paths_also_work_under_input():
    trace = validate({"input": {"metadata": {"retrieval": {"ids": [1]}}}}, DOTTED)
    assert trace.retrieved_ids == ["1"]


@pytest.mark.parametrize(
    ("record", "field"),
    [
        ({}, "metadata.retrieval.ids"),
        ({"metadata": {"retrieval": "ids"}}, "metadata.retrieval.ids"),
        ({"metadata": {"retrieval": {"ids": ["a", ""]}}}, "metadata.retrieval.ids[1]"),
        (
            {"input": {"metadata": {"retrieval": {"ids": [None]}}}},
            "input.metadata.retrieval.ids[0]",
        ),
        (
            {"metadata": {"retrieval": {"ids": []}}, "labels": {"grades": {"a": "high"}}},
            "labels.grades.a",
        ),
    ],
)
def test_errors_name_the_mapped_path(record, field):
    assert error_of(record, DOTTED).field == field


def test_field_map_refuses_unknown_fields_and_empty_paths():
    with pytest.raises(ConfigError, match="unknown trace field"):
        FieldMap.from_assignments({"retrieved": "ids"})
    for bad in ("", "a..b", ".a", "a."):
        with pytest.raises(ConfigError):
            FieldMap.from_assignments({"retrieved_ids": bad})


def test_field_map_keeps_the_other_defaults():
    fields = FieldMap.from_assignments({"retrieved_ids": "ranking"})
    assert fields == FieldMap(retrieved_ids="ranking")
    trace = validate({"ranking": ["a"], "relevant_ids": ["a"], "query_id": "q"}, fields)
    assert (trace.query_id, trace.retrieved_ids, trace.grades) == ("q", ["a"], {"a": 1.0})


# --- invalid records -------------------------------------------------------------------------------


NOT_A_LIST = "expected a list of IDs, got "
NOT_AN_ID = "expected a string or integer ID, got "
NOT_A_GRADE = "grade must be a number >= 0, got "
NOT_GRADES = "expected an object of document ID -> grade, got "
NOT_A_QUERY_ID = "expected a non-empty string or an integer, got "


def ids(value):
    return {"retrieved_ids": value}


def labeled(**fields):
    return {"retrieved_ids": [], **fields}


@pytest.mark.parametrize(
    ("record", "field", "problem"),
    [
        ({}, "retrieved_ids", "required field is missing"),
        (ids(None), "retrieved_ids", NOT_A_LIST + "null"),
        (ids("d1"), "retrieved_ids", NOT_A_LIST + "string"),
        (ids(7), "retrieved_ids", NOT_A_LIST + "integer"),
        (ids({"d1": 1}), "retrieved_ids", NOT_A_LIST + "object"),
        (ids(["a", "b", 1.0]), "retrieved_ids[2]", NOT_AN_ID + "number"),
        (ids([True]), "retrieved_ids[0]", NOT_AN_ID + "boolean"),
        (ids(["a", {"id": "b"}]), "retrieved_ids[1]", NOT_AN_ID + "object"),
        (ids([["a"]]), "retrieved_ids[0]", NOT_AN_ID + "list"),
        (ids([None]), "retrieved_ids[0]", NOT_AN_ID + "null"),
        (ids(["a", ""]), "retrieved_ids[1]", "document ID is an empty string"),
        (labeled(relevant_ids="d1"), "relevant_ids", NOT_A_LIST + "string"),
        (labeled(relevant_ids=[0.5]), "relevant_ids[0]", NOT_AN_ID + "number"),
        (labeled(relevance_scores={"d1": -1}), "relevance_scores.d1", NOT_A_GRADE + "-1"),
        (labeled(relevance_scores={"d1": -0.5}), "relevance_scores.d1", NOT_A_GRADE + "-0.5"),
        (labeled(relevance_scores={"d1": math.nan}), "relevance_scores.d1", NOT_A_GRADE + "nan"),
        (labeled(relevance_scores={"d1": math.inf}), "relevance_scores.d1", NOT_A_GRADE + "inf"),
        (labeled(relevance_scores={"d1": "3"}), "relevance_scores.d1", NOT_A_GRADE + "string"),
        (labeled(relevance_scores={"d1": True}), "relevance_scores.d1", NOT_A_GRADE + "boolean"),
        (labeled(relevance_scores={"d1": None}), "relevance_scores.d1", NOT_A_GRADE + "null"),
        (labeled(relevance_scores={"d1": [1]}), "relevance_scores.d1", NOT_A_GRADE + "list"),
        (labeled(relevance_scores={"": 1}), "relevance_scores", "document ID is an empty string"),
        (labeled(relevance_scores="d1"), "relevance_scores", NOT_GRADES + "string"),
        (labeled(relevance_scores=3), "relevance_scores", NOT_GRADES + "integer"),
        (labeled(query_id=1.0), "query_id", NOT_A_QUERY_ID + "number"),
        (labeled(query_id=False), "query_id", NOT_A_QUERY_ID + "boolean"),
        (labeled(query_id=""), "query_id", NOT_A_QUERY_ID + "an empty string"),
        (labeled(query_id=["q"]), "query_id", NOT_A_QUERY_ID + "list"),
    ],
)
def test_invalid_fields(record, field, problem):
    error = error_of(record)
    assert (error.field, error.problem) == (field, problem)
    assert str(error) == f"x.jsonl:3: field '{field}': {problem}"


@pytest.mark.parametrize(
    ("record", "kind"),
    [([], "list"), ("q", "string"), (3, "integer"), (None, "null"), (2.5, "number")],
)
def test_a_record_must_be_an_object(record, kind):
    error = error_of(record)
    assert (error.field, error.problem) == (None, f"expected an object, got {kind}")
    assert str(error) == f"x.jsonl:3: expected an object, got {kind}"


def test_a_problem_found_by_the_reader_is_raised_as_is():
    raw = RawRecord(WHERE, None, 3, problem="line is not valid UTF-8")
    with pytest.raises(InputError) as caught:
        validate_record(raw, FieldMap())
    assert (caught.value.location, caught.value.field, str(caught.value)) == (
        WHERE,
        None,
        "x.jsonl:3: line is not valid UTF-8",
    )


def test_an_integer_grade_too_large_for_a_float_is_an_input_error():
    error = error_of({"retrieved_ids": ["a"], "relevance_scores": {"a": 10**400}})
    assert error.field == "relevance_scores.a"
