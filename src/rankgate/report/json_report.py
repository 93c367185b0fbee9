"""The JSON report: a stable, documented schema (``eval.schema.json`` beside this file).

Numbers that are undefined (a mean over no queries) are written as ``null``, never as NaN, which is
not JSON.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from importlib import resources
from typing import Any

from rankgate import __version__
from rankgate.compare import CandidateResult, Cell, Comparison
from rankgate.evaluate import Evaluation
from rankgate.gates import GateOutcome
from rankgate.power import DETECTABLE_POWER
from rankgate.segments import Group, SegmentKey

__all__ = [
    "SCHEMA_VERSION",
    "comparison_report",
    "comparison_schema",
    "eval_report",
    "eval_schema",
    "render_json",
]

SCHEMA_VERSION = 1


def eval_report(
    evaluation: Evaluation, sources: Sequence[str], *, per_query: bool = False
) -> dict[str, Any]:
    """The report as plain data, ready for ``json.dumps``."""
    summary = evaluation.summary
    settings = evaluation.settings
    policy = evaluation.policy
    report: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "rankgate", "version": __version__},
        "sources": list(sources),
        "settings": {
            "relevance_threshold": settings.relevance_threshold,
            "empty_relevant": settings.empty_relevant,
            "on_invalid": settings.on_invalid,
            "segment_by": list(dict.fromkeys(g.key.field for g in evaluation.segments if g.key)),
            "gate_on": policy.gate_on,
            "min_queries": policy.min_queries,
            "strict_segments": policy.strict_segments,
            "min_coverage": policy.min_coverage,
            "seed": settings.seed,
            "resamples": settings.resamples,
            "missing_trace": settings.missing_trace,
            "served_k": settings.served_k,
            "label_source": settings.label_source,
        },
        "summary": {
            "read": summary.read,
            "scored": summary.scored,
            "skipped": dict(summary.skipped),
            "labeled": summary.labeled,
            "coverage": summary.coverage,
            "duplicates_dropped": summary.duplicates_dropped,
            "chunks_collapsed": summary.chunks_collapsed,
            "doc_ids": summary.doc_ids,
            "invalid_examples": [str(example) for example in summary.invalid_examples],
            "labels_removed_stale": summary.labels_removed_stale,
            "labels_removed_expired": summary.labels_removed_expired,
            "lost_all_relevant": summary.lost_all_relevant,
            "query_set": summary.query_set,
            "expected_queries": summary.expected_queries,
            "missing_trace": summary.missing_trace,
            "missing_examples": list(summary.missing_examples),
            "missing_scored": summary.missing_scored,
            "in_means": summary.in_means,
            "outside_set": summary.outside_set,
            "label_sources": dict(summary.label_sources),
            "served_depth": (
                None
                if summary.served_depth is None
                else {
                    "queries": summary.served_depth.queries,
                    "median": summary.served_depth.median,
                    "p10": summary.served_depth.p10,
                }
            ),
        },
        "metrics": {str(spec): _number(mean) for spec, mean in evaluation.means.items()},
        "intervals": {str(spec): _bounds(bounds) for spec, bounds in evaluation.intervals.items()},
        "judged": _judged(evaluation, evaluation.overall),
        "unjudged_ranges": _ranges(evaluation, evaluation.overall),
        "segments": [_group(evaluation, group) for group in evaluation.segments],
        "gates": [_gate(outcome) for outcome in evaluation.gates],
        "coverage_checks": [
            {
                "segment": _segment(check.segment),
                "coverage": check.coverage,
                "minimum": check.minimum,
                "passed": check.passed,
            }
            for check in evaluation.coverage_checks
        ],
        "passed": evaluation.passed,
        "warnings": list(evaluation.warnings),
    }
    if evaluation.ppi is not None:
        from rankgate.report.ppi_text import ppi_json

        report["ppi"] = ppi_json(evaluation.ppi)
    if per_query:
        report["per_query"] = evaluation.per_query()
    return report


def _judged(evaluation: Evaluation, group: Group) -> dict[str, Any] | None:
    spec = evaluation.judged
    return None if spec is None else {"metric": str(spec), "mean": _number(group.means[spec])}


def _ranges(evaluation: Evaluation, group: Group) -> dict[str, dict[str, float | None] | None]:
    """Per metric, its mean with unjudged documents counted non-relevant (``pessimistic``) and
    relevant (``optimistic``); null for a metric that takes no unjudged policy."""
    ranges: dict[str, dict[str, float | None] | None] = {}
    for spec in evaluation.metrics:
        bounds = evaluation.unjudged_range(spec, group)
        ranges[str(spec)] = (
            None
            if bounds is None
            else {"pessimistic": _number(bounds[0]), "optimistic": _number(bounds[1])}
        )
    return ranges


def _group(evaluation: Evaluation, group: Group) -> dict[str, Any]:
    return {
        "segment": _segment(group.key),
        "read": group.read,
        "labeled": group.labeled,
        "scored": group.scored,
        "skipped": dict(group.skipped),
        "coverage": group.coverage,
        "labels_removed_stale": group.labels_removed_stale,
        "labels_removed_expired": group.labels_removed_expired,
        "lost_all_relevant": group.lost_all_relevant,
        "judged": _judged(evaluation, group),
        "metrics": {str(spec): _number(group.means[spec]) for spec in evaluation.metrics},
        "intervals": {str(spec): _bounds(group.intervals[spec]) for spec in evaluation.metrics},
        "unjudged_ranges": _ranges(evaluation, group),
    }


def _gate(outcome: GateOutcome) -> dict[str, Any]:
    return {
        "metric": str(outcome.gate.metric),
        "op": outcome.gate.op,
        "threshold": outcome.gate.threshold,
        "segment": _segment(outcome.segment),
        "statistic": outcome.statistic,
        "value": _number(outcome.value),
        "margin": _number(outcome.margin),
        "mean": _number(outcome.mean),
        "interval": _bounds(outcome.interval),
        "scored": outcome.scored,
        "status": outcome.status,
        "passed": outcome.passed,
    }


def _segment(key: SegmentKey | None) -> dict[str, str] | None:
    return None if key is None else {"field": key.field, "value": key.value}


def _bounds(bounds: tuple[float, float] | None) -> list[float] | None:
    if bounds is None or math.isnan(bounds[0]):
        return None
    return [bounds[0], bounds[1]]


def render_json(report: dict[str, Any]) -> str:
    return json.dumps(report, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def eval_schema() -> dict[str, Any]:
    """The JSON Schema the report follows."""
    text = resources.files("rankgate.report").joinpath("eval.schema.json").read_text("utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


def _number(value: float | None) -> float | None:
    return None if value is None or math.isnan(value) else value


def comparison_report(comparison: Comparison, *, per_query: bool = False) -> dict[str, Any]:
    """The ``rankgate compare`` report as plain data (``compare.schema.json``); with
    ``per_query``, every paired query's values and deltas per candidate."""
    settings = comparison.settings
    policy = comparison.policy
    significance = comparison.significance
    report: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "rankgate", "version": __version__},
        "baseline": comparison.baseline,
        "candidates": [result.name for result in comparison.results],
        "labels_source": comparison.labels_source,
        "settings": {
            "test": significance.test,
            "permutations": significance.permutations,
            "correction": significance.correction,
            "alpha": significance.alpha,
            "margin": significance.margin,
            "unjudged_tolerance": significance.unjudged_tolerance,
            "fail_on_label_limited": significance.fail_on_label_limited,
            "confidence": 0.95,
            "interval": "bca",
            "pairing": comparison.pairing,
            "seed": settings.seed,
            "resamples": settings.resamples,
            "relevance_threshold": settings.relevance_threshold,
            "empty_relevant": settings.empty_relevant,
            "on_invalid": settings.on_invalid,
            "doc_ids": None if settings.doc_ids is None else str(settings.doc_ids),
            "segment_by": list(settings.segment_by),
            "gate_on": policy.gate_on,
            "min_queries": policy.min_queries,
            "strict_segments": policy.strict_segments,
            "min_coverage": policy.min_coverage,
            "min_detectable": policy.min_detectable,
            "detectable_power": DETECTABLE_POWER,
        },
        "read": dict(comparison.read),
        "invalid": dict(comparison.invalid),
        "invalid_examples": [str(example) for example in comparison.invalid_examples],
        "results": [_candidate(result) for result in comparison.results],
        "cells": [_cell(cell) for cell in comparison.cells],
        "regressions": len(comparison.regressions),
        "improvements": len(comparison.improvements),
        "label_limited": len(comparison.label_limited),
        "underpowered": len(comparison.underpowered),
        "next_step": comparison.next_step,
        "unjudged_pairs": (
            None if comparison.unjudged_pairs is None else len(comparison.unjudged_pairs)
        ),
        "passed": comparison.passed,
        "warnings": list(comparison.warnings),
    }
    if comparison.ppi is not None:
        from rankgate.report.ppi_text import ppi_compare_json

        report["ppi"] = ppi_compare_json(comparison.ppi)
    if per_query:
        report["per_query"] = {result.name: result.per_query() for result in comparison.results}
    return report


def _candidate(result: CandidateResult) -> dict[str, Any]:
    pairing = result.pairing
    summary = result.candidate.summary
    return {
        "name": result.name,
        "pairing": {
            "paired": pairing.paired,
            "baseline_only": pairing.baseline_only,
            "candidate_only": pairing.candidate_only,
            "baseline_only_examples": list(pairing.baseline_only_ids),
            "candidate_only_examples": list(pairing.candidate_only_ids),
        },
        "design": {
            "design": pairing.design,
            "requested": pairing.requested,
            "shared_share": pairing.shared_share,
            "reason": pairing.reason,
        },
        "scored": summary.scored,
        "skipped": dict(summary.skipped),
        "labeled": summary.labeled,
        "labels_removed_stale": summary.labels_removed_stale,
        "labels_removed_expired": summary.labels_removed_expired,
        "gates": [_gate(outcome) for outcome in result.candidate.gates],
        "coverage_checks": [
            {
                "segment": _segment(check.segment),
                "coverage": check.coverage,
                "minimum": check.minimum,
                "passed": check.passed,
            }
            for check in result.candidate.coverage_checks
        ],
        "passed": result.passed,
    }


def _cell(cell: Cell) -> dict[str, Any]:
    return {
        "candidate": cell.candidate,
        "segment": _segment(cell.segment),
        "metric": str(cell.metric),
        "interval": [cell.interval[0], cell.interval[1]],
        **cell.statistics(),
    }


def comparison_schema() -> dict[str, Any]:
    """The JSON Schema the comparison report follows."""
    text = resources.files("rankgate.report").joinpath("compare.schema.json").read_text("utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema
