"""The compiled path must equal the definitions it accelerates.

``rankgate.fast.join`` is held to ``BatchBuilder.add`` (the record-at-a-time join) and every compiled
metric twin to its numpy definition, on random batches with duplicates, unlabeled documents, graded
and fractional labels, empty rankings and rankings longer than every cutoff. Nothing here names a
metric: a twin added to the registry is covered at once.
"""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rankgate import fast
from rankgate.batch import BatchBuilder, RankedBatch
from rankgate.metrics.registry import all_metrics
from rankgate.spec import MetricSpec, make_metric

# CI sets RANKGATE_REQUIRE_NATIVE=1: there a missing build fails these tests instead of skipping them.
pytestmark = pytest.mark.skipif(
    not fast.available() and not os.environ.get("RANKGATE_REQUIRE_NATIVE"),
    reason="compiled kernels not built (no C compiler at install)",
)

DOCS = [f"d{i}" for i in range(12)] + ["", "é", "long-document-identifier-0000000001"]


def _twin_specs() -> list[MetricSpec]:
    specs = []
    for definition in all_metrics():
        if definition.native is None:
            continue
        cutoffs: list[int | None] = [None, 1, 3, 10, 200] if definition.cutoff else [None]
        variants: list[dict[str, object]] = [{}]
        for param in definition.params:
            if param.choices:
                variants += [{param.name: choice} for choice in param.choices]
            elif param.name == "rel":
                variants += [{"rel": 2}, {"rel": 0.5}]
        specs += [make_metric(definition.name, k, v) for k in cutoffs for v in variants]  # type: ignore[arg-type]
    return specs


TWINS = _twin_specs()


def test_the_compiled_kernels_are_built() -> None:
    assert fast.available(), "rankgate._join did not build: is a C compiler installed?"


def test_every_twin_has_a_code() -> None:
    assert TWINS, "no metric declares a compiled twin"
    for spec in TWINS:
        assert fast.native_code(spec) is not None, spec


ranking = st.lists(st.sampled_from(DOCS[:12]), max_size=40)
grades = st.dictionaries(
    st.sampled_from(DOCS[:12]),
    st.one_of(st.integers(0, 3).map(float), st.floats(0, 4, allow_nan=False)),
    max_size=8,
)
queries = st.lists(st.tuples(ranking, grades), min_size=1, max_size=30)


def _reference(rows: list[tuple[list[str], dict[str, float]]]) -> tuple[RankedBatch, list[int]]:
    builder = BatchBuilder()
    dropped = [builder.add(ids, labels) for ids, labels in rows]
    return builder.build(), dropped


def _arrow_rows(rows: list[tuple[list[str], dict[str, float]]]) -> pa.RecordBatch:
    # Split each query's labels between relevant_ids (grade 1) and scores, as traces do.
    relevant = [[d for d, g in labels.items() if g == 1.0] for _, labels in rows]
    scores = [[(d, g) for d, g in labels.items() if g != 1.0] for _, labels in rows]
    return pa.record_batch(
        {
            "retrieved_ids": pa.array([ids for ids, _ in rows], pa.list_(pa.string())),
            "relevant_ids": pa.array(relevant, pa.list_(pa.string())),
            "relevance_scores": pa.array(scores, pa.map_(pa.string(), pa.float64())),
        }
    )


def _joined(table: pa.RecordBatch, skip: bool = False) -> fast.Joined:
    scores = table.column("relevance_scores")
    return fast.join(
        np.arange(table.num_rows, dtype=np.int64),
        fast.IdColumns.from_arrow(table.column("retrieved_ids")),
        fast.IdColumns.from_arrow(table.column("relevant_ids")),
        fast.IdColumns.from_arrow(scores),
        np.asarray(scores.items, dtype=np.float64),
        threshold=1.0,
        skip_no_relevant=skip,
        unique_map_keys=True,
    )


@settings(max_examples=150, deadline=None)
@given(queries)
def test_join_equals_the_batch_builder(rows: list[tuple[list[str], dict[str, float]]]) -> None:
    expected, dropped = _reference(rows)
    joined = _joined(_arrow_rows(rows))
    got = joined.batch
    assert list(joined.status) == [fast.ROW_SCORED] * len(rows)
    assert joined.duplicates.tolist() == dropped
    np.testing.assert_array_equal(got.ranked_offsets, expected.ranked_offsets)
    np.testing.assert_array_equal(got.ranked_grades, expected.ranked_grades)
    np.testing.assert_array_equal(got.ranked_judged, expected.ranked_judged)
    np.testing.assert_array_equal(got.label_offsets, expected.label_offsets)
    np.testing.assert_array_equal(got.label_grades, expected.label_grades)


@settings(max_examples=150, deadline=None)
@given(queries)
def test_twins_equal_their_definitions(rows: list[tuple[list[str], dict[str, float]]]) -> None:
    batch, _ = _reference(rows)
    defaults = {"rel": 1.0}
    compiled = fast.score(batch, TWINS, defaults)
    for spec in TWINS:
        reference = spec.compute(batch, defaults)
        # Same operations in the same order. Only a fractional grade can differ: 2^g comes from the
        # C library here and from numpy there (each within an ulp), and 2^g - 1 magnifies that for
        # small g. Integer grades agree bit for bit (next test).
        np.testing.assert_allclose(
            compiled[spec], reference, rtol=1e-12, atol=1e-15, err_msg=str(spec)
        )


def test_twins_agree_bit_for_bit_on_integer_grades() -> None:
    rng = np.random.default_rng(5)
    rows = []
    for _ in range(400):
        ids = [f"d{i}" for i in rng.integers(0, 150, size=rng.integers(0, 120))]
        labels = {f"d{i}": float(rng.integers(0, 4)) for i in rng.integers(0, 150, size=12)}
        rows.append((ids, labels))
    batch, _ = _reference(rows)
    compiled = fast.score(batch, TWINS, {"rel": 1.0})
    for spec in TWINS:
        assert np.array_equal(compiled[spec], spec.compute(batch, {"rel": 1.0})), spec


def test_statuses_unlabeled_no_relevant_and_repeated_keys() -> None:
    table = pa.record_batch(
        {
            "retrieved_ids": pa.array(
                [["a", "b"], ["a"], ["a", "a"], ["b"]], pa.list_(pa.string())
            ),
            "relevant_ids": pa.array([None, None, ["a"], None], pa.list_(pa.string())),
            "relevance_scores": pa.array(
                [None, [("a", 0.0)], [("a", 0.0)], [("b", 2.0), ("b", 3.0)]],
                pa.map_(pa.string(), pa.float64()),
            ),
        }
    )
    kept = _joined(table, skip=False)
    assert kept.status.tolist() == [
        fast.ROW_UNLABELED,
        fast.ROW_SCORED,  # only grade 0: kept (scored 0) when not skipping
        fast.ROW_SCORED,  # relevant_ids says 1, the score says 0: the score wins
        fast.ROW_FOR_VALIDATOR,
    ]
    assert kept.forced_zero.tolist() == [False, True, True, False]
    assert kept.duplicates.tolist() == [0, 0, 1, 0]
    assert kept.batch.n_queries == 2
    skipped = _joined(table, skip=True)
    assert skipped.status.tolist()[:3] == [
        fast.ROW_UNLABELED,
        fast.ROW_NO_RELEVANT,
        fast.ROW_NO_RELEVANT,
    ]
    assert skipped.batch.n_queries == 0


def test_sliced_arrow_arrays_are_read_at_their_offset() -> None:
    rows = [(["a", "b", "c"], {"c": 2.0}), (["x", "y"], {"y": 1.0}), (["p"], {"p": 3.0})]
    table = _arrow_rows(rows).slice(1, 2)
    joined = _joined(table)
    expected, _ = _reference(rows[1:])
    np.testing.assert_array_equal(joined.batch.ranked_grades, expected.ranked_grades)
    np.testing.assert_array_equal(joined.batch.label_grades, expected.label_grades)
