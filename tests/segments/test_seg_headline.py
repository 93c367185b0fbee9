"""Issue 4's "done when": a regression on one segment fails the run although the overall mean
passes comfortably, and names the segment and metric; the same data without the regression passes.
Also the record accounting when unlabeled, no_relevant and stale-label queries are mixed in.

Datasets are generated with a seeded ``random.Random`` and every expected number is computed by the
reference code in ``seg_reference`` on the generated records.
"""

from __future__ import annotations

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
    unlabeled,
)

import rankgate
from rankgate.gates import GatePolicy
from rankgate.segments import SegmentKey
from rankgate.stale import LabelFilter

QT = "query_type"
TYPES = ("factual", "navigational", "multi_hop", "rare")
NDCG = rankgate.parse_metric("ndcg@10")
RECALL = rankgate.parse_metric("recall@20")
RARE = SegmentKey(QT, "rare")


def _dataset(rare_quality: float) -> list[dict[str, Any]]:
    return make_records(
        4,
        {
            "factual": (200, 0.97),
            "navigational": (150, 0.97),
            "multi_hop": (80, 0.9),
            "rare": (40, rare_quality),
        },
    )


def _by_type(records: list[dict[str, Any]], metric: str) -> dict[str, float]:
    return {t: plain_mean(ref_values([r for r in records if r[QT] == t], metric)) for t in TYPES}


def _run(records: list[dict[str, Any]], **settings: Any) -> rankgate.Evaluation:
    return rankgate.evaluate(
        records,
        ["ndcg@10", "recall@20"],
        ["ndcg@10>=0.7"],
        settings=rankgate.Settings(segment_by=(QT,), seed=17, **settings),
    )


def test_regressed_segment_fails_the_run_and_is_named() -> None:
    records = _dataset(rare_quality=0.15)
    overall = plain_mean(ref_values(records, "ndcg@10"))
    per_type = _by_type(records, "ndcg@10")
    # The scenario as intended: overall passes comfortably, only rare misses.
    assert overall >= 0.75
    assert per_type["rare"] < 0.3
    assert all(per_type[t] >= 0.75 for t in TYPES if t != "rare")

    evaluation = _run(records)
    assert evaluation.means[NDCG] == pytest.approx(overall, rel=1e-12)
    assert evaluation.passed is False
    failing = [o for o in evaluation.gates if not o.passed]
    assert len(failing) == 1
    (outcome,) = failing
    assert outcome.segment == RARE
    assert outcome.gate.metric == NDCG
    assert outcome.status == "fail"
    assert outcome.scored == 40
    assert outcome.value == pytest.approx(per_type["rare"], rel=1e-12)
    assert outcome.margin == pytest.approx(per_type["rare"] - 0.7, rel=1e-9)
    # The overall gate on its own passes.
    (overall_outcome,) = [o for o in evaluation.gates if o.segment is None]
    assert overall_outcome.status == "pass"
    assert overall_outcome.value == pytest.approx(overall, rel=1e-12)


def test_control_without_the_regression_passes() -> None:
    records = _dataset(rare_quality=0.97)
    per_type = _by_type(records, "ndcg@10")
    assert all(value >= 0.75 for value in per_type.values())
    evaluation = _run(records)
    assert evaluation.passed is True
    assert len(evaluation.gates) == 1 + len(TYPES)
    assert {o.status for o in evaluation.gates} == {"pass"}
    for outcome in evaluation.gates:
        if outcome.segment is not None:
            assert outcome.value == pytest.approx(per_type[outcome.segment.value], rel=1e-12)


def test_regression_hidden_in_the_overall_mean_is_caught_only_with_segments() -> None:
    records = _dataset(rare_quality=0.15)
    flat = rankgate.evaluate(
        records, ["ndcg@10"], ["ndcg@10>=0.7"], settings=rankgate.Settings(seed=17)
    )
    assert flat.passed is True
    assert _run(records).passed is False


def test_lower_bound_gating_also_catches_the_regression_and_still_passes_the_control() -> None:
    policy = GatePolicy(gate_on="lower_bound")
    for quality, passed in ((0.15, False), (0.97, True)):
        evaluation = rankgate.evaluate(
            _dataset(quality),
            ["ndcg@10"],
            ["ndcg@10>=0.7"],
            settings=rankgate.Settings(segment_by=(QT,), seed=17),
            policy=policy,
        )
        assert evaluation.passed is passed, quality
        if not passed:
            assert [o.segment for o in evaluation.gates if not o.passed] == [RARE]


# --- mixed-in unlabeled, no_relevant and stale-label queries -------------------------------------


def _mixed(rare_quality: float) -> tuple[list[dict[str, Any]], frozenset[str], set[str]]:
    """Records with unlabeled and no_relevant queries mixed in, a corpus, and the stale doc IDs.

    In 10% of queries every label goes stale (they lose all relevant labels); in another 15% one
    label does."""
    rng = random.Random(99)
    records = make_records(
        5,
        {
            "factual": (200, 0.97),
            "navigational": (150, 0.97),
            "multi_hop": (80, 0.9),
            "rare": (45, rare_quality),
        },
    )
    records += [unlabeled(f"u{i}", **{QT: TYPES[i % 4]}) for i in range(23)]
    records += [no_relevant(f"z{i}", **{QT: TYPES[(i + 1) % 4]}) for i in range(13)]
    rng.shuffle(records)
    stale: set[str] = set()
    for record in records:
        labels = list(record.get("relevance_scores", {}))
        if not labels or not any(record["relevance_scores"][d] >= 1 for d in labels):
            continue
        draw = rng.random()
        if draw < 0.10:
            stale.update(labels)
        elif draw < 0.25:
            stale.add(rng.choice(labels))
    every_id = {doc for r in records for doc in r["retrieved_ids"]}
    every_id |= {doc for r in records for doc in r.get("relevance_scores", {})}
    return records, frozenset(every_id - stale), stale


def _expected(records: list[dict[str, Any]], stale: set[str]) -> dict[str | None, dict[str, Any]]:
    """Per query_type (and None for overall): counts and filtered records, by hand."""
    table: dict[str | None, dict[str, Any]] = defaultdict(
        lambda: {"counts": Counter(), "filtered": []}
    )
    for record in records:
        grades = grades_of(record)
        for key in (None, record[QT]):
            entry = table[key]
            entry["counts"]["read"] += 1
            if grades is None:
                entry["counts"]["unlabeled"] += 1
                continue
            entry["counts"]["labeled"] += 1
            kept = {d: g for d, g in grades.items() if d not in stale}
            entry["counts"]["stale"] += len(grades) - len(kept)
            had = any(g >= 1 for g in grades.values())
            has = any(g >= 1 for g in kept.values())
            entry["counts"]["lost"] += had and not has
            if not has:
                entry["counts"]["no_relevant"] += 1
                continue
            entry["counts"]["scored"] += 1
            entry["filtered"].append({**record, "relevance_scores": kept})
    return table


@pytest.mark.parametrize(("rare_quality", "passes"), [(0.15, False), (0.97, True)])
def test_mixed_dataset_accounting_and_verdict(rare_quality: float, passes: bool) -> None:
    records, corpus, stale = _mixed(rare_quality)
    expected = _expected(records, stale)
    assert expected[None]["counts"]["lost"] > 10  # the scenario has real stale-label losses
    assert expected["rare"]["counts"]["scored"] >= 30

    evaluation = _run(records, label_filter=LabelFilter(corpus=corpus))
    groups = {None: evaluation.overall, **{g.key.value: g for g in evaluation.segments}}
    assert set(groups) == {None, *TYPES}
    for key, group in groups.items():
        counts = expected[key]["counts"]
        assert group.read == counts["read"], key
        assert group.labeled == counts["labeled"], key
        assert group.scored == counts["scored"], key
        assert group.skipped == {
            "unlabeled": counts["unlabeled"],
            "no_relevant": counts["no_relevant"],
            "invalid": 0,
        }, key
        # Exactly: read = scored + every skip.
        assert group.read == group.scored + sum(group.skipped.values()), key
        assert group.labels_removed_stale == counts["stale"], key
        assert group.lost_all_relevant == counts["lost"], key
        for metric, spec in (("ndcg@10", NDCG), ("recall@20", RECALL)):
            reference = plain_mean(ref_values(expected[key]["filtered"], metric))
            assert group.means[spec] == pytest.approx(reference, rel=1e-12), (key, metric)

    summary = evaluation.summary
    assert summary.read == len(records) == summary.scored + sum(summary.skipped.values())
    assert summary.labels_removed_stale == expected[None]["counts"]["stale"]
    assert summary.lost_all_relevant == expected[None]["counts"]["lost"]
    # Queries that lost every relevant label are among the no_relevant skips, on top of the 13
    # that never had one.
    assert summary.skipped["no_relevant"] == 13 + summary.lost_all_relevant
    for field in ("read", "labeled", "scored", "labels_removed_stale", "lost_all_relevant"):
        assert sum(getattr(g, field) for g in evaluation.segments) == getattr(
            evaluation.overall, field
        )

    assert evaluation.passed is passes
    failing = [(o.segment, o.gate.metric) for o in evaluation.gates if not o.passed]
    assert failing == ([] if passes else [(RARE, NDCG)])
    assert plain_mean(ref_values(expected[None]["filtered"], "ndcg@10")) >= 0.75
