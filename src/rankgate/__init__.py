"""rankgate: score the retrieval stage of search and RAG systems from recorded traces.

The public API is exactly ``__all__``; everything else is private and may change.
"""

from __future__ import annotations

__version__ = "0.1.0"

from rankgate.baseline import baseline_options, save_baseline
from rankgate.compare import Comparison, Significance, Variant, compare
from rankgate.doc_ids import DocIdMapping
from rankgate.errors import ConfigError, InputError, RankgateError, SpecError, UsageError
from rankgate.evaluate import DEFAULT_METRICS, Evaluation, ServedDepth, Settings, Summary, evaluate
from rankgate.gates import Gate, GateOutcome, GatePolicy, parse_gate
from rankgate.io import FieldMap
from rankgate.per_example import EvalResult, MetricThreshold, RetrievalMetricsEvaluator
from rankgate.spec import MetricSpec, make_metric, parse_metric, parse_metric_list

__all__ = [
    "DEFAULT_METRICS",
    "Comparison",
    "ConfigError",
    "DocIdMapping",
    "EvalResult",
    "Evaluation",
    "FieldMap",
    "Gate",
    "GateOutcome",
    "GatePolicy",
    "InputError",
    "MetricSpec",
    "MetricThreshold",
    "RankgateError",
    "RetrievalMetricsEvaluator",
    "ServedDepth",
    "Settings",
    "Significance",
    "SpecError",
    "Summary",
    "UsageError",
    "Variant",
    "__version__",
    "baseline_options",
    "compare",
    "evaluate",
    "make_metric",
    "parse_gate",
    "parse_metric",
    "parse_metric_list",
    "save_baseline",
]
