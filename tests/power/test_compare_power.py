"""Compare's power: every cell that is not flagged carries its minimum detectable effect (JSON,
console, Markdown, HTML, Arrow), and ``min_detectable`` fails a "no regression" that could not
have seen a change of that size, while passing one that could."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from power_helpers import AbFiles, Rankgate
from power_oracles import paired_oracle, solved, two_sample_oracle

from ab_data import ab_traces
from rankgate.compare import Comparison, compare
from rankgate.config import load_config
from rankgate.errors import ConfigError
from rankgate.evaluate import Settings
from rankgate.gates import GatePolicy, SegmentRule
from rankgate.power import combined_sd
from rankgate.report.console import Style, render_comparison
from rankgate.report.html import render_comparison_html
from rankgate.report.json_report import comparison_report, comparison_schema
from rankgate.report.markdown import render_comparison_markdown
from rankgate.segments import SegmentKey

SETTINGS = Settings(segment_by=("query_type",), resamples=200)
METRICS = ["ndcg@10", "mrr"]
MULTI_HOP = SegmentKey("query_type", "multi_hop")


def _compare(
    queries: int, policy: GatePolicy | None = None, pairing: str = "paired", regressed: bool = False
) -> Comparison:
    baseline, worse, control = ab_traces(queries=queries, seed=3)
    return compare(
        baseline,
        worse if regressed else control,
        metrics=METRICS,
        settings=SETTINGS,
        policy=policy or GatePolicy(min_queries=5),
        pairing=pairing,
    )


@pytest.mark.parametrize("pairing", ["paired", "unpaired"])
def test_json_cells_carry_the_mde_statsmodels_gives(pairing: str) -> None:
    comparison = _compare(240, pairing=pairing)
    report = json.loads(json.dumps(comparison_report(comparison)))
    jsonschema.validate(report, comparison_schema())
    assert report["settings"]["detectable_power"] == 0.8
    assert report["settings"]["min_detectable"] is None
    assert report["underpowered"] == 0
    cells = report["cells"]
    level = 0.05 / len(cells)
    unflagged = [cell for cell in cells if cell["flag"] is None]
    assert unflagged
    for cell in cells:
        assert cell["detectable_alpha"] == pytest.approx(level)
        assert cell["underpowered"] is None and cell["min_detectable"] is None
        if cell["flag"] is not None:
            assert cell["minimum_detectable_effect"] is None
            continue
        n_b, n_c = cell["baseline_queries"], cell["candidate_queries"]
        if pairing == "paired":
            expected = solved(paired_oracle(), nobs=n_b, alpha=level, power=0.8) * cell["delta_sd"]
        else:
            assert cell["delta_sd"] is None
            expected = solved(
                two_sample_oracle(), nobs1=n_b, ratio=n_c / n_b, alpha=level, power=0.8
            ) * combined_sd(cell["baseline_sd"], cell["candidate_sd"], n_b, n_c)
        assert cell["minimum_detectable_effect"] == pytest.approx(expected, rel=1e-6)


def test_flagged_cells_have_no_mde_and_are_never_underpowered() -> None:
    comparison = _compare(300, GatePolicy(min_queries=5, min_detectable=1e-6), regressed=True)
    flagged = [cell for cell in comparison.cells if cell.flag is not None]
    assert any(cell.segment == MULTI_HOP for cell in flagged)
    for cell in flagged:
        assert cell.minimum_detectable_effect is None
        assert cell.underpowered is None
        assert cell.min_detectable == 1e-6


def test_min_detectable_fails_an_underpowered_no_regression() -> None:
    """60 queries cannot rule out a small drop: a "no regression" there fails the gate."""
    comparison = _compare(60, GatePolicy(min_queries=5, min_detectable=0.005))
    assert not comparison.regressions
    underpowered = comparison.underpowered
    assert underpowered
    for cell in underpowered:
        assert cell.flag is None and cell.status == "ok"
        assert cell.minimum_detectable_effect is None or cell.minimum_detectable_effect > 0.005
        assert "min_detectable" in (cell.underpowered or "")
    assert not comparison.passed
    report = comparison_report(comparison)
    assert report["underpowered"] == len(underpowered)
    assert report["passed"] is False
    assert report["settings"]["min_detectable"] == 0.005
    jsonschema.validate(json.loads(json.dumps(report)), comparison_schema())


def test_min_detectable_passes_a_well_powered_no_regression() -> None:
    comparison = _compare(600)
    largest = max(
        cell.minimum_detectable_effect or 0.0
        for cell in comparison.cells
        if cell.status == "ok" and cell.flag is None
    )
    assert largest > 0
    powered = _compare(600, GatePolicy(min_queries=5, min_detectable=largest * 1.01))
    assert not powered.underpowered
    assert powered.passed
    tighter = _compare(600, GatePolicy(min_queries=5, min_detectable=largest * 0.99))
    assert len(tighter.underpowered) == 1
    assert not tighter.passed


def test_a_segment_rule_sets_its_own_min_detectable() -> None:
    rule = SegmentRule(key=MULTI_HOP, min_detectable=0.0001)
    comparison = _compare(300, GatePolicy(min_queries=5, rules=(rule,)))
    assert comparison.underpowered
    assert {cell.segment for cell in comparison.underpowered} == {MULTI_HOP}
    overall = [cell for cell in comparison.cells if cell.segment is None]
    assert all(cell.min_detectable is None for cell in overall)


def test_a_min_detectable_within_the_margin_is_refused() -> None:
    from rankgate.compare import Significance

    baseline, _, control = ab_traces(queries=40, seed=3)
    with pytest.raises(ConfigError, match="not above the margin"):
        compare(
            baseline,
            control,
            metrics=["mrr"],
            policy=GatePolicy(min_detectable=0.02),
            significance=Significance(margin=0.02),
        )


def test_reports_say_what_could_be_detected() -> None:
    comparison = _compare(120, GatePolicy(min_queries=5, min_detectable=0.001))
    overall = next(c for c in comparison.cells if c.segment is None and str(c.metric) == "ndcg@10")
    assert overall.flag is None and overall.minimum_detectable_effect is not None
    expected = f"could detect |Δ ndcg@10| >= {overall.minimum_detectable_effect:.4f}"
    console = render_comparison(comparison, Style(False))
    assert expected in console
    assert (
        "could detect"
        in console.splitlines()[
            next(
                i
                for i, line in enumerate(console.splitlines())
                if "segment" in line and "metric" in line
            )
        ]
    )
    assert "✗ underpowered" in console and "underpowered (min_detectable)" in console
    assert "FAIL" in console.splitlines()[-1] and "underpowered cell" in console.splitlines()[-1]
    markdown = render_comparison_markdown(comparison)
    assert "Could detect \\|Δ ndcg@10\\| \\>= " in markdown
    assert "underpowered: " in markdown
    html = render_comparison_html(comparison)
    assert "Could detect |Δ ndcg@10| &gt;= " in html
    assert "Underpowered cells" in html


def test_arrow_rows_carry_the_power_columns() -> None:
    table = _compare(120).to_arrow()
    for name in ("baseline_sd", "candidate_sd", "delta_sd", "minimum_detectable_effect"):
        assert name in table.column_names
    assert table.column("minimum_detectable_effect").null_count < table.num_rows


def test_config_reads_min_detectable(tmp_path: Path) -> None:
    path = tmp_path / "rankgate.toml"
    path.write_text(
        "min_detectable = 0.02\n\n[segments.query_type.multi_hop]\nmin_detectable = 0.05\n"
    )
    config = load_config(path)
    assert config.min_detectable == 0.02
    (rule,) = config.rules
    assert rule.min_detectable == 0.05
    for bad in ("0", "-0.1", '"small"', "true"):
        path.write_text(f"min_detectable = {bad}\n")
        with pytest.raises(ConfigError, match="min_detectable must be a number > 0"):
            load_config(path)
    path.write_text("[segments.query_type.faq]\nmin_detectable = 0\n")
    with pytest.raises(ConfigError, match="min_detectable must be a number > 0"):
        load_config(path)


def test_cli_exit_1_when_a_segment_is_underpowered_and_0_when_powered(
    rankgate: Rankgate, ab_files: AbFiles, tmp_path: Path
) -> None:
    args = ["compare", ab_files.baseline, ab_files.control, "-m", "ndcg@10", "--min-queries", "5"]
    strict = tmp_path / "strict.toml"
    strict.write_text("[segments.query_type.multi_hop]\nmin_detectable = 0.0005\n")
    failed = rankgate(*args, "--config", strict)
    assert failed.code == 1, failed.err
    assert "✗ underpowered" in failed.out
    assert "underpowered cell (min_detectable)" in failed.out.splitlines()[-1]
    report = rankgate(*args, "--config", strict, "--format", "json").json()
    (cell,) = [c for c in report["cells"] if c["underpowered"]]
    assert cell["segment"] == {"field": "query_type", "value": "multi_hop"}
    loose = tmp_path / "loose.toml"
    loose.write_text("[segments.query_type.multi_hop]\nmin_detectable = 0.5\n")
    passed = rankgate(*args, "--config", loose)
    assert passed.code == 0, passed.out
    assert "could detect" in passed.out


def test_a_metric_no_query_moved_on_could_detect_any_change() -> None:
    """Identical per-query values (a candidate that reorders nothing judged): no spread, so any
    change the same on every query would have been flagged; the power gate passes it."""
    baseline, _, _ = ab_traces(queries=60, seed=3)
    twin = [dict(trace) for trace in baseline]
    comparison = compare(
        baseline,
        twin,
        metrics=METRICS,
        settings=SETTINGS,
        policy=GatePolicy(min_queries=5, min_detectable=0.001),
    )
    assert comparison.cells
    for cell in comparison.cells:
        assert cell.delta == 0.0 and cell.flag is None
        assert cell.minimum_detectable_effect == 0.0
        assert cell.underpowered is None
    assert comparison.passed


def test_min_detectable_from_the_command_line_and_the_config(
    rankgate: Rankgate, ab_files: AbFiles, tmp_path: Path
) -> None:
    baseline, candidate = ab_files.baseline, ab_files.control
    by_option = rankgate("compare", baseline, candidate, "--no-config", "--min-detectable", "0.001")
    assert by_option.code == 1, by_option.err
    assert "underpowered" in by_option.out
    config = tmp_path / "power.toml"
    config.write_text("min_detectable = 0.001\n")
    by_config = rankgate("compare", baseline, candidate, "--config", config)
    assert by_config.code == 1, by_config.err
    loose = rankgate("compare", baseline, candidate, "--no-config", "--min-detectable", "5")
    assert loose.code == 0, loose.out
