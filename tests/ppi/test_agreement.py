"""Judge-human agreement: a confusion matrix and kappas worked out by hand, the kappas against
statsmodels' ``cohens_kappa`` on random grades, the named edge cases and the refusals.

The hand case, grades 0, 1, 2 (rows human, columns judge; 20 pairs):

                judge 0  judge 1  judge 2 | rows
    human 0        5        2        1    |   8
    human 1        1        4        2    |   7
    human 2        0        1        4    |   5
    columns        6        7        7    |  20

Unweighted: p_o = (5 + 4 + 4) / 20 = 0.65; p_e = (8*6 + 7*7 + 5*7) / 400 = 132 / 400 = 0.33;
kappa = 0.32 / 0.67 = 0.4776119.

Linear weights 1 - |i - j| / 2 (1 on the diagonal, 0.5 one grade apart, 0 two apart): the cells one
apart hold 2 + 1 + 2 + 1 = 6 pairs, so p_o = (13 + 0.5 * 6) / 20 = 0.8; their expected products
are 8*7 + 7*6 + 7*7 + 5*7 = 182, so p_e = (132 + 0.5 * 182) / 400 = 223 / 400 = 0.5575;
kappa = 0.2425 / 0.4425 = 0.5480226.

Quadratic weights 1 - (i - j)^2 / 4 (0.75 one apart): p_o = (13 + 0.75 * 6) / 20 = 0.875,
p_e = (132 + 0.75 * 182) / 400 = 0.67125, kappa = 0.20375 / 0.32875 = 0.6197719.

Mean bias (judge - human): (2*1 + 1*2 + 1*(-1) + 2*1 + 1*(-1)) / 20 = 4 / 20 = 0.2.

Binary at threshold 1 (grade >= 1 relevant): true positives 4 + 2 + 1 + 4 = 11, false positives
2 + 1 = 3 (human 0, judge >= 1), false negatives 1 + 0 = 1, true negatives 5; precision 11/14,
recall 11/12; kappa: p_o = 16/20 = 0.8, humans call 12/20 relevant and the judge 14/20, so
p_e = 0.6*0.7 + 0.4*0.3 = 0.54 and kappa = 0.26 / 0.46 = 0.5652174.

A second binary case in the shape of the textbook two-rater example (50 items; both yes 20, only
the first 5, only the second 10, both no 15): p_o = 0.7, p_e = 0.5*0.6 + 0.5*0.4 = 0.5, kappa 0.4.
"""

from __future__ import annotations

import numpy as np
import pytest
from statsmodels.stats.inter_rater import cohens_kappa

from rankgate.agreement import Agreement, BinaryAgreement, agreement, agreement_by_segment

TABLE = [[5, 2, 1], [1, 4, 2], [0, 1, 4]]


def _pairs(table: list[list[int]]) -> tuple[list[int], list[int]]:
    """Grade pairs holding ``table``'s counts, in a scrambled order."""
    human, judge = [], []
    for row, counts in enumerate(table):
        for column, count in enumerate(counts):
            human += [row] * count
            judge += [column] * count
    order = np.random.default_rng(0).permutation(len(human))
    return [human[i] for i in order], [judge[i] for i in order]


def test_the_hand_case() -> None:
    human, judge = _pairs(TABLE)
    result = agreement(human, judge, grades=(0, 1, 2))
    assert isinstance(result, Agreement)
    assert result.pairs == 20
    assert result.grades == (0, 1, 2)
    assert result.confusion == TABLE
    assert result.exact_agreement == pytest.approx(0.65)
    assert result.kappa == pytest.approx(0.32 / 0.67, abs=1e-12)
    assert result.kappa_linear == pytest.approx(0.2425 / 0.4425, abs=1e-12)
    assert result.kappa_quadratic == pytest.approx(0.20375 / 0.32875, abs=1e-12)
    assert result.mean_bias == pytest.approx(0.2, abs=1e-12)
    binary = result.binary
    assert isinstance(binary, BinaryAgreement)
    assert binary.threshold == 1
    assert (binary.true_positives, binary.false_positives) == (11, 3)
    assert (binary.false_negatives, binary.true_negatives) == (1, 5)
    assert binary.precision == pytest.approx(11 / 14, abs=1e-12)
    assert binary.recall == pytest.approx(11 / 12, abs=1e-12)
    assert binary.kappa == pytest.approx(0.26 / 0.46, abs=1e-12)


def test_the_textbook_binary_case() -> None:
    human, judge = _pairs([[15, 10], [5, 20]])  # rows: human no / yes
    result = agreement(human, judge, grades=(0, 1))
    assert result.kappa == pytest.approx(0.4, abs=1e-12)
    assert result.binary.kappa == pytest.approx(0.4, abs=1e-12)
    assert result.binary.precision == pytest.approx(20 / 30)
    assert result.binary.recall == pytest.approx(20 / 25)
    # With two grades every weighting is the same.
    assert result.kappa_linear == pytest.approx(0.4, abs=1e-12)
    assert result.kappa_quadratic == pytest.approx(0.4, abs=1e-12)


@pytest.mark.parametrize("seed", range(6))
def test_the_kappas_are_statsmodels(seed: int) -> None:
    rng = np.random.default_rng(seed)
    human = rng.integers(0, 4, 300)
    judge = np.clip(human + rng.integers(-1, 3, 300), 0, 3)
    result = agreement(human.tolist(), judge.tolist())
    table = np.array(result.confusion)
    assert table.sum() == 300
    assert result.kappa == pytest.approx(cohens_kappa(table, return_results=False), abs=1e-12)
    linear = cohens_kappa(table, wt="linear", return_results=False)
    quadratic = cohens_kappa(table, wt="quadratic", return_results=False)
    assert result.kappa_linear == pytest.approx(linear, abs=1e-12)
    assert result.kappa_quadratic == pytest.approx(quadratic, abs=1e-12)


def test_uneven_grades_weigh_by_their_values() -> None:
    rng = np.random.default_rng(9)
    scale = (0, 1, 3)
    human = rng.choice(scale, 200)
    judge = rng.choice(scale, 200)
    result = agreement(human.tolist(), judge.tolist(), grades=scale)
    table = np.array(result.confusion)
    scores = np.array(scale, dtype=float)
    for weighting, value in (
        ("linear", result.kappa_linear),
        ("quadratic", result.kappa_quadratic),
    ):
        expected = cohens_kappa(table, weights=scores, wt=weighting, return_results=False)
        assert value == pytest.approx(expected, abs=1e-12)


def test_one_grade_from_both_leaves_kappa_undefined() -> None:
    result = agreement([2, 2, 2], [2, 2, 2])
    assert (result.kappa, result.kappa_linear, result.kappa_quadratic) == (None, None, None)
    assert result.exact_agreement == 1.0
    assert result.binary.kappa is None
    assert result.binary.precision == result.binary.recall == 1.0


def test_one_grade_from_one_grader_gives_kappa_zero() -> None:
    result = agreement([1, 1, 1, 1], [0, 1, 2, 3])
    assert result.kappa == pytest.approx(0.0, abs=1e-15)
    assert result.kappa_linear == pytest.approx(0.0, abs=1e-15)
    assert result.kappa_quadratic == pytest.approx(0.0, abs=1e-15)


def test_nothing_relevant_leaves_precision_and_recall_undefined() -> None:
    result = agreement([0, 0, 1], [0, 0, 0], threshold=2)
    assert result.binary.precision is None
    assert result.binary.recall is None
    assert (result.binary.true_negatives, result.binary.threshold) == (3, 2)


def test_integral_floats_and_numpy_integers_are_grades() -> None:
    result = agreement(np.array([0, 3, 2]), [0.0, 3.0, 1.0])
    assert result.confusion[2][1] == 1
    assert result.mean_bias == pytest.approx(-1 / 3)


@pytest.mark.parametrize(
    ("human", "judge", "options", "message"),
    [
        ([0, 1.5, 2], [0, 1, 2], {}, "human grade 1.5 at pair 1 is not a whole grade"),
        ([0, 1, 2], [0, 1, 4], {}, "judge grade 4 at pair 2 is not one of the grades (0, 1, 2, 3)"),
        ([0, 1, 2], [-1, 1, 2], {}, "judge grade -1 at pair 0"),
        ([0, float("nan")], [0, 1], {}, "human grade nan at pair 1"),
        ([0, 1, 2], [0, 1], {}, "got 3 human and 2 judge grades"),
        ([], [], {}, "at least one pair"),
        ([0], [0], {"grades": (0, 2, 1)}, "distinct and increasing"),
        ([0], [0], {"grades": (0, 0.5)}, "whole numbers"),
        ([0], [0], {"threshold": 1.5}, "threshold must be a whole grade"),
        (["a"], [0], {}, "human grades must be numbers"),
    ],
)
def test_refusals(
    human: list[float], judge: list[float], options: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError) as raised:
        agreement(human, judge, **options)  # type: ignore[arg-type]
    assert message in str(raised.value)


def test_by_segment() -> None:
    rows = [("web", 0, 1), ("news", 3, 3), ("web", 2, 2), (None, 1, 1), ("news", 2, 3)]
    results = agreement_by_segment(rows)
    assert list(results) == ["web", "news", "None"]
    assert results["web"].pairs == 2
    assert results["web"].mean_bias == pytest.approx(0.5)
    assert results["news"].exact_agreement == pytest.approx(0.5)
    with pytest.raises(ValueError, match="segment 'web': judge grade 7 at pair 1"):
        agreement_by_segment([("web", 0, 0), ("web", 1, 7)])
