"""What the monitor keeps of untrusted text, and how much of it: the checks every event and label
passes before anything of it is stored, exported or saved.

Events come from clients over HTTP, from a followed file and from a trace store, so every string
in them is hostile until checked. Two things can go wrong with a string the monitor keeps:

* it is not text: JSON allows ``"\\ud800"``, a lone surrogate that no UTF-8 encoder accepts. Kept,
  it would make every later ``/metrics`` scrape and state save fail. It is refused at intake with
  the record and field named.
* it is too long: a 2 MB segment value becomes a Prometheus label on dozens of series, so every
  scrape grows by megabytes. Group values (variant and segment values) are short labels, capped
  at ``MAX_GROUP_VALUE_BYTES``; IDs at the readers' ``MAX_ID_BYTES``; the IDs of one event or
  one label record at ``MAX_EVENT_ID_BYTES`` together.

The monitor's memory (and so its state file) is bounded as well: traces waiting for labels and
remembered labels each have a budget in bytes (``MAX_WAITING_BYTES``, ``MAX_LABEL_BYTES``),
estimated by ``ids_cost`` as what the IDs take in memory.
"""

from __future__ import annotations

from collections.abc import Sequence

from rankgate.errors import InputError, Location
from rankgate.io.limits import MAX_ID_BYTES

__all__ = [
    "MAX_EVENT_ID_BYTES",
    "MAX_GROUP_VALUE_BYTES",
    "MAX_IDS_PER_EVENT",
    "MAX_LABEL_BYTES",
    "MAX_WAITING_BYTES",
    "check_ids",
    "check_text",
    "clean_text",
    "ids_cost",
]

#: Bytes (UTF-8) of one variant or segment value: it becomes a Prometheus label value and a group
#: name on the status page, where longer text is noise (and, repeated per series, a cost).
MAX_GROUP_VALUE_BYTES = 256

#: Retrieved IDs in one event, and graded documents in one label record.
MAX_IDS_PER_EVENT = 10_000

#: Bytes (UTF-8) of all the IDs of one event, or of one label record, together.
MAX_EVENT_ID_BYTES = 1024 * 1024

#: Estimated bytes held by traces waiting for their labels; past it, an unlabeled trace is
#: counted ``unlabeled`` at once instead of waiting.
MAX_WAITING_BYTES = 32 * 1024 * 1024

#: Estimated bytes held by remembered labels; past it, the least recently labeled query is
#: forgotten first.
MAX_LABEL_BYTES = 32 * 1024 * 1024

# What one Python string costs beyond its characters (object header, hash, list slot).
_PER_STRING = 64


def ids_cost(ids: Sequence[str]) -> int:
    """Estimated memory of a list of IDs: characters plus a fixed cost per string."""
    return sum(map(len, ids)) + _PER_STRING * len(ids)


def check_text(value: str, location: Location | str, field: str, limit: int, what: str) -> None:
    """Refuse ``value`` if it is not encodable text or longer than ``limit`` bytes of UTF-8."""
    if value.isascii():
        size = len(value)
    else:
        try:
            size = len(value.encode("utf-8"))
        except UnicodeEncodeError as problem:
            raise InputError(
                location,
                field,
                f"holds a lone surrogate ({value[problem.start]!a} at character "
                f"{problem.start + 1}), which is not text",
            ) from None
    if size > limit:
        raise InputError(
            location, field, f"{size:,} bytes; the monitor takes {what} of at most {limit:,} bytes"
        )


def check_ids(ids: Sequence[str], location: Location | str, field: str) -> None:
    """Refuse a list of IDs that is too long, holds an over-long or non-text ID, or whose IDs
    together pass ``MAX_EVENT_ID_BYTES``. The usual all-ASCII list is checked in C."""
    if len(ids) > MAX_IDS_PER_EVENT:
        raise InputError(
            location,
            field,
            f"{len(ids):,} IDs; the monitor takes at most {MAX_IDS_PER_EVENT:,} per record",
        )
    joined = "".join(ids)
    longest = max(map(len, ids), default=0)
    if joined.isascii():
        total = len(joined)
        if longest > MAX_ID_BYTES:
            _check_each(ids, location, field)
    else:
        try:
            total = len(joined.encode("utf-8"))
        except UnicodeEncodeError:
            total = 0
            _check_each(ids, location, field)
        if longest * 4 > MAX_ID_BYTES:
            _check_each(ids, location, field)
    if total > MAX_EVENT_ID_BYTES:
        raise InputError(
            location,
            field,
            f"{total:,} bytes of IDs; the monitor takes at most {MAX_EVENT_ID_BYTES:,} per record",
        )


def _check_each(ids: Sequence[str], location: Location | str, field: str) -> None:
    for index, item in enumerate(ids):
        check_text(item, location, f"{field}[{index}]", MAX_ID_BYTES, "IDs")


def clean_text(value: str, limit: int) -> str:
    """``value`` made safe to keep: lone surrogates replaced by U+FFFD and the text clipped to
    ``limit`` bytes (marked with an ellipsis). For state written before intake checked text."""
    text = value
    if not value.isascii():
        text = "".join("\ufffd" if 0xD800 <= ord(char) <= 0xDFFF else char for char in value)
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    return data[: max(limit - 3, 0)].decode("utf-8", "ignore") + "\u2026"
