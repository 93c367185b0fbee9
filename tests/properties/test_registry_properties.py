"""Properties every registered metric must have, checked over the whole registry.

A new metric is covered by these tests the moment it is registered: nothing here names one.
"""

from __future__ import annotations

import itertools
import random
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rankgate
from rankgate import MetricSpec, Settings
from rankgate.metrics.registry import MetricDef, all_metrics
from strategies import CUTOFFS, trace_records


def _specs(definition: MetricDef) -> list[MetricSpec]:
    """The metric at several cutoffs (or none) and at each choice of its parameters."""
    cutoffs: list[int | None] = [None, *CUTOFFS] if definition.cutoff else [None]
    variants: list[dict[str, Any]] = [{}]
    for param in definition.params:
        if param.choices:
            variants += [{param.name: choice} for choice in param.choices]
        elif param.name == "rel":
            variants += [{"rel": 2}, {"rel": 0.5}]
    return [
        rankgate.make_metric(definition.name, k, variant) for k in cutoffs for variant in variants
    ]


ALL_SPECS = [spec for definition in all_metrics() for spec in _specs(definition)]


def _values(
    records: list[dict[str, Any]], specs: list[MetricSpec], **options: Any
) -> dict[str, Any]:
    evaluation = rankgate.evaluate(records, specs, settings=Settings(**options))
    return {str(spec): evaluation.values[spec] for spec in specs}


@settings(max_examples=150, deadline=None)
@given(records=trace_records())
def test_bounded_metrics_lie_in_unit_interval_and_dcg_is_non_negative(
    records: list[dict[str, Any]],
) -> None:
    for spec in ALL_SPECS:
        values = _values(records, [spec], empty_relevant="zero")[str(spec)]
        assert np.all(np.isfinite(values)), spec
        assert np.all(values >= 0.0), spec
        if spec.definition.bounded:
            assert np.all(values <= 1.0), spec


@settings(max_examples=100, deadline=None)
@given(records=trace_records(), data=st.data())
def test_duplicates_change_nothing(records: list[dict[str, Any]], data: st.DataObject) -> None:
    """Repeating a document later in its ranking gives the same values as the clean ranking."""
    clean = [
        {**r, "retrieved_ids": list(dict.fromkeys(map(str, r["retrieved_ids"])))} for r in records
    ]
    noisy = []
    for record in clean:
        ranking = list(record["retrieved_ids"])
        for _ in range(data.draw(st.integers(0, 3))):
            if ranking:
                position = data.draw(st.integers(0, len(ranking) - 1))
                insert_at = data.draw(st.integers(position + 1, len(ranking)))
                ranking.insert(insert_at, ranking[position])
        noisy.append({**record, "retrieved_ids": ranking})
    ours = _values(noisy, ALL_SPECS)
    reference = _values(clean, ALL_SPECS)
    for name in ours:
        np.testing.assert_array_equal(ours[name], reference[name], err_msg=name)


@settings(max_examples=100, deadline=None)
@given(records=trace_records(), seed=st.integers(0, 2**32 - 1))
def test_label_order_and_batch_company_change_nothing_bit_for_bit(
    records: list[dict[str, Any]], seed: int
) -> None:
    """A query's values depend only on that query: not on the order of its labels, nor on which
    other queries share its batch."""
    rng = random.Random(seed)
    shuffled = []
    for record in records:
        scores = list(record.get("relevance_scores", {}).items())
        rng.shuffle(scores)
        shuffled.append({**record, "relevance_scores": dict(scores)} if scores else record)
    rng.shuffle(shuffled)
    together = rankgate.evaluate(shuffled, ALL_SPECS)
    for position, query_id in enumerate(together.query_ids):
        record = next(r for r in records if r["query_id"] == query_id)
        alone = rankgate.evaluate([record], ALL_SPECS)
        for spec in ALL_SPECS:
            assert together.values[spec][position] == alone.values[spec][0], (spec, query_id)


@settings(max_examples=100, deadline=None)
@given(records=trace_records())
def test_metrics_declared_monotone_never_decrease_with_k(records: list[dict[str, Any]]) -> None:
    monotone = [d for d in all_metrics() if d.monotone_in_k]
    assert monotone, "some metrics (recall, dcg, hit_rate, ...) must be declared monotone in k"
    for definition in monotone:
        specs = [rankgate.make_metric(definition.name, k) for k in sorted(CUTOFFS)]
        values = _values(records, specs)
        for smaller, larger in itertools.pairwise(specs):
            assert np.all(values[str(larger)] >= values[str(smaller)] - 1e-15), (smaller, larger)


@pytest.mark.parametrize("definition", all_metrics(), ids=lambda d: d.name)
def test_every_metric_is_documented(definition: MetricDef) -> None:
    assert definition.summary and definition.formula and definition.reference
    assert definition.edge_cases
    for param in definition.params:
        assert param.description


def test_perfect_ranking_scores_one_on_every_bounded_metric() -> None:
    """Retrieving exactly the R relevant documents, best first, scores 1 at k = R and uncut."""
    record = {
        "query_id": "q",
        "retrieved_ids": ["a", "b", "c"],
        "relevance_scores": {"a": 3, "b": 2, "c": 1},
    }
    for spec in ALL_SPECS:
        explicit_rel = any(name == "rel" for name, _ in spec.params)
        if not spec.definition.bounded or explicit_rel or not spec.definition.perfect_scores_one:
            continue  # rbp's best score is 1 - p**R, below 1 by design
        if spec.k not in (None, 3):
            continue  # below R recall cannot reach 1; above R precision cannot
        value = rankgate.evaluate([record], [spec]).values[spec][0]
        assert value == pytest.approx(1.0, abs=1e-12), spec
