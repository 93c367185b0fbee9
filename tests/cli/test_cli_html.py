"""The HTML reports, read as documents: self-contained, escaped, and the same numbers as JSON.

What a browser does with them (script runs, charts render, tables sort) is tested in
``test_cli_html_browser.py``.
"""

from __future__ import annotations

import base64
import hashlib
import re
from pathlib import Path

import numpy as np
import pytest
from lxml import html as lxml_html

from ab_data import AB_METRICS, ab_traces
from conftest import RunCli, WriteJsonl
from rankgate import evaluate
from rankgate.report.html import render_eval_html

# Payloads that would run if any trace text reached the page unescaped.
EVIL_ID = "<img src=x onerror=alert(1)>"
EVIL_TEXT = "</script><script>alert(2)</script>"
EVIL_SEGMENT = '"><svg onload=alert(3)>'
GATED = ["--segment-by", "query_type", "-g", "ndcg@10>=0.42", "-g", "mrr>=0.3"]


def parse(text: str) -> lxml_html.HtmlElement:
    return lxml_html.document_fromstring(text)


def sha256(text: str) -> str:
    return base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii")


def evil_rows() -> list[dict[str, object]]:
    baseline, _, _ = ab_traces(queries=200)
    rows = []
    for number, row in enumerate(baseline):
        if number % 7 == 0:
            ids = list(row["retrieved_ids"])  # type: ignore[call-overload]
            ids[0] = f"{EVIL_ID}{number}"
            grades = dict(row["relevance_scores"])  # type: ignore[call-overload]
            grades[ids[0]] = 3
            row = {
                **row,
                "retrieved_ids": ids,
                "relevance_scores": grades,
                "query": EVIL_TEXT,
                "query_type": EVIL_SEGMENT,
            }
        rows.append(row)
    return rows


@pytest.fixture
def traces(write_jsonl: WriteJsonl) -> Path:
    return write_jsonl(evil_rows(), "traces.jsonl")


def test_eval_html_carries_the_json_numbers(cli: RunCli, traces: Path, tmp_path: Path) -> None:
    report = cli("eval", traces, *GATED, "--format", "json").json()
    page_path = tmp_path / "report.html"
    result = cli("eval", traces, *GATED, "--format", "html", "--output", page_path)
    assert result.code == (0 if report["passed"] else 1)
    assert f"report written to {page_path}" in result.out
    doc = parse(page_path.read_text(encoding="utf-8"))
    verdict = doc.cssselect("section.verdict")[0].text_content()
    assert ("PASS" if report["passed"] else "FAIL") in verdict
    gate_rows = doc.cssselect("#gates tbody tr")
    assert len(gate_rows) == len(report["gates"])
    shown = {
        (row[1].text_content(), row[2].text_content().split(" ")[0]): row[5].text_content()
        for row in gate_rows
    }
    for gate in report["gates"]:
        where = "overall" if gate["segment"] is None else "query_type=" + gate["segment"]["value"]
        assert shown[(where, gate["metric"])] == f"{gate['margin']:+.4f}"
    means = {
        row[0].text_content(): row[1].text_content() for row in doc.cssselect("#means tbody tr")
    }
    for name, mean in report["metrics"].items():
        assert means[name] == f"{mean:.4f}"
    # Every metric has a histogram; every gated metric a per-segment chart with threshold marks.
    metrics = len(report["metrics"])
    assert len(doc.cssselect("figure[id^=chart-dist-] svg")) == metrics
    segment_charts = doc.cssselect("figure[id^=chart-segment-] svg")
    assert len(segment_charts) == 2
    groups = 1 + len(report["segments"])
    for svg in segment_charts:
        legend = len(svg.cssselect("g.legend line.threshold"))
        assert legend == 1
        assert len(svg.cssselect("line.threshold")) - legend == groups
    # Counts add up, and the page says so.
    summary = report["summary"]
    coverage = doc.cssselect("table.data caption")[0].text_content()
    assert f"of {summary['read']:,} records read" in coverage


def test_eval_html_lists_the_worst_queries_with_their_rankings(traces: Path) -> None:
    evaluation = evaluate(traces, ["ndcg@10", "mrr"], ["ndcg@10>=0.4"], worst=5)
    doc = parse(render_eval_html(evaluation, [str(traces)]))
    rows = doc.cssselect("#worst tbody tr")
    ndcg = evaluation.values[evaluation.metrics[0]]
    lowest = np.lexsort((np.arange(len(ndcg)), ndcg))[:5]
    listed = [row[0].text_content() for row in rows]
    # The five lowest on the gated metric come first, worst first, as a full sort would give.
    assert listed[:5] == [evaluation.query_ids[i] for i in lowest]
    first = rows[0]
    ranks = first.cssselect("ol.ranks li")
    example = next(e for e in evaluation.examples if e.query_id == listed[0])
    assert [li.cssselect(".doc")[0].text_content() for li in ranks] == [
        d for d, _ in example.ranked
    ]
    relevant = {doc for doc, _ in example.relevant}
    for li, (doc_id, _) in zip(ranks, example.ranked, strict=True):
        assert ("relevant" in li.classes) == (doc_id in relevant)


def test_trace_text_is_escaped_everywhere(cli: RunCli, traces: Path, tmp_path: Path) -> None:
    page_path = tmp_path / "report.html"
    # Keep every query in the worst-queries table, so every payload is on the page.
    cli("eval", traces, *GATED, "--format", "html", "--worst", "200", "-o", page_path)
    text = page_path.read_text(encoding="utf-8")
    for payload in (EVIL_ID, EVIL_TEXT, EVIL_SEGMENT):
        assert payload not in text
    doc = parse(text)
    # No element the payloads would have created exists; the one script is the page's own.
    assert doc.cssselect("img") == []
    assert [svg for svg in doc.cssselect("svg") if svg.get("onload")] == []
    (script,) = doc.cssselect("script")
    assert "alert" not in script.text_content()
    # The text itself survives, as text: in the worst-queries table and the segment names.
    cells = [cell.text_content() for cell in doc.cssselect("#worst td")]
    assert EVIL_TEXT in cells
    documents = [span.text_content() for span in doc.cssselect("ol.ranks .doc")]
    assert f"{EVIL_ID}0" in documents
    assert f"query_type={EVIL_SEGMENT}" in [
        row[0].text_content() for row in doc.cssselect("#segments tbody tr")
    ]


def test_page_is_self_contained_and_its_policy_admits_only_its_own_code(
    cli: RunCli, traces: Path, tmp_path: Path
) -> None:
    page_path = tmp_path / "report.html"
    cli("eval", traces, *GATED, "--format", "html", "-o", page_path)
    doc = parse(page_path.read_text(encoding="utf-8"))
    # Nothing to fetch: no src or href anywhere, no url() in the stylesheet, no @import.
    assert doc.xpath("//*[@src or @href]") == []
    (style,) = doc.cssselect("style")
    assert "url(" not in style.text_content() and "@import" not in style.text_content()
    (policy,) = doc.xpath("//meta[@http-equiv='Content-Security-Policy']/@content")
    directives = dict(part.strip().split(" ", 1) for part in policy.split(";"))
    assert directives["default-src"] == "'none'"
    assert directives["script-src"] == f"'sha256-{sha256(doc.cssselect('script')[0].text)}'"
    assert directives["style-src"] == f"'sha256-{sha256(style.text)}'"
    # No event-handler attribute anywhere (the policy would refuse it, so it would be a bug).
    assert doc.xpath("//@*[starts-with(name(), 'on')]") == []


def test_every_chart_is_accessible(cli: RunCli, traces: Path, tmp_path: Path) -> None:
    page_path = tmp_path / "report.html"
    cli("eval", traces, *GATED, "--format", "html", "-o", page_path)
    doc = parse(page_path.read_text(encoding="utf-8"))
    figures = doc.cssselect("figure")
    assert figures
    for figure in figures:
        (svg,) = figure.cssselect("svg")
        assert svg.get("role") == "img"
        labelled = svg.get("aria-labelledby").split()
        assert [doc.get_element_by_id(i).tag for i in labelled] == ["title", "desc"]
        assert figure.cssselect("figcaption")[0].text_content().strip()
        # The numbers behind the chart, as a table.
        assert figure.cssselect("details table tbody tr")


def test_compare_html_has_the_table_forest_plots_and_moved_queries(
    cli: RunCli, write_jsonl: WriteJsonl, tmp_path: Path
) -> None:
    baseline, regressed, _ = ab_traces(queries=600)
    base = write_jsonl(baseline, "baseline.jsonl")
    cand = write_jsonl(regressed, "candidate.jsonl")
    args = ["compare", base, cand, "-m", ",".join(AB_METRICS), "--segment-by", "query_type"]
    report = cli(*args, "--format", "json", "--per-query").json()
    page_path = tmp_path / "compare.html"
    result = cli(*args, "--format", "html", "-o", page_path)
    assert result.code == 1
    doc = parse(page_path.read_text(encoding="utf-8"))
    cells = report["cells"]
    rows = doc.cssselect("#c0-cells tbody tr")
    assert len(rows) == len(cells)
    for row, cell in zip(rows, cells, strict=True):
        assert row[5].text_content() == f"{cell['delta']:+.4f}"
        assert ("regression" in row.classes) == (cell["flag"] == "regression")
    # A forest plot per metric, one row per group, regressions drawn as such.
    forests = doc.cssselect("figure[id^=c0-forest-] svg")
    assert len(forests) == len(AB_METRICS[0].split(",")) + len(AB_METRICS) - 1
    regression_marks = sum(
        len(svg.cssselect("path.marker.regression")) - len(svg.cssselect("g.legend .regression"))
        for svg in forests
    )
    assert regression_marks == sum(c["flag"] == "regression" for c in cells) > 0
    assert len(doc.cssselect("#c0-split rect.split")) > 0
    # Per metric, the ten queries that lost most (by the JSON's per-query deltas) are listed.
    (per_query,) = report["per_query"].values()
    moved = {
        (r[0].text_content(), r[1].text_content()) for r in doc.cssselect("#c0-moved tbody tr")
    }
    for metric in ("ndcg@5", "ndcg@10"):
        losers = sorted(per_query, key=lambda row: row[f"{metric} delta"])[:10]
        assert {(row["query_id"], metric) for row in losers} <= moved


def test_html_beside_another_format_and_usage_errors(
    cli: RunCli, traces: Path, tmp_path: Path
) -> None:
    page_path = tmp_path / "side.html"
    result = cli("eval", traces, *GATED, "--format", "json", "--html", page_path)
    assert result.json()["summary"]["read"] == 200  # stdout is still pure JSON
    assert f"HTML report written to {page_path}" in result.err
    assert parse(page_path.read_text(encoding="utf-8")).cssselect("#worst tbody tr")
    for args, message in (
        (["--worst", "5"], "--worst applies to HTML reports"),
        (["--format", "html", "--html", page_path], "--format html already writes HTML"),
        (["--format", "html", "-o", page_path, "--html", page_path], "already writes HTML"),
        (["--html", tmp_path / "missing" / "dir" / "r.html"], "cannot write report"),
        (["--format", "html", "--worst", "-1"], "negative"),
    ):
        failed = cli("eval", traces, *args)
        assert failed.code == 2, args
        assert message in failed.err
        assert "Traceback" not in failed.err


def test_worst_zero_leaves_the_table_out(cli: RunCli, traces: Path, tmp_path: Path) -> None:
    page_path = tmp_path / "r.html"
    cli("eval", traces, "--format", "html", "--worst", "0", "-o", page_path)
    doc = parse(page_path.read_text(encoding="utf-8"))
    assert doc.cssselect("#worst") == []
    assert doc.cssselect("#means tbody tr")


def test_report_size_stays_small_at_100k_queries() -> None:
    rng = np.random.default_rng(0)
    rows = [
        {
            "query_id": f"q{i}",
            "query": f"question number {i}",
            "query_type": ("a", "b", "c", "d")[i % 4],
            "retrieved_ids": [f"d{j}" for j in rng.integers(0, 500, 10)],
            "relevant_ids": [f"d{j}" for j in rng.integers(0, 500, 2)],
        }
        for i in range(100_000)
    ]
    settings_segment = ["ndcg@10>=0.1"]
    from rankgate import Settings

    evaluation = evaluate(
        rows,
        ["ndcg@10", "mrr", "recall@10"],
        settings_segment,
        settings=Settings(segment_by=("query_type",)),
        worst=20,
    )
    page = render_eval_html(evaluation, ["synthetic"])
    assert evaluation.summary.scored == 100_000
    assert len(page.encode("utf-8")) < 1_000_000
    assert len(re.findall(r"<tr", page)) < 500


def test_every_gate_on_a_metric_is_drawn_and_any_miss_shows(
    cli: RunCli, traces: Path, tmp_path: Path
) -> None:
    page_path = tmp_path / "two.html"
    mean = cli("eval", traces, "-m", "ndcg@10", "--format", "json").json()["metrics"]["ndcg@10"]
    # An upper bound just under the overall mean: overall misses it, some segments may not.
    ceiling = round(mean - 0.01, 4)
    gates = ["--segment-by", "query_type", "-g", "ndcg@10>=0.1", "-g", f"ndcg@10<={ceiling}"]
    report = cli("eval", traces, *gates, "--format", "json").json()
    cli("eval", traces, *gates, "--format", "html", "-o", page_path)
    doc = parse(page_path.read_text(encoding="utf-8"))
    (chart,) = doc.cssselect("figure#chart-segment-0")
    rows = chart.cssselect("details tbody tr")
    by_group = {row[0].text_content(): row for row in rows}
    for group in ["overall", *(f"query_type={s['segment']['value']}" for s in report["segments"])]:
        row = by_group[group]
        assert row[3].text_content() == f">= 0.1, <= {ceiling:g}"
        outcomes = [
            g
            for g in report["gates"]
            if ("overall" if g["segment"] is None else f"query_type={g['segment']['value']}")
            == group
        ]
        failed = any(not g["passed"] for g in outcomes)
        assert (row[4].text_content() == "fail") == failed
    # Two threshold marks per bar, plus the legend's.
    marks = chart.cssselect("svg > line.threshold")
    assert len(marks) == 2 * len(rows)
    assert any(not g["passed"] for g in report["gates"])


def test_many_segments_chart_the_misses_and_table_them_all(
    cli: RunCli, write_jsonl: WriteJsonl, tmp_path: Path
) -> None:
    baseline, _, _ = ab_traces(queries=400)
    rows = [{**row, "bucket": f"b{i % 80}"} for i, row in enumerate(baseline)]
    traces = write_jsonl(rows, "many.jsonl")
    page_path = tmp_path / "many.html"
    args = ["--segment-by", "bucket", "-g", "ndcg@10>=0.55", "--min-queries", "1"]
    report = cli("eval", traces, *args, "--format", "json").json()
    cli("eval", traces, *args, "--format", "html", "-o", page_path)
    doc = parse(page_path.read_text(encoding="utf-8"))
    (chart,) = doc.cssselect("figure#chart-segment-0")
    charted = [row[0].text_content() for row in chart.cssselect("details tbody tr")]
    assert len(charted) == 30 and charted[0] == "overall"
    missed = {
        f"bucket={g['segment']['value']}"
        for g in report["gates"]
        if g["segment"] and not g["passed"]
    }
    assert missed and (missed <= set(charted) or len(missed) >= 29)
    assert len(doc.cssselect("#segments tbody tr")) == 81


def test_broken_unicode_and_long_ids_neither_crash_nor_sprawl(
    cli: RunCli, write_jsonl: WriteJsonl, tmp_path: Path
) -> None:
    long_id = "d" * 500
    lines = [
        '{"query_id": "\\ud800bad", "retrieved_ids": ["\\udfffx", "'
        + long_id
        + '"], "relevant_ids": ["'
        + long_id
        + '"]}'
    ]
    traces = write_jsonl(lines, "odd.jsonl")
    page_path = tmp_path / "odd.html"
    result = cli("eval", traces, "--format", "json", "--html", page_path)
    assert result.code == 0, result.err
    text = page_path.read_text(encoding="utf-8")
    assert "\\ud800bad" in text
    doc = parse(text)
    (clipped,) = [
        span for span in doc.cssselect("#worst span[title]") if span.get("title") == long_id
    ]
    assert len(clipped.text_content()) <= 80


def test_html_and_output_may_not_name_one_file_two_ways(
    cli: RunCli, traces: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    failed = cli(
        "eval", traces, "--format", "json", "-o", "same.out", "--html", tmp_path / "same.out"
    )
    assert failed.code == 2
    assert "name the same file" in failed.err
