"""Trace stores: a SQLite file or a PostgreSQL database that production writes traces and labels
into (``TraceRecorder``) and that ``rankgate eval`` reads a window of (``StoreSource``).

The schema is documented in ``backends.py`` and in docs/stores.md. Every failure to open, read or
write a store is a ``StoreError`` (a ``UsageError``, so a ``RankgateError``) with a one-line message
naming the store as given, its password masked; ``StoreUnavailable`` marks those that may succeed
later (a lock held past the wait, an unreachable server).
"""

from rankgate.store.backends import (
    SCHEMA_VERSION,
    StoreError,
    StoreUnavailable,
    Window,
    connect,
    is_store_url,
)
from rankgate.store.recorder import RecorderStats, TraceRecorder
from rankgate.store.source import StoreSource, sampled

__all__ = [
    "SCHEMA_VERSION",
    "RecorderStats",
    "StoreError",
    "StoreSource",
    "StoreUnavailable",
    "TraceRecorder",
    "Window",
    "connect",
    "is_store_url",
    "sampled",
]
