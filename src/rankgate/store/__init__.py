"""Trace stores: a SQLite file or a PostgreSQL database that production writes traces and labels
into (``TraceRecorder``) and that ``rankgate eval`` reads a window of (``StoreSource``).

The schema is documented in ``backends.py`` and in the README.
"""

from rankgate.store.backends import SCHEMA_VERSION, Window, connect, is_store_url
from rankgate.store.recorder import RecorderStats, TraceRecorder
from rankgate.store.source import StoreSource, sampled

__all__ = [
    "SCHEMA_VERSION",
    "RecorderStats",
    "StoreSource",
    "TraceRecorder",
    "Window",
    "connect",
    "is_store_url",
    "sampled",
]
