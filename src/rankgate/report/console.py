"""The terminal report: counts, a metric table with gates and margins, and a one-line verdict."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rankgate.evaluate import Evaluation
from rankgate.gates import GateOutcome
from rankgate.report.numbers import format_against, format_threshold

__all__ = ["Style", "render_table", "render_verdict"]


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
    """The full terminal report."""
    summary = evaluation.summary
    skipped = summary.skipped
    skipped_total = sum(skipped.values())
    lines = [style.bold("rankgate eval") + "  " + ", ".join(sources), ""]
    reasons = ", ".join(f"{reason} {count}" for reason, count in skipped.items())
    lines.append(
        f"{summary.read} records read: {summary.scored} scored, {skipped_total} skipped ({reasons})"
    )
    coverage = "n/a" if summary.coverage is None else f"{summary.coverage:.1%}"
    lines.append(
        f"annotation coverage {coverage} · {summary.duplicates_dropped} duplicate IDs dropped from scored rankings"
        f" · relevant = grade >= {evaluation.settings.relevance_threshold:g}"
    )
    if summary.invalid_examples:
        shown = len(summary.invalid_examples)
        lines.append(f"skipped as invalid (first {shown} of {skipped['invalid']}):")
        lines.extend(f"  {example}" for example in summary.invalid_examples)
    lines.append("")

    gates_by_metric: dict[str, list[GateOutcome]] = {}
    for gated in evaluation.gates:
        gates_by_metric.setdefault(str(gated.gate.metric), []).append(gated)
    rows = [("metric", "mean", "gate", "margin", "result")]
    for spec, mean in evaluation.means.items():
        name = str(spec)
        outcomes: list[GateOutcome | None] = list(gates_by_metric.get(name, [])) or [None]
        first_gate = outcomes[0]
        # Enough digits that a mean which misses its threshold never prints equal to it.
        against = first_gate.gate.threshold if first_gate is not None else mean
        shown_mean = "n/a" if mean != mean else format_against(mean, against, 4)
        for index, outcome in enumerate(outcomes):
            label = name if index == 0 else ""
            value = shown_mean if index == 0 else ""
            if outcome is None:
                rows.append((label, value, "", "", ""))
                continue
            margin = outcome.margin
            rows.append(
                (
                    label,
                    value,
                    f"{outcome.gate.op} {format_threshold(outcome.gate.threshold)}",
                    "n/a" if margin is None else _signed(margin),
                    "pass" if outcome.passed else "FAIL",
                )
            )
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    for number, row in enumerate(rows):
        cells = [
            row[0].ljust(widths[0]),
            row[1].rjust(widths[1]),
            row[2].ljust(widths[2]),
            row[3].rjust(widths[3]),
            row[4],
        ]
        text = "  " + "  ".join(cells).rstrip()
        if number == 0:
            text = style.dim(text)
        elif row[4] == "FAIL":
            text = style.bad(text)
        lines.append(text)
    lines.append("")
    lines.append(render_verdict(evaluation, style))
    return "\n".join(lines) + "\n"


def render_verdict(evaluation: Evaluation, style: Style) -> str:
    """One line a CI log can be grepped for: PASS or FAIL, and what missed by how much."""
    scored = evaluation.summary.scored
    if not evaluation.gates:
        note = "" if scored else " (no query could be scored)"
        return f"no gates set · {scored} queries scored{note}"
    failed = [outcome for outcome in evaluation.gates if not outcome.passed]
    total = len(evaluation.gates)
    if not failed:
        return style.good(f"PASS · {total} of {total} gates passed · {scored} queries scored")
    misses = "; ".join(_miss(outcome) for outcome in failed)
    return style.bad(f"FAIL · {len(failed)} of {total} gates failed: {misses}")


def _miss(outcome: GateOutcome) -> str:
    gate = outcome.gate
    threshold = format_threshold(gate.threshold)
    if outcome.value is None or outcome.margin is None:
        return f"{gate.metric} has no value (no query scored), needs {gate.op} {threshold}"
    value = format_against(outcome.value, gate.threshold, 4)
    return (
        f"{gate.metric} = {value}, needs {gate.op} {threshold} (margin {_signed(outcome.margin)})"
    )


def _signed(margin: float) -> str:
    """A margin with its sign, never a misleading "-0.0000" for a tiny miss."""
    return ("-" if margin < 0 else "+") + format_against(abs(margin), 0.0, 4)
