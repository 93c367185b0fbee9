"""Markdown reports, ready to paste into a pull request or a CI job summary.

Names and IDs come from traces and are untrusted: they are escaped so that they cannot break a
table, open a link or inject HTML, which GitHub's renderer would otherwise honour.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from rankgate.compare import CandidateResult, Cell, Comparison
from rankgate.compare_unjudged import LABEL_LIMITED
from rankgate.evaluate import Evaluation
from rankgate.report.console import (
    CORRECTION_NAMES,
    UNDERPOWERED_MARKER,
    counted,
    depth_text,
    detectable_line,
    eval_verdict_text,
    format_p,
    query_set_lines,
    shown_query_id,
    test_names,
    underpowered_text,
    win_tie_loss,
)
from rankgate.report.numbers import format_against, format_threshold
from rankgate.report.unjudged_text import (
    LABEL_LIMITED_MARKER,
    judged_text,
    label_limited_text,
    range_text,
    shows_range,
)
from rankgate.segments import Group
from rankgate.spec import MetricSpec

__all__ = ["escape_markdown", "render_comparison_markdown", "render_eval_markdown"]

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
        f"{len(comparison.regressions)}, improvements: {len(comparison.improvements)}, "
        f"label-limited: {len(comparison.label_limited)}, "
        + (f"underpowered: {len(comparison.underpowered)}, " if comparison.underpowered else "")
        + f"cells: {len(comparison.cells)} · {test_names(comparison)}, "
        f"{CORRECTION_NAMES[significance.correction]} correction, alpha {significance.alpha:g}, "
        f"margin {significance.margin:g}",
    ]
    if comparison.warnings:
        lines += ["", *_warnings(comparison.warnings)]
    if comparison.next_step is not None:
        lines += ["", f"**Next:** {escape_markdown(comparison.next_step)}"]
    for result in comparison.results:
        lines += ["", *_candidate(result)]
    return "\n".join(lines) + "\n"


def _candidate(result: CandidateResult) -> list[str]:
    pairing = result.pairing
    summary = result.candidate.summary
    if pairing.design == "unpaired":
        counts = (
            f"Unpaired (Welch's t-test, two-sample bootstrap): {escape_markdown(pairing.reason)}. "
            f"Baseline {result.baseline.summary.scored:,} scored, candidate {summary.scored:,} "
            f"scored, {sum(summary.skipped.values()):,} skipped."
        )
    else:
        counts = (
            f"{counted(pairing.paired, 'query')} paired ({pairing.baseline_only:,} only in the "
            f"baseline, {pairing.candidate_only:,} only in the candidate); {summary.scored:,} "
            f"scored, {sum(summary.skipped.values()):,} skipped."
        )
        if pairing.reason:
            counts += f" Paired: {escape_markdown(pairing.reason)}."
    lines = [
        f"#### candidate `{_code(result.name)}`",
        "",
        counts,
        "",
        *_table([cell for cell in result.cells if cell.segment is None]),
    ]
    detectable = detectable_line(result)
    if detectable is not None:
        lines += ["", escape_markdown(detectable[0].upper() + detectable[1:]) + "."]
    if result.underpowered:
        lines += [
            "",
            'Underpowered (`min_detectable`: this "no regression" could not have seen a change '
            "of the size asked for):",
            "",
            *(f"- {escape_markdown(underpowered_text(cell))}" for cell in result.underpowered),
        ]
    flagged = [
        cell
        for cell in result.cells
        if cell.segment is not None and (cell.flag or cell.status == LABEL_LIMITED)
    ]
    if flagged:
        lines += ["", "Flagged segments:", "", *_table(flagged)]
    if result.label_limited:
        lines += [
            "",
            "Label-limited (the verdict changes with the labels of unjudged documents; judge "
            "the pairs, add the labels and compare again):",
            "",
            *(f"- {escape_markdown(label_limited_text(cell))}" for cell in result.label_limited),
        ]
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
        "| segment | metric | n | baseline | candidate | Δ | Δ % | 95% CI of Δ | p adj | W/T/L "
        "| judged b/c | |",
        "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|",
    ]
    for cell in cells:
        relative = "n/a" if cell.relative_delta is None else f"{cell.relative_delta:+.1%}"
        insufficient = " (too few)" if cell.status == "insufficient" else ""
        rows.append(
            f"| {escape_markdown(cell.group)} | {escape_markdown(str(cell.metric))} | "
            f"{cell.queries}{insufficient} | {cell.baseline_mean:.4f} | {cell.candidate_mean:.4f} "
            f"| {cell.delta:+.4f} | {relative} | [{cell.interval[0]:+.4f}, "
            f"{cell.interval[1]:+.4f}] | {escape_markdown(format_p(cell.p_adjusted))} | "
            f"{win_tie_loss(cell)} | {judged_text(cell)} | {_status(cell)} |"
        )
    return rows


def _status(cell: Cell) -> str:
    if cell.status == LABEL_LIMITED and cell.evidence is not None:
        return f"{LABEL_LIMITED_MARKER} ({counted(cell.evidence.unjudged_pairs, 'pair')})"
    if cell.underpowered is not None:
        return UNDERPOWERED_MARKER
    return _FLAGS.get(cell.flag or "", "")


def _warnings(warnings: Sequence[str]) -> list[str]:
    """Each warning as a list item, then a blank line; nothing when there are none."""
    if not warnings:
        return []
    return [f"- ⚠️ {escape_markdown(warning)}" for warning in warnings] + [""]


def _code(text: str) -> str:
    """Text for inside a code span: backticks and line breaks cannot end or break it."""
    return " ".join(text.replace("`", "'").split())


def _summary_notes(evaluation: Evaluation) -> list[str]:
    """The query set (with the first queries without a trace) and the served depth, as list
    items; query IDs are data, so each is escaped."""
    notes = [
        f"- {escape_markdown(line)}"
        for line in query_set_lines(evaluation)
        if not line.startswith("missing_trace, first")
    ]
    summary = evaluation.summary
    if summary.missing_examples:
        listed = ", ".join(f"`{_code(shown_query_id(q))}`" for q in summary.missing_examples)
        notes.append(
            f"- missing_trace, first {len(summary.missing_examples)} of "
            f"{summary.missing_trace:,}: {listed}"
        )
    depth = depth_text(summary, evaluation.settings.served_k)
    if depth is not None:
        notes.append(f"- {escape_markdown(depth)}")
    return [*notes, ""] if notes else []


def _segment_mean(evaluation: Evaluation, group: Group, spec: MetricSpec) -> str:
    mean = group.means[spec]
    if math.isnan(mean):
        return "n/a"
    bounds = evaluation.unjudged_range(spec, group)
    spread = f" ({range_text(bounds, 3)})" if bounds is not None and shows_range(bounds) else ""
    return f"{mean:.4f}{spread}"


def render_eval_markdown(evaluation: Evaluation, sources: Sequence[str]) -> str:
    """Verdict, the gate table with margins, the overall means, and segments collapsed."""
    summary = evaluation.summary
    # The terminal's words, with the leading PASS / FAIL (or "no gates set") in bold.
    verdict, _, detail = eval_verdict_text(evaluation).partition(" · ")
    named = ", ".join(f"`{_code(source)}`" for source in sources)
    lines = [
        f"### rankgate eval · {named}",
        "",
        f"**{verdict}** · {detail + ' · ' if detail else ''}"
        f"{counted(summary.read, 'record')} read, {summary.scored:,} scored, "
        f"{sum(summary.skipped.values()):,} skipped ("
        + ", ".join(f"{reason} {count}" for reason, count in summary.skipped.items())
        + ")"
        + ("" if summary.coverage is None else f" · annotation coverage {summary.coverage:.1%}"),
        "",
        *_summary_notes(evaluation),
        *_warnings(evaluation.warnings),
    ]
    gated = sorted(
        evaluation.gates,
        key=lambda o: (o.passed, o.margin if o.margin is not None else float("-inf")),
    )
    if gated:
        lines += [
            "| | segment | gate | value | margin | queries |",
            "|---|---|---|--:|--:|--:|",
        ]
        for outcome in gated:
            mark = {"pass": "✅", "fail": "❌", "insufficient": "➖"}[outcome.status]
            if outcome.status == "insufficient" and not outcome.passed:
                mark = "❌"
            where = "overall" if outcome.segment is None else str(outcome.segment)
            value = (
                "n/a"
                if outcome.value is None
                else format_against(outcome.value, outcome.gate.threshold, 4)
            )
            margin = "n/a" if outcome.margin is None else f"{outcome.margin:+.4f}"
            lines.append(
                f"| {mark} | {escape_markdown(where)} | {outcome.gate.metric} "
                f"{escape_markdown(outcome.gate.op)} {format_threshold(outcome.gate.threshold)} "
                f"| {value} | {margin} | {outcome.scored:,} |"
            )
        lines.append("")
    for check in evaluation.coverage_checks:
        where = "overall" if check.segment is None else str(check.segment)
        coverage = "n/a" if check.coverage is None else f"{check.coverage:.1%}"
        mark = "✅" if check.passed else "❌"
        lines.append(
            f"- {mark} {escape_markdown(where)}: annotation coverage {coverage} "
            f"(minimum {check.minimum:.0%})"
        )
    if evaluation.coverage_checks:
        lines.append("")
    ranges = {spec: evaluation.unjudged_range(spec) for spec in evaluation.metrics}
    ranged = any(shows_range(bounds) for bounds in ranges.values())
    if ranged:
        lines += [
            "| metric | mean | 95% interval | range over unjudged documents |",
            "|---|--:|--:|--:|",
        ]
    else:
        lines += ["| metric | mean | 95% interval |", "|---|--:|--:|"]
    for spec, mean in evaluation.means.items():
        low, high = evaluation.intervals[spec]
        interval = "" if math.isnan(low) else f"[{low:.4f}, {high:.4f}]"
        shown = "n/a" if math.isnan(mean) else f"{mean:.4f}"
        bounds = ranges[spec]
        spread = range_text(bounds) if bounds is not None and shows_range(bounds) else ""
        lines.append(f"| {spec} | {shown} | {interval} |" + (f" {spread} |" if ranged else ""))
    if ranged:
        lines += [
            "",
            "Range over unjudged documents: the mean with every unjudged retrieved document "
            "counted non-relevant (`unjudged=nonrelevant`, the pessimistic value) and counted "
            "relevant (`unjudged=relevant`).",
        ]
    if evaluation.segments:
        metrics = list(evaluation.metrics)
        lines += [
            "",
            "<details><summary>Every segment</summary>",
            "",
            "| segment | queries | coverage | " + " | ".join(map(str, metrics)) + " |",
            "|---|--:|--:|" + "--:|" * len(metrics),
        ]
        for group in evaluation.segments:
            coverage = "n/a" if group.coverage is None else f"{group.coverage:.0%}"
            means = " | ".join(_segment_mean(evaluation, group, spec) for spec in metrics)
            lines.append(
                f"| {escape_markdown(group.name)} | {group.scored} | {coverage} | {means} |"
            )
        lines += ["", "</details>"]
    return "\n".join(lines) + "\n"
