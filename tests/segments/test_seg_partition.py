"""Segments partition the records: one Group per value of each segment field, counts that add up,
and per-segment means equal to the plain mean of that segment's per-query values (issue 4, part 1).

Expected values come from ``seg_reference`` (plain-Python metric formulas) and from classifying the
records in the test, never from rankgate itself.
"""

from __future__ import annotations

import math
import random
from collections import Counter, defaultdict
from typing import Any

import pytest
from seg_reference import (
    grades_of,
    make_records,
    no_relevant,
    plain_mean,
    ref_values,
    segment_of,
    unlabeled,
)

import rankgate
from rankgate.gates import GatePolicy, SegmentRule
from rankgate.segments import Group, SegmentKey

METRICS = ("ndcg@10", "recall@3", "mrr")
FIELDS = ("query_type", "meta.region")
REASONS = ("unlabeled", "no_relevant", "invalid")


def _status(record: dict[str, Any]) -> str:
    grades = grades_of(record)
    if grades is None:
        return "unlabeled"
    return "scored" if any(g >= 1 for g in grades.values()) else "no_relevant"


def _mixed_dataset() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(valid records, invalid records), shuffled together by the caller's order of use."""
    rng = random.Random(20240917)
    records = make_records(7, {"factual": (45, 0.9), "multi_hop": (35, 0.6), "rare": (12, 0.3)})
    records += [
        unlabeled(f"u{i}", query_type=("factual", "rare", "multi_hop")[i % 3]) for i in range(7)
    ]
    records += [no_relevant(f"z{i}", query_type=("rare", "factual")[i % 2]) for i in range(5)]
    # Records without a query_type at all, and one with an explicit null.
    records += make_records(8, {"x": (4, 0.8)})
    for record in records[-4:]:
        del record["query_type"]
    records.append({**no_relevant("null-type"), "query_type": None})
    # meta.region: present, absent (no meta / meta without region / explicit null).
    for record in records:
        choice = rng.random()
        if choice < 0.45:
            record["meta"] = {"region": "eu", "tier": 1}
        elif choice < 0.75:
            record["meta"] = {"region": "us"}
        elif choice < 0.85:
            record["meta"] = {"tier": 2}
        elif choice < 0.92:
            record["meta"] = {"region": None}
        # else: no meta at all
    invalid = [
        {
            "query_id": "bad-1",
            "relevant_ids": ["x"],
            "query_type": "factual",
            "meta": {"region": "eu"},
        },
        {
            "query_id": "bad-2",
            "retrieved_ids": ["a"],
            "relevance_scores": {"a": -1},
            "query_type": "rare",
        },
        {"query_id": "bad-3", "retrieved_ids": "a,b", "query_type": "multi_hop"},
        "not an object",
    ]
    rng.shuffle(records)
    return records, invalid


@pytest.fixture(scope="module")
def mixed() -> tuple[list[dict[str, Any]], list[dict[str, Any]], rankgate.Evaluation]:
    records, invalid = _mixed_dataset()
    stream = list(records)
    for i, bad in enumerate(invalid):
        stream.insert(10 + 17 * i, bad)
    evaluation = rankgate.evaluate(
        stream,
        list(METRICS),
        settings=rankgate.Settings(segment_by=FIELDS, on_invalid="skip", resamples=200),
    )
    return records, invalid, evaluation


def _expected_groups(records: list[dict[str, Any]], field: str) -> dict[str, list[dict[str, Any]]]:
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in records:
        groups[segment_of(record, field)].append(record)
    return groups


def test_one_group_per_value_of_each_field_not_their_product(mixed: Any) -> None:
    records, _, evaluation = mixed
    expected = {
        SegmentKey(field, value) for field in FIELDS for value in _expected_groups(records, field)
    }
    assert {group.key for group in evaluation.segments} == expected
    assert len(evaluation.segments) == len(expected)  # no duplicates
    assert all(isinstance(group, Group) for group in evaluation.segments)
    # (missing) is a segment of both fields: records without query_type, and without meta.region.
    assert SegmentKey("query_type", "(missing)") in expected
    assert SegmentKey("meta.region", "(missing)") in expected
    assert evaluation.overall.key is None


@pytest.mark.parametrize("field", FIELDS)
def test_segment_counts_match_hand_classification(mixed: Any, field: str) -> None:
    records, _, evaluation = mixed
    for value, members in _expected_groups(records, field).items():
        group = evaluation.segment(field, value)
        statuses = Counter(_status(r) for r in members)
        assert group.key == SegmentKey(field, value)
        assert group.read == len(members), value
        assert group.labeled == len(members) - statuses["unlabeled"], value
        assert group.scored == statuses["scored"], value
        assert group.skipped == {
            "unlabeled": statuses["unlabeled"],
            "no_relevant": statuses["no_relevant"],
            "invalid": 0,
        }, value
        assert group.coverage == pytest.approx(group.labeled / group.read)


@pytest.mark.parametrize("field", FIELDS)
def test_segment_means_equal_plain_mean_of_reference_values(mixed: Any, field: str) -> None:
    records, _, evaluation = mixed
    for value, members in _expected_groups(records, field).items():
        group = evaluation.segment(field, value)
        for metric in METRICS:
            spec = rankgate.parse_metric(metric)
            reference = ref_values(members, metric)
            if reference:
                assert group.means[spec] == pytest.approx(
                    plain_mean(reference), rel=1e-12, abs=1e-15
                )
            else:
                assert group.means[spec] != group.means[spec]  # NaN: nothing scored


@pytest.mark.parametrize("field", FIELDS)
def test_segment_means_equal_mean_of_own_per_query_values(mixed: Any, field: str) -> None:
    """The segment mean is the mean of exactly that segment's rows of the per-query table."""
    records, _, evaluation = mixed
    segment_by_id = {r["query_id"]: segment_of(r, field) for r in records}
    rows = evaluation.per_query()
    assert len(rows) == evaluation.overall.scored
    per_segment: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        per_segment[segment_by_id[row["query_id"]]].append(row)
    for value, members in per_segment.items():
        group = evaluation.segment(field, value)
        assert group.scored == len(members)
        for metric in METRICS:
            spec = rankgate.parse_metric(metric)
            assert group.means[spec] == pytest.approx(
                plain_mean([row[str(spec)] for row in members]), rel=1e-12
            )


@pytest.mark.parametrize("field", FIELDS)
def test_counts_add_up_over_each_fields_segments(mixed: Any, field: str) -> None:
    records, invalid, evaluation = mixed
    overall = evaluation.overall
    groups = [g for g in evaluation.segments if g.key.field == field]
    n_invalid = len(invalid)
    assert overall.read == len(records) + n_invalid
    assert overall.skipped["invalid"] == n_invalid
    assert sum(g.read for g in groups) == overall.read - n_invalid
    assert sum(g.labeled for g in groups) == overall.labeled
    assert sum(g.scored for g in groups) == overall.scored
    for reason in ("unlabeled", "no_relevant"):
        assert sum(g.skipped[reason] for g in groups) == overall.skipped[reason]
    assert sum(g.skipped["invalid"] for g in groups) == 0


def test_read_equals_scored_plus_skipped_everywhere(mixed: Any) -> None:
    _, _, evaluation = mixed
    for group in (evaluation.overall, *evaluation.segments):
        assert group.read == group.scored + sum(group.skipped[r] for r in REASONS), group.name
        assert set(group.skipped) == set(REASONS)


def test_overall_group_matches_hand_counts_and_summary(mixed: Any) -> None:
    records, invalid, evaluation = mixed
    statuses = Counter(_status(r) for r in records)
    overall, summary = evaluation.overall, evaluation.summary
    assert overall.scored == statuses["scored"] == summary.scored == len(evaluation.query_ids)
    assert overall.skipped == {
        "unlabeled": statuses["unlabeled"],
        "no_relevant": statuses["no_relevant"],
        "invalid": len(invalid),
    }
    assert summary.skipped == overall.skipped
    assert overall.labeled == summary.labeled == statuses["scored"] + statuses["no_relevant"]
    for metric in METRICS:
        spec = rankgate.parse_metric(metric)
        assert overall.means[spec] == pytest.approx(
            plain_mean(ref_values(records, metric)), rel=1e-12
        )
        assert evaluation.means[spec] == overall.means[spec]


def test_segment_lookup_returns_the_group_and_refuses_unknown_values(mixed: Any) -> None:
    _, _, evaluation = mixed
    group = evaluation.segment("query_type", "factual")
    assert group.key == SegmentKey("query_type", "factual")
    assert group in evaluation.segments
    assert group.name == "query_type=factual"
    with pytest.raises(KeyError):
        evaluation.segment("query_type", "nonexistent")
    with pytest.raises(KeyError):
        evaluation.segment("region", "eu")  # the field is meta.region, not region


def test_no_segments_without_segment_by() -> None:
    records = make_records(3, {"a": (5, 0.9), "b": (5, 0.9)})
    evaluation = rankgate.evaluate(records, ["ndcg@10"], settings=rankgate.Settings(resamples=50))
    assert evaluation.segments == ()
    assert evaluation.overall.scored == 10


def test_field_named_only_by_a_segment_rule_is_segmented_too() -> None:
    records = make_records(4, {"a": (6, 0.9), "b": (4, 0.4)})
    policy = GatePolicy(rules=(SegmentRule(key=SegmentKey("query_type", "b"), min_queries=1),))
    evaluation = rankgate.evaluate(
        records, ["ndcg@10"], settings=rankgate.Settings(resamples=50), policy=policy
    )
    assert {g.key for g in evaluation.segments} == {
        SegmentKey("query_type", "a"),
        SegmentKey("query_type", "b"),
    }
    assert evaluation.segment("query_type", "b").scored == 4


def test_non_string_segment_values_and_records_nested_under_input() -> None:
    """Values are compared as text; a record whose fields sit under ``input`` is segmented by them."""
    base = {"retrieved_ids": ["d1", "d2"], "relevant_ids": ["d2"]}  # ndcg@10 = 1/log2(3)
    records = [
        {**base, "query_id": "a", "shard": 3},
        {**base, "query_id": "b", "shard": "3"},
        {"query_id": "c", "retrieved_ids": ["d1"], "relevant_ids": ["d1"], "shard": 4},
        {"query_id": "d", "input": {**base, "shard": 4}},
        {"query_id": "e", "input": {**base}},
    ]
    evaluation = rankgate.evaluate(
        records, ["ndcg@10"], settings=rankgate.Settings(segment_by=("shard",), resamples=50)
    )
    spec = rankgate.parse_metric("ndcg@10")
    assert {g.key.value: g.scored for g in evaluation.segments} == {"3": 2, "4": 2, "(missing)": 1}
    low = 1 / math.log2(3)
    assert evaluation.segment("shard", "3").means[spec] == pytest.approx(low)
    assert evaluation.segment("shard", "4").means[spec] == pytest.approx((1 + low) / 2)
