"""``rankgate.compare``: pairing, labels, the done-when scenario, flags, gates and edge cases."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ab_data import AB_METRICS, ab_traces
from rankgate import (
    InputError,
    Settings,
    Significance,
    UsageError,
    Variant,
    compare,
    parse_metric,
)
from rankgate.gates import GatePolicy, SegmentRule, parse_gate
from rankgate.segments import SegmentKey
from rankgate.stats import bca_interval, derived_seed, paired_t_test

SEGMENTED = Settings(segment_by=("query_type",))


def flags(comparison: Any, kind: str = "regression") -> set[tuple[str, str, str]]:
    return {(c.candidate, c.group, str(c.metric)) for c in comparison.cells if c.flag == kind}


@pytest.fixture(scope="module")
def ab() -> Any:
    baseline, regressed, control = ab_traces()
    return compare(
        Variant("baseline", baseline),
        Variant("regressed", regressed),
        Variant("control", control),
        metrics=AB_METRICS,
        settings=SEGMENTED,
    )


def test_injected_regression_is_flagged_in_exactly_its_segment_and_metric_family(ab: Any) -> None:
    # The overall group contains multi_hop, so its NDCG regresses too; no other segment, and no
    # metric outside the NDCG family, is flagged.
    assert flags(ab) == {
        ("regressed", "overall", "ndcg@5"),
        ("regressed", "overall", "ndcg@10"),
        ("regressed", "query_type=multi_hop", "ndcg@5"),
        ("regressed", "query_type=multi_hop", "ndcg@10"),
    }
    assert flags(ab, "improvement") == set()
    assert not ab.passed
    assert ab.result("control").passed
    assert not ab.result("regressed").passed


@pytest.mark.parametrize("test", ["t", "randomization"])
@pytest.mark.parametrize("correction", ["holm", "bh"])
def test_flags_hold_for_every_test_and_correction(test: str, correction: str) -> None:
    baseline, regressed, control = ab_traces(seed=5)
    comparison = compare(
        Variant("baseline", baseline),
        Variant("regressed", regressed),
        Variant("control", control),
        metrics=AB_METRICS,
        settings=SEGMENTED,
        significance=Significance(test=test, correction=correction),
    )
    segment_flags = {f for f in flags(comparison) if f[1] != "overall"}
    assert segment_flags == {
        ("regressed", "query_type=multi_hop", "ndcg@5"),
        ("regressed", "query_type=multi_hop", "ndcg@10"),
    }
    assert all(metric.startswith("ndcg") for _, _, metric in flags(comparison))
    assert comparison.result("control").passed


def test_cells_use_the_paired_statistics_on_the_right_deltas(ab: Any) -> None:
    baseline, _, _ = ab_traces()
    cell = ab.cell("ndcg@10", "query_type=multi_hop", candidate="regressed")
    result = ab.result("regressed")
    multi_hop = [i for i, r in enumerate(baseline) if r["query_type"] == "multi_hop"]
    spec = parse_metric("ndcg@10")
    before = result.baseline.values[spec][multi_hop]
    after = result.candidate.values[spec][multi_hop]
    deltas = after - before
    assert cell.queries == len(multi_hop) == 90
    assert cell.baseline_mean == pytest.approx(before.mean())
    assert cell.candidate_mean == pytest.approx(after.mean())
    assert cell.delta == pytest.approx(deltas.mean())
    assert cell.p_value == pytest.approx(paired_t_test(deltas))
    seed = derived_seed(0, "query_type=multi_hop", spec, "delta")
    assert cell.interval == pytest.approx(bca_interval(deltas, seed, 1000))
    assert (cell.wins, cell.ties, cell.losses) == (
        int((deltas > 0).sum()),
        int((deltas == 0).sum()),
        int((deltas < 0).sum()),
    )
    assert cell.interval[0] <= cell.delta <= cell.interval[1]


def test_holm_adjusts_across_every_cell_of_the_run(ab: Any) -> None:
    raw = sorted((c.p_value, c.p_adjusted) for c in ab.cells)
    m = len(ab.cells)
    assert m == 2 * 4 * 4  # 2 candidates x (overall + 3 segments) x 4 metrics
    # The smallest p is multiplied by the number of cells.
    assert raw[0][1] == pytest.approx(min(1.0, raw[0][0] * m))


def test_hand_computed_small_comparison() -> None:
    # q1: baseline finds the relevant doc at rank 2 (RR 1/2), candidate at rank 1 (RR 1): +0.5.
    # q2: both at rank 1: tie. q3: baseline rank 1, candidate rank 4 (RR 1/4): -0.75.
    baseline = [
        {"query_id": "q1", "retrieved_ids": ["x", "a"], "relevant_ids": ["a"]},
        {"query_id": "q2", "retrieved_ids": ["b", "y"], "relevant_ids": ["b"]},
        {"query_id": "q3", "retrieved_ids": ["c", "x", "y", "z"], "relevant_ids": ["c"]},
    ]
    candidate = [
        {"query_id": "q1", "retrieved_ids": ["a", "x"]},
        {"query_id": "q2", "retrieved_ids": ["b", "y"]},
        {"query_id": "q3", "retrieved_ids": ["x", "y", "z", "c"]},
    ]
    comparison = compare(baseline, candidate, metrics=["mrr"])
    cell = comparison.cell("mrr")
    assert cell.baseline_mean == pytest.approx((0.5 + 1 + 1) / 3)
    assert cell.candidate_mean == pytest.approx((1 + 1 + 0.25) / 3)
    assert cell.delta == pytest.approx((0.5 + 0 - 0.75) / 3)
    assert cell.relative_delta == pytest.approx(cell.delta / cell.baseline_mean)
    assert (cell.wins, cell.ties, cell.losses) == (1, 1, 1)
    # Deltas (0.5, 0, -0.75): mean -1/12, sd = sqrt(((7/12)^2 + (1/12)^2 + (8/12)^2) / 2).
    sd = math.sqrt(((7 / 12) ** 2 + (1 / 12) ** 2 + (8 / 12) ** 2) / 2)
    assert cell.effect_size == pytest.approx((-1 / 12) / sd)
    assert cell.flag is None and comparison.passed


def test_identical_runs_give_p_one_and_zero_intervals() -> None:
    baseline, _, _ = ab_traces(queries=120)
    comparison = compare(baseline, [dict(r) for r in baseline], metrics=AB_METRICS)
    for cell in comparison.cells:
        assert cell.p_value == 1.0 and cell.p_adjusted == 1.0
        assert cell.interval == (0.0, 0.0)
        assert cell.delta == 0.0 and cell.effect_size == 0.0
        assert cell.flag is None
    assert comparison.passed


def test_one_query_segments_have_finite_numbers_and_are_never_flagged() -> None:
    baseline = [
        {"query_id": "a", "kind": "rare", "retrieved_ids": ["x", "r"], "relevant_ids": ["r"]},
        {"query_id": "b", "kind": "common", "retrieved_ids": ["r", "x"], "relevant_ids": ["r"]},
    ]
    candidate = [
        {"query_id": "a", "retrieved_ids": ["x", "y", "z", "r"]},
        {"query_id": "b", "retrieved_ids": ["r", "x"]},
    ]
    for test in ("t", "randomization"):
        comparison = compare(
            baseline,
            candidate,
            metrics=["mrr", "ndcg@10"],
            settings=Settings(segment_by=("kind",)),
            significance=Significance(test=test),
        )
        for cell in comparison.cells:
            numbers = [cell.p_value, cell.p_adjusted, *cell.interval, cell.delta]
            assert all(math.isfinite(x) for x in numbers)
            if cell.segment is not None:
                assert cell.queries == 1 and cell.status == "insufficient" and cell.flag is None


def test_queries_on_one_side_only_are_counted_and_listed() -> None:
    baseline = [
        {"query_id": f"q{i}", "retrieved_ids": ["a", "b"], "relevant_ids": ["a"]} for i in range(5)
    ]
    candidate = [{"query_id": f"q{i}", "retrieved_ids": ["b", "a"]} for i in (0, 1, 2, 7, 8, 9)]
    comparison = compare(baseline, candidate, metrics=["mrr"])
    pairing = comparison.results[0].pairing
    assert (pairing.paired, pairing.baseline_only, pairing.candidate_only) == (3, 2, 3)
    assert pairing.baseline_only_ids == ("q3", "q4")
    assert pairing.candidate_only_ids == ("q7", "q8", "q9")
    result = comparison.results[0]
    assert result.candidate.summary.read == 3 == result.candidate.summary.scored
    assert comparison.read == {"baseline": 5, "candidate 1": 6}


def test_labels_may_come_from_either_side() -> None:
    baseline = [
        {"query_id": "q1", "retrieved_ids": ["a", "b"]},
        {"query_id": "q2", "retrieved_ids": ["c", "d"], "relevant_ids": ["d"]},
    ]
    candidate = [
        {"query_id": "q1", "retrieved_ids": ["b", "a"], "relevant_ids": ["a"]},
        {"query_id": "q2", "retrieved_ids": ["d", "c"]},
    ]
    comparison = compare(baseline, candidate, metrics=["mrr"])
    cell = comparison.cell("mrr")
    assert cell.queries == 2
    assert cell.baseline_mean == pytest.approx((1 + 0.5) / 2)
    assert cell.candidate_mean == pytest.approx((0.5 + 1) / 2)


def test_conflicting_labels_are_an_input_error_naming_the_query() -> None:
    baseline = [{"query_id": "q9", "retrieved_ids": ["a"], "relevant_ids": ["a"]}]
    candidate = [{"query_id": "q9", "retrieved_ids": ["a"], "relevance_scores": {"a": 2}}]
    with pytest.raises(InputError, match=r"query 'q9' is labeled differently"):
        compare(baseline, candidate, metrics=["mrr"])


def test_equal_labels_in_another_spelling_agree() -> None:
    baseline = [{"query_id": "q1", "retrieved_ids": ["a"], "relevant_ids": ["a"]}]
    candidate = [{"query_id": "q1", "retrieved_ids": ["a"], "relevance_scores": {"a": 1}}]
    assert compare(baseline, candidate, metrics=["mrr"]).cell("mrr").queries == 1


def test_separate_labels_source_jsonl_and_qrels(tmp_path: Path) -> None:
    baseline = [{"query_id": "q1", "retrieved_ids": ["a", "b"]}]
    candidate = [{"query_id": "q1", "retrieved_ids": ["b", "a"]}]
    labels = tmp_path / "labels.jsonl"
    labels.write_text(json.dumps({"query_id": "q1", "relevance_scores": {"b": 2}}) + "\n")
    qrels = tmp_path / "labels.qrels"
    qrels.write_text("q1 0 b 2\nq1 0 a 0\n")
    for source in (str(labels), qrels):
        cell = compare(baseline, candidate, metrics=["mrr"], labels=source).cell("mrr")
        assert (cell.baseline_mean, cell.candidate_mean) == (0.5, 1.0)
    wrong = tmp_path / "wrong.jsonl"
    wrong.write_text(json.dumps({"query_id": "q1", "relevant_ids": ["a"]}) + "\n")
    labeled = [{**baseline[0], "relevant_ids": ["b"]}]
    with pytest.raises(InputError, match="q1"):
        compare(labeled, candidate, metrics=["mrr"], labels=str(wrong))


def test_a_query_twice_on_one_side_is_an_error_or_counted_when_skipping() -> None:
    baseline = [
        {"query_id": "q1", "retrieved_ids": ["a"], "relevant_ids": ["a"]},
        {"query_id": "q1", "retrieved_ids": ["b"], "relevant_ids": ["a"]},
        {"query_id": "q2", "retrieved_ids": ["a"], "relevant_ids": ["a"]},
    ]
    candidate = [{"query_id": q, "retrieved_ids": ["a"]} for q in ("q1", "q2")]
    with pytest.raises(InputError, match="'q1' appears twice in baseline"):
        compare(baseline, candidate, metrics=["mrr"])
    comparison = compare(baseline, candidate, metrics=["mrr"], settings=Settings(on_invalid="skip"))
    assert comparison.invalid["baseline"] == 1
    assert comparison.read["baseline"] == 3
    assert comparison.results[0].pairing.paired == 2


def test_records_without_query_id_cannot_be_paired() -> None:
    baseline = [{"retrieved_ids": ["a"], "relevant_ids": ["a"]}]
    with pytest.raises(InputError, match=r"query_id.*paired"):
        compare(baseline, baseline, metrics=["mrr"])


def test_no_shared_query_is_a_usage_error() -> None:
    baseline = [{"query_id": "a", "retrieved_ids": ["x"], "relevant_ids": ["x"]}]
    candidate = [{"query_id": "b", "retrieved_ids": ["x"]}]
    with pytest.raises(UsageError, match="no query is in both"):
        compare(baseline, candidate)


def test_variant_field_splits_one_source() -> None:
    baseline, regressed, control = ab_traces(queries=300)
    rows = [{**b, "config": "old"} for b in baseline]
    rows += [
        {**r, "query_type": b["query_type"], "config": "new"}
        for b, r in zip(baseline, regressed, strict=True)
    ]
    rows += [{**c, "config": "same"} for c in control]
    comparison = compare(rows, "old", variant_field="config", metrics=AB_METRICS)
    assert comparison.baseline == "old"
    assert [r.name for r in comparison.results] == ["new", "same"]
    assert {f[0] for f in flags(comparison)} == {"new"}
    only_new = compare(rows, "old", "new", variant_field="config", metrics=AB_METRICS)
    assert [r.name for r in only_new.results] == ["new"]
    assert only_new.read == {"old": 300, "new": 300, "config=same (not compared)": 300}
    with pytest.raises(UsageError, match=r"no record has config = 'nope' \(values found: old"):
        compare(rows, "nope", variant_field="config")


def test_records_without_the_variant_field_are_counted_apart() -> None:
    """A record that names no variant (the field absent or null) is in neither side: it is
    invalid, counted under the source, and the sides are those of the other records."""
    baseline, regressed, _ = ab_traces(queries=120)
    rows: list[dict[str, Any]] = [{**b, "config": "old"} for b in baseline]
    rows += [
        {**r, "query_type": b["query_type"], "config": "new"}
        for b, r in zip(baseline, regressed, strict=True)
    ]
    unnamed = [dict(rows[3]), {**rows[130], "config": None}, dict(rows[200])]
    del unnamed[0]["config"], unnamed[2]["config"]
    mixed = rows[:50] + unnamed[:1] + rows[50:150] + unnamed[1:] + rows[150:]
    with pytest.raises(InputError, match=r"config.*missing \(it names the variant\)"):
        compare(mixed, "old", "new", variant_field="config", metrics=AB_METRICS)
    skipped = compare(
        mixed,
        "old",
        "new",
        variant_field="config",
        metrics=AB_METRICS,
        settings=Settings(on_invalid="skip"),
    )
    (apart,) = [name for name in skipped.read if name.endswith("(no config)")]
    assert skipped.read[apart] == 3 and skipped.invalid[apart] == 3
    assert skipped.read["old"] == 120 and skipped.read["new"] == 120
    plain = compare(rows, "old", "new", variant_field="config", metrics=AB_METRICS)
    assert skipped.results[0].per_query() == plain.results[0].per_query()


def test_candidate_gates_are_checked_per_segment() -> None:
    baseline, regressed, _ = ab_traces(queries=300)
    policy = GatePolicy(
        rules=(
            SegmentRule(SegmentKey("query_type", "multi_hop"), gates=(parse_gate("ndcg@10>=0.9"),)),
        )
    )
    comparison = compare(
        baseline,
        regressed,
        metrics=["recall@20"],
        settings=SEGMENTED,
        policy=policy,
    )
    result = comparison.results[0]
    missed = [(str(o.segment), str(o.gate.metric)) for o in result.gate_failures]
    assert missed == [("query_type=multi_hop", "ndcg@10")]
    assert not comparison.passed
    # A gate the baseline misses too still fails the candidate: the threshold is absolute.
    lenient = compare(baseline, regressed, metrics=["recall@20"], gates=["recall@20>=0.99"])
    assert lenient.passed


def test_margin_suppresses_small_significant_deltas() -> None:
    baseline, regressed, _ = ab_traces()
    strict = compare(baseline, regressed, metrics=["ndcg@10"], settings=SEGMENTED)
    assert flags(strict)
    lenient = compare(
        baseline,
        regressed,
        metrics=["ndcg@10"],
        settings=SEGMENTED,
        significance=Significance(margin=0.2),
    )
    assert not flags(lenient) and lenient.passed


def test_improvements_are_flagged_but_do_not_fail() -> None:
    baseline, regressed, _ = ab_traces()
    # Swap the roles: the regressed run as baseline makes the original an improvement.
    comparison = compare(
        [
            {**r, "query_type": b["query_type"], "relevance_scores": b["relevance_scores"]}
            for b, r in zip(baseline, regressed, strict=True)
        ],
        baseline,
        metrics=["ndcg@10"],
        settings=SEGMENTED,
    )
    assert comparison.improvements and not comparison.regressions
    assert comparison.passed


def test_same_seed_same_numbers_other_seed_other_draws() -> None:
    baseline, regressed, _ = ab_traces(queries=200)
    first = compare(
        baseline,
        regressed,
        metrics=["ndcg@10"],
        significance=Significance(test="randomization", permutations=500),
    )
    second = compare(
        baseline,
        regressed,
        metrics=["ndcg@10"],
        significance=Significance(test="randomization", permutations=500),
    )
    other = compare(
        baseline,
        regressed,
        metrics=["ndcg@10"],
        settings=Settings(seed=1),
        significance=Significance(test="randomization", permutations=500),
    )
    assert first.cells == second.cells
    assert first.cells[0].interval != other.cells[0].interval


def test_table_has_one_row_per_cell(ab: Any) -> None:
    table = ab.to_arrow()
    assert table.num_rows == len(ab.cells)
    rows = table.to_pylist()
    regressions = {
        (r["candidate"], r["segment_value"], r["metric"]) for r in rows if r["flag"] == "regression"
    }
    assert ("regressed", "multi_hop", "ndcg@10") in regressions
    assert all(np.isfinite([r["p_adjusted"], r["ci_low"], r["ci_high"]]).all() for r in rows)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"test": "wilcoxon"}, "test must be one of"),
        ({"correction": "bonferroni"}, "correction must be one of"),
        ({"alpha": 1.5}, "alpha"),
        ({"margin": -0.1}, "margin"),
        ({"permutations": 0}, "permutations"),
    ],
)
def test_bad_significance_settings_are_refused(options: dict[str, Any], message: str) -> None:
    from rankgate import ConfigError

    with pytest.raises(ConfigError, match=message):
        Significance(**options)


def test_a_baseline_alone_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="at least one candidate"):
        compare([{"query_id": "a", "retrieved_ids": ["x"]}])


def test_largest_losses_and_per_query_rows() -> None:
    baseline = [
        {"query_id": "q1", "kind": "x", "retrieved_ids": ["a", "b"], "relevant_ids": ["a"]},
        {"query_id": "q2", "kind": "y", "retrieved_ids": ["a", "b"], "relevant_ids": ["a"]},
        {"query_id": "q3", "kind": "y", "retrieved_ids": ["a", "b"], "relevant_ids": ["a"]},
    ]
    candidate = [
        {"query_id": "q1", "retrieved_ids": ["b", "c", "d", "a"]},  # RR 1 -> 1/4
        {"query_id": "q2", "retrieved_ids": ["b", "a"]},  # RR 1 -> 1/2
        {"query_id": "q3", "retrieved_ids": ["a", "b"]},  # unchanged
    ]
    comparison = compare(
        baseline, candidate, metrics=["mrr"], settings=Settings(segment_by=("kind",))
    )
    result = comparison.results[0]
    assert result.largest_losses(comparison.cell("mrr")) == [("q1", -0.75), ("q2", -0.5)]
    assert result.largest_losses(comparison.cell("mrr", "kind=y")) == [("q2", -0.5)]
    rows = result.per_query()
    assert rows[0] == {
        "query_id": "q1",
        "kind": "x",
        "mrr baseline": 1.0,
        "mrr candidate": 0.25,
        "mrr delta": -0.75,
    }
    assert [row["mrr delta"] for row in rows] == [-0.75, -0.5, 0.0]


def test_every_record_is_accounted_for(tmp_path: Path) -> None:
    side_one = tmp_path / "one.jsonl"
    side_one.write_text(
        "\n".join(
            [
                '{"query_id": "a", "retrieved_ids": ["x"], "relevant_ids": ["x"]}',
                '{"query_id": "b", "retrieved_ids": "bad"}',
                '{"query_id": "a", "retrieved_ids": ["y"]}',
                '{"query_id": "c", "retrieved_ids": ["x"]}',
                '{"query_id": "d", "retrieved_ids": ["x"], "relevant_ids": []}',
                "not json",
                '{"query_id": "f", "retrieved_ids": ["x"]}',
            ]
        )
        + "\n"
    )
    side_two = tmp_path / "two.jsonl"
    side_two.write_text(
        "".join(f'{{"query_id": "{q}", "retrieved_ids": ["x"]}}\n' for q in ("a", "c", "d", "e"))
    )
    comparison = compare(
        str(side_one), str(side_two), metrics=["mrr"], settings=Settings(on_invalid="skip")
    )
    result = comparison.results[0]
    pairing = result.pairing
    one, two = str(side_one), str(side_two)
    assert comparison.read == {one: 7, two: 4}
    assert comparison.invalid == {one: 3, two: 0}
    # Every record read is invalid, paired, or on one side only...
    assert comparison.read[one] == comparison.invalid[one] + pairing.paired + pairing.baseline_only
    assert comparison.read[two] == comparison.invalid[two] + pairing.paired + pairing.candidate_only
    # ...and every paired query is scored or skipped under a reason.
    summary = result.candidate.summary
    assert pairing.paired == summary.read == summary.scored + sum(summary.skipped.values())
    assert (summary.scored, summary.skipped["unlabeled"], summary.skipped["no_relevant"]) == (
        1,
        1,
        1,
    )


def test_a_candidate_in_another_order_gives_the_same_cells() -> None:
    baseline, regressed, _ = ab_traces(seed=3)
    in_order = compare(baseline, regressed, metrics=AB_METRICS, settings=SEGMENTED)
    shuffled = list(reversed(regressed[: len(regressed) // 2])) + regressed[len(regressed) // 2 :]
    reordered = compare(baseline, shuffled, metrics=AB_METRICS, settings=SEGMENTED)
    assert [c.statistics() for c in reordered.cells] == [c.statistics() for c in in_order.cells]
    assert [c.interval for c in reordered.cells] == [c.interval for c in in_order.cells]
    first, second = in_order.results[0], reordered.results[0]
    assert list(second.candidate.query_ids) == list(first.candidate.query_ids)
    for spec in first.candidate.metrics:
        assert np.array_equal(second.candidate.values[spec], first.candidate.values[spec])


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


@pytest.mark.parametrize("pairing", ["paired", "unpaired"])
def test_sides_read_again_while_scored_give_the_same_comparison(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pairing: str
) -> None:
    # Past HELD_RANKING_BYTES a side lets its rankings go and reads them again from the file
    # while it is scored; a budget of 0 makes every file side do so.
    import rankgate.compare_read

    baseline, regressed, _ = ab_traces(seed=4)
    # A number as a segment value sends its record to the validator on the first pass: such
    # rows keep their ranking in memory, the others are read again.
    baseline[3] = {**baseline[3], "query_type": 2.5}
    # Unpaired, each side is segmented by its own attributes: the candidate needs them too.
    kinds = {row["query_id"]: row["query_type"] for row in baseline}
    regressed = [{**row, "query_type": kinds[row["query_id"]]} for row in regressed]
    shuffled = list(reversed(regressed[:50])) + regressed[50:]
    baseline = [*baseline, {**baseline[0], "query_id": "caf\u00e9 \\u00e9"}]
    base = _write_jsonl(tmp_path / "base.jsonl", baseline)
    cand = _write_jsonl(tmp_path / "cand.jsonl", shuffled)
    options: dict[str, Any] = {"metrics": AB_METRICS, "settings": SEGMENTED, "pairing": pairing}
    held = compare(str(base), str(cand), **options)
    monkeypatch.setattr(rankgate.compare_read, "HELD_RANKING_BYTES", 0)
    kept: list[int] = []
    original = rankgate.compare_read.streamed_side

    def counted(*arguments: Any) -> Any:
        source = original(*arguments)
        kept.append(len(source.held))
        return source

    monkeypatch.setattr(sys.modules["rankgate.compare"], "streamed_side", counted)
    streamed = compare(str(base), str(cand), **options)
    assert kept == [1, 1]  # both sides streamed; each kept its validator-read row
    assert [c.statistics() for c in streamed.cells] == [c.statistics() for c in held.cells]
    assert [c.interval for c in streamed.cells] == [c.interval for c in held.cells]
    assert streamed.read == held.read and streamed.results[0].pairing == held.results[0].pairing
    for before, after in zip(held.results, streamed.results, strict=True):
        assert before.candidate.summary == after.candidate.summary
        assert before.baseline.summary == after.baseline.summary
        # Per-query attributes are read back on demand, from the source a second time.
        assert after.baseline.to_arrow().equals(before.baseline.to_arrow())
