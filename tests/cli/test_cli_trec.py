"""TREC run + qrels input, ordered the way trec_eval orders it (score descending, ties by docno
descending, the rank column ignored)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

# q1: scores d2 = d3 = 3.0 tie -> d3 before d2 (docno descending); then d4 (2.0), d1 (1.0).
#     The rank column says d1 first; it must be ignored. Relevant: d2 only (d3's -1 means grade 0).
#     -> d2 at rank 2: RR = 1/2; ndcg_cut_3 (linear gain) = (1/log2 3) / 1.
# q2: x2 (0.9) before x1 (0.5), although x1 has rank 1. Relevant: x2 (grade 2), x9 (grade 1,
#     never retrieved) -> RR = 1, recall@2 = 1/2, ndcg_cut_3 = 2 / (2 + 1/log2 3).
# q3: in the run, no qrels -> unlabeled.   q9: only in the qrels -> not evaluated at all.
RUN = """\
q1 Q0 d1 1 1.0 tag
q1 Q0 d2 2 3.0 tag
q1 Q0 d3 3 3.0 tag
q1 Q0 d4 4 2.0 tag
q2 Q0 x1 1 0.5 tag
q2 Q0 x2 2 0.9 tag
q3 Q0 y1 1 1 tag
"""
QRELS = """\
q1 0 d2 1
q1 0 d3 -1
q2 0 x2 2
q2 0 x9 1
q9 0 z 1
"""
L3 = math.log2(3)


@pytest.fixture
def trec(tmp_path: Path) -> tuple[Path, Path]:
    run = tmp_path / "run.txt"
    qrels = tmp_path / "qrels.txt"
    run.write_text(RUN, encoding="utf-8")
    qrels.write_text(QRELS, encoding="utf-8")
    return run, qrels


def test_trec_values_by_hand(run_cli, trec) -> None:
    run, qrels = trec
    result = run_cli(
        "eval", "--run", run, "--qrels", qrels, "--format", "json", "--per-query",
        "-m", "mrr,ndcg_cut_3,recall@2,P_1",
    )  # fmt: skip
    assert result.code == 0, result.err
    report = result.json()
    summary = report["summary"]
    assert summary["read"] == 3
    assert summary["scored"] == 2
    assert summary["skipped"] == {"unlabeled": 1, "no_relevant": 0, "invalid": 0}
    assert report["sources"] == [str(run), str(qrels)]
    rows = {row["query_id"]: row for row in report["per_query"]}
    assert set(rows) == {"q1", "q2"}
    assert rows["q1"]["mrr"] == pytest.approx(1 / 2)
    assert rows["q2"]["mrr"] == pytest.approx(1.0)
    assert rows["q1"]["ndcg(gain=linear)@3"] == pytest.approx(1 / L3)
    assert rows["q2"]["ndcg(gain=linear)@3"] == pytest.approx(2 / (2 + 1 / L3))
    assert rows["q1"]["recall@2"] == pytest.approx(1.0)
    assert rows["q2"]["recall@2"] == pytest.approx(1 / 2)
    assert rows["q1"]["precision@1"] == 0.0  # d3 (judged non-relevant) is first
    assert rows["q2"]["precision@1"] == 1.0
    assert report["metrics"]["mrr"] == pytest.approx(0.75)


def test_trec_with_gates_exit_codes(run_cli, trec) -> None:
    run, qrels = trec
    assert run_cli("eval", "--run", run, "--qrels", qrels, "-g", "mrr>=0.75").code == 0
    failed = run_cli("eval", "--run", run, "--qrels", qrels, "-g", "mrr>0.75")
    assert failed.code == 1
    assert "FAIL" in failed.out


def test_trec_query_with_only_zero_grades_is_no_relevant(run_cli, tmp_path) -> None:
    run = tmp_path / "run.txt"
    qrels = tmp_path / "qrels.txt"
    run.write_text("a Q0 d1 1 1 t\nb Q0 d1 1 1 t\n", encoding="utf-8")
    qrels.write_text("a 0 d1 0\na 0 d2 -2\nb 0 d1 1\n", encoding="utf-8")
    report = run_cli("eval", "--run", run, "--qrels", qrels, "--format", "json").json()
    assert report["summary"]["skipped"] == {"unlabeled": 0, "no_relevant": 1, "invalid": 0}
    assert report["summary"]["scored"] == 1


@pytest.mark.parametrize(
    ("run_text", "qrels_text", "fragments"),
    [
        pytest.param(RUN + "q4 Q0 z1 1\n", QRELS, ["run.txt:8"], id="run-line-too-short"),
        pytest.param(
            "q1 Q0 d1 1 1.0\nq1 Q0 d2 2 high\n", QRELS, ["run.txt:2", "score"], id="run-score-text"
        ),
        pytest.param(RUN, QRELS + "q5 0 z\n", ["qrels.txt:6"], id="qrels-line-too-short"),
        pytest.param(RUN, "q1 0 d2 1 extra\n", ["qrels.txt:1"], id="qrels-line-too-long"),
        pytest.param(
            RUN, "q1 0 d2 1\nq1 0 d3 yes\n", ["qrels.txt:2", "relevance"], id="qrels-grade-text"
        ),
        pytest.param(RUN, "q1 0 d2 nan\n", ["qrels.txt:1", "relevance"], id="qrels-grade-nan"),
    ],
)
def test_bad_trec_lines(run_cli, tmp_path, run_text: str, qrels_text: str, fragments) -> None:
    (tmp_path / "run.txt").write_text(run_text, encoding="utf-8")
    (tmp_path / "qrels.txt").write_text(qrels_text, encoding="utf-8")
    result = run_cli("eval", "--run", "run.txt", "--qrels", "qrels.txt", cwd=tmp_path)
    result.assert_one_line_error(*fragments)


def test_qrels_not_utf8(run_cli, trec, tmp_path) -> None:
    run, _ = trec
    bad = tmp_path / "latin.qrels"
    bad.write_bytes("q1 0 caf\xe9 1\n".encode("latin-1"))
    run_cli("eval", "--run", run, "--qrels", bad).assert_one_line_error("latin.qrels")


@pytest.mark.parametrize("missing", ["run", "qrels"])
def test_missing_trec_file(run_cli, trec, tmp_path, missing: str) -> None:
    run, qrels = trec
    gone = tmp_path / f"gone-{missing}.txt"
    args = (
        ["--run", gone, "--qrels", qrels] if missing == "run" else ["--run", run, "--qrels", gone]
    )
    run_cli("eval", *args).assert_one_line_error(gone.name, "no such file")
