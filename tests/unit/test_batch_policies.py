"""The unjudged-document policies as batch transformations, against their definitions spelled out
query by query in plain Python (an oracle that shares no code with ``batch.py``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rankgate import fast
from rankgate.batch import BatchBuilder, RankedBatch
from rankgate.spec import parse_metric

GRADES = st.sampled_from([0.0, 1.0, 2.0, 3.0])


@st.composite
def queries(draw: Any) -> list[tuple[list[str], dict[str, float]]]:
    """Rankings over a small document pool (so IDs repeat and labels hit and miss) with labels."""
    found = []
    for _ in range(draw(st.integers(0, 8))):
        pool = [f"d{i}" for i in range(draw(st.integers(1, 12)))]
        ranking = draw(st.lists(st.sampled_from(pool), max_size=15))
        labels = draw(st.dictionaries(st.sampled_from(pool), GRADES, max_size=10))
        found.append((ranking, labels))
    return found


def _per_query(batch: RankedBatch) -> list[tuple[list[float], list[bool], list[float]]]:
    rows = []
    for q in range(batch.n_queries):
        ranked = slice(int(batch.ranked_offsets[q]), int(batch.ranked_offsets[q + 1]))
        labels = slice(int(batch.label_offsets[q]), int(batch.label_offsets[q + 1]))
        rows.append(
            (
                batch.ranked_grades[ranked].tolist(),
                batch.ranked_judged[ranked].tolist(),
                batch.label_grades[labels].tolist(),
            )
        )
    return rows


@settings(max_examples=300, deadline=None)
@given(queries(), GRADES)
def test_unjudged_relevant_labels_each_unjudged_document_at_its_rank_and_among_the_ideal(
    found: list[tuple[list[str], dict[str, float]]], grade: float
) -> None:
    builder = BatchBuilder()
    for ranking, labels in found:
        builder.add(ranking, labels)
    batch = builder.build()
    expected = []
    for ranking, labels in found:
        distinct = list(dict.fromkeys(ranking))
        as_judged = {doc: labels.get(doc, grade) for doc in distinct} | labels
        expected.append(
            (
                [as_judged[doc] for doc in distinct],
                [True] * len(distinct),
                sorted(as_judged.values(), reverse=True),
            )
        )
    assert _per_query(batch.with_unjudged_relevant(grade)) == expected


# Every compiled twin, at cutoffs short and long and with none, each with its own rel.
TWIN_METRICS = [
    "ndcg@3",
    "ndcg(gain=linear)@10",
    "dcg@5",
    "dcg(gain=linear)",
    "precision@3",
    "precision",
    "recall@5",
    "mrr",
    "map",
    "map(rel=2)",
    "hit_rate@2",
    "r_precision",
    "judged@5",
]


def _with_odd_grades(found: list[tuple[list[str], dict[str, float]]], odd: list[float]) -> Any:
    """The queries' batch, their grades replaced by ``odd`` ones (fractions, negatives) if any."""
    builder = BatchBuilder()
    for number, (ranking, labels) in enumerate(found):
        builder.add(
            ranking,
            {
                doc: odd[(number + i) % len(odd)] if odd else g
                for i, (doc, g) in enumerate(labels.items())
            },
        )
    return builder.build()


@settings(max_examples=300, deadline=None)
@given(
    found=queries(),
    grade=st.floats(-2.0, 4.0, allow_nan=False),
    odd=st.lists(st.floats(-1.0, 4.0, allow_nan=False), max_size=40),
)
def test_compiled_twins_under_unjudged_relevant_equal_them_over_the_definitions_batch(
    found: list[tuple[list[str], dict[str, float]]], grade: float, odd: list[float]
) -> None:
    """The compiled twins make each query's unjudged-relevant arrays themselves (``_join.score``
    with an unjudged grade); scoring the batch the definition makes gives the same values to the
    bit, for any grades (fractions, negatives, a policy grade between or equal to label grades)."""
    if not fast.available():
        pytest.skip("built without the compiled extension")
    batch = _with_odd_grades(found, odd)
    twins = [(spec, fast.native_code(spec)) for spec in map(parse_metric, TWIN_METRICS)]
    assert all(code is not None for _, code in twins)
    defaults = {"rel": 1.0}
    on_the_fly = fast._score_twins(batch, twins, defaults, unjudged_grade=grade)
    definition = fast._score_twins(batch.with_unjudged_relevant(grade), twins, defaults)
    assert on_the_fly.keys() == definition.keys()
    for spec in on_the_fly:
        assert on_the_fly[spec].tobytes() == definition[spec].tobytes(), spec


@settings(max_examples=300, deadline=None)
@given(found=queries(), odd=st.lists(st.floats(-1.0, 4.0, allow_nan=False), max_size=40))
def test_compiled_twins_under_condensed_equal_them_over_the_definitions_batch(
    found: list[tuple[list[str], dict[str, float]]], odd: list[float]
) -> None:
    """Under ``unjudged=condensed`` the twins leave each query's unjudged documents out
    themselves; scoring the batch ``condensed()`` makes gives the same values to the bit."""
    if not fast.available():
        pytest.skip("built without the compiled extension")
    batch = _with_odd_grades(found, odd)
    twins = [(spec, fast.native_code(spec)) for spec in map(parse_metric, TWIN_METRICS)]
    defaults = {"rel": 1.0}
    on_the_fly = fast._score_twins(batch, twins, defaults, condensed=True)
    definition = fast._score_twins(batch.condensed(), twins, defaults)
    assert on_the_fly.keys() == definition.keys()
    for spec in on_the_fly:
        assert on_the_fly[spec].tobytes() == definition[spec].tobytes(), spec


@settings(max_examples=300, deadline=None)
@given(
    found=queries(),
    grades=st.lists(st.sampled_from([0.5, 1.0, 2.0, 3.0]), min_size=1, max_size=3),
    odd=st.lists(st.floats(-1.0, 4.0, allow_nan=False), max_size=40),
    order=st.randoms(use_true_random=False),
)
def test_every_policy_in_one_pass_equals_each_policy_over_its_own_batch(
    found: list[tuple[list[str], dict[str, float]]],
    grades: list[float],
    odd: list[float],
    order: Any,
) -> None:
    """``fast.score`` scores the twins of all policies in one call to ``_join.score``, each query's
    arrays made again as each policy sees them (and, under ``relevant``, each grade); metrics in
    any order, of policies in any mix, give to the bit what the twins give over the batch each
    policy's definition makes (``RankedBatch.under_unjudged``)."""
    if not fast.available():
        pytest.skip("built without the compiled extension")
    batch = _with_odd_grades(found, odd)
    if not batch.n_queries:
        return
    specs = []
    for name in TWIN_METRICS:
        spec = parse_metric(name)
        specs.append(spec)
        if any(p.name == "unjudged" for p in spec.definition.params):
            specs.append(spec.with_params(unjudged="condensed"))
            specs.append(spec.with_params(unjudged="relevant"))
            if any(p.name == "rel" for p in spec.definition.params):
                for grade in grades:  # an unjudged document takes the metric's rel
                    specs.append(spec.with_params(unjudged="relevant", rel=grade))
    specs = list(dict.fromkeys(specs))
    order.shuffle(specs)
    defaults = {"rel": 1.0}
    together = fast.score(batch, specs, defaults)
    for spec in specs:
        policy, grade = spec.definition.unjudged_policy(dict(spec.params), defaults)
        alone = fast._score_twins(
            batch.under_unjudged(policy, grade), [(spec, fast.native_code(spec))], defaults
        )[spec]
        assert together[spec].tobytes() == alone.tobytes(), spec


@settings(max_examples=300, deadline=None)
@given(queries())
def test_condensed_drops_unjudged_documents_and_keeps_the_labels(
    found: list[tuple[list[str], dict[str, float]]],
) -> None:
    builder = BatchBuilder()
    for ranking, labels in found:
        builder.add(ranking, labels)
    expected = []
    for ranking, labels in found:
        judged = [doc for doc in dict.fromkeys(ranking) if doc in labels]
        expected.append(
            (
                [labels[doc] for doc in judged],
                [True] * len(judged),
                sorted(labels.values(), reverse=True),
            )
        )
    assert _per_query(builder.build().condensed()) == expected


def test_a_batch_with_every_document_judged_is_returned_as_it_is() -> None:
    builder = BatchBuilder()
    builder.add(["a", "b"], {"a": 1.0, "b": 0.0})
    batch = builder.build()
    assert batch.with_unjudged_relevant(1.0) is batch
    assert batch.condensed() is batch
    assert np.array_equal(batch.label_grades, [1.0, 0.0])
