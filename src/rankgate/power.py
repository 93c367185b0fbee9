"""Statistical power: how many queries a decision needs, and the smallest change a comparison of a
given size could detect.

A comparison that finds "no regression" on 40 queries has not shown that nothing changed, only that
no change large enough for 40 queries to reveal did. Topic-set-size design (Sakai 2016) turns that
around: from the per-query variance a past run shows, the number of queries a test needs to detect a
change of a given size at a given power, or, for a given number of queries, the minimum detectable
effect (MDE). Webber, Moffat & Zobel (2008) showed how under-powered typical retrieval comparisons
are, and how the variance observed in one experiment plans the next.

The formulas, for a two-sided t-test at level alpha, a true difference delta and power 1 - beta:

* **paired** (both systems rank the same queries; a one-sample t-test on the per-query
  differences, standard deviation ``sd_delta``): with ``n`` queries, ``T ~ nct(n - 1, lambda)``,
  ``lambda = delta / sd_delta * sqrt(n)``;
* **unpaired** (each arm its own queries, ``n_b`` and ``n_c``, standard deviations ``sd_b`` and
  ``sd_c``): ``T ~ nct(n_b + n_c - 2, lambda)``, ``lambda = delta / sqrt(sd_b^2 / n_b + sd_c^2 /
  n_c)``. The noncentrality is Welch's (each arm its own variance, as ``compare``'s Welch test);
  the degrees of freedom are the pooled test's, as in statsmodels' ``TTestIndPower`` (with equal
  arms and equal variances they are Welch's too; otherwise Welch's are fewer and the power a
  little lower). In statsmodels' terms: effect size ``delta / sd`` with ``sd^2 = (n_c sd_b^2 +
  n_b sd_c^2) / (n_b + n_c)``, ``nobs1 = n_b``, ``ratio = n_c / n_b``;

and power(n, delta) = P(T > t_{1-alpha/2, df}) + P(T < -t_{1-alpha/2, df}). The queries a change
needs solve power = 1 - beta for n (rounded up: paired queries, or queries per arm with equal arms);
the MDE solves it for delta. Both are found by root finding on the noncentral t distribution
(``scipy.stats.nct``), so they equal statsmodels' ``TTestPower`` (paired) and ``TTestIndPower``
(unpaired) solutions, without their normal approximations.

References:
    Tetsuya Sakai. Topic set size design. Information Retrieval Journal 19(3), 256-283, 2016.
    William Webber, Alistair Moffat, Justin Zobel. Statistical power in retrieval
    experimentation. CIKM 2008, 571-580.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import numpy.typing as npt

from rankgate.errors import ConfigError, InputError, UsageError
from rankgate.segments import SegmentKey

if TYPE_CHECKING:
    from rankgate.compare_cells import Cell
    from rankgate.evaluate import Evaluation
    from rankgate.spec import MetricSpec

__all__ = [
    "DETECTABLE_POWER",
    "MAX_QUERIES",
    "NO_SPREAD",
    "Plan",
    "PlanRow",
    "Spread",
    "check_level",
    "check_request",
    "combined_sd",
    "detectable_paired",
    "detectable_two_sample",
    "effect_size_paired",
    "effect_size_two_sample",
    "plan",
    "power_paired",
    "power_two_sample",
    "queries_paired",
    "queries_two_sample",
    "spread_of",
    "spreads_from_cells",
    "spreads_from_evaluation",
    "spreads_from_report",
]

Design = Literal["paired", "unpaired"]
Values = npt.NDArray[np.float64]

#: The power ``compare``'s minimum detectable effect is stated at.
DETECTABLE_POWER = 0.8
#: Plans past this many queries (per arm) say "more than" instead of a number.
MAX_QUERIES = 10**9
# Bracketing a root doubles a bound at most this many times (2^200: far past any real effect).
_DOUBLINGS = 200
#: A standard deviation this small is no spread at all: values that differ only in the last bits
#: (a sum taken in another order) give no estimate of how a metric varies.
NO_SPREAD = 1e-12


# --- power and its inverses --------------------------------------------------------------------


#: The bounds of what ``plan`` is asked for.
MIN_PLAN_ALPHA = 1e-6
MAX_PLAN_DELTA = 1e6
MAX_PLAN_QUERIES = 10**9


def check_level(power: float, alpha: float) -> None:
    """Refuse a power or alpha outside (0, 1), or a power not above alpha (a two-sided test has
    power alpha at no effect, so any smaller target is met by every effect)."""
    for name, value in (("alpha", alpha), ("power", power)):
        if not _number(value) or not 0.0 < value < 1.0:
            raise ConfigError(f"{name} must be a number between 0 and 1 (exclusive), got {value!r}")
    if power <= alpha:
        raise ConfigError(
            f"power ({power:g}) must be above alpha ({alpha:g}): a two-sided test already rejects "
            "with probability alpha when nothing changed"
        )


def power_paired(effect_size: float, queries: float, alpha: float) -> float:
    """Power of the two-sided paired t-test: ``effect_size`` is delta / sd of the per-query
    differences, ``queries`` the pairs (>= 2; fractional values interpolate).

    Equal to ``statsmodels.stats.power.TTestPower().power(effect_size, queries, alpha)``.

    >>> round(power_paired(0.5, 34, 0.05), 4)
    0.8078
    """
    return _two_sided(abs(effect_size) * math.sqrt(queries), queries - 1.0, alpha)


def power_two_sample(
    effect_size: float, baseline_queries: float, alpha: float, ratio: float = 1.0
) -> float:
    """Power of the two-sided two-sample t-test with ``baseline_queries`` and ``ratio *
    baseline_queries`` queries; ``effect_size`` is delta / sd (see the module docstring for the sd
    of two arms with their own variances).

    Equal to ``statsmodels.stats.power.TTestIndPower().power(effect_size, baseline_queries,
    alpha, ratio)``.

    >>> round(power_two_sample(0.5, 64, 0.05), 4)
    0.8015
    """
    candidate_queries = baseline_queries * ratio
    effective = baseline_queries * candidate_queries / (baseline_queries + candidate_queries)
    return _two_sided(
        abs(effect_size) * math.sqrt(effective), baseline_queries + candidate_queries - 2.0, alpha
    )


def _two_sided(noncentrality: float, df: float, alpha: float) -> float:
    from scipy import stats

    critical = float(stats.t.isf(alpha / 2.0, df))
    upper = float(stats.nct.sf(critical, df, noncentrality))
    # P(T < -c | lambda) written as P(T > c | -lambda): the same number, and it stays finite where
    # the CDF's far lower tail comes back NaN from scipy (large lambda, large df).
    lower = float(stats.nct.sf(critical, df, -noncentrality))
    return upper + lower


def effect_size_paired(queries: float, *, power: float, alpha: float) -> float:
    """The standardised effect (delta / sd of the differences) the paired test detects with
    probability ``power`` on ``queries`` pairs (>= 2)."""
    check_level(power, alpha)
    _check_queries(queries, "queries")
    return _solve_effect(lambda d: power_paired(d, queries, alpha), power, alpha, queries)


def effect_size_two_sample(
    baseline_queries: float, candidate_queries: float, *, power: float, alpha: float
) -> float:
    """The standardised effect the two-sample test detects with probability ``power`` with
    these arms (each >= 2)."""
    check_level(power, alpha)
    _check_queries(baseline_queries, "baseline_queries")
    _check_queries(candidate_queries, "candidate_queries")
    ratio = candidate_queries / baseline_queries
    effective = baseline_queries * ratio / (1.0 + ratio)
    return _solve_effect(
        lambda d: power_two_sample(d, baseline_queries, alpha, ratio), power, alpha, effective
    )


def detectable_paired(sd: float, queries: float, *, power: float, alpha: float) -> float | None:
    """The minimum detectable |delta| of a paired comparison: ``sd`` of the per-query
    differences, ``queries`` pairs. None when there is no spread to estimate it from (every
    difference the same) or fewer than two pairs."""
    if queries < 2 or not _spread(sd):
        return None
    return sd * effect_size_paired(queries, power=power, alpha=alpha)


def detectable_two_sample(
    baseline_sd: float,
    candidate_sd: float,
    baseline_queries: float,
    candidate_queries: float,
    *,
    power: float,
    alpha: float,
) -> float | None:
    """The minimum detectable |delta| of an unpaired comparison with these arms. None when an
    arm has fewer than two queries or neither arm has any spread."""
    if min(baseline_queries, candidate_queries) < 2:
        return None
    sd = combined_sd(baseline_sd, candidate_sd, baseline_queries, candidate_queries)
    if not _spread(sd):
        return None
    return sd * effect_size_two_sample(
        baseline_queries, candidate_queries, power=power, alpha=alpha
    )


def queries_paired(delta: float, sd: float, *, power: float, alpha: float) -> float | None:
    """The pairs a paired test needs to detect ``delta`` with probability ``power``, unrounded
    (at least 2); None past ``MAX_QUERIES``."""
    check_level(power, alpha)
    _check_delta(delta)
    if not _spread(sd):
        raise ValueError(f"sd must be a positive number, got {sd!r}")
    effect = delta / sd
    return _solve_queries(lambda n: power_paired(effect, n, alpha), power, alpha, effect)


def queries_two_sample(
    delta: float, baseline_sd: float, candidate_sd: float, *, power: float, alpha: float
) -> float | None:
    """The queries per arm (equal arms) a two-sample test needs to detect ``delta`` with
    probability ``power``, unrounded (at least 2); None past ``MAX_QUERIES``."""
    check_level(power, alpha)
    _check_delta(delta)
    sd = combined_sd(baseline_sd, candidate_sd, 1.0, 1.0)
    if not _spread(sd):
        raise ValueError("baseline_sd and candidate_sd must not both be 0")
    effect = delta / sd
    return _solve_queries(
        lambda n: power_two_sample(effect, n, alpha), power, alpha, effect / math.sqrt(2.0)
    )


def _solve_effect(
    power_at: Callable[[float], float], power: float, alpha: float, effective: float
) -> float:
    """The effect where ``power_at`` (increasing, ``alpha`` at 0) reaches ``power``."""
    from scipy import optimize, stats

    guess = (stats.norm.isf(alpha / 2.0) + stats.norm.isf(1.0 - power)) / math.sqrt(effective)
    high = max(guess, 1e-6)
    for _ in range(_DOUBLINGS):
        if power_at(high) >= power:
            break
        high *= 2.0
    else:
        raise ValueError(f"no effect size reaches power {power:g} at alpha {alpha:g}")
    low = high / 2.0
    while low > 1e-12 and power_at(low) > power:
        low /= 2.0
    return float(
        optimize.brentq(
            lambda d: power_at(d) - power, low, high, xtol=1e-15, rtol=4 * np.finfo(float).eps
        )
    )


def _solve_queries(
    power_at: Callable[[float], float], power: float, alpha: float, effect: float
) -> float | None:
    """The queries (>= 2) where ``power_at`` (increasing in them) reaches ``power``."""
    from scipy import optimize, stats

    if power_at(2.0) >= power:
        return 2.0
    if power_at(float(MAX_QUERIES)) < power:
        return None
    guess = ((stats.norm.isf(alpha / 2.0) + stats.norm.isf(1.0 - power)) / effect) ** 2
    high = min(max(2.0 * guess, 4.0), float(MAX_QUERIES))
    while power_at(high) < power:
        high = min(high * 2.0, float(MAX_QUERIES))
    low = max(2.0, high / 4.0)
    while power_at(low) > power:
        low = max(2.0, low / 4.0)
    return float(
        optimize.brentq(
            lambda n: power_at(n) - power, low, high, xtol=1e-12, rtol=4 * np.finfo(float).eps
        )
    )


def combined_sd(
    baseline_sd: float, candidate_sd: float, baseline_queries: float, candidate_queries: float
) -> float:
    """The sd that makes statsmodels' pooled two-sample effect size carry Welch's noncentrality:
    ``sqrt((n_c sd_b^2 + n_b sd_c^2) / (n_b + n_c))``."""
    return math.sqrt(
        (candidate_queries * baseline_sd**2 + baseline_queries * candidate_sd**2)
        / (baseline_queries + candidate_queries)
    )


def _check_queries(queries: float, name: str) -> None:
    if not _number(queries) or queries < 2:
        raise ConfigError(f"{name} must be a number >= 2, got {queries!r}")


def _check_delta(delta: float) -> None:
    if not _number(delta) or delta <= 0:
        raise ConfigError(
            f"delta must be a number > 0 (a change in the metric's units), got {delta!r}"
        )


def _spread(sd: float | None) -> bool:
    return sd is not None and math.isfinite(sd) and sd > NO_SPREAD


def _number(value: object) -> bool:
    return (
        isinstance(value, numbers.Real)
        and not isinstance(value, bool)
        and math.isfinite(float(value))
    )


# --- what a plan reads: per group, counts and standard deviations -------------------------------


@dataclass(frozen=True, slots=True)
class Spread:
    """What a plan needs to know of one group of queries (``segment`` None: all of them).

    ``baseline_queries``/``candidate_queries`` and their standard deviations (n - 1 in the
    denominator) describe each arm; ``delta_sd`` is the standard deviation of the per-query
    differences when the arms ranked the same queries (paired), None otherwise. From a single
    evaluation the two arms are the same run: a plan then assumes both arms vary as it did.
    """

    segment: SegmentKey | None
    baseline_queries: int
    candidate_queries: int
    baseline_sd: float | None
    candidate_sd: float | None
    delta_sd: float | None = None

    @property
    def paired(self) -> bool:
        return self.delta_sd is not None

    @property
    def group(self) -> str:
        return "overall" if self.segment is None else str(self.segment)


def spread_of(values: Values) -> float | None:
    """The sample standard deviation (n - 1), None below two values."""
    return float(np.std(values, ddof=1)) if len(values) >= 2 else None


def spreads_from_evaluation(evaluation: Evaluation, metric: MetricSpec) -> list[Spread]:
    """One system's spread of ``metric``, overall and in each of its segments (both arms assumed
    to vary as this run did; no paired figures)."""
    if metric not in evaluation.metrics:
        raise UsageError(
            f"no metric {metric} in the evaluation (its metrics: "
            f"{', '.join(str(spec) for spec in evaluation.metrics)})"
        )
    values = np.asarray(evaluation.values[metric], dtype=np.float64)
    groups: list[tuple[SegmentKey | None, Values]] = [(None, values)]
    columns: dict[str, npt.NDArray[Any]] = {}
    for group in evaluation.segments:
        key = group.key
        if key is None:
            continue
        if key.field not in columns:
            columns[key.field] = np.asarray(evaluation.segment_column(key.field), dtype=object)
        groups.append((key, values[columns[key.field] == key.value]))
    return [
        Spread(key, len(found), len(found), spread_of(found), spread_of(found))
        for key, found in groups
        if key is None or len(found)
    ]


def spreads_from_cells(cells: Sequence[Cell], metric: MetricSpec) -> list[Spread]:
    """The spreads a comparison's cells of ``metric`` carry (one candidate's cells)."""
    return [
        _spread_from_fields(cell.segment, cell.statistics(), str(metric))
        for cell in cells
        if cell.metric == metric
    ]


def _spread_from_fields(
    segment: SegmentKey | None, fields: Mapping[str, Any], where: str
) -> Spread:
    def count(name: str) -> int:
        value = fields.get(name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InputError(where, name, f"expected a whole number of queries, got {value!r}")
        return value

    def deviation(name: str) -> float | None:
        value = fields.get(name)
        if value is None:
            return None
        if not _number(value) or value < 0:
            raise InputError(where, name, f"expected a standard deviation, got {value!r}")
        return float(value)

    paired = fields.get("design") == "paired"
    return Spread(
        segment,
        count("baseline_queries"),
        count("candidate_queries"),
        deviation("baseline_sd"),
        deviation("candidate_sd"),
        deviation("delta_sd") if paired else None,
    )


def spreads_from_report(
    report: Any, metric: MetricSpec, *, source: str, candidate: str | None = None
) -> tuple[list[Spread], str, list[str]]:
    """The spreads of ``metric`` in a parsed ``rankgate eval`` or ``rankgate compare`` JSON
    report: (spreads, what they come from in words, notes).

    A compare report's cells carry each group's counts and standard deviations; an eval report
    carries per-query values only when written with ``--per-query``, and no segment with them.
    """
    if not isinstance(report, dict) or (report.get("tool") or {}).get("name") != "rankgate":
        raise InputError(source, None, "not a rankgate JSON report (no tool.name 'rankgate')")
    if "cells" in report and "baseline" in report:
        return _spreads_from_compare(report, metric, source, candidate)
    if "summary" in report and "metrics" in report:
        if candidate is not None:
            raise UsageError(
                f"--candidate names a side of a compare report; {source} is an eval report"
            )
        return _spreads_from_eval(report, metric, source)
    raise InputError(source, None, "neither an eval nor a compare report")


def _spreads_from_compare(
    report: dict[str, Any], metric: MetricSpec, source: str, candidate: str | None
) -> tuple[list[Spread], str, list[str]]:
    cells = report.get("cells")
    if not isinstance(cells, list):
        raise InputError(source, "cells", "expected a list of cells")
    names = [str(name) for name in report.get("candidates") or []]
    if candidate is None:
        if len(names) > 1:
            raise UsageError(
                f"{source} compares several candidates ({', '.join(names)}): name one with "
                "--candidate"
            )
        candidate = names[0] if names else None
    elif candidate not in names:
        raise UsageError(
            f"no candidate {candidate!r} in {source} (candidates: {', '.join(names) or 'none'})"
        )
    name = str(metric)
    ours = [cell for cell in cells if isinstance(cell, dict) and cell.get("candidate") == candidate]
    chosen = [cell for cell in ours if cell.get("metric") == name]
    if not chosen:
        known = list(dict.fromkeys(str(cell.get("metric")) for cell in ours))
        raise UsageError(
            f"no metric {name} in {source} (its metrics: {', '.join(known) or 'none'})"
        )
    if any("baseline_sd" not in cell for cell in chosen):
        raise InputError(
            source,
            "cells",
            "the cells carry no standard deviations (baseline_sd, candidate_sd, delta_sd): the "
            "report predates them; compare again with this version, or plan from the traces",
        )
    spreads = [
        _spread_from_fields(_segment_of(cell.get("segment"), source), cell, f"{source} {name}")
        for cell in chosen
    ]
    # The overall group first, then the segments in the report's order.
    spreads.sort(key=lambda spread: spread.segment is not None)
    if spreads[0].segment is not None:
        raise InputError(source, "cells", f"no overall cell for {name}")
    design = "paired" if spreads[0].paired else "unpaired"
    return spreads, f"{source} (candidate {candidate}, {design})", []


def _spreads_from_eval(
    report: dict[str, Any], metric: MetricSpec, source: str
) -> tuple[list[Spread], str, list[str]]:
    name = str(metric)
    rows = report.get("per_query")
    if rows is None:
        raise UsageError(
            f"{source} has no per-query values: write it with `rankgate eval --format json "
            "--per-query`, or plan from the traces themselves"
        )
    known = list(report.get("metrics") or {})
    if name not in known:
        raise UsageError(
            f"no metric {name} in {source} (its metrics: {', '.join(known) or 'none'})"
        )
    if not isinstance(rows, list):
        raise InputError(source, "per_query", "expected a list of per-query records")
    values = []
    for index, row in enumerate(rows):
        value = row.get(name) if isinstance(row, dict) else None
        if not isinstance(value, (int, float)) or not _number(value):
            query = row.get("query_id") if isinstance(row, dict) else None
            raise InputError(
                source,
                f"per_query[{index}].{name}",
                f"expected a number for query {query!r}, got {value!r}",
            )
        values.append(float(value))
    found = np.asarray(values, dtype=np.float64)
    notes = ["one run: both arms are assumed to vary as it did; paired figures need a comparison"]
    if report.get("settings", {}).get("segment_by"):
        notes.append(
            "the eval report's per-query values carry no segment: plan from the traces for "
            "per-segment figures"
        )
    spread = Spread(None, len(found), len(found), spread_of(found), spread_of(found))
    return [spread], f"{source} (one run)", notes


def _segment_of(value: Any, source: str) -> SegmentKey | None:
    if value is None:
        return None
    if not isinstance(value, dict) or not {"field", "value"} <= set(value):
        raise InputError(source, "segment", f"expected {{field, value}} or null, got {value!r}")
    return SegmentKey(str(value["field"]), str(value["value"]))


# --- the plan -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PlanRow:
    """One design on one group of queries.

    ``queries_needed``: paired queries, or queries per arm (equal arms) when unpaired, to detect
    the plan's delta at its power (None without a delta, or past ``MAX_QUERIES``: ``note`` says
    which); ``queries_needed_exact`` the unrounded solution. ``detectable``: the minimum
    detectable |delta| with ``detectable_baseline_queries`` and ``detectable_candidate_queries``
    (paired: both the pairs). ``sd``: the standard deviation the figures come from (paired: of
    the per-query differences; unpaired: the two arms' combined for equal arms, ``sqrt((sd_b^2 +
    sd_c^2) / 2)``). A group nothing can be planned from has None figures and a ``note``.
    """

    segment: SegmentKey | None
    design: Design
    baseline_queries: int
    candidate_queries: int
    sd: float | None
    baseline_sd: float | None
    candidate_sd: float | None
    queries_needed: int | None
    queries_needed_exact: float | None
    detectable: float | None
    detectable_baseline_queries: int
    detectable_candidate_queries: int
    note: str | None = None

    @property
    def group(self) -> str:
        return "overall" if self.segment is None else str(self.segment)


@dataclass(frozen=True, slots=True)
class Plan:
    """A plan for one metric: its settings and one row per design and group (overall first)."""

    metric: str
    source: str
    delta: float | None
    power: float
    alpha: float
    queries: int | None
    rows: tuple[PlanRow, ...]
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The plan as plain data (``rankgate plan --format json``)."""
        return {
            "metric": self.metric,
            "source": self.source,
            "test": "two-sided t-test",
            "alpha": self.alpha,
            "power": self.power,
            "delta": self.delta,
            "queries": self.queries,
            "rows": [
                {
                    "segment": (
                        None
                        if row.segment is None
                        else {"field": row.segment.field, "value": row.segment.value}
                    ),
                    "design": row.design,
                    "baseline_queries": row.baseline_queries,
                    "candidate_queries": row.candidate_queries,
                    "sd": row.sd,
                    "baseline_sd": row.baseline_sd,
                    "candidate_sd": row.candidate_sd,
                    "queries_needed": row.queries_needed,
                    "queries_needed_exact": row.queries_needed_exact,
                    "queries_needed_unit": (
                        "queries" if row.design == "paired" else "queries per arm"
                    ),
                    "minimum_detectable_effect": row.detectable,
                    "detectable_baseline_queries": row.detectable_baseline_queries,
                    "detectable_candidate_queries": row.detectable_candidate_queries,
                    "note": row.note,
                }
                for row in self.rows
            ],
            "notes": list(self.notes),
        }


def check_request(
    delta: float | None, power: float, alpha: float, queries: int | None = None
) -> None:
    """Refuse a plan's settings before any data is read: ``delta`` > 0 (or None), ``power`` and
    ``alpha`` in (0, 1) with power above alpha, ``queries`` a whole number >= 2 (or None)."""
    check_level(power, alpha)
    # Past these the solvers lose their footing (and no experiment is planned there).
    if alpha < MIN_PLAN_ALPHA:
        raise ConfigError(f"alpha must be at least {MIN_PLAN_ALPHA:g} to plan with, got {alpha!r}")
    if delta is not None:
        _check_delta(delta)
        if delta > MAX_PLAN_DELTA:
            raise ConfigError(f"delta must be at most {MAX_PLAN_DELTA:g}, got {delta!r}")
    if queries is not None and (
        isinstance(queries, bool)
        or not isinstance(queries, int)
        or not 2 <= queries <= MAX_PLAN_QUERIES
    ):
        raise ConfigError(
            f"queries must be a whole number from 2 to {MAX_PLAN_QUERIES:,}, got {queries!r}"
        )


def plan(
    spreads: Sequence[Spread],
    metric: MetricSpec | str,
    *,
    delta: float | None = None,
    power: float = DETECTABLE_POWER,
    alpha: float = 0.05,
    queries: int | None = None,
    source: str = "",
    notes: Sequence[str] = (),
) -> Plan:
    """Per group and design, the queries needed to detect ``delta`` (when given) and the minimum
    detectable effect with ``queries`` (paired queries or queries per arm; default: the observed
    ones), for a two-sided test at ``alpha`` with probability ``power``.

    A paired group gets a paired row (from the sd of its per-query differences) and an unpaired
    one (from each arm's sd: what a traffic split of as many queries would need); an unpaired
    group an unpaired row. The overall group must have a spread to plan from (two queries or more,
    values that are not all equal): otherwise it is an ``InputError``; a segment without one gets
    a row with a ``note`` instead.
    """
    check_request(delta, power, alpha, queries)
    if not spreads or spreads[0].segment is not None:
        raise InputError(
            source or "the input", str(metric), "no query scored overall: nothing to plan from"
        )
    rows = []
    for spread in spreads:
        designs: list[Design] = ["paired", "unpaired"] if spread.paired else ["unpaired"]
        for design in designs:
            row = _row(spread, design, delta, power, alpha, queries)
            if spread.segment is None and row.note is not None and row.detectable is None:
                raise InputError(source or "the input", str(metric), f"overall: {row.note}")
            rows.append(row)
    return Plan(str(metric), source, delta, power, alpha, queries, tuple(rows), tuple(notes))


def _row(
    spread: Spread,
    design: Design,
    delta: float | None,
    power: float,
    alpha: float,
    queries: int | None,
) -> PlanRow:
    n_b, n_c = spread.baseline_queries, spread.candidate_queries
    at_b, at_c = (queries, queries) if queries is not None else (n_b, n_c)
    if design == "paired":
        sd = spread.delta_sd
        problem = _problem(min(n_b, n_c), sd, "per-query difference")
    else:
        both = [s for s in (spread.baseline_sd, spread.candidate_sd) if s is not None]
        sd = (
            math.sqrt(((spread.baseline_sd or 0.0) ** 2 + (spread.candidate_sd or 0.0) ** 2) / 2)
            if len(both) == 2
            else None
        )
        problem = _problem(min(n_b, n_c), sd, "per-query value")
    empty = PlanRow(
        spread.segment,
        design,
        n_b,
        n_c,
        sd,
        spread.baseline_sd,
        spread.candidate_sd,
        None,
        None,
        None,
        at_b,
        at_c,
        problem,
    )
    if problem is not None or sd is None:
        return empty
    if design == "paired":
        detectable = detectable_paired(sd, at_b, power=power, alpha=alpha)
        exact = None if delta is None else queries_paired(delta, sd, power=power, alpha=alpha)
    else:
        assert spread.baseline_sd is not None and spread.candidate_sd is not None
        detectable = detectable_two_sample(
            spread.baseline_sd, spread.candidate_sd, at_b, at_c, power=power, alpha=alpha
        )
        exact = (
            None
            if delta is None
            else queries_two_sample(
                delta, spread.baseline_sd, spread.candidate_sd, power=power, alpha=alpha
            )
        )
    note = None
    if delta is not None and exact is None:
        note = f"more than {MAX_QUERIES:,} queries"
    needed = None if exact is None else math.ceil(exact)
    return PlanRow(
        spread.segment,
        design,
        n_b,
        n_c,
        sd,
        spread.baseline_sd,
        spread.candidate_sd,
        needed,
        exact,
        detectable,
        at_b,
        at_c,
        note,
    )


def _problem(count: int, sd: float | None, what: str) -> str | None:
    if count < 2:
        return f"{count} quer{'y' if count == 1 else 'ies'}: a variance needs at least 2"
    if not _spread(sd):
        return f"zero variance: every {what} is the same, so there is no spread to plan from"
    return None
