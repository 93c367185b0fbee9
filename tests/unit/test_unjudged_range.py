"""The range unjudged documents leave (pessimistic: counted non-relevant; optimistic: counted
relevant) and gates on the pessimistic value, against values worked out by hand."""

from __future__ import annotations

import math

import pytest

import rankgate
from rankgate import ConfigError, Settings, parse_gate, parse_metric
from rankgate.config import load_config
from rankgate.gates import GATE_ON, GatePolicy, SegmentRule, pessimistic_spec
from rankgate.segments import SegmentKey

# q1 ranks a (grade 1), then b and c, which nobody judged; z (grade 1) was not retrieved.
# q2 ranks x (unjudged), then y (grade 2).
TRACES = [
    {
        "query_id": "q1",
        "kind": "k1",
        "retrieved_ids": ["a", "b", "c"],
        "relevance_scores": {"a": 1, "z": 1},
    },
    {"query_id": "q2", "kind": "k2", "retrieved_ids": ["x", "y"], "relevance_scores": {"y": 2}},
]

# By hand. Pessimistic (unjudged = grade 0) and optimistic (unjudged = grade 1, added to R):
#   mrr:          q1 1 | 1          q2 1/2 | 1        -> 0.75 | 1.0
#   precision@2:  q1 1/2 | 2/2      q2 1/2 | 2/2      -> 0.5  | 1.0
#   recall@3:     q1 1/2 | 3/4      q2 1/1 | 2/2      -> 0.75 | 0.875
# Condensed (unjudged removed): mrr q1 [a] 1, q2 [y] 1 -> 1.0.
EXPECTED = {"mrr": (0.75, 1.0), "precision@2": (0.5, 1.0), "recall@3": (0.75, 0.875)}


def test_the_range_equals_the_hand_computed_values() -> None:
    evaluation = rankgate.evaluate(TRACES, [*EXPECTED, "bpref"])
    for metric, bounds in EXPECTED.items():
        assert evaluation.unjudged_range(metric) == pytest.approx(bounds, abs=1e-12)
        assert evaluation.mean(metric) == pytest.approx(bounds[0], abs=1e-12)
    assert evaluation.unjudged_range("bpref") is None  # its value takes no unjudged policy
    assert list(map(str, evaluation.metrics)) == [*EXPECTED, "bpref"]  # nothing added


def test_the_range_per_segment() -> None:
    evaluation = rankgate.evaluate(TRACES, ["mrr"], settings=Settings(segment_by=("kind",)))
    assert evaluation.unjudged_range("mrr", evaluation.segment("kind", "k2")) == (0.5, 1.0)
    assert evaluation.unjudged_range("mrr", evaluation.segment("kind", "k1")) == (1.0, 1.0)


def test_a_condensed_metric_reports_both_ends_around_its_mean() -> None:
    evaluation = rankgate.evaluate(TRACES, ["mrr(unjudged=condensed)"])
    assert evaluation.mean("mrr(unjudged=condensed)") == 1.0
    assert evaluation.unjudged_range("mrr(unjudged=condensed)") == (0.75, 1.0)


def test_gate_on_pessimistic_reads_the_nonrelevant_mean() -> None:
    gate = "mrr(unjudged=condensed)>=0.9"
    on_mean = rankgate.evaluate(TRACES, gates=[gate])
    on_floor = rankgate.evaluate(TRACES, gates=[gate], policy=GatePolicy(gate_on="pessimistic"))
    assert on_mean.passed and on_mean.gates[0].value == 1.0
    (outcome,) = on_floor.gates
    assert not on_floor.passed
    assert (outcome.statistic, outcome.value, outcome.mean) == ("pessimistic", 0.75, 1.0)
    assert outcome.margin == pytest.approx(-0.15)


def test_gate_on_pessimistic_needs_no_resamples() -> None:
    evaluation = rankgate.evaluate(
        TRACES,
        gates=["mrr>=0.7"],
        settings=Settings(resamples=0),
        policy=GatePolicy(gate_on="pessimistic"),
    )
    assert evaluation.passed and evaluation.gates[0].value == 0.75
    assert math.isnan(evaluation.intervals[parse_metric("mrr")][0])


def test_a_metric_without_a_policy_gates_on_its_mean() -> None:
    assert pessimistic_spec(parse_metric("bpref")) == parse_metric("bpref")
    assert pessimistic_spec(parse_metric("ndcg(unjudged=relevant)@5")) == parse_metric("ndcg@5")
    evaluation = rankgate.evaluate(
        TRACES, gates=["bpref>=0.4"], policy=GatePolicy(gate_on="pessimistic")
    )
    assert evaluation.gates[0].value == evaluation.mean("bpref")


def test_a_segment_rule_may_gate_on_the_pessimistic_value() -> None:
    policy = GatePolicy(
        min_queries=1,
        rules=(SegmentRule(SegmentKey("kind", "k2"), gate_on="pessimistic"),),
    )
    evaluation = rankgate.evaluate(
        TRACES,
        gates=[parse_gate("mrr(unjudged=condensed)>=0.9")],
        settings=Settings(segment_by=("kind",)),
        policy=policy,
    )
    by_group = {str(o.segment): (o.statistic, o.value, o.passed) for o in evaluation.gates}
    assert by_group == {
        "None": ("mean", 1.0, True),
        "kind=k1": ("mean", 1.0, True),
        "kind=k2": ("pessimistic", 0.5, False),
    }


def test_optimistic_is_not_a_gate_choice() -> None:
    assert "pessimistic" in GATE_ON and "optimistic" not in GATE_ON
    with pytest.raises(ConfigError, match="gate_on"):
        GatePolicy(gate_on="optimistic")


def test_rankgate_toml_accepts_gate_on_pessimistic(tmp_path) -> None:
    path = tmp_path / "rankgate.toml"
    path.write_text(
        'gate_on = "pessimistic"\n[segments.kind.k2]\ngate_on = "pessimistic"\n',
        encoding="utf-8",
    )
    config = load_config(path)
    assert config.gate_on == "pessimistic"
    assert [rule.gate_on for rule in config.rules] == ["pessimistic"]
