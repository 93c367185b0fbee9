"""Charts as inline SVG: no script, no fonts, no network; colours come from the page's stylesheet.

Each function returns one ``<figure>``: the SVG (``role="img"`` with a title and a description for
screen readers), a caption, and the same numbers as a table in a collapsed ``<details>``, so the
data is there for people who cannot or do not want to read a chart. Every label passes through
``escape``; charts never put caller text anywhere else.

``escape`` here is ``html.escape`` made safe for hostile text (the HTML report uses it too): it
neutralises what escaping leaves alone: NUL (replaced by U+FFFD, a raw NUL being a parse error), lone
surrogates (written as ``\\ud800``: they have no UTF-8 form) and bidirectional controls (U+202A-202E,
U+2066-2069, U+200E, U+200F, U+061C, shown as ``<U+202E>``, so that a right-to-left override in a
segment value cannot reverse a margin on screen), and it clips any one string at ``PIECE_MAX``
characters, noting the full length, so a 200 MB query text cannot make a 200 MB page.

Colours are CSS classes (``.pass``, ``.fail``, ``.neutral``, ``.loss``...), defined by the HTML
report for light, dark and print. Status is never shown by colour alone: markers differ in shape
and the tables say it in words.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape as escape_markup

import numpy as np
import numpy.typing as npt

from rankgate.report.console import counted

__all__ = [
    "PIECE_MAX",
    "TOOLTIP_SHOWN",
    "Bar",
    "Interval",
    "Split",
    "bar_chart",
    "clip_text",
    "escape",
    "forest_plot",
    "histogram",
    "neutralise",
    "nice_ticks",
    "split_bars",
]

#: Characters of any one string put on a page; past it the string is cut and its length noted.
PIECE_MAX = 2000
#: Characters of a value kept in a tooltip (its title attribute) when the text shown is shortened.
TOOLTIP_SHOWN = 1000

# Controls that change the direction of the text around them: embeddings, overrides, isolates and
# the invisible direction marks.
_BIDI_CONTROLS = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
# A lone surrogate has no UTF-8 encoding.
_SURROGATE = re.compile("[\ud800-\udfff]")


def neutralise(text: str) -> str:
    """``text`` with bidirectional controls made visible (``<U+202E>``), NUL replaced by U+FFFD
    (HTML does not allow it) and a lone surrogate written as its escape (``\\ud800``, as the CLI
    writes it elsewhere); everything else, right-to-left letters included, is kept."""
    text = text.replace("\x00", "\ufffd")
    text = _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    return _BIDI_CONTROLS.sub(lambda m: f"<U+{ord(m.group()):04X}>", text)


def clip_text(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters with an ellipsis and its full length, when longer."""
    if len(text) <= limit:
        return text
    return f"{text[: max(limit - 1, 0)]}… ({len(text):,} characters)"


def escape(text: str, quote: bool = True) -> str:
    """``html.escape`` of ``text`` clipped to ``PIECE_MAX`` characters and neutralised."""
    return escape_markup(neutralise(clip_text(text, PIECE_MAX)), quote)


_ROW = 26  # height of one row in bar-like charts
_TOP = 12
_AXIS = 46  # room under the plot for tick labels and the axis title
_PLOT_WIDTH = 520
_CHAR = 6.6  # average width of one character at the chart font size, for label columns
_LABEL_MAX = 34  # characters of a row label shown before it is shortened


@dataclass(frozen=True, slots=True)
class Bar:
    """One row of a bar chart: a value, its interval, the gates it is held to (operator and
    threshold; a metric may have several, e.g. >= 0.7 and <= 0.95), and a status (``pass``,
    ``fail``, ``insufficient`` or ``neutral``)."""

    label: str
    value: float | None
    low: float | None = None
    high: float | None = None
    thresholds: tuple[tuple[str, float], ...] = ()
    status: str = "neutral"
    note: str = ""


@dataclass(frozen=True, slots=True)
class Interval:
    """One row of a forest plot: an estimate with its interval and a kind (``regression``,
    ``improvement`` or ``none``)."""

    label: str
    estimate: float
    low: float
    high: float
    kind: str = "none"
    note: str = ""


@dataclass(frozen=True, slots=True)
class Split:
    """One row of stacked bars: counts of wins, ties and losses."""

    label: str
    wins: int
    ties: int
    losses: int


def nice_ticks(low: float, high: float, target: int = 5) -> list[float]:
    """About ``target`` round tick positions (1, 2 or 5 times a power of ten) covering the range."""
    if not (math.isfinite(low) and math.isfinite(high)) or high <= low:
        return [low]
    raw = (high - low) / target
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.floor(low / step + 1e-9) * step
    ticks = []
    value = first
    while value <= high + step * 1e-9:
        if value >= low - step * 1e-9:
            ticks.append(round(value, 12))
        value += step
    return ticks


class _Scale:
    def __init__(self, low: float, high: float, start: float, width: float) -> None:
        self.low, self.high, self.start, self.width = low, high, start, width

    def __call__(self, value: float) -> float:
        span = self.high - self.low or 1.0
        clamped = min(max(value, self.low), self.high)
        return round(self.start + (clamped - self.low) / span * self.width, 2)


def _domain(values: Sequence[float], unit: bool) -> tuple[float, float]:
    """The range a value axis covers: [0, 1] for metrics that live there, else rounded out."""
    finite = [v for v in values if math.isfinite(v)]
    low, high = min([0.0, *finite]), max([1.0 if unit else 0.0, *finite])
    if high <= low:
        high = low + 1.0
    ticks = nice_ticks(low, high)
    step = ticks[1] - ticks[0] if len(ticks) > 1 else 1.0
    return math.floor(low / step) * step, math.ceil(high / step) * step


def _fmt(value: float | None, digits: int = 3) -> str:
    if value is None or not math.isfinite(value):
        return "n/a"
    return f"{value:.{digits}f}"


def _short(label: str) -> str:
    return label if len(label) <= _LABEL_MAX else label[: _LABEL_MAX - 1] + "…"


def _label_width(labels: Sequence[str]) -> float:
    return min(max((len(_short(label)) for label in labels), default=4) * _CHAR + 14, 240)


def _figure(
    ident: str,
    title: str,
    description: str,
    width: float,
    height: float,
    body: list[str],
    table: str,
) -> str:
    """Wrap chart elements in an accessible SVG, a caption and a data table."""
    head = (
        f'<svg class="chart" role="img" aria-labelledby="{ident}-t {ident}-d" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" width="{width:.0f}" height="{height:.0f}" '
        f'xmlns="http://www.w3.org/2000/svg">'
        f'<title id="{ident}-t">{escape(title)}</title><desc id="{ident}-d">{escape(description)}'
        "</desc>"
    )
    return (
        f'<figure class="figure" id="{ident}">{head}{"".join(body)}</svg>'
        f"<figcaption>{escape(title)}</figcaption>"
        f"<details><summary>Data table</summary>{table}</details></figure>"
    )


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    head = "".join(f'<th scope="col">{escape(cell)}</th>' for cell in header)
    body = "".join(
        "<tr>"
        + "".join(f"<td>{escape(clip_text(cell, TOOLTIP_SHOWN))}</td>" for cell in row)
        + "</tr>"
        for row in rows
    )
    return f'<table class="data"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _x_axis(
    scale: _Scale, ticks: Sequence[float], top: float, bottom: float, title: str
) -> list[str]:
    parts = [
        f'<line class="axis" x1="{scale.start}" y1="{bottom}" '
        f'x2="{scale.start + scale.width}" y2="{bottom}"/>'
    ]
    for tick in ticks:
        x = scale(tick)
        parts.append(f'<line class="grid" x1="{x}" y1="{top}" x2="{x}" y2="{bottom}"/>')
        parts.append(
            f'<text class="tick" x="{x}" y="{bottom + 14}" text-anchor="middle">{tick:g}</text>'
        )
    parts.append(
        f'<text class="axis-title" x="{scale.start + scale.width / 2}" y="{bottom + 34}" '
        f'text-anchor="middle">{escape(title)}</text>'
    )
    return parts


_LEGEND = 22  # height of the legend row under a chart


def _legend(items: Sequence[tuple[str, str]], x: float, y: float) -> list[str]:
    """A row of (symbol, text) pairs. Symbols: ``rect:<class>``, ``dash:<class>``, ``whisker``,
    ``marker:<kind>``."""
    parts = []
    for symbol, text in items:
        kind, _, css = symbol.partition(":")
        if kind == "rect":
            parts.append(f'<rect class="{css}" x="{x}" y="{y - 9}" width="12" height="12"/>')
        elif kind == "dash":
            parts.append(
                f'<line class="{css}" x1="{x + 6}" y1="{y - 11}" x2="{x + 6}" y2="{y + 5}"/>'
            )
        elif kind == "whisker":
            parts.append(
                f'<path class="whisker" d="M{x} {y - 3}H{x + 14}M{x} {y - 8}V{y + 2}'
                f'M{x + 14} {y - 8}V{y + 2}"/>'
            )
        else:
            marker = _MARKERS[css].format(x=x + 6, y=y - 3)
            parts.append(f'<path class="marker {css}" d="{marker}"/>')
        parts.append(f'<text class="label" x="{x + 20}" y="{y}">{escape(text)}</text>')
        x += 28 + len(text) * _CHAR
    return ['<g class="legend">', *parts, "</g>"]


def _row_label(label: str, x: float, y: float) -> str:
    return (
        f'<text class="label" x="{x}" y="{y}" text-anchor="end" dominant-baseline="middle">'
        f"<title>{escape(clip_text(label, TOOLTIP_SHOWN))}</title>{escape(_short(label))}</text>"
    )


_STATUS_MARK = {"pass": " ✓", "fail": " ✗", "insufficient": " –"}
_STATUS_TEXT = {
    "pass": "passes its gate",
    "fail": "misses its gate",
    "insufficient": "too few queries",
    "neutral": "no gate",
}


def bar_chart(
    ident: str, title: str, bars: Sequence[Bar], axis_title: str, *, unit: bool = True
) -> str:
    """Horizontal bars with interval whiskers and, per bar, a threshold mark (a dashed line across
    the row), coloured and labelled by status."""
    labels = [bar.label for bar in bars]
    left = _label_width(labels)
    notes = max((len(bar.note) for bar in bars), default=0)
    width = left + _PLOT_WIDTH + 70 + notes * _CHAR
    height = _TOP + len(bars) * _ROW + _AXIS + _LEGEND
    values = [v for bar in bars for v in (bar.value, bar.low, bar.high) if v is not None]
    values += [threshold for bar in bars for _, threshold in bar.thresholds]
    low, high = _domain(values, unit)
    scale = _Scale(low, high, left, _PLOT_WIDTH)
    bottom = _TOP + len(bars) * _ROW
    body = _x_axis(scale, nice_ticks(low, high), _TOP, bottom, axis_title)
    for row, bar in enumerate(bars):
        y = _TOP + row * _ROW
        middle = y + _ROW / 2
        body.append(_row_label(bar.label, left - 8, middle))
        if bar.value is not None and math.isfinite(bar.value):
            x0, x1 = scale(max(low, 0.0)), scale(bar.value)
            body.append(
                f'<rect class="bar {bar.status}" x="{min(x0, x1)}" y="{y + 5}" '
                f'width="{abs(x1 - x0):.2f}" height="{_ROW - 10}"><title>'
                f"{escape(clip_text(bar.label, TOOLTIP_SHOWN))}: {_fmt(bar.value, 4)} ({escape(bar.status)})</title></rect>"
            )
        if bar.low is not None and bar.high is not None and math.isfinite(bar.low):
            xl, xh = scale(bar.low), scale(bar.high)
            body.append(
                f'<path class="whisker" d="M{xl} {middle}H{xh}M{xl} {middle - 5}V{middle + 5}'
                f'M{xh} {middle - 5}V{middle + 5}"/>'
            )
        for op, threshold in bar.thresholds:
            xt = scale(threshold)
            body.append(
                f'<line class="threshold" x1="{xt}" y1="{y + 1}" x2="{xt}" y2="{y + _ROW - 1}">'
                f"<title>gate {escape(op)} {threshold:g}</title></line>"
            )
        # The status in words too, so it never rests on colour alone.
        mark = _STATUS_MARK.get(bar.status, "")
        text = _fmt(bar.value) + mark + (f" {bar.note}" if bar.note else "")
        body.append(
            f'<text class="value" x="{left + _PLOT_WIDTH + 6}" y="{middle}" '
            f'dominant-baseline="middle">{escape(text)}</text>'
        )
    statuses = dict.fromkeys(bar.status for bar in bars)
    legend = [
        (f"rect:bar {status}", (_STATUS_MARK.get(status, "") + " " + _STATUS_TEXT[status]).strip())
        for status in _STATUS_TEXT
        if status in statuses
    ]
    if any(bar.thresholds for bar in bars):
        legend.append(("dash:threshold", "threshold"))
    if any(bar.low is not None for bar in bars):
        legend.append(("whisker", "95% interval"))
    body += _legend(legend, left, bottom + _AXIS + 8)
    rows = [
        (
            bar.label,
            _fmt(bar.value, 4),
            "" if bar.low is None else f"{_fmt(bar.low, 4)} to {_fmt(bar.high, 4)}",
            ", ".join(f"{op} {threshold:g}" for op, threshold in bar.thresholds),
            bar.status,
        )
        for bar in bars
    ]
    table = _table(("group", "value", "95% interval", "gates", "status"), rows)
    described = f"{len(bars)} bars; dashed marks are thresholds, whiskers 95% intervals."
    return _figure(ident, title, described, width, height, body, table)


def histogram(
    ident: str,
    title: str,
    values: npt.NDArray[np.float64],
    axis_title: str,
    *,
    bins: int = 20,
    unit: bool = True,
    plot_width: float = 440,
) -> str:
    """Counts of per-query values in equal-width bins, with the mean marked."""
    finite = values[np.isfinite(values)]
    if unit and (len(finite) == 0 or (finite.min() >= 0 and finite.max() <= 1)):
        low, high = 0.0, 1.0
    else:
        low, high = _domain(finite.tolist(), False)
    counts, edges = np.histogram(finite, bins=bins, range=(low, high))
    left, plot_height = 56.0, 150.0
    width, height = left + plot_width + 30, _TOP + plot_height + _AXIS + _LEGEND
    scale = _Scale(low, high, left, plot_width)
    bottom = _TOP + plot_height
    top_count = max(int(counts.max()) if len(counts) else 0, 1)
    count_ticks = [t for t in nice_ticks(0, top_count, 4) if t == int(t)]
    y_high = max(count_ticks[-1] if count_ticks else 1, top_count)
    body = _x_axis(scale, nice_ticks(low, high), _TOP, bottom, axis_title)
    body.append(f'<line class="axis" x1="{left}" y1="{_TOP}" x2="{left}" y2="{bottom}"/>')
    for tick in count_ticks:
        y = round(bottom - tick / y_high * plot_height, 2)
        body.append(
            f'<text class="tick" x="{left - 6}" y="{y}" text-anchor="end" '
            f'dominant-baseline="middle">{int(tick):,}</text>'
        )
    body.append(
        f'<text class="axis-title" transform="rotate(-90)" x="{-(bottom + _TOP) / 2}" y="14" '
        'text-anchor="middle">queries</text>'
    )
    for count, start, stop in zip(counts.tolist(), edges[:-1], edges[1:], strict=True):
        if not count:
            continue
        x0, x1 = scale(float(start)), scale(float(stop))
        h = round(count / y_high * plot_height, 2)
        body.append(
            f'<rect class="bar neutral" x="{x0 + 0.5}" y="{bottom - h}" width="{x1 - x0 - 1:.2f}" '
            f'height="{h}"><title>{float(start):.3g} to {float(stop):.3g}: {counted(count, "query")}'
            "</title></rect>"
        )
    if len(finite):
        mean = float(finite.mean())
        xm = scale(mean)
        body.append(f'<line class="mean" x1="{xm}" y1="{_TOP}" x2="{xm}" y2="{bottom}"/>')
        body.append(f'<text class="value" x="{xm + 4}" y="{_TOP + 10}">mean {mean:.3f}</text>')
    rows = [
        (f"{float(a):.3g} to {float(b):.3g}", f"{c:,}")
        for c, a, b in zip(counts.tolist(), edges[:-1], edges[1:], strict=True)
    ]
    table = _table(("range", "queries"), rows)
    described = (
        f"Histogram of {len(finite):,} per-query values in {bins} bins from {low:g} to {high:g}."
    )
    return _figure(ident, title, described, width, height, body, table)


_MARKERS = {
    # Shapes differ so the kind reads without colour: down triangle, up triangle, circle.
    "regression": "M{x} {y}m-6 -5h12l-6 10z",
    "improvement": "M{x} {y}m-6 5h12l-6 -10z",
    "none": "M{x} {y}m-4 0a4 4 0 1 0 8 0a4 4 0 1 0 -8 0",
}


def forest_plot(ident: str, title: str, rows: Sequence[Interval], axis_title: str) -> str:
    """Estimates with interval whiskers around a zero line; regressions and improvements get
    their own colour and marker shape."""
    left = _label_width([row.label for row in rows])
    width = left + _PLOT_WIDTH + 150
    height = _TOP + len(rows) * _ROW + _AXIS + _LEGEND
    spread = [abs(v) for row in rows for v in (row.low, row.high, row.estimate) if math.isfinite(v)]
    reach = max(spread, default=0.0) or 0.01
    ticks = nice_ticks(-reach, reach, 6)
    low, high = min(ticks[0], -reach), max(ticks[-1], reach)
    scale = _Scale(low, high, left, _PLOT_WIDTH)
    bottom = _TOP + len(rows) * _ROW
    body = _x_axis(scale, ticks, _TOP, bottom, axis_title)
    body.append(
        f'<line class="zero" x1="{scale(0.0)}" y1="{_TOP}" x2="{scale(0.0)}" y2="{bottom}"/>'
    )
    for index, row in enumerate(rows):
        middle = _TOP + index * _ROW + _ROW / 2
        body.append(_row_label(row.label, left - 8, middle))
        if math.isfinite(row.low) and math.isfinite(row.high):
            xl, xh = scale(row.low), scale(row.high)
            body.append(
                f'<path class="whisker {row.kind}" d="M{xl} {middle}H{xh}M{xl} {middle - 5}'
                f'V{middle + 5}M{xh} {middle - 5}V{middle + 5}"/>'
            )
        if math.isfinite(row.estimate):
            marker = _MARKERS.get(row.kind, _MARKERS["none"])
            body.append(
                f'<path class="marker {row.kind}" d="{marker.format(x=scale(row.estimate), y=middle)}">'
                f"<title>{escape(clip_text(row.label, TOOLTIP_SHOWN))}: {row.estimate:+.4f} [{row.low:+.4f}, "
                f"{row.high:+.4f}] {escape(row.kind)}</title></path>"
            )
        text = f"{row.estimate:+.4f}" + (f" {row.note}" if row.note else "")
        body.append(
            f'<text class="value {row.kind}" x="{left + _PLOT_WIDTH + 6}" y="{middle}" '
            f'dominant-baseline="middle">{escape(text)}</text>'
        )
    body += _legend(
        [
            ("marker:regression", "regression"),
            ("marker:improvement", "improvement"),
            ("marker:none", "no flag"),
            ("whisker", "95% interval"),
        ],
        left,
        bottom + _AXIS + 8,
    )
    table = _table(
        ("comparison", "estimate", "95% interval", "flag"),
        [(r.label, f"{r.estimate:+.4f}", f"{r.low:+.4f} to {r.high:+.4f}", r.kind) for r in rows],
    )
    described = (
        f"{len(rows)} estimates with 95% intervals; down triangles are regressions, up triangles "
        "improvements, circles neither; the vertical line is no change."
    )
    return _figure(ident, title, described, width, height, body, table)


_PLURAL = {"win": "wins", "tie": "ties", "loss": "losses"}


def split_bars(ident: str, title: str, rows: Sequence[Split]) -> str:
    """Each row a 100% stacked bar of wins, ties and losses, with a legend."""
    left = _label_width([row.label for row in rows])
    width = left + _PLOT_WIDTH + 20
    legend_y = _TOP + len(rows) * _ROW + 16
    height = legend_y + 20
    body = []
    for index, row in enumerate(rows):
        y = _TOP + index * _ROW
        body.append(_row_label(row.label, left - 8, y + _ROW / 2))
        total = row.wins + row.ties + row.losses
        x = float(left)
        for kind, count in (("win", row.wins), ("tie", row.ties), ("loss", row.losses)):
            if not total or not count:
                continue
            w = round(count / total * _PLOT_WIDTH, 2)
            body.append(
                f'<rect class="split {kind}" x="{x}" y="{y + 4}" width="{w}" height="{_ROW - 8}">'
                f"<title>{escape(clip_text(row.label, TOOLTIP_SHOWN))}: {count:,} {_PLURAL[kind]} of {total:,}</title></rect>"
            )
            if w > 34:
                body.append(
                    f'<text class="split-text" x="{x + w / 2}" y="{y + _ROW / 2}" '
                    f'text-anchor="middle" dominant-baseline="middle">{count:,}</text>'
                )
            x += w
    for offset, kind in enumerate(("win", "tie", "loss")):
        lx = left + offset * 110
        body.append(
            f'<rect class="split {kind}" x="{lx}" y="{legend_y - 9}" width="12" height="12"/>'
            f'<text class="label" x="{lx + 18}" y="{legend_y}">{_PLURAL[kind]}</text>'
        )
    table = _table(
        ("comparison", "wins", "ties", "losses"),
        [(r.label, f"{r.wins:,}", f"{r.ties:,}", f"{r.losses:,}") for r in rows],
    )
    described = f"{len(rows)} stacked bars of per-query wins, ties and losses of the candidate."
    return _figure(ident, title, described, width, height, body, table)
