"""Grades stored as a struct column (one field per document ID: what ``Table.from_pylist``,
``pandas.DataFrame(records)``, ``polars.DataFrame(records)`` and ``to_parquet`` make of dicts) are
converted to a map column without a Python step per row, and give exactly what the record path
gives: values, counts by reason, error messages.

The record path is forced as in ``tests/properties/test_columnar_equivalence.py``: with the
compiled kernels reported unavailable every record goes through the validator.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rankgate
from rankgate import Settings, fast
from rankgate.errors import RankgateError
from rankgate.io import columnar, limits
from rankgate.io import grades as grades_module
from rankgate.io import validate as validate_module
from rankgate.io.tables import ArrowSource
from rankgate.io.validate import FieldMap

pytestmark = pytest.mark.skipif(
    not fast.available() and not os.environ.get("RANKGATE_REQUIRE_NATIVE"),
    reason="compiled kernels not built (no C compiler at install)",
)

METRICS = ["ndcg@3", "precision@5", "recall@10", "map", "mrr"]
# Document IDs a user's dicts may hold: dots, spaces, digits, markup, non-ASCII, look-alikes.
DOCS = ["a", "d.1", "17", " x ", "<b>&", "é", "日本", "a\tb", "null", "0"]
KINDS = ["int", "float", "bool", "text"]
SHAPES = ["arrow", "parquet", "pandas", "polars"]


def grade_of(kind: str) -> st.SearchStrategy[Any]:
    """A grade of one field's kind: a column of a table has one type per field."""
    if kind == "int":
        return st.sampled_from([0, 1, 2, 3, -1, 2**60])
    if kind == "float":
        return st.sampled_from([0.0, 0.5, 2.0, 3.0, math.nan, math.inf, 1e300, -0.5])
    if kind == "bool":
        return st.booleans()
    return st.sampled_from(["2", ""])


@st.composite
def traces(draw: st.DrawFn) -> list[dict[str, Any]]:
    kinds = {doc: draw(st.sampled_from(KINDS)) for doc in DOCS}
    # Mostly numbers, so most rows are scored, not only refused.
    for doc in DOCS[: draw(st.integers(5, len(DOCS)))]:
        kinds[doc] = draw(st.sampled_from(["int", "float"]))
    out = []
    for index in range(draw(st.integers(1, 20))):
        record: dict[str, Any] = {
            "query_id": f"q{index}",
            "retrieved_ids": draw(st.lists(st.sampled_from(DOCS), max_size=8)),
        }
        # One record in six has no grades at all (a missing key, or NaN in a DataFrame).
        if draw(st.integers(0, 5)) != 5:
            docs = draw(st.lists(st.sampled_from(DOCS), max_size=6, unique=True))
            record["relevance_scores"] = {
                doc: draw(st.one_of(st.none(), grade_of(kinds[doc]))) for doc in docs
            }
        if draw(st.booleans()):
            record["relevant_ids"] = draw(st.lists(st.sampled_from(DOCS), max_size=3))
        record["team"] = draw(st.sampled_from(["red", "blue"]))
        out.append(record)
    return out


def source_of(shape: str, records: list[dict[str, Any]], folder: Path) -> Any:
    if shape == "arrow":
        return pa.Table.from_pylist(records)
    if shape == "parquet":
        path = folder / "traces.parquet"
        pq.write_table(pa.Table.from_pylist(records), path)
        return path
    if shape == "pandas":
        return pd.DataFrame(records)
    return pl.DataFrame(records, infer_schema_length=None)


def outcome(source: Any, run: Settings, record_path: bool, patch: pytest.MonkeyPatch) -> Any:
    """What an evaluation gives: its values and counts, or the message it stopped with."""
    with patch.context() as context:
        if record_path:
            context.setattr(fast, "available", lambda: False)
        try:
            evaluation = rankgate.evaluate(source, METRICS, settings=run, worst=2)
        except RankgateError as problem:
            return ("error", str(problem))
    return (
        evaluation.query_ids,
        evaluation.summary,
        {str(spec): values.tolist() for spec, values in evaluation.values.items()},
        evaluation.overall,
        evaluation.segments,
        list(evaluation.attributes),
        evaluation.examples,
    )


def struct_read(source: Any) -> bool:
    """Whether the table's grades are a struct column (or, from a pandas DataFrame of dicts, the
    map column rankgate converts them to directly) that the columnar reader takes."""
    table = pq.read_table(source) if isinstance(source, Path) else source
    if not isinstance(table, pa.Table):
        from rankgate.io.tables import arrow_table

        table = arrow_table(table)
    kind = table.schema.field("relevance_scores").type
    return bool(pa.types.is_struct(kind) or pa.types.is_map(kind)) and (
        columnar.chunks(ArrowSource.table("t", table), FieldMap(), ["team"]) is not None
    )


def buildable(shape: str, records: list[dict[str, Any]], folder: Path) -> Any:
    """The source, or None when the library itself cannot hold these dicts in one table (pandas
    and polars refuse some mixes of types; pyarrow refuses what it cannot infer)."""
    try:
        return source_of(shape, records, folder)
    except (pa.ArrowException, TypeError, ValueError, pl.exceptions.PolarsError):
        return None


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(traces(), st.sampled_from(SHAPES), st.sampled_from(["skip", "fail"]))
def test_struct_grades_match_the_record_path(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path_factory: pytest.TempPathFactory,
    records: list[dict[str, Any]],
    shape: str,
    invalid: str,
) -> None:
    source = buildable(shape, records, tmp_path_factory.mktemp("t"))
    if source is None:
        return
    run = Settings(on_invalid=invalid, segment_by=("team",), resamples=20)  # type: ignore[arg-type]
    columnar_result = outcome(source, run, False, monkeypatch)
    assert columnar_result == outcome(source, run, True, monkeypatch)


@pytest.mark.parametrize("shape", SHAPES)
def test_every_shape_reads_dict_grades_columnar(shape: str, tmp_path: Path) -> None:
    records = [
        {"query_id": "q1", "retrieved_ids": ["a", "b"], "relevance_scores": {"a": 2, "b": 0}},
        {"query_id": "q2", "retrieved_ids": ["c"], "relevance_scores": {"c": 1.5}},
        {"query_id": "q3", "retrieved_ids": ["a"]},
    ]
    source = source_of(shape, records, tmp_path)
    assert struct_read(source)
    evaluation = rankgate.evaluate(source, ["precision@1"], settings=Settings(on_invalid="skip"))
    assert evaluation.query_ids == ("q1", "q2")
    assert evaluation.summary.skipped["unlabeled"] == 1


def test_integer_keyed_dataframe_grades_still_convert(monkeypatch: pytest.MonkeyPatch) -> None:
    frame = pd.DataFrame(
        [
            {"query_id": "q1", "retrieved_ids": [17, 3], "relevance_scores": {17: 2, 3: 0}},
            {"query_id": "q2", "retrieved_ids": [4], "relevance_scores": {4: 1}},
        ]
    )
    run = Settings(resamples=20)
    assert outcome(frame, run, False, monkeypatch) == outcome(frame, run, True, monkeypatch)
    assert struct_read(frame)
    values = rankgate.evaluate(frame, ["precision@1"]).values
    assert {str(spec): v.tolist() for spec, v in values.items()}["precision@1"] == [1.0, 1.0]


@pytest.mark.parametrize(
    ("grades", "expected"),
    [
        ({"a": True}, "grade must be a number >= 0, got boolean"),
        ({"a": "2"}, "grade must be a number >= 0, got string"),
        ({"a": {"x": 1}}, "grade must be a number >= 0, got object"),
        ({"a": math.nan}, "grade must be a number >= 0, got nan"),
        ({"a": -1}, "grade must be a number >= 0, got -1"),
        ({"a": 2**60}, "grade must be at most"),
        ({"": 1}, "document ID is an empty string"),
    ],
)
def test_a_refused_grade_gets_the_validators_message(
    monkeypatch: pytest.MonkeyPatch, grades: dict[str, Any], expected: str
) -> None:
    table = pa.Table.from_pylist(
        [
            {"query_id": "q1", "retrieved_ids": ["a"], "relevance_scores": None},
            {"query_id": "q2", "retrieved_ids": ["a"], "relevance_scores": grades},
        ]
    )
    assert struct_read(table)
    run = Settings(resamples=20)
    found = outcome(table, run, False, monkeypatch)
    assert found == outcome(table, run, True, monkeypatch)
    assert found[0] == "error"
    assert "row 2" in found[1] and expected in found[1]


def test_an_empty_field_name_refuses_rows_whose_grade_there_is_null(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The validator checks every key of the dict a struct row becomes, null grade or not.
    table = pa.Table.from_pylist(
        [
            {"query_id": "q1", "retrieved_ids": ["a"], "relevance_scores": {"a": 1, "": None}},
            {"query_id": "q2", "retrieved_ids": ["a"], "relevance_scores": {"": 2}},
            {"query_id": "q3", "retrieved_ids": ["a"], "relevance_scores": None},
        ]
    )
    run = Settings(on_invalid="skip", resamples=20)
    found = outcome(table, run, False, monkeypatch)
    assert found == outcome(table, run, True, monkeypatch)
    assert found[1].skipped["invalid"] == 2


def test_label_count_counts_every_struct_field(monkeypatch: pytest.MonkeyPatch) -> None:
    # A struct row is a dict with a key per field, so the record path counts every field.
    monkeypatch.setattr(limits, "MAX_LABELS_PER_QUERY", 3)
    table = pa.Table.from_pylist(
        [
            {"query_id": "q1", "retrieved_ids": ["a"], "relevance_scores": {"a": 1}},
            {"query_id": "q2", "retrieved_ids": ["b"], "relevance_scores": {"b": 1, "c": 0}},
            {"query_id": "q3", "retrieved_ids": ["b"], "relevance_scores": {"d": 1, "e": 0}},
        ]
    )
    run = Settings(on_invalid="skip", resamples=20)
    found = outcome(table, run, False, monkeypatch)
    assert found == outcome(table, run, True, monkeypatch)
    assert found[1].skipped["invalid"] == 3


def test_null_type_and_zero_grades(monkeypatch: pytest.MonkeyPatch) -> None:
    # pandas gives a field no row has a value for the null type.
    table = pa.table(
        {
            "query_id": ["q1", "q2", "q3"],
            "retrieved_ids": [["a", "b"], ["b"], ["c"]],
            "relevance_scores": pa.array(
                [{"a": 0, "b": None}, {"a": None, "b": None}, None],
                pa.struct([("a", pa.int8()), ("b", pa.null())]),
            ),
        }
    )
    run = Settings(on_invalid="skip", empty_relevant="zero", resamples=20)
    found = outcome(table, run, False, monkeypatch)
    assert found == outcome(table, run, True, monkeypatch)
    assert found[1].labeled == 2


def test_a_sliced_struct_column_converts_its_own_rows() -> None:
    scores = pa.array([{"a": 1.0, "b": None}, None, {"a": None, "b": 2.0}, {"a": 3.0, "b": 4.0}])
    slow = np.zeros(3, dtype=np.bool_)
    as_map = columnar._struct_as_map(scores.slice(1), slow)
    assert as_map.to_pylist() == [None, [("b", 2.0)], [("a", 3.0), ("b", 4.0)]]
    assert not slow.any()


def test_a_wide_struct_is_read_without_walking_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """2,000 rows x 2,000 distinct documents: no row is sent to the validator while reading, and
    rows read back later (attributes, worst queries) carry only their own labels, not a key per
    document of the whole table."""
    rng = np.random.default_rng(5)
    records = []
    for index in range(2000):
        # Row i grades document i among others, so the struct has a field per document.
        docs = [f"d{index}", *(f"d{i}" for i in rng.choice(2000, size=9, replace=False))]
        records.append(
            {
                "query_id": f"q{index}",
                "retrieved_ids": docs,
                "relevance_scores": {doc: int(rng.integers(0, 4)) for doc in docs[:3]},
            }
        )
    table = pa.Table.from_pylist(records)
    assert table.schema.field("relevance_scores").type.num_fields == 2000

    read = columnar.chunks(ArrowSource.table("t", table), FieldMap(), [])
    assert read is not None
    for chunk in read:
        assert not chunk.slow.any()
        assert pa.types.is_map(chunk.table.schema.field("relevance_scores").type)

    widest: list[int] = []
    grades = validate_module._grades

    def counting(value: Any, *args: Any) -> Any:
        widest.append(len(value) if isinstance(value, dict) else 0)
        return grades(value, *args)

    monkeypatch.setattr(validate_module, "_grades", counting)
    evaluation = rankgate.evaluate(table, METRICS, worst=5)
    assert evaluation.summary.read == 2000 and evaluation.summary.scored > 1900
    assert widest and max(widest) <= 3
    monkeypatch.undo()
    reference_table = pa.Table.from_pylist(
        [{**r, "relevance_scores": list(r["relevance_scores"].items())} for r in records],
        schema=pa.schema(
            [
                ("query_id", pa.string()),
                ("retrieved_ids", pa.list_(pa.string())),
                ("relevance_scores", pa.map_(pa.string(), pa.int64())),
            ]
        ),
    )
    reference = rankgate.evaluate(reference_table, METRICS, worst=5)
    assert evaluation.summary == reference.summary
    for spec, values in reference.values.items():
        np.testing.assert_array_equal(evaluation.values[spec], values)
    assert evaluation.examples == reference.examples


# --------------------------------------------------------------------------------------------
# Grades as JSON text in a string column

AWKWARD_TEXTS = [
    "",
    "{",
    "[1]",
    "3",
    "null",
    ' \n {"a": 1}',
    '{"a": 1} x',
    '{"a": 1, "a": 2}',
    '{"": 1}',
    '{"a": 1e999}',
    '{"a": NaN}',
    '{"a": -Infinity}',
    '{"a": ' + "9" * 400 + "}",
    '{"a": true}',
    '{"a": "2"}',
    '{"a": {"b": 1}}',
    '{"a": null, "b": 2}',
    '{"a": 1}, "relevance_scores": {"b": 3}',
    "[" * 5000,
]


@st.composite
def text_traces(draw: st.DrawFn) -> list[dict[str, Any]]:
    out = []
    for index in range(draw(st.integers(1, 15))):
        grades: str | None
        choice = draw(st.integers(0, 9))
        if choice == 0:
            grades = None
        elif choice == 1:
            grades = draw(st.sampled_from(AWKWARD_TEXTS))
        else:
            docs = draw(st.lists(st.sampled_from(DOCS), max_size=5, unique=True))
            values = st.sampled_from([0, 1, 2, 3, 0.5, 2**60, -1])
            grades = json.dumps(
                {doc: draw(values) for doc in docs}, ensure_ascii=draw(st.booleans())
            )
        out.append(
            {
                "query_id": f"q{index}",
                "retrieved_ids": draw(st.lists(st.sampled_from(DOCS), min_size=1, max_size=6)),
                "relevance_scores": grades,
                "team": draw(st.sampled_from(["red", "blue"])),
            }
        )
    return out


TEXT_SCHEMA = pa.schema(
    [
        ("query_id", pa.string()),
        ("retrieved_ids", pa.list_(pa.string())),
        ("relevance_scores", pa.string()),
        ("team", pa.string()),
    ]
)


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    text_traces(),
    st.sampled_from(["arrow", "parquet", "pandas"]),
    st.sampled_from(["skip", "fail"]),
)
def test_json_text_grades_match_the_record_path(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path_factory: pytest.TempPathFactory,
    records: list[dict[str, Any]],
    shape: str,
    invalid: str,
) -> None:
    table = pa.Table.from_pylist(records, schema=TEXT_SCHEMA)
    source: Any = table
    if shape == "parquet":
        source = tmp_path_factory.mktemp("t") / "traces.parquet"
        pq.write_table(table, source)
    elif shape == "pandas":
        source = table.to_pandas()
    assert columnar.chunks(ArrowSource.table("t", table), FieldMap(), ["team"]) is not None
    run = Settings(on_invalid=invalid, segment_by=("team",), resamples=20)  # type: ignore[arg-type]
    assert outcome(source, run, False, monkeypatch) == outcome(source, run, True, monkeypatch)


def test_json_text_grades_are_decoded_without_the_validator() -> None:
    table = pa.Table.from_pylist(
        [
            {"query_id": "q1", "retrieved_ids": ["a", "b"], "relevance_scores": '{"a": 2, "b": 0}'},
            {"query_id": "q2", "retrieved_ids": ["a"], "relevance_scores": None},
            {"query_id": "q3", "retrieved_ids": ["a"], "relevance_scores": '{"a": true}'},
        ],
        schema=TEXT_SCHEMA,
    )
    (chunk,) = columnar.chunks(ArrowSource.table("t", table), FieldMap(), []) or []
    assert chunk.slow.tolist() == [False, False, True]
    assert chunk.table.column("relevance_scores").to_pylist()[:2] == [
        [("a", 2.0), ("b", 0.0)],
        None,
    ]


# Every number type the compiled conversion takes, and those it leaves (half floats) or marks.
NUMBER_TYPES = [
    *grades_module.compiled_number_types(),
    pa.float16(),
    pa.bool_(),
    pa.string(),
    pa.null(),
]


@settings(max_examples=200, deadline=None)
@given(
    rows=st.integers(0, 200),
    types=st.lists(st.sampled_from(NUMBER_TYPES), min_size=1, max_size=6),
    density=st.floats(0.0, 1.0),
    row_nulls=st.floats(0.0, 0.5),
    cut=st.integers(0, 70),
    seed=st.integers(0, 2**32 - 1),
)
def test_the_compiled_struct_conversion_equals_the_field_by_field_one(
    rows: int, types: list[Any], density: float, row_nulls: float, cut: int, seed: int
) -> None:
    """``_join.struct_entries`` (one pass over the validity words) against the numpy and Arrow
    conversion it replaced: the same map, the same slow rows, for every number type Arrow has
    (half floats and non-numbers leave the compiled pass or mark rows), nulls in fields and in
    rows, and slices starting inside a byte of the bitmaps, across more than 64 rows."""
    from rankgate.io import grades

    rng = np.random.default_rng(seed)
    fields = []
    for kind in types:
        present = rng.random(rows) < density
        if pa.types.is_null(kind):
            fields.append(pa.nulls(rows))
            continue
        if pa.types.is_string(kind):
            values: Any = [str(v) for v in rng.integers(0, 4, rows)]
        elif pa.types.is_boolean(kind):
            values = rng.random(rows) < 0.5
        elif pa.types.is_floating(kind):
            values = rng.choice([0.0, 0.5, 3.0, -1.0, np.nan, np.inf], rows)
            values = values.astype(np.float16 if kind == pa.float16() else np.float64)
        else:
            values = rng.integers(0, 100, rows)
        fields.append(pa.array(values, mask=~present).cast(kind))
    names = [f"d{index}" for index in range(len(types))]
    struct = pa.StructArray.from_arrays(
        fields, names=names, mask=pa.array(rng.random(rows) < row_nulls)
    )
    struct = struct.slice(min(cut, rows))
    compiled_slow = np.zeros(len(struct), dtype=np.bool_)
    compiled = grades.struct_as_map(struct, compiled_slow)
    held = fast._join
    try:
        fast._join = None
        plain_slow = np.zeros(len(struct), dtype=np.bool_)
        plain = grades.struct_as_map(struct, plain_slow)
    finally:
        fast._join = held
    compiled.validate(full=True)
    assert compiled_slow.tolist() == plain_slow.tolist()
    assert compiled.type == plain.type
    assert compiled.is_valid().to_pylist() == plain.is_valid().to_pylist()
    assert compiled.offsets.to_pylist() == plain.offsets.to_pylist()
    assert compiled.keys.to_pylist() == plain.keys.to_pylist()
    # NaN grades stay NaN (the validator refuses them later, as any other NaN).
    assert np.array_equal(
        compiled.items.to_numpy(zero_copy_only=False),
        plain.items.to_numpy(zero_copy_only=False),
        equal_nan=True,
    )
