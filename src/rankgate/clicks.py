"""Relevance labels from click logs, corrected for position bias.

Clicks are plentiful but biased: a document at rank 1 is looked at far more often than one at rank
10, so its click-through rate says as much about where it was shown as about whether it is
relevant. Under the position-based model (PBM; Craswell et al. 2008) a click happens when the
result is examined and found relevant, independently:

    P(click | q, d, rank k) = p_k * r(q, d)

``p_k`` is the examination propensity of rank k and ``r(q, d)`` the relevance of the document to
the query. With the propensities known, ``clicks / sum of p over the ranks it was shown at`` is an
unbiased estimate of ``r`` (inverse propensity weighting; Joachims et al. 2017). This module

1. reads impression logs into columnar arrays (``read_click_log``);
2. gets the propensities, relative to rank 1 (``p_1 = 1``), from the user (a table or a power law
   ``(1/k)^eta``) or from the logs (``estimate_propensities``):

   * ``swap``: randomized swap experiments (Joachims et al. 2017, following Wang et al. 2016): in
     lists where the result at rank 1 was swapped with rank k at random, the click rate at rank k
     over the click rate at rank 1 in unswapped lists is ``p_k / p_1``. Needs logs that carry
     ``swap_rank``; the cleanest estimate, at a cost in user experience.
   * ``harvest``: intervention harvesting (Agarwal et al. 2019): when different rankers showed the
     same (query, document) at different ranks k and k', the click rates over those pairs estimate
     ``p_k / p_k'`` with no intervention; all rank pairs are combined by weighted least squares in
     log space. Needs several rankers (or ranker versions) in the logs.
   * ``em``: expectation-maximisation on the PBM (as in Wang et al. 2018, without the regression):
     fits ``p_k`` and ``r(q, d)`` jointly from ordinary logs. Needs the same pairs shown at
     different ranks too, or its propensities are not identified.

3. turns clicks into labels (``click_labels``): clicks over expected examinations (propensities
   clipped from below, which bounds the weight of any one click), smoothed toward the global rate
   by a prior worth ``prior_strength`` examinations, is each pair's click score. A pair with fewer
   expected examinations than ``min_examinations`` stays unlabeled, and the summary counts it.
   Grades come, by default, from the graded position-based model fitted to the logs
   (``GradeLevels``): each grade g has a click rate ``c_g`` (a grade-g result is clicked with
   probability ``c_g`` at rank 1, ``p_k c_g`` at rank k) and a share of the pairs, both fitted by
   EM, and a pair's grade is the one most probable given all its clicks and non-clicks at the
   ranks it was shown at (maximum a posteriori). So the grades are set
   where the logs' own relevance levels are, not where fixed thresholds guessed them to be, and a
   pair seen little is judged with the uncertainty that goes with it. Fixed thresholds the user
   gives, or thresholds calibrated on a small human-labeled set (quantile matching), replace it.

References: N. Craswell, O. Zoeter, M. Taylor, B. Ramsey, "An experimental comparison of click
position-bias models", WSDM 2008. T. Joachims, A. Swaminathan, T. Schnabel, "Unbiased
learning-to-rank with biased feedback", WSDM 2017. X. Wang, M. Bendersky, D. Metzler, M. Najork,
"Learning to rank with selection bias in personal search", SIGIR 2016. X. Wang, N. Golbandi,
M. Bendersky, D. Metzler, M. Najork, "Position bias estimation for unbiased learning to rank in
personal search", WSDM 2018. A. Agarwal, I. Zaitsev, X. Wang, C. Li, M. Najork, T. Joachims,
"Estimating position bias without intrusive interventions", WSDM 2019. A. P. Dempster, N. M.
Laird, D. B. Rubin, "Maximum likelihood from incomplete data via the EM algorithm", JRSS B 39(1)
1977. G. McLachlan, D. Peel, "Finite mixture models", Wiley 2000 (the grade levels are a finite
mixture of the position-based model's click distributions).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from rankgate.errors import ConfigError, InputError, Location, UsageError
from rankgate.io import open_source
from rankgate.io.validate import RawRecord, kind_name

__all__ = [
    "DEFAULT_ESTIMATOR",
    "DEFAULT_GRADES",
    "ESTIMATORS",
    "ClickLabels",
    "ClickLog",
    "GradeLevels",
    "Propensities",
    "click_labels",
    "estimate_propensities",
    "power_law",
    "propensity_table",
    "read_click_log",
    "read_human_grades",
    "summarise",
]

ESTIMATORS = ("em", "harvest", "swap")
DEFAULT_ESTIMATOR = "harvest"
# Fixed thresholds: what grading falls back to when too few pairs are graded to fit levels.
DEFAULT_THRESHOLDS = (0.1, 0.3, 0.6)
# Grade levels fitted by default (grades 0-3), and the most a user may ask for.
DEFAULT_GRADES = 4
MAX_GRADES = 10
FITTED = "fitted levels"
# Fewer graded pairs than this cannot show where the grade levels are.
FIT_MIN_PAIRS = 50
FIT_MAX_ITERATIONS = 500
# The fit stops when no level's click rate or share moves by more than this in an iteration.
FIT_TOLERANCE = 1e-6
# Bounds of a level's click rate in the fit: rates of exactly 0 or 1 make a single click (or
# non-click) impossible, so one pair could pull a whole level's likelihood to minus infinity.
RATE_BOUNDS = (1e-6, 1.0 - 1e-6)
DEFAULT_MAX_RANK = 10
DEFAULT_CLIP = 0.05
DEFAULT_MIN_EXAMINATIONS = 5.0
DEFAULT_PRIOR_STRENGTH = 1.0
# Ranks past this are taken for a logging error rather than a real position.
MAX_RANK_ACCEPTED = 1_000_000
# Rank pairs with fewer shared (query, document) pairs than this are left out of harvesting.
HARVEST_MIN_PAIRS = 10

Floats = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int64]


@dataclass(frozen=True, eq=False)
class ClickLog:
    """Impressions as parallel arrays: one entry per document shown in a list.

    ``query`` and ``document`` index ``query_ids`` and ``document_ids``; ``rank`` is 1-based;
    ``ranker`` indexes ``ranker_ids`` (-1: not given); ``list_id`` numbers the result lists;
    ``swap_rank`` is the rank swapped with rank 1 in a randomized-swap list (0: not swapped).
    """

    query_ids: tuple[str, ...]
    document_ids: tuple[str, ...]
    ranker_ids: tuple[str, ...]
    query: Ints
    document: Ints
    rank: Ints
    clicked: npt.NDArray[np.bool_]
    ranker: Ints
    list_id: Ints
    swap_rank: Ints
    records: int = 0

    @property
    def impressions(self) -> int:
        return len(self.rank)


@dataclass(frozen=True, slots=True)
class Propensities:
    """Examination propensity per rank (index 0 is rank 1), relative to rank 1, and how they were
    obtained."""

    values: Floats
    method: str
    detail: str = ""

    def at(self, ranks: Ints, clip: float) -> Floats:
        """Propensities of 1-based ``ranks``, clipped from below; ranks past the table take the
        deepest rank's value."""
        table: Floats = np.maximum(self.values, clip)
        chosen: Floats = table[np.minimum(ranks, len(table)) - 1]
        return chosen


def power_law(eta: float, max_rank: int = DEFAULT_MAX_RANK) -> Propensities:
    """``p_k = (1/k)^eta``, the usual parametric curve (eta near 1 in web search logs)."""
    if not math.isfinite(eta) or eta < 0:
        raise ConfigError(f"eta must be a number >= 0, not {eta}")
    ranks = np.arange(1, max_rank + 1, dtype=np.float64)
    return Propensities((1.0 / ranks) ** eta, "power law", f"(1/k)^{eta:g}")


def propensity_table(values: Sequence[float]) -> Propensities:
    """Propensities the user measured, for ranks 1, 2, ...; scaled so rank 1 is 1."""
    array = np.asarray(values, dtype=np.float64)
    if array.ndim != 1 or not len(array) or not np.all(np.isfinite(array)) or np.any(array <= 0):
        raise ConfigError("a propensity table needs positive numbers for ranks 1, 2, ...")
    return Propensities(array / array[0], "given table")


# --- reading ------------------------------------------------------------------------------------

DOCUMENT_KEYS = ("document_id", "doc_id")
LIST_KEYS = ("list_id", "session_id", "impression_id")
RANKER_KEYS = ("ranker", "variant")


def read_click_log(
    data: Any, *, input_format: str | None = None, on_invalid: str = "fail"
) -> tuple[ClickLog, dict[str, int]]:
    """Impressions from a file or records, in either shape, with the count of skipped records by
    reason (``invalid`` under ``on_invalid="skip"``).

    * one impression per record: ``query_id``, ``document_id`` (or ``doc_id``), ``rank`` (1-based),
      ``clicked``; optional ``ranker`` (or ``variant``), ``list_id`` (or ``session_id``,
      ``impression_id``; without one, each (query, ranker) record group is not a list) and
      ``swap_rank``;
    * one result list per record, as in a trace: ``query_id``, ``retrieved_ids`` (rank order),
      ``clicked_ids``; optional ``ranker``/``variant`` and ``swap_rank``.
    """
    builder = _LogBuilder()
    skipped: dict[str, int] = {}
    for raw in open_source(data, input_format):
        builder.records += 1
        try:
            builder.add(raw)
        except InputError:
            if on_invalid == "fail":
                raise
            skipped["invalid"] = skipped.get("invalid", 0) + 1
    return builder.build(), skipped


class _LogBuilder:
    def __init__(self) -> None:
        self.records = 0
        self.queries: dict[str, int] = {}
        self.documents: dict[str, int] = {}
        self.rankers: dict[str, int] = {}
        self.lists: dict[tuple[str, str], int] = {}
        # Per list, the documents and ranks already shown, to refuse an impression logged twice.
        self.seen: dict[int, set[tuple[int, Any]]] = {}
        self.columns: dict[str, list[int]] = {
            name: [] for name in ("query", "document", "rank", "clicked", "ranker", "list", "swap")
        }

    def add(self, raw: RawRecord) -> None:
        if raw.problem is not None:
            raise InputError(raw.location, None, raw.problem)
        record = raw.value
        if not isinstance(record, dict):
            raise InputError(raw.location, None, f"expected an object, got {kind_name(record)}")
        query = _identifier(record.get("query_id"), raw.location, "query_id")
        ranker_key = next((k for k in RANKER_KEYS if record.get(k) is not None), None)
        ranker = -1 if ranker_key is None else self._index(self.rankers, str(record[ranker_key]))
        swap = _whole(record.get("swap_rank", 0) or 0, raw.location, "swap_rank", minimum=0)
        if swap == 1:
            raise InputError(raw.location, "swap_rank", "rank 1 cannot be swapped with itself")
        if "retrieved_ids" in record:
            self._add_list(record, raw.location, query, ranker, swap)
        else:
            self._add_impression(record, raw.location, query, ranker, swap)

    def _add_list(
        self, record: dict[str, Any], location: Location, query: str, ranker: int, swap: int
    ) -> None:
        shown = _id_list(record.get("retrieved_ids"), location, "retrieved_ids")
        clicked = set(_id_list(record.get("clicked_ids") or [], location, "clicked_ids"))
        unknown = clicked.difference(shown)
        if unknown:
            raise InputError(
                location, "clicked_ids", f"{sorted(unknown)[0]!r} was clicked but not shown"
            )
        list_id = len(self.lists)
        self.lists[("", str(list_id))] = list_id
        if len(set(shown)) != len(shown):
            twice = next(doc for doc in shown if shown.count(doc) > 1)
            raise InputError(location, "retrieved_ids", f"{twice!r} appears twice in one list")
        if swap > len(shown):
            raise InputError(
                location, "swap_rank", f"{swap} is past the list's {len(shown)} results"
            )
        query_index = self._index(self.queries, query)
        for rank, document in enumerate(shown, start=1):
            self._append(query_index, document, rank, document in clicked, ranker, list_id, swap)

    def _add_impression(
        self, record: dict[str, Any], location: Location, query: str, ranker: int, swap: int
    ) -> None:
        doc_key = next((k for k in DOCUMENT_KEYS if k in record), DOCUMENT_KEYS[0])
        document = _identifier(record.get(doc_key), location, doc_key)
        rank = _whole(record.get("rank"), location, "rank", minimum=1)
        clicked = record.get("clicked")
        if clicked in (0, 1) and not isinstance(clicked, float):
            clicked = bool(clicked)
        if not isinstance(clicked, bool):
            raise InputError(location, "clicked", f"expected true or false, got {clicked!r}")
        list_key = next((k for k in LIST_KEYS if record.get(k) is not None), None)
        name = str(record[list_key]) if list_key else f"{query}\x00{ranker}\x00{self.records}"
        list_id = self._index(self.lists, (query, name))
        seen = self.seen.setdefault(list_id, set())
        for shown_key, field_name in (((0, document), doc_key), ((1, rank), "rank")):
            if shown_key in seen:
                raise InputError(location, field_name, "shown twice in one list")
            seen.add(shown_key)
        self._append(
            self._index(self.queries, query), document, rank, clicked, ranker, list_id, swap
        )

    def _append(
        self,
        query: int,
        document: str,
        rank: int,
        clicked: bool,
        ranker: int,
        list_id: int,
        swap: int,
    ) -> None:
        columns = self.columns
        columns["query"].append(query)
        columns["document"].append(self._index(self.documents, document))
        columns["rank"].append(rank)
        columns["clicked"].append(int(clicked))
        columns["ranker"].append(ranker)
        columns["list"].append(list_id)
        columns["swap"].append(swap)

    @staticmethod
    def _index(table: dict[Any, int], key: Any) -> int:
        found = table.get(key)
        if found is None:
            found = table[key] = len(table)
        return found

    def build(self) -> ClickLog:
        def ints(name: str) -> Ints:
            return np.asarray(self.columns[name], dtype=np.int64)

        return ClickLog(
            query_ids=tuple(self.queries),
            document_ids=tuple(self.documents),
            ranker_ids=tuple(self.rankers),
            query=ints("query"),
            document=ints("document"),
            rank=ints("rank"),
            clicked=ints("clicked").astype(np.bool_),
            ranker=ints("ranker"),
            list_id=ints("list"),
            swap_rank=ints("swap"),
            records=self.records,
        )


def _identifier(value: Any, location: Location, name: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int)) or value == "":
        raise InputError(location, name, f"expected a non-empty string or integer, got {value!r}")
    return str(value)


def _id_list(value: Any, location: Location, name: str) -> list[str]:
    if not isinstance(value, list):
        raise InputError(location, name, f"expected a list of IDs, got {kind_name(value)}")
    return [_identifier(item, location, f"{name}[{i}]") for i, item in enumerate(value)]


def _whole(value: Any, location: Location, name: str, *, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise InputError(location, name, f"expected a whole number, got {value!r}")
    if value < minimum:
        raise InputError(location, name, f"must be at least {minimum}, got {value}")
    if value > MAX_RANK_ACCEPTED:
        raise InputError(location, name, f"must be at most {MAX_RANK_ACCEPTED:,}, got {value}")
    return int(value)


# --- propensities ---------------------------------------------------------------------------------


def estimate_propensities(
    log: ClickLog, method: str, max_rank: int = DEFAULT_MAX_RANK, *, iterations: int = 200
) -> Propensities:
    """Propensities for ranks 1..``max_rank``, relative to rank 1, estimated from the logs."""
    if method not in ESTIMATORS:
        raise ConfigError(f"unknown estimator {method!r} (estimators: {', '.join(ESTIMATORS)})")
    shown = log.rank <= max_rank
    if not np.any(shown & log.clicked):
        raise UsageError("no clicks in the top ranks: nothing to estimate propensities from")
    if method == "swap":
        return _swap(log, max_rank)
    if method == "harvest":
        return _harvest(log, max_rank)
    return _em(log, max_rank, iterations)


def _swap(log: ClickLog, max_rank: int) -> Propensities:
    """Click rate at rank k in lists whose rank 1 was swapped with k, over the click rate at rank 1
    in lists left alone: both are the click rate of the would-be top result."""
    control_lists = np.unique(log.list_id[log.swap_rank == 0])
    if not len(control_lists) or not np.any(log.swap_rank > 0):
        raise UsageError(
            "the swap estimator needs randomized swap lists (swap_rank) and lists left alone"
        )
    # Rates per impression at the rank in question, so lists of different lengths (or impression
    # logs without list IDs) do not bias either side.
    top_control = (log.swap_rank == 0) & (log.rank == 1)
    base = log.clicked[top_control].sum() / max(int(top_control.sum()), 1)
    if base <= 0:
        raise UsageError("no clicks at rank 1 in the lists left alone")
    values = np.full(max_rank, np.nan)
    values[0] = 1.0
    counts = []
    for k in range(2, max_rank + 1):
        at_k = (log.swap_rank == k) & (log.rank == k)
        counts.append(len(np.unique(log.list_id[log.swap_rank == k])))
        if at_k.any():
            values[k - 1] = log.clicked[at_k].sum() / int(at_k.sum()) / base
    return Propensities(
        _fill(values), "swap", f"{len(control_lists):,} lists left alone, {sum(counts):,} swapped"
    )


def _harvest(log: ClickLog, max_rank: int) -> Propensities:
    """Ratios p_k / p_k' from (query, document) pairs shown at both ranks, combined in log space
    by least squares weighted by how many pairs support each ratio."""
    keep = log.rank <= max_rank
    pair = log.query[keep] * len(log.document_ids) + log.document[keep]
    rank = log.rank[keep] - 1
    clicks = log.clicked[keep].astype(np.float64)
    pairs, pair_index = np.unique(pair, return_inverse=True)
    cells = pair_index * max_rank + rank
    shown = np.bincount(cells, minlength=len(pairs) * max_rank).reshape(len(pairs), max_rank)
    clicked = np.bincount(cells, clicks, minlength=len(pairs) * max_rank).reshape(
        len(pairs), max_rank
    )
    rate = np.divide(clicked, shown, out=np.zeros_like(clicked), where=shown > 0)
    rows, targets, weights = [], [], []
    for k in range(max_rank):
        for j in range(k + 1, max_rank):
            both = (shown[:, k] > 0) & (shown[:, j] > 0)
            support = int(both.sum())
            if support < HARVEST_MIN_PAIRS:
                continue
            top, bottom = rate[both, k].sum(), rate[both, j].sum()
            if top <= 0 or bottom <= 0:
                continue
            row = np.zeros(max_rank)
            row[k], row[j] = 1.0, -1.0
            rows.append(row)
            targets.append(math.log(top / bottom))
            weights.append(math.sqrt(support))
    if not rows:
        raise UsageError(
            "intervention harvesting found no (query, document) pairs shown at two ranks: it "
            "needs logs from several rankers"
        )
    # log p_1 = 0 pins the scale; each observed ratio is one weighted equation.
    anchor = np.zeros(max_rank)
    anchor[0] = 1.0
    weight = max(weights) * 10
    system = np.vstack([*(r * w for r, w in zip(rows, weights, strict=True)), anchor * weight])
    rhs = np.array([*(t * w for t, w in zip(targets, weights, strict=True)), 0.0])
    solved, *_ = np.linalg.lstsq(system, rhs, rcond=None)
    reached = _linked_to_top([tuple(np.flatnonzero(row).tolist()) for row in rows], max_rank)
    if not reached[1]:
        raise UsageError(
            "intervention harvesting cannot link rank 2 to rank 1: no (query, document) pairs "
            "were shown at both by different rankers"
        )
    values = np.where(reached, np.exp(solved), np.nan)
    detail = f"{len(rows)} rank pairs, {len(pairs):,} pairs"
    if not reached.all():
        missing = ", ".join(str(k + 1) for k in np.flatnonzero(~reached).tolist())
        detail += f"; ranks {missing} not linked to rank 1 take the value of the rank above"
    return Propensities(_fill(values / values[0]), "harvest", detail)


def _linked_to_top(edges: list[tuple[int, ...]], max_rank: int) -> npt.NDArray[np.bool_]:
    """Ranks connected to rank 1 through rank pairs with shared (query, document) pairs: only
    their ratios to rank 1 are identified."""
    reached = np.zeros(max_rank, dtype=np.bool_)
    reached[0] = True
    changed = True
    while changed:
        changed = False
        for a, b in edges:
            if reached[a] != reached[b]:
                reached[a] = reached[b] = True
                changed = True
    return reached


def _em(log: ClickLog, max_rank: int, iterations: int) -> Propensities:
    """Expectation-maximisation on P(click) = p_rank * r(q, d), impressions to ``max_rank``."""
    keep = log.rank <= max_rank
    pair = log.query[keep] * len(log.document_ids) + log.document[keep]
    _, pair_index = np.unique(pair, return_inverse=True)
    rank = log.rank[keep] - 1
    clicked = log.clicked[keep]
    n_pairs = int(pair_index.max()) + 1
    per_rank = np.bincount(rank, minlength=max_rank).astype(np.float64)
    per_pair = np.bincount(pair_index, minlength=n_pairs).astype(np.float64)
    if per_rank[0] == 0:
        raise UsageError("EM needs impressions at rank 1, which propensities are relative to")
    ranks_per_pair = np.bincount(np.unique(pair_index * max_rank + rank) // max_rank)
    if not np.any(ranks_per_pair > 1):
        raise UsageError(
            "EM cannot tell position from relevance here: no (query, document) pair was shown at "
            "two different ranks; give the propensities (power:ETA or a file) or log several "
            "rankers"
        )
    theta = np.full(max_rank, 0.5)
    gamma = np.full(n_pairs, 0.5)
    for _ in range(iterations):
        t, g = theta[rank], gamma[pair_index]
        no_click = 1.0 - t * g  # P(no click) under the model
        # Posterior of "examined" and of "relevant": 1 for a clicked impression (a click needs
        # both), t(1-g)/P(no click) and (1-t)g/P(no click) for an unclicked one. Divide only for
        # the unclicked: a pair clicked every time it was shown at a rank examined every time has
        # t = g = 1, whose P(no click) of 0 belongs to no unclicked impression (one such impression
        # pulls its pair's gamma below 1), so the clicked ones keep their exact posterior of 1.
        unclicked = ~clicked & (no_click > 0.0)
        examined = np.divide(t * (1.0 - g), no_click, out=np.ones_like(t), where=unclicked)
        relevant = np.divide((1.0 - t) * g, no_click, out=np.ones_like(t), where=unclicked)
        new_theta = np.bincount(rank, examined, minlength=max_rank) / np.maximum(per_rank, 1)
        gamma = np.clip(np.bincount(pair_index, relevant, minlength=n_pairs) / per_pair, 1e-6, 1)
        new_theta = np.clip(new_theta, 1e-6, 1.0)
        converged = np.max(np.abs(new_theta - theta)) < 1e-7
        theta = new_theta
        if converged:
            break
    values = np.where(per_rank > 0, theta, np.nan)
    return Propensities(
        _fill(values / theta[0]), "em", f"{n_pairs:,} pairs, {int(per_rank.sum()):,} impressions"
    )


def _fill(values: Floats) -> Floats:
    """Ranks with no estimate take the next shallower rank's value (propensity never rises)."""
    filled = values.copy()
    for k in range(1, len(filled)):
        if not np.isfinite(filled[k]):
            filled[k] = filled[k - 1]
    return filled


# --- grade levels ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GradeLevels:
    """The graded position-based model, fitted to click logs.

    A pair of grade g shown at rank k is clicked with probability ``p_k * rates[g]``: ``rates[g]``
    is grade g's click rate at rank 1 (where p_1 = 1: the scale the click scores are on),
    and ``shares[g]`` the share of the graded pairs that have grade g. Rates rise with the grade.
    ``log_likelihood`` is that of the graded pairs' clicks, up to terms the levels do not change.
    """

    rates: Floats
    shares: Floats
    iterations: int
    converged: bool
    log_likelihood: float


def _fit_levels(
    pair: Ints,
    rank: Ints,
    clicks: Floats,
    shown: Floats,
    table: Floats,
    start: Floats,
) -> tuple[GradeLevels, Floats]:
    """Maximum-likelihood grade levels by EM, and each pair's posterior over the grades.

    One entry of ``pair`` (0, 1, ... for the pairs fitted), ``rank`` (index into ``table``),
    ``clicks`` and ``shown`` per (pair, rank) cell; ``table`` holds propensities in (0, 1];
    ``start`` the first click rates, increasing. The pair's grade is the E-step's hidden variable;
    the M-step sets each share to its mean posterior and each rate to the root of the derivative of
    its (concave) expected log-likelihood, found by bisection.
    """
    levels = len(start)
    missed = shown - clicks
    rates = start.copy()
    shares = np.full(levels, 1.0 / levels)
    iterations, converged = 0, False
    while True:
        posterior, log_likelihood = _grade_posterior(
            pair, rank, clicks, missed, table, rates, shares
        )
        if converged or iterations == FIT_MAX_ITERATIONS:
            break
        iterations += 1
        weight = posterior[pair]
        new_shares = np.maximum(posterior.mean(axis=0), 1e-12)
        new_shares /= new_shares.sum()
        clicked = clicks @ weight
        missed_by_rank: Floats = np.column_stack(
            [np.bincount(rank, weight[:, g] * missed, minlength=len(table)) for g in range(levels)]
        ).astype(np.float64)
        new_rates = _best_rates(clicked, missed_by_rank, table)
        change = max(np.abs(new_rates - rates).max(), np.abs(new_shares - shares).max())
        rates, shares = new_rates, new_shares
        converged = bool(change < FIT_TOLERANCE)
    # EM does not keep the levels in order; grades are numbered by rising click rate.
    order = np.argsort(rates, kind="stable")
    fitted = GradeLevels(rates[order], shares[order], iterations, converged, log_likelihood)
    sorted_posterior: Floats = posterior[:, order]
    return fitted, sorted_posterior


def _grade_posterior(
    pair: Ints,
    rank: Ints,
    clicks: Floats,
    missed: Floats,
    table: Floats,
    rates: Floats,
    shares: Floats,
) -> tuple[Floats, float]:
    """P(grade | the pair's clicks) for every pair (pairs x grades), and the log-likelihood."""
    click_chance = table[:, None] * rates[None, :]
    cell = (
        clicks[:, None] * np.log(click_chance)[rank]
        + missed[:, None] * np.log1p(-click_chance)[rank]
    )
    pairs = int(pair.max()) + 1
    joint = np.column_stack(
        [np.bincount(pair, cell[:, g], minlength=pairs) for g in range(len(rates))]
    ) + np.log(shares)
    top = joint.max(axis=1, keepdims=True)
    posterior: Floats = np.exp(joint - top)
    total = posterior.sum(axis=1, keepdims=True)
    posterior /= total
    return posterior, float((top + np.log(total)).sum())


def _best_rates(clicked: Floats, missed_by_rank: Floats, table: Floats) -> Floats:
    """Per level, the rate r maximising ``C log r + sum_k M_k log(1 - p_k r)`` over the bounds:
    where ``C / r = sum_k M_k p_k / (1 - p_k r)``, the slope falling in r (bisection)."""
    low = np.full(len(clicked), RATE_BOUNDS[0])
    high = np.full(len(clicked), RATE_BOUNDS[1])

    def slope(rate: Floats) -> Floats:
        chance = table[:, None] * rate[None, :]
        result: Floats = clicked / rate - (missed_by_rank * table[:, None] / (1.0 - chance)).sum(0)
        return result

    # 50 halvings of an interval under 1 wide leave it under 1e-15.
    for _ in range(50):
        middle = (low + high) / 2
        rising = slope(middle) > 0
        low = np.where(rising, middle, low)
        high = np.where(rising, high, middle)
    best: Floats = (low + high) / 2
    return best


# --- labels ---------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class ClickLabels:
    """One entry per (query, document) shown: clicks, expected examinations, the smoothed click
    score, its standard error and, where enough examinations back it, a grade."""

    log: ClickLog
    propensities: Propensities
    query: Ints
    document: Ints
    clicks: Floats
    examinations: Floats
    score: Floats
    std_error: Floats
    grade: Ints  # -1: too few examinations, left unlabeled
    thresholds: tuple[float, ...]  # () when the grades come from fitted levels
    settings: dict[str, float] = field(default_factory=dict)
    # How the grades were set: "fitted levels", "thresholds", "default thresholds (too few pairs
    # to fit levels)" or "calibrated on N human grades".
    grading: str = "thresholds"
    levels: GradeLevels | None = None
    # With fitted levels, the posterior probability of each labeled pair's grade (NaN otherwise).
    grade_probability: Floats | None = None

    @property
    def grades(self) -> int:
        """How many grades there are (0 to grades - 1)."""
        return len(self.levels.rates) if self.levels is not None else len(self.thresholds) + 1

    @property
    def labeled(self) -> int:
        return int((self.grade >= 0).sum())

    @property
    def unlabeled(self) -> int:
        return int((self.grade < 0).sum())

    def grades_by_pair(self) -> dict[tuple[str, str], int]:
        """(query ID, document ID) -> grade, for the labeled pairs."""
        ids, docs = self.log.query_ids, self.log.document_ids
        return {
            (ids[q], docs[d]): int(g)
            for q, d, g in zip(
                self.query.tolist(), self.document.tolist(), self.grade.tolist(), strict=True
            )
            if g >= 0
        }

    def records(self, source: str = "clicks") -> Iterator[dict[str, Any]]:
        """One record per query with a labeled pair, in the shape ``rankgate eval`` reads:
        ``relevance_scores``, plus ``label_confidence`` per document."""
        order = np.lexsort((self.document, self.query))
        current = -1
        record: dict[str, Any] = {}
        for index in order.tolist():
            if self.grade[index] < 0:
                continue
            query = int(self.query[index])
            if query != current:
                if record:
                    yield record
                current = query
                record = {
                    "query_id": self.log.query_ids[query],
                    "relevance_scores": {},
                    "label_confidence": {},
                    "source": f"{source}:{self.propensities.method}",
                }
            document = self.log.document_ids[int(self.document[index])]
            record["relevance_scores"][document] = int(self.grade[index])
            confidence = record["label_confidence"][document] = {
                "click_score": round(float(self.score[index]), 6),
                "examinations": round(float(self.examinations[index]), 3),
                "std_error": round(float(self.std_error[index]), 6),
            }
            if self.grade_probability is not None:
                confidence["grade_probability"] = round(float(self.grade_probability[index]), 6)
        if record:
            yield record


def click_labels(
    log: ClickLog,
    propensities: Propensities,
    *,
    clip: float = DEFAULT_CLIP,
    prior_strength: float = DEFAULT_PRIOR_STRENGTH,
    min_examinations: float = DEFAULT_MIN_EXAMINATIONS,
    thresholds: Sequence[float] | None = None,
    calibration: Mapping[tuple[str, str], float] | None = None,
    grades: int | None = None,
) -> ClickLabels:
    """Clicks over expected examinations per (query, document), smoothed and graded.

    Grading, the first that applies:

    * ``calibration``: thresholds set from human grades of some pairs, so the grades of those
      pairs are distributed as the human ones (quantile matching);
    * ``thresholds``: the click scores at which grades 1, 2, 3 ... begin;
    * otherwise the graded position-based model is fitted to the pairs being graded (``grades``
      levels, default ``DEFAULT_GRADES``; see ``GradeLevels``), and each pair gets its most
      probable grade given its clicks at the ranks it was shown at. With fewer than
      ``FIT_MIN_PAIRS`` such pairs the levels cannot be fitted: ``DEFAULT_THRESHOLDS`` grade them
      instead and ``grading`` says so, or, if ``grades`` was given, ``UsageError``.

    The click scores, and so any ranking of pairs by them, do not depend on the grading.
    """
    if not (math.isfinite(clip) and 0 < clip <= 1):
        raise ConfigError(f"clip must be in (0, 1], not {clip}")
    for name, value in (("prior strength", prior_strength), ("min examinations", min_examinations)):
        if not math.isfinite(value) or value < 0:
            raise ConfigError(f"{name} must be a number >= 0, not {value}")
    if grades is not None and (
        isinstance(grades, bool) or not isinstance(grades, int) or not 2 <= grades <= MAX_GRADES
    ):
        raise ConfigError(f"grades must be a whole number from 2 to {MAX_GRADES}, not {grades!r}")
    weight = propensities.at(log.rank, clip)
    pair = log.query * len(log.document_ids) + log.document
    pairs, pair_index = np.unique(pair, return_inverse=True)
    clicks: Floats = np.bincount(
        pair_index, log.clicked.astype(np.float64), minlength=len(pairs)
    ).astype(np.float64)
    examinations: Floats = np.bincount(pair_index, weight, minlength=len(pairs)).astype(np.float64)
    squared: Floats = np.bincount(pair_index, weight * weight, minlength=len(pairs)).astype(
        np.float64
    )
    total = examinations.sum()
    prior = clicks.sum() / total if total > 0 else 0.0
    score = (clicks + prior_strength * prior) / (examinations + prior_strength)
    # Under the position-based model a click at an impression with propensity p is Bernoulli(p r),
    # so sum(clicks) has variance r E - r^2 sum(p^2): larger than a plain binomial's.
    bounded = np.clip(score, 0.0, 1.0)
    variance = bounded * examinations - bounded**2 * squared
    std_error = np.sqrt(np.maximum(variance, 0.0)) / np.maximum(examinations + prior_strength, 1e-9)
    query, document = pairs // len(log.document_ids), pairs % len(log.document_ids)
    enough = examinations >= min_examinations
    levels: GradeLevels | None = None
    probability: Floats | None = None
    cuts: tuple[float, ...] = ()
    if calibration is not None:
        cuts = _calibrated(log, query, document, score, enough, calibration)
        grading = f"calibrated on {len(calibration):,} human grades"
    elif thresholds is not None:
        cuts = tuple(float(t) for t in thresholds)
        if not cuts or not all(math.isfinite(t) for t in cuts):
            raise ConfigError("thresholds must be one or more finite numbers")
        if any(b <= a for a, b in itertools.pairwise(cuts)):
            raise ConfigError(f"thresholds must increase: {', '.join(map(str, cuts))}")
        grading = "thresholds"
    elif int(enough.sum()) >= FIT_MIN_PAIRS:
        grading = FITTED
    elif grades is None:
        cuts = DEFAULT_THRESHOLDS
        grading = f"default thresholds (too few pairs to fit levels: {int(enough.sum())})"
    else:
        raise UsageError(
            f"only {int(enough.sum())} pairs have enough examinations to fit {grades} grade levels "
            f"(at least {FIT_MIN_PAIRS} are needed): give thresholds instead"
        )
    if grading == FITTED:
        levels, posterior = _levels_of(
            log, propensities, clip, pair_index, enough, score, grades or DEFAULT_GRADES
        )
        grade = np.full(len(pairs), -1, dtype=np.int64)
        grade[enough] = posterior.argmax(axis=1)
        probability = np.full(len(pairs), np.nan)
        probability[enough] = posterior.max(axis=1)
    else:
        grade = np.searchsorted(np.asarray(cuts), score, side="right").astype(np.int64)
        grade[~enough] = -1
    return ClickLabels(
        log=log,
        propensities=propensities,
        query=query.astype(np.int64),
        document=document.astype(np.int64),
        clicks=clicks,
        examinations=examinations,
        score=score,
        std_error=std_error,
        grade=grade,
        thresholds=cuts,
        settings={
            "clip": clip,
            "prior_strength": prior_strength,
            "min_examinations": min_examinations,
            "prior": prior,
        },
        grading=grading,
        levels=levels,
        grade_probability=probability,
    )


def _levels_of(
    log: ClickLog,
    propensities: Propensities,
    clip: float,
    pair_index: Ints,
    enough: npt.NDArray[np.bool_],
    score: Floats,
    grades: int,
) -> tuple[GradeLevels, Floats]:
    """Grade levels fitted to the impressions of the pairs with enough examinations, and those
    pairs' posteriors over the grades (in the order of ``np.flatnonzero(enough)``)."""
    # Above 1, a propensity relative to rank 1 is estimation noise, and p * rate must stay a
    # probability.
    table: Floats = np.minimum(np.maximum(propensities.values, clip), 1.0)
    fitted = np.full(len(enough), -1, dtype=np.int64)
    fitted[enough] = np.arange(int(enough.sum()))
    keep = enough[pair_index]
    rank = np.minimum(log.rank[keep], len(table)) - 1
    cells, cell_index = np.unique(fitted[pair_index[keep]] * len(table) + rank, return_inverse=True)
    shown: Floats = np.bincount(cell_index).astype(np.float64)
    clicked: Floats = np.bincount(cell_index, log.clicked[keep].astype(np.float64)).astype(
        np.float64
    )
    # Start from the click scores' quantiles, spread apart so that no two levels start equal.
    start = np.quantile(score[enough], (np.arange(grades) + 0.5) / grades)
    start = np.clip(start, 1e-3, 0.99) + np.arange(grades) * 1e-3
    return _fit_levels(
        (cells // len(table)).astype(np.int64),
        (cells % len(table)).astype(np.int64),
        clicked,
        shown,
        table,
        start,
    )


def _calibrated(
    log: ClickLog,
    query: Ints,
    document: Ints,
    score: Floats,
    enough: npt.NDArray[np.bool_],
    human: Mapping[tuple[str, str], float],
) -> tuple[float, ...]:
    """Thresholds under which the click scores of human-graded pairs fall into grades in the
    humans' proportions."""
    ids, docs = log.query_ids, log.document_ids
    matched = [
        (float(score[i]), human[key])
        for i in np.flatnonzero(enough).tolist()
        if (key := (ids[int(query[i])], docs[int(document[i])])) in human
    ]
    if len(matched) < 20:
        raise UsageError(
            f"only {len(matched)} human-graded pairs have enough clicks to calibrate on "
            "(at least 20 are needed)"
        )
    scores = np.array([s for s, _ in matched])
    grades = np.array([g for _, g in matched])
    levels = sorted({int(g) for g in grades.tolist()})
    top = max(levels)
    cuts = []
    for level in range(1, top + 1):
        share_below = float(np.mean(grades < level))
        cuts.append(float(np.quantile(scores, share_below)))
    # Equal quantiles (a grade no pair has) would make two thresholds one: nudge them apart.
    for i in range(1, len(cuts)):
        cuts[i] = max(cuts[i], cuts[i - 1] + 1e-9)
    return tuple(cuts)


def read_human_grades(data: Any, fields: Any = None) -> dict[tuple[str, str], float]:
    """(query, document) -> grade from any label file ``rankgate label import`` reads."""
    from rankgate.labels import read_judgments

    return {(j.query_id, j.document_id): j.grade for j in read_judgments(data, fields=fields)}


def summarise(labels: ClickLabels) -> list[str]:
    """Lines for a person: the estimator, the propensities, coverage and the grade distribution."""
    p = labels.propensities
    curve = ", ".join(f"{k}:{v:.3f}" for k, v in enumerate(p.values.tolist(), start=1))
    counts = np.bincount(labels.grade[labels.grade >= 0], minlength=labels.grades)
    pairs = len(labels.grade)
    queries = len(np.unique(labels.query[labels.grade >= 0]))
    lines = [
        f"{labels.log.records:,} records, {labels.log.impressions:,} impressions of "
        f"{pairs:,} (query, document) pairs in {len(labels.log.query_ids):,} queries",
        f"propensities ({p.method}{'; ' + p.detail if p.detail else ''}), relative to rank 1, "
        f"clipped at {labels.settings['clip']:g}: {curve}",
        f"labeled {labels.labeled:,} pairs in {queries:,} queries; left unlabeled "
        f"{labels.unlabeled:,} pairs with fewer than {labels.settings['min_examinations']:g} "
        "expected examinations",
    ]
    distribution = " · grades: " + ", ".join(
        f"{g}: {int(c):,}" for g, c in enumerate(counts.tolist())
    )
    levels = labels.levels
    if levels is not None:
        fit = "" if levels.converged else f", not converged after {levels.iterations} iterations"
        lines.append(
            f"grades fitted to the logs (click rate at rank 1, share of "
            f"pairs{fit}): "
            + ", ".join(
                f"{g}: {rate:.4f} ({share:.0%})"
                for g, (rate, share) in enumerate(
                    zip(levels.rates.tolist(), levels.shares.tolist(), strict=True)
                )
            )
            + distribution
        )
    else:
        source = "" if labels.grading == "thresholds" else f"{labels.grading}; "
        lines.append(
            f"{source}thresholds (click score where each grade starts): "
            + ", ".join(f"{g + 1}: {t:.4f}" for g, t in enumerate(labels.thresholds))
            + distribution
        )
    return lines
