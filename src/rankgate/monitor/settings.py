"""The monitor's settings: the ``[monitor]`` table of rankgate.toml, checked key by key."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from rankgate.errors import ConfigError
from rankgate.io.validate import FieldMap
from rankgate.spec import MetricSpec, parse_metric_list
from rankgate.stale import parse_age

__all__ = ["DEFAULT_MAX_VALUES", "MonitorConfig", "duration_name", "parse_monitor_table"]

DEFAULT_METRICS = ("mrr", "precision@5")
# Distinct values kept per group field (variant, each segment field); the rest become "(other)".
DEFAULT_MAX_VALUES = 50


@dataclass(frozen=True)
class MonitorConfig:
    """What the monitor scores and how it windows it (the ``[monitor]`` table of rankgate.toml)."""

    metrics: tuple[MetricSpec, ...] = field(
        default_factory=lambda: tuple(parse_metric_list(DEFAULT_METRICS))
    )
    bucket: timedelta = timedelta(minutes=5)
    views: tuple[timedelta, ...] = (timedelta(hours=1), timedelta(hours=24))
    segment_by: tuple[str, ...] = ()
    sample: Mapping[str, float] = field(default_factory=lambda: {"*": 1.0})
    seed: int = 0
    label_wait: timedelta = timedelta(hours=1)
    relevance_threshold: float = 1.0
    fields: FieldMap = field(default_factory=FieldMap)
    max_values: int = DEFAULT_MAX_VALUES
    empty_relevant: str = "skip"
    # The views as the configuration spelled them ("24h" stays "24h", not "1d"), for the series'
    # window label and the status page; empty when the views were given as durations.
    view_names: tuple[str, ...] = ()

    @property
    def retention(self) -> timedelta:
        return max(self.views)

    @property
    def named_views(self) -> list[tuple[str, timedelta]]:
        """(name, length) of each view: its configured spelling, else a short form (``90m``)."""
        names = self.view_names if len(self.view_names) == len(self.views) else ()
        return [
            (names[index] if names else duration_name(view), view)
            for index, view in enumerate(self.views)
        ]


def duration_name(span: timedelta) -> str:
    """``1d``, ``90m``, ``45s``: the shortest whole unit that spells ``span``."""
    seconds = int(span.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def parse_monitor_table(table: Mapping[str, Any], where: str = "[monitor]") -> MonitorConfig:
    """A ``MonitorConfig`` from a TOML table; ``ConfigError`` names the key on any problem."""
    known = {
        "metrics",
        "bucket",
        "views",
        "segment_by",
        "sample",
        "seed",
        "label_wait",
        "max_values",
    }
    unknown = sorted(set(table) - known)
    if unknown:
        raise ConfigError(
            f"{where}: unknown key {unknown[0]!r} (known: {', '.join(sorted(known))})"
        )
    values: dict[str, Any] = {}
    if "metrics" in table:
        metrics = table["metrics"]
        if not isinstance(metrics, list) or not all(isinstance(m, str) for m in metrics):
            raise ConfigError(f"{where}: metrics must be a list of metric strings")
        values["metrics"] = tuple(parse_metric_list(metrics))
    for key in ("bucket", "label_wait"):
        if key in table:
            values[key] = _duration(table[key], f"{where} {key}")
    if "views" in table:
        views = table["views"]
        if not isinstance(views, list) or not views:
            raise ConfigError(f'{where}: views must be a list of durations, e.g. ["1h", "24h"]')
        values["views"] = tuple(_duration(v, f"{where} views") for v in views)
        values["view_names"] = tuple(str(v).strip() for v in views)
    if "segment_by" in table:
        fields = table["segment_by"]
        if not isinstance(fields, list) or not all(isinstance(f, str) and f for f in fields):
            raise ConfigError(f"{where}: segment_by must be a list of field names")
        values["segment_by"] = tuple(fields)
    if "sample" in table:
        values["sample"] = _sample(table["sample"], where)
    if "max_values" in table:
        limit = table["max_values"]
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ConfigError(f"{where}: max_values must be a whole number >= 1")
        values["max_values"] = limit
    if "seed" in table:
        if isinstance(table["seed"], bool) or not isinstance(table["seed"], int):
            raise ConfigError(f"{where}: seed must be an integer")
        values["seed"] = table["seed"]
    config = MonitorConfig(**values)
    if any(view < config.bucket for view in config.views):
        raise ConfigError(f"{where}: every view must be at least one bucket long")
    return config


def _duration(value: Any, where: str) -> timedelta:
    if not isinstance(value, str):
        raise ConfigError(f'{where}: expected a duration such as "5m", got {value!r}')
    try:
        span = parse_age(value)
    except ConfigError:
        raise ConfigError(f'{where}: expected a duration such as "5m", got {value!r}') from None
    if span <= timedelta(0):
        raise ConfigError(f"{where}: must be longer than zero")
    return span


def _sample(value: Any, where: str) -> dict[str, float]:
    """A sample rate for all traffic (a number), or per segment value with "*" for the rest."""
    rates = {"*": value} if isinstance(value, (int, float)) else value
    if not isinstance(rates, dict):
        raise ConfigError(f"{where}: sample is a rate (0.1) or a table of rates by segment value")
    checked = {}
    for key, rate in rates.items():
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 <= rate <= 1:
            raise ConfigError(f"{where}: sample {key!r} must be a rate between 0 and 1")
        checked[str(key)] = float(rate)
    checked.setdefault("*", 1.0)
    return checked
