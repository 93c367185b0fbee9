"""A comparison that is fair to change: how much of each arm's top k is judged, what the delta is
under every unjudged-document policy, and which cells the missing labels decide.

A candidate that surfaces documents nobody has judged yet is scored as though they were all
non-relevant (trec_eval's convention, ``unjudged=nonrelevant``), so it looks worse even when it is
better. For every cell of a comparison this module supplies the evidence to tell that apart:

* **judged@k of each arm** over the cell's queries, where k is the metric's cutoff, or the run's
  judged depth for a metric without one (the deepest cutoff requested, else
  ``evaluate.DEFAULT_JUDGED_DEPTH``: the depth ``Evaluation.judged`` reports);
* **the delta under each policy** (``nonrelevant``, ``condensed``, ``relevant``) with its own test,
  for every metric that takes the ``unjudged`` parameter;
* **the unjudged pairs**: the distinct (query, document) pairs whose document is in the
  candidate's top k (after duplicates are dropped and, under ``--doc-id``, chunks collapsed to their
  document) and carries no label for the query, summed over the cell's queries. The baseline's are
  counted the same way.

The per-query counts come from the metric registry, not from a second join: precision@k counts
relevant documents in the top k over k, and under ``unjudged=relevant`` every unjudged document
in the top k counts as relevant too, so ``k * (precision(unjudged=relevant)@k - precision@k)`` is
exactly the number of unjudged documents in the top k. Both are scored by ``evaluate`` beside the
requested metrics (``extra_metrics``), on every engine.

The rule that makes a cell ``label-limited`` lives in ``compare_cells.flag_cells``; the listing of
the pairs (``--unjudged-pairs FILE``) is ``unjudged_pairs`` here.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from rankgate.errors import UsageError
from rankgate.evaluate import DEFAULT_JUDGED_DEPTH, DEFAULT_METRICS
from rankgate.gates import Gate, GatePolicy, parse_gate
from rankgate.spec import (
    MetricSpec,
    make_metric,
    parse_metric_list,
    unjudged_variants,
)

__all__ = [
    "DEFAULT_UNJUDGED_TOLERANCE",
    "LABEL_LIMITED",
    "LabelEvidence",
    "PolicyDelta",
    "UnjudgedPair",
    "evidence_specs",
    "judged_depth",
    "requested_metrics",
    "unjudged_counts",
    "write_unjudged_pairs",
]

#: A cell is label-limited when the candidate's top k is judged less than the baseline's by more
#: than this share of the top k (0.05: five percentage points, half a document per query at
#: k = 10), among other reasons (see ``compare_cells.flag_cells``).
DEFAULT_UNJUDGED_TOLERANCE = 0.05
#: The status of a cell whose verdict the missing labels decide.
LABEL_LIMITED = "label-limited"


@dataclass(frozen=True, slots=True)
class PolicyDelta:
    """The cell's delta with both arms scored under one unjudged-document policy, its p-value
    (raw, then adjusted across the run like the cell's own) and the flag it would earn."""

    policy: str
    delta: float
    p_value: float
    p_adjusted: float
    flag: str | None = None


@dataclass(frozen=True, slots=True)
class LabelEvidence:
    """What unjudged documents do to one cell.

    ``depth``: the k judged@k and the pair counts read (the metric's cutoff or the run's judged
    depth). ``baseline_judged``/``candidate_judged``: mean judged@k over the cell's queries on each
    arm. ``unjudged_pairs``: the candidate's distinct (query, document) pairs in its top ``depth``
    without a label, over the cell's queries; ``baseline_unjudged_pairs`` the same of the baseline.
    ``deltas``: per policy, in ``UNJUDGED_POLICIES`` order. ``reason``: why the cell is
    label-limited, in words (None when it is not).
    """

    depth: int
    baseline_judged: float
    candidate_judged: float
    unjudged_pairs: int
    baseline_unjudged_pairs: int
    deltas: tuple[PolicyDelta, ...]
    reason: str | None = None

    @property
    def judged_gap(self) -> float:
        """How much less of its top k the candidate has judged than the baseline (a share)."""
        return self.baseline_judged - self.candidate_judged

    def delta(self, policy: str) -> float | None:
        return next((d.delta for d in self.deltas if d.policy == policy), None)

    def as_dict(self) -> dict[str, Any]:
        """The evidence by name, as reports write it."""
        return {
            "judged_depth": self.depth,
            "baseline_judged": self.baseline_judged,
            "candidate_judged": self.candidate_judged,
            "unjudged_pairs": self.unjudged_pairs,
            "baseline_unjudged_pairs": self.baseline_unjudged_pairs,
            "delta_by_unjudged": {d.policy: d.delta for d in self.deltas},
            "flag_by_unjudged": {d.policy: d.flag for d in self.deltas},
            "label_limited_reason": self.reason,
        }


@dataclass(frozen=True, slots=True)
class UnjudgedPair:
    """One (query, document) pair to judge: the document's 1-based rank in ``side``'s ranking
    (``side``: ``"candidate"`` or ``"baseline"``) of ``candidate``'s comparison."""

    query_id: str
    doc_id: str
    rank: int
    side: str
    candidate: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "query_id": self.query_id,
            "doc_id": self.doc_id,
            "rank": self.rank,
            "side": self.side,
            "candidate": self.candidate,
        }


def requested_metrics(
    metrics: Iterable[str | MetricSpec] | None, gates: Sequence[Gate | str], policy: GatePolicy
) -> list[MetricSpec]:
    """The metrics a comparison reports, as ``evaluate`` settles them: those asked for (the
    default set when None), then those only gates name."""
    if metrics is None:
        specs = parse_metric_list(DEFAULT_METRICS)
    else:
        items = [metrics] if isinstance(metrics, (str, MetricSpec)) else list(metrics)
        specs = [item for item in items if isinstance(item, MetricSpec)]
        for spec in parse_metric_list([item for item in items if isinstance(item, str)]):
            if spec not in specs:
                specs.append(spec)
    checked = [parse_gate(g) if isinstance(g, str) else g for g in gates]
    for gate in (*checked, *(g for rule in policy.rules for g in rule.gates)):
        if gate.metric not in specs:
            specs.append(gate.metric)
    return specs


def judged_depth(metrics: Sequence[MetricSpec]) -> int:
    """The depth judged@k is read at for a metric without a cutoff: the deepest cutoff requested,
    else ``DEFAULT_JUDGED_DEPTH`` (as ``Evaluation.judged``)."""
    return max((spec.k for spec in metrics if spec.k is not None), default=DEFAULT_JUDGED_DEPTH)


def depth_of(spec: MetricSpec, depth: int) -> int:
    return spec.k if spec.k is not None else depth


def evidence_specs(metrics: Sequence[MetricSpec], depth: int) -> list[MetricSpec]:
    """The metrics scored beside ``metrics`` for the evidence: each metric under every unjudged
    policy, and per depth read, judged@k and the two precisions the pair counts come from."""
    extra: list[MetricSpec] = []
    for spec in metrics:
        variants = unjudged_variants(spec)
        if not variants:
            continue
        extra.extend(variants.values())
        extra.extend(_depth_specs(depth_of(spec, depth)))
    return list(dict.fromkeys(extra))


def _depth_specs(k: int) -> tuple[MetricSpec, MetricSpec, MetricSpec]:
    """judged@k, precision@k and precision(unjudged=relevant)@k."""
    precision = make_metric("precision", k)
    return make_metric("judged", k), precision, precision.with_params(unjudged="relevant")


def judged_spec(k: int) -> MetricSpec:
    return _depth_specs(k)[0]


def has_evidence(values: Mapping[MetricSpec, Any], spec: MetricSpec, depth: int) -> bool:
    """Whether ``values`` hold everything the evidence of ``spec`` needs."""
    variants = unjudged_variants(spec)
    needed = [*variants.values(), *_depth_specs(depth_of(spec, depth))]
    return bool(variants) and all(item in values for item in needed)


def unjudged_counts(
    values: Mapping[MetricSpec, npt.NDArray[np.float64]], k: int
) -> npt.NDArray[np.int64]:
    """Per query, how many documents of the top k carry no label (see the module docstring)."""
    _, precision, optimistic = _depth_specs(k)
    counts = np.rint(float(k) * (values[optimistic] - values[precision]))
    return np.maximum(counts, 0).astype(np.int64)


# --- listing the pairs -------------------------------------------------------------------------


def unjudged_in_top(ranking: Sequence[str], judged: set[str], depth: int) -> list[tuple[str, int]]:
    """(document, 1-based rank) of each unjudged document in the top ``depth`` of ``ranking``,
    after later repeats of a document are dropped (the documents below move up, as scoring does)."""
    found = []
    seen: set[str] = set()
    rank = 0
    for doc in ranking:
        if doc in seen:
            continue
        seen.add(doc)
        rank += 1
        if rank > depth:
            break
        if doc not in judged:
            found.append((doc, rank))
    return found


def write_unjudged_pairs(pairs: Sequence[UnjudgedPair], path: str | Path) -> None:
    """The pairs as JSON Lines, one ``{"query_id", "doc_id", "rank", "side", "candidate"}`` per
    line; ``-`` writes to standard output."""
    import sys

    lines = "".join(json.dumps(pair.as_dict(), ensure_ascii=False) + "\n" for pair in pairs)
    if str(path) == "-":
        sys.stdout.write(lines)
        return
    try:
        Path(path).write_text(lines, encoding="utf-8")
    except OSError as problem:
        raise UsageError(f"cannot write the unjudged pairs to {path}: {problem.strerror}") from None
