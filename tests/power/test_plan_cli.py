"""``rankgate plan`` from the command line: from a compare report, an eval report written with
``--per-query``, and trace files; the table, the JSON, and one-line errors with exit 2."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from power_helpers import AbFiles, Rankgate, write_jsonl
from power_oracles import paired_oracle, solved, two_sample_oracle

from rankgate.errors import InputError
from rankgate.power import Spread, plan
from rankgate.spec import parse_metric


@pytest.fixture
def compare_report(rankgate: Rankgate, ab_files: AbFiles, tmp_path: Path) -> Path:
    out = tmp_path / "compare.json"
    ran = rankgate(
        "compare",
        ab_files.baseline,
        ab_files.control,
        "-m",
        "ndcg@10",
        "-m",
        "mrr",
        "--segment-by",
        "query_type",
        "--format",
        "json",
        "-o",
        out,
    )
    assert ran.code == 0, ran.err
    return out


@pytest.fixture
def eval_report(rankgate: Rankgate, ab_files: AbFiles, tmp_path: Path) -> Path:
    out = tmp_path / "eval.json"
    ran = rankgate(
        "eval", ab_files.baseline, "-m", "ndcg@10", "--format", "json", "--per-query", "-o", out
    )
    assert ran.code == 0, ran.err
    return out


def test_plan_from_a_compare_report_as_json(rankgate: Rankgate, compare_report: Path) -> None:
    report = json.loads(compare_report.read_text())
    ran = rankgate(
        "plan", compare_report, "-m", "ndcg@10", "--delta", "0.02", "--alpha", "0.05",
        "--format", "json",
    )  # fmt: skip
    assert ran.code == 0, ran.err
    found = ran.json()
    assert found["metric"] == "ndcg@10"
    assert found["delta"] == 0.02 and found["power"] == 0.8 and found["alpha"] == 0.05
    cells = [c for c in report["cells"] if c["metric"] == "ndcg@10"]
    groups = [c["segment"] for c in cells]
    # Paired comparison: a paired and an unpaired row per group, overall first.
    assert [(r["segment"], r["design"]) for r in found["rows"]] == [
        (group, design) for group in groups for design in ("paired", "unpaired")
    ]
    for cell in cells:
        paired, unpaired = (r for r in found["rows"] if r["segment"] == cell["segment"])
        n, sd = cell["queries"], cell["delta_sd"]
        needed = solved(paired_oracle(), effect_size=0.02 / sd, alpha=0.05, power=0.8)
        assert paired["queries_needed_exact"] == pytest.approx(needed, rel=1e-6)
        assert paired["queries_needed"] == math.ceil(needed)
        assert paired["minimum_detectable_effect"] == pytest.approx(
            solved(paired_oracle(), nobs=n, alpha=0.05, power=0.8) * sd, rel=1e-6
        )
        pooled = math.sqrt((cell["baseline_sd"] ** 2 + cell["candidate_sd"] ** 2) / 2)
        assert unpaired["queries_needed_unit"] == "queries per arm"
        assert unpaired["queries_needed_exact"] == pytest.approx(
            solved(two_sample_oracle(), effect_size=0.02 / pooled, alpha=0.05, power=0.8),
            rel=1e-6,
        )


def test_plan_table_reads_like_the_json(rankgate: Rankgate, compare_report: Path) -> None:
    ran = rankgate(
        "plan", compare_report, "--metric", "ndcg@10", "--delta", "0.02", "--alpha", "0.05"
    )
    assert ran.code == 0, ran.err
    data = rankgate(
        "plan",
        compare_report,
        "--metric",
        "ndcg@10",
        "--delta",
        "0.02",
        "--alpha",
        "0.05",
        "--format",
        "json",
    ).json()
    lines = ran.out.splitlines()
    assert lines[0].startswith("rankgate plan  ndcg@10 · ")
    assert "two-sided t-test at alpha 0.05, 80% power · to detect |Δ| = 0.02" in lines[1]
    header = next(line for line in lines if "queries needed" in line)
    assert header.split() == [
        "group",
        "design",
        "queries",
        "sd",
        "queries",
        "needed",
        "could",
        "detect",
    ]
    overall_paired, overall_unpaired = data["rows"][:2]
    paired_line = next(line for line in lines if line.strip().startswith("overall"))
    assert f"{overall_paired['queries_needed']:,}" in paired_line
    assert f"≥{overall_paired['minimum_detectable_effect']:.4f}" in paired_line
    unpaired_line = lines[lines.index(paired_line) + 1]
    assert f"{overall_unpaired['queries_needed']:,} per arm" in unpaired_line
    assert "query_type=multi_hop" in ran.out
    assert "Sakai" in ran.out and "Webber, Moffat & Zobel" in ran.out


def test_plan_without_delta_gives_the_mde_at_a_chosen_size(
    rankgate: Rankgate, compare_report: Path
) -> None:
    data = rankgate(
        "plan", compare_report, "-m", "mrr", "--queries", "500", "--format", "json"
    ).json()
    assert data["delta"] is None and data["queries"] == 500
    for row in data["rows"]:
        assert row["queries_needed"] is None
        assert row["detectable_baseline_queries"] == row["detectable_candidate_queries"] == 500
    table = rankgate("plan", compare_report, "-m", "mrr", "--queries", "500")
    assert "no --delta given" in table.out and "500 queries" in table.out


def test_plan_from_an_eval_report_with_per_query_values(
    rankgate: Rankgate, eval_report: Path
) -> None:
    report = json.loads(eval_report.read_text())
    values = np.array([row["ndcg@10"] for row in report["per_query"]])
    data = rankgate(
        "plan", eval_report, "-m", "ndcg@10", "--delta", "0.05", "--format", "json"
    ).json()
    (row,) = data["rows"]
    sd = float(np.std(values, ddof=1))
    assert row["design"] == "unpaired"
    assert row["sd"] == pytest.approx(sd, rel=1e-12)
    assert row["queries_needed_exact"] == pytest.approx(
        solved(two_sample_oracle(), effect_size=0.05 / sd, alpha=0.05, power=0.8), rel=1e-6
    )
    assert any("paired figures need a comparison" in note for note in data["notes"])


def test_plan_from_trace_files(rankgate: Rankgate, ab_files: AbFiles, compare_report: Path) -> None:
    """Two trace files are compared (paired here) and give the compare report's plan; one trace
    file gives one run's unpaired plan, per segment too."""
    from_report = rankgate(
        "plan",
        compare_report,
        "-m",
        "ndcg@10",
        "--delta",
        "0.02",
        "--alpha",
        "0.05",
        "--format",
        "json",
    ).json()
    from_traces = rankgate(
        "plan",
        ab_files.baseline,
        ab_files.control,
        "-m",
        "ndcg@10",
        "--delta",
        "0.02",
        "--segment-by",
        "query_type",
        "--format",
        "json",
    ).json()
    assert from_traces["rows"] == from_report["rows"]
    one = rankgate(
        "plan", ab_files.baseline, "-m", "ndcg@10", "--segment-by", "query_type", "--format", "json"
    ).json()
    assert {row["design"] for row in one["rows"]} == {"unpaired"}
    assert one["rows"][0]["segment"] is None
    assert len(one["rows"]) == 4  # overall and three query types


def test_plan_to_a_file_prints_the_headline(
    rankgate: Rankgate, compare_report: Path, tmp_path: Path
) -> None:
    out = tmp_path / "plan.json"
    ran = rankgate("plan", compare_report, "-m", "ndcg@10", "--delta", "0.02", "-o", out)
    assert ran.code == 0
    assert json.loads(out.read_text())["metric"] == "ndcg@10"
    assert "paired queries to detect 0.02 at 80% power (overall)" in ran.out


def test_a_segment_without_spread_gets_a_note(rankgate: Rankgate, tmp_path: Path) -> None:
    """A segment whose queries all score alike gets a note, not an error; the overall group
    still plans."""
    records = [
        {
            "query_id": f"q{i}",
            "kind": "flat" if i < 10 else "varied",
            "retrieved_ids": ["a", "b", "c"],
            "relevant_ids": ["a"] if i < 10 else [["a", "b", "c"][i % 3]],
        }
        for i in range(40)
    ]
    path = write_jsonl(tmp_path / "flat.jsonl", records)
    data = rankgate("plan", path, "-m", "mrr", "--segment-by", "kind", "--format", "json").json()
    flat = next(row for row in data["rows"] if row["segment"] == {"field": "kind", "value": "flat"})
    assert flat["minimum_detectable_effect"] is None
    assert "zero variance" in flat["note"]
    assert data["rows"][0]["minimum_detectable_effect"] is not None
    # The library says the same of an overall group without spread: an input error.
    with pytest.raises(InputError, match="overall: zero variance"):
        plan([Spread(None, 10, 10, 0.0, 0.0)], parse_metric("mrr"), source="flat")


@pytest.mark.parametrize(
    ("extra", "fragments"),
    [
        (["-m", "recall@20"], ["no metric recall@20 in", "its metrics: ndcg@10, mrr"]),
        (["-m", "ndcg@10", "--delta", "0"], ["delta must be a number > 0"]),
        (["-m", "ndcg@10", "--delta", "-0.02"], ["delta must be a number > 0"]),
        (["-m", "ndcg@10", "--power", "1.2"], ["power must be a number between 0 and 1"]),
        (["-m", "ndcg@10", "--power", "0"], ["power must be a number between 0 and 1"]),
        (["-m", "ndcg@10", "--alpha", "1"], ["alpha must be a number between 0 and 1"]),
        (["-m", "ndcg@10", "--power", "0.03"], ["must be above alpha"]),
        (["-m", "ndcg@10", "--queries", "1"], ["queries must be a whole number from 2"]),
        (["-m", "ndcg@10,mrr"], ["plan takes one metric", "ndcg@10, mrr"]),
        ([], ["plan takes one metric", "none"]),
        (["-m", "ndcg@10", "--labels", "x.jsonl"], ["--labels applies to trace files"]),
        (["-m", "ndcg@10", "--segment-by", "x"], ["--segment-by applies to trace files"]),
        (["-m", "ndcg@10", "--candidate", "nope"], ["no candidate 'nope'"]),
        (["-m", "ndcg@10", "--gate", "ndcg@10>=0.5"], ["plan checks no gates"]),
        (["-m", "ndcg@10", "--html", "p.html"], ["--html: plan writes a table or JSON"]),
        (["-m", "ndcg@10", "--format", "markdown"], ["invalid choice"]),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    rankgate: Rankgate, compare_report: Path, extra: list[str], fragments: list[str]
) -> None:
    ran = rankgate("plan", compare_report, *extra)
    if "invalid choice" in fragments:
        assert ran.code == 2 and "invalid choice" in ran.err
        return
    ran.one_line_error(*fragments)


def test_zero_variance_is_an_error(rankgate: Rankgate, tmp_path: Path) -> None:
    same = [
        {"query_id": f"q{i}", "retrieved_ids": ["a", "b"], "relevant_ids": ["a"]} for i in range(30)
    ]
    path = write_jsonl(tmp_path / "same.jsonl", same)
    rankgate("plan", path, "-m", "mrr").one_line_error("zero variance", "mrr")
    # Paired and unchanged (a copy): every per-query difference is 0. The arms themselves vary.
    varied = [
        {"query_id": f"q{i}", "retrieved_ids": ["a", "b"], "relevant_ids": [["a", "b"][i % 2]]}
        for i in range(30)
    ]
    first = write_jsonl(tmp_path / "first.jsonl", varied)
    copy = write_jsonl(tmp_path / "copy.jsonl", varied)
    rankgate("plan", first, copy, "-m", "mrr", "--delta", "0.01").one_line_error(
        "overall: zero variance: every per-query difference is the same"
    )


def test_report_problems_are_one_line_errors(
    rankgate: Rankgate, ab_files: AbFiles, tmp_path: Path
) -> None:
    # An eval report without --per-query.
    out = tmp_path / "plain.json"
    assert (
        rankgate("eval", ab_files.baseline, "-m", "ndcg@10", "--format", "json", "-o", out).code
        == 0
    )
    rankgate("plan", out, "-m", "ndcg@10").one_line_error("has no per-query values", "--per-query")
    # A compare report of two candidates without --candidate.
    both = tmp_path / "both.json"
    ran = rankgate(
        "compare",
        ab_files.baseline,
        ab_files.control,
        ab_files.regressed,
        "-m",
        "ndcg@10",
        "--format",
        "json",
        "-o",
        both,
    )
    assert ran.code == 1
    rankgate("plan", both, "-m", "ndcg@10").one_line_error("several candidates", "--candidate")
    control = str(ab_files.control)
    named = rankgate("plan", both, "-m", "ndcg@10", "--candidate", control, "--format", "json")
    assert named.code == 0 and f"candidate {control}" in named.json()["source"]
    # A report written before the cells carried their spread.
    old = json.loads(both.read_text())
    for cell in old["cells"]:
        del cell["baseline_sd"]
    stale = tmp_path / "stale.json"
    stale.write_text(json.dumps(old, indent=2))
    rankgate("plan", stale, "-m", "ndcg@10", "--candidate", control).one_line_error("predates them")
    # Broken JSON that starts like a report.
    broken = tmp_path / "broken.json"
    broken.write_text('{\n  "schema_version": 1,\n  "tool": ')
    rankgate("plan", broken, "-m", "ndcg@10").one_line_error("not valid JSON")
    # Three trace files.
    rankgate(
        "plan", ab_files.baseline, ab_files.control, ab_files.regressed, "-m", "ndcg@10"
    ).one_line_error("a baseline and a candidate")


def test_plan_of_a_compare_report_defaults_to_compares_own_level(
    rankgate: Rankgate, compare_report: Path
) -> None:
    """Without --alpha, plan uses the per-cell level of the report's 'could detect' figures, so
    the two agree: plan's MDE at the observed n is the cell's minimum_detectable_effect."""
    report = json.loads(compare_report.read_text())
    cells = {json.dumps(c["segment"]): c for c in report["cells"] if c["metric"] == "ndcg@10"}
    ran = rankgate("plan", compare_report, "-m", "ndcg@10", "--format", "json")
    assert ran.code == 0, ran.err
    found = ran.json()
    levels = {c["detectable_alpha"] for c in cells.values()}
    assert found["alpha"] == pytest.approx(levels.pop())
    for row in found["rows"]:
        cell = cells[json.dumps(row["segment"])]
        if row["design"] == "paired" and cell.get("minimum_detectable_effect") is not None:
            assert row["minimum_detectable_effect"] == pytest.approx(
                cell["minimum_detectable_effect"], rel=1e-9
            )


@pytest.mark.parametrize(
    ("shape", "fragment"),
    [
        ("tool_text", "not a rankgate JSON report this version reads"),
        ("deep", "nested too deep"),
        ("bad_bytes", "not UTF-8"),
        ("huge_counts", "nothing sensible to plan from"),
    ],
)
def test_hostile_reports_are_one_line_and_exit_2(
    rankgate: Rankgate, compare_report: Path, tmp_path: Path, shape: str, fragment: str
) -> None:
    report = json.loads(compare_report.read_text())
    path = tmp_path / f"{shape}.json"
    if shape == "tool_text":
        report["tool"] = "rankgate"
        path.write_text(json.dumps(report))
    elif shape == "deep":
        path.write_text('{"schema_version": 1, "x": ' + "[" * 200_000 + "]" * 200_000 + "}")
    elif shape == "bad_bytes":
        path.write_bytes(b'{"schema_version": 1, "x": "\xff\xfe"}')
    else:
        for cell in report["cells"]:
            cell["queries"] = cell["baseline_queries"] = cell["candidate_queries"] = 10**30
        path.write_text(json.dumps(report))
    ran = rankgate("plan", path, "-m", "ndcg@10", "--delta", "0.02")
    assert ran.code == 2
    assert fragment in ran.err and "Traceback" not in ran.err
    assert len(ran.err.strip().splitlines()) == 1
