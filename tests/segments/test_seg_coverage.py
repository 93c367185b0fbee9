"""Annotation coverage (labeled / read) overall and per segment, and coverage minimums that fail the
run on their own (issue 4, part 5)."""

from __future__ import annotations

from typing import Any

import pytest
from seg_reference import no_relevant, ranked, unlabeled

import rankgate
from rankgate.gates import CoverageOutcome, GatePolicy, SegmentRule
from rankgate.segments import SegmentKey

QT = "query_type"
A, B = SegmentKey(QT, "a"), SegmentKey(QT, "b")
SETTINGS = rankgate.Settings(segment_by=(QT,), resamples=50)


def _records() -> list[dict[str, Any]]:
    """a: 40 read, 36 labeled (32 scored + 4 no_relevant), 4 unlabeled -> coverage 0.9.
    b: 40 read, 30 labeled, 10 unlabeled -> coverage 0.75.
    overall: 80 read, 66 labeled -> coverage 0.825. Every scored query has ndcg@10 = 1."""
    records = [ranked(f"a{i}", 1, query_type="a") for i in range(32)]
    records += [no_relevant(f"az{i}", query_type="a") for i in range(4)]
    records += [unlabeled(f"au{i}", query_type="a") for i in range(4)]
    records += [ranked(f"b{i}", 1, query_type="b") for i in range(30)]
    records += [unlabeled(f"bu{i}", query_type="b") for i in range(10)]
    return records


def _evaluate(policy: GatePolicy | None = None) -> rankgate.Evaluation:
    return rankgate.evaluate(
        _records(), ["ndcg@10"], ["ndcg@10>=0.7"], settings=SETTINGS, policy=policy
    )


def test_coverage_is_labeled_over_read_per_group() -> None:
    evaluation = _evaluate()
    assert (evaluation.overall.read, evaluation.overall.labeled) == (80, 66)
    assert evaluation.overall.coverage == pytest.approx(66 / 80)
    assert evaluation.summary.coverage == pytest.approx(66 / 80)
    a, b = evaluation.segment(QT, "a"), evaluation.segment(QT, "b")
    assert (a.read, a.labeled, a.scored) == (40, 36, 32)  # no_relevant records count as labeled
    assert a.coverage == pytest.approx(0.9)
    assert (b.read, b.labeled, b.scored) == (40, 30, 30)
    assert b.coverage == pytest.approx(0.75)


def test_no_minimum_no_coverage_checks() -> None:
    evaluation = _evaluate()
    assert evaluation.coverage_checks == ()
    assert evaluation.passed is True


def test_overall_minimum_met() -> None:
    evaluation = _evaluate(GatePolicy(min_coverage=0.8))
    overall = [c for c in evaluation.coverage_checks if c.segment is None]
    assert overall == [CoverageOutcome(None, pytest.approx(0.825), 0.8, True)]


def test_overall_minimum_missed_fails_the_run_although_every_gate_passes() -> None:
    evaluation = _evaluate(GatePolicy(min_coverage=0.85))
    assert all(outcome.passed for outcome in evaluation.gates)
    overall = next(c for c in evaluation.coverage_checks if c.segment is None)
    assert (overall.coverage, overall.minimum, overall.passed) == (
        pytest.approx(0.825),
        0.85,
        False,
    )
    assert evaluation.passed is False


def test_minimum_is_inclusive() -> None:
    # 0.75 coverage exactly for b, against a minimum of exactly 0.75.
    evaluation = _evaluate(GatePolicy(rules=(SegmentRule(key=B, min_coverage=0.75),)))
    (check,) = evaluation.coverage_checks
    assert (check.segment, check.coverage, check.passed) == (B, 0.75, True)
    assert evaluation.passed is True


def test_segment_rule_minimum_missed_fails_only_that_segment() -> None:
    evaluation = _evaluate(GatePolicy(rules=(SegmentRule(key=B, min_coverage=0.8),)))
    # Only b has a minimum: one check, failing, and the run fails with every gate passing.
    assert evaluation.coverage_checks == (CoverageOutcome(B, pytest.approx(0.75), 0.8, False),)
    assert all(outcome.passed for outcome in evaluation.gates)
    assert evaluation.passed is False


def test_segment_rule_minimum_overrides_the_policy_for_that_segment() -> None:
    # Overall 0.825 >= 0.8; a's rule asks 0.95 (0.9 misses); b's rule lowers it to 0.7 (0.75 meets).
    policy = GatePolicy(
        min_coverage=0.8,
        rules=(SegmentRule(key=A, min_coverage=0.95), SegmentRule(key=B, min_coverage=0.7)),
    )
    evaluation = _evaluate(policy)
    checks = {c.segment: c for c in evaluation.coverage_checks}
    assert checks[None].passed is True
    assert (checks[A].minimum, checks[A].passed) == (0.95, False)
    assert (checks[B].minimum, checks[B].passed) == (0.7, True)
    assert evaluation.passed is False


def test_segment_rule_minimum_of_zero_is_respected() -> None:
    # A rule minimum of 0.0 must not be mistaken for "unset" (and fall back to the policy's 0.8).
    policy = GatePolicy(min_coverage=0.8, rules=(SegmentRule(key=B, min_coverage=0.0),))
    evaluation = _evaluate(policy)
    checks = {c.segment: c for c in evaluation.coverage_checks}
    assert (checks[B].minimum, checks[B].passed) == (0.0, True)


def test_segment_with_nothing_labeled_has_zero_coverage() -> None:
    records = _records() + [unlabeled(f"cu{i}", query_type="c") for i in range(3)]
    policy = GatePolicy(
        rules=(SegmentRule(key=SegmentKey(QT, "c"), min_coverage=0.1, min_queries=1),)
    )
    evaluation = rankgate.evaluate(records, ["ndcg@10"], settings=SETTINGS, policy=policy)
    group = evaluation.segment(QT, "c")
    assert (group.read, group.labeled, group.coverage) == (3, 0, 0.0)
    (check,) = evaluation.coverage_checks
    assert (check.coverage, check.passed) == (0.0, False)
    assert evaluation.passed is False
