"""The terminal report: counts, a metric table with gates and margins, and a one-line verdict."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from rankgate.compare import CandidateResult, Cell, Comparison
from rankgate.compare_unjudged import LABEL_LIMITED, judged_depth
from rankgate.evaluate import Evaluation, Summary
from rankgate.gates import GateOutcome
from rankgate.power import DETECTABLE_POWER
from rankgate.report.numbers import format_against, format_margin, format_threshold
from rankgate.report.unjudged_text import (
    LABEL_LIMITED_MARKER,
    judged_text,
    label_limited_text,
    range_text,
    shows_range,
)
from rankgate.segments import Group

__all__ = [
    "NO_GATES",
    "UNDERPOWERED_MARKER",
    "Style",
    "counted",
    "depth_text",
    "detectable_line",
    "detectable_text",
    "eval_verdict_text",
    "format_p",
    "query_set_lines",
    "render_comparison",
    "render_comparison_verdict",
    "render_table",
    "render_verdict",
    "shown_query_id",
    "underpowered_text",
]


# What every eval report says when nothing was checked: the run passes, but nothing was gated.
NO_GATES = "no gates set"

# Nouns whose plural is not the singular plus "s".
_IRREGULAR = {
    "query": "queries",
    "scored query": "scored queries",
    "candidate gate": "candidate gates",
}


def counted(number: int, singular: str, plural: str | None = None) -> str:
    """``number`` with the noun in the form it takes: "1 query", "2 queries", "1,000 records".

    Every count a report or the command line prints goes through here, so that no message reads
    "1 queries". ``plural`` defaults to the known irregular form, else the singular plus "s".
    """
    if number == 1:
        return f"1 {singular}"
    return f"{number:,} {plural or _IRREGULAR.get(singular, singular + 's')}"


@dataclass(frozen=True, slots=True)
class Style:
    """ANSI styling, or none (``Style(False)``) for pipes, files, CI logs and ``NO_COLOR``."""

    enabled: bool

    def _wrap(self, code: str, text: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if self.enabled else text

    def good(self, text: str) -> str:
        return self._wrap("32", text)

    def bad(self, text: str) -> str:
        return self._wrap("31;1", text)

    def dim(self, text: str) -> str:
        return self._wrap("2", text)

    def bold(self, text: str) -> str:
        return self._wrap("1", text)


def render_table(evaluation: Evaluation, sources: Sequence[str], style: Style) -> str:
    """The full terminal report: counts, overall metrics with gates, segments, failures, verdict."""
    lines = [style.bold("rankgate eval") + "  " + ", ".join(sources), ""]
    lines += _counts(evaluation)
    lines += _warnings(evaluation.warnings, style)
    lines.append("")
    lines += _overall_table(evaluation, style)
    for field_name in dict.fromkeys(group.key.field for group in evaluation.segments if group.key):
        lines.append("")
        lines += _segment_table(evaluation, field_name, style)
    if evaluation.segments:
        lines.append(style.dim("  ! misses a gate   * fewer scored queries than min_queries"))
    if evaluation.ppi is not None:
        from rankgate.report.ppi_text import ppi_lines

        lines += ["", *ppi_lines(evaluation.ppi, style)]
    failures = _failures(evaluation)
    if failures:
        lines += ["", style.bad("what failed, worst first:")]
        lines += [f"  {line}" for line in failures]
    insufficient = [o for o in evaluation.gates if o.status == "insufficient"]
    if insufficient:
        segments = sorted({str(o.segment) for o in insufficient})
        verdict = (
            "failures (strict)" if evaluation.policy.strict_segments else "neither pass nor fail"
        )
        lines += [
            "",
            f"insufficient data ({verdict}): {', '.join(segments)} "
            f"(fewer than their min_queries scored queries)",
        ]
    lines.append("")
    lines.append(render_verdict(evaluation, style))
    return "\n".join(lines) + "\n"


def _warnings(warnings: Sequence[str], style: Style) -> list[str]:
    """The evaluation's warnings (a segment rule that matched nothing, a field most queries lack):
    they leave the verdict alone but say how far to trust it, so they come before the tables."""
    return [style.bad("warning: ") + warning for warning in warnings]


# A query ID longer than this is cut when listed.
_SHOWN_ID_CHARS = 60


def shown_query_id(query_id: str) -> str:
    """A query ID as a report lists it: as it is when printable, else quoted with escapes (a line
    break or a terminal escape in an ID must not break or colour the report); long ones cut."""
    text = query_id if query_id.isprintable() else repr(query_id)
    return text if len(text) <= _SHOWN_ID_CHARS else text[: _SHOWN_ID_CHARS - 3] + "..."


def query_set_lines(evaluation: Evaluation) -> list[str]:
    """What the known query set held and what became of its queries without a trace, in the
    words every eval report uses (plain text: each format escapes it); none when no set is known."""
    summary = evaluation.summary
    if summary.query_set is None or summary.expected_queries is None:
        return []
    missing = summary.missing_trace
    head = (
        f"query set ({summary.query_set}): {counted(summary.expected_queries, 'query')}, "
        f"{missing:,} without a trace (missing_trace; not records, so outside 'read')"
    )
    if summary.missing_scored:
        head += (
            f"; {summary.missing_scored:,} scored 0 on every metric (segment value (missing)), "
            f"so the means cover {counted(summary.in_means, 'query')}"
        )
    elif missing:
        head += "; left out of the means (--missing-trace zero scores them 0)"
    lines = [head]
    if summary.missing_examples:
        listed = ", ".join(shown_query_id(q) for q in summary.missing_examples)
        lines.append(
            f"missing_trace, first {len(summary.missing_examples)} of {missing:,}: {listed}"
        )
    if summary.query_set == "queries":
        lines.append(
            f"{counted(summary.outside_set, 'record')} of queries outside the query set "
            "(outside_set; scored as the rest)"
        )
    return lines


def depth_text(summary: Summary, served_k: int | None) -> str | None:
    """The served depth in one line, or None when nothing was scored from a trace."""
    depth = summary.served_depth
    if depth is None:
        return None
    text = (
        f"served depth: median {depth.median:g} IDs per ranking, 10th percentile {depth.p10:g} "
        f"(over {counted(depth.queries, 'scored ranking')})"
    )
    return text if served_k is None else f"{text} · users see {served_k} (served_k)"


def _counts(evaluation: Evaluation) -> list[str]:
    summary = evaluation.summary
    skipped = summary.skipped
    reasons = ", ".join(f"{reason} {count}" for reason, count in skipped.items())
    coverage = "n/a" if summary.coverage is None else f"{summary.coverage:.1%}"
    lines = [
        f"{counted(summary.read, 'record')} read: {summary.scored:,} scored, "
        f"{sum(skipped.values()):,} skipped ({reasons})",
        f"annotation coverage {coverage}{_judged(evaluation, evaluation.overall)} · "
        f"{counted(summary.duplicates_dropped, 'duplicate ID')} dropped from scored rankings · "
        f"relevant = grade >= {evaluation.settings.relevance_threshold:g}",
    ]
    from rankgate.report.ppi_text import label_source_line

    sources = label_source_line(summary.label_sources, evaluation.settings.label_source)
    if sources is not None:
        lines.append(sources)
    if summary.doc_ids is not None:
        lines.append(
            f"scored as documents (--doc-id {shlex.quote(summary.doc_ids)}): "
            f"{counted(summary.chunks_collapsed, 'later chunk')} of ranked documents collapsed"
        )
    lines += query_set_lines(evaluation)
    depth = depth_text(summary, evaluation.settings.served_k)
    if depth is not None:
        lines.append(depth)
    if evaluation.settings.label_filter.active:
        lines.append(
            f"stale labels removed: {summary.labels_removed_stale:,} not in the corpus, "
            f"{summary.labels_removed_expired:,} too old; "
            f"{counted(summary.lost_all_relevant, 'query')} lost every relevant label "
            "(counted under no_relevant)"
        )
    if summary.invalid_examples:
        lines.append(
            f"skipped as invalid (first {len(summary.invalid_examples)} of {skipped['invalid']}):"
        )
        lines.extend(f"  {example}" for example in summary.invalid_examples)
    return lines


def _overall_table(evaluation: Evaluation, style: Style) -> list[str]:
    overall_gates: dict[str, list[GateOutcome]] = {}
    for gated in evaluation.gates:
        if gated.segment is None:
            overall_gates.setdefault(str(gated.gate.metric), []).append(gated)
    ranges = {spec: evaluation.unjudged_range(spec) for spec in evaluation.metrics}
    ranged = any(shows_range(bounds) for bounds in ranges.values())
    header = ("metric", "mean", "95% interval", *((UNJUDGED_HEADER,) if ranged else ()))
    rows: list[tuple[str, ...]] = [(*header, "gate", "margin", "result")]
    for spec, mean in evaluation.means.items():
        name = str(spec)
        outcomes: list[GateOutcome | None] = list(overall_gates.get(name, [])) or [None]
        first_gate = outcomes[0]
        # Enough digits that a mean which misses its threshold never prints equal to it.
        against = first_gate.gate.threshold if first_gate is not None else mean
        shown_mean = "n/a" if mean != mean else format_against(mean, against, 4)
        for index, outcome in enumerate(outcomes):
            first = index == 0
            bounds = ranges[spec]
            spread = range_text(bounds) if first and bounds and shows_range(bounds) else ""
            row = (
                name if first else "",
                shown_mean if first else "",
                _interval(evaluation.intervals.get(spec)) if first else "",
                *((spread,) if ranged else ()),
            )
            if outcome is None:
                rows.append((*row, "", "", ""))
            else:
                rows.append((*row, *_gate_cells(outcome)))
    lines = _grid(rows, style, right=(1, 2, 3, 5) if ranged else (1, 2, 4))
    if ranged:
        lines.append(style.dim(UNJUDGED_NOTE))
    return lines


#: The column of the range unjudged documents leave, and what it means.
UNJUDGED_HEADER = "range over unjudged"
UNJUDGED_NOTE = (
    "  range over unjudged: the mean with every unjudged retrieved document counted non-relevant "
    "(unjudged=nonrelevant, the pessimistic value) and counted relevant (unjudged=relevant); "
    "shown where they differ"
)


def _segment_table(evaluation: Evaluation, field_name: str, style: Style) -> list[str]:
    groups = [g for g in evaluation.segments if g.key is not None and g.key.field == field_name]
    failed = {(str(o.segment), str(o.gate.metric)) for o in evaluation.gates if o.status == "fail"}
    metrics = list(evaluation.metrics)
    judged = str(evaluation.judged) if evaluation.judged is not None else "judged"
    stale = evaluation.settings.label_filter.active
    stale_header = ("labels removed", "lost all relevant") if stale else ()
    rows: list[tuple[str, ...]] = [
        (f"by {field_name}", "queries", "coverage", judged, *stale_header, *map(str, metrics))
    ]
    for group in groups:
        cells = []
        for spec in metrics:
            mean = group.means.get(spec, float("nan"))
            text = "n/a" if mean != mean else f"{mean:.4f}"
            bounds = evaluation.unjudged_range(spec, group)
            if bounds is not None and shows_range(bounds):
                text += f" ({range_text(bounds, 3)})"
            cells.append(text + ("!" if (str(group.key), str(spec)) in failed else ""))
        coverage = "n/a" if group.coverage is None else f"{group.coverage:.0%}"
        scored = f"{group.scored}" + ("*" if _insufficient(evaluation, group.key) else "")
        judged_share = group.means.get(evaluation.judged) if evaluation.judged else None
        judged_text = (
            "n/a" if judged_share is None or judged_share != judged_share else f"{judged_share:.0%}"
        )
        stale_cells = (
            (
                str(group.labels_removed_stale + group.labels_removed_expired),
                str(group.lost_all_relevant),
            )
            if stale
            else ()
        )
        rows.append(
            (
                group.key.value if group.key else "",
                scored,
                coverage,
                judged_text,
                *stale_cells,
                *cells,
            )
        )
    return _grid(rows, style, right=tuple(range(1, len(rows[0]))))


def _judged(evaluation: Evaluation, group: Group) -> str:
    """ ", 83% of the top 10 judged" for the coverage line; empty when nothing was scored."""
    spec = evaluation.judged
    share = group.means.get(spec, float("nan")) if spec is not None else float("nan")
    if spec is None or share != share:
        return ""
    depth = f"top {spec.k}" if spec.k is not None else "rankings"
    return f", {share:.0%} of the {depth} judged ({spec})"


def _insufficient(evaluation: Evaluation, key: object) -> bool:
    return any(o.segment == key and o.status == "insufficient" for o in evaluation.gates)


def _failures(evaluation: Evaluation) -> list[str]:
    """Every missed gate and coverage minimum, the largest miss first."""
    misses = [o for o in evaluation.gates if not o.passed and o.status == "fail"]
    misses.sort(key=lambda o: o.margin if o.margin is not None else float("-inf"))
    lines = [_miss(outcome) for outcome in misses]
    lines += [
        f"{'overall' if c.segment is None else c.segment}: annotation coverage "
        f"{'n/a' if c.coverage is None else f'{c.coverage:.1%}'} is below the minimum "
        f"{c.minimum:.0%}: too few labeled queries to trust this evaluation (a coverage problem, "
        "not a quality one)"
        for c in evaluation.coverage_checks
        if not c.passed
    ]
    insufficient_strict = [
        o for o in evaluation.gates if o.status == "insufficient" and not o.passed
    ]
    lines += [
        f"{o.segment}: {o.gate.metric} has only {counted(o.scored, 'scored query')} "
        "(strict segments)"
        for o in insufficient_strict
    ]
    return lines


def _gate_cells(outcome: GateOutcome) -> tuple[str, str, str]:
    statistic = "" if outcome.statistic == "mean" else f" ({outcome.statistic.split('_')[0]})"
    margin = outcome.margin
    result = {"pass": "pass", "fail": "FAIL", "insufficient": "n/a"}[outcome.status]
    return (
        f"{outcome.gate.op} {format_threshold(outcome.gate.threshold)}{statistic}",
        "n/a" if margin is None else _signed(margin),
        result,
    )


def _interval(bounds: tuple[float, float] | None) -> str:
    if bounds is None or bounds[0] != bounds[0]:
        return ""
    return f"[{bounds[0]:.4f}, {bounds[1]:.4f}]"


def _grid(rows: list[tuple[str, ...]], style: Style, right: tuple[int, ...]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for number, row in enumerate(rows):
        cells = [
            cell.rjust(widths[i]) if i in right else cell.ljust(widths[i])
            for i, cell in enumerate(row)
        ]
        text = "  " + "  ".join(cells).rstrip()
        if number == 0:
            text = style.dim(text)
        elif "FAIL" in row or any(cell.endswith("!") for cell in row):
            text = style.bad(text)
        lines.append(text)
    return lines


def eval_verdict_text(evaluation: Evaluation) -> str:
    """The verdict in the words every eval report uses: "no gates set", "PASS · 3 of 3 checks
    passed" or "FAIL · 1 of 3 checks failed"; without the scored count or the worst miss."""
    checks = len(evaluation.gates) + len(evaluation.coverage_checks)
    if not checks:
        return NO_GATES
    failed = sum(not o.passed for o in evaluation.gates)
    failed += sum(not c.passed for c in evaluation.coverage_checks)
    if not failed:
        return f"PASS · {checks:,} of {counted(checks, 'check')} passed"
    return f"FAIL · {failed:,} of {counted(checks, 'check')} failed"


def render_verdict(evaluation: Evaluation, style: Style) -> str:
    """One line a CI log can be grepped for: PASS or FAIL, and what missed by how much."""
    # The queries the means cover: with missing_trace="zero", the missing ones too.
    scored = evaluation.summary.in_means
    verdict = eval_verdict_text(evaluation)
    if verdict == NO_GATES:
        note = "" if scored else " (no query could be scored)"
        return f"{verdict} · {counted(scored, 'query')} scored{note}"
    if verdict.startswith("PASS"):
        return style.good(f"{verdict} · {counted(scored, 'query')} scored")
    failures = _failures(evaluation)
    worst = failures[0] if failures else ""
    more = f" (and {len(failures) - 1} more)" if len(failures) > 1 else ""
    return style.bad(f"{verdict}: {worst}{more}")


def _miss(outcome: GateOutcome) -> str:
    gate = outcome.gate
    where = "" if outcome.segment is None else f"{outcome.segment}: "
    threshold = format_threshold(gate.threshold)
    if outcome.value is None or outcome.margin is None:
        return f"{where}{gate.metric} has no value (no query scored), needs {gate.op} {threshold}"
    value = format_against(outcome.value, gate.threshold, 4)
    statistic = "" if outcome.statistic == "mean" else f" ({outcome.statistic.replace('_', ' ')})"
    return (
        f"{where}{gate.metric} = {value}{statistic}, needs {gate.op} {threshold} "
        f"(margin {_signed(outcome.margin)}, {counted(outcome.scored, 'query')})"
    )


def _signed(margin: float) -> str:
    return format_margin(margin)


# --- comparisons ----------------------------------------------------------------------------------

_MARKERS = {"regression": "▼ regression", "improvement": "▲ improvement"}
#: The marker of a cell that fails ``min_detectable`` (every report format shows it).
UNDERPOWERED_MARKER = "✗ underpowered"


def _marker(cell: Cell) -> str:
    if cell.status == LABEL_LIMITED and cell.evidence is not None:
        return f"{LABEL_LIMITED_MARKER} ({counted(cell.evidence.unjudged_pairs, 'pair')})"
    if cell.underpowered is not None:
        return UNDERPOWERED_MARKER
    return _MARKERS.get(cell.flag or "", "")


def detectable_text(cell: Cell) -> str:
    """A cell's minimum detectable |delta| for a table: ``"≥0.0310"``; ``"n/a"`` when it cannot
    be estimated; empty for a flagged cell (it detected its change)."""
    if cell.flag is not None:
        return ""
    effect = cell.minimum_detectable_effect
    return "n/a" if effect is None else f"≥{effect:.4f}"


def detectable_line(result: CandidateResult) -> str | None:
    """One line for the overall cells that are not flagged: ``"could detect |Δ ndcg@10| >= 0.0310,
    |Δ mrr| >= 0.0420 (overall; 80% power, two-sided, alpha 0.0083 per cell)"``; None when every
    overall cell is flagged."""
    shown = []
    alpha = None
    for cell in result.cells:
        if cell.segment is not None or cell.flag is not None:
            continue
        alpha = cell.detectable_alpha
        effect = cell.minimum_detectable_effect
        shown.append(
            f"|Δ {cell.metric}| >= {effect:.4f}"
            if effect is not None
            else f"|Δ {cell.metric}| n/a (no spread to estimate it from)"
        )
    if not shown:
        return None
    level = "" if alpha is None else f", two-sided, alpha {alpha:.2g} per cell"
    return f"could detect {', '.join(shown)} (overall; {DETECTABLE_POWER:.0%} power{level})"


def underpowered_text(cell: Cell) -> str:
    """One sentence for a cell that fails ``min_detectable`` (empty for any other)."""
    if cell.underpowered is None:
        return ""
    return f"{cell.group} {cell.metric}: {cell.underpowered}"


TEST_NAMES = {"t": "paired t-test", "randomization": "paired randomization (sign-flip) test"}
CORRECTION_NAMES = {"holm": "Holm", "bh": "Benjamini-Hochberg"}


def render_comparison(comparison: Comparison, style: Style) -> str:
    """The terminal report of ``rankgate compare``: per candidate, pairing and counts, a side-by-side
    table of every metric per segment with flags, missed gates, then the verdict."""
    significance = comparison.significance
    cells = len(comparison.cells)
    lines = [
        style.bold("rankgate compare") + f"  baseline {comparison.baseline}",
        f"{test_names(comparison)} · {CORRECTION_NAMES[significance.correction]} "
        f"correction over {counted(cells, 'cell')} · alpha {significance.alpha:g} · margin "
        f"{significance.margin:g} · 95% {interval_names(comparison)} "
        f"({comparison.settings.resamples} resamples, seed {comparison.settings.seed})",
    ]
    lines.append(
        "records read: "
        + ", ".join(
            f"{name} {count}"
            + (f" ({comparison.invalid[name]} invalid)" if comparison.invalid.get(name) else "")
            for name, count in comparison.read.items()
        )
    )
    if comparison.labels_source is not None:
        lines.append(f"labels from {comparison.labels_source} and the traces that carry them")
    if comparison.invalid_examples:
        total = sum(comparison.invalid.values())
        lines.append(f"skipped as invalid (first {len(comparison.invalid_examples)} of {total}):")
        lines += [f"  {example}" for example in comparison.invalid_examples]
    lines += _warnings(comparison.warnings, style)
    for result in comparison.results:
        lines += ["", *_candidate_section(result, style)]
    if comparison.ppi is not None:
        from rankgate.report.ppi_text import ppi_compare_lines

        lines += ["", *ppi_compare_lines(comparison.ppi, style)]
    if comparison.next_step is not None:
        lines += ["", f"next: {comparison.next_step}"]
    lines += ["", render_comparison_verdict(comparison, style)]
    return "\n".join(lines) + "\n"


def test_names(comparison: Comparison) -> str:
    designs = {result.pairing.design for result in comparison.results}
    names = []
    if "paired" in designs:
        names.append(TEST_NAMES[comparison.significance.test])
    if "unpaired" in designs:
        names.append("Welch's t-test (unpaired)")
    return " / ".join(names)


def interval_names(comparison: Comparison) -> str:
    designs = {result.pairing.design for result in comparison.results}
    names = []
    if "paired" in designs:
        names.append("BCa intervals of the delta")
    if "unpaired" in designs:
        names.append("two-sample bootstrap intervals of the difference")
    return " / ".join(names)


def _candidate_section(result: CandidateResult, style: Style) -> list[str]:
    pairing = result.pairing
    summary = result.candidate.summary
    skipped = ", ".join(f"{reason} {count}" for reason, count in summary.skipped.items())
    lines = [style.bold(f"candidate {result.name}")]
    if pairing.design == "unpaired":
        before = result.baseline.summary
        lines.append(
            f"unpaired (Welch's t-test, two-sample bootstrap): {pairing.reason} · baseline "
            f"{before.scored:,} scored, candidate {summary.scored:,} scored "
            f"({sum(summary.skipped.values()):,} skipped: {skipped})"
        )
    else:
        lines.append(
            f"{counted(pairing.paired, 'query')} paired, {pairing.baseline_only:,} only in the "
            f"baseline, {pairing.candidate_only:,} only in the candidate · of the paired: "
            f"{summary.scored:,} scored, {sum(summary.skipped.values()):,} skipped ({skipped})"
        )
        if pairing.reason:
            lines.append(f"paired: {pairing.reason}")
    for side, count, examples in (
        ("baseline", pairing.baseline_only, pairing.baseline_only_ids),
        ("candidate", pairing.candidate_only, pairing.candidate_only_ids),
    ):
        if count and pairing.design == "paired":
            more = f", ... ({count - len(examples)} more)" if count > len(examples) else ""
            lines.append(f"  only in the {side}: {', '.join(examples)}{more}")
    rows: list[tuple[str, ...]] = [
        (
            "segment",
            "metric",
            "n",
            "baseline",
            "candidate",
            "delta",
            "delta %",
            "95% CI of delta",
            "p adj",
            "d_z" if pairing.design == "paired" else "d",
            "W/T/L",
            "judged b/c",
            "could detect",
            "",
        )
    ]
    previous = None
    for cell in result.cells:
        group = cell.group
        rows.append(
            (
                group if group != previous else "",
                str(cell.metric),
                str(cell.queries) + ("*" if cell.status == "insufficient" else ""),
                f"{cell.baseline_mean:.4f}",
                f"{cell.candidate_mean:.4f}",
                _signed_plain(cell.delta),
                "n/a" if cell.relative_delta is None else f"{cell.relative_delta:+.1%}",
                f"[{_signed_plain(cell.interval[0])}, {_signed_plain(cell.interval[1])}]",
                format_p(cell.p_adjusted),
                "n/a" if cell.effect_size is None else f"{cell.effect_size:+.2f}",
                win_tie_loss(cell),
                judged_text(cell),
                detectable_text(cell),
                _marker(cell),
            )
        )
        previous = group
    lines += _flag_grid(rows, style)
    if any(cell.status == "insufficient" for cell in result.cells):
        lines.append(
            style.dim(
                "  * fewer paired queries than min_queries: reported, never flagged"
                if pairing.design == "paired"
                else "  * a side has fewer queries than min_queries: reported, never flagged"
            )
        )
    if any(cell.evidence is not None for cell in result.cells):
        lines.append(
            style.dim(
                "  judged b/c: judged@k of the baseline and the candidate (k: the metric's cutoff, "
                f"else {_depth_without_cutoff(result)}), the share of each top k that is labeled"
            )
        )
    detectable = detectable_line(result)
    if detectable is not None:
        lines.append(f"  {detectable}")
    if any(cell.flag is None for cell in result.cells):
        lines.append(
            style.dim(
                f"  could detect (column): the smallest |delta| each cell that is not flagged had "
                f"{DETECTABLE_POWER:.0%} power to flag at its per-cell alpha; rankgate plan sizes "
                "the next run"
            )
        )
    underpowered = result.underpowered
    if underpowered:
        lines.append(
            style.bad(
                '  underpowered (min_detectable): "no regression" here could not have seen a '
                "change of the size asked for:"
            )
        )
        lines += [f"    {underpowered_text(cell)}" for cell in underpowered]
    limited = result.label_limited
    if limited:
        lines.append(
            style.bold(
                "  label-limited: the verdict changes with the labels of unjudged documents "
                "(neither a regression nor an improvement until they are judged):"
            )
        )
        lines += [f"    {label_limited_text(cell)}" for cell in limited]
    regressions = sorted(
        (cell for cell in result.cells if cell.flag == "regression"), key=lambda c: c.delta
    )
    if regressions:
        lines.append("  queries that lost most, per regression:")
        for cell in regressions:
            losses = ", ".join(
                f"{query_id} {delta:+.4f}" for query_id, delta in result.largest_losses(cell)
            )
            lines.append(f"    {cell.group} {cell.metric}: {losses}")
    misses = _failures(result.candidate)
    if misses:
        lines += [style.bad("  candidate gates missed, worst first:")]
        lines += [f"    {line}" for line in misses]
    return lines


def _depth_without_cutoff(result: CandidateResult) -> int:
    depths = [c.evidence.depth for c in result.cells if c.evidence and c.metric.k is None]
    return depths[0] if depths else judged_depth(list(result.baseline.metrics))


def _flag_grid(rows: list[tuple[str, ...]], style: Style) -> list[str]:
    plain = _grid(rows, Style(False), right=tuple(range(2, 13)))
    styled = []
    for number, (text, row) in enumerate(zip(plain, rows, strict=True)):
        if number == 0:
            styled.append(style.dim(text))
        elif row[-1].endswith("regression") or row[-1] == UNDERPOWERED_MARKER:
            styled.append(style.bad(text))
        elif row[-1].endswith("improvement"):
            styled.append(style.good(text))
        elif row[-1].startswith(LABEL_LIMITED_MARKER):
            styled.append(style.bold(text))
        else:
            styled.append(text)
    return styled


def render_comparison_verdict(comparison: Comparison, style: Style) -> str:
    """One line: PASS or FAIL, and the worst regression or missed gate."""
    regressions = sorted(comparison.regressions, key=lambda cell: cell.delta)
    gate_misses = [o for result in comparison.results for o in result.gate_failures]
    cells = len(comparison.cells)
    improvements = len(comparison.improvements)
    limited = len(comparison.label_limited)
    limited_text = f" · {limited} label-limited" if limited else ""
    fails_on_limited = comparison.significance.fail_on_label_limited and limited
    underpowered = len(comparison.underpowered)
    if not regressions and not gate_misses and not fails_on_limited and not underpowered:
        gates = sum(len(result.candidate.gates) for result in comparison.results)
        gate_text = f" · {counted(gates, 'candidate gate')} passed" if gates else ""
        return style.good(
            f"PASS · no regression in {counted(cells, 'cell')} "
            f"({counted(improvements, 'improvement')}){limited_text}{gate_text}"
        )
    parts = []
    if regressions:
        worst = regressions[0]
        candidate = f"{worst.candidate}: " if len(comparison.results) > 1 else ""
        parts.append(
            f"{counted(len(regressions), 'regression')}, worst {candidate}{worst.group} {worst.metric} "
            f"{_signed_plain(worst.delta)} (p adj {format_p(worst.p_adjusted)})"
        )
    if gate_misses:
        parts.append(f"{counted(len(gate_misses), 'candidate gate')} missed")
    if underpowered:
        parts.append(f"{counted(underpowered, 'underpowered cell')} (min_detectable)")
    if fails_on_limited:
        parts.append(f"{counted(limited, 'label-limited cell')} (--fail-on-label-limited)")
    elif limited:
        parts.append(f"{limited} label-limited")
    return style.bad("FAIL · " + "; ".join(parts))


def win_tie_loss(cell: Cell) -> str:
    """Wins/ties/losses of a paired cell; "n/a" for an unpaired one (no query on both sides)."""
    if cell.wins is None or cell.ties is None or cell.losses is None:
        return "n/a"
    return f"{cell.wins}/{cell.ties}/{cell.losses}"


def format_p(p: float) -> str:
    """A p-value to read at a glance: four decimals, or "<0.0001"."""
    return "<0.0001" if p < 0.0001 else f"{p:.4f}"


def _signed_plain(value: float) -> str:
    return f"{value:+.4f}"
