"""Gates, their verdicts, and rankgate.toml."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

import rankgate
from rankgate import ConfigError, SpecError, parse_gate, parse_metric
from rankgate.config import load_config
from rankgate.gates import check_gates, gates_from_table, merge_gates


def test_gate_parses_and_prints() -> None:
    gate = parse_gate("  P_5 >= 0.25 ")
    assert (gate.metric, gate.op, gate.threshold) == (parse_metric("precision@5"), ">=", 0.25)
    assert str(gate) == "precision@5>=0.25"


@pytest.mark.parametrize(
    ("op", "value", "passed"),
    [
        (">=", 0.7, True),
        (">=", 0.6999, False),
        (">", 0.7, False),
        ("<=", 0.7, True),
        ("<", 0.7, False),
    ],
)
def test_gate_verdict_and_margin(op: str, value: float, passed: bool) -> None:
    gate = parse_gate(f"ndcg@10{op}0.7")
    (outcome,) = check_gates([gate], {gate.metric: value})
    assert outcome.passed is passed
    assert outcome.margin == pytest.approx(value - 0.7)


def test_gate_without_scored_queries_fails_with_no_value() -> None:
    gate = parse_gate("mrr>=0.5")
    (outcome,) = check_gates([gate], {gate.metric: math.nan})
    assert (outcome.passed, outcome.value, outcome.margin) == (False, None, None)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("ndcg@10", "cannot parse gate"),
        ("ndcg@10>=high", "not a number"),
        ("ndcg@10>=70", "outside [0, 1]"),
        ("ndcg@10>=nan", "finite"),
        ("nope@10>=0.5", "unknown metric"),
    ],
)
def test_bad_gates(text: str, message: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_gate(text)
    assert message in str(caught.value)


def test_unbounded_metric_accepts_any_threshold() -> None:
    assert parse_gate("dcg@10>=4.5").threshold == 4.5


def test_config_table_forms_and_override() -> None:
    base = gates_from_table({"ndcg@10": 0.7, "recall@20": ">= 0.85", "mrr": "> 0.5"}, "t")
    assert [str(g) for g in base] == ["ndcg@10>=0.7", "recall@20>=0.85", "mrr>0.5"]
    merged = merge_gates(base, [parse_gate("ndcg@10>=0.8")])
    assert [str(g) for g in merged] == ["ndcg@10>=0.8", "recall@20>=0.85", "mrr>0.5"]


def test_gate_on_metric_not_requested_is_computed() -> None:
    records = [{"query_id": "q", "retrieved_ids": ["a"], "relevant_ids": ["a"]}]
    evaluation = rankgate.evaluate(records, ["ndcg@10"], [parse_gate("recall@5>=0.9")])
    assert [str(m) for m in evaluation.metrics] == ["ndcg@10", "recall@5"]
    assert evaluation.passed


def test_load_config(tmp_path: Path) -> None:
    path = tmp_path / "rankgate.toml"
    path.write_text(
        'metrics = ["ndcg@5,10", "mrr"]\nrelevance_threshold = 2\nempty_relevant = "zero"\n'
        '[fields]\nretrieved_ids = "meta.ids"\n[gates]\n"ndcg@10" = 0.7\n',
        encoding="utf-8",
    )
    config = load_config(path)
    assert config.metrics == ("ndcg@5,10", "mrr")
    assert config.relevance_threshold == 2
    assert config.empty_relevant == "zero"
    assert config.fields == {"retrieved_ids": "meta.ids"}
    assert [str(g) for g in config.gates] == ["ndcg@10>=0.7"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("gate = 1\n", "unknown key 'gate'"),
        ("[gates\n", "not valid TOML"),
        ('[gates]\n"ndcg@10" = 7\n', "outside [0, 1]"),
        ('[gates]\n"ndcg@10" = true\n', "expected a threshold"),
        ('[gates]\n"bogus" = 0.5\n', "unknown metric"),
        ('empty_relevant = "maybe"\n', "empty_relevant must be one of"),
        ("relevance_threshold = 0\n", "relevance_threshold must be a number > 0"),
        ("metrics = 5\n", "metrics must be a list of strings"),
        ("[fields]\nretrieved_ids = 3\n", "must be a string path"),
    ],
)
def test_bad_config_names_file_and_problem(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "rankgate.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(path) in str(caught.value)
    assert message in str(caught.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('metrics = ["ndgc@10"]\n', "metrics: unknown metric 'ndgc'"),
        ("metrics = []\n", "metrics is empty"),
        ('[fields]\nretreived_ids = "x"\n', "[fields] unknown trace field 'retreived_ids'"),
        ("relevance_threshold = -1\n", "relevance_threshold must be a number > 0"),
    ],
)
def test_config_values_checked_when_loaded_name_the_file(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "rankgate.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value).startswith(f"{path}: ")
    assert message in str(caught.value)


def test_gate_with_nothing_after_the_operator_does_not_parse() -> None:
    with pytest.raises(SpecError, match="cannot parse gate"):
        parse_gate("ndcg@10>=")
