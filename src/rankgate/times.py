"""Times as rankgate reads and writes them: aware UTC datetimes, ISO-8601 text, relative windows."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from rankgate.errors import ConfigError, UsageError
from rankgate.stale import parse_age

__all__ = ["format_time", "parse_moment", "parse_time"]


def format_time(moment: datetime) -> str:
    """A time as fixed-width UTC text with microseconds and ``Z``, so that text order is time
    order: ``2026-11-30T00:06:12.000000Z``."""
    aware = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    return aware.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(value: Any, where: str) -> datetime:
    """A datetime or ISO-8601 text (a date alone is its midnight) as an aware UTC datetime; a
    time without a zone is taken as UTC."""
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            raise UsageError(f"{where}: expected an ISO 8601 time, got {value!r}") from None
    else:
        raise UsageError(f"{where}: expected an ISO 8601 time, got {value!r}")
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def parse_moment(text: str, where: str, now: datetime | None = None) -> datetime:
    """``--since``/``--until`` values: an age before ``now`` (``24h``, ``7d``, ``90m``, ``2w``) or
    an ISO-8601 time or date."""
    stripped = text.strip()
    try:
        age = parse_age(stripped)
    except ConfigError:
        try:
            return parse_time(stripped, where)
        except UsageError:
            raise UsageError(
                f"{where}: {text!r} is neither an age (24h, 7d, 2w) nor an ISO 8601 time"
            ) from None
    return (now or datetime.now(UTC)) - age
