"""The metric registry: one declaration per metric, read by every other part of rankgate.

A metric is declared once, in ``definitions.py``, with the ``@metric`` decorator. The declaration
carries everything the rest of the program needs: parameter names, types, defaults and ranges (read by
the spec parser and config validation), whether it takes a cutoff ``@k``, the formula and reference
(read by ``rankgate metrics`` and the docs table), aliases users type (``P_5``, ``ndcg_cut_10``), and
the properties the property tests check (bounded to [0, 1], monotone in k). The kernel itself works on a
whole ``RankedBatch`` and returns one float per query.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from rankgate.batch import RankedBatch

__all__ = [
    "REGISTRY",
    "UNJUDGED",
    "UNJUDGED_POLICIES",
    "Alias",
    "Kernel",
    "MetricDef",
    "Param",
    "ParamValue",
    "get",
    "metric",
]

ParamValue = int | float | str
Kernel = Callable[..., npt.NDArray[np.float64]]


@dataclass(frozen=True, slots=True)
class Param:
    """A declared metric parameter.

    ``kind`` is ``"number"`` (int or float, stored as int when integral so that ``rel=2`` prints as
    written) or ``"choice"`` (one of ``choices``). ``minimum`` is exclusive when ``exclusive_min``,
    ``maximum`` when ``exclusive_max``. Canonical specs leave out a parameter at its default, unless
    ``run_default``.
    """

    name: str
    kind: str
    default: ParamValue
    description: str
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    exclusive_min: bool = False
    maximum: float | None = None
    exclusive_max: bool = False
    # The run sets this parameter's default (e.g. --relevance-threshold for ``rel``). A value written
    # explicitly is then kept even when it equals ``default``: ``precision(rel=1)@5`` must stay at 1
    # when the run's threshold is 2.
    run_default: bool = False

    def coerce(self, raw: str | ParamValue) -> ParamValue:
        """Turn a raw value (text from a spec string, or a Python value) into a checked value.

        Raises ``ValueError`` with a message naming what was expected; the caller adds context.
        """
        if self.kind == "choice":
            # Choices ignore case like metric names do: ``gain=Linear`` is ``gain=linear``.
            text = str(raw)
            for choice in self.choices:
                if choice.lower() == text.lower():
                    return choice
            raise ValueError(f"expected one of {', '.join(self.choices)}, got {text!r}")
        if isinstance(raw, bool):
            raise ValueError(f"expected a number, got {raw!r}")
        try:
            number = float(raw)
        except (TypeError, ValueError, OverflowError):
            raise ValueError(f"expected a number, got {raw!r}") from None
        if not np.isfinite(number):
            raise ValueError(f"expected a finite number, got {raw!r}")
        if self.minimum is not None:
            too_small = number <= self.minimum if self.exclusive_min else number < self.minimum
            if too_small:
                bound = ">" if self.exclusive_min else ">="
                raise ValueError(f"expected a number {bound} {self.minimum:g}, got {raw!r}")
        if self.maximum is not None:
            too_large = number >= self.maximum if self.exclusive_max else number > self.maximum
            if too_large:
                bound = "<" if self.exclusive_max else "<="
                raise ValueError(f"expected a number {bound} {self.maximum:g}, got {raw!r}")
        return int(number) if number.is_integer() else number


#: The unjudged-document policies, default first (see ``UNJUDGED``).
UNJUDGED_POLICIES = ("nonrelevant", "condensed", "relevant")

#: The one parameter through which every relevance metric takes an unjudged-document policy. It is
#: applied here, in ``MetricDef.compute``, by handing the kernel a transformed batch
#: (``RankedBatch.under_unjudged``); no kernel sees it, so a metric opts in by declaring it.
UNJUDGED = Param(
    "unjudged",
    kind="choice",
    default="nonrelevant",
    description="what a retrieved document with no label for the query counts as (a document is "
    "judged when it carries any label, grade 0 included). "
    "`nonrelevant`: grade 0, trec_eval's default; values are then lower bounds for the "
    "precision-like metrics. "
    "`condensed`: removed from the ranking before scoring, so the documents below it move up and "
    "@k cuts the condensed list (Sakai, 'Alternatives to bpref', SIGIR 2007; trec_eval -J; "
    "pytrec_eval judged_docs_only_flag=True). "
    "`relevant`: the optimistic policy: every unjudged retrieved document gets the grade `rel` "
    "(the metric's own, else the run's relevance threshold, else 1) and joins the query's labels, "
    "so it also counts in R and in the ideal ranking (recall stays <= 1); cf. the residuals of "
    "Moffat & Zobel, TOIS 2008, and Lu, Moffat & Culpepper, Information Retrieval Journal 2016. "
    "It is optimistic but not an upper bound for every metric: a relevant document added low in "
    "a ranking can lower AP and nDCG, because R and the ideal grow (a relevant document at rank "
    "1, judged non-relevant ones at ranks 2-9, an unjudged one at rank 10: AP is 1 under "
    "`nonrelevant` and (1 + 2/10) / 2 = 0.6 under `relevant`)",
    choices=UNJUDGED_POLICIES,
)


@dataclass(frozen=True, slots=True)
class Alias:
    """Another name users type for a metric, with the parameters that name implies.

    ``style`` says how the cutoff is written: ``"at"`` for ``name@k`` (``p@5``, ``nDCG@10``) and
    ``"trec"`` for trec_eval's ``name_k`` / ``name.k`` (``P_5``, ``ndcg_cut.10``). Like every
    metric name, an alias matches in any capitalisation, so no two metrics may own names that differ
    only in case (``rankgate.spec`` refuses such a registry).
    """

    name: str
    params: Mapping[str, ParamValue] = field(default_factory=dict)
    style: str = "at"


@dataclass(frozen=True)
class MetricDef:
    """Everything rankgate knows about one metric."""

    name: str
    kernel: Kernel
    params: tuple[Param, ...]
    cutoff: bool
    summary: str
    formula: str
    reference: str
    edge_cases: str
    aliases: tuple[Alias, ...] = ()
    bounded: bool = True
    monotone_in_k: bool = False
    # Whether retrieving exactly the relevant documents, best first, scores 1 (false for measures
    # not normalised by R, such as rank-biased precision, and for rbp's residual).
    perfect_scores_one: bool = True
    # The compiled twin of ``kernel`` in ``rankgate._join`` (see ``rankgate.fast``), if it has one.
    # The kernel stays the definition; tests hold the twin equal to it on random batches.
    native: str | None = None

    def param(self, name: str) -> Param:
        for declared in self.params:
            if declared.name == name:
                return declared
        raise KeyError(name)

    def compute(
        self,
        batch: RankedBatch,
        k: int | None,
        params: Mapping[str, ParamValue],
        defaults: Mapping[str, ParamValue] | None = None,
    ) -> npt.NDArray[np.float64]:
        """Run the kernel with every declared parameter filled in.

        A parameter takes the value the spec gives, else the run-wide value in ``defaults`` (the
        relevance threshold set for a whole evaluation), else its declared default.
        """
        fallback = defaults or {}
        full = {p.name: params.get(p.name, fallback.get(p.name, p.default)) for p in self.params}
        policy, grade = self.unjudged_policy(params, defaults)
        full.pop(UNJUDGED.name, None)
        return self.kernel(batch.under_unjudged(policy, grade), k, **full)

    def unjudged_policy(
        self, params: Mapping[str, ParamValue], defaults: Mapping[str, ParamValue] | None = None
    ) -> tuple[str, float]:
        """The unjudged-document policy a computation uses, and the grade an unjudged document
        gets under ``relevant``: the metric's ``rel``, else the run's threshold, else 1.

        A metric that does not declare ``unjudged`` always runs under ``nonrelevant`` (its
        kernel reads ``ranked_judged`` itself, as ``judged`` and ``bpref`` do).
        """
        fallback = defaults or {}
        if not any(p.name == UNJUDGED.name for p in self.params):
            return str(UNJUDGED.default), 1.0
        policy = str(params.get(UNJUDGED.name, UNJUDGED.default))
        grade = params.get("rel", fallback.get("rel", 1))
        return policy, float(grade)


REGISTRY: dict[str, MetricDef] = {}


def metric(
    name: str,
    *,
    summary: str,
    formula: str,
    reference: str,
    edge_cases: str,
    params: tuple[Param, ...] = (),
    cutoff: bool = True,
    aliases: tuple[Alias, ...] = (),
    bounded: bool = True,
    monotone_in_k: bool = False,
    perfect_scores_one: bool = True,
    native: str | None = None,
) -> Callable[[Kernel], Kernel]:
    """Register ``kernel`` under ``name``; the one place a metric is added."""

    def register(kernel: Kernel) -> Kernel:
        if name in REGISTRY:
            raise RuntimeError(f"metric {name!r} is registered twice")
        REGISTRY[name] = MetricDef(
            name=name,
            kernel=kernel,
            params=params,
            cutoff=cutoff,
            summary=summary,
            formula=formula,
            reference=reference,
            edge_cases=edge_cases,
            aliases=aliases,
            bounded=bounded,
            monotone_in_k=monotone_in_k,
            perfect_scores_one=perfect_scores_one,
            native=native,
        )
        return kernel

    return register


def get(name: str) -> MetricDef:
    """The definition registered under the canonical ``name``; ``KeyError`` when there is none."""
    _load_definitions()
    return REGISTRY[name]


def _load_definitions() -> None:
    # Importing the module runs its decorators; it is cached after the first call.
    from rankgate.metrics import definitions  # noqa: F401


def all_metrics() -> list[MetricDef]:
    """Every registered metric, in declaration order."""
    _load_definitions()
    return list(REGISTRY.values())


def describe(definition: MetricDef) -> dict[str, Any]:
    """A plain-data description of a metric, for ``rankgate metrics --format json`` and docs."""
    return {
        "name": definition.name,
        "cutoff": definition.cutoff,
        "params": [
            {
                "name": p.name,
                "default": p.default,
                "description": p.description,
                **({"choices": list(p.choices)} if p.choices else {}),
            }
            for p in definition.params
        ],
        "summary": definition.summary,
        "formula": definition.formula,
        "reference": definition.reference,
        "edge_cases": definition.edge_cases,
        "aliases": [a.name for a in definition.aliases],
        "bounded": definition.bounded,
    }
