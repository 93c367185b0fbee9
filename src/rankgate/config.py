"""``rankgate.toml``: metrics, gates, field mapping and conventions for a project.

Example::

    metrics = ["ndcg@5,10", "mrr", "recall@20"]
    relevance_threshold = 1          # grade a document needs to count as relevant
    empty_relevant = "skip"          # or "zero"
    on_invalid = "fail"              # or "skip"
    min_detectable = 0.02            # compare: a cell passes as "no regression" only if it had
                                     # 80% power to see a change of 0.02 (also per segment)

    [fields]                         # where trace fields live in each record
    retrieved_ids = "metadata.retrieval.ids"

    [gates]                          # "metric" = threshold (>=), or "op threshold"
    "ndcg@10" = 0.7
    "recall@20" = ">= 0.85"

    [ids]                            # score documents when rankings or labels name chunks
    doc_id = "#"                     # or doc_id_regex = '^(.*)#c[0-9]+$', or
                                     # doc_id_map = "chunks.csv" (chunk_column, doc_column)

Every key is checked; an unknown one is an error that names the file and the key, so a typo never
silently disables a gate. Values left out fall back to the command line's defaults.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rankgate.doc_ids import DEFAULT_CHUNK_COLUMN, DEFAULT_DOC_COLUMN, DocIdMapping
from rankgate.errors import ConfigError, InputError, RankgateError
from rankgate.evaluate import check_relevance_threshold
from rankgate.gates import Gate, GatePolicy, SegmentRule, gates_from_table
from rankgate.io import FieldMap
from rankgate.segments import SegmentKey
from rankgate.spec import MAX_CUTOFF, parse_metric_list
from rankgate.stale import parse_age

__all__ = ["DEFAULT_CONFIG_NAME", "Config", "load_config"]

DEFAULT_CONFIG_NAME = "rankgate.toml"
_KNOWN_KEYS = {
    "metrics",
    "relevance_threshold",
    "empty_relevant",
    "on_invalid",
    "fields",
    "gates",
    "segment_by",
    "min_queries",
    "min_coverage",
    "gate_on",
    "strict_segments",
    "corpus",
    "label_max_age",
    "seed",
    "resamples",
    "segments",
    "monitor",
    "alerts",
    "ids",
    "served_k",
    "missing_trace",
    "min_detectable",
}
_SEGMENT_KEYS = {"gates", "min_queries", "min_coverage", "gate_on", "min_detectable"}
_ID_RULES = ("doc_id", "doc_id_regex", "doc_id_map")
_ID_KEYS = {*_ID_RULES, "chunk_column", "doc_column"}


@dataclass(frozen=True, slots=True)
class Config:
    """The settings a config file gives; None means "not set here"."""

    path: Path | None = None
    metrics: tuple[str, ...] | None = None
    relevance_threshold: float | None = None
    empty_relevant: str | None = None
    on_invalid: str | None = None
    fields: dict[str, str] = field(default_factory=dict)
    gates: tuple[Gate, ...] = ()
    segment_by: tuple[str, ...] | None = None
    min_queries: int | None = None
    min_coverage: float | None = None
    gate_on: str | None = None
    strict_segments: bool | None = None
    corpus: Path | None = None
    label_max_age: str | None = None
    seed: int | None = None
    resamples: int | None = None
    rules: tuple[SegmentRule, ...] = ()
    monitor: dict[str, Any] | None = None
    alerts: dict[str, Any] | None = None
    #: How retrieved and labeled IDs name their documents ([ids]); None scores IDs as they are.
    doc_ids: DocIdMapping | None = None
    #: The ranking depth users are shown; gated metrics whose k differs are warned about.
    served_k: int | None = None
    #: What a labeled query without a trace counts as: "skip" (left out) or "zero" (trec_eval -c).
    missing_trace: str | None = None
    #: The change compare's "no regression" cells must have had 80% power to detect (compare's
    #: ``GatePolicy.min_detectable``); a segment's table may set its own.
    min_detectable: float | None = None


def load_config(path: Path) -> Config:
    """Read and check a config file; raises ``ConfigError`` naming the file and the problem."""
    try:
        with path.open("rb") as handle:
            data = tomllib.load(handle)
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such config file") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not valid TOML (the file is not UTF-8 text)") from None
    except tomllib.TOMLDecodeError as problem:
        raise ConfigError(f"{path}: not valid TOML ({problem})") from None
    except OSError as problem:
        raise ConfigError(f"{path}: cannot read config file ({problem.strerror})") from None
    unknown = sorted(set(data) - _KNOWN_KEYS)
    if unknown:
        raise ConfigError(
            f"{path}: unknown key {unknown[0]!r} (known: {', '.join(sorted(_KNOWN_KEYS))})"
        )
    try:
        gates = tuple(gates_from_table(_table(data, "gates", path), f"{path} [gates]"))
    except RankgateError as problem:
        raise ConfigError(str(problem)) from None
    rules = _segment_rules(_table(data, "segments", path), path)
    policy_values = {
        key: data.get(key) for key in ("gate_on", "min_queries", "min_coverage", "min_detectable")
    }
    try:
        GatePolicy(
            **{key: value for key, value in policy_values.items() if value is not None},
            rules=rules,
        )
        if data.get("label_max_age") is not None:
            parse_age(str(data["label_max_age"]))
    except ConfigError as problem:
        raise ConfigError(f"{path}: {problem}") from None
    corpus = data.get("corpus")
    monitor, alerts = _monitor_tables(data, path)
    return Config(
        monitor=monitor,
        alerts=alerts,
        path=path,
        metrics=_metrics(data.get("metrics"), path),
        relevance_threshold=_threshold(data.get("relevance_threshold"), path),
        empty_relevant=_choice(data, "empty_relevant", ("skip", "zero"), path),
        on_invalid=_choice(data, "on_invalid", ("fail", "skip"), path),
        fields=_fields(_table(data, "fields", path), path),
        gates=gates,
        segment_by=_strings(data.get("segment_by"), "segment_by", path),
        min_queries=policy_values["min_queries"],
        min_coverage=policy_values["min_coverage"],
        gate_on=policy_values["gate_on"],
        min_detectable=policy_values["min_detectable"],
        strict_segments=_typed(data, "strict_segments", bool, path),
        # A corpus path in the file is relative to the file, like any path a config names.
        corpus=None if corpus is None else path.parent / _typed(data, "corpus", str, path),
        label_max_age=_typed(data, "label_max_age", str, path),
        seed=_typed(data, "seed", int, path),
        resamples=_typed(data, "resamples", int, path),
        rules=rules,
        doc_ids=_doc_ids(_table(data, "ids", path), path),
        served_k=_served_k(data, path),
        missing_trace=_choice(data, "missing_trace", ("skip", "zero"), path),
    )


def _served_k(data: dict[str, Any], path: Path) -> int | None:
    value: int | None = _typed(data, "served_k", int, path)
    if value is not None and not 1 <= value <= MAX_CUTOFF:
        raise ConfigError(
            f"{path}: served_k must be a whole number from 1 to {MAX_CUTOFF:,}, got {value!r}"
        )
    return value


def _doc_ids(table: dict[str, Any], path: Path) -> DocIdMapping | None:
    """``[ids]``: one rule naming each ID's document (a separator, a regex with one group, or a
    mapping file, relative to the config file like every path it names)."""
    unknown = sorted(set(table) - _ID_KEYS)
    if unknown:
        raise ConfigError(
            f"{path}: [ids]: unknown key {unknown[0]!r} (known: {', '.join(sorted(_ID_KEYS))})"
        )
    for key, value in table.items():
        if not isinstance(value, str) or not value:
            raise ConfigError(f"{path}: [ids] {key} must be a non-empty string, got {value!r}")
    rules = [key for key in _ID_RULES if key in table]
    if len(rules) > 1:
        raise ConfigError(f"{path}: [ids] sets both {rules[0]} and {rules[1]}; keep one")
    columns = [key for key in ("chunk_column", "doc_column") if key in table]
    if columns and rules != ["doc_id_map"]:
        raise ConfigError(f"{path}: [ids] {columns[0]} applies only with doc_id_map")
    if not rules:
        return None
    rule = rules[0]
    where = f"{path}: [ids] {rule}"
    if rule == "doc_id":
        separator = table[rule]
        # The command line's prefixed forms mean something else here; a separator spelled
        # "re:..." would silently match nothing, so say where each form goes.
        for prefix, key in (("re:", "doc_id_regex"), ("map:", "doc_id_map"), ("sep:", "doc_id")):
            if separator.startswith(prefix):
                raise ConfigError(
                    f'{where} = {separator!r}: doc_id is a plain separator such as "#"; '
                    f"write {key} = {separator[len(prefix) :]!r} instead"
                )
        return DocIdMapping.separator(separator, where=where)
    if rule == "doc_id_regex":
        return DocIdMapping.regex(table[rule], where=where)
    try:
        return DocIdMapping.from_file(
            path.parent / table[rule],
            table.get("chunk_column", DEFAULT_CHUNK_COLUMN),
            table.get("doc_column", DEFAULT_DOC_COLUMN),
        )
    except InputError as problem:
        # The file's own error already names it (and the line); say which setting pointed there.
        raise ConfigError(f"{problem} (from {where})") from None


def _monitor_tables(
    data: dict[str, Any], path: Path
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The [monitor] and [alerts] tables, checked now so a typo fails every command alike."""
    monitor = _table(data, "monitor", path) if "monitor" in data else None
    alerts = _table(data, "alerts", path) if "alerts" in data else None
    try:
        if monitor is not None:
            from rankgate.monitor.core import parse_monitor_table

            parse_monitor_table(monitor, f"{path} [monitor]")
        if alerts is not None:
            from rankgate.monitor.alerts import parse_rules

            parse_rules(alerts)
    except ConfigError as problem:
        text = str(problem)
        raise ConfigError(text if text.startswith(str(path)) else f"{path}: {text}") from None
    return monitor, alerts


def _segment_rules(table: dict[str, Any], path: Path) -> tuple[SegmentRule, ...]:
    """``[segments.<field>.<value>]`` tables: gates and settings for one segment."""
    rules = []
    for field_name, values in table.items():
        if not isinstance(values, dict):
            raise ConfigError(f"{path}: [segments.{field_name}] must be a table of segment values")
        for value, settings in values.items():
            where = f"[segments.{field_name}.{value}]"
            if not isinstance(settings, dict):
                raise ConfigError(f"{path}: {where} must be a table")
            unknown = sorted(set(settings) - _SEGMENT_KEYS)
            if unknown:
                raise ConfigError(
                    f"{path}: {where}: unknown key {unknown[0]!r} "
                    f"(known: {', '.join(sorted(_SEGMENT_KEYS))})"
                )
            try:
                gates = tuple(gates_from_table(_table(settings, "gates", path), f"{path} {where}"))
            except RankgateError as problem:
                raise ConfigError(str(problem)) from None
            rules.append(
                SegmentRule(
                    key=SegmentKey(field_name, str(value)),
                    gates=gates,
                    min_queries=settings.get("min_queries"),
                    min_coverage=settings.get("min_coverage"),
                    gate_on=settings.get("gate_on"),
                    min_detectable=settings.get("min_detectable"),
                )
            )
    return tuple(rules)


def _strings(value: Any, key: str, path: Path) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
        raise ConfigError(f"{path}: {key} must be a list of field names")
    return tuple(value)


def _typed(data: dict[str, Any], key: str, kind: type, path: Path) -> Any:
    value = data.get(key)
    if value is not None and (
        not isinstance(value, kind) or (kind is int and isinstance(value, bool))
    ):
        names = {int: "a whole number", str: "a string", bool: "true or false"}
        wanted = names.get(kind, f"a {kind.__name__}")
        raise ConfigError(f"{path}: {key} must be {wanted}, got {value!r}")
    return value


def _table(data: dict[str, Any], key: str, path: Path) -> dict[str, Any]:
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise ConfigError(f"{path}: [{key}] must be a table")
    return value


def _metrics(value: Any, path: Path) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ConfigError(f'{path}: metrics must be a list of strings such as ["ndcg@10"]')
    try:
        specs = parse_metric_list(value)
    except RankgateError as problem:
        raise ConfigError(f"{path}: metrics: {problem}") from None
    if not specs:
        raise ConfigError(f"{path}: metrics is empty; name at least one, or leave the key out")
    return tuple(value)


def _threshold(value: Any, path: Path) -> float | None:
    if value is None:
        return None
    try:
        return check_relevance_threshold(value)
    except ValueError:
        # Name the key as the file spells it.
        raise ConfigError(
            f"{path}: relevance_threshold must be a number > 0, got {value!r}"
        ) from None


def _choice(data: dict[str, Any], key: str, choices: tuple[str, ...], path: Path) -> str | None:
    value = data.get(key)
    if value is not None and value not in choices:
        raise ConfigError(f"{path}: {key} must be one of {', '.join(choices)}, got {value!r}")
    return value


def _fields(table: dict[str, Any], path: Path) -> dict[str, str]:
    for name, value in table.items():
        if not isinstance(value, str):
            raise ConfigError(f"{path}: [fields] {name} must be a string path, got {value!r}")
    try:
        FieldMap.from_assignments(table)
    except ConfigError as problem:
        raise ConfigError(f"{path}: [fields] {problem}") from None
    return dict(table)
