"""What one record may cost: the bounds every reader enforces, in one place.

Traces come from production logs and HTTP clients, so a single record can be hostile or simply broken
(a logger that wrote a whole corpus into one line, JSON nested a thousand deep). Each reader refuses a
record past these bounds with a located ``InputError`` (file:line or record, and the field) instead of
exhausting memory, the stack or the user's patience. Under ``--on-invalid skip`` such a record is
skipped and counted like any other invalid one. docs/limits.md lists them; the tests
in tests/io/test_io_limits.py drive each one through every reader.

The numbers leave real data far inside them: the largest production rankings we know of hold a few
thousand IDs, and IDs are keys or URLs. The compiled JSON Lines scanner (``_jsonl.c``) repeats these
numbers as ``#define``s; a test holds the two equal.
"""

from __future__ import annotations

__all__ = [
    "MAX_IDS_PER_RANKING",
    "MAX_ID_BYTES",
    "MAX_LABELS_PER_QUERY",
    "MAX_NESTING_DEPTH",
    "MAX_RECORD_BYTES",
    "MAX_TEXT_BYTES",
]

#: Bytes of one record: a JSON line, a JSON array element, a CSV row, one OTLP request, one HTTP
#: event. A longer one is read past in bounded memory (never held whole) and refused.
MAX_RECORD_BYTES = 256 * 1024 * 1024

#: Nesting of JSON containers inside one record (objects and arrays, the record itself being 1).
MAX_NESTING_DEPTH = 64

#: IDs in one ranking (``retrieved_ids``).
MAX_IDS_PER_RANKING = 1_000_000

#: Labels of one query: the items of ``relevant_ids`` plus the entries of ``relevance_scores``.
MAX_LABELS_PER_QUERY = 1_000_000

#: Bytes (UTF-8) of one query or document ID.
MAX_ID_BYTES = 8 * 1024

#: Bytes (UTF-8) of one free-text value: a top-level string field of a record other than its IDs
#: (query text, a segment attribute's value, any other attribute), and a top-level field name.
#: 1 MiB rather than tens of KiB: RAG trace records carry the retrieved passages or the answer as
#: attributes, and refusing those would refuse ordinary traces. Where text is shown or exported
#: (HTML, Prometheus labels) it is clipped much shorter there.
MAX_TEXT_BYTES = 1024 * 1024
