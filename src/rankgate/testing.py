"""Retrieval gates as test assertions, for pytest or any other test runner.

``assert_retrieval`` scores a trace source with ``rankgate.evaluate``, checks its gates, and returns
the ``Evaluation`` when every gate and coverage minimum holds. When one misses it raises
``RetrievalAssertionError`` (an ``AssertionError``, so every runner reports a failure, not an
error) whose message is the report's miss list: per missed gate, the segment, the metric, its value,
the threshold and the margin, worst first, as ``rankgate eval`` prints them, each followed by the
lowest-scoring queries of that group on that metric::

    FAIL · 2 of 3 checks failed · 4 queries scored
    what failed, worst first:
      query_type=multi_hop: mrr = 0.1667, needs >= 0.3 (margin -0.1333, 2 queries)
        worst queries on mrr: q4 0.0000, q3 0.3333

Input a user can get wrong (a missing file, a malformed record, an unknown metric, a bad gate) is
not a failed assertion: it raises the ``RankgateError`` that names it, so a broken fixture reads as
an error, never as a retrieval regression.

The pytest plugin (``rankgate.pytest_plugin``) wraps this in the ``rankgate_check`` fixture, which
also records every assertion for ``--rankgate-report``.
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from rankgate.config import Config, load_config
from rankgate.errors import ConfigError, SpecError, UsageError
from rankgate.evaluate import Evaluation, Settings, evaluate
from rankgate.gates import (
    Gate,
    GateOutcome,
    GatePolicy,
    SegmentRule,
    merge_gates,
    parse_gate,
    pessimistic_spec,
)
from rankgate.io import FieldMap
from rankgate.report.console import (
    _failures,
    _miss,
    counted,
    eval_verdict_text,
    shown_query_id,
)
from rankgate.segments import SegmentKey
from rankgate.spec import MetricSpec
from rankgate.stale import LabelFilter, parse_age, read_corpus

__all__ = [
    "DEFAULT_WORST",
    "RetrievalAssertionError",
    "RetrievalWarning",
    "assert_retrieval",
    "describe_source",
    "failure_message",
]

#: Lowest-scoring queries listed under each missed gate (and kept with their rankings for the
#: HTML report, ``Evaluation.examples``).
DEFAULT_WORST = 5

GateLike = Gate | str


class RetrievalAssertionError(AssertionError):
    """A gate or a coverage minimum missed. The message is the miss list; ``evaluation`` holds the
    whole result (per-query values, segments, worst queries) for a test that wants to look."""

    def __init__(self, message: str, evaluation: Evaluation) -> None:
        super().__init__(message)
        self.evaluation = evaluation


class RetrievalWarning(UserWarning):
    """A gate an assertion did not check: a segment with fewer scored queries than its
    ``min_queries`` is neither a pass nor a fail unless segments are strict."""


def assert_retrieval(
    source: Any,
    gates: Sequence[GateLike] | GateLike = (),
    *,
    segments: Sequence[str] | str = (),
    segment_gates: Mapping[str, Sequence[GateLike] | GateLike] | None = None,
    metrics: Iterable[str | MetricSpec] | str | None = None,
    labels: Any = None,
    config: str | os.PathLike[str] | None = None,
    settings: Settings | None = None,
    policy: GatePolicy | None = None,
    worst: int = DEFAULT_WORST,
    **options: Any,
) -> Evaluation:
    """Score ``source`` and raise ``RetrievalAssertionError`` unless every gate holds.

    Args:
        source: what ``rankgate.evaluate`` reads: a path (JSON Lines, JSON, Parquet, CSV, TREC),
            a list of dicts, or a pandas, polars or Arrow table.
        gates: thresholds on the means, overall and in every segment: ``"ndcg@10>=0.7"`` or
            ``Gate`` objects (one string alone is one gate). A gate replaces a ``config`` gate on
            the same metric and operator, as ``--gate`` does.
        segments: fields to segment by (``segment_by``); the gates then apply to every segment.
        segment_gates: gates for single segments, ``{"query_type=multi_hop": ["ndcg@10>=0.45"]}``.
            A segment's gate replaces the default gate on the same metric and operator there, as a
            ``[segments.query_type.multi_hop.gates]`` table does; the field is segmented too.
        metrics: metrics to compute beside those the gates name (by default, only those; a
            ``config``'s ``metrics`` when it has some).
        labels: labels kept apart from the traces (a file, a store URL, a dict), as for
            ``evaluate``.
        config: a ``rankgate.toml`` to start from (metrics, gates, fields, conventions, segments,
            ``min_queries``...). Never read implicitly: a test's verdict must not depend on the
            directory pytest runs from. Cannot be combined with ``settings`` or ``policy``.
        settings: scoring conventions (``rankgate.Settings``); ``segments`` add to its fields.
        policy: how gates decide (``rankgate.gates.GatePolicy``): ``min_queries``, ``gate_on``,
            ``min_coverage``, ``strict_segments``; ``segment_gates`` add to its rules.
        worst: lowest-scoring queries listed under each missed gate, also kept with their
            rankings in ``Evaluation.examples`` (the HTML report's worst-queries table).
        **options: passed to ``rankgate.evaluate``: ``input_format``, ``labels_format``,
            ``queries``, ``extra_metrics``, ``progress``.

    Returns:
        The ``Evaluation``, when every gate and coverage minimum passed.

    Raises:
        RetrievalAssertionError: a gate or a coverage minimum missed.
        RankgateError: the input or the call is wrong (``InputError``, ``SpecError``,
            ``ConfigError``, ``UsageError``), or nothing would be checked.
    """
    __tracebackhide__ = True  # pytest: the failure points at the test's call, not in here
    if config is not None and (settings is not None or policy is not None):
        named = "settings" if settings is not None else "policy"
        raise UsageError(
            f"assert_retrieval: config and {named} both set the scoring conventions; "
            "give one of them"
        )
    loaded = load_config(Path(config)) if config is not None else Config()
    if config is not None:
        settings, policy = _settings_of(loaded), _policy_of(loaded)
    settings = settings or Settings()
    policy = policy or GatePolicy()
    fields = tuple(dict.fromkeys([*settings.segment_by, *_texts(segments, "segments")]))
    settings = replace(settings, segment_by=fields)
    policy = replace(policy, rules=_with_segment_gates(policy.rules, segment_gates))
    given = [_gate(g) for g in _items(gates)]
    _refuse_repeats(given)
    checked = merge_gates(loaded.gates, given)
    rule_checks = any(r.gates or r.min_coverage is not None for r in policy.rules)
    if not checked and not rule_checks and policy.min_coverage is None:
        raise UsageError(
            "assert_retrieval checks nothing: give gates (e.g. 'ndcg@10>=0.7'), "
            "segment_gates, or a config with [gates]"
        )
    if metrics is None:
        # The metrics the gates name (evaluate adds them), not the default set: an assertion's
        # report and warnings stay about what it checks.
        metrics = (
            loaded.metrics
            if loaded.metrics is not None
            else (() if checked or rule_checks else None)
        )
    if isinstance(worst, bool) or not isinstance(worst, int) or worst < 0:
        raise UsageError(f"assert_retrieval: worst must be a whole number >= 0, got {worst!r}")
    evaluation = evaluate(
        source,
        metrics,
        checked,
        settings=settings,
        policy=policy,
        labels=labels,
        worst=worst,
        **options,
    )
    _warn_unchecked(evaluation)
    if not evaluation.passed:
        raise RetrievalAssertionError(failure_message(evaluation, worst=worst), evaluation)
    return evaluation


def failure_message(evaluation: Evaluation, *, worst: int = DEFAULT_WORST) -> str:
    """The verdict line, then every missed gate and coverage minimum as ``rankgate eval`` lists
    them (worst first), each missed gate followed by the ``worst`` lowest-scoring queries of its
    group on its metric, then the evaluation's warnings."""
    scored = counted(evaluation.summary.in_means, "query")
    lines = [f"{eval_verdict_text(evaluation)} · {scored} scored"]
    failures = _failures(evaluation)
    missed = {_miss(o): o for o in evaluation.gates if not o.passed and o.status == "fail"}
    if failures:
        lines.append("what failed, worst first:")
    for line in failures:
        lines.append(f"  {line}")
        outcome = missed.get(line)
        shown = _worst_text(evaluation, outcome, worst) if outcome is not None else None
        if shown:
            lines.append(f"    {shown}")
    lines += [f"warning: {warning}" for warning in evaluation.warnings]
    return "\n".join(lines)


def describe_source(source: Any) -> str:
    """A source as reports name it: a path as given, else what kind of object it is."""
    if isinstance(source, (str, os.PathLike)):
        return os.fspath(source)
    if isinstance(source, (list, tuple)):
        return f"<{counted(len(source), 'record')}>"
    return f"<{type(source).__module__.split('.')[0]}.{type(source).__name__}>"


def _worst_text(evaluation: Evaluation, outcome: GateOutcome, count: int) -> str | None:
    """``"worst queries on ndcg@10: q7 0.0000, q2 0.1934"``: the queries of the outcome's group
    furthest on the wrong side of the gate (lowest for ``>=`` and ``>``, highest for ``<=`` and
    ``<``), ties in input order, as ``Evaluation.examples`` picks them; None when there are none."""
    if count == 0:
        return None
    gate = outcome.gate
    spec = pessimistic_spec(gate.metric) if outcome.statistic == "pessimistic" else gate.metric
    values = evaluation.values.get(spec)
    if values is None:
        spec, values = gate.metric, evaluation.values_for(gate.metric)
    indices = np.arange(len(values))
    if outcome.segment is not None:
        column = evaluation.segment_column(outcome.segment.field)
        member = np.fromiter(
            (value == outcome.segment.value for value in column), dtype=bool, count=len(values)
        )
        indices = indices[member]
    chosen = values[indices]
    finite = ~np.isnan(chosen)
    indices, chosen = indices[finite], chosen[finite]
    if not len(indices):
        return None
    # Below the threshold is worse for >= and >; above it for <= and <.
    key = chosen if gate.op in (">=", ">") else -chosen
    order = np.lexsort((indices, key))[:count]
    listed = ", ".join(
        f"{shown_query_id(str(evaluation.query_ids[int(i)]))} {_value(float(v))}"
        for i, v in zip(indices[order].tolist(), chosen[order].tolist(), strict=True)
    )
    return f"worst queries on {spec}: {listed}"


def _value(value: float) -> str:
    return f"{value:.4f}" if math.isfinite(value) else str(value)


def _warn_unchecked(evaluation: Evaluation) -> None:
    """One warning naming every gate left unchecked for want of queries (not strict segments)."""
    unchecked = [o for o in evaluation.gates if o.status == "insufficient" and o.passed]
    if not unchecked:
        return
    listed = "; ".join(
        f"{o.segment}: {o.gate} ({counted(o.scored, 'scored query')})" for o in unchecked
    )
    warnings.warn(
        RetrievalWarning(
            f"{counted(len(unchecked), 'gate')} not checked, segments below min_queries "
            f"({evaluation.policy.min_queries} unless a segment rule says otherwise): {listed}. "
            "Lower min_queries (policy=GatePolicy(min_queries=...)) or set strict_segments to "
            "fail instead"
        ),
        stacklevel=3,
    )


def _items(value: Sequence[GateLike] | GateLike) -> list[GateLike]:
    """One gate given alone, or several."""
    if isinstance(value, (str, Gate)):
        return [value]
    return list(value)


def _refuse_repeats(gates: Sequence[Gate]) -> None:
    """Two gates on one metric and operator: the second would silently replace the first."""
    seen: dict[tuple[MetricSpec, str], Gate] = {}
    for gate in gates:
        earlier = seen.setdefault((gate.metric, gate.op), gate)
        if earlier is not gate:
            raise UsageError(
                f"assert_retrieval: gate '{gate}' repeats '{earlier}'; keep one of them"
            )


def _texts(value: Sequence[str] | str, name: str) -> list[str]:
    items = [value] if isinstance(value, str) else list(value)
    for item in items:
        if not isinstance(item, str) or not item:
            raise UsageError(f"assert_retrieval: {name} must be field names, got {item!r}")
    return items


def _gate(value: object) -> Gate:
    if isinstance(value, Gate):
        return value
    if isinstance(value, str):
        return parse_gate(value)
    raise SpecError(f"a gate must be text such as 'ndcg@10>=0.7' or a Gate, got {value!r}")


def _with_segment_gates(
    rules: tuple[SegmentRule, ...],
    segment_gates: Mapping[str, Sequence[GateLike] | GateLike] | None,
) -> tuple[SegmentRule, ...]:
    """``rules`` with each segment's gates added; a rule already there for the segment keeps its
    other settings and has its gates replaced metric by metric, as ``merge_gates`` does."""
    if not segment_gates:
        return rules
    if not isinstance(segment_gates, Mapping):
        raise UsageError(
            "assert_retrieval: segment_gates must map a segment to its gates, e.g. "
            f"{{'query_type=multi_hop': ['ndcg@10>=0.45']}}, got {segment_gates!r}"
        )
    merged = list(rules)
    for name, gates in segment_gates.items():
        key = _segment_key(name)
        own = [_gate(g) for g in _items(gates)]
        at = next((i for i, rule in enumerate(merged) if rule.key == key), None)
        if at is None:
            merged.append(SegmentRule(key=key, gates=tuple(own)))
        else:
            merged[at] = replace(merged[at], gates=tuple(merge_gates(merged[at].gates, own)))
    return tuple(merged)


def _segment_key(name: object) -> SegmentKey:
    if isinstance(name, str):
        field_name, sep, value = name.partition("=")
        if sep and field_name.strip() and value:
            return SegmentKey(field_name.strip(), value)
    raise ConfigError(
        f"assert_retrieval: segment_gates key {name!r} must name one segment as FIELD=VALUE, "
        "e.g. 'query_type=multi_hop'"
    )


def _settings_of(config: Config) -> Settings:
    """The conventions a config file sets, the library's defaults for the rest."""
    label_filter = LabelFilter(
        corpus=None if config.corpus is None else read_corpus(config.corpus),
        max_age=None if config.label_max_age is None else parse_age(config.label_max_age),
    )
    given: dict[str, Any] = {
        "relevance_threshold": config.relevance_threshold,
        "empty_relevant": config.empty_relevant,
        "on_invalid": config.on_invalid,
        "segment_by": config.segment_by,
        "seed": config.seed,
        "resamples": config.resamples,
        "missing_trace": config.missing_trace,
        "served_k": config.served_k,
        "doc_ids": config.doc_ids,
    }
    return Settings(
        fields=FieldMap.from_assignments(config.fields),
        label_filter=label_filter,
        **{name: value for name, value in given.items() if value is not None},
    )


def _policy_of(config: Config) -> GatePolicy:
    """How a config file's gates decide, the library's defaults for what it leaves out."""
    given: dict[str, Any] = {
        "gate_on": config.gate_on,
        "min_queries": config.min_queries,
        "strict_segments": config.strict_segments,
        "min_coverage": config.min_coverage,
        "min_detectable": config.min_detectable,
    }
    return GatePolicy(
        rules=config.rules, **{name: value for name, value in given.items() if value is not None}
    )
