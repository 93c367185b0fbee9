"""The metric grammar: ``name(param=value,...)@k``, parsed into a ``MetricSpec`` that round-trips.

The canonical string omits parameters left at their default and lists the others in declaration
order, so ``parse_metric(str(spec)) == spec`` and two spellings of one metric compare equal:
``P_5`` and ``p@5`` both become ``precision@5``. A parameter whose default the run sets (``rel``,
from the relevance threshold) is kept when written out: ``precision(rel=1)@5`` stays as written. The parameters, cutoffs and
aliases come from the metric registry; nothing here names a particular metric.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from rankgate.batch import RankedBatch
from rankgate.errors import SpecError
from rankgate.metrics.registry import Alias, MetricDef, ParamValue, all_metrics, get

__all__ = ["MetricSpec", "make_metric", "parse_metric", "parse_metric_list"]

_SPEC = re.compile(r"^(?P<name>[A-Za-z][\w.\-]*?)(?:\((?P<params>[^()]*)\))?(?:@(?P<k>[^@()]*))?$")
_TREC_CUTOFF = re.compile(r"^(?P<base>.+?)[_.](?P<k>[0-9]+)$")
_CUTOFF = re.compile(r"^[0-9]+$")


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """One metric at one cutoff with its parameters, e.g. ``ndcg(gain=linear)@10``.

    Build it with ``parse_metric`` or ``make_metric``; both validate against the registry.
    ``params`` holds only the parameters that differ from their defaults, in declaration order.
    """

    name: str
    k: int | None = None
    params: tuple[tuple[str, ParamValue], ...] = ()

    def __str__(self) -> str:
        text = self.name
        if self.params:
            text += (
                "(" + ",".join(f"{key}={_format_value(value)}" for key, value in self.params) + ")"
            )
        if self.k is not None:
            text += f"@{self.k}"
        return text

    @property
    def definition(self) -> MetricDef:
        return get(self.name)

    def compute(
        self, batch: RankedBatch, defaults: Mapping[str, ParamValue] | None = None
    ) -> npt.NDArray[np.float64]:
        """Per-query values of this metric over a batch (``defaults``: run-wide parameter values)."""
        return self.definition.compute(batch, self.k, dict(self.params), defaults)

    def param(self, name: str) -> ParamValue:
        """The value of a parameter, given or default."""
        return dict(self.params).get(name, self.definition.param(name).default)


def _format_value(value: ParamValue) -> str:
    return repr(value) if isinstance(value, float) else str(value)


def make_metric(
    name: str, k: int | None = None, params: Mapping[str, ParamValue] | None = None
) -> MetricSpec:
    """Build a validated, canonical ``MetricSpec`` from parts (``name`` may be an alias)."""
    if k is not None and (isinstance(k, bool) or not isinstance(k, int)):
        raise SpecError(f"metric {name!r}: cutoff must be a whole number, got {k!r}")
    definition, implied_params, implied_k = _resolve_name(name, k is not None)
    merged: dict[str, str | ParamValue] = dict(implied_params)
    merged.update(params or {})
    return _canonical(
        definition, _check_k(definition, k if k is not None else implied_k, name), merged
    )


def parse_metric(text: str) -> MetricSpec:
    """Parse one metric string; raises ``SpecError`` naming the problem and the text."""
    stripped = text.strip()
    match = _SPEC.match(stripped)
    if not match:
        raise SpecError(
            f"cannot parse metric {text!r}: expected name, name@k or name(param=value)@k"
        )
    raw_k = match.group("k")
    k: int | None = None
    if raw_k is not None:
        if not _CUTOFF.match(raw_k):
            raise SpecError(
                f"metric {text!r}: cutoff must be a positive whole number, got {raw_k!r}"
            )
        k = int(raw_k)
    definition, implied_params, implied_k = _resolve_name(match.group("name"), k is not None)
    params: dict[str, str | ParamValue] = dict(implied_params)
    params.update(_parse_params(match.group("params"), text))
    return _canonical(
        definition, _check_k(definition, k if k is not None else implied_k, text), params
    )


def parse_metric_list(texts: Iterable[str]) -> list[MetricSpec]:
    """Parse ``--metric`` values: comma lists, with bare numbers adding cutoffs to the metric before.

    ``["ndcg@5,10,20", "mrr"]`` gives ndcg@5, ndcg@10, ndcg@20 and mrr. Duplicates are dropped and
    the order is kept.
    """
    specs: list[MetricSpec] = []
    for text in texts:
        previous: MetricSpec | None = None
        for token in _split_top_level(text):
            if _CUTOFF.match(token):
                if previous is None or previous.k is None:
                    raise SpecError(
                        f"in {text!r}: cutoff {token} follows no metric with a cutoff "
                        "(write e.g. ndcg@5,10,20)"
                    )
                spec = MetricSpec(
                    previous.name, _check_k(previous.definition, int(token), text), previous.params
                )
            else:
                spec = parse_metric(token)
            previous = spec
            if spec not in specs:
                specs.append(spec)
    return specs


def _split_top_level(text: str) -> list[str]:
    """Split on commas outside parentheses, dropping empty pieces."""
    pieces: list[str] = []
    depth = 0
    current = ""
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            pieces.append(current.strip())
            current = ""
        else:
            current += char
    pieces.append(current.strip())
    return [piece for piece in pieces if piece]


def _resolve_name(name: str, has_k: bool) -> tuple[MetricDef, Mapping[str, ParamValue], int | None]:
    """Canonical definition for a name or alias, the parameters it implies, and an implied cutoff."""
    known = {d.name: d for d in all_metrics()}
    if name in known:
        return known[name], {}, None
    for definition in known.values():
        for alias in definition.aliases:
            if alias.style == "at" and _alias_matches(alias, name):
                return definition, alias.params, None
    trec = _TREC_CUTOFF.match(name)
    if trec and not has_k:
        for definition in known.values():
            for alias in definition.aliases:
                if alias.style == "trec" and _alias_matches(alias, trec.group("base")):
                    return definition, alias.params, int(trec.group("k"))
    for definition in known.values():
        for alias in definition.aliases:
            if alias.style == "trec" and _alias_matches(alias, name):
                return definition, alias.params, None
    names = sorted(known) + sorted(a.name for d in known.values() for a in d.aliases)
    # A different capitalisation of a canonical name is the likeliest intent ("NDCG" -> "ndcg", not
    # the alias "nDCG", which means linear gain).
    same_letters = [known_name for known_name in known if known_name.lower() == name.lower()]
    close = same_letters or difflib.get_close_matches(name, names, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise SpecError(f"unknown metric {name!r}{hint}; `rankgate metrics` lists them")


def _alias_matches(alias: Alias, name: str) -> bool:
    return alias.name.lower() == name.lower() if alias.fold_case else alias.name == name


def _parse_params(raw: str | None, text: str) -> dict[str, str]:
    if raw is None:
        return {}
    params: dict[str, str] = {}
    for piece in _split_top_level(raw):
        key, sep, value = piece.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key or not value:
            raise SpecError(f"metric {text!r}: parameter {piece!r} is not of the form name=value")
        if key in params:
            raise SpecError(f"metric {text!r}: parameter {key!r} is given twice")
        params[key] = value
    return params


def _check_k(definition: MetricDef, k: int | None, text: str) -> int | None:
    if k is None:
        return None
    if not definition.cutoff:
        raise SpecError(f"metric {text!r}: {definition.name} takes no cutoff @k")
    if k < 1:
        raise SpecError(f"metric {text!r}: cutoff must be at least 1, got {k}")
    return k


def _canonical(
    definition: MetricDef, k: int | None, params: Mapping[str, str | ParamValue]
) -> MetricSpec:
    declared = {p.name: p for p in definition.params}
    chosen: dict[str, ParamValue] = {}
    for key, raw in params.items():
        if key not in declared:
            allowed = ", ".join(declared) or "none"
            raise SpecError(
                f"metric {definition.name}: unknown parameter {key!r} (parameters: {allowed})"
            )
        try:
            chosen[key] = declared[key].coerce(raw)
        except ValueError as problem:
            raise SpecError(f"metric {definition.name}: parameter {key}: {problem}") from None
    ordered = tuple(
        (p.name, chosen[p.name])
        for p in definition.params
        if p.name in chosen and (p.run_default or chosen[p.name] != p.default)
    )
    return MetricSpec(definition.name, k, ordered)
