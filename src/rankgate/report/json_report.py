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
from rankgate.evaluate import Evaluation

__all__ = ["SCHEMA_VERSION", "eval_report", "eval_schema", "render_json"]

SCHEMA_VERSION = 1


def eval_report(
    evaluation: Evaluation, sources: Sequence[str], *, per_query: bool = False
) -> dict[str, Any]:
    """The report as plain data, ready for ``json.dumps``."""
    summary = evaluation.summary
    report: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "rankgate", "version": __version__},
        "sources": list(sources),
        "settings": {
            "relevance_threshold": evaluation.settings.relevance_threshold,
            "empty_relevant": evaluation.settings.empty_relevant,
            "on_invalid": evaluation.settings.on_invalid,
        },
        "summary": {
            "read": summary.read,
            "scored": summary.scored,
            "skipped": dict(summary.skipped),
            "labeled": summary.labeled,
            "coverage": summary.coverage,
            "duplicates_dropped": summary.duplicates_dropped,
            "invalid_examples": [str(example) for example in summary.invalid_examples],
        },
        "metrics": {str(spec): _number(mean) for spec, mean in evaluation.means.items()},
        "gates": [
            {
                "metric": str(outcome.gate.metric),
                "op": outcome.gate.op,
                "threshold": outcome.gate.threshold,
                "value": _number(outcome.value),
                "margin": _number(outcome.margin),
                "passed": outcome.passed,
            }
            for outcome in evaluation.gates
        ],
        "passed": evaluation.passed,
    }
    if per_query:
        report["per_query"] = evaluation.per_query()
    return report


def render_json(report: dict[str, Any]) -> str:
    return json.dumps(report, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def eval_schema() -> dict[str, Any]:
    """The JSON Schema the report follows."""
    text = resources.files("rankgate.report").joinpath("eval.schema.json").read_text("utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


def _number(value: float | None) -> float | None:
    return None if value is None or math.isnan(value) else value
