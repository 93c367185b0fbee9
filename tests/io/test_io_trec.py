"""TREC run + qrels files, read the way trec_eval reads them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import rankgate
from rankgate import InputError
from rankgate.errors import Location
from rankgate.io import FieldMap, TrecSource, validate_record


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def read_traces(source):
    raws = iter(source)
    try:
        return [validate_record(raw, FieldMap()) for raw in raws]
    finally:
        raws.close()


@pytest.fixture
def trec_files(tmp_path):
    # The rank column (4th) is deliberately misleading: trec_eval ignores it.
    run = write(
        tmp_path / "run.txt",
        "q1 Q0 d1 1 1.0 sys\n"
        "q1 Q0 d2 2 3.0 sys\n"
        "q1 Q0 dA 3 2.0 sys\n"
        "q1 Q0 dB 4 2.0 sys\n"
        "\n"
        "q2 Q0 9 1 0.5 sys\n"
        "q1 Q0 d0 5 -1.5 sys\n"
        "q2 Q0 10 2 0.5 sys\n"
        "q3 Q0 x 1 7 sys\n",
    )
    qrels = write(
        tmp_path / "qrels.txt",
        "q1 0 dA 2\n"
        "q1 0 d1 1\n"
        "q1 0 d2 -1\n"  # negative: judged, not relevant -> grade 0
        "q2 0 10 1\n"
        "q2 0 11 -2\n"
        "q9 0 zz 3\n",  # q9 is not in the run: not evaluated
    )
    return run, qrels


def test_run_and_qrels_become_traces(trec_files):
    run, qrels = trec_files
    traces = read_traces(TrecSource(run, qrels))
    assert [(t.query_id, t.retrieved_ids, t.grades) for t in traces] == [
        # score descending; the 2.0 tie is broken by docno descending (dB before dA)
        ("q1", ["d2", "dB", "dA", "d1", "d0"], {"dA": 2.0, "d1": 1.0, "d2": 0.0}),
        # tie at 0.5: docno descending as strings, so "9" before "10"; negative grade -> 0
        ("q2", ["9", "10"], {"10": 1.0, "11": 0.0}),
        # no qrels for q3: unlabeled; q9 (qrels only) is not a record at all
        ("q3", ["x"], None),
    ]


def test_each_query_is_located_at_its_first_run_line(trec_files):
    run, qrels = trec_files
    traces = read_traces(TrecSource(run, qrels))
    assert [str(t.location) for t in traces] == [f"{run}:1", f"{run}:6", f"{run}:9"]


def test_trec_evaluation_matches_the_same_data_as_json_lines(trec_files, tmp_path):
    run, qrels = trec_files
    from_trec = rankgate.evaluate(TrecSource(run, qrels), ["ndcg@10", "mrr", "p@5", "map"])

    jsonl = tmp_path / "same.jsonl"
    jsonl.write_text(
        "\n".join(
            json.dumps(record)
            for record in [
                {
                    "query_id": "q1",
                    "retrieved_ids": ["d2", "dB", "dA", "d1", "d0"],
                    "relevance_scores": {"dA": 2, "d1": 1, "d2": 0},
                },
                {
                    "query_id": "q2",
                    "retrieved_ids": ["9", "10"],
                    "relevance_scores": {"10": 1, "11": 0},
                },
                {"query_id": "q3", "retrieved_ids": ["x"]},
            ]
        )
    )
    from_json = rankgate.evaluate(jsonl, ["ndcg@10", "mrr", "p@5", "map"])

    assert from_trec.summary.read == 3
    assert from_trec.summary.skipped == {"unlabeled": 1, "no_relevant": 0, "invalid": 0}
    assert from_trec.query_ids == ("q1", "q2")
    assert from_trec.per_query() == from_json.per_query()
    # q1: first relevant document (dA) at rank 3; q2: "10" at rank 2
    assert from_trec.per_query()[0]["mrr"] == pytest.approx(1 / 3)
    assert from_trec.per_query()[1]["mrr"] == pytest.approx(1 / 2)


def test_only_grade_zero_labels_make_a_query_without_relevant_documents(tmp_path):
    run = write(tmp_path / "run", "q1 Q0 a 1 1 t\n")
    qrels = write(tmp_path / "qrels", "q1 0 a -1\nq1 0 b 0\n")
    evaluation = rankgate.evaluate(TrecSource(run, qrels), ["mrr"])
    assert evaluation.summary.skipped["no_relevant"] == 1
    assert evaluation.summary.labeled == 1


def test_run_lines_without_tag_and_with_tabs(tmp_path):
    run = write(tmp_path / "run", "q1\tQ0\ta\t1\t1.5\nq1 Q0 b 2 2.5e0\n")
    qrels = write(tmp_path / "qrels", "q1\t0\ta\t1\n")
    [trace] = read_traces(TrecSource(run, qrels))
    assert (trace.retrieved_ids, trace.grades) == (["b", "a"], {"a": 1.0})


def test_unicode_docnos(tmp_path):
    run = write(tmp_path / "run", "问题 Q0 文档-1 1 2 t\n问题 Q0 café 2 3 t\n问题 Q0 🦀 3 1 t\n")
    qrels = write(tmp_path / "qrels", "问题 0 🦀 2\n问题 0 café 0\n")
    [trace] = read_traces(TrecSource(run, qrels))
    assert (trace.query_id, trace.retrieved_ids, trace.grades) == (
        "问题",
        ["café", "文档-1", "🦀"],
        {"🦀": 2.0, "café": 0.0},
    )


@pytest.mark.parametrize(
    ("run_text", "line", "field"),
    [
        ("q1 Q0 a 1 1.0 t\nq1 Q0 b 2\n", 2, None),  # too few columns
        ("q1 Q0 a 1 1.0 t\n\nq1 Q0 b 2 high t\n", 3, "score"),  # score not a number
    ],
)
def test_bad_run_line_names_file_and_line(tmp_path, run_text, line, field):
    run = write(tmp_path / "run.txt", run_text)
    qrels = write(tmp_path / "qrels.txt", "q1 0 a 1\n")
    with pytest.raises(InputError) as caught:
        read_traces(TrecSource(run, qrels))
    assert caught.value.location == Location(str(run), line=line)
    assert caught.value.field == field
    assert str(caught.value).startswith(f"{run}:{line}: ")


@pytest.mark.parametrize(
    ("qrels_text", "line", "field"),
    [
        ("q1 0 a 1\nq1 0 b\n", 2, None),  # too few columns
        ("q1 0 a 1\nq1 0 b 1 extra\n", 2, None),  # too many columns
        ("q1 0 a 1\n\n\nq1 0 b yes\n", 4, "relevance"),
        ("q1 0 a nan\n", 1, "relevance"),
        ("q1 0 a inf\n", 1, "relevance"),
    ],
)
def test_bad_qrels_line_names_file_and_line(tmp_path, qrels_text, line, field):
    run = write(tmp_path / "run.txt", "q1 Q0 a 1 1.0 t\n")
    qrels = write(tmp_path / "qrels.txt", qrels_text)
    with pytest.raises(InputError) as caught:
        read_traces(TrecSource(run, qrels))
    assert caught.value.location == Location(str(qrels), line=line)
    assert caught.value.field == field


def test_trec_input_errors_stop_evaluation(tmp_path):
    run = write(tmp_path / "run.txt", "q1 Q0 a 1 1.0 t\nq1 Q0 b 2\n")
    qrels = write(tmp_path / "qrels.txt", "q1 0 a 1\n")
    with pytest.raises(InputError, match=r"run\.txt:2: run line needs"):
        rankgate.evaluate(TrecSource(run, qrels), ["mrr"])


def test_trec_source_accepts_str_paths(trec_files):
    run, qrels = trec_files
    traces = read_traces(TrecSource(str(run), str(qrels)))
    assert [t.query_id for t in traces] == ["q1", "q2", "q3"]


def test_tie_order_agrees_with_trec_eval(trec_files):
    """trec_eval itself (via pytrec_eval) gives the same reciprocal ranks on the tied run."""
    pytrec_eval = pytest.importorskip("pytrec_eval")
    run, qrels = trec_files
    run_dict: dict[str, dict[str, float]] = {}
    for line in run.read_text().splitlines():
        if line.strip():
            qid, _, docno, _, score, _ = line.split()
            run_dict.setdefault(qid, {})[docno] = float(score)
    qrels_dict: dict[str, dict[str, int]] = {}
    for line in qrels.read_text().splitlines():
        qid, _, docno, grade = line.split()
        qrels_dict.setdefault(qid, {})[docno] = int(grade)
    oracle = pytrec_eval.RelevanceEvaluator(qrels_dict, {"recip_rank"}).evaluate(run_dict)

    evaluation = rankgate.evaluate(TrecSource(run, qrels), ["mrr"])
    ours = {row["query_id"]: row["mrr"] for row in evaluation.per_query()}
    assert ours == pytest.approx({qid: oracle[qid]["recip_rank"] for qid in ("q1", "q2")})
