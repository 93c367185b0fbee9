"""One self-contained HTML file per run, for people who would rather look than read.

The page carries its own stylesheet, charts (inline SVG, see ``svg.py``) and a few lines of script
that sort and filter tables; it loads nothing over the network, so it opens the same from a CI
artifact on a plane. Trace data is untrusted, so:

* every ID, query text, segment value and source name passes through ``escape`` and appears
  only as element text or a quoted attribute value, never inside ``<script>`` or ``<style>``;
* ``escape`` (from ``svg.py``) also neutralises NUL, lone surrogates and bidirectional controls and
  clips any one string; a value from the data is shown inside ``<bdi>``, so its own direction
  (right-to-left text, say) cannot reorder the verdict or margin around it, and it is shortened to
  ``TEXT_SHOWN`` characters (IDs: ``ID_SHOWN``) with an ellipsis, the full length noted beside it
  and up to ``TOOLTIP_SHOWN`` characters in its tooltip: a 200 MB query text adds about 1 KB;
* the page declares a Content-Security-Policy that allows exactly its own script and stylesheet (by
  SHA-256 hash) and nothing else: no other inline script, no event-handler attributes, no remote
  loads. Even a string that slipped past escaping could not run.
"""

from __future__ import annotations

import base64
import hashlib
import math
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime

import numpy as np

from rankgate import __version__
from rankgate.compare import TIE_TOLERANCE, CandidateResult, Cell, Comparison
from rankgate.compare_unjudged import LABEL_LIMITED
from rankgate.evaluate import Evaluation, Summary
from rankgate.gates import GateOutcome
from rankgate.report.console import (
    CORRECTION_NAMES,
    UNDERPOWERED_MARKER,
    counted,
    detectable_line,
    format_p,
    interval_names,
    shown_query_id,
    test_names,
    underpowered_text,
    win_tie_loss,
)
from rankgate.report.numbers import format_against, format_margin, format_threshold
from rankgate.report.svg import (
    TOOLTIP_SHOWN,
    Bar,
    Interval,
    Split,
    bar_chart,
    clip_text,
    escape,
    forest_plot,
    histogram,
    split_bars,
)
from rankgate.report.unjudged_text import (
    LABEL_LIMITED_MARKER,
    judged_text,
    label_limited_text,
    range_text,
    shows_range,
)
from rankgate.segments import Group, segment_value
from rankgate.spec import MetricSpec
from rankgate.stats import NORMAL_FROM_QUERIES
from rankgate.worst import QueryExample

__all__ = ["render_comparison_html", "render_eval_html"]

# Queries listed per metric under "queries that moved most", each way.
MOVED_SHOWN = 10
# Groups drawn in one per-segment chart; the table lists every group.
CHARTED_GROUPS = 30
# Characters of an ID shown in a table cell; the rest is in its tooltip (up to TOOLTIP_SHOWN).
ID_SHOWN = 80
# Characters of any other value from the data shown in place: query text, segment values, names.
TEXT_SHOWN = 200

_STYLE = """
:root { color-scheme: light dark; --bg: #ffffff; --fg: #1f2328; --muted: #59636e;
  --line: #d1d9e0; --card: #f6f8fa; --pass: #1a7f37; --fail: #cf222e; --warn: #9a6700;
  --neutral: #0969da; --tie: #8c959f; --mark: #fff8c5; --threshold: #8250df; }
@media screen and (prefers-color-scheme: dark) { :root { --bg: #0d1117; --fg: #e6edf3; --muted: #9198a1;
  --line: #3d444d; --card: #151b23; --pass: #3fb950; --fail: #f85149; --warn: #d29922;
  --neutral: #4493f8; --tie: #6e7681; --mark: #3b2e00; --threshold: #d2a8ff; } }
@media print { :root { --bg: #ffffff; --fg: #000000; --muted: #333333; --line: #999999;
  --card: #ffffff; } * { print-color-adjust: exact; -webkit-print-color-adjust: exact; }
  input.filter, .filter-count { display: none; } section { break-inside: avoid-page; } }
body { background: var(--bg); color: var(--fg); margin: 0 auto; max-width: 1400px;
  padding: 16px 24px 48px; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; }
h1 { font-size: 22px; margin: 8px 0 4px; } h2 { font-size: 18px; margin: 28px 0 8px;
  border-bottom: 1px solid var(--line); padding-bottom: 4px; } h3 { font-size: 15px; }
.meta, .note { color: var(--muted); } code, .id { font-family: ui-monospace, monospace;
  font-size: 12.5px; overflow-wrap: anywhere; }
.verdict { border: 2px solid; border-radius: 8px; padding: 10px 14px; margin: 12px 0;
  font-size: 16px; } .verdict.pass { border-color: var(--pass); }
.verdict.fail { border-color: var(--fail); } .verdict strong { font-size: 20px; margin-right: 8px; }
.verdict.pass strong, .status.pass, .value.improvement { color: var(--pass); }
.verdict.fail strong, .status.fail, .value.regression { color: var(--fail); }
.status.insufficient { color: var(--warn); }
table { border-collapse: collapse; margin: 8px 0; }
th, td { border-bottom: 1px solid var(--line); padding: 4px 8px; text-align: left;
  vertical-align: top; } td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
th button { background: none; border: 0; color: inherit; font: inherit; cursor: pointer;
  padding: 0; text-align: inherit; } th button::after { content: " \\2195";
  color: var(--muted); } th[aria-sort=ascending] button::after { content: " \\2191"; }
th[aria-sort=descending] button::after { content: " \\2193"; }
tr.fail td { background: color-mix(in srgb, var(--fail) 10%, transparent); }
tr.regression td { background: color-mix(in srgb, var(--fail) 10%, transparent); }
tr.improvement td { background: color-mix(in srgb, var(--pass) 10%, transparent); }
.figure { margin: 12px 0 20px; } figcaption { color: var(--muted); font-size: 13px; }
.charts { display: flex; flex-wrap: wrap; gap: 8px 28px; }
svg.chart { max-width: 100%; height: auto; font: 11px system-ui, sans-serif; }
svg.chart text { fill: var(--fg); } svg.chart .tick, svg.chart .axis-title { fill: var(--muted); }
svg.chart .axis { stroke: var(--fg); } svg.chart .grid { stroke: var(--line); stroke-width: 0.5; }
svg.chart .bar.pass { fill: var(--pass); } svg.chart .bar.fail { fill: var(--fail); }
svg.chart .bar.insufficient { fill: var(--warn); } svg.chart .bar.neutral { fill: var(--neutral); }
svg.chart .whisker { stroke: var(--fg); fill: none; stroke-width: 1.4; }
svg.chart .threshold { stroke: var(--threshold); stroke-width: 2.5; stroke-dasharray: 4 2; }
svg.chart .mean { stroke: var(--fg); stroke-width: 1.5; stroke-dasharray: 3 2; }
svg.chart .zero { stroke: var(--muted); stroke-width: 1.5; }
svg.chart .marker.none { fill: var(--neutral); } svg.chart .marker.regression { fill: var(--fail); }
svg.chart .marker.improvement { fill: var(--pass); } svg.chart .whisker.regression { stroke: var(--fail); }
svg.chart .whisker.improvement { stroke: var(--pass); }
svg.chart text.value.regression { fill: var(--fail); } svg.chart text.value.improvement { fill: var(--pass); }
svg.chart .split.win { fill: var(--pass); } svg.chart .split.tie { fill: var(--tie); }
svg.chart .split.loss { fill: var(--fail); }
svg.chart .split-text { fill: var(--fg); stroke: var(--bg); stroke-width: 3px; paint-order: stroke; }
details > summary { cursor: pointer; color: var(--muted); }
ol.ranks { list-style: none; margin: 0; padding: 0; display: flex; flex-wrap: wrap; gap: 3px;
  min-width: 340px; } ol.ranks li { border: 1px solid var(--line); border-radius: 4px;
  padding: 0 4px; overflow-wrap: anywhere; } ol.ranks .rank { color: var(--muted);
  font-size: 11px; margin-right: 3px; }
ol.ranks li.relevant { background: var(--mark); border-color: var(--pass); font-weight: 600; }
li.relevant::after { content: " \\2713 " attr(data-grade); color: var(--pass); }
li.unjudged { color: var(--muted); border-style: dashed; }
li.judged-zero .doc { text-decoration: line-through; }
ul.missed { margin: 0; padding-left: 18px; } ul.missed li { white-space: nowrap; }
input.filter { font: inherit; padding: 4px 8px; min-width: 260px; color: var(--fg);
  background: var(--card); border: 1px solid var(--line); border-radius: 6px; }
.scroll { overflow-x: auto; } #worst td:nth-child(2) { min-width: 180px; } caption { text-align: left; }
.legend span { margin-right: 14px; } .cards { display: flex; flex-wrap: wrap; gap: 10px; }
ul.warnings { color: var(--warn); font-size: 14px; margin: 6px 0 0; padding-left: 18px; }
.card { background: var(--card); border: 1px solid var(--line); border-radius: 8px;
  padding: 8px 12px; min-width: 120px; } .card b { display: block; font-size: 18px; }
"""

_SCRIPT = """
"use strict";
function sortKey(row, column) {
  const cell = row.cells[column];
  if (!cell) { return ""; }
  const raw = cell.getAttribute("data-sort");
  if (raw !== null && raw !== "" && !Number.isNaN(Number(raw))) { return Number(raw); }
  return (raw !== null ? raw : cell.textContent).trim().toLowerCase();
}
function sortTable(table, column, header) {
  const ascending = header.getAttribute("aria-sort") !== "ascending";
  for (const other of table.tHead.rows[0].cells) { other.removeAttribute("aria-sort"); }
  header.setAttribute("aria-sort", ascending ? "ascending" : "descending");
  const body = table.tBodies[0];
  const rows = Array.from(body.rows);
  rows.sort(function (a, b) {
    const x = sortKey(a, column);
    const y = sortKey(b, column);
    let order;
    if (typeof x === "number" && typeof y === "number") { order = x - y; }
    else if (typeof x === "number") { order = -1; }
    else if (typeof y === "number") { order = 1; }
    else { order = x < y ? -1 : (x > y ? 1 : 0); }
    return ascending ? order : -order;
  });
  for (const row of rows) { body.appendChild(row); }
}
for (const table of document.querySelectorAll("table.sortable")) {
  Array.from(table.tHead.rows[0].cells).forEach(function (header, column) {
    const button = header.querySelector("button");
    if (button) { button.addEventListener("click", function () { sortTable(table, column, header); }); }
  });
}
for (const input of document.querySelectorAll("input.filter")) {
  const target = input.getAttribute("data-table");
  const table = document.getElementById(target);
  const count = document.getElementById(target + "-count");
  input.addEventListener("input", function () {
    const needle = input.value.trim().toLowerCase();
    const rows = table.tBodies[0].rows;
    let shown = 0;
    for (const row of rows) {
      const visible = needle === "" || row.textContent.toLowerCase().includes(needle);
      row.hidden = !visible;
      if (visible) { shown += 1; }
    }
    count.textContent = "showing " + shown + " of " + rows.length;
  });
}
"""


def _sha256(text: str) -> str:
    return base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii")


# Only this page's own stylesheet and script may apply; everything else is refused by the browser.
_POLICY = (
    f"default-src 'none'; style-src 'sha256-{_sha256(_STYLE)}'; "
    f"script-src 'sha256-{_sha256(_SCRIPT)}'; base-uri 'none'; form-action 'none'"
)


def _page(title: str, body: Iterable[str], generated: datetime | None) -> str:
    stamp = (generated or datetime.now(UTC)).strftime("%Y-%m-%d %H:%M:%S UTC")
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{escape(_POLICY)}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<meta name="generator" content="rankgate {escape(__version__)}">'
        f"<title>{escape(title)}</title><style>{_STYLE}</style></head>\n<body>\n"
        + "\n".join(body)
        + f'\n<footer class="note"><p>Generated by rankgate {escape(__version__)} at {stamp}. '
        "Self-contained: this file loads nothing from the network.</p></footer>\n"
        f"<script>{_SCRIPT}</script>\n</body></html>\n"
    )


# --- small builders ---------------------------------------------------------------------------


def _num(value: float | None, digits: int = 4) -> tuple[str, str]:
    """(text, sort key) of a number; missing values read "n/a" and sort last."""
    if value is None or not math.isfinite(value):
        return "n/a", ""
    return f"{value:.{digits}f}", repr(float(value))


def _td_num(value: float | None, digits: int = 4, text: str | None = None) -> str:
    shown, key = _num(value, digits)
    return f'<td class="num" data-sort="{key}">{escape(text if text is not None else shown)}</td>'


def _td(text: str, css: str = "") -> str:
    """A table cell holding ``text``, which may come from the data (see ``_data``)."""
    klass = f' class="{css}"' if css else ""
    return f"<td{klass}>{_data(text)}</td>"


def _data(text: str, limit: int = TEXT_SHOWN) -> str:
    """A value from the data as element content: direction-isolated in ``<bdi>``, escaped and
    neutralised; past ``limit`` characters it is cut with an ellipsis, its length is noted beside
    it and the tooltip holds up to ``TOOLTIP_SHOWN`` characters of it."""
    if len(text) <= limit:
        return f"<bdi>{escape(text)}</bdi>"
    return (
        f'<span class="clipped" title="{escape(clip_text(text, TOOLTIP_SHOWN))}">'
        f"<bdi>{escape(text[: limit - 1])}</bdi>…</span>"
        f'<span class="note"> ({len(text):,} characters)</span>'
    )


_NUM_CLASS = ' class="num"'
_ASCENDING = ' aria-sort="ascending"'


def _sortable(
    ident: str,
    header: Sequence[tuple[str, bool]],
    rows: Sequence[str],
    caption: str,
    sorted_by: int | None = None,
) -> str:
    """A table whose headers sort it on click; ``header`` pairs a label with "is numeric", and
    ``sorted_by`` names the column the rows already ascend by."""
    heads = "".join(
        f'<th scope="col"{_NUM_CLASS if numeric else ""}'
        f'{_ASCENDING if column == sorted_by else ""}><button type="button">'
        f"{escape(label)}</button></th>"
        for column, (label, numeric) in enumerate(header)
    )
    return (
        f'<div class="scroll"><table class="sortable" id="{ident}"><caption class="note">'
        f"{escape(caption)}</caption><thead><tr>{heads}</tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table></div>"
    )


def _filter(ident: str, rows: int, placeholder: str) -> str:
    return (
        f'<p><label>Filter: <input class="filter" type="search" data-table="{ident}" '
        f'placeholder="{escape(placeholder)}" aria-controls="{ident}"></label> '
        f'<span class="filter-count note" id="{ident}-count" aria-live="polite">'
        f"showing {rows} of {rows}</span></p>"
    )


def _cards(items: Sequence[tuple[str, str]]) -> str:
    return (
        '<div class="cards">'
        + "".join(f'<div class="card"><b>{escape(v)}</b>{escape(k)}</div>' for k, v in items)
        + "</div>"
    )


def _unit(evaluation_metrics: Iterable[MetricSpec]) -> bool:
    """True when every metric lives in [0, 1] (dcg does not), so axes can be fixed to it."""
    return all(not spec.name.startswith("dcg") for spec in evaluation_metrics)


# --- eval -------------------------------------------------------------------------------------


def render_eval_html(
    evaluation: Evaluation, sources: Sequence[str], *, generated: datetime | None = None
) -> str:
    """The whole eval report: verdict and gates, means, segments against thresholds, distributions,
    coverage and skipped records, and the worst queries with their rankings."""
    named = ", ".join(sources)
    body = [
        '<header><h1>rankgate eval</h1><p class="meta">'
        + ", ".join(_data(source) for source in sources)
        + "</p></header>",
        _eval_verdict(evaluation),
        _gates_section(evaluation),
        _means_section(evaluation),
        _segments_section(evaluation),
        _distributions_section(evaluation),
        _coverage_section(evaluation),
        _worst_section(evaluation),
        _settings_section(evaluation),
    ]
    return _page(f"rankgate eval · {clip_text(named, TEXT_SHOWN)}", body, generated)


def _eval_verdict(evaluation: Evaluation) -> str:
    failed = [o for o in evaluation.gates if not o.passed]
    coverage_failed = [c for c in evaluation.coverage_checks if not c.passed]
    checks = len(evaluation.gates) + len(evaluation.coverage_checks)
    passed = checks - len(failed) - len(coverage_failed)
    # The words every eval report uses (console.eval_verdict_text): with no check there is no
    # verdict to badge, so the page says "no gates set" as the terminal and Markdown do.
    word = ("PASS" if evaluation.passed else "FAIL") if checks else "no gates set"
    detail = f"{passed} of {counted(checks, 'check')} passed" if checks else ""
    worst = ""
    if failed:
        # The miss furthest on the wrong side of its threshold, whichever way the gate points.
        miss = max(failed, key=lambda o: abs(o.margin) if o.margin is not None else math.inf)
        worst = escape(" · worst miss: ") + _gate_html(miss)
    elif coverage_failed:
        worst = escape(
            f" · annotation coverage below its minimum in {len(coverage_failed)} group(s)"
        )
    summary = evaluation.summary
    return (
        f'<section class="verdict {word.lower() if checks else "none"}" role="status">'
        f"<strong>{word}</strong>"
        f'{escape(detail)}{worst}<div class="meta">{summary.read:,} records read · '
        f"{summary.scored:,} scored · {sum(summary.skipped.values()):,} skipped"
        f"{_missing_meta(summary)}</div>"
        f"{_warnings(evaluation.warnings)}</section>"
    )


def _missing_meta(summary: Summary) -> str:
    """The queries of the query set without a trace, beside the record counts they are not
    part of."""
    if summary.query_set is None:
        return ""
    expected = summary.expected_queries or 0
    text = f" · {summary.missing_trace:,} of {expected:,} expected queries without a trace"
    if summary.missing_scored:
        text += f" ({summary.missing_scored:,} scored 0)"
    return escape(text)


def _warnings(warnings: Sequence[str]) -> str:
    """The evaluation's warnings (a segment field most queries lack, a rule that matched nothing),
    under the verdict: they do not change it, but they say how far to trust it."""
    if not warnings:
        return ""
    items = "".join(f"<li>{_data(warning, TOOLTIP_SHOWN)}</li>" for warning in warnings)
    return f'<ul class="warnings">{items}</ul>'


def _where(outcome: GateOutcome) -> str:
    return "overall" if outcome.segment is None else str(outcome.segment)


def _gate_html(outcome: GateOutcome) -> str:
    """One gate's verdict in words, as markup: the group (a value from the data) is isolated, so
    its text cannot reorder the value and margin after it."""
    gate = outcome.gate
    value = (
        "no value" if outcome.value is None else format_against(outcome.value, gate.threshold, 4)
    )
    margin = "" if outcome.margin is None else f" (margin {format_margin(outcome.margin)})"
    needs = f"needs {gate.op} {format_threshold(gate.threshold)}"
    return _data(_where(outcome)) + escape(f" {gate.metric} {value}, {needs}{margin}")


def _gates_section(evaluation: Evaluation) -> str:
    if not evaluation.gates and not evaluation.coverage_checks:
        return (
            "<section><h2>Gates</h2><p>No gate was set: the run passes by definition.</p></section>"
        )
    ordered = sorted(
        evaluation.gates,
        key=lambda o: (o.passed, o.margin if o.margin is not None else -math.inf),
    )
    rows = []
    for outcome in ordered:
        status = "fail" if not outcome.passed else outcome.status
        gate = outcome.gate
        value = None if outcome.value is None else format_against(outcome.value, gate.threshold, 4)
        rows.append(
            f'<tr class="{status}">'
            + _td(status.upper() if status != "insufficient" else "too few", f"status {status}")
            + _td(_where(outcome))
            + _td(f"{gate.metric} {gate.op} {format_threshold(gate.threshold)}")
            + _td(outcome.statistic.replace("_", " "))
            + _td_num(outcome.value, text=value)
            + _td_num(
                outcome.margin,
                text=None if outcome.margin is None else format_margin(outcome.margin),
            )
            + _td_num(outcome.scored, 0, text=f"{outcome.scored:,}")
            + "</tr>"
        )
    table = _sortable(
        "gates",
        [
            ("status", False),
            ("group", False),
            ("gate", False),
            ("on", False),
            ("value", True),
            ("margin", True),
            ("queries", True),
        ],
        rows,
        "Every gate per group, misses first. Margin is value minus threshold.",
    )
    coverage = ""
    if evaluation.coverage_checks:
        items = []
        for check in evaluation.coverage_checks:
            where = "overall" if check.segment is None else str(check.segment)
            shown = "n/a" if check.coverage is None else f"{check.coverage:.1%}"
            state = "pass" if check.passed else "fail"
            items.append(
                f'<li><span class="status {state}">{state.upper()}</span> {_data(where)}: '
                f"annotation coverage {shown} (minimum {check.minimum:.0%})</li>"
            )
        coverage = "<h3>Annotation coverage minimums</h3><ul>" + "".join(items) + "</ul>"
    insufficient = ""
    if any(o.status == "insufficient" for o in evaluation.gates):
        verdict = (
            "counted as failures (strict segments)"
            if evaluation.policy.strict_segments
            else "reported, neither pass nor fail"
        )
        insufficient = (
            f'<p class="note">"too few": the group has fewer scored queries than its min_queries; '
            f"{verdict}.</p>"
        )
    return f"<section><h2>Gates</h2>{table}{insufficient}{coverage}</section>"


def _gate_bar(
    label: str,
    mean: float,
    interval: tuple[float, float],
    outcomes: Sequence[GateOutcome],
    scored: int,
) -> Bar:
    """A chart bar for one metric of one group, held to every gate it has: it shows as failing
    when any of them fails."""
    status = "neutral"
    if outcomes:
        if any(not o.passed for o in outcomes):
            status = "fail"
        elif any(o.status == "insufficient" for o in outcomes):
            status = "insufficient"
        else:
            status = "pass"
    notes = []
    if any(o.status == "insufficient" for o in outcomes):
        notes.append(f"n={scored}, too few")
    statistics = sorted({o.statistic for o in outcomes if o.statistic != "mean"})
    if statistics:
        notes.append("gated on the " + " and ".join(s.replace("_", " ") for s in statistics))
    low, high = interval
    return Bar(
        label,
        None if math.isnan(mean) else mean,
        None if math.isnan(low) else low,
        None if math.isnan(high) else high,
        tuple((o.gate.op, o.gate.threshold) for o in outcomes),
        status,
        f"({'; '.join(notes)})" if notes else "",
    )


def _outcomes(evaluation: Evaluation) -> dict[tuple[object, MetricSpec], list[GateOutcome]]:
    """Every gate outcome by (group key, metric)."""
    found: dict[tuple[object, MetricSpec], list[GateOutcome]] = {}
    for outcome in evaluation.gates:
        found.setdefault((outcome.segment, outcome.gate.metric), []).append(outcome)
    return found


def _means_section(evaluation: Evaluation) -> str:
    outcomes = _outcomes(evaluation)
    ranged = any(shows_range(evaluation.unjudged_range(spec)) for spec in evaluation.metrics)
    bars = []
    rows = []
    for spec, mean in evaluation.means.items():
        gated = outcomes.get((None, spec), [])
        bars.append(
            _gate_bar(str(spec), mean, evaluation.intervals[spec], gated, evaluation.summary.scored)
        )
        low, high = evaluation.intervals[spec]
        interval = "" if math.isnan(low) else f"[{low:.4f}, {high:.4f}]"
        gates = ", ".join(f"{o.gate.op} {format_threshold(o.gate.threshold)}" for o in gated)
        bounds = evaluation.unjudged_range(spec)
        spread = range_text(bounds) if bounds is not None and shows_range(bounds) else ""
        rows.append(
            "<tr>"
            + _td(str(spec))
            + _td_num(mean)
            + f'<td class="num">{escape(interval)}</td>'
            + (f'<td class="num">{escape(spread)}</td>' if ranged else "")
            + _td(gates)
            + "</tr>"
        )
    table = _sortable(
        "means",
        [("metric", False), ("mean", True), ("95% interval", False)]
        + ([("range over unjudged documents", False)] if ranged else [])
        + [("overall gates", False)],
        rows,
        f"Means over {evaluation.summary.in_means:,} scored queries"
        + (
            f" ({evaluation.summary.missing_scored:,} of them without a trace, scored 0)"
            if evaluation.summary.missing_scored
            else ""
        )
        + "; intervals are bootstrap "
        f"({evaluation.settings.resamples:,} resamples), or the normal approximation over "
        f"{NORMAL_FROM_QUERIES:,} queries or more."
        + (
            " The range over unjudged documents runs from the mean with every unjudged retrieved "
            "document counted non-relevant (unjudged=nonrelevant, the pessimistic value) to the "
            "mean with each counted relevant (unjudged=relevant)."
            if ranged
            else ""
        ),
    )
    chart = bar_chart(
        "chart-means",
        "Mean of each metric with its 95% interval and overall thresholds",
        bars,
        "mean over scored queries",
        unit=_unit(evaluation.metrics),
    )
    return f"<section><h2>Metrics</h2>{table}{chart}</section>"


def _segments_section(evaluation: Evaluation) -> str:
    if not evaluation.segments:
        return ""
    outcomes = _outcomes(evaluation)
    gated = list(dict.fromkeys(o.gate.metric for o in evaluation.gates))
    charts = []
    groups = [evaluation.overall, *evaluation.segments]
    for number, spec in enumerate(gated):
        charted = _charted_groups(groups, spec, outcomes)
        bars = [
            _gate_bar(
                group.name,
                group.means.get(spec, math.nan),
                group.intervals.get(spec, (math.nan, math.nan)),
                outcomes.get((group.key, spec), []),
                group.scored,
            )
            for group in charted
        ]
        title = f"{spec} per segment against its thresholds"
        if len(charted) < len(groups):
            title += (
                f" ({len(charted)} of {len(groups)} groups: misses and the closest calls; "
                "the table below has them all)"
            )
        charts.append(
            bar_chart(f"chart-segment-{number}", title, bars, str(spec), unit=_unit([spec]))
        )
    metrics = list(evaluation.metrics)
    failed = {(o.segment, o.gate.metric) for o in evaluation.gates if not o.passed}
    rows = []
    for group in groups:
        cells = [
            _td(group.name),
            _td_num(group.read, 0, f"{group.read:,}"),
            _td_num(group.scored, 0, f"{group.scored:,}"),
            _td_num(
                group.coverage, 4, "n/a" if group.coverage is None else f"{group.coverage:.1%}"
            ),
        ]
        for spec in metrics:
            mean = group.means.get(spec, math.nan)
            mark = " !" if (group.key, spec) in failed else ""
            bounds = evaluation.unjudged_range(spec, group)
            if bounds is not None and shows_range(bounds):
                mark = f" ({range_text(bounds, 3)} depending on unjudged documents){mark}"
            cells.append(_td_num(mean, 4, None if math.isnan(mean) else f"{mean:.4f}{mark}"))
        rows.append("<tr>" + "".join(cells) + "</tr>")
    table = _sortable(
        "segments",
        [("group", False), ("read", True), ("scored", True), ("coverage", True)]
        + [(str(spec), True) for spec in metrics],
        rows,
        "Every segment; ! marks a missed gate.",
    )
    chart_block = (
        f'<div class="charts">{"".join(charts)}</div>'
        if charts
        else ('<p class="note">No gate is set, so no segment is charted against a threshold.</p>')
    )
    return f"<section><h2>Segments</h2>{chart_block}{table}</section>"


def _charted_groups(
    groups: Sequence[Group],
    spec: MetricSpec,
    outcomes: dict[tuple[object, MetricSpec], list[GateOutcome]],
) -> list[Group]:
    """At most ``CHARTED_GROUPS`` groups for one metric's chart, in report order: overall, then
    the segments that miss a gate, then those closest to one."""
    if len(groups) <= CHARTED_GROUPS:
        return list(groups)

    def urgency(group: Group) -> tuple[int, float]:
        found = outcomes.get((group.key, spec), [])
        margins = [abs(o.margin) for o in found if o.margin is not None]
        return (0 if any(not o.passed for o in found) else 1, min(margins, default=math.inf))

    chosen = {id(g) for g in sorted(groups[1:], key=urgency)[: CHARTED_GROUPS - 1]}
    return [groups[0], *(g for g in groups[1:] if id(g) in chosen)]


def _distributions_section(evaluation: Evaluation) -> str:
    if not evaluation.summary.scored:
        return "<section><h2>Distributions</h2><p>No query was scored.</p></section>"
    charts = [
        histogram(
            f"chart-dist-{number}",
            f"Distribution of per-query {spec}",
            evaluation.values[spec],
            str(spec),
            unit=_unit([spec]),
        )
        for number, spec in enumerate(evaluation.metrics)
    ]
    return f'<section><h2>Distributions</h2><div class="charts">{"".join(charts)}</div></section>'


def _coverage_section(evaluation: Evaluation) -> str:
    summary = evaluation.summary
    items = [
        ("records read", f"{summary.read:,}"),
        ("scored", f"{summary.scored:,}"),
        *((f"skipped: {reason}", f"{count:,}") for reason, count in summary.skipped.items()),
        ("annotation coverage", "n/a" if summary.coverage is None else f"{summary.coverage:.1%}"),
        ("duplicate IDs dropped", f"{summary.duplicates_dropped:,}"),
    ]
    if evaluation.judged is not None and summary.scored:
        items.append((f"{evaluation.judged} (judged share)", f"{evaluation.judged_mean:.1%}"))
    if summary.query_set is not None:
        items += [
            ("queries in the query set", f"{summary.expected_queries or 0:,}"),
            ("missing_trace (no trace; not a record)", f"{summary.missing_trace:,}"),
            ("missing queries scored 0", f"{summary.missing_scored:,}"),
        ]
        if summary.query_set == "queries":
            items.append(("records outside the query set", f"{summary.outside_set:,}"))
    if summary.served_depth is not None:
        items += [
            ("median ranking depth (IDs)", f"{summary.served_depth.median:g}"),
            ("10th percentile depth (IDs)", f"{summary.served_depth.p10:g}"),
        ]
    if evaluation.settings.served_k is not None:
        items.append(("served_k (results users see)", f"{evaluation.settings.served_k:,}"))
    if summary.label_sources.get("judge") or evaluation.settings.label_source != "all":
        items += [
            (f"human labels kept apart ({evaluation.settings.label_source})",
             f"{summary.label_sources.get('human', 0):,}"),
            ("judge labels kept apart", f"{summary.label_sources.get('judge', 0):,}"),
        ]  # fmt: skip
    if evaluation.settings.label_filter.active:
        items += [
            ("labels removed: not in corpus", f"{summary.labels_removed_stale:,}"),
            ("labels removed: too old", f"{summary.labels_removed_expired:,}"),
            ("queries that lost every relevant label", f"{summary.lost_all_relevant:,}"),
        ]
    reasons = {
        "unlabeled": "no relevant_ids or relevance_scores",
        "no_relevant": "labeled, but no label reaches the relevance threshold",
        "invalid": "malformed record",
    }
    rows = "".join(
        f'<tr><td>{escape(reason)}</td><td class="num">{count:,}</td>'
        f"<td>{escape(reasons.get(reason, ''))}</td></tr>"
        for reason, count in summary.skipped.items()
    )
    accounted = summary.scored + sum(summary.skipped.values())
    table = (
        '<table class="data"><caption class="note">'
        f"{summary.scored:,} scored + {sum(summary.skipped.values()):,} skipped = "
        f"{accounted:,} of {summary.read:,} records read</caption>"
        '<thead><tr><th>skipped because</th><th class="num">records</th><th>meaning</th></tr>'
        f"</thead><tbody>{rows}</tbody></table>"
    )
    invalid = ""
    if summary.invalid_examples:
        listed = "".join(
            f"<li><code>{_data(str(e), TOOLTIP_SHOWN)}</code></li>"
            for e in summary.invalid_examples
        )
        invalid = (
            f"<h3>Invalid records (first {len(summary.invalid_examples)} of "
            f"{summary.skipped.get('invalid', 0):,})</h3><ul>{listed}</ul>"
        )
    missing = ""
    if summary.missing_examples:
        listed = "".join(
            f"<li><code>{_data(shown_query_id(query_id))}</code></li>"
            for query_id in summary.missing_examples
        )
        where = "" if summary.query_set is None else f" ({summary.query_set})"
        missing = (
            f"<h3>Queries without a trace{escape(where)}: first {len(summary.missing_examples)} "
            f'of {summary.missing_trace:,}</h3><p class="note">{escape(_MISSING_NOTE)}</p>'
            f"<ul>{listed}</ul>"
        )
    return (
        f"<section><h2>Coverage and skipped records</h2>{_cards(items)}{table}{invalid}"
        f"{missing}</section>"
    )


_MISSING_NOTE = (
    "Queries of the known query set with no trace at all: not records, so outside 'records "
    "read'. Under --missing-trace zero each is scored 0 on every metric and counts in the means, "
    "intervals and the segment value (missing); by default they are left out."
)


def _worst_section(evaluation: Evaluation) -> str:
    examples = evaluation.examples
    if not examples:
        return ""
    metrics = list(evaluation.metrics)
    fields = list(dict.fromkeys(g.key.field for g in evaluation.segments if g.key is not None))
    # Worst first on the first gated metric (the first metric when none is gated).
    key_metric = next((o.gate.metric for o in evaluation.gates), metrics[0])
    key_values = evaluation.values[key_metric]
    examples = tuple(sorted(examples, key=lambda e: (float(key_values[e.index]), e.index)))
    rows = []
    for example in examples:
        attributes = evaluation.attributes[example.index]
        cells = [f'<td class="id">{_clipped(example.query_id)}</td>', _td(example.text or "")]
        cells += [_td(segment_value(attributes, name)) for name in fields]
        # The rankings before the numbers, so the reason for a low score is on screen first.
        cells.append(f"<td>{_ranks(example)}</td>")
        cells.append(f"<td>{_missed(example)}</td>")
        cells += [_td_num(float(evaluation.values[spec][example.index])) for spec in metrics]
        rows.append("<tr>" + "".join(cells) + "</tr>")
    header = [("query ID", False), ("query", False), *((name, False) for name in fields)]
    header += [("first ranks", False), ("relevant, not in them", False)]
    header += [(str(spec), True) for spec in metrics]
    depth = max((len(e.ranked) for e in examples), default=0)
    table = _sortable(
        "worst",
        header,
        rows,
        f"The lowest-scoring queries on each metric ({len(examples)} in all), with the first "
        f"{depth} distinct retrieved IDs, worst {key_metric} first. Click a column to sort.",
        sorted_by=4 + len(fields) + metrics.index(key_metric),
    )
    legend = (
        '<p class="legend note"><span>highlighted ✓ g: relevant, with its grade</span>'
        "<span>struck through: judged not relevant</span><span>grey: not judged</span></p>"
    )
    return (
        f"<section><h2>Worst queries</h2>{_filter('worst', len(rows), 'query ID, text, document ID…')}"
        f"{legend}{table}</section>"
    )


def _clipped(identifier: str) -> str:
    """An ID for a table cell (see ``_data``), shortened past ``ID_SHOWN`` characters."""
    return _data(identifier, ID_SHOWN)


def _ranks(example: QueryExample) -> str:
    items = []
    threshold_reached = {doc for doc, _ in example.relevant}
    for rank, (doc, grade) in enumerate(example.ranked, start=1):
        if doc in threshold_reached:
            css, extra = "relevant", f' data-grade="g{grade:g}"'
        elif grade is None:
            css, extra = "unjudged", ""
        else:
            css, extra = "judged-zero" if grade == 0 else "below", ""
        items.append(
            f'<li class="{css} id"{extra}><span class="rank">{rank}</span>'
            f'<span class="doc">{_clipped(doc)}</span></li>'
        )
    more = example.retrieved_count - len(example.ranked)
    tail = f'<span class="note">… {more:,} more retrieved</span>' if more > 0 else ""
    if not items:
        return '<span class="note">nothing retrieved</span>'
    return f'<ol class="ranks">{"".join(items)}</ol>{tail}'


def _missed(example: QueryExample) -> str:
    shown = {doc for doc, _ in example.ranked}
    missed = [(doc, grade) for doc, grade in example.relevant if doc not in shown]
    if not missed:
        return '<span class="note">none</span>'
    items = "".join(f'<li class="id">{_clipped(doc)} (g{grade:g})</li>' for doc, grade in missed)
    hidden = example.relevant_count - len(example.relevant)
    tail = f'<span class="note">… {hidden:,} more relevant</span>' if hidden > 0 else ""
    return f'<ul class="missed">{items}</ul>{tail}'


def _settings_section(evaluation: Evaluation) -> str:
    settings = evaluation.settings
    items = [
        ("relevance threshold", f"grade >= {settings.relevance_threshold:g}"),
        ("labeled queries with nothing relevant", settings.empty_relevant),
        ("malformed records", settings.on_invalid),
        ("gates decide on", evaluation.policy.gate_on.replace("_", " ")),
        ("min queries per segment", str(evaluation.policy.min_queries)),
        ("bootstrap", f"{settings.resamples:,} resamples, seed {settings.seed}"),
    ]
    rows = "".join(
        f'<tr><th scope="row">{escape(k)}</th><td>{escape(v)}</td></tr>' for k, v in items
    )
    return f'<section><h2>Settings</h2><table class="data"><tbody>{rows}</tbody></table></section>'


# --- compare ----------------------------------------------------------------------------------


def render_comparison_html(comparison: Comparison, *, generated: datetime | None = None) -> str:
    """The compare report: verdict, then per candidate the side-by-side table, a forest plot of
    deltas per metric and segment, win/tie/loss bars and the queries that moved most."""
    significance = comparison.significance
    word = "PASS" if comparison.passed else "FAIL"
    regressions = sorted(comparison.regressions, key=lambda c: c.delta)
    detail = (
        f"{len(regressions)} regression(s), {len(comparison.improvements)} improvement(s) in "
        f"{len(comparison.cells)} cells"
    )
    detail_html = escape(detail)
    if regressions:
        worst = regressions[0]
        detail_html += (
            escape(" · worst: ")
            + _data(worst.candidate)
            + " "
            + _data(worst.group)
            + escape(f" {worst.metric} {worst.delta:+.4f} (p adj {format_p(worst.p_adjusted)})")
        )
    misses = sum(len(result.gate_failures) for result in comparison.results)
    if misses:
        detail_html += escape(f" · {misses} candidate gate(s) missed")
    if comparison.label_limited:
        detail_html += escape(f" · {len(comparison.label_limited)} label-limited cell(s)")
    if comparison.underpowered:
        detail_html += escape(
            f" · {len(comparison.underpowered)} underpowered cell(s) (min_detectable)"
        )
    next_step = (
        ""
        if comparison.next_step is None
        else f'<p class="note"><strong>Next:</strong> {escape(comparison.next_step)}</p>'
    )
    method = (
        f"{test_names(comparison)}, {CORRECTION_NAMES[significance.correction]} correction, "
        f"alpha {significance.alpha:g}, margin {significance.margin:g}; 95% "
        f"{interval_names(comparison)} ({comparison.settings.resamples:,} resamples, seed "
        f"{comparison.settings.seed})"
    )
    reads = ", ".join(
        _data(name)
        + escape(
            f": {count:,} records"
            + (f" ({comparison.invalid[name]:,} invalid)" if comparison.invalid.get(name) else "")
        )
        for name, count in comparison.read.items()
    )
    warnings = _warnings(comparison.warnings)
    body = [
        f'<header><h1>rankgate compare</h1><p class="meta">baseline {_data(comparison.baseline)}'
        f" · candidates {', '.join(_data(r.name) for r in comparison.results)}</p></header>",
        f'<section class="verdict {word.lower()}" role="status"><strong>{word}</strong>'
        f'{detail_html}<div class="meta">{escape(method)}</div>'
        f'<div class="meta">{reads}</div>{warnings}{next_step}</section>',
    ]
    for number, result in enumerate(comparison.results):
        body.append(_candidate_html(result, number))
    return _page(
        f"rankgate compare · {clip_text(comparison.baseline, TEXT_SHOWN)}", body, generated
    )


def _candidate_html(result: CandidateResult, number: int) -> str:
    pairing = result.pairing
    summary = result.candidate.summary
    ident = f"c{number}"
    name = clip_text(result.name, TEXT_SHOWN)
    unpaired = pairing.design == "unpaired"
    design = ("Unpaired (Welch's t-test, two-sample bootstrap)" if unpaired else "Paired") + (
        f": {pairing.reason}" if pairing.reason else ""
    )
    parts = [
        f"<section><h2>Candidate {_data(result.name)}</h2>",
        f'<p class="note">{escape(design)}</p>',
        _cards(
            [
                *([("baseline scored", f"{result.baseline.summary.scored:,}")] if unpaired else []),
                ("queries paired", f"{pairing.paired:,}"),
                ("only in the baseline", f"{pairing.baseline_only:,}"),
                ("only in the candidate", f"{pairing.candidate_only:,}"),
                ("scored", f"{summary.scored:,}"),
                ("skipped", f"{sum(summary.skipped.values()):,}"),
                ("regressions", str(sum(c.flag == "regression" for c in result.cells))),
                ("improvements", str(sum(c.flag == "improvement" for c in result.cells))),
                ("label-limited", str(len(result.label_limited))),
            ]
        ),
        "<h3>Side by side</h3>",
        _filter(f"{ident}-cells", len(result.cells), "metric, segment, regression…"),
        _cells_table(f"{ident}-cells", result.cells),
        *_power_html(result),
        *_label_limited_html(result),
        "<h3>Deltas with 95% intervals</h3>",
        _forest(result, ident),
    ]
    if not unpaired:  # no query is on both sides: nothing won, lost or moved
        parts += [
            "<h3>Per-query wins, ties and losses</h3>",
            split_bars(
                f"{ident}-split",
                f"Queries the candidate {name} won, tied and lost, per metric (all queries)",
                [
                    Split(str(cell.metric), cell.wins or 0, cell.ties or 0, cell.losses or 0)
                    for cell in result.cells
                    if cell.segment is None
                ],
            ),
            "<h3>Queries that moved most</h3>",
            _moved(result, ident),
        ]
    if result.gate_failures:
        items = "".join(f"<li>{_gate_html(o)}</li>" for o in result.gate_failures)
        parts.append(f"<h3>Gates the candidate missed</h3><ul>{items}</ul>")
    for side, count, ids in (
        ("baseline", pairing.baseline_only, pairing.baseline_only_ids),
        ("candidate", pairing.candidate_only, pairing.candidate_only_ids),
    ):
        if count and not unpaired:
            listed = ", ".join(_clipped(query_id) for query_id in ids) + (
                f", … ({count - len(ids):,} more)" if count > len(ids) else ""
            )
            parts.append(f'<p class="note">Only in the {side}: <code>{listed}</code></p>')
    parts.append("</section>")
    return "".join(parts)


def _power_html(result: CandidateResult) -> list[str]:
    """The overall cells' minimum detectable effects, and the cells that fail min_detectable."""
    parts = []
    line = detectable_line(result)
    if line is not None:
        parts.append(
            f'<p class="note">{escape(line[0].upper() + line[1:])}: the smallest change each '
            "cell that is not flagged had that power to flag (<code>rankgate plan</code> sizes "
            "the next run).</p>"
        )
    if result.underpowered:
        items = "".join(
            f"<li>{escape(underpowered_text(cell))}</li>" for cell in result.underpowered
        )
        parts += [
            "<h3>Underpowered cells</h3>",
            '<p class="note">These "no regression" verdicts could not have seen a change of the '
            "size <code>min_detectable</code> asks for: they fail the run.</p>",
            f"<ul>{items}</ul>",
        ]
    return parts


def _label_limited_html(result: CandidateResult) -> list[str]:
    if not result.label_limited:
        return []
    items = "".join(f"<li>{escape(label_limited_text(cell))}</li>" for cell in result.label_limited)
    return [
        "<h3>Label-limited cells</h3>",
        '<p class="note">The verdict of these cells changes with the labels of documents nobody '
        "has judged: neither a regression nor an improvement until the pairs are judged "
        "(<code>--unjudged-pairs FILE</code> lists them).</p>",
        f"<ul>{items}</ul>",
    ]


def _win_tie_loss(cell: Cell) -> str:
    if cell.wins is None or cell.ties is None or cell.losses is None:
        return win_tie_loss(cell)
    return f"{cell.wins:,}/{cell.ties:,}/{cell.losses:,}"


def _cells_table(ident: str, cells: Sequence[Cell]) -> str:
    rows = []
    for cell in cells:
        flag = cell.flag or ("too few" if cell.status == "insufficient" else "")
        marker = {"regression": "▼ regression", "improvement": "▲ improvement"}.get(flag, flag)
        if cell.status == LABEL_LIMITED and cell.evidence is not None:
            marker = f"{LABEL_LIMITED_MARKER} ({cell.evidence.unjudged_pairs:,} pairs)"
        elif cell.underpowered is not None:
            marker = UNDERPOWERED_MARKER
        rows.append(
            f'<tr class="{escape(cell.flag or "")}">'
            + _td(cell.group)
            + _td(str(cell.metric))
            + _td_num(cell.queries, 0, f"{cell.queries:,}")
            + _td_num(cell.baseline_mean)
            + _td_num(cell.candidate_mean)
            + _td_num(cell.delta, text=f"{cell.delta:+.4f}")
            + _td_num(
                cell.relative_delta,
                text="n/a" if cell.relative_delta is None else f"{cell.relative_delta:+.1%}",
            )
            + f'<td class="num">[{cell.interval[0]:+.4f}, {cell.interval[1]:+.4f}]</td>'
            + _td_num(cell.p_adjusted, text=format_p(cell.p_adjusted))
            + _td_num(cell.effect_size, 2)
            + f'<td class="num">{_win_tie_loss(cell)}</td>'
            + f'<td class="num">{escape(judged_text(cell))}</td>'
            + _td(marker, f"value {cell.flag or ''}")
            + "</tr>"
        )
    return _sortable(
        ident,
        [
            ("group", False),
            ("metric", False),
            ("n", True),
            ("baseline", True),
            ("candidate", True),
            ("Δ", True),
            ("Δ %", True),
            ("95% CI of Δ", False),
            ("p adj", True),
            ("d_z", True),
            ("W/T/L", False),
            ("judged b/c", False),
            ("flag", False),
        ],
        rows,
        "Every metric per group. p adj is corrected across all cells; d_z is the paired effect size; "
        "judged b/c is judged@k of the baseline and the candidate (the share of each top k that "
        "carries a label).",
    )


def _forest(result: CandidateResult, ident: str) -> str:
    metrics = list(dict.fromkeys(cell.metric for cell in result.cells))
    charts = []
    for number, spec in enumerate(metrics):
        rows = [
            Interval(
                cell.group,
                cell.delta,
                cell.interval[0],
                cell.interval[1],
                cell.flag or "none",
                "(too few)" if cell.status == "insufficient" else "",
            )
            for cell in result.cells
            if cell.metric == spec
        ]
        charts.append(
            forest_plot(
                f"{ident}-forest-{number}",
                f"{spec}: candidate {clip_text(result.name, TEXT_SHOWN)} minus baseline, per group",
                rows,
                f"Δ {spec}",
            )
        )
    return f'<div class="charts">{"".join(charts)}</div>'


def _moved(result: CandidateResult, ident: str) -> str:
    rows = []
    segments = result.segments
    for spec in result.baseline.metrics:
        before = result.baseline.values[spec]
        after = result.candidate.values[spec]
        deltas = after - before
        order = np.argsort(deltas, kind="stable")
        losses = [i for i in order[:MOVED_SHOWN].tolist() if deltas[i] < -TIE_TOLERANCE]
        gains = [i for i in order[::-1][:MOVED_SHOWN].tolist() if deltas[i] > TIE_TOLERANCE]
        for index in (*losses, *gains):
            delta = float(deltas[index])
            kind = "regression" if delta < 0 else "improvement"
            cells = [
                f'<td class="id">{_clipped(result.baseline.query_ids[index])}</td>',
                _td(str(spec)),
                *(_td(str(values[index])) for values in segments.values()),
                _td_num(float(before[index])),
                _td_num(float(after[index])),
                _td_num(delta, text=f"{delta:+.4f}"),
            ]
            rows.append(f'<tr class="{kind}">' + "".join(cells) + "</tr>")
    if not rows:
        return '<p class="note">No query changed on any metric.</p>'
    header = [("query ID", False), ("metric", False), *((name, False) for name in segments)]
    header += [("baseline", True), ("candidate", True), ("Δ", True)]
    table = _sortable(
        f"{ident}-moved",
        header,
        rows,
        f"Per metric, up to {MOVED_SHOWN} queries that lost most and {MOVED_SHOWN} that gained most.",
    )
    return _filter(f"{ident}-moved", len(rows), "query ID, metric, segment…") + table
