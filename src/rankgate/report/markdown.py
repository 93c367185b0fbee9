"""Markdown reports, ready to paste into a pull request or a CI job summary.

Names and IDs come from traces and are untrusted: they are escaped so that they cannot break a
table, open a link or inject HTML, which GitHub's renderer would otherwise honour.
"""

from __future__ import annotations

import re

from rankgate.compare import CandidateResult, Cell, Comparison
from rankgate.report.console import CORRECTION_NAMES, TEST_NAMES, format_p

__all__ = ["escape_markdown", "render_comparison_markdown"]

# Characters with a meaning in GitHub-flavoured Markdown tables and inline text.
_SPECIAL = re.compile(r"([\\`*_{}\[\]()<>#+!|~&])")
_FLAGS = {"regression": "🔻 regression", "improvement": "🟢 improvement"}


def escape_markdown(text: str) -> str:
    """``text`` as literal Markdown: special characters backslash-escaped, line breaks flattened."""
    return _SPECIAL.sub(r"\\\1", " ".join(text.split()))


def render_comparison_markdown(comparison: Comparison) -> str:
    """Verdict first, then per candidate: the overall table, flagged segment cells, and every
    segment in a collapsed section."""
    significance = comparison.significance
    lines = [
        f"### rankgate compare · baseline `{_code(comparison.baseline)}`",
        "",
        f"**{'PASS' if comparison.passed else 'FAIL'}** · regressions: "
        f"{len(comparison.regressions)}, improvements: {len(comparison.improvements)}, cells: "
        f"{len(comparison.cells)} · {TEST_NAMES[significance.test]}, "
        f"{CORRECTION_NAMES[significance.correction]} correction, alpha {significance.alpha:g}, "
        f"margin {significance.margin:g}",
    ]
    for result in comparison.results:
        lines += ["", *_candidate(result)]
    return "\n".join(lines) + "\n"


def _candidate(result: CandidateResult) -> list[str]:
    pairing = result.pairing
    summary = result.candidate.summary
    lines = [
        f"#### candidate `{_code(result.name)}`",
        "",
        f"{pairing.paired} queries paired ({pairing.baseline_only} only in the baseline, "
        f"{pairing.candidate_only} only in the candidate); {summary.scored} scored, "
        f"{sum(summary.skipped.values())} skipped.",
        "",
        *_table([cell for cell in result.cells if cell.segment is None]),
    ]
    flagged = [cell for cell in result.cells if cell.segment is not None and cell.flag]
    if flagged:
        lines += ["", "Flagged segments:", "", *_table(flagged)]
    misses = [outcome for outcome in result.gate_failures]
    if misses:
        lines += ["", "Gates missed by the candidate:", ""]
        for outcome in misses:
            where = "overall" if outcome.segment is None else str(outcome.segment)
            value = "no value" if outcome.value is None else f"{outcome.value:.4f}"
            lines.append(
                f"- {escape_markdown(where)}: {outcome.gate.metric} = {value}, needs "
                f"{escape_markdown(outcome.gate.op)} {outcome.gate.threshold:g}"
            )
    segments = [cell for cell in result.cells if cell.segment is not None]
    if segments:
        lines += [
            "",
            "<details><summary>Every segment</summary>",
            "",
            *_table(segments),
            "",
            "</details>",
        ]
    return lines


def _table(cells: list[Cell]) -> list[str]:
    rows = [
        "| segment | metric | n | baseline | candidate | Δ | Δ % | 95% CI of Δ | p adj | W/T/L | |",
        "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|---|",
    ]
    for cell in cells:
        relative = "n/a" if cell.relative_delta is None else f"{cell.relative_delta:+.1%}"
        insufficient = " (too few)" if cell.status == "insufficient" else ""
        rows.append(
            f"| {escape_markdown(cell.group)} | {escape_markdown(str(cell.metric))} | "
            f"{cell.queries}{insufficient} | {cell.baseline_mean:.4f} | {cell.candidate_mean:.4f} "
            f"| {cell.delta:+.4f} | {relative} | [{cell.interval[0]:+.4f}, "
            f"{cell.interval[1]:+.4f}] | {escape_markdown(format_p(cell.p_adjusted))} | "
            f"{cell.wins}/{cell.ties}/{cell.losses} | {_FLAGS.get(cell.flag or '', '')} |"
        )
    return rows


def _code(text: str) -> str:
    """Text for inside a code span: backticks and line breaks cannot end or break it."""
    return " ".join(text.replace("`", "'").split())
