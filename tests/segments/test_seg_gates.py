"""Gates per segment, per-segment overrides, min_queries and strict_segments, and the config-file form
(issue 4, parts 2 and 3).

The datasets here are built from ``ranked``: one relevant document at a known rank, so every value
is known by hand: ndcg@10 = 1/log2(rank+1) (rank 1 -> 1, rank 3 -> 0.5), mrr = 1/rank.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from seg_reference import ranked, unlabeled

import rankgate
from rankgate import ConfigError, parse_gate, parse_metric
from rankgate.config import load_config
from rankgate.gates import GateOutcome, GatePolicy, SegmentRule
from rankgate.segments import SegmentKey

NDCG = parse_metric("ndcg@10")
MRR = parse_metric("mrr")
RECALL = parse_metric("recall@20")
QT = "query_type"
SETTINGS = rankgate.Settings(segment_by=(QT,), resamples=100)


def _dataset(
    factual: int = 40, multi_hop: int = 40, multi_hop_rank: int = 3
) -> list[dict[str, Any]]:
    """factual: relevant at rank 1 (ndcg 1); multi_hop: at ``multi_hop_rank`` (rank 3: ndcg 0.5)."""
    records = [ranked(f"f{i}", 1, query_type="factual") for i in range(factual)]
    records += [ranked(f"m{i}", multi_hop_rank, query_type="multi_hop") for i in range(multi_hop)]
    return records


def _by_segment(
    evaluation: rankgate.Evaluation,
) -> dict[tuple[SegmentKey | None, str], GateOutcome]:
    table: dict[tuple[SegmentKey | None, str], GateOutcome] = {}
    for outcome in evaluation.gates:
        key = (outcome.segment, str(outcome.gate))
        assert key not in table, f"two outcomes for {key}"
        table[key] = outcome
    return table


FACTUAL = SegmentKey(QT, "factual")
MULTI_HOP = SegmentKey(QT, "multi_hop")


def test_default_gates_apply_overall_and_to_every_segment() -> None:
    # overall ndcg = (40*1 + 40*0.5)/80 = 0.75; factual 1.0; multi_hop 0.5.
    evaluation = rankgate.evaluate(
        _dataset(), ["ndcg@10", "mrr"], ["ndcg@10>=0.7", "mrr>=0.6"], settings=SETTINGS
    )
    outcomes = _by_segment(evaluation)
    assert set(outcomes) == {
        (segment, gate)
        for segment in (None, FACTUAL, MULTI_HOP)
        for gate in ("ndcg@10>=0.7", "mrr>=0.6")
    }
    expected_values = {
        (None, "ndcg@10>=0.7"): 0.75,
        (FACTUAL, "ndcg@10>=0.7"): 1.0,
        (MULTI_HOP, "ndcg@10>=0.7"): 0.5,
        (None, "mrr>=0.6"): (1 + 1 / 3) / 2,
        (FACTUAL, "mrr>=0.6"): 1.0,
        (MULTI_HOP, "mrr>=0.6"): 1 / 3,
    }
    for key, value in expected_values.items():
        outcome = outcomes[key]
        assert outcome.value == pytest.approx(value), key
        assert outcome.status == ("pass" if value >= outcome.gate.threshold else "fail"), key
        assert outcome.passed is (outcome.status == "pass"), key
        assert outcome.margin == pytest.approx(value - outcome.gate.threshold), key
        assert outcome.statistic == "mean"
        assert outcome.mean == pytest.approx(value)
        assert outcome.scored == (80 if key[0] is None else 40)
    assert evaluation.passed is False


def test_outcome_carries_its_groups_mean_interval_and_scored() -> None:
    evaluation = rankgate.evaluate(_dataset(), ["ndcg@10"], ["ndcg@10>=0.7"], settings=SETTINGS)
    groups = {None: evaluation.overall, **{g.key: g for g in evaluation.segments}}
    assert len(evaluation.gates) == 3
    for outcome in evaluation.gates:
        group = groups[outcome.segment]
        assert outcome.mean == group.means[NDCG]
        assert outcome.interval == group.intervals[NDCG]
        assert outcome.scored == group.scored


def test_any_failing_segment_fails_the_run_and_is_named() -> None:
    evaluation = rankgate.evaluate(_dataset(), ["ndcg@10"], ["ndcg@10>=0.7"], settings=SETTINGS)
    failing = [o for o in evaluation.gates if not o.passed]
    assert [(o.segment, o.gate.metric, o.status) for o in failing] == [(MULTI_HOP, NDCG, "fail")]
    assert failing[0].margin == pytest.approx(0.5 - 0.7)
    assert evaluation.passed is False
    # Overall on its own passes: only the segment sinks the run.
    overall = _by_segment(evaluation)[(None, "ndcg@10>=0.7")]
    assert (overall.passed, overall.status) == (True, "pass")


def test_segment_rule_overrides_the_default_gate_for_that_segment_only() -> None:
    rule = SegmentRule(key=MULTI_HOP, gates=(parse_gate("ndcg@10>=0.45"),))
    evaluation = rankgate.evaluate(
        _dataset(),
        ["ndcg@10"],
        ["ndcg@10>=0.7"],
        settings=SETTINGS,
        policy=GatePolicy(rules=(rule,)),
    )
    outcomes = _by_segment(evaluation)
    # Replaced, not added: multi_hop has exactly one ndcg@10 >= gate, the overridden one.
    assert set(outcomes) == {
        (None, "ndcg@10>=0.7"),
        (FACTUAL, "ndcg@10>=0.7"),
        (MULTI_HOP, "ndcg@10>=0.45"),
    }
    assert outcomes[(MULTI_HOP, "ndcg@10>=0.45")].gate.threshold == 0.45
    assert outcomes[(MULTI_HOP, "ndcg@10>=0.45")].status == "pass"
    assert evaluation.passed is True


def test_override_does_not_loosen_other_segments() -> None:
    # factual regresses to rank 3 (0.5); the override for multi_hop must not apply to it.
    records = [ranked(f"f{i}", 3, query_type="factual") for i in range(40)]
    records += [ranked(f"m{i}", 1, query_type="multi_hop") for i in range(40)]
    rule = SegmentRule(key=MULTI_HOP, gates=(parse_gate("ndcg@10>=0.3"),))
    evaluation = rankgate.evaluate(
        records, ["ndcg@10"], ["ndcg@10>=0.7"], settings=SETTINGS, policy=GatePolicy(rules=(rule,))
    )
    outcomes = _by_segment(evaluation)
    assert outcomes[(FACTUAL, "ndcg@10>=0.7")].status == "fail"
    assert outcomes[(MULTI_HOP, "ndcg@10>=0.3")].status == "pass"
    assert evaluation.passed is False


def test_rule_gate_with_another_operator_or_metric_is_added() -> None:
    rule = SegmentRule(key=MULTI_HOP, gates=(parse_gate("ndcg@10>0.6"), parse_gate("mrr>=0.5")))
    evaluation = rankgate.evaluate(
        _dataset(),
        ["ndcg@10", "mrr"],
        ["ndcg@10>=0.4"],
        settings=SETTINGS,
        policy=GatePolicy(rules=(rule,)),
    )
    outcomes = _by_segment(evaluation)
    multi_hop = {gate for segment, gate in outcomes if segment == MULTI_HOP}
    assert multi_hop == {"ndcg@10>=0.4", "ndcg@10>0.6", "mrr>=0.5"}
    assert outcomes[(MULTI_HOP, "ndcg@10>=0.4")].passed is True
    assert outcomes[(MULTI_HOP, "ndcg@10>0.6")].passed is False  # 0.5 > 0.6 is false
    assert outcomes[(MULTI_HOP, "mrr>=0.5")].value == pytest.approx(1 / 3)
    assert outcomes[(MULTI_HOP, "mrr>=0.5")].passed is False
    # The added gates are the segment's own: overall and factual have only the default.
    assert {gate for segment, gate in outcomes if segment != MULTI_HOP} == {"ndcg@10>=0.4"}
    assert evaluation.passed is False


def test_rule_gate_on_a_metric_not_otherwise_requested_is_computed() -> None:
    # recall@20 for multi_hop: the relevant doc is at rank 3 of 10 -> 1.0 for every query.
    rule = SegmentRule(key=MULTI_HOP, gates=(parse_gate("recall@20>=0.9"),))
    evaluation = rankgate.evaluate(
        _dataset(),
        ["ndcg@10"],
        ["ndcg@10>=0.4"],
        settings=SETTINGS,
        policy=GatePolicy(rules=(rule,)),
    )
    outcome = _by_segment(evaluation)[(MULTI_HOP, "recall@20>=0.9")]
    assert outcome.value == pytest.approx(1.0)
    assert outcome.status == "pass"
    assert evaluation.passed is True


def test_rule_for_a_segment_value_absent_from_the_data_changes_nothing() -> None:
    rule = SegmentRule(key=SegmentKey(QT, "rare"), gates=(parse_gate("ndcg@10>=0.99"),))
    evaluation = rankgate.evaluate(
        _dataset(),
        ["ndcg@10"],
        ["ndcg@10>=0.4"],
        settings=SETTINGS,
        policy=GatePolicy(rules=(rule,)),
    )
    assert {o.segment for o in evaluation.gates} == {None, FACTUAL, MULTI_HOP}
    assert evaluation.passed is True


# --- min_queries and strict_segments -------------------------------------------------------------


def _small_regressed(n_small: int) -> list[dict[str, Any]]:
    """factual: 40 at rank 1; rare: ``n_small`` at rank 3 (ndcg 0.5, misses 0.7)."""
    records = [ranked(f"f{i}", 1, query_type="factual") for i in range(40)]
    records += [ranked(f"r{i}", 3, query_type="rare") for i in range(n_small)]
    return records


RARE = SegmentKey(QT, "rare")


def test_default_min_queries_is_30_and_small_segment_is_insufficient_not_failing() -> None:
    assert GatePolicy().min_queries == 30
    # 29 scored: overall = (40 + 29*0.5)/69 = 0.7899 passes; rare misses but is insufficient.
    evaluation = rankgate.evaluate(
        _small_regressed(29), ["ndcg@10"], ["ndcg@10>=0.7"], settings=SETTINGS
    )
    outcome = _by_segment(evaluation)[(RARE, "ndcg@10>=0.7")]
    assert outcome.status == "insufficient"
    assert outcome.passed is True
    assert outcome.scored == 29
    assert outcome.value == pytest.approx(0.5)  # still reported
    assert evaluation.passed is True


def test_thirty_scored_queries_are_enough() -> None:
    evaluation = rankgate.evaluate(
        _small_regressed(30), ["ndcg@10"], ["ndcg@10>=0.7"], settings=SETTINGS
    )
    outcome = _by_segment(evaluation)[(RARE, "ndcg@10>=0.7")]
    assert (outcome.status, outcome.passed) == ("fail", False)
    assert evaluation.passed is False


def test_min_queries_counts_scored_queries_not_records_read() -> None:
    # rare: 35 records read, but 6 are unlabeled: 29 scored -> insufficient.
    records = _small_regressed(29) + [unlabeled(f"u{i}", query_type="rare") for i in range(6)]
    evaluation = rankgate.evaluate(records, ["ndcg@10"], ["ndcg@10>=0.7"], settings=SETTINGS)
    assert evaluation.segment(QT, "rare").read == 35
    outcome = _by_segment(evaluation)[(RARE, "ndcg@10>=0.7")]
    assert outcome.status == "insufficient"
    assert evaluation.passed is True


def test_insufficient_applies_whether_the_gate_would_pass_or_fail() -> None:
    records = [ranked(f"f{i}", 1, query_type="factual") for i in range(40)]
    records += [ranked(f"r{i}", 1, query_type="rare") for i in range(5)]
    evaluation = rankgate.evaluate(records, ["ndcg@10"], ["ndcg@10>=0.7"], settings=SETTINGS)
    outcome = _by_segment(evaluation)[(RARE, "ndcg@10>=0.7")]
    assert (outcome.status, outcome.passed) == ("insufficient", True)


def test_policy_min_queries_lowers_the_bar_for_every_segment() -> None:
    evaluation = rankgate.evaluate(
        _small_regressed(12),
        ["ndcg@10"],
        ["ndcg@10>=0.7"],
        settings=SETTINGS,
        policy=GatePolicy(min_queries=12),
    )
    outcomes = _by_segment(evaluation)
    assert outcomes[(RARE, "ndcg@10>=0.7")].status == "fail"
    assert outcomes[(FACTUAL, "ndcg@10>=0.7")].status == "pass"
    assert evaluation.passed is False
    evaluation = rankgate.evaluate(
        _small_regressed(12),
        ["ndcg@10"],
        ["ndcg@10>=0.7"],
        settings=SETTINGS,
        policy=GatePolicy(min_queries=13),
    )
    assert _by_segment(evaluation)[(RARE, "ndcg@10>=0.7")].status == "insufficient"
    assert evaluation.passed is True


def test_policy_min_queries_can_make_a_big_segment_insufficient() -> None:
    evaluation = rankgate.evaluate(
        _small_regressed(20),
        ["ndcg@10"],
        ["ndcg@10>=0.7"],
        settings=SETTINGS,
        policy=GatePolicy(min_queries=50),
    )
    outcomes = _by_segment(evaluation)
    assert outcomes[(FACTUAL, "ndcg@10>=0.7")].status == "insufficient"  # 40 < 50
    assert outcomes[(RARE, "ndcg@10>=0.7")].status == "insufficient"
    assert outcomes[(None, "ndcg@10>=0.7")].status == "pass"


def test_segment_rule_min_queries_applies_to_that_segment_only() -> None:
    records = _small_regressed(10) + [ranked(f"m{i}", 3, query_type="multi_hop") for i in range(10)]
    policy = GatePolicy(rules=(SegmentRule(key=RARE, min_queries=10),))
    evaluation = rankgate.evaluate(
        records, ["ndcg@10"], ["ndcg@10>=0.7"], settings=SETTINGS, policy=policy
    )
    outcomes = _by_segment(evaluation)
    assert outcomes[(RARE, "ndcg@10>=0.7")].status == "fail"
    assert outcomes[(MULTI_HOP, "ndcg@10>=0.7")].status == "insufficient"  # default 30 still
    assert evaluation.passed is False


def test_strict_segments_turns_insufficient_into_a_failure() -> None:
    evaluation = rankgate.evaluate(
        _small_regressed(29),
        ["ndcg@10"],
        ["ndcg@10>=0.7"],
        settings=SETTINGS,
        policy=GatePolicy(strict_segments=True),
    )
    outcome = _by_segment(evaluation)[(RARE, "ndcg@10>=0.7")]
    assert outcome.status == "insufficient"
    assert outcome.passed is False
    assert evaluation.passed is False
    # Even a segment whose mean would pass fails when it is too small under strict_segments.
    records = [ranked(f"f{i}", 1, query_type="factual") for i in range(40)]
    records += [ranked(f"r{i}", 1, query_type="rare") for i in range(5)]
    evaluation = rankgate.evaluate(
        records,
        ["ndcg@10"],
        ["ndcg@10>=0.7"],
        settings=SETTINGS,
        policy=GatePolicy(strict_segments=True),
    )
    assert evaluation.passed is False
    assert _by_segment(evaluation)[(FACTUAL, "ndcg@10>=0.7")].status == "pass"


def test_segment_with_no_scored_query_is_insufficient_not_failing() -> None:
    records = [ranked(f"f{i}", 1, query_type="factual") for i in range(40)]
    records += [unlabeled(f"u{i}", query_type="rare") for i in range(3)]
    evaluation = rankgate.evaluate(records, ["ndcg@10"], ["ndcg@10>=0.7"], settings=SETTINGS)
    assert evaluation.segment(QT, "rare").scored == 0
    outcome = _by_segment(evaluation)[(RARE, "ndcg@10>=0.7")]
    assert outcome.status == "insufficient"
    assert evaluation.passed is True


@pytest.mark.parametrize(
    "kwargs",
    [
        {"min_queries": 0},
        {"min_queries": True},
        {"min_queries": 2.5},
        {"gate_on": "median"},
        {"min_coverage": 1.5},
        {"min_coverage": -0.1},
    ],
)
def test_bad_policy_values_are_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        GatePolicy(**kwargs)
    with pytest.raises(ConfigError):
        GatePolicy(rules=(SegmentRule(key=RARE, **kwargs),))


# --- config file ---------------------------------------------------------------------------------

CONFIG = """
metrics = ["ndcg@10", "mrr"]
segment_by = ["query_type", "meta.region"]
min_queries = 20
min_coverage = 0.8
gate_on = "lower_bound"
strict_segments = true

[gates]
"ndcg@10" = 0.7

[segments.query_type.multi_hop.gates]
"ndcg@10" = 0.45

[segments.query_type.rare]
min_queries = 5
min_coverage = 0.5
gate_on = "upper_bound"

[segments."meta.region".eu.gates]
"mrr" = "> 0.2"
"""


def test_config_file_gives_segment_rules_and_policy(tmp_path: Path) -> None:
    path = tmp_path / "rankgate.toml"
    path.write_text(CONFIG, encoding="utf-8")
    config = load_config(path)
    assert config.segment_by == ("query_type", "meta.region")
    assert (config.min_queries, config.min_coverage, config.gate_on, config.strict_segments) == (
        20,
        0.8,
        "lower_bound",
        True,
    )
    assert config.gates == (parse_gate("ndcg@10>=0.7"),)
    rules = {rule.key: rule for rule in config.rules}
    assert set(rules) == {MULTI_HOP, RARE, SegmentKey("meta.region", "eu")}
    assert rules[MULTI_HOP] == SegmentRule(key=MULTI_HOP, gates=(parse_gate("ndcg@10>=0.45"),))
    assert rules[RARE] == SegmentRule(
        key=RARE, min_queries=5, min_coverage=0.5, gate_on="upper_bound"
    )
    assert rules[SegmentKey("meta.region", "eu")].gates == (parse_gate("mrr>0.2"),)


def test_config_rules_drive_an_evaluation(tmp_path: Path) -> None:
    path = tmp_path / "rankgate.toml"
    path.write_text(
        'segment_by = ["query_type"]\n[gates]\n"ndcg@10" = 0.7\n'
        '[segments.query_type.multi_hop.gates]\n"ndcg@10" = 0.45\n',
        encoding="utf-8",
    )
    config = load_config(path)
    assert config.segment_by is not None
    policy = GatePolicy(rules=config.rules)
    settings = rankgate.Settings(segment_by=config.segment_by, resamples=100)
    evaluation = rankgate.evaluate(
        _dataset(), ["ndcg@10"], config.gates, settings=settings, policy=policy
    )
    outcomes = _by_segment(evaluation)
    assert outcomes[(MULTI_HOP, "ndcg@10>=0.45")].status == "pass"
    assert (MULTI_HOP, "ndcg@10>=0.7") not in outcomes
    assert evaluation.passed is True
    # Without the rule the same data fails on multi_hop.
    evaluation = rankgate.evaluate(_dataset(), ["ndcg@10"], config.gates, settings=settings)
    assert evaluation.passed is False


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("[segments.query_type.rare]\nmin_queries = 0\n", "min_queries"),
        ("[segments.query_type.rare]\nthreshold = 0.5\n", "threshold"),
        ("[segments.query_type.rare]\ngate_on = 'median'\n", "gate_on"),
        ('[segments.query_type.rare.gates]\n"ndcg@10" = 70\n', "outside [0, 1]"),
        ("[segments.query_type]\nrare = 3\n", "rare"),
        ("min_queries = 0\n", "min_queries"),
        ("gate_on = 'p50'\n", "gate_on"),
        ("min_coverage = 2\n", "min_coverage"),
        ("strict_segments = 'yes'\n", "strict_segments"),
        ("segment_by = [1]\n", "segment_by"),
    ],
)
def test_bad_segment_config_names_the_file(tmp_path: Path, text: str, fragment: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(path) in str(caught.value)
    assert fragment in str(caught.value)


def test_gate_values_reported_for_insufficient_segment_use_its_mean() -> None:
    evaluation = rankgate.evaluate(
        _small_regressed(3), ["ndcg@10"], ["ndcg@10>=0.7"], settings=SETTINGS
    )
    outcome = _by_segment(evaluation)[(RARE, "ndcg@10>=0.7")]
    assert outcome.mean == pytest.approx(0.5)
    assert outcome.margin == pytest.approx(-0.2)
    assert not math.isnan(outcome.value or math.nan)


def test_config_corpus_path_is_relative_to_the_file_and_age_is_checked(tmp_path: Path) -> None:
    folder = tmp_path / "conf"
    folder.mkdir()
    path = folder / "rankgate.toml"
    path.write_text(
        'corpus = "ids.txt"\nlabel_max_age = "180d"\nseed = 7\nresamples = 500\n', encoding="utf-8"
    )
    config = load_config(path)
    assert config.corpus == folder / "ids.txt"
    assert (config.label_max_age, config.seed, config.resamples) == ("180d", 7, 500)
    path.write_text('label_max_age = "half a year"\n', encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(path) in str(caught.value)
