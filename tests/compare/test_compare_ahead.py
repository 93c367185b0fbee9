"""Sides scored while they are read (``compare_ahead``) give the comparison a second read gives.

Past ``HELD_RANKING_BYTES`` a side lets its rankings go. Its valid rows are then scored as they
are read, and the comparison uses that evaluation only where it is the one the second read would
give; elsewhere it reads the side again. Each case here compares the result with rankings held
(a budget no side reaches) against a budget of 0, and checks which path was taken, so that a
change that silently stops using (or wrongly uses) the early evaluation fails.
"""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from ab_data import AB_METRICS, ab_traces
from rankgate import InputError, Settings, compare
from rankgate.gates import GatePolicy, parse_gate

SEGMENTED = Settings(segment_by=("query_type",))
# Gates decided on an interval bound: the sides' intervals are resampled in query order.
ON_BOUNDS: dict[str, Any] = {
    "metrics": AB_METRICS,
    "settings": SEGMENTED,
    "policy": GatePolicy(gate_on="lower_bound"),
    "gates": [parse_gate("ndcg@10>=0.3")],
}


def _write(path: Path, rows: list[dict[str, Any]]) -> str:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def _used(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, bool]]:
    """(side name, whether its early evaluation was used), per lookup."""
    scorer = sys.modules["rankgate.compare"]._Scorer
    original = scorer.ahead_for
    seen: list[tuple[str, bool]] = []

    def recorded(self: Any, side: Any, rows: Any, attributes_from: Any) -> Any:
        found = original(self, side, rows, attributes_from)
        seen.append((Path(side.name).name, found is not None))
        return found

    monkeypatch.setattr(scorer, "ahead_for", recorded)
    return seen


def _both_ways(
    monkeypatch: pytest.MonkeyPatch, *sides: str, **options: Any
) -> tuple[Any, Any, list[tuple[str, bool]]]:
    """The comparison read twice (every side streamed, nothing used from the early scoring), and
    as it runs (every side streamed), with which sides' early evaluations it used. A third, with
    rankings held, must equal the first where the side's order does not matter (checked here
    where no gate is decided on an interval bound, which is resampled in query order)."""
    import rankgate.compare_read

    held = compare(*sides, **options)
    monkeypatch.setattr(rankgate.compare_read, "HELD_RANKING_BYTES", 0)
    scorer = sys.modules["rankgate.compare"]._Scorer
    with monkeypatch.context() as patched:
        patched.setattr(scorer, "ahead_for", lambda *arguments: None)
        read_twice = compare(*sides, **options)
    seen = _used(monkeypatch)
    streamed = compare(*sides, **options)
    policy = options.get("policy")
    if policy is None or policy.gate_on == "mean":
        _assert_same(held, read_twice)
    return read_twice, streamed, seen


def _assert_same(held: Any, streamed: Any) -> None:
    assert [c.statistics() for c in streamed.cells] == [c.statistics() for c in held.cells]
    assert [c.interval for c in streamed.cells] == [c.interval for c in held.cells]
    assert [c.flag for c in streamed.cells] == [c.flag for c in held.cells]
    assert streamed.read == held.read and streamed.invalid == held.invalid
    for before, after in zip(held.results, streamed.results, strict=True):
        assert after.pairing == before.pairing
        assert after.candidate.summary == before.candidate.summary
        assert after.baseline.summary == before.baseline.summary
        assert after.candidate.gates == before.candidate.gates
        assert after.baseline.warnings == before.baseline.warnings
        assert after.candidate.warnings == before.candidate.warnings
        # Values, query IDs and the attributes read back from the source, per query.
        assert after.baseline.to_arrow().equals(before.baseline.to_arrow())
        assert after.candidate.to_arrow().equals(before.candidate.to_arrow())
        assert after.per_query() == before.per_query()
    assert streamed.to_json(per_query=True) == held.to_json(per_query=True)


def _graded(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows whose labels are spelled both ways: relevant IDs and grades."""
    out = []
    for row in rows:
        grades = row.get("relevance_scores")
        if grades:
            row = {**row, "relevant_ids": sorted(d for d, g in grades.items() if g >= 2)}
        out.append(row)
    return out


@pytest.mark.parametrize("spelled", ["grades", "both"])
def test_both_sides_scored_while_read_give_the_second_reads_comparison(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spelled: str
) -> None:
    baseline, regressed, _ = ab_traces(seed=5)
    if spelled == "both":
        baseline = _graded(baseline)
    # The candidate lists the queries in another order and carries no labels (the baseline's
    # are its): scored in its order with the baseline's attributes, then put in the baseline's.
    shuffled = list(reversed(regressed[:80])) + regressed[80:]
    base = _write(tmp_path / "base.jsonl", baseline)
    cand = _write(tmp_path / "cand.jsonl", shuffled)
    options: dict[str, Any] = {
        "metrics": AB_METRICS,
        "settings": SEGMENTED,
        "gates": [parse_gate("ndcg@10>=0.3")],
    }
    held, streamed, seen = _both_ways(monkeypatch, base, cand, **options)
    assert seen == [("base.jsonl", True), ("cand.jsonl", True)]
    _assert_same(held, streamed)
    assert any(cell.flag == "regression" for cell in streamed.cells)


def test_candidates_labels_in_agreement_and_in_order_are_used_as_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    baseline, regressed, control = ab_traces(seed=6)
    labels = {row["query_id"]: row["relevance_scores"] for row in baseline}
    # One candidate carries the baseline's grades itself, the other none (it takes them).
    labeled = [{**row, "relevance_scores": labels[row["query_id"]]} for row in control]
    base = _write(tmp_path / "base.jsonl", baseline)
    one = _write(tmp_path / "one.jsonl", labeled)
    two = _write(tmp_path / "two.jsonl", regressed)
    held, streamed, seen = _both_ways(
        monkeypatch, base, one, two, metrics=AB_METRICS, settings=SEGMENTED
    )
    assert seen == [
        ("base.jsonl", True),
        ("one.jsonl", True),
        ("base.jsonl", True),
        ("two.jsonl", True),
    ]
    _assert_same(held, streamed)


def test_a_candidate_labeling_a_query_no_one_labeled_sends_both_sides_to_a_second_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    baseline, regressed, _ = ab_traces(seed=7)
    # The baseline leaves q3 unlabeled and the candidate labels it: the baseline, scored
    # before the candidate was read, scored q3 without labels.
    baseline[3] = {k: v for k, v in baseline[3].items() if k != "relevance_scores"}
    ranking = regressed[3]["retrieved_ids"]
    regressed[3] = {**regressed[3], "relevance_scores": {ranking[0]: 2}}
    base = _write(tmp_path / "base.jsonl", baseline)
    cand = _write(tmp_path / "cand.jsonl", regressed)
    held, streamed, seen = _both_ways(
        monkeypatch, base, cand, metrics=AB_METRICS, settings=SEGMENTED
    )
    assert not any(used for _, used in seen)
    _assert_same(held, streamed)
    assert "q3" in streamed.results[0].baseline.query_ids


def test_a_repeated_candidate_query_and_unpaired_queries_fall_back_where_they_must(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    baseline, regressed, _ = ab_traces(seed=8)
    # The candidate lacks the baseline's last 50 queries (the baseline's early evaluation holds
    # them: it is not the paired one) and repeats one (its later row is invalid).
    cand_rows = [*regressed[:-50], {**regressed[10], "retrieved_ids": ["x", "y"]}]
    base = _write(tmp_path / "base.jsonl", baseline)
    cand = _write(tmp_path / "cand.jsonl", cand_rows)
    options: dict[str, Any] = {"metrics": AB_METRICS, "settings": SEGMENTED}
    held, streamed, seen = _both_ways(
        monkeypatch,
        base,
        cand,
        settings=Settings(segment_by=("query_type",), on_invalid="skip"),
        metrics=AB_METRICS,
    )
    assert seen == [("base.jsonl", False), ("cand.jsonl", False)]
    _assert_same(held, streamed)
    # Without the repeat, the candidate's rows are the paired ones: only the baseline reads again.
    cand = _write(tmp_path / "cand2.jsonl", regressed[:-50])
    held, streamed, seen = _both_ways(monkeypatch, base, cand, **options)
    assert seen[-2:] == [("base.jsonl", False), ("cand2.jsonl", True)]
    _assert_same(held, streamed)


def test_unpaired_design_uses_the_baselines_whole_evaluation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    baseline, regressed, _ = ab_traces(seed=9)
    kinds = {row["query_id"]: row["query_type"] for row in baseline}
    labels = {row["query_id"]: row["relevance_scores"] for row in baseline}
    # Traffic split: the candidate served other queries, with their own labels.
    other = [
        {
            **row,
            "query_id": "other-" + row["query_id"],
            "query_type": kinds[row["query_id"]],
            "relevance_scores": labels[row["query_id"]],
        }
        for row in regressed
    ]
    base = _write(tmp_path / "base.jsonl", baseline[:300])
    cand = _write(tmp_path / "cand.jsonl", other[300:])
    held, streamed, seen = _both_ways(
        monkeypatch, base, cand, metrics=AB_METRICS, settings=SEGMENTED, pairing="unpaired"
    )
    # The candidate's new labels grow the book: nothing early is used then.
    assert not any(used for _, used in seen)
    _assert_same(held, streamed)
    # A candidate without labels of its own: the baseline's whole evaluation is used (the
    # candidate's early one is of its paired rows, not of all of them).
    typed = [{**row, "query_type": kinds[row["query_id"]]} for row in regressed[:200]]
    cand = _write(tmp_path / "cand2.jsonl", typed)
    held, streamed, seen = _both_ways(
        monkeypatch, base, cand, metrics=AB_METRICS, settings=SEGMENTED, pairing="unpaired"
    )
    assert seen == [("base.jsonl", True)]
    _assert_same(held, streamed)


def test_gates_on_interval_bounds_keep_the_baselines_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    baseline, regressed, _ = ab_traces(seed=10)
    shuffled = list(reversed(regressed))
    base = _write(tmp_path / "base.jsonl", baseline)
    cand = _write(tmp_path / "cand.jsonl", shuffled)
    policy = GatePolicy(gate_on="lower_bound")
    held, streamed, seen = _both_ways(
        monkeypatch,
        base,
        cand,
        metrics=AB_METRICS,
        settings=SEGMENTED,
        policy=policy,
        gates=[parse_gate("ndcg@10>=0.3")],
    )
    _assert_same(held, streamed)
    assert ("base.jsonl", True) in seen


def test_a_candidate_that_fails_while_read_leaves_no_scoring_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import rankgate.compare_read

    baseline, regressed, _ = ab_traces(seed=12)
    base = _write(tmp_path / "base.jsonl", baseline)
    cand = tmp_path / "cand.jsonl"
    lines = [json.dumps(row) for row in regressed]
    lines[400] = '{"query_id": "q400", "retrieved_ids": [1, 2'  # cut short
    cand.write_text("\n".join(lines) + "\n")
    monkeypatch.setattr(rankgate.compare_read, "HELD_RANKING_BYTES", 0)
    with pytest.raises(InputError) as raised:
        compare(base, str(cand), metrics=AB_METRICS, settings=SEGMENTED)
    assert "cand.jsonl" in str(raised.value) and "401" in str(raised.value)
    left = [t.name for t in threading.enumerate() if t.name.startswith("rankgate-ahead")]
    assert left == []


def test_a_candidate_whose_labels_disagree_is_refused_as_when_read_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import rankgate.compare_read

    baseline, _, control = ab_traces(seed=13)
    labels = {row["query_id"]: row["relevance_scores"] for row in baseline}
    labeled = [{**row, "relevance_scores": labels[row["query_id"]]} for row in control]
    first = next(iter(labeled[250]["relevance_scores"]))
    labeled[250] = {**labeled[250], "relevance_scores": {first: 0}}
    base = _write(tmp_path / "base.jsonl", baseline)
    cand = _write(tmp_path / "cand.jsonl", labeled)
    with pytest.raises(InputError) as held:
        compare(base, cand, metrics=AB_METRICS, settings=SEGMENTED)
    monkeypatch.setattr(rankgate.compare_read, "HELD_RANKING_BYTES", 0)
    with pytest.raises(InputError) as streamed:
        compare(base, cand, metrics=AB_METRICS, settings=SEGMENTED)
    assert str(streamed.value) == str(held.value)
    assert "q250" in str(streamed.value) and "labeled differently" in str(streamed.value)
    left = [t.name for t in threading.enumerate() if t.name.startswith("rankgate-ahead")]
    assert left == []


def test_a_held_candidate_beside_a_baseline_scored_while_read_keeps_the_baselines_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Gates on an interval bound resample in query order: a candidate that holds its rankings
    # is scored in the baseline's order, whether or not the baseline was scored while read.
    import rankgate.compare_read

    baseline, regressed, _ = ab_traces(seed=10)
    padding = [f"pad{i}" for i in range(200)]
    long = [{**row, "retrieved_ids": row["retrieved_ids"] + padding} for row in baseline]
    base = _write(tmp_path / "base.jsonl", long)
    cand = _write(tmp_path / "cand.jsonl", list(reversed(regressed)))
    options = ON_BOUNDS
    held = compare(base, cand, **options)
    # A budget between the two sides' rankings: the baseline streams, the candidate is held.
    sizes = [Path(path).stat().st_size for path in (base, cand)]
    monkeypatch.setattr(rankgate.compare_read, "HELD_RANKING_BYTES", sum(sizes) // 4)
    seen = _used(monkeypatch)
    mixed = compare(base, cand, **options)
    assert seen == [("base.jsonl", True), ("cand.jsonl", False)]
    _assert_same(held, mixed)


def test_a_held_candidate_with_every_query_in_another_order_is_put_in_the_baselines(
    tmp_path: Path,
) -> None:
    # Every baseline query, listed backwards: taking the candidate's rows in the baseline's order
    # once returned the candidate unchanged (as many rows as the table), so its values were
    # segmented by other queries' attributes and the injected regression went unflagged.
    baseline, regressed, _ = ab_traces(seed=10)
    base = _write(tmp_path / "base.jsonl", baseline)
    backwards = _write(tmp_path / "backwards.jsonl", list(reversed(regressed)))
    in_order = _write(tmp_path / "in_order.jsonl", regressed)
    options = ON_BOUNDS
    expected = compare(base, in_order, **options)
    found = compare(base, backwards, **options)
    assert [c.statistics() for c in found.cells] == [c.statistics() for c in expected.cells]
    assert ("query_type", "multi_hop", "ndcg@10") in {
        (c.segment.field, c.segment.value, str(c.metric))
        for c in found.cells
        if c.flag == "regression" and c.segment is not None
    }


def test_an_interrupt_while_the_scoring_thread_is_behind_leaves_no_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Ctrl-C while the reader waits to hand over the end of a side: the scoring thread must
    # still end (it once waited for ever, and the process could not exit).
    import rankgate.compare_read

    ahead_module = sys.modules["rankgate.compare_ahead"]
    baseline, regressed, _ = ab_traces(seed=5)
    base = _write(tmp_path / "base.jsonl", baseline)
    cand = _write(tmp_path / "cand.jsonl", regressed)
    monkeypatch.setattr(rankgate.compare_read, "HELD_RANKING_BYTES", 0)
    original = ahead_module.ScoredAhead._put

    def interrupted(self: Any, item: Any) -> None:
        if item is ahead_module._END:
            raise KeyboardInterrupt
        original(self, item)

    monkeypatch.setattr(ahead_module.ScoredAhead, "_put", interrupted)
    with pytest.raises(KeyboardInterrupt):
        compare(base, cand, metrics=AB_METRICS, settings=SEGMENTED)
    left = [t.name for t in threading.enumerate() if t.name.startswith("rankgate-ahead")]
    assert left == []
