"""TREC run and qrels files, read the way trec_eval reads them.

A run line is ``qid Q0 docno rank score [tag]``; trec_eval ignores the rank column and orders each
query's documents by score, highest first, breaking ties by docno in *descending* order, so the same
is done here to give the same numbers. A qrels line is ``qid iteration docno relevance``. As in
trec_eval, which reads relevance with ``atol``, a fractional relevance is truncated (``1.5`` is 1);
a negative one (some TREC tracks use -1 or -2 for "judged, not relevant") becomes grade 0.

One record is produced per query of the run, in order of first appearance; its location is the run
line where that query first appears. A query without qrels is unlabeled. As in trec_eval, queries
that appear only in the qrels are not evaluated.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

from rankgate.errors import InputError, Location
from rankgate.io.validate import RawRecord

__all__ = ["TrecSource", "read_qrels"]


class TrecSource:
    """Records built from a TREC run file joined with a qrels file."""

    def __init__(self, run: str | Path, qrels: str | Path) -> None:
        self.name = str(run)
        self.total: int | None = None
        self._run = Path(run)
        self._qrels = Path(qrels)
        self._done = 0

    def done(self) -> int:
        return self._done

    def __iter__(self) -> Iterator[RawRecord]:
        labels = read_qrels(self._qrels)
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
            scored.sort(key=lambda pair: (pair[0], pair[1]), reverse=True)
            record: dict[str, object] = {
                "query_id": qid,
                "retrieved_ids": [docno for _, docno in scored],
            }
            if qid in labels:
                record["relevance_scores"] = labels[qid]
            self._done = ordinal
            yield RawRecord(Location(str(self._run), line=first_line[qid]), record, ordinal)


def read_qrels(path: Path) -> dict[str, dict[str, float]]:
    """Query ID -> document ID -> grade, from a TREC qrels file."""
    labels: dict[str, dict[str, float]] = {}
    for number, parts in _lines(path):
        if len(parts) != 4:
            raise InputError(
                Location(str(path), line=number),
                None,
                "qrels line needs: qid iteration docno relevance",
            )
        qid, _, docno, raw_grade = parts
        try:
            grade = float(raw_grade)
        except ValueError:
            grade = math.nan
        if not math.isfinite(grade):
            raise InputError(
                Location(str(path), line=number),
                "relevance",
                f"expected a number, got {raw_grade!r}",
            )
        labels.setdefault(qid, {})[docno] = float(max(math.trunc(grade), 0))
    return labels


def _lines(path: Path) -> Iterator[tuple[int, list[str]]]:
    try:
        with path.open(encoding="utf-8") as handle:
            for number, line in enumerate(handle, start=1):
                parts = line.split()
                if parts:
                    yield number, parts
    except UnicodeDecodeError as problem:
        raise InputError(str(path), None, f"file is not valid UTF-8 ({problem.reason})") from None
    except OSError as problem:
        raise InputError(str(path), None, f"cannot read ({problem.strerror})") from None
