"""``rankgate compare`` from the command line: exit codes, the three formats, errors."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pytest
from cli_helpers import clean_env

from ab_data import ab_traces
from conftest import RunCli, WriteJsonl
from rankgate.report.json_report import comparison_schema

METRICS = ["-m", "ndcg@5,10", "-m", "mrr,recall@20"]


@pytest.fixture
def ab_files(write_jsonl: WriteJsonl) -> tuple[Path, Path, Path]:
    baseline, regressed, control = ab_traces()
    return (
        write_jsonl(baseline, "baseline.jsonl"),
        write_jsonl(regressed, "regressed.jsonl"),
        write_jsonl(control, "control.jsonl"),
    )


def test_regression_exits_1_and_the_table_names_it(cli: RunCli, ab_files: tuple[Path, ...]) -> None:
    baseline, regressed, _ = ab_files
    result = cli("compare", baseline, regressed, *METRICS, "--segment-by", "query_type")
    assert result.code == 1, result.err
    regression_rows = [line for line in result.out.splitlines() if "▼ regression" in line]
    assert len(regression_rows) == 4
    assert any("query_type=multi_hop" in row and "ndcg@5" in row for row in regression_rows)
    verdict = result.out.strip().splitlines()[-1]
    assert verdict.startswith("FAIL · 4 regressions, worst query_type=multi_hop ndcg@10")
    assert "600 queries paired, 0 only in the baseline, 0 only in the candidate" in result.out


def test_control_exits_0(cli: RunCli, ab_files: tuple[Path, ...]) -> None:
    baseline, _, control = ab_files
    result = cli("compare", baseline, control, *METRICS, "--segment-by", "query_type")
    assert result.code == 0, result.out
    assert result.out.strip().splitlines()[-1].startswith("PASS · no regression in 16 cells")


def test_json_report_follows_its_schema(cli: RunCli, ab_files: tuple[Path, ...]) -> None:
    baseline, regressed, control = ab_files
    result = cli(
        "compare",
        baseline,
        regressed,
        control,
        *METRICS,
        "--segment-by",
        "query_type",
        "--format",
        "json",
        "--test",
        "randomization",
        "--permutations",
        "2000",
        "--correction",
        "bh",
    )
    assert result.code == 1
    report = result.json()
    jsonschema.validate(report, comparison_schema())
    assert report["settings"]["test"] == "randomization"
    assert report["settings"]["correction"] == "bh"
    assert len(report["cells"]) == 2 * 4 * 4
    flagged = {
        (c["candidate"], c["segment"]["value"] if c["segment"] else None, c["metric"])
        for c in report["cells"]
        if c["flag"] == "regression"
    }
    assert (str(regressed), "multi_hop", "ndcg@10") in flagged
    assert all(c["candidate"] == str(regressed) for c in report["cells"] if c["flag"])
    assert report["passed"] is False and report["regressions"] == len(flagged)
    assert [r["passed"] for r in report["results"]] == [False, True]


def test_markdown_report_escapes_untrusted_names(cli: RunCli, write_jsonl: WriteJsonl) -> None:
    evil = "<img src=x onerror=alert(1)>|**bold**"
    baseline = write_jsonl(
        [
            {"query_id": f"q{i}", "kind": evil, "retrieved_ids": ["a", "b"], "relevant_ids": ["a"]}
            for i in range(40)
        ],
        "base.jsonl",
    )
    candidate = write_jsonl(
        [{"query_id": f"q{i}", "retrieved_ids": ["b", "a"]} for i in range(40)], "cand.jsonl"
    )
    result = cli(
        "compare", baseline, candidate, "-m", "mrr", "--segment-by", "kind", "--format", "markdown"
    )
    assert result.code == 1
    assert not re.search(
        r"(?<!\\)[<>]",
        result.out.replace("<details>", "")
        .replace("</details>", "")
        .replace("<summary>", "")
        .replace("</summary>", ""),
    )
    assert r"\<img src=x onerror=alert\(1\)\>\|\*\*bold\*\*" in result.out
    table_rows = [line for line in result.out.splitlines() if line.startswith("| kind")]
    # 11 separators: the judged b/c column (judged@k of both arms) came with label-limited cells.
    assert table_rows and all(line.count(" | ") == 11 for line in table_rows)
    assert result.out.startswith("### rankgate compare")
    assert "**FAIL**" in result.out


def test_variant_field_from_the_command_line(cli: RunCli, write_jsonl: WriteJsonl) -> None:
    baseline, regressed, _ = ab_traces(queries=200)
    rows = [{**b, "config": "old"} for b in baseline] + [
        {**r, "query_type": b["query_type"], "config": "new"}
        for b, r in zip(baseline, regressed, strict=True)
    ]
    path = write_jsonl(rows, "both.jsonl")
    result = cli("compare", path, "--variant-field", "config", "--baseline", "old", "-m", "ndcg@10")
    assert result.code == 1
    assert "candidate new" in result.out
    missing = cli("compare", path, "--variant-field", "config", "-m", "ndcg@10")
    missing.assert_one_line_error("--baseline VALUE")


def test_output_file_gets_the_report_and_the_terminal_the_verdict(
    cli: RunCli, ab_files: tuple[Path, ...], tmp_path: Path
) -> None:
    baseline, _, control = ab_files
    out = tmp_path / "report.md"
    result = cli("compare", baseline, control, "-m", "mrr", "--format", "markdown", "-o", out)
    assert result.code == 0
    assert result.out.startswith("PASS")
    assert out.read_text().startswith("### rankgate compare")


def test_labels_option_and_unpaired_listing(cli: RunCli, write_jsonl: WriteJsonl) -> None:
    base = write_jsonl(
        [{"query_id": f"q{i}", "retrieved_ids": ["a", "b"]} for i in range(4)], "b.jsonl"
    )
    cand = write_jsonl(
        [{"query_id": f"q{i}", "retrieved_ids": ["b", "a"]} for i in range(1, 6)], "c.jsonl"
    )
    labels = write_jsonl(
        [{"query_id": f"q{i}", "relevant_ids": ["b"]} for i in range(6)], "l.jsonl"
    )
    result = cli("compare", base, cand, "--labels", labels, "-m", "mrr", "--format", "json")
    report = result.json()
    pairing = report["results"][0]["pairing"]
    assert pairing == {
        "paired": 3,
        "baseline_only": 1,
        "candidate_only": 2,
        "baseline_only_examples": ["q0"],
        "candidate_only_examples": ["q4", "q5"],
    }
    assert report["cells"][0]["delta"] == pytest.approx(0.5)
    table = cli("compare", base, cand, "--labels", labels, "-m", "mrr")
    assert "only in the baseline: q0" in table.out
    assert "only in the candidate: q4, q5" in table.out


@pytest.mark.parametrize(
    ("records", "fragments"),
    [
        (['{"query_id": "q1", "retrieved_ids": "a"}'], ("base.jsonl:1", "retrieved_ids", "list")),
        (
            ['{"query_id": "q1", "retrieved_ids": ["a"], "relevant_ids": ["z"]}'],
            ("cand.jsonl:1", "q1", "labeled differently"),
        ),
        (['{"retrieved_ids": ["a"]}'], ("base.jsonl:1", "query_id", "paired")),
        (
            [
                '{"query_id": "q1", "retrieved_ids": ["a"]}',
                '{"query_id": "q1", "retrieved_ids": ["a"]}',
            ],
            ("base.jsonl:2", "appears twice"),
        ),
    ],
    ids=["bad field", "conflicting labels", "no query id", "duplicate"],
)
def test_bad_input_is_one_line_and_exit_2(
    cli: RunCli, write_jsonl: WriteJsonl, records: list[str], fragments: tuple[str, ...]
) -> None:
    base = write_jsonl(records, "base.jsonl")
    cand = write_jsonl(
        ['{"query_id": "q1", "retrieved_ids": ["a"], "relevant_ids": ["z"]}'], "cand.jsonl"
    )
    if "labeled differently" in fragments:
        base = write_jsonl(
            ['{"query_id": "q1", "retrieved_ids": ["a"], "relevant_ids": ["a"]}'], "base.jsonl"
        )
    cli("compare", base, cand, "-m", "mrr").assert_one_line_error(*fragments)


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["only.jsonl"], "at least one candidate"),
        (["a.jsonl", "b.jsonl", "--baseline", "x"], "--variant-field"),
        (["a.jsonl", "b.jsonl", "--variant-field", "config", "--baseline", "x"], "one trace file"),
        (["a.jsonl", "b.jsonl", "--alpha", "2"], "alpha"),
        (["a.jsonl", "missing.jsonl"], "missing.jsonl"),
    ],
)
def test_usage_errors(cli: RunCli, write_jsonl: WriteJsonl, args: list[str], fragment: str) -> None:
    for name in ("only.jsonl", "a.jsonl", "b.jsonl"):
        write_jsonl([{"query_id": "q", "retrieved_ids": ["x"], "relevant_ids": ["x"]}], name)
    import os

    os.chdir(write_jsonl([], "dummy.jsonl").parent)
    cli("compare", *args).assert_one_line_error(fragment)


def test_real_subprocess_run_with_config_gates(
    run_cli: RunCli, ab_files: tuple[Path, ...], tmp_path: Path
) -> None:
    baseline, _, control = ab_files
    (tmp_path / "rankgate.toml").write_text(
        'segment_by = ["query_type"]\n[gates]\n"ndcg@10" = 0.2\n'
        '[segments.query_type.multi_hop.gates]\n"ndcg@10" = 0.99\n'
    )
    result = run_cli("compare", baseline, control, "-m", "ndcg@10")
    assert result.code == 1, result.err
    assert "query_type=multi_hop: ndcg@10" in result.out
    assert "candidate gates missed" in result.out
    assert result.out.strip().splitlines()[-1] == "FAIL · 1 candidate gate missed"


def test_trec_runs_with_qrels(cli: RunCli, tmp_path: Path) -> None:
    # q1: a run finds the relevant b at rank 2 (RR 1/2), b run at rank 1; q2: both at rank 1.
    (tmp_path / "a.run").write_text("q1 Q0 a 1 3\nq1 Q0 b 2 2\nq2 Q0 c 1 3\nq2 Q0 d 2 1\n")
    (tmp_path / "b.run").write_text("q1 Q0 b 1 3\nq1 Q0 a 2 2\nq2 Q0 c 1 3\nq2 Q0 d 2 1\n")
    (tmp_path / "q.txt").write_text("q1 0 b 1\nq2 0 c 1\n")
    result = cli(
        "compare",
        tmp_path / "a.run",
        tmp_path / "b.run",
        "--qrels",
        tmp_path / "q.txt",
        "-m",
        "mrr",
        "--format",
        "json",
    )
    cell = result.json()["cells"][0]
    assert (cell["baseline_mean"], cell["candidate_mean"], cell["delta"]) == (0.75, 1.0, 0.25)
    assert (cell["wins"], cell["ties"], cell["losses"]) == (1, 1, 0)


def test_same_report_across_runs_and_thread_counts(
    run_cli: RunCli, ab_files: tuple[Path, ...]
) -> None:
    baseline, regressed, _ = ab_files
    args = ("compare", baseline, regressed, "-m", "ndcg@10,mrr", "--segment-by", "query_type")
    reports = set()
    for threads in ("1", "4"):
        env = clean_env(OMP_NUM_THREADS=threads, OPENBLAS_NUM_THREADS=threads)
        for test in ("t", "randomization"):
            result = run_cli(*args, "--format", "json", "--test", test, env=env)
            assert result.code == 1, result.err
            reports.add((test, result.out))
    assert len(reports) == 2  # one report per test, whatever the thread count


def test_per_query_json_and_largest_losses(cli: RunCli, ab_files: tuple[Path, ...]) -> None:
    baseline, regressed, _ = ab_files
    result = cli("compare", baseline, regressed, "-m", "ndcg@10", "--format", "json", "--per-query")
    report = result.json()
    jsonschema.validate(report, comparison_schema())
    rows = report["per_query"][str(regressed)]
    assert len(rows) == 600
    worst = min(rows, key=lambda row: row["ndcg@10 delta"])
    table = cli("compare", baseline, regressed, "-m", "ndcg@10")
    losses = next(
        line for line in table.out.splitlines() if line.startswith("    overall ndcg@10:")
    )
    assert losses.split(": ")[1].startswith(f"{worst['query_id']} {worst['ndcg@10 delta']:+.4f}")
    cli("compare", baseline, regressed, "--per-query").assert_one_line_error("--format json")


# --- pairing: paired, unpaired, auto ---------------------------------------------------------------


def _variant_rows(
    seed: int, prefix: str, queries: int, worse_kind: str | None = None
) -> list[dict[str, Any]]:
    """Queries of one distribution (relevant document at a geometric rank), each with its own
    ID; in ``worse_kind`` queries the relevant document sits five ranks lower."""
    rng = np.random.default_rng(seed)
    rows = []
    for number in range(queries):
        kind = ("factual", "navigational", "how_to")[int(rng.integers(3))]
        rank = int(rng.geometric(0.4)) - 1 + (5 if kind == worse_kind else 0)
        docs = [f"d{i}" for i in range(20)]
        rows.append(
            {
                "query_id": f"{prefix}{number}",
                "retrieved_ids": docs,
                "relevant_ids": [docs[min(rank, 19)]],
                "kind": kind,
            }
        )
    return rows


def write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


@pytest.fixture
def split_files(tmp_path: Path) -> tuple[Path, Path]:
    return (
        write(tmp_path / "control.jsonl", _variant_rows(21, "a", 300)),
        write(tmp_path / "treatment.jsonl", _variant_rows(22, "b", 300, worse_kind="how_to")),
    )


def test_cli_auto_says_it_chose_unpaired_and_why(
    cli: RunCli, split_files: tuple[Path, Path]
) -> None:
    control, treatment = split_files
    table = cli("compare", control, treatment, "-m", "mrr", "--segment-by", "kind")
    assert table.code == 1, table.err
    assert "unpaired (Welch's t-test, two-sample bootstrap): 0% of the smaller side's" in table.out
    assert "auto pairs from 50%" in table.out
    report = cli(
        "compare", control, treatment, "-m", "mrr", "--segment-by", "kind", "--format", "json"
    ).json()
    design = report["results"][0]["design"]
    assert design["design"] == "unpaired" and design["requested"] == "auto"
    assert design["shared_share"] == 0.0
    assert report["settings"]["pairing"] == "auto"
    flagged = {
        c["segment"]["value"] if c["segment"] else "overall" for c in report["cells"] if c["flag"]
    }
    assert "kind=how_to" not in flagged and "how_to" in flagged
    assert {"factual", "navigational"}.isdisjoint(flagged)
    assert all(c["wins"] is None and c["design"] == "unpaired" for c in report["cells"])
    markdown = cli("compare", control, treatment, "-m", "mrr", "--format", "markdown").out
    assert (
        "Unpaired (Welch's t-test, two-sample bootstrap): 0% of the smaller side's queries are "
        "on both sides"
    ) in markdown
    junit = cli("compare", control, treatment, "-m", "mrr", "--format", "junit").out
    assert "unpaired: 300 baseline queries, 300 candidate queries" in junit
    html = cli("compare", control, treatment, "-m", "mrr", "--format", "html").out
    assert "Unpaired (Welch&#x27;s t-test, two-sample bootstrap): 0% of the smaller" in html


def test_cli_pairing_paired_refuses_disjoint_queries(
    cli: RunCli, split_files: tuple[Path, Path]
) -> None:
    control, treatment = split_files
    result = cli("compare", control, treatment, "-m", "mrr", "--pairing", "paired")
    assert result.code == 2
    assert "no query is in both" in result.err and "--pairing unpaired" in result.err
    assert len(result.err.strip().splitlines()) == 1


def test_cli_pairing_unpaired_on_a_replay_compares_the_means(cli: RunCli, tmp_path: Path) -> None:
    rows = _variant_rows(9, "q", 120)
    base = write(tmp_path / "b.jsonl", rows)
    same = write(tmp_path / "c.jsonl", rows)
    report = cli("compare", base, same, "-m", "mrr", "--pairing", "unpaired", "--format", "json")
    assert report.code == 0, report.err
    data = report.json()
    assert data["results"][0]["design"]["design"] == "unpaired"
    assert data["results"][0]["design"]["reason"].startswith("requested; 100%")
    (cell,) = data["cells"]
    assert cell["p_value"] == 1.0 and cell["delta"] == 0.0
