"""Gates from the command line and from rankgate.toml: operators, margins, merging, and how the
config file is found."""

from __future__ import annotations

from pathlib import Path

import pytest

GOOD = {"query_id": "g", "retrieved_ids": ["a", "b"], "relevant_ids": ["a"]}  # mrr = 1.0 exactly

# Hand-computed means of the ``hand`` traces (cli_helpers): mrr = 7/9, precision@3 = 4/9,
# recall@3 = 13/18.
MRR = 7 / 9


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("gate", "passes"),
    [
        pytest.param("mrr>=1", True, id="ge-equal"),
        pytest.param("mrr>1", False, id="gt-equal"),
        pytest.param("mrr<=1", True, id="le-equal"),
        pytest.param("mrr<1", False, id="lt-equal"),
        pytest.param("mrr>=0.99", True, id="ge-above"),
        pytest.param("mrr<0.99", False, id="lt-above"),
        pytest.param("mrr > 0.5", True, id="spaces"),
    ],
)
def test_operators_at_the_boundary(cli, write_jsonl, gate: str, passes: bool) -> None:
    result = cli("eval", write_jsonl([GOOD]), "--gate", gate, "--format", "json")
    assert result.code == (0 if passes else 1)
    [outcome] = result.json()["gates"]
    assert outcome["passed"] is passes
    assert outcome["value"] == 1.0


def test_gate_values_and_margins(cli, hand) -> None:
    result = cli(
        "eval",
        hand.path,
        "--format",
        "json",
        "--metric",
        "mrr",
        "--gate",
        "mrr>=0.7",
        "--gate",
        "precision@3<0.5",
        "--gate",
        "recall@3>0.8",
    )
    assert result.code == 1
    report = result.json()
    gates = {g["metric"]: g for g in report["gates"]}
    assert [g["metric"] for g in report["gates"]] == ["mrr", "precision@3", "recall@3"]
    assert gates["mrr"]["op"] == ">="
    assert gates["mrr"]["threshold"] == 0.7
    assert gates["mrr"]["value"] == pytest.approx(MRR)
    assert gates["mrr"]["margin"] == pytest.approx(MRR - 0.7)
    assert gates["mrr"]["passed"] is True
    assert gates["precision@3"]["value"] == pytest.approx(4 / 9)
    assert gates["precision@3"]["margin"] == pytest.approx(4 / 9 - 0.5)  # negative, yet it passes
    assert gates["precision@3"]["passed"] is True
    assert gates["recall@3"]["value"] == pytest.approx(13 / 18)
    assert gates["recall@3"]["margin"] == pytest.approx(13 / 18 - 0.8)
    assert gates["recall@3"]["passed"] is False
    assert report["passed"] is False
    # gated metrics that --metric did not name are added to the report, after the named ones
    assert list(report["metrics"]) == ["mrr", "precision@3", "recall@3"]
    assert report["metrics"]["recall@3"] == pytest.approx(13 / 18)


def test_gate_aliases_resolve_to_the_canonical_metric(cli, hand) -> None:
    report = cli(
        "eval", hand.path, "--format", "json", "-m", "precision@3", "-g", "P_3>=0.4"
    ).json()
    assert list(report["metrics"]) == ["precision@3"]
    assert report["gates"][0]["metric"] == "precision@3"


def test_table_shows_gates_and_verdict(cli, hand) -> None:
    result = cli("eval", hand.path, "-m", "mrr", "-g", "mrr>=0.7", "-g", "recall@3>0.8")
    assert result.code == 1
    lines = result.out.splitlines()
    mrr_row = next(line for line in lines if line.strip().startswith("mrr"))
    assert ">= 0.7" in mrr_row and "+0.0778" in mrr_row and "pass" in mrr_row
    recall_row = next(line for line in lines if line.strip().startswith("recall@3"))
    assert "FAIL" in recall_row and "-0.0778" in recall_row
    verdict = lines[-1]
    assert verdict.startswith("FAIL")
    assert "1 of 2" in verdict and "recall@3" in verdict


# --------------------------------------------------------------------------------------------------
# rankgate.toml
# --------------------------------------------------------------------------------------------------


def test_config_gate_number_means_at_least(cli, hand, tmp_path) -> None:
    config = write(tmp_path / "c.toml", '[gates]\n"mrr" = 0.8\n')
    result = cli("eval", hand.path, "--config", config, "--format", "json")
    assert result.code == 1
    [gate] = result.json()["gates"]
    assert (gate["metric"], gate["op"], gate["threshold"]) == ("mrr", ">=", 0.8)
    assert gate["margin"] == pytest.approx(MRR - 0.8)


@pytest.mark.parametrize(
    ("condition", "op", "passes"),
    [
        pytest.param(">= 0.85", ">=", False, id="ge"),
        pytest.param("> 0.7", ">", True, id="gt"),
        pytest.param("<= 0.7", "<=", False, id="le"),
        pytest.param("<0.8", "<", True, id="lt-no-space"),
        pytest.param("0.7", ">=", True, id="bare-number-string"),
    ],
)
def test_config_gate_string_forms(cli, hand, tmp_path, condition, op, passes) -> None:
    config = write(tmp_path / "c.toml", f'[gates]\n"mrr" = "{condition}"\n')
    result = cli("eval", hand.path, "--config", config, "--format", "json")
    assert result.code == (0 if passes else 1)
    [gate] = result.json()["gates"]
    assert gate["op"] == op
    assert gate["passed"] is passes


def test_config_metrics_and_gate_metrics(cli, hand, tmp_path) -> None:
    config = write(tmp_path / "c.toml", 'metrics = ["mrr", "ndcg@3"]\n[gates]\n"map" = 0.4\n')
    report = cli("eval", hand.path, "--config", config, "--format", "json").json()
    assert list(report["metrics"]) == ["mrr", "ndcg@3", "map"]
    assert report["metrics"]["map"] == pytest.approx(25 / 54)
    # --metric replaces the config's list; the config's gate still adds its metric
    report = cli("eval", hand.path, "--config", config, "--format", "json", "-m", "recall@3").json()
    assert list(report["metrics"]) == ["recall@3", "map"]


def test_cli_gate_overrides_config_gate_on_same_metric_and_op(cli, hand, tmp_path) -> None:
    config = write(tmp_path / "c.toml", '[gates]\n"mrr" = 0.9\n"precision@3" = "< 0.5"\n')
    assert cli("eval", hand.path, "--config", config).code == 1  # mrr 0.778 < 0.9
    result = cli("eval", hand.path, "--config", config, "--gate", "mrr>=0.5", "--format", "json")
    assert result.code == 0
    gates = result.json()["gates"]
    assert [(g["metric"], g["op"], g["threshold"]) for g in gates] == [
        ("mrr", ">=", 0.5),
        ("precision@3", "<", 0.5),
    ]


def test_cli_gate_with_another_op_adds_to_config_gate(cli, hand, tmp_path) -> None:
    config = write(tmp_path / "c.toml", '[gates]\n"mrr" = 0.5\n')
    result = cli("eval", hand.path, "--config", config, "--gate", "mrr<0.7", "--format", "json")
    assert result.code == 1
    gates = result.json()["gates"]
    assert [(g["op"], g["threshold"], g["passed"]) for g in gates] == [
        (">=", 0.5, True),
        ("<", 0.7, False),
    ]


def test_config_gate_alias_is_overridden_by_canonical_cli_gate(cli, hand, tmp_path) -> None:
    config = write(tmp_path / "c.toml", '[gates]\n"P_3" = 0.9\n')
    result = cli(
        "eval", hand.path, "--config", config, "-g", "precision@3>=0.4", "--format", "json"
    )
    assert result.code == 0
    assert [g["threshold"] for g in result.json()["gates"]] == [0.4]


def test_config_in_working_directory_is_picked_up(cli, hand, tmp_path, monkeypatch) -> None:
    project = tmp_path / "project"
    project.mkdir()
    write(project / "rankgate.toml", 'metrics = ["mrr"]\n[gates]\n"mrr" = 0.9\n')
    monkeypatch.chdir(project)
    result = cli("eval", hand.path, "--format", "json")
    assert result.code == 1
    report = result.json()
    assert list(report["metrics"]) == ["mrr"]
    assert report["gates"][0]["threshold"] == 0.9

    ignored = cli("eval", hand.path, "--format", "json", "--no-config")
    assert ignored.code == 0
    assert ignored.json()["gates"] == []
    assert list(ignored.json()["metrics"]) == ["ndcg@10", "mrr", "precision@5", "recall@20", "map"]


def test_config_option_names_another_file(cli, hand, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "rankgate.toml", '[gates]\n"mrr" = 0.9\n')
    other = write(tmp_path / "nightly.toml", '[gates]\n"mrr" = 0.7\n')
    result = cli("eval", hand.path, "--config", other, "--format", "json")
    assert result.code == 0
    assert [g["threshold"] for g in result.json()["gates"]] == [0.7]


def test_config_in_working_directory_picked_up_by_subprocess(run_cli, hand, tmp_path) -> None:
    write(tmp_path / "rankgate.toml", '[gates]\n"mrr" = 0.9\n')
    assert run_cli("eval", hand.path, cwd=tmp_path).code == 1
    assert run_cli("eval", hand.path, "--no-config", cwd=tmp_path).code == 0


def test_config_relevance_threshold_and_cli_override(cli, hand, tmp_path) -> None:
    config = write(tmp_path / "c.toml", "relevance_threshold = 2\n")
    report = cli("eval", hand.path, "--config", config, "--format", "json").json()
    assert report["settings"]["relevance_threshold"] == 2.0
    assert report["summary"]["scored"] == 1
    report = cli("eval", hand.path, "--config", config, "--rel", "1", "--format", "json").json()
    assert report["summary"]["scored"] == 3


def test_config_fields(cli, write_jsonl, tmp_path) -> None:
    config = write(
        tmp_path / "c.toml", '[fields]\nretrieved_ids = "meta.ids"\nrelevant_ids = "gold"\n'
    )
    path = write_jsonl([{"meta": {"ids": ["x", "y"]}, "gold": ["y"]}])
    report = cli("eval", path, "--config", config, "--format", "json", "-m", "mrr").json()
    assert report["metrics"]["mrr"] == 0.5
