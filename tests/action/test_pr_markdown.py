"""The pull-request Markdown (``render_comparison_pr_markdown``, ``render_eval_pr_markdown``):
the verdict first, only what needs a reviewer in compact tables, the rest collapsed, and untrusted
text that cannot break a table, inject HTML, mention anyone or link anywhere."""

from __future__ import annotations

import re
from typing import Any

import pytest

from ab_data import ab_traces
from rankgate import Variant, compare, evaluate
from rankgate.compare import Comparison
from rankgate.evaluate import Settings
from rankgate.gates import GatePolicy
from rankgate.report.markdown import render_comparison_pr_markdown, render_eval_pr_markdown
from unjudged_ab_data import label_records, unjudged_ab

SETTINGS = Settings(segment_by=("query_type",), resamples=200)
METRICS = ["ndcg@5,10", "mrr"]
COMPACT_HEADER = "| group | metric | baseline | candidate | Δ | 95% CI | p adj |"


@pytest.fixture(scope="module")
def traces() -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    return ab_traces(queries=300, seed=11)


@pytest.fixture(scope="module")
def regressed(traces: Any) -> Comparison:
    baseline, worse, _ = traces
    return compare(baseline, worse, metrics=METRICS, settings=SETTINGS, gates=["mrr>=0.39"])


@pytest.fixture(scope="module")
def control(traces: Any) -> Comparison:
    baseline, _, same = traces
    return compare(baseline, same, metrics=METRICS, settings=SETTINGS)


def _section(markdown: str, heading: str) -> list[str]:
    """The first table under ``#### heading``: header, alignment and body rows."""
    after = markdown.split(f"#### {heading}\n\n", 1)[1].split("\n#### ", 1)[0]
    start = after.index("\n|") + 1 if not after.startswith("|") else 0
    table = after[start:].split("\n\n", 1)[0].splitlines()
    assert all(line.startswith("|") for line in table)
    return table


def _details(markdown: str) -> str:
    opened = markdown.index("<details><summary>")
    assert markdown.rstrip().endswith("</details>")
    return markdown[opened:]


def _cell_count(row: str) -> int:
    """Cells of a table row as GitHub splits it: on every ``|`` not escaped by a backslash."""
    return len(re.split(r"(?<!\\)\|", row)) - 2


def _outside_code(markdown: str) -> str:
    return re.sub(r"`[^`\n]*`", "", markdown)


def _emoji_free(text: str) -> bool:
    return not any(
        0x2600 <= ord(char) <= 0x27BF or 0x1F000 <= ord(char) <= 0x1FAFF or char == "\ufe0f"
        for char in text
    )


def test_the_verdict_comes_first_then_only_the_regressions(regressed: Comparison) -> None:
    markdown = render_comparison_pr_markdown(regressed)
    first = markdown.splitlines()[0]
    assert first.startswith("**rankgate compare: FAIL** · ")
    assert f"{len(regressed.regressions)} regressions" in first
    assert _emoji_free(markdown)

    table = _section(markdown, "Regressions")
    assert table[0] == COMPACT_HEADER
    body = table[2:]
    assert len(body) == len(regressed.regressions)
    assert body[0].startswith("| `query_type=multi_hop` | ndcg@10 |")  # the largest drop first
    assert all(row.split(" | ")[1].startswith("ndcg@") for row in body)

    # Every other cell is in the collapsed section, once.
    details = _details(markdown)
    rows = [line for line in details.splitlines() if line.startswith("| ")][1:]
    assert len(rows) + len(body) == len(regressed.cells)
    assert details.startswith(
        f"<details><summary>Everything else: {len(rows)} other cells, pairing, settings"
    )


def test_missed_gates_are_listed_with_their_margins(regressed: Comparison) -> None:
    misses = regressed.results[0].gate_failures
    assert misses
    table = _section(render_comparison_pr_markdown(regressed), "Missed gates")
    assert table[0] == "| group | gate | value | margin | queries |"
    assert len(table) - 2 == len(misses)
    margins = [float(row.split(" | ")[3]) for row in table[2:]]
    assert margins == sorted(margins) and all(margin < 0 for margin in margins)


def test_a_passing_comparison_says_so_and_shows_nothing_to_review(control: Comparison) -> None:
    markdown = render_comparison_pr_markdown(control)
    assert markdown.startswith("**rankgate compare: PASS** · no regression, no missed gate")
    assert "####" not in markdown
    assert "<details>" in markdown


def test_tables_stop_at_the_row_limit(regressed: Comparison) -> None:
    markdown = render_comparison_pr_markdown(regressed, rows=1, detail_rows=2)
    assert len(_section(markdown, "Regressions")) == 3
    hidden = len(regressed.regressions) - 1
    assert f"...and {hidden} more row{'s' if hidden > 1 else ''}: see the HTML report" in markdown
    details = _details(markdown)
    assert len([line for line in details.splitlines() if line.startswith("| ")]) == 3


def test_several_candidates_get_a_candidate_column(traces: Any) -> None:
    baseline, worse, same = traces
    comparison = compare(
        baseline,
        Variant("worse", worse),
        Variant("same", same),
        metrics=["ndcg@10"],
        settings=SETTINGS,
    )
    markdown = render_comparison_pr_markdown(comparison)
    assert "candidates `worse`, `same`" in markdown.splitlines()[0]
    table = _section(markdown, "Regressions")
    assert table[0] == "| candidate " + COMPACT_HEADER
    assert all(row.startswith("| `worse` |") for row in table[2:])


def test_underpowered_cells_fail_and_are_listed(traces: Any) -> None:
    baseline, _, same = traces
    comparison = compare(
        baseline,
        same,
        metrics=["ndcg@10"],
        settings=SETTINGS,
        policy=GatePolicy(min_queries=5, min_detectable=0.0001),
    )
    assert comparison.underpowered
    markdown = render_comparison_pr_markdown(comparison)
    assert markdown.startswith("**rankgate compare: FAIL** · no regression, no missed gate, ")
    table = _section(markdown, "Underpowered")
    assert table[0] == "| group | metric | Δ | detectable | required | queries |"
    assert len(table) - 2 == len(comparison.underpowered)
    assert all(row.split(" | ")[4] == "0.0001" for row in table[2:])


def test_label_limited_cells_are_listed_with_the_next_step() -> None:
    ab = unjudged_ab(queries=120)
    comparison = compare(
        ab.baseline,
        ab.surfacing,
        labels=label_records(ab.labels),
        metrics=["ndcg@10", "precision@5"],
        settings=Settings(resamples=200),
    )
    assert comparison.label_limited
    markdown = render_comparison_pr_markdown(comparison)
    assert markdown.startswith("**rankgate compare: PASS** · no regression, no missed gate, ")
    assert f"{len(comparison.label_limited)} label-limited cells" in markdown.splitlines()[0]
    table = _section(markdown, "Label-limited")
    assert table[0] == "| group | metric | Δ by unjudged policy | judged b/c | pairs to judge |"
    assert len(table) - 2 == len(comparison.label_limited)
    assert "**Next:** " in markdown


def _hostile_traces() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Two arms whose segment values are hostile, the second one regressing on them."""
    values = [
        "a|b",
        "<script>alert(1)</script>",
        "`code` ```fence",
        "@octocat and @org/team",
        "octo/repo#1 and #2",
        "line\nbreak\r\n| x | y |",
        "right\u202eto-left\u200b\x00",
        "</details><img src=x onerror=alert(1)>",
        "[link](https://evil.example) <https://evil.example>",
        "x" * 500,
    ]
    baseline, candidate = [], []
    for number in range(len(values) * 12):
        value = values[number % len(values)]
        docs = [f"d{i}" for i in range(10)]
        baseline.append(
            {
                "query_id": f"q{number}",
                "kind": value,
                "retrieved_ids": docs,
                "relevance_scores": {"d0": 2, "d1": 1},
            }
        )
        moved = docs[2:] + docs[:2] if number % 3 else docs
        candidate.append({"query_id": f"q{number}", "retrieved_ids": moved})
    return baseline, candidate


def _assert_safe(markdown: str) -> None:
    outside = _outside_code(markdown)
    for needle in (
        "<script",
        "<img",
        "</details><img",
        "](https://",
        "<https://",
        "\u202e",
        "\x00",
    ):
        assert needle not in outside, needle
    assert not re.search(r"(?<!\w)@octocat|(?<!\w)@org", outside)
    assert not re.search(r"#\d", outside.replace("\\#&#8203;", ""))
    assert "\u202e" not in markdown and "\x00" not in markdown and "\r" not in markdown
    # Every table row splits into as many cells as its header.
    lines = markdown.splitlines()
    for index, line in enumerate(lines):
        if line.startswith("|---"):
            header = lines[index - 1]
            width = _cell_count(header)
            body = lines[index + 1 :]
            for row in body[: next((i for i, r in enumerate(body) if not r.startswith("|")), None)]:
                assert _cell_count(row) == width, row
    # Code spans never hold a backtick and stay short.
    for span in re.findall(r"`([^`\n]*)`", markdown):
        assert len(span) <= 70


def test_hostile_segment_values_and_names_stay_literal() -> None:
    baseline, candidate = _hostile_traces()
    comparison = compare(
        Variant("main|<b>`x`</b>\n@octocat", baseline),
        Variant("pr#12 <script>", candidate),
        metrics=["ndcg@10", "mrr"],
        settings=Settings(segment_by=("kind",), resamples=200),
        policy=GatePolicy(min_queries=5),
        gates=["ndcg@10>=0.99"],
    )
    assert comparison.regressions
    markdown = render_comparison_pr_markdown(comparison)
    _assert_safe(markdown)
    first = markdown.splitlines()[0]
    assert "baseline `main|<b>'x'</b> @octocat`" in first  # outside a table, | needs no escape
    assert "`kind=a\\|b`" in markdown
    assert "`kind=right\\u202eto-left\\u200b\\u0000`" in markdown
    assert "`kind=" + "x" * 52 + "...`" in markdown

    evaluation = evaluate(
        baseline,
        ["ndcg@10", "mrr"],
        ["mrr>=0.99"],
        settings=Settings(segment_by=("kind",), resamples=200),
        policy=GatePolicy(min_queries=5),
    )
    eval_markdown = render_eval_pr_markdown(evaluation, ["traces|<script>.jsonl"])
    _assert_safe(eval_markdown)


def test_eval_verdict_misses_and_collapsed_rest(traces: Any) -> None:
    baseline, _, _ = traces
    evaluation = evaluate(
        baseline,
        METRICS,
        ["ndcg@10>=0.3", "mrr>=0.2"],
        settings=SETTINGS,
    )
    markdown = render_eval_pr_markdown(evaluation, ["baseline.jsonl"])
    assert markdown.startswith(
        "**rankgate eval: FAIL** · 2 of 8 checks failed · 300 queries scored · `baseline.jsonl`"
    )
    assert _emoji_free(markdown)
    misses = _section(markdown, "Missed gates")
    assert [row.split(" | ")[0] for row in misses[2:]] == ["| `query_type=factual`", "| overall"]
    details = _details(markdown)
    assert "| metric | mean | 95% CI |" in details
    assert "| segment | queries | ndcg@5 | ndcg@10 | mrr |" in details
    # The six gates that passed are in the collapsed section, not above it.
    passing = [line for line in details.splitlines() if "\\>=" in line]
    assert len(passing) == 6


def test_eval_without_gates_passes_in_words(traces: Any) -> None:
    evaluation = evaluate(traces[0], ["ndcg@10"], settings=Settings(resamples=0))
    markdown = render_eval_pr_markdown(evaluation, ["a.jsonl", "b.jsonl"])
    assert markdown.startswith(
        "**rankgate eval: PASS** · no gates set · 300 queries scored · `a.jsonl`, `b.jsonl`"
    )
    assert "####" not in markdown
