"""A lone gate string is one gate (not a sequence of one-character gates), and labels given as an
object are named "labels" in compare's counts, never after the baseline."""

from __future__ import annotations

import pytest

import rankgate

RUN = {"q1": {"d1": 2.0, "d2": 1.0}, "q2": {"d3": 1.0, "d4": 0.5}}
OTHER = {"q1": {"d2": 2.0, "d1": 1.0}, "q2": {"d4": 1.0, "d3": 0.5}}
QRELS = {"q1": {"d1": 1}, "q2": {"d4": 1}}


def test_a_lone_gate_string_is_one_gate() -> None:
    evaluation = rankgate.evaluate(RUN, ["map"], "map>=0.5", labels=QRELS)
    assert [str(outcome.gate) for outcome in evaluation.gates] == ["map>=0.5"]
    # MAP: q1 has its relevant document first (1.0), q2 second (0.5): mean 0.75.
    assert evaluation.passed
    failing = rankgate.evaluate(RUN, ["map"], "map>=0.8", labels=QRELS)
    assert not failing.passed


def test_compare_takes_a_lone_gate_and_names_object_labels() -> None:
    comparison = rankgate.compare(RUN, OTHER, metrics=["map"], gates="map>=0.5", labels=QRELS)
    assert comparison.labels_source == "labels"
    assert "baseline (labels)" not in comparison.read
    gates = [str(outcome.gate) for outcome in comparison.results[0].candidate.gates]
    assert gates == ["map>=0.5"]


@pytest.mark.parametrize("gate", ["m", "map>=", ">=0.5"])
def test_a_malformed_lone_gate_names_the_whole_string(gate: str) -> None:
    with pytest.raises(rankgate.RankgateError) as raised:
        rankgate.evaluate(RUN, ["map"], gate, labels=QRELS)
    assert repr(gate) in str(raised.value) or gate in str(raised.value)
