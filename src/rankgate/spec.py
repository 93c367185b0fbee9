"""The metric grammar: ``name(param=value,...)@k``, parsed into a ``MetricSpec`` that round-trips.

The canonical string omits parameters left at their default and lists the others in declaration
order, so ``parse_metric(str(spec)) == spec`` and two spellings of one metric compare equal:
``P_5`` and ``p@5`` both become ``precision@5``. A parameter whose default the run sets (``rel``,
from the relevance threshold) is kept when written out: ``precision(rel=1)@5`` stays as written. The
parameters, cutoffs and aliases come from the metric registry; nothing here names a particular metric.

One rule for case: metric names, aliases, parameter names and choices ignore capitalisation
(``NDCG@10``, ``nDCG@10`` and ``ndcg@10`` are one metric), so every API that looks a metric up by
string finds it under any spelling that parses to the same spec.

Bounds: a spec is at most ``MAX_SPEC_LENGTH`` characters and a cutoff at most ``MAX_CUTOFF``, the
most IDs one ranking may hold (a deeper cutoff would cut nothing). Anything else is a ``SpecError``.
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
from rankgate.io.limits import MAX_IDS_PER_RANKING
from rankgate.metrics.registry import (
    UNJUDGED,
    UNJUDGED_POLICIES,
    MetricDef,
    ParamValue,
    all_metrics,
    get,
)

__all__ = [
    "MAX_CUTOFF",
    "MAX_SPEC_LENGTH",
    "UNJUDGED_POLICIES",
    "MetricSpec",
    "make_metric",
    "parse_metric",
    "parse_metric_list",
    "unjudged_variants",
]

#: The deepest cutoff accepted: a ranking holds at most this many IDs, so ``@k`` beyond it cuts
#: nothing (and a 20-digit k would overflow the kernels' integers).
MAX_CUTOFF = MAX_IDS_PER_RANKING
#: The longest metric spec accepted, in characters; real ones are a few dozen.
MAX_SPEC_LENGTH = 200

_SPEC = re.compile(r"(?P<name>[A-Za-z][\w.\-]*?)(?:\((?P<params>[^()]*)\))?(?:@(?P<k>[^@()]*))?")
_TREC_CUTOFF = re.compile(r"(?P<base>.+?)[_.](?P<k>[0-9]+)")
_CUTOFF = re.compile(r"[0-9]+")


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

    def accepts(self, name: str) -> bool:
        """Whether this metric declares the parameter ``name`` (e.g. ``"unjudged"``)."""
        return any(p.name == name for p in self.definition.params)

    def with_params(self, **changes: str | ParamValue) -> MetricSpec:
        """This metric at the same cutoff with some parameters changed, validated and canonical.

        ``parse_metric("ndcg@10").with_params(unjudged="relevant")`` is
        ``ndcg(unjudged=relevant)@10``, and setting a parameter back to its default drops it from
        the name. A parameter the metric does not declare is a ``SpecError``: ask ``accepts``
        first (``judged``, ``bpref`` and ``rbp_residual`` take no ``unjudged`` policy).
        """
        merged: dict[str, str | ParamValue] = dict(self.params)
        merged.update(changes)
        return _canonical(self.definition, self.k, merged, str(self))

    @property
    def unjudged(self) -> str | None:
        """The unjudged-document policy of this metric, or None when it takes none."""
        return str(self.param(UNJUDGED.name)) if self.accepts(UNJUDGED.name) else None


def unjudged_variants(spec: MetricSpec) -> dict[str, MetricSpec]:
    """``spec`` under each unjudged-document policy, by policy name, in the order of
    ``UNJUDGED_POLICIES`` (nonrelevant, condensed, relevant); empty when the metric takes none.

    The pessimistic/optimistic pair of a report range is ``variants["nonrelevant"]`` and
    ``variants["relevant"]``; the spec's own policy is among the values.
    """
    if not spec.accepts(UNJUDGED.name):
        return {}
    return {policy: spec.with_params(unjudged=policy) for policy in UNJUDGED_POLICIES}


def _format_value(value: ParamValue) -> str:
    return repr(value) if isinstance(value, float) else str(value)


def make_metric(
    name: str, k: int | None = None, params: Mapping[str, ParamValue] | None = None
) -> MetricSpec:
    """Build a validated, canonical ``MetricSpec`` from parts (``name`` may be an alias)."""
    if not isinstance(name, str):
        raise SpecError(f"a metric name must be text, got {name!r}")
    _check_length(name)
    if k is not None and (isinstance(k, bool) or not isinstance(k, int)):
        raise SpecError(f"metric {name!r}: cutoff must be a whole number, got {k!r}")
    if params is not None and not isinstance(params, Mapping):
        raise SpecError(f"metric {name!r}: params must be a mapping of name to value")
    definition, implied_params, implied_k = _resolve_name(name, k is not None)
    merged: dict[str, str | ParamValue] = dict(implied_params)
    merged.update(params or {})
    return _canonical(
        definition, _check_k(definition, k if k is not None else implied_k, name), merged, name
    )


def parse_metric(text: str) -> MetricSpec:
    """Parse one metric string; raises ``SpecError`` naming the problem and the text."""
    if not isinstance(text, str):
        raise SpecError(f"a metric must be text such as 'ndcg@10', got {text!r}")
    _check_length(text)
    stripped = text.strip()
    match = _SPEC.fullmatch(stripped)
    if not match:
        raise SpecError(
            f"cannot parse metric {text!r}: expected name, name@k or name(param=value)@k"
        )
    raw_k = match.group("k")
    k: int | None = None
    if raw_k is not None:
        if not _CUTOFF.fullmatch(raw_k):
            raise SpecError(
                f"metric {text!r}: cutoff must be a positive whole number, got {raw_k!r}"
            )
        k = _cutoff_number(raw_k, text)
    definition, implied_params, implied_k = _resolve_name(match.group("name"), k is not None)
    params: dict[str, str | ParamValue] = dict(implied_params)
    params.update(_parse_params(match.group("params"), text))
    return _canonical(
        definition, _check_k(definition, k if k is not None else implied_k, text), params, text
    )


def parse_metric_list(texts: Iterable[str]) -> list[MetricSpec]:
    """Parse ``--metric`` values: comma lists, with bare numbers adding cutoffs to the metric before.

    ``["ndcg@5,10,20", "mrr"]`` gives ndcg@5, ndcg@10, ndcg@20 and mrr. Duplicates are dropped and
    the order is kept.
    """
    if isinstance(texts, str):
        texts = [texts]
    specs: list[MetricSpec] = []
    for text in texts:
        if not isinstance(text, str):
            raise SpecError(f"a metric must be text such as 'ndcg@10', got {text!r}")
        previous: MetricSpec | None = None
        for token in _split_top_level(text):
            if _CUTOFF.fullmatch(token):
                if previous is None or previous.k is None:
                    raise SpecError(
                        f"in {text!r}: cutoff {token} follows no metric with a cutoff "
                        "(write e.g. ndcg@5,10,20)"
                    )
                k = _cutoff_number(token, text)
                spec = MetricSpec(
                    previous.name, _check_k(previous.definition, k, text), previous.params
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
    """Canonical definition for a name or alias (any capitalisation), the parameters it implies,
    and the cutoff a trec_eval-style name carries (``P_5``)."""
    at_names, trec_names = _name_tables()
    folded = name.lower()
    if folded in at_names:
        definition, implied = at_names[folded]
        return definition, implied, None
    trec = _TREC_CUTOFF.fullmatch(folded)
    if trec and not has_k and trec.group("base") in trec_names:
        definition, implied = trec_names[trec.group("base")]
        return definition, implied, _cutoff_number(trec.group("k"), name)
    if folded in trec_names:
        definition, implied = trec_names[folded]
        return definition, implied, None
    known = sorted({*at_names, *trec_names})
    close = difflib.get_close_matches(folded, known, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise SpecError(f"unknown metric {name!r}{hint}; `rankgate metrics` lists them")


_Resolved = tuple[MetricDef, Mapping[str, ParamValue]]


def _name_tables() -> tuple[dict[str, _Resolved], dict[str, _Resolved]]:
    """Every name a metric answers to, lower-cased: ``name@k`` style (canonical names and their
    aliases) and trec_eval style (``name_k``).

    Built from the registry on each call (a few dozen entries), so a metric registered later is
    found. Two metrics owning one name in different cases would make a spelling ambiguous: that is
    a bug in the registry, refused here rather than resolved by declaration order.
    """
    at_names: dict[str, _Resolved] = {}
    trec_names: dict[str, _Resolved] = {}
    for definition in all_metrics():
        entries: list[tuple[str, str, Mapping[str, ParamValue]]] = [("at", definition.name, {})]
        entries += [(alias.style, alias.name, alias.params) for alias in definition.aliases]
        for style, alias_name, implied in entries:
            table = trec_names if style == "trec" else at_names
            folded = alias_name.lower()
            previous = table.get(folded)
            if previous is not None and (previous[0].name, dict(previous[1])) != (
                definition.name,
                dict(implied),
            ):
                raise RuntimeError(
                    f"metric name {alias_name!r} is claimed by {previous[0].name} and "
                    f"{definition.name} (names ignore case)"
                )
            table[folded] = (definition, implied)
    return at_names, trec_names


def _check_length(text: str) -> None:
    if len(text) > MAX_SPEC_LENGTH:
        raise SpecError(
            f"metric {text[:40]!r}... is {len(text):,} characters long; "
            f"a metric spec has at most {MAX_SPEC_LENGTH}"
        )


def _cutoff_number(digits: str, text: str) -> int:
    """A cutoff written in ASCII digits, refused past ``MAX_CUTOFF`` before it becomes a number (a
    string of thousands of digits is refused by ``int`` itself, and a huge k overflows kernels)."""
    significant = digits.lstrip("0") or "0"
    if len(significant) > len(str(MAX_CUTOFF)) or int(significant) > MAX_CUTOFF:
        raise SpecError(
            f"metric {text!r}: cutoff {significant[:20]}{'...' if len(significant) > 20 else ''} "
            f"is beyond the largest allowed, {MAX_CUTOFF:,} (the most IDs a ranking may hold); "
            "leave @k out for no cutoff"
        )
    return int(significant)


def _parse_params(raw: str | None, text: str) -> dict[str, str]:
    if raw is None:
        return {}
    params: dict[str, str] = {}
    for piece in _split_top_level(raw):
        key, sep, value = piece.partition("=")
        key, value = key.strip().lower(), value.strip()
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
    if k > MAX_CUTOFF:
        raise SpecError(
            f"metric {text!r}: cutoff {k} is beyond the largest allowed, {MAX_CUTOFF:,} "
            "(the most IDs a ranking may hold); leave @k out for no cutoff"
        )
    return k


def _canonical(
    definition: MetricDef, k: int | None, params: Mapping[str, str | ParamValue], text: str
) -> MetricSpec:
    """The spec with parameters checked and defaults left out; ``text`` is what the user wrote."""
    declared = {p.name: p for p in definition.params}
    chosen: dict[str, ParamValue] = {}
    for given_key, raw in params.items():
        key = given_key.lower() if isinstance(given_key, str) else given_key
        if key not in declared:
            allowed = ", ".join(declared) or "none"
            raise SpecError(
                f"metric {text!r}: unknown parameter {given_key!r} of {definition.name} "
                f"(parameters: {allowed})"
            )
        try:
            chosen[key] = declared[key].coerce(raw)
        except ValueError as problem:
            raise SpecError(f"metric {text!r}: parameter {key}: {problem}") from None
    ordered = tuple(
        (p.name, chosen[p.name])
        for p in definition.params
        if p.name in chosen and (p.run_default or chosen[p.name] != p.default)
    )
    return MetricSpec(definition.name, k, ordered)
