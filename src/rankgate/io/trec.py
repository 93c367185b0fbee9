"""TREC run and qrels files, read the way trec_eval reads them.

A run line is ``qid Q0 docno rank score [tag]``; trec_eval ignores the rank column and orders each
query's documents by score, highest first, breaking ties by docno in *descending* order, so the same
is done here to give the same numbers (``trec_ranking``, which the in-memory runs of
``io.ir_objects`` use too). A qrels line is ``qid iteration docno relevance``. As in
trec_eval, which reads relevance with ``atol``, a fractional relevance is truncated (``1.5`` is 1);
a negative one (some TREC tracks use -1 or -2 for "judged, not relevant") becomes grade 0.

One record is produced per query of the run, in order of first appearance; its location is the run
line where that query first appears. A query without qrels is unlabeled. As in trec_eval, queries
that appear only in the qrels are not evaluated by default; ``expected_queries`` names them as the
query set, so that ``missing_trace="zero"`` scores them 0 as trec_eval's ``-c`` does.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from rankgate.errors import InputError, Location
from rankgate.io import limits
from rankgate.io.bounded import (
    bounded_lines,
    cannot_read,
    open_binary,
    size_text,
    too_long_problem,
    utf8_length,
)
from rankgate.io.source import GZIP_ERRORS, decompressed
from rankgate.io.validate import RawRecord

__all__ = [
    "QRELS_COLUMNS",
    "TrecSource",
    "looks_like_qrels",
    "qrels_table",
    "read_qrels",
    "trec_ranking",
]

QRELS_COLUMNS = 4
# How much of a file ``looks_like_qrels`` reads to decide.
_PROBE_BYTES = 64 * 1024


class TrecSource:
    """Records built from a TREC run file joined with a qrels file."""

    def __init__(self, run: str | Path, qrels: str | Path) -> None:
        self.name = str(run)
        self.total: int | None = None
        self._run = Path(run)
        self._qrels = Path(qrels)
        self._done = 0
        self._qrels_read: dict[str, dict[str, float]] | None = None

    def done(self) -> int:
        return self._done

    def expected_queries(self) -> tuple[str, Any]:
        """The query set the run is expected to cover: every query of the qrels, as a label table
        (``query_id``, ``relevance_scores``), named for reports."""
        import pyarrow as pa

        labels = self._labels()
        offsets = [0]
        documents: list[str] = []
        grades: list[float] = []
        for held in labels.values():
            documents.extend(held)
            grades.extend(held.values())
            offsets.append(len(documents))
        scores = pa.MapArray.from_arrays(
            pa.array(offsets, pa.int32()),
            pa.array(documents, pa.string()),
            pa.array(grades, pa.float64()),
        )
        table = pa.table(
            {"query_id": pa.array(list(labels), pa.string()), "relevance_scores": scores}
        )
        return f"qrels {self._qrels}", table

    def _labels(self) -> dict[str, dict[str, float]]:
        if self._qrels_read is None:
            self._qrels_read = read_qrels(self._qrels)
        return self._qrels_read

    def __iter__(self) -> Iterator[RawRecord]:
        labels = self._labels()
        rankings: dict[str, list[tuple[float, str]]] = {}
        first_line: dict[str, int] = {}
        for number, parts in _lines(self._run):
            if len(parts) < 5:
                raise InputError(
                    Location(str(self._run), line=number),
                    None,
                    "run line needs: qid Q0 docno rank score [tag]",
                )
            qid, docno, raw_score = parts[0], parts[2], parts[4]
            try:
                score = float(raw_score)
            except ValueError:
                score = math.nan
            if not math.isfinite(score):
                raise InputError(
                    Location(str(self._run), line=number),
                    "score",
                    f"expected a finite number, got {raw_score!r}",
                )
            rankings.setdefault(qid, []).append((score, docno))
            first_line.setdefault(qid, number)
        self.total = len(rankings)
        for ordinal, (qid, scored) in enumerate(rankings.items(), start=1):
            record: dict[str, object] = {"query_id": qid, "retrieved_ids": trec_ranking(scored)}
            if qid in labels:
                record["relevance_scores"] = labels[qid]
            self._done = ordinal
            yield RawRecord(Location(str(self._run), line=first_line[qid]), record, ordinal)


def trec_ranking(scored: list[tuple[float, str]]) -> list[str]:
    """The document IDs of one query's (score, docno) pairs in trec_eval's order: score
    descending, ties broken by docno descending.

    trec_eval sorts on scores held as single-precision floats (``float sim`` in
    ``form_ordered_rel.c``, compared by ``comp_sim_docno``), so two scores that round to the same
    float32 tie there even when they differ as doubles; they are compared the same way here.
    Python orders strings by code point, which is the byte order of their UTF-8 (``strcmp``).
    """
    if not scored:
        return []
    with np.errstate(over="ignore"):  # beyond float32's range a score is infinite there too
        sims = np.array([score for score, _ in scored], np.float64).astype(np.float32).tolist()
    ranked = sorted(zip(sims, (docno for _, docno in scored), strict=True), reverse=True)
    return [docno for _, docno in ranked]


def read_qrels(path: Path) -> dict[str, dict[str, float]]:
    """Query ID -> document ID -> grade, from a TREC qrels file (plain or gzip)."""
    labels: dict[str, dict[str, float]] = {}
    for number, parts in _lines(path):
        where = Location(str(path), line=number)
        if len(parts) != QRELS_COLUMNS:
            raise InputError(where, None, "qrels line needs: qid iteration docno relevance")
        qid, _, docno, raw_grade = parts
        try:
            grade = float(raw_grade)
        except ValueError:
            grade = math.nan
        if not math.isfinite(grade):
            raise InputError(where, "relevance", f"expected a number, got {_clip(raw_grade)}")
        for field_name, identifier in (("qid", qid), ("docno", docno)):
            if utf8_length(identifier) > limits.MAX_ID_BYTES:
                raise InputError(
                    where,
                    field_name,
                    f"ID is {utf8_length(identifier):,} bytes, more than the limit of "
                    f"{size_text(limits.MAX_ID_BYTES)}",
                )
        grades = labels.setdefault(qid, {})
        if docno not in grades and len(grades) >= limits.MAX_LABELS_PER_QUERY:
            raise InputError(
                where,
                "docno",
                f"query {_clip(qid)} has more than {limits.MAX_LABELS_PER_QUERY:,} labels "
                "(the limit on one query)",
            )
        grades[docno] = float(max(math.trunc(grade), 0))
    return labels


def looks_like_qrels(path: Path) -> bool:
    """Whether a file is laid out as TREC qrels, whatever its name: its first non-blank line has
    four white-space separated columns and the last is a number (``qid iter docno rel``).

    No trace format starts that way: JSON starts with ``{`` or ``[``, a CSV or TSV file with a
    header line, whose last column is a name, and Parquet with ``PAR1``.
    """
    if not path.is_file():
        return False
    try:
        with open_binary(path) as raw:
            head = decompressed(raw).read(_PROBE_BYTES)
    except (InputError, OSError, *GZIP_ERRORS):
        return False  # the reader chosen reports it
    for line in head.splitlines():
        parts = line.split()
        if not parts:
            continue
        if len(parts) != QRELS_COLUMNS or parts[0][:1] in (b"{", b"["):
            return False
        try:
            return math.isfinite(float(parts[3]))
        except ValueError:
            return False
    return False


def _clip(text: str) -> str:
    return repr(text) if len(text) <= 40 else repr(text[:37] + "...")


def _lines(path: Path) -> Iterator[tuple[int, list[str]]]:
    """The white-space separated columns of each non-blank line, in bounded memory."""
    try:
        with open_binary(path) as raw:
            stream = decompressed(raw)
            for number, (line, too_long) in enumerate(bounded_lines(stream), start=1):
                if too_long:
                    raise InputError(Location(str(path), line=number), None, too_long_problem())
                try:
                    text = line.decode("utf-8-sig" if number == 1 else "utf-8")
                except UnicodeDecodeError as problem:
                    raise InputError(
                        Location(str(path), line=number),
                        None,
                        f"line is not valid UTF-8 ({problem.reason})",
                    ) from None
                parts = text.split()
                if parts:
                    yield number, parts
    except GZIP_ERRORS as problem:
        raise InputError(str(path), None, f"corrupt or truncated gzip data ({problem})") from None
    except OSError as problem:
        raise cannot_read(path, problem) from None


# --------------------------------------------------------------------------------------------
# Qrels as a label table, read in bulk

#: What ``str.split()`` splits on besides space, tab, CR and LF (``str.isspace``), as UTF-8: a file
#: holding any of them is read line by line.
_OTHER_SPACES = tuple(
    char.encode() for char in "\x0b\x0c\x1c\x1d\x1e\x1f\x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000"
) + tuple(chr(code).encode() for code in range(0x2000, 0x200B))
#: The most bytes of qrels (after gzip) read whole: about 45M judgments, a few GB of memory while
#: they are grouped. A larger file is read line by line, in bounded pieces.
BULK_QRELS_BYTES = 1 << 30
# Grades Python's float() reads as Arrow's cast does: plain decimal numbers. Anything else (an
# underscore, "inf", a digit of another script) is the line reader's.
_PLAIN_NUMBER = r"^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$"


def qrels_table(path: Path) -> Any | None:
    """The labels of a TREC qrels file as a label table (``query_id``, ``relevance_scores``):
    one row per query in order of first appearance, each query's documents in order of first
    appearance with the last grade given, as ``read_qrels`` holds them. None when the compiled
    kernels are missing, when the path is not a plain file, or when the file holds anything
    ``read_qrels`` would refuse or might read otherwise (bad UTF-8, a line of other than four
    columns, white space other than space, tab and CR, a grade that is not a plain number, an ID
    or a query beyond the limits): ``read_qrels`` then reads it line by line, and explains it.

    ``read_qrels`` builds a dict per query: 75 s for ten million judgments, where this takes a
    few seconds and a fraction of the memory.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    from rankgate import fast

    if not fast.available() or not path.is_file():
        return None
    try:
        with open_binary(path) as raw:
            data = decompressed(raw).read(BULK_QRELS_BYTES + 1)
    except (InputError, OSError, *GZIP_ERRORS):
        return None  # read_qrels reports it
    if len(data) > BULK_QRELS_BYTES:
        return None  # a file (or a gzip bomb) too large to hold whole: line by line
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    if not data or data.isspace():
        return None
    if not data.endswith(b"\n"):
        data += b"\n"
    # Each a search at memchr's speed; past the first byte of the wider ones, only when that is
    # there at all (an ASCII file has none).
    leads = {space[:1] for space in _OTHER_SPACES}
    present = {lead for lead in leads if lead in data}
    if any(space in data for space in _OTHER_SPACES if space[:1] in present):
        return None
    whole = pa.LargeStringArray.from_buffers(
        1, pa.py_buffer(np.array([0, len(data)], np.int64)), pa.py_buffer(data)
    )
    try:
        whole.validate(full=True)  # UTF-8
    except pa.ArrowInvalid:
        return None
    found = fast.qrels_columns(data, limits.MAX_RECORD_BYTES)
    if found is None:
        return None
    query_ids, documents, written = found
    longest = max(pc.max(pc.binary_length(column)).as_py() for column in (query_ids, documents))
    if longest > limits.MAX_ID_BYTES:
        return None
    if not bool(pc.all(pc.match_substring_regex(written, _PLAIN_NUMBER)).as_py()):
        return None
    try:
        grades = np.asarray(pc.cast(written, pa.float64()))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    if not bool(np.isfinite(grades).all()):
        return None
    # trec_eval's atol: the whole part; a negative grade ("judged, not relevant") is 0 (+ 0.0:
    # never -0.0).
    grades = np.maximum(np.trunc(grades), 0.0) + 0.0
    return _grouped_judgments(query_ids, documents, grades)


def _grouped_judgments(query_ids: Any, documents: Any, grades: Any) -> Any | None:
    """Judgment rows grouped into a label table the way dicts keep them: queries and each query's
    documents in order of first appearance, a repeated (query, document) taking its last grade.
    IDs are told apart by their 64-bit hashes, each match then checked on the IDs themselves;
    None if two different IDs share a hash (never seen: the caller reads the file again)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from rankgate import fast

    def all_equal(left: Any, right: Any) -> bool:
        return bool(pc.all(pc.equal(left, right)).as_py()) if len(left) else True

    query_hashes = fast.compiled_string_hashes(query_ids)
    document_hashes = fast.compiled_string_hashes(documents)
    assert query_hashes is not None and document_hashes is not None
    query_code, first_rows = _codes_by_appearance(query_hashes)
    if not all_equal(query_ids, query_ids.take(pa.array(first_rows[query_code]))):
        return None
    count = len(grades)
    # (query, document) pairs, told apart by a hash of both.
    with np.errstate(over="ignore"):
        pair_hash = document_hashes ^ (query_code.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15))
    ranked = np.sort(pair_hash)
    if not len(ranked) or bool(np.all(ranked[1:] != ranked[:-1])):
        first = last = np.arange(count, dtype=np.int64)  # every pair once: the usual file
    else:
        # Rows sorted by the pair hash, stably: a run of one hash is one pair (checked below) in
        # row order, placed by its first row and graded by its last.
        order = np.argsort(pair_hash, kind="stable")
        ranked = pair_hash[order]
        starts = np.flatnonzero(np.r_[True, ranked[1:] != ranked[:-1]])
        stops = np.r_[starts[1:], len(ranked)]
        repeated = np.flatnonzero(stops - starts > 1)
        sizes = (stops - starts)[repeated]
        members = order[np.repeat(starts[repeated], sizes) + _ranges(sizes)]
        heads = order[np.repeat(starts[repeated], sizes)]
        if not bool(np.all(query_code[members] == query_code[heads])) or not all_equal(
            documents.take(pa.array(members)), documents.take(pa.array(heads))
        ):
            return None
        first = np.sort(order[starts])
        last_of = np.empty(count, dtype=np.int64)
        last_of[order[starts]] = order[stops - 1]
        last = last_of[first]
    # Query-major (codes follow first appearance), then each document's first appearance: a file
    # that keeps each query's lines together is in this order already.
    codes = query_code[first]
    if len(codes) > 1 and not bool(np.all(codes[1:] >= codes[:-1])):
        placed = np.argsort(codes, kind="stable")
        first, last = first[placed], last[placed]
    if len(first) >= 2**31:  # beyond a map column's 32-bit offsets
        return None
    per_query = np.bincount(query_code[first], minlength=len(first_rows))
    if int(per_query.max()) > limits.MAX_LABELS_PER_QUERY:
        return None
    offsets = np.zeros(len(per_query) + 1, dtype=np.int32)
    np.cumsum(per_query, out=offsets[1:])
    keys = documents.take(pa.array(first)).cast(pa.string())
    scores = pa.MapArray.from_arrays(pa.array(offsets), keys, pa.array(grades[last], pa.float64()))
    query_names = query_ids.take(pa.array(first_rows)).cast(pa.string())
    return pa.table({"query_id": query_names, "relevance_scores": scores})


def _codes_by_appearance(hashes: Any) -> tuple[Any, Any]:
    """Each row's code (distinct hashes numbered in order of first appearance) and each code's
    first row."""
    count = len(hashes)
    run_starts = np.flatnonzero(np.r_[True, hashes[1:] != hashes[:-1]])
    ordered = np.sort(hashes[run_starts])
    if bool(np.all(ordered[1:] != ordered[:-1])):
        # Each value's rows are together (a qrels file sorted by query): a code per run.
        lengths = np.diff(np.r_[run_starts, count])
        return np.repeat(np.arange(len(run_starts), dtype=np.int64), lengths), run_starts
    _, first_rows, code_of_row = np.unique(hashes, return_index=True, return_inverse=True)
    by_appearance = np.argsort(first_rows, kind="stable")
    code = np.empty(len(first_rows), dtype=np.int64)
    code[by_appearance] = np.arange(len(first_rows), dtype=np.int64)
    return code[code_of_row.reshape(-1)], first_rows[by_appearance]


def _ranges(sizes: Any) -> Any:
    """0, 1, .., size - 1 for each size, concatenated."""
    ends = np.cumsum(sizes)
    return np.arange(int(ends[-1]), dtype=np.int64) - np.repeat(ends - sizes, sizes)
