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

__all__ = ["QRELS_COLUMNS", "TrecSource", "looks_like_qrels", "read_qrels", "trec_ranking"]

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
