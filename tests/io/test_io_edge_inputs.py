"""Python API inputs a pipeline hands over as they come: generators, DataFrame rows with numpy
values, gates as strings."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import rankgate
from rankgate import InputError

RECORDS = [
    {"query_id": "q1", "retrieved_ids": ["a", "b"], "relevance_scores": {"a": 1}},
    {"query_id": "q2", "retrieved_ids": ["c", "a"], "relevance_scores": {"a": 2}},
]


def test_a_generator_of_records_is_read() -> None:
    evaluation = rankgate.evaluate((record for record in RECORDS), ["mrr"])
    assert evaluation.summary.read == 2
    assert evaluation.mean("mrr") == (1 + 1 / 2) / 2


def test_dataframe_rows_with_numpy_values() -> None:
    """``df.to_dict("records")`` after reading Parquet gives ndarray lists and numpy scalars."""
    rows = [
        {
            "query_id": np.int64(7),
            "retrieved_ids": np.array([1, 2, 3], dtype=np.int64),
            "relevance_scores": {"2": np.int64(3), "9": np.float64(1.0)},
        }
    ]
    evaluation = rankgate.evaluate(rows, ["mrr", "recall@3"])
    assert evaluation.query_ids == ("7",)
    assert evaluation.mean("mrr") == 1 / 2
    assert evaluation.mean("recall@3") == 1 / 2


def test_pandas_frame_from_records_with_numpy_lists() -> None:
    frame = pd.DataFrame(
        {"query_id": ["q1"], "retrieved_ids": [np.array(["a", "b"])], "relevant_ids": [["b"]]}
    )
    assert rankgate.evaluate(frame, ["mrr"]).mean("mrr") == 1 / 2


def test_numpy_float_id_is_still_refused() -> None:
    with pytest.raises(InputError, match=r"retrieved_ids\[0\]"):
        rankgate.evaluate([{"retrieved_ids": [np.float64(1.5)], "relevant_ids": ["a"]}])


def test_gates_may_be_strings() -> None:
    evaluation = rankgate.evaluate(RECORDS, ["mrr"], ["mrr>=0.7", "recall@1>=0.6"])
    assert [str(outcome.gate) for outcome in evaluation.gates] == ["mrr>=0.7", "recall@1>=0.6"]
    assert [outcome.passed for outcome in evaluation.gates] == [True, False]


def test_an_empty_metric_list_without_gates_is_an_error() -> None:
    with pytest.raises(rankgate.UsageError, match="no metric to compute"):
        rankgate.evaluate(RECORDS, [])
    assert rankgate.evaluate(RECORDS, [], ["mrr>=0.5"]).passed


def test_mapping_a_dotted_path_keeps_the_containing_objects_other_fields() -> None:
    record = {"meta": {"ids": ["a"], "region": "eu"}, "relevant_ids": ["a"], "query_id": "q"}
    settings = rankgate.Settings(fields=rankgate.FieldMap(retrieved_ids="meta.ids"))
    table = rankgate.evaluate([record], ["mrr"], settings=settings)
    assert table.mean("mrr") == 1.0
    from rankgate.errors import Location
    from rankgate.io import FieldMap, RawRecord, validate_record

    trace = validate_record(RawRecord(Location("x"), record, 1), FieldMap(retrieved_ids="meta.ids"))
    assert trace.attributes["meta"]["region"] == "eu"
