"""Agreement between two graders on the (query, document) pairs both graded: an LLM judge against
human annotators.

Before a judge's labels stand in for human ones, the two are compared on the pairs both graded:
the confusion matrix, the share of exact agreement, the judge's mean bias in grades, and Cohen's
kappa -- agreement corrected for what two graders with these grade frequencies would reach by
chance -- unweighted and weighted (Cohen 1968), where a near miss (2 for 3) counts as partial
agreement. At a relevance threshold the grades become relevant / not relevant, and the judge's
"relevant" is scored against the humans' by precision and recall.

Kappa: with ``P[i][j]`` the share of pairs the human graded ``g_i`` and the judge ``g_j``, row and
column shares ``p_i`` and ``q_j``, and agreement weights ``w_ij``,

    p_o = sum_ij w_ij P_ij,   p_e = sum_ij w_ij p_i q_j,   kappa = (p_o - p_e) / (1 - p_e)

with ``w_ij = 1 if i == j else 0`` (unweighted), ``1 - |g_i - g_j| / (g_max - g_min)`` (linear) and
``1 - (g_i - g_j)^2 / (g_max - g_min)^2`` (quadratic). The weights use the grade values, so
grades (0, 1, 3) put 3 twice as far from 1 as 1 is from 0; for the default 0..3 this is the same
as using the categories' positions, as statsmodels' ``cohens_kappa`` does.

Edge cases, named: kappa is None when ``p_e = 1`` -- both graders gave every pair the same single
grade, so chance alone explains all agreement and the ratio is 0/0. When only one grader used a
single grade, ``p_o = p_e`` and kappa is 0. Precision is None when the judge called nothing
relevant, recall None when the humans did. Grades must be whole numbers among ``grades``: a 1.5
(labels averaged over annotators) is refused rather than rounded, since which way to round is the
caller's decision.

References:
    Jacob Cohen. A coefficient of agreement for nominal scales. Educational and Psychological
    Measurement 20(1), 37-46, 1960.
    Jacob Cohen. Weighted kappa: nominal scale agreement with provision for scaled disagreement or
    partial credit. Psychological Bulletin 70(4), 213-220, 1968.
    Joseph L. Fleiss, Jacob Cohen. The equivalence of weighted kappa and the intraclass
    correlation coefficient as measures of reliability. Educational and Psychological
    Measurement 33(3), 613-619, 1973 (the quadratic weights).
"""

from __future__ import annotations

import itertools
import math
import numbers
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = ["DEFAULT_GRADES", "Agreement", "BinaryAgreement", "agreement", "agreement_by_segment"]

DEFAULT_GRADES: tuple[int, ...] = (0, 1, 2, 3)
# 1 - p_e this close to 0 is 0: the chance agreement is total and kappa undefined.
_TOLERANCE = 1e-12


@dataclass(frozen=True)
class BinaryAgreement:
    """Agreement on relevant (grade >= ``threshold``) versus not relevant.

    Attributes:
        threshold: the lowest grade that counts as relevant.
        precision: of the pairs the judge called relevant, the share humans called relevant
            (None when the judge called none relevant).
        recall: of the pairs humans called relevant, the share the judge called relevant (None
            when humans called none relevant).
        kappa: Cohen's kappa on the two binary labels (None when undefined: both graders gave
            every pair the same label).
        true_positives, false_positives, false_negatives, true_negatives: the 2x2 table, with the
            judge's label as the prediction and the humans' as the truth.
    """

    threshold: int
    precision: float | None
    recall: float | None
    kappa: float | None
    true_positives: int
    false_positives: int
    false_negatives: int
    true_negatives: int


@dataclass(frozen=True)
class Agreement:
    """How far a judge's grades agree with human grades on the pairs both graded.

    Attributes:
        pairs: the pairs both graded.
        grades: the grades, in the order of ``confusion``'s rows and columns.
        confusion: ``confusion[i][j]`` counts the pairs humans graded ``grades[i]`` and the judge
            ``grades[j]`` (rows human, columns judge).
        exact_agreement: the share of pairs with equal grades.
        kappa: Cohen's (unweighted) kappa.
        kappa_linear: weighted kappa with linear weights.
        kappa_quadratic: weighted kappa with quadratic weights.
        mean_bias: the mean of judge grade - human grade (positive: the judge over-rates).
        binary: agreement on relevant versus not at the threshold.

    Each kappa is None when it is undefined (both graders gave every pair one and the same
    grade).
    """

    pairs: int
    grades: tuple[int, ...]
    confusion: list[list[int]]
    exact_agreement: float
    kappa: float | None
    kappa_linear: float | None
    kappa_quadratic: float | None
    mean_bias: float
    binary: BinaryAgreement


def agreement(
    human: Sequence[int],
    judge: Sequence[int],
    *,
    grades: Sequence[int] = DEFAULT_GRADES,
    threshold: int = 1,
) -> Agreement:
    """Agreement of a judge's grades with human grades, pair by pair.

    ``human[i]`` and ``judge[i]`` are the two grades of the same (query, document) pair. Kappa is
    (p_o - p_e) / (1 - p_e) with unweighted, linear and quadratic agreement weights (Cohen 1960,
    1968; module docstring for the formulas and edge cases).

    Args:
        human: the human grades.
        judge: the judge's grades, aligned with ``human``.
        grades: the possible grades, whole numbers in increasing order.
        threshold: a pair is relevant when its grade is at least this.

    Raises:
        ValueError: no pairs, lengths that differ, a grade that is not a whole number (1.5) or not
            among ``grades``, or ``grades`` not distinct increasing whole numbers.

    >>> result = agreement([0, 1, 2, 3], [1, 1, 2, 3])
    >>> result.exact_agreement, result.mean_bias, result.confusion[0]
    (0.75, 0.25, [0, 1, 0, 0])
    >>> agreement([2, 2], [2, 2]).kappa is None
    True
    """
    scale = _checked_grades(grades)
    if not isinstance(threshold, numbers.Integral) or isinstance(threshold, bool):
        raise ValueError(f"threshold must be a whole grade, got {threshold!r}")
    rows = _grade_positions(human, scale, "human")
    columns = _grade_positions(judge, scale, "judge")
    if len(rows) != len(columns):
        raise ValueError(
            f"human and judge must grade the same pairs, got {len(rows)} human and "
            f"{len(columns)} judge grades"
        )
    if len(rows) == 0:
        raise ValueError("agreement needs at least one pair graded by both, got none")
    k = len(scale)
    confusion = np.bincount(rows * k + columns, minlength=k * k).reshape(k, k)
    values = np.asarray(scale, dtype=np.float64)
    distance = np.abs(values[:, None] - values[None, :])
    span = float(values[-1] - values[0])
    identity = np.eye(k)
    if span > 0:
        linear = 1.0 - distance / span
        quadratic = 1.0 - (distance / span) ** 2
    else:
        linear = quadratic = identity
    pairs = len(rows)
    human_values = values[rows]
    judge_values = values[columns]
    return Agreement(
        pairs=pairs,
        grades=scale,
        confusion=confusion.tolist(),
        exact_agreement=float(np.trace(confusion)) / pairs,
        kappa=_kappa(confusion, identity),
        kappa_linear=_kappa(confusion, linear),
        kappa_quadratic=_kappa(confusion, quadratic),
        mean_bias=float(np.mean(judge_values - human_values)),
        binary=_binary(human_values >= threshold, judge_values >= threshold, int(threshold)),
    )


def agreement_by_segment(
    rows: Iterable[tuple[Hashable, int, int]],
    *,
    grades: Sequence[int] = DEFAULT_GRADES,
    threshold: int = 1,
) -> dict[str, Agreement]:
    """:func:`agreement` per segment value, from (segment value, human grade, judge grade) rows.

    Keys are ``str(segment value)`` (two values with the same text are one segment), in the order
    segments first appear. Raises ``ValueError`` as :func:`agreement` does, naming the segment.
    """
    humans: dict[str, list[int]] = {}
    judges: dict[str, list[int]] = {}
    for segment, human_grade, judge_grade in rows:
        key = str(segment)
        humans.setdefault(key, []).append(human_grade)
        judges.setdefault(key, []).append(judge_grade)
    results: dict[str, Agreement] = {}
    for key, human in humans.items():
        try:
            results[key] = agreement(human, judges[key], grades=grades, threshold=threshold)
        except ValueError as error:
            raise ValueError(f"segment {key!r}: {error}") from None
    return results


def _checked_grades(grades: Sequence[int]) -> tuple[int, ...]:
    scale = tuple(grades)
    if not scale:
        raise ValueError("grades must hold at least one grade, got none")
    for grade in scale:
        if not isinstance(grade, numbers.Integral) or isinstance(grade, bool):
            raise ValueError(f"grades must be whole numbers, got {grade!r} in {scale!r}")
    if any(later <= earlier for earlier, later in itertools.pairwise(scale)):
        raise ValueError(f"grades must be distinct and increasing, got {scale!r}")
    return tuple(int(grade) for grade in scale)


def _grade_positions(
    grades: Sequence[int], scale: tuple[int, ...], rater: str
) -> npt.NDArray[np.intp]:
    """Each grade's position in ``scale``, refusing what is not one of them."""
    try:
        values = np.asarray(grades, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{rater} grades must be numbers, got {grades!r:.80}") from None
    if values.ndim != 1:
        raise ValueError(f"{rater} grades must be one grade per pair, got shape {values.shape}")
    known = np.asarray(scale, dtype=np.float64)
    positions = np.searchsorted(known, values)
    found = positions < len(known)
    found[found] = known[positions[found]] == values[found]
    bad = np.flatnonzero(~found)
    if len(bad):
        index = int(bad[0])
        value = float(values[index])
        if math.isfinite(value) and value != math.floor(value):
            reason = "is not a whole grade (averaged labels? round them first)"
        else:
            reason = f"is not one of the grades {scale}"
        shown = int(value) if math.isfinite(value) and value == math.floor(value) else value
        raise ValueError(f"{rater} grade {shown!r} at pair {index} {reason}")
    return positions.astype(np.intp)


def _kappa(confusion: npt.NDArray[np.int_], weights: npt.NDArray[np.float64]) -> float | None:
    shares = confusion / confusion.sum()
    observed = float(np.sum(weights * shares))
    expected = float(np.sum(weights * np.outer(shares.sum(axis=1), shares.sum(axis=0))))
    if 1.0 - expected <= _TOLERANCE:
        return None
    return (observed - expected) / (1.0 - expected)


def _binary(
    human_relevant: npt.NDArray[np.bool_], judge_relevant: npt.NDArray[np.bool_], threshold: int
) -> BinaryAgreement:
    true_positives = int(np.count_nonzero(human_relevant & judge_relevant))
    false_positives = int(np.count_nonzero(~human_relevant & judge_relevant))
    false_negatives = int(np.count_nonzero(human_relevant & ~judge_relevant))
    true_negatives = int(np.count_nonzero(~human_relevant & ~judge_relevant))
    table = np.array([[true_negatives, false_positives], [false_negatives, true_positives]])
    called = true_positives + false_positives
    relevant = true_positives + false_negatives
    return BinaryAgreement(
        threshold=threshold,
        precision=true_positives / called if called else None,
        recall=true_positives / relevant if relevant else None,
        kappa=_kappa(table, np.eye(2)),
        true_positives=true_positives,
        false_positives=false_positives,
        false_negatives=false_negatives,
        true_negatives=true_negatives,
    )
