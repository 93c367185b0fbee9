"""The prediction-powered estimates of ``eval --ppi`` in each report: the judge-only, human-only
and corrected means side by side, with their intervals and what the judge was worth in human-
labeled queries."""

from __future__ import annotations

import math
from typing import Any

from rankgate.ppi_eval import MIN_SAMPLED, PPIComparison, PPIEvaluation, estimate_rows
from rankgate.report.console import Style, counted, shown_query_id

__all__ = [
    "label_source_line",
    "ppi_compare_json",
    "ppi_compare_lines",
    "ppi_json",
    "ppi_lines",
    "ppi_markdown",
]


def label_source_line(label_sources: dict[str, int], label_source: str) -> str | None:
    """How many labels kept apart were a human's and how many a judge's; None when there were
    no labels kept apart, or only a human's under the default."""
    if not label_sources:
        return None
    human, judge = label_sources.get("human", 0), label_sources.get("judge", 0)
    if not judge and label_source == "all":
        return None
    chosen = "" if label_source == "all" else f" (--label-source {label_source})"
    return (
        f"labels kept apart{chosen}: {counted(human, 'human label')}, "
        f"{counted(judge, 'judge label')}"
        + (" (a human's grade of a pair wins over a judge's)" if human and judge else "")
    )


def _heading(ppi: PPIEvaluation) -> list[str]:
    lines = [
        f"prediction-powered estimates: judge labels on {counted(ppi.overall.total, 'query')}, "
        f"corrected by {counted(ppi.sampled, 'human-labeled query', 'human-labeled queries')} "
        f"of the declared sample {ppi.sample.name} ({ppi.sample.design}); "
        f"{ppi.confidence:.0%} intervals; the means, intervals and gates above are the PPI column's",
    ]
    if ppi.dropped:
        reasons = ", ".join(f"{reason} {count:,}" for reason, count in ppi.dropped.items())
        lines.append(f"sampled queries left out: {reasons}")
    if ppi.outside_sample:
        lines.append(
            f"{counted(ppi.outside_sample, 'query', 'queries')} with human labels outside the "
            "sample not used (not drawn at random)"
        )
    lines.extend(f"note: {note}" for note in ppi.notes)
    return lines


def _interval(estimate: dict[str, Any]) -> str:
    if estimate["mean"] is None:
        return "n/a"
    if estimate["low"] is None:
        return f"{estimate['mean']:.4f}"
    return f"{estimate['mean']:.4f} [{estimate['low']:.4f}, {estimate['high']:.4f}]"


def _rows(ppi: PPIEvaluation) -> list[list[str]]:
    table = []
    for row in estimate_rows(ppi):
        worth = row["effective_human_queries"]
        table.append(
            [
                row["segment"] or "overall",
                row["metric"],
                _interval(row["judge_only"]),
                f"{_interval(row['human_only'])} n={row['sampled']:,}",
                _interval(row["ppi"]),
                "n/a" if worth is None else f"{worth:,.0f}",
            ]
        )
    return table


HEADER = ["group", "metric", "judge only", "human only", "PPI", "worth (human queries)"]


def ppi_lines(ppi: PPIEvaluation, style: Style) -> list[str]:
    """The console block."""
    lines = [style.bold(line) if index == 0 else line for index, line in enumerate(_heading(ppi))]
    lines += _aligned([HEADER, *_rows(ppi)], style)
    short = [group for group in (ppi.overall, *ppi.segments) if not group.estimates]
    if short:
        names = ", ".join("overall" if g.key is None else str(g.key) for g in short)
        lines.append(f"  no estimate (fewer than {MIN_SAMPLED} sampled queries): {names}")
    return lines


def _aligned(rows: list[list[str]], style: Style) -> list[str]:
    """Rows as columns padded to their widest cell, the first (the header) dimmed."""
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    lines = []
    for index, row in enumerate(rows):
        text = "  " + "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        lines.append(style.dim(text.rstrip()) if index == 0 else text.rstrip())
    return lines


def ppi_markdown(ppi: PPIEvaluation, escape: Any) -> list[str]:
    """The Markdown block; ``escape`` makes untrusted text (names, segment values) safe in a
    table cell."""
    lines = [escape(line) for line in _heading(ppi)]
    lines += ["", "| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(escape(cell) for cell in row) + " |" for row in _rows(ppi)]
    return lines


def ppi_json(ppi: PPIEvaluation) -> dict[str, Any]:
    """The JSON report's ``ppi`` object."""
    return {
        "sample": ppi.sample.name,
        "design": ppi.sample.design,
        "sample_queries": len(ppi.sample.query_ids),
        "sampled": ppi.sampled,
        "queries": ppi.overall.total,
        "confidence": ppi.confidence,
        "dropped": dict(ppi.dropped),
        "outside_sample": ppi.outside_sample,
        "judge_labels": ppi.judge_labels,
        "human_labels": ppi.human_labels,
        "notes": list(ppi.notes),
        "estimates": estimate_rows(ppi),
    }


# --- compare ------------------------------------------------------------------------------------

COMPARE_HEADER = ["candidate", "metric", "judge only", "human only", "PPI", "p (adjusted)", ""]


def _delta(estimate: Any) -> str:
    if estimate.mean != estimate.mean:  # NaN
        return "n/a"
    return f"{estimate.mean:+.4f} [{estimate.low:+.4f}, {estimate.high:+.4f}]"


def ppi_compare_lines(ppi: PPIComparison, style: Style) -> list[str]:
    """The console block of ``compare --ppi``."""
    sampled = ", ".join(
        f"{shown_query_id(name)} {ppi.sampled[name]:,} of {ppi.paired[name]:,}"
        for name in ppi.paired
    )
    lines = [
        style.bold(
            f"prediction-powered deltas (candidate - baseline): judge labels on every paired "
            f"query, corrected by the declared sample {ppi.sample.name} ({ppi.sample.design}); "
            f"sampled of paired queries: {sampled}; {ppi.confidence:.0%} intervals; "
            f"{ppi.correction} correction at alpha {ppi.alpha:g}"
        )
    ]
    rows = [COMPARE_HEADER]
    for row in ppi.rows:
        result = row.result
        rows.append(
            [
                shown_query_id(row.candidate),
                str(row.metric),
                _delta(result.judge_only),
                _delta(result.human_only),
                _delta(result.ppi),
                f"{row.adjusted_p:.4f}",
                ("better" if result.ppi.mean > 0 else "worse") if row.significant else "",
            ]
        )
    lines += _aligned(rows, style)
    short = [name for name in ppi.paired if ppi.sampled[name] < MIN_SAMPLED]
    if short:
        lines.append(
            f"  no estimate (fewer than {MIN_SAMPLED} sampled queries paired): "
            + ", ".join(shown_query_id(name) for name in short)
        )
    lines.append(
        "  the verdict above is the comparison's own; the PPI deltas are reported beside it"
    )
    return lines


def ppi_compare_json(ppi: PPIComparison) -> dict[str, Any]:
    """The comparison JSON report's ``ppi`` object."""

    def estimate(value: Any) -> dict[str, Any]:
        return {
            "mean": _number(value.mean),
            "low": _number(value.low),
            "high": _number(value.high),
            "p_value": _number(value.p_value),
            "queries": value.queries,
        }

    return {
        "sample": ppi.sample.name,
        "design": ppi.sample.design,
        "sample_queries": len(ppi.sample.query_ids),
        "sampled": dict(ppi.sampled),
        "paired": dict(ppi.paired),
        "confidence": ppi.confidence,
        "correction": ppi.correction,
        "alpha": ppi.alpha,
        "deltas": [
            {
                "candidate": row.candidate,
                "metric": str(row.metric),
                "judge_only": estimate(row.result.judge_only),
                "human_only": estimate(row.result.human_only),
                "ppi": estimate(row.result.ppi),
                "adjusted_p": _number(row.adjusted_p),
                "significant": row.significant,
                "judge_weight": _number(row.result.lambda_),
                "effective_human_queries": _number(row.result.effective_queries),
            }
            for row in ppi.rows
        ],
    }


def _number(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None
