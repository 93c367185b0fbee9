"""``rankgate labels agreement`` end to end: label files in, the agreement report out.

The main table is worked out by hand below, and its kappas are checked once more against
statsmodels' ``cohens_kappa`` on the confusion matrix the command prints.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from statsmodels.stats.inter_rater import cohens_kappa

from rankgate.cli import main

JUDGE = "judge:model-a@umbrela-1"
OTHER_JUDGE = "judge:model-b@umbrela-1"

# --------------------------------------------------------------------------------------------
# The hand-computed table: five pairs graded by both (human, judge).
#
#   q1/a (0, 0)   q1/b (1, 2)   q2/c (2, 2)   q2/d (3, 3)   q3/e (3, 2)
#   q3/f is graded by the human only, q9/z by the judge only.
#
# Confusion (rows human 0..3, columns judge 0..3):
#   [1 0 0 0]   row totals r = 1 1 1 2
#   [0 0 1 0]   column totals c = 1 0 3 1      n = 5
#   [0 0 1 0]
#   [0 0 1 1]
#
# Unweighted: p_o = 3/5; p_e = (1*1 + 1*0 + 1*3 + 2*1) / 25 = 6/25;
#   kappa = (15/25 - 6/25) / (19/25) = 9/19.
# Linear weights w = 1 - |i-j|/3: p_o = (1 + 2/3 + 1 + 1 + 2/3) / 5 = 13/15;
#   sum_ij w_ij r_i c_j: row 0: 1 + (1/3)*3 = 2; row 1: 2/3 + (2/3)*3 + 1/3 = 3;
#   row 2: 1/3 + 3 + 2/3 = 4; row 3: 2 * ((2/3)*3 + 1) = 6; total 15, p_e = 15/25 = 3/5;
#   kappa = (13/15 - 9/15) / (6/15) = 2/3.
# Quadratic weights w = 1 - (|i-j|/3)^2 (1, 8/9, 5/9, 0): p_o = (3 + 2 * 8/9) / 5 = 43/45;
#   sum_ij w_ij r_i c_j: row 0: 1 + (5/9)*3 = 24/9; row 1: 8/9 + (8/9)*3 + 5/9 = 37/9;
#   row 2: 5/9 + 3 + 8/9 = 40/9; row 3: 2 * ((8/9)*3 + 1) = 66/9; total 167/9, p_e = 167/225;
#   kappa = (215/225 - 167/225) / (58/225) = 48/58 = 24/29.
# Exact agreement 3/5; mean bias (0 + 1 + 0 + 0 - 1) / 5 = 0.
# At threshold 2: human relevant c d e, judge relevant b c d e: TP 3, FP 1 (b), FN 0, TN 1 (a);
#   precision 3/4, recall 1; binary kappa: p_o = 4/5, p_e = (3/5)(4/5) + (2/5)(1/5) = 14/25,
#   kappa = (20/25 - 14/25) / (11/25) = 6/11.
# --------------------------------------------------------------------------------------------

HUMAN_ROWS = [
    ("q1", "a", 0),
    ("q1", "b", 1),
    ("q2", "c", 2),
    ("q2", "d", 3),
    ("q3", "e", 3),
    ("q3", "f", 0),
]
JUDGE_ROWS = [
    ("q1", "a", 0),
    ("q1", "b", 2),
    ("q2", "c", 2),
    ("q2", "d", 3),
    ("q3", "e", 2),
    ("q9", "z", 2),
]
HAND_CONFUSION = [[1, 0, 0, 0], [0, 0, 1, 0], [0, 0, 1, 0], [0, 0, 1, 1]]


@dataclass(frozen=True)
class Run:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)

    def one_line_error(self, *fragments: str) -> str:
        assert self.code == 2, f"exit {self.code}, stderr:\n{self.err}"
        assert "Traceback" not in self.err
        lines = self.err.strip().splitlines()
        assert len(lines) == 1, f"expected one line on stderr, got:\n{self.err}"
        assert lines[0].startswith("rankgate: error: "), lines[0]
        for fragment in fragments:
            assert fragment in lines[0], f"{fragment!r} not in {lines[0]!r}"
        return lines[0]


Agree = Callable[..., Run]
Write = Callable[..., Path]


@pytest.fixture
def agree(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Agree:
    """``agree(*args)``: ``rankgate labels agreement ARGS`` in-process, output captured."""
    for name in ("NO_COLOR", "FORCE_COLOR"):
        monkeypatch.delenv(name, raising=False)

    def run(*args: str | Path) -> Run:
        capsys.readouterr()
        try:
            code = main(["labels", "agreement", *(str(arg) for arg in args)])
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else 2
        captured = capsys.readouterr()
        return Run(code, captured.out, captured.err)

    return run


@pytest.fixture
def write(tmp_path: Path) -> Write:
    """``write(name, records)``: a JSON Lines file of the records in tmp_path."""

    def write_file(name: str, records: Iterable[dict[str, Any]]) -> Path:
        path = tmp_path / name
        path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
        return path

    return write_file


def rows(
    table: Iterable[tuple[str, str, float]], source: str | None = None
) -> list[dict[str, Any]]:
    records = []
    for query_id, document_id, grade in table:
        record: dict[str, Any] = {"query_id": query_id, "document_id": document_id, "grade": grade}
        if source is not None:
            record["source"] = source
        records.append(record)
    return records


@pytest.fixture
def hand(write: Write) -> tuple[Path, Path]:
    return write("humans.jsonl", rows(HUMAN_ROWS)), write("judge.jsonl", rows(JUDGE_ROWS, JUDGE))


# --- the numbers ------------------------------------------------------------------------------


def test_the_hand_computed_table(agree: Agree, hand: tuple[Path, Path]) -> None:
    result = agree(*hand, "--threshold", "2", "--format", "json")
    assert result.code == 0, result.err
    report = result.json()
    assert report["human_pairs"] == 6
    assert report["human_sources"] == [str(hand[0])]
    (judge,) = report["judges"]
    assert judge["source"] == JUDGE
    assert (judge["pairs"], judge["human_only"], judge["judge_only"]) == (5, 1, 1)
    found = judge["agreement"]
    assert found["confusion"] == HAND_CONFUSION
    assert found["exact_agreement"] == pytest.approx(3 / 5)
    assert found["kappa"] == pytest.approx(9 / 19)
    assert found["kappa_linear"] == pytest.approx(2 / 3)
    assert found["kappa_quadratic"] == pytest.approx(24 / 29)
    assert found["mean_bias"] == pytest.approx(0.0)
    assert found["binary"] == {
        "threshold": 2,
        "precision": pytest.approx(3 / 4),
        "recall": pytest.approx(1.0),
        "kappa": pytest.approx(6 / 11),
        "true_positives": 3,
        "false_positives": 1,
        "false_negatives": 0,
        "true_negatives": 1,
    }


def test_the_kappas_match_statsmodels_on_the_confusion_matrix(
    agree: Agree, hand: tuple[Path, Path]
) -> None:
    found = agree(*hand, "--format", "json").json()["judges"][0]["agreement"]
    table = found["confusion"]
    # statsmodels weighs by category position; for grades 0..3 that is the grade distance.
    assert found["kappa"] == pytest.approx(cohens_kappa(table).kappa)
    assert found["kappa_linear"] == pytest.approx(cohens_kappa(table, wt="linear").kappa)
    assert found["kappa_quadratic"] == pytest.approx(cohens_kappa(table, wt="quadratic").kappa)


def test_the_text_report_reads_as_a_table(agree: Agree, hand: tuple[Path, Path]) -> None:
    result = agree(*hand, "--threshold", "2")
    assert result.code == 0, result.err
    out = result.out
    assert f"judge {JUDGE}" in out
    assert "pairs compared: 5" in out
    assert "1 pair graded by humans only, 1 pair by this judge only" in out
    assert "exact agreement: 60.0%" in out
    assert "unweighted 0.474, linear 0.667, quadratic 0.828" in out
    assert "+0.000 (no bias)" in out
    assert "relevant at grade >= 2: judge precision 0.750, recall 1.000, kappa 0.545" in out
    matrix = [line.split() for line in out.splitlines() if re.match(r"\s+human \d ", line)]
    assert [[int(cell) for cell in line[2:]] for line in matrix] == HAND_CONFUSION
    assert result.err == ""


def test_two_judges_are_reported_apart(agree: Agree, write: Write) -> None:
    humans = write("humans.jsonl", rows([("q1", "a", 0), ("q1", "b", 1), ("q2", "c", 2)]))
    # Judge B grades one higher on every pair: bias +1, "over-rates", no exact agreement.
    # Judge A grades q1/b one lower and the rest alike: bias (0 - 1 + 0)/3 = -1/3.
    judged = write(
        "judges.jsonl",
        rows([("q1", "a", 1), ("q1", "b", 2), ("q2", "c", 3)], OTHER_JUDGE)
        + rows([("q1", "a", 0), ("q1", "b", 0), ("q2", "c", 2)], JUDGE),
    )
    report = agree(humans, judged, "--format", "json").json()
    by_source = {judge["source"]: judge for judge in report["judges"]}
    assert list(by_source) == [JUDGE, OTHER_JUDGE]  # sorted by source
    assert by_source[OTHER_JUDGE]["agreement"]["mean_bias"] == pytest.approx(1.0)
    assert by_source[OTHER_JUDGE]["agreement"]["exact_agreement"] == 0.0
    assert by_source[JUDGE]["agreement"]["mean_bias"] == pytest.approx(-1 / 3)
    assert by_source[JUDGE]["agreement"]["exact_agreement"] == pytest.approx(2 / 3)
    text = agree(humans, judged).out
    blocks = text.split("\njudge ")[1:]
    assert [block.splitlines()[0] for block in blocks] == [JUDGE, OTHER_JUDGE]
    assert "(the judge under-rates)" in blocks[0]
    assert "(the judge over-rates)" in blocks[1]


def test_per_segment_from_the_traces(agree: Agree, hand: tuple[Path, Path], write: Write) -> None:
    traces = write(
        "traces.jsonl",
        [
            # q1's first trace lacks the field; its second one names the segment.
            {"query_id": "q1", "retrieved_ids": ["a"]},
            {"query_id": "q1", "retrieved_ids": ["a", "b"], "topic": "news"},
            {"query_id": "q2", "retrieved_ids": ["c", "d"], "topic": "sport"},
            {"query_id": "q2", "retrieved_ids": ["d"], "topic": "weather"},  # first value holds
        ],
    )
    result = agree(*hand, "--traces", traces, "--segment-by", "topic", "--format", "json")
    assert result.code == 0, result.err
    segments = {
        segment["value"]: segment["agreement"] for segment in result.json()["judges"][0]["segments"]
    }
    assert list(segments) == ["(no trace)", "news", "sport"]
    # news: (0, 0), (1, 2). r = 1 1 0 0, c = 1 0 1 0: p_o = 1/2, p_e = 1/4, kappa = 1/3;
    # bias (0 + 1) / 2.
    assert segments["news"]["pairs"] == 2
    assert segments["news"]["kappa"] == pytest.approx(1 / 3)
    assert segments["news"]["mean_bias"] == pytest.approx(0.5)
    # sport: (2, 2), (3, 3): every pair agrees.
    assert segments["sport"]["kappa"] == pytest.approx(1.0)
    assert segments["sport"]["exact_agreement"] == 1.0
    # q3 has no trace: its one compared pair (3, 2); p_o = 0 = p_e, kappa 0, bias -1.
    assert segments["(no trace)"]["pairs"] == 1
    assert segments["(no trace)"]["kappa"] == pytest.approx(0.0)
    assert segments["(no trace)"]["mean_bias"] == pytest.approx(-1.0)
    text = agree(*hand, "--traces", traces, "--segment-by", "topic").out
    assert "by topic:" in text
    news = next(line.split() for line in text.splitlines() if line.strip().startswith("news"))
    assert news[1:4] == ["2", "50.0%", "0.333"]


def test_the_newest_human_judgment_of_a_pair_counts(agree: Agree, write: Write) -> None:
    humans = write(
        "humans.jsonl",
        [
            {"query_id": "q1", "document_id": "a", "grade": 3, "labeled_at": "2025-02-01"},
            # older by its date, though later in the file: the one above holds
            {"query_id": "q1", "document_id": "a", "grade": 0, "labeled_at": "2025-01-01"},
            # undated, after a dated one: the dated one holds
            {"query_id": "q1", "document_id": "a", "grade": 1},
            # undated twice: the later one counts
            {"query_id": "q1", "document_id": "b", "grade": 0},
            {"query_id": "q1", "document_id": "b", "grade": 2},
        ],
    )
    judged = write("judge.jsonl", rows([("q1", "a", 3), ("q1", "b", 2)], JUDGE))
    found = agree(humans, judged, "--format", "json").json()["judges"][0]["agreement"]
    assert found["exact_agreement"] == 1.0
    assert found["confusion"][3][3] == 1 and found["confusion"][2][2] == 1


def test_a_label_file_without_sources_is_a_humans_even_as_qrels(
    agree: Agree, tmp_path: Path, write: Write
) -> None:
    qrels = tmp_path / "humans.qrels"
    qrels.write_text("q1 0 a 1\nq1 0 b 0\n", encoding="utf-8")
    judged = write("judge.jsonl", rows([("q1", "a", 1), ("q1", "b", 1)], JUDGE))
    report = agree(qrels, judged, "--format", "json").json()
    assert report["human_sources"] == [str(qrels)]
    assert report["judges"][0]["agreement"]["confusion"][0][1] == 1


def test_json_keys_are_stable(agree: Agree, hand: tuple[Path, Path], tmp_path: Path) -> None:
    output = tmp_path / "agreement.json"
    result = agree(*hand, "-o", output)  # the .json name implies --format json
    assert result.code == 0, result.err
    assert "report written to" in result.out
    report = json.loads(output.read_text(encoding="utf-8"))
    assert list(report) == [
        "threshold",
        "grades",
        "label_files",
        "human_sources",
        "human_pairs",
        "segment_by",
        "judges",
    ]
    judge = report["judges"][0]
    assert list(judge) == ["source", "pairs", "human_only", "judge_only", "agreement", "segments"]
    assert list(judge["agreement"]) == [
        "pairs",
        "exact_agreement",
        "kappa",
        "kappa_linear",
        "kappa_quadratic",
        "mean_bias",
        "binary",
        "confusion",
    ]
    assert list(judge["agreement"]["binary"]) == [
        "threshold",
        "precision",
        "recall",
        "kappa",
        "true_positives",
        "false_positives",
        "false_negatives",
        "true_negatives",
    ]


def test_undefined_kappa_is_null_and_n_a(agree: Agree, write: Write) -> None:
    humans = write("humans.jsonl", rows([("q1", "a", 2), ("q1", "b", 2)]))
    judged = write("judge.jsonl", rows([("q1", "a", 2), ("q1", "b", 2)], JUDGE))
    found = agree(humans, judged, "--format", "json").json()["judges"][0]["agreement"]
    assert found["kappa"] is None and found["binary"]["precision"] == 1.0
    text = agree(humans, judged).out
    assert "unweighted n/a" in text and "n/a: undefined" in text


# --- untrusted text ---------------------------------------------------------------------------


def test_hostile_ids_and_values_stay_on_their_line(agree: Agree, write: Write) -> None:
    evil_judge = "judge:evil\n\x1b[2Jforged line"
    humans = write("humans.jsonl", rows([("q\n1", "a", 1), ("q2", "b", 0)]))
    judged = write("judge.jsonl", rows([("q\n1", "a", 1), ("q2", "b", 0)], evil_judge))
    traces = write(
        "traces.jsonl",
        [
            {"query_id": "q\n1", "retrieved_ids": ["a"], "topic": "news\n\x1b[31mforged"},
            {"query_id": "q2", "retrieved_ids": ["b"], "topic": "\rsport"},
        ],
    )
    result = agree(humans, judged, "--traces", traces, "--segment-by", "topic")
    assert result.code == 0, result.err
    assert "\x1b" not in result.out and "\r" not in result.out
    lines = result.out.splitlines()
    assert not any(line.startswith("forged") for line in lines)
    assert f"judge {evil_judge!r}" in lines
    assert any(line.strip().startswith(repr("news\n\x1b[31mforged")) for line in lines)
    # JSON keeps the values exact, escaped as JSON escapes them.
    report = agree(humans, judged, "--traces", traces, "--segment-by", "topic", "--format", "json")
    assert report.json()["judges"][0]["source"] == evil_judge
    assert "\x1b" not in report.out


def test_a_hostile_id_in_an_error_stays_one_line(agree: Agree, write: Write) -> None:
    humans = write("humans.jsonl", rows([("q\n\x1b[31m1", "a", 1.5)]))
    judged = write("judge.jsonl", rows([("q\n\x1b[31m1", "a", 1)], JUDGE))
    line = agree(humans, judged).one_line_error("not a whole grade")
    assert "\x1b" not in line


# --- errors -----------------------------------------------------------------------------------


def test_a_fractional_human_grade_names_the_file_and_pair(agree: Agree, write: Write) -> None:
    humans = write("humans.jsonl", rows([("q1", "a", 1.5), ("q1", "b", 1)]))
    judged = write("judge.jsonl", rows([("q1", "a", 2), ("q1", "b", 1)], JUDGE))
    agree(humans, judged).one_line_error(
        str(humans), "human grade 1.5", "query q1", "document a", "not a whole grade"
    )


def test_a_grade_beyond_three_is_refused(agree: Agree, write: Write) -> None:
    humans = write("humans.jsonl", rows([("q1", "a", 1)]))
    judged = write("judge.jsonl", rows([("q1", "a", 4)], JUDGE))
    agree(humans, judged).one_line_error(str(judged), "judge grade 4", "outside the grades 0-3")


def test_no_judge_labels(agree: Agree, write: Write) -> None:
    humans = write("humans.jsonl", rows([("q1", "a", 1)]))
    agree(humans).one_line_error("no judge labels", "rankgate labels judge")


def test_no_human_labels(agree: Agree, write: Write) -> None:
    judged = write("judge.jsonl", rows([("q1", "a", 1)], JUDGE))
    agree(judged).one_line_error("no human labels")


def test_no_pair_graded_by_both(agree: Agree, write: Write) -> None:
    humans = write("humans.jsonl", rows([("q1", "a", 1)]))
    judged = write("judge.jsonl", rows([("q2", "a", 1)], JUDGE))
    agree(humans, judged).one_line_error("no (query, document) pair is graded by both")


def test_a_missing_label_file(agree: Agree, hand: tuple[Path, Path], tmp_path: Path) -> None:
    agree(hand[0], tmp_path / "absent.jsonl").one_line_error("absent.jsonl")


def test_a_malformed_label_record(agree: Agree, write: Write, hand: tuple[Path, Path]) -> None:
    bad = write("bad.jsonl", [{"query_id": "q1", "document_id": "a", "grade": "high"}])
    agree(hand[0], bad).one_line_error("bad.jsonl:1", "grade")


def test_segment_by_needs_traces_and_traces_need_a_field(
    agree: Agree, hand: tuple[Path, Path], write: Write
) -> None:
    agree(*hand, "--segment-by", "topic").one_line_error("--traces")
    traces = write("traces.jsonl", [{"query_id": "q1", "retrieved_ids": ["a"], "topic": "x"}])
    agree(*hand, "--traces", traces).one_line_error("--segment-by")
    agree(*hand, "--traces", traces, "--segment-by", "topc").one_line_error(
        "segment field topc is in none of the 1 trace"
    )


def test_a_threshold_outside_the_grades(agree: Agree, hand: tuple[Path, Path]) -> None:
    agree(*hand, "--threshold", "4").one_line_error("--threshold")


def test_the_report_never_overwrites_an_input(agree: Agree, hand: tuple[Path, Path]) -> None:
    agree(*hand, "-o", hand[1]).one_line_error("also an input")
