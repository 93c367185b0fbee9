"""Markdown reports, ready to paste into a pull request or a CI job summary.

Names and IDs come from traces and are untrusted: they are escaped so that they cannot break a
table, open a link or inject HTML, which GitHub's renderer would otherwise honour.

Two shapes: the full reports (``render_eval_markdown``, ``render_comparison_markdown``: every
table, for a job summary or a file), and the pull-request reports (``render_eval_pr_markdown``,
``render_comparison_pr_markdown``) for a comment about 700 pixels wide: the verdict in one line,
then only what needs a reviewer (regressions, missed gates, underpowered and label-limited
cells) in tables of few columns, and everything else collapsed. In those, untrusted text (trace
IDs, segment values, file names) is shown as a code span, inside which GitHub links nothing,
mentions nobody and renders no HTML.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from rankgate.compare import CandidateResult, Cell, Comparison
from rankgate.compare_unjudged import LABEL_LIMITED
from rankgate.evaluate import Evaluation
from rankgate.gates import OPERATORS, GateOutcome
from rankgate.report.console import (
    CORRECTION_NAMES,
    NO_GATES,
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
from rankgate.report.numbers import format_against, format_margin, format_threshold
from rankgate.report.unjudged_text import (
    LABEL_LIMITED_MARKER,
    judged_text,
    label_limited_text,
    range_text,
    shows_range,
)
from rankgate.segments import Group
from rankgate.spec import MetricSpec

__all__ = [
    "PR_DETAIL_ROWS",
    "PR_ROWS",
    "escape_markdown",
    "render_comparison_markdown",
    "render_comparison_pr_markdown",
    "render_eval_markdown",
    "render_eval_pr_markdown",
]

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
    from rankgate.report.ppi_text import label_source_line

    sources = label_source_line(summary.label_sources, evaluation.settings.label_source)
    if sources is not None:
        notes.append(f"- {escape_markdown(sources)}")
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
    if evaluation.ppi is not None:
        from rankgate.report.ppi_text import ppi_markdown

        lines += ["", *ppi_markdown(evaluation.ppi, escape_markdown)]
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


# --- pull-request reports ------------------------------------------------------------------------

#: Rows each pull-request table shows before it says how many more there are.
PR_ROWS = 20
#: Rows of the collapsed table of every other cell (or segment).
PR_DETAIL_ROWS = 100
# Untrusted text in a pull-request report is cut to this many characters.
_PR_TEXT_CHARS = 60


def _literal(text: str, *, table: bool, limit: int = _PR_TEXT_CHARS) -> str:
    """Untrusted ``text`` (an ID, a segment value, a file name) as a code span.

    Inside a code span GitHub renders no HTML, makes no link and mentions nobody. Line breaks
    are flattened; characters that are not printable (bidirectional controls, zero-width
    characters, NUL) show as ``\\uXXXX``, so nothing reorders or hides the text around them; a
    backtick, which would end the span, becomes a quote; long text is cut. In a table a ``|``
    would still split the row (tables are split before code spans are read), so it is
    backslash-escaped there, the one escape GitHub honours inside a code span in a table.
    """
    flat = " ".join(text.split())
    shown = "".join(char if char.isprintable() else f"\\u{ord(char):04x}" for char in flat).replace(
        "`", "'"
    )
    if len(shown) > limit:
        shown = shown[: limit - 3] + "..."
    if not shown:
        return "(empty)"
    if table:
        shown = shown.replace("|", "\\|")
    return f"`{shown}`"


def _prose(text: str) -> str:
    """Library text (a warning, a reason) as Markdown: escaped, and kept from becoming a mention
    (``@name`` after a space or at the start; ``ndcg@10`` is none) or an issue reference
    (``#123``, ``owner/repo#123``), which would notify people from a bot's comment: a zero-width
    space after the sign, written as an entity, breaks what GitHub matches and shows nothing."""
    escaped = _MENTION.sub("@&#8203;", escape_markdown(text))
    return _REFERENCE.sub(r"\\#&#8203;", escaped)


# What GitHub would read as a mention or an issue reference, in escaped text.
_MENTION = re.compile(r"(?<!\w)@(?=\w)")
_REFERENCE = re.compile(r"\\#(?=\d)")


def _group(segment: object) -> str:
    """A cell's or an outcome's group for a table: ``overall`` or the segment as a code span."""
    return "overall" if segment is None else _literal(str(segment), table=True)


def _fixed(value: float | None, digits: int = 4, signed: bool = False) -> str:
    if value is None or math.isnan(value):
        return "n/a"
    return f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"


def _more(hidden: int, where: str) -> list[str]:
    return [] if hidden <= 0 else ["", f"...and {counted(hidden, 'more row')}: {where}."]


_FULL_REPORT = "see the HTML report"


def render_comparison_pr_markdown(
    comparison: Comparison, *, rows: int = PR_ROWS, detail_rows: int = PR_DETAIL_ROWS
) -> str:
    """The comparison for a pull-request comment: the verdict in one line, then only the cells a
    reviewer must look at (regressions, missed gates, underpowered and label-limited cells),
    worst first and at most ``rows`` per table, then every other cell collapsed (at most
    ``detail_rows``).

    Columns stay few (group, metric, baseline, candidate, delta, 95% interval, adjusted p) so a
    table fits a 700-pixel comment; a ``candidate`` column is added only when there are several.
    """
    several = len(comparison.results) > 1
    regressions = sorted(comparison.regressions, key=lambda cell: cell.delta)
    misses = [
        (result.name, outcome) for result in comparison.results for outcome in result.gate_failures
    ]
    misses.sort(key=lambda item: _margin_key(item[1]))
    underpowered = list(comparison.underpowered)
    limited = list(comparison.label_limited)
    candidates = ", ".join(_literal(result.name, table=False) for result in comparison.results)
    lines = [
        _comparison_verdict(comparison, len(misses))
        + f" · baseline {_literal(comparison.baseline, table=False)}, "
        f"{'candidates' if several else 'candidate'} {candidates}",
    ]
    if regressions:
        lines += ["", "#### Regressions", "", *_cells_table(regressions[:rows], several)]
        lines += _more(len(regressions) - rows, _FULL_REPORT)
    if misses:
        lines += ["", "#### Missed gates", ""]
        lines += _gates_table(
            [outcome for _, outcome in misses[:rows]],
            [n for n, _ in misses[:rows]] if several else None,
        )
        lines += _more(len(misses) - rows, _FULL_REPORT)
    if underpowered:
        lines += [
            "",
            "#### Underpowered",
            "",
            "No regression was flagged, but these cells could not have seen a change of the size "
            "`min_detectable` asks for: add queries, or relax it.",
            "",
            *_underpowered_table(underpowered[:rows], several),
        ]
        lines += _more(len(underpowered) - rows, _FULL_REPORT)
    if limited:
        fails = comparison.significance.fail_on_label_limited
        lines += [
            "",
            "#### Label-limited",
            "",
            "The verdict of these cells changes with the labels of unjudged documents"
            + (" (they fail this run: `--fail-on-label-limited`)." if fails else "."),
            "",
            *_limited_table(limited[:rows], several),
        ]
        lines += _more(len(limited) - rows, _FULL_REPORT)
        if comparison.next_step is not None:
            lines += ["", f"**Next:** {_prose(comparison.next_step)}"]
    shown = {id(cell) for cell in (*regressions, *underpowered, *limited)}
    rest = [cell for cell in comparison.cells if id(cell) not in shown]
    lines += ["", *_comparison_details(comparison, rest, several, detail_rows)]
    return "\n".join(lines) + "\n"


def _comparison_verdict(comparison: Comparison, misses: int) -> str:
    """``**rankgate compare: FAIL** · 2 regressions, 1 missed gate`` (what failed, or what was
    checked when nothing did)."""
    parts = []
    if comparison.regressions:
        parts.append(counted(len(comparison.regressions), "regression"))
    if misses:
        parts.append(counted(misses, "missed gate"))
    if comparison.underpowered:
        parts.append(counted(len(comparison.underpowered), "underpowered cell"))
    if comparison.label_limited:
        parts.append(counted(len(comparison.label_limited), "label-limited cell"))
    if not comparison.regressions and not misses:
        parts.insert(0, "no regression, no missed gate")
    if comparison.improvements:
        parts.append(counted(len(comparison.improvements), "improvement"))
    parts.append(f"{counted(len(comparison.cells), 'cell')} compared")
    verdict = "PASS" if comparison.passed else "FAIL"
    return f"**rankgate compare: {verdict}** · " + ", ".join(parts)


def _margin_key(outcome: GateOutcome) -> float:
    return outcome.margin if outcome.margin is not None else float("-inf")


def _cells_table(cells: Sequence[Cell], several: bool, flag: bool = False) -> list[str]:
    head = "| candidate " if several else ""
    align = "|---" if several else ""
    rows = [
        f"{head}| group | metric | baseline | candidate | Δ | 95% CI | p adj |"
        + (" flag |" if flag else ""),
        f"{align}|---|---|--:|--:|--:|--:|--:|" + ("---|" if flag else ""),
    ]
    for cell in cells:
        lead = f"| {_literal(cell.candidate, table=True, limit=30)} " if several else ""
        low, high = cell.interval
        interval = "n/a" if math.isnan(low) else f"[{low:+.3f}, {high:+.3f}]"
        rows.append(
            f"{lead}| {_group(cell.segment)} | {escape_markdown(str(cell.metric))} "
            f"| {_fixed(cell.baseline_mean)} | {_fixed(cell.candidate_mean)} "
            f"| {_fixed(cell.delta, signed=True)} | {interval} "
            f"| {escape_markdown(format_p(cell.p_adjusted))} |"
            + (f" {_pr_status(cell)} |" if flag else "")
        )
    return rows


def _pr_status(cell: Cell) -> str:
    """A cell's flag in words, without symbols (a reader scanning the table for "regression")."""
    if cell.status == LABEL_LIMITED:
        return "label-limited"
    if cell.underpowered is not None:
        return "underpowered"
    if cell.status == "insufficient":
        return "too few queries"
    return cell.flag or ""


def _gates_table(outcomes: Sequence[GateOutcome], candidates: Sequence[str] | None) -> list[str]:
    head, align = ("| candidate ", "|---") if candidates is not None else ("", "")
    rows = [
        f"{head}| group | gate | value | margin | queries |",
        f"{align}|---|---|--:|--:|--:|",
    ]
    for index, outcome in enumerate(outcomes):
        lead = (
            f"| {_literal(candidates[index], table=True, limit=30)} "
            if candidates is not None
            else ""
        )
        gate = outcome.gate
        value = (
            "no value"
            if outcome.value is None
            else format_against(outcome.value, gate.threshold, 4)
        )
        margin = "n/a" if outcome.margin is None else format_margin(outcome.margin)
        insufficient = " (too few)" if outcome.status == "insufficient" else ""
        rows.append(
            f"{lead}| {_group(outcome.segment)} | {escape_markdown(str(gate.metric))} "
            f"{escape_markdown(gate.op)} {format_threshold(gate.threshold)} | {value} "
            f"| {margin} | {outcome.scored:,}{insufficient} |"
        )
    return rows


def _underpowered_table(cells: Sequence[Cell], several: bool) -> list[str]:
    head, align = ("| candidate ", "|---") if several else ("", "")
    rows = [
        f"{head}| group | metric | Δ | detectable | required | queries |",
        f"{align}|---|---|--:|--:|--:|--:|",
    ]
    for cell in cells:
        lead = f"| {_literal(cell.candidate, table=True, limit=30)} " if several else ""
        effect = cell.minimum_detectable_effect
        detectable = "n/a" if effect is None else f"≥{effect:.4f}"
        required = "n/a" if cell.min_detectable is None else f"{cell.min_detectable:.4f}"
        rows.append(
            f"{lead}| {_group(cell.segment)} | {escape_markdown(str(cell.metric))} "
            f"| {_fixed(cell.delta, signed=True)} | {detectable} | {required} | {cell.queries:,} |"
        )
    return rows


def _limited_table(cells: Sequence[Cell], several: bool) -> list[str]:
    head, align = ("| candidate ", "|---") if several else ("", "")
    rows = [
        f"{head}| group | metric | Δ by unjudged policy | judged b/c | pairs to judge |",
        f"{align}|---|---|---|--:|--:|",
    ]
    for cell in cells:
        lead = f"| {_literal(cell.candidate, table=True, limit=30)} " if several else ""
        evidence = cell.evidence
        deltas = (
            ""
            if evidence is None
            else ", ".join(f"{found.delta:+.4f} {found.policy}" for found in evidence.deltas)
        )
        pairs = "" if evidence is None else f"{evidence.unjudged_pairs:,}"
        rows.append(
            f"{lead}| {_group(cell.segment)} | {escape_markdown(str(cell.metric))} "
            f"| {escape_markdown(deltas)} | {judged_text(cell)} | {pairs} |"
        )
    return rows


def _comparison_details(
    comparison: Comparison, rest: Sequence[Cell], several: bool, detail_rows: int
) -> list[str]:
    """The collapsed section: how each candidate was compared, the warnings, and every other
    cell (improvements first)."""
    significance = comparison.significance
    lines = [
        f"<details><summary>Everything else: {counted(len(rest), 'other cell')}, pairing, "
        "settings</summary>",
        "",
        f"- Tests: {test_names(comparison)}, {CORRECTION_NAMES[significance.correction]} "
        f"correction, alpha {significance.alpha:g}, margin {significance.margin:g}.",
    ]
    for result in comparison.results:
        pairing = result.pairing
        if pairing.design == "unpaired":
            counts = (
                f"unpaired, {result.baseline.summary.scored:,} baseline and "
                f"{result.candidate.summary.scored:,} candidate queries scored"
            )
        else:
            counts = (
                f"{counted(pairing.paired, 'query')} paired ({pairing.baseline_only:,} only in "
                f"the baseline, {pairing.candidate_only:,} only in the candidate)"
            )
        reason = f"; {_prose(pairing.reason)}" if pairing.reason else ""
        lines.append(f"- Candidate {_literal(result.name, table=False)}: {counts}{reason}.")
    lines += [f"- Warning: {_prose(warning)}" for warning in comparison.warnings]
    ordered = sorted(rest, key=lambda cell: (cell.flag != "improvement", cell.segment is not None))
    if ordered and detail_rows > 0:
        lines += ["", *_cells_table(ordered[:detail_rows], several, flag=True)]
    lines += _more(len(ordered) - max(detail_rows, 0), _FULL_REPORT)
    return [*lines, "", "</details>"]


def render_eval_pr_markdown(
    evaluation: Evaluation,
    sources: Sequence[str],
    *,
    rows: int = PR_ROWS,
    detail_rows: int = PR_DETAIL_ROWS,
) -> str:
    """The evaluation for a pull-request comment: the verdict in one line, then only the missed
    gates and coverage minimums and the gates the missing labels could decide (at most ``rows``
    each), then the rest collapsed: passing gates, the means, and at most ``detail_rows``
    segments."""
    misses = sorted((o for o in evaluation.gates if not o.passed), key=_margin_key)
    coverage_misses = [check for check in evaluation.coverage_checks if not check.passed]
    undecided = _label_decided(evaluation)
    summary = evaluation.summary
    verdict, _, detail = eval_verdict_text(evaluation).partition(" · ")
    if verdict == NO_GATES:
        verdict, detail = "PASS", "no gates set"
    named = ", ".join(_literal(source, table=False) for source in sources)
    lines = [
        f"**rankgate eval: {verdict}** · {detail + ' · ' if detail else ''}"
        f"{counted(summary.in_means, 'query')} scored · {named}",
    ]
    if misses:
        lines += ["", "#### Missed gates", "", *_gates_table(misses[:rows], None)]
        lines += _more(len(misses) - rows, _FULL_REPORT)
    if coverage_misses:
        lines += ["", "#### Annotation coverage below its minimum", ""]
        lines += ["| group | coverage | minimum |", "|---|--:|--:|"]
        for check in coverage_misses[:rows]:
            coverage = "n/a" if check.coverage is None else f"{check.coverage:.1%}"
            lines.append(f"| {_group(check.segment)} | {coverage} | {check.minimum:.0%} |")
        lines += _more(len(coverage_misses) - rows, _FULL_REPORT)
    if undecided:
        lines += [
            "",
            "#### Label-limited",
            "",
            "These gates pass with every unjudged document counted relevant and fail with every "
            "one counted non-relevant (or the reverse): judging them decides the verdict.",
            "",
            "| group | gate | value | range over unjudged |",
            "|---|---|--:|--:|",
        ]
        for outcome, bounds in undecided[:rows]:
            gate = outcome.gate
            value = "n/a" if outcome.value is None else f"{outcome.value:.4f}"
            lines.append(
                f"| {_group(outcome.segment)} | {escape_markdown(str(gate.metric))} "
                f"{escape_markdown(gate.op)} {format_threshold(gate.threshold)} | {value} "
                f"| {range_text(bounds)} |"
            )
        lines += _more(len(undecided) - rows, _FULL_REPORT)
    lines += ["", *_eval_details(evaluation, misses, detail_rows)]
    return "\n".join(lines) + "\n"


def _label_decided(evaluation: Evaluation) -> list[tuple[GateOutcome, tuple[float, float]]]:
    """Gates on a mean whose verdict differs between the pessimistic and the optimistic reading
    of the unjudged documents, with that range."""
    groups = {group.key: group for group in evaluation.segments}
    found = []
    for outcome in evaluation.gates:
        if outcome.status == "insufficient" or outcome.statistic not in ("mean", "pessimistic"):
            continue
        gate = outcome.gate
        try:
            bounds = evaluation.unjudged_range(
                gate.metric, None if outcome.segment is None else groups.get(outcome.segment)
            )
        except KeyError:
            continue
        if bounds is None or not shows_range(bounds):
            continue
        check = OPERATORS[gate.op]
        if check(bounds[0], gate.threshold) != check(bounds[1], gate.threshold):
            found.append((outcome, bounds))
    return found


def _eval_details(
    evaluation: Evaluation, misses: Sequence[GateOutcome], detail_rows: int
) -> list[str]:
    summary = evaluation.summary
    skipped = ", ".join(f"{reason} {count:,}" for reason, count in summary.skipped.items() if count)
    lines = [
        "<details><summary>Everything else: passing gates, means, segments</summary>",
        "",
        f"- {counted(summary.read, 'record')} read, {summary.scored:,} scored, "
        f"{sum(summary.skipped.values()):,} skipped"
        + (f" ({skipped})" if skipped else "")
        + ("" if summary.coverage is None else f"; annotation coverage {summary.coverage:.1%}")
        + ".",
    ]
    lines += [f"- {_prose(line)}" for line in query_set_lines(evaluation)]
    lines += [f"- Warning: {_prose(warning)}" for warning in evaluation.warnings]
    missed = {id(outcome) for outcome in misses}
    passing = [outcome for outcome in evaluation.gates if id(outcome) not in missed]
    if passing:
        lines += ["", *_gates_table(passing[:detail_rows], None)]
        lines += _more(len(passing) - detail_rows, _FULL_REPORT)
    lines += ["", "| metric | mean | 95% CI |", "|---|--:|--:|"]
    for spec, mean in evaluation.means.items():
        low, high = evaluation.intervals[spec]
        interval = "" if math.isnan(low) else f"[{low:.4f}, {high:.4f}]"
        lines.append(f"| {escape_markdown(str(spec))} | {_fixed(mean)} | {interval} |")
    if evaluation.segments and detail_rows > 0:
        metrics = list(evaluation.metrics)
        lines += [
            "",
            "| segment | queries | "
            + " | ".join(escape_markdown(str(spec)) for spec in metrics)
            + " |",
            "|---|--:|" + "--:|" * len(metrics),
        ]
        for group in evaluation.segments[:detail_rows]:
            means = " | ".join(_fixed(group.means[spec]) for spec in metrics)
            lines.append(f"| {_group(group.key)} | {group.scored:,} | {means} |")
    lines += _more(len(evaluation.segments) - max(detail_rows, 0), _FULL_REPORT)
    return [*lines, "", "</details>"]
