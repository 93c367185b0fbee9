"""Runs and qrels as the IR toolkits hold them in memory, converted at the edge.

Users of pytrec_eval, ranx and ir_measures already hold their runs and judgments as Python objects;
``evaluate`` and ``compare`` take those objects where they take a trace source (the run) and a
label source (``labels=``, the qrels):

============================  ==============================================================
run                           qrels
============================  ==============================================================
``{qid: {doc: score}}``       ``{qid: {doc: grade}}`` (pytrec_eval's dicts, ranx's ``from_dict``)
``ranx.Run``                  ``ranx.Qrels`` (recognised by type name; ranx is never imported)
``ScoredDoc`` named tuples    ``Qrel`` named tuples (ir_measures; ir_datasets' ``scoreddocs_iter``
                              and ``qrels_iter`` give the same fields): a list, or any iterable
                              or generator, recognised by its first item's fields
============================  ==============================================================

A run becomes the table every table source gives (``query_id``, ``retrieved_ids``), one row per
query in order of first appearance, each ranking in trec_eval's order (``io.trec.trec_ranking``:
score descending, ties by document ID descending). Qrels become query -> document -> grade, read
by ``labels.label_table`` and ``labels.read_judgments``. From there one pipeline scores them, as it
scores a trace file.

A mapping cannot say whether it holds scores or grades, so the argument decides: in the trace
position it is a run, as ``labels=`` it is qrels. The objects that do say (ranx's classes, the named
tuples) are refused in the wrong position. Grades follow the toolkits: whole numbers (pytrec_eval
refuses others, ranx and ir_measures store integers), so a run passed as labels by mistake is
caught by its first fractional score; a negative grade is judged non-relevant (grade 0), as in a
qrels file.
"""

from __future__ import annotations

import itertools
import math
import numbers
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from rankgate import fast
from rankgate.errors import InputError, UsageError
from rankgate.io import limits
from rankgate.io.bounded import size_text, utf8_length
from rankgate.io.tables import ArrowSource
from rankgate.io.trec import trec_ranking
from rankgate.io.validate import MAX_GRADE

__all__ = ["qrels_of", "run_source"]

RUN_NAME = "run"
QRELS_NAME = "qrels"
# Stands for "nothing here": an empty iterable, or a query whose mapping is empty (None could be a
# value).
_NOTHING: Any = object()
# (item number or None for a mapping, raw query ID, raw document ID, raw score or grade)
Entry = tuple[int | None, Any, Any, Any]


def run_source(data: Any) -> tuple[Any, ArrowSource | None]:
    """``(data, source)``: a trace source for a run (``source`` None when ``data`` is no run).

    Peeking at an iterator consumes its first item, so ``data`` is handed back with that item
    chained in front: read on from the returned ``data``, never the argument.

    Raises:
        UsageError: ``data`` holds judgments (a ranx ``Qrels``, ``Qrel`` tuples), or is an empty
            mapping or ranx ``Run`` (nothing was retrieved for any query).
        InputError: an entry is malformed (an ID that is not text, a score that is not a finite
            number), named by query and document.
    """
    kind = _ranx_kind(data)
    if kind == "Qrels":
        raise _misplaced("a ranx Qrels", "a run", "labels=")
    if kind == "Run":
        name = data.name if isinstance(data.name, str) and data.name else RUN_NAME
        return data, _run_table(_mapping_entries(data.to_dict(), "a ranx Run", name), name)
    if isinstance(data, Mapping):
        if data and not isinstance(next(iter(data.values())), Mapping):
            return data, None  # not shaped as a run: the caller's own message says what it takes
        return data, _run_table(_mapping_entries(data, "the run", RUN_NAME), RUN_NAME)
    data, first = _peeked(data)
    shape = _tuple_shape(first)
    if shape == QRELS_NAME:
        raise _misplaced(f"{type(first).__name__} tuples (judgments)", "a run", "labels=")
    if shape != RUN_NAME:
        return data, None
    return data, _run_table(_tuple_entries(data, RUN_NAME), RUN_NAME)


def qrels_of(data: Any) -> tuple[Any, dict[str, dict[str, float]] | None]:
    """``(data, grades)``: query ID -> document ID -> grade for qrels (None when ``data`` is
    none). As for ``run_source``, read on from the returned ``data``.

    Raises:
        UsageError: ``data`` holds a run (a ranx ``Run``, ``ScoredDoc`` tuples).
        InputError: a malformed judgment, named by query and document.
    """
    kind = _ranx_kind(data)
    if kind == "Run":
        raise _misplaced("a ranx Run", "qrels (labels=)", "the run argument")
    if kind == "Qrels":
        return data, _grades(_mapping_entries(data.to_dict(), "a ranx Qrels", QRELS_NAME))
    if isinstance(data, Mapping):
        if not data or not isinstance(next(iter(data.values())), Mapping):
            return data, None  # a dict of QueryLabels (empty too), or what label_table words
        return data, _grades(_mapping_entries(data, "the qrels", QRELS_NAME))
    data, first = _peeked(data)
    shape = _tuple_shape(first)
    if shape == RUN_NAME:
        raise _misplaced(
            f"{type(first).__name__} tuples (a run)", "qrels (labels=)", "the run argument"
        )
    if shape != QRELS_NAME:
        return data, None
    return data, _grades(_tuple_entries(data, QRELS_NAME))


# --- reading entries ------------------------------------------------------------------------------


def _mapping_entries(mapping: Mapping[Any, Any], what: str, name: str) -> Iterator[Entry]:
    """The entries of ``{query: {document: value}}``."""
    if not mapping and name != QRELS_NAME:
        # Empty qrels are no labels (every query unlabeled), as an empty label dict always was;
        # an empty run is a retrieval that went wrong upstream.
        raise UsageError(f"{what} has no query: nothing was retrieved, so nothing can be scored")
    value_name = "grade" if name == QRELS_NAME else "score"
    for raw_query, values in mapping.items():
        if not isinstance(values, Mapping):
            raise InputError(
                _where(name, None, raw_query),
                None,
                f"expected a mapping of document ID to {value_name}, got {_kind(values)}",
            )
        if not values and name != QRELS_NAME:
            # A run's query that retrieved nothing scores as an empty ranking (pytrec_eval scores
            # it 0 too); a query without judgments is, as in a qrels file, not in the qrels.
            yield None, raw_query, _NOTHING, _NOTHING
        for raw_document, value in values.items():
            yield None, raw_query, raw_document, value


def _tuple_entries(items: Iterable[Any], shape: str) -> Iterator[Entry]:
    """The entries of named tuples; every item must be shaped as the first one is (``shape``)."""
    value_field = "score" if shape == RUN_NAME else "relevance"
    for number, item in enumerate(items, start=1):
        if _tuple_shape(item) != shape:
            raise InputError(
                f"{shape} item {number:,}",
                None,
                f"expected a named tuple (query_id, doc_id, {value_field}) like the first "
                f"item, got {_kind(item)}",
            )
        yield number, item.query_id, item.doc_id, getattr(item, value_field)


def _grouped(
    entries: Iterable[Entry], name: str, value_of: Callable[[Any], float]
) -> dict[str, list[tuple[str, float]]]:
    """Per query (first appearance first), its (document ID, value) pairs in entry order, each ID
    and value checked. A location is worded only for an entry that is wrong."""
    grouped: dict[str, list[tuple[str, float]]] = {}
    query_ids: dict[Any, str] = {}
    # The IDs that came as integers: 1 and "1" are one query once written as text, so a
    # mapping holding both would merge two queries without a word.
    from_integers: set[str] = set()
    for number, raw_query, raw_document, raw_value in entries:
        # Entries of one query come together (a mapping) or often do (a stream): its text is
        # checked once.
        query_id = query_ids.get(raw_query) if isinstance(raw_query, str) else None
        try:
            if query_id is None:
                text = _identifier(raw_query, "query_id")
                if isinstance(raw_query, str):
                    mixed = text in from_integers
                else:
                    mixed = text not in from_integers and text in grouped
                    from_integers.add(text)
                if mixed:
                    raise InputError(
                        "",
                        "query_id",
                        f"query {text} is given both as an integer and as text; the two "
                        "would merge into one query: write every ID one way",
                    )
                query_id = text
                if isinstance(raw_query, str):
                    query_ids[raw_query] = query_id
            pairs = grouped.setdefault(query_id, [])
            if raw_document is not _NOTHING:
                pairs.append((_identifier(raw_document, "doc_id"), value_of(raw_value)))
        except InputError as problem:
            document = raw_document if query_id is not None else _NOTHING
            raise InputError(
                _where(name, number, raw_query, document), problem.field, problem.problem
            ) from None
    return grouped


def _run_table(entries: Iterable[Entry], name: str) -> ArrowSource:
    """The run as a trace table: one row per query, its documents in trec_eval's order."""
    import pyarrow as pa

    grouped = _grouped(entries, name, _score)
    offsets = [0]
    documents: list[str] = []
    for pairs in grouped.values():
        # Duplicates (possible in a tuple stream) stay: the pipeline keeps the first rank and
        # counts the rest, as for a TREC run file.
        documents.extend(trec_ranking([(score, document) for document, score in pairs]))
        offsets.append(len(documents))
    table = pa.table(
        {
            "query_id": fast.text_array(list(grouped)),
            "retrieved_ids": pa.LargeListArray.from_arrays(
                pa.array(offsets, pa.int64()), fast.text_array(documents)
            ),
        }
    )
    return ArrowSource.table(name, table)


def _grades(entries: Iterable[Entry]) -> dict[str, dict[str, float]]:
    grades: dict[str, dict[str, float]] = {}
    for query_id, pairs in _grouped(entries, QRELS_NAME, _grade).items():
        # A later judgment of the same pair replaces the earlier one, as in a qrels file.
        held = grades[query_id] = dict(pairs)
        if len(held) > limits.MAX_LABELS_PER_QUERY:
            raise InputError(
                _where(QRELS_NAME, None, query_id),
                "doc_id",
                f"more than {limits.MAX_LABELS_PER_QUERY:,} judgments (the limit on one query)",
            )
    return grades


def _score(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InputError("", "score", f"expected a number, got {_kind(value)}")
    try:
        score = float(value)
    except (OverflowError, ValueError):  # an int past float's range
        raise InputError("", "score", "expected a finite number, got one too large") from None
    if not math.isfinite(score):
        raise InputError("", "score", f"expected a finite number, got {score!r}")
    return score


def _grade(value: Any) -> float:
    """A judgment's grade: a whole number (pytrec_eval refuses others; ranx and ir_measures store
    integers), a negative one judged non-relevant (0) as in a qrels file."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InputError("", "relevance", f"expected a whole number, got {_kind(value)}")
    try:
        grade = float(value)
    except (OverflowError, ValueError):  # an int past float's range
        raise InputError("", "relevance", "expected a whole number, got one too large") from None
    if not math.isfinite(grade) or not grade.is_integer():
        raise InputError(
            "",
            "relevance",
            f"expected a whole number, got {grade!r} (a run's score? pass the run first and "
            "the qrels as labels=)",
        )
    if grade > MAX_GRADE:
        raise InputError("", "relevance", f"grade must be at most {MAX_GRADE:g}, got {grade:g}")
    return max(grade, 0.0)


# --- shapes and words -----------------------------------------------------------------------------


def _ranx_kind(data: Any) -> str | None:
    """``"Run"`` or ``"Qrels"`` for a ranx object; by its type's module, so that ranx is never
    imported (loading it compiles numba kernels) unless the caller did."""
    kind = type(data)
    if kind.__module__.split(".", 1)[0] == "ranx" and kind.__name__ in ("Run", "Qrels"):
        return kind.__name__
    return None


def _tuple_shape(item: Any) -> str | None:
    """``"run"`` or ``"qrels"`` for a named tuple with a run entry's or a judgment's fields."""
    if not isinstance(item, tuple):
        return None
    fields = getattr(type(item), "_fields", None)
    if not isinstance(fields, tuple) or not {"query_id", "doc_id"} <= set(fields):
        return None
    if "score" in fields:
        return RUN_NAME
    if "relevance" in fields:
        return QRELS_NAME
    return None


def _peeked(data: Any) -> tuple[Any, Any]:
    """``(data, first item)`` of an iterable (``_NOTHING`` when empty or not one); an iterator
    comes back with its first item chained in front of the rest."""
    if isinstance(data, (str, bytes, bytearray, Mapping)) or not isinstance(data, Iterable):
        return data, _NOTHING
    if isinstance(data, Sequence):
        return data, data[0] if len(data) else _NOTHING
    iterator = iter(data)
    first = next(iterator, _NOTHING)
    if iterator is data and first is not _NOTHING:
        data = itertools.chain([first], iterator)
    return data, first


def _identifier(value: Any, field: str) -> str:
    """An ID as text: a non-empty string, or an integer in decimal (as the validator takes it).
    The error carries no location: the caller, who knows the entry, words it."""
    if isinstance(value, str):
        text = value
    elif isinstance(value, numbers.Integral) and not isinstance(value, bool):
        try:
            text = str(int(value))
        except ValueError:  # past Python's digit limit for int -> str
            raise InputError("", field, "expected an ID, got an integer too long") from None
    else:
        raise InputError(
            "", field, f"expected a non-empty string or an integer, got {_kind(value)}"
        )
    if not text:
        raise InputError("", field, "expected a non-empty string, got an empty string")
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise InputError(
                "", field, "the ID holds a lone surrogate, which is not text (not valid UTF-8)"
            ) from None
    if len(text) > limits.MAX_ID_BYTES // 4 and utf8_length(text) > limits.MAX_ID_BYTES:
        raise InputError(
            "",
            field,
            f"ID is {utf8_length(text):,} bytes, more than the limit of "
            f"{size_text(limits.MAX_ID_BYTES)}",
        )
    return text


def _where(name: str, number: int | None, raw_query: Any, raw_document: Any = _NOTHING) -> str:
    """``run query 'q1' document 'd3'``, or ``run item 7 (query 'q1', document 'd3')`` for the
    item of a tuple stream."""
    parts = [f"query {_clip(raw_query)}"]
    if raw_document is not _NOTHING:
        parts.append(f"document {_clip(raw_document)}")
    if number is None:
        return f"{name} {' '.join(parts)}"
    return f"{name} item {number:,} ({', '.join(parts)})"


def _misplaced(what: str, expected: str, instead: str) -> UsageError:
    return UsageError(f"got {what} where {expected} was expected; pass it as {instead}")


def _kind(value: Any) -> str:
    """A received value for a message: a small one as written, others by type."""
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        return _clip(value)
    return "None" if value is None else f"a {type(value).__name__}"


def _clip(value: Any) -> str:
    if isinstance(value, int) and value.bit_length() > 128:
        # Past Python's digit limit, repr itself raises: say what it is instead.
        return f"an integer of {value.bit_length():,} bits"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
