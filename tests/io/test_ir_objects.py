"""Runs and qrels as pytrec_eval, ranx and ir_measures hold them (``rankgate.io.ir_objects``).

The same small run is written in every form (dicts, ranx objects, ir_measures named tuples, a
generator of them, TREC files, and a trace file whose rankings are put in trec_eval's order by
hand) and must score the same per query, bit for bit; pytrec_eval, which runs trec_eval's C code,
is the independent oracle on a larger run full of tied scores.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import ir_measures
import numpy as np
import pytest
import pytrec_eval

import rankgate
from rankgate import InputError, Settings, UsageError
from rankgate.io import TrecSource, open_source

# Ties at 2.0 in q1 (d2, d10, d1: docno descending as strings, so "d2" > "d10" > "d1") and at 1.0
# in q2; q3 has no qrels (unlabeled); q5's only judgment is grade 0 (no relevant document); q4 is
# judged but was not retrieved (a missing trace); d5's grade -1 means judged non-relevant.
RUN: dict[str, dict[str, float]] = {
    "q1": {"d1": 2.0, "d2": 2.0, "d10": 2.0, "d3": 0.5},
    "q2": {"a": 1.0, "b": 3.0, "c": 1.0},
    "q3": {"x": 0.3},
    "q5": {"p": 1.0, "n": 1.0},
}
QRELS: dict[str, dict[str, int]] = {
    "q1": {"d1": 2, "d10": 1, "d4": 1, "d3": 0, "d5": -1},
    "q2": {"a": 1, "c": 0},
    "q4": {"z": 1},
    "q5": {"p": 0},
}
# The same, as traces: rankings in trec_eval's order, written out by hand.
TRACES: list[dict[str, Any]] = [
    {
        "query_id": "q1",
        "retrieved_ids": ["d2", "d10", "d1", "d3"],
        "relevance_scores": {"d1": 2, "d10": 1, "d4": 1, "d3": 0, "d5": 0},
    },
    {"query_id": "q2", "retrieved_ids": ["b", "c", "a"], "relevance_scores": {"a": 1, "c": 0}},
    {"query_id": "q3", "retrieved_ids": ["x"]},
    {"query_id": "q5", "retrieved_ids": ["p", "n"], "relevance_scores": {"p": 0}},
]
METRICS = ["ndcg@10", "ndcg(gain=linear)@10", "map", "mrr", "recall@100", "precision@2"]
# rankgate metric -> trec_eval measure (as pytrec_eval names it in its output)
ORACLE = {
    "ndcg(gain=linear)@10": "ndcg_cut_10",
    "map": "map",
    "mrr": "recip_rank",
    "recall@100": "recall_100",
    "precision@5": "P_5",
}


def scored_docs() -> list[Any]:
    return [ir_measures.ScoredDoc(q, d, s) for q, docs in RUN.items() for d, s in docs.items()]


def judgments() -> list[Any]:
    return [ir_measures.Qrel(q, d, g) for q, docs in QRELS.items() for d, g in docs.items()]


def ranx_module() -> Any:
    """ranx, imported on first use only: loading it takes seconds (numba), which every test
    collected beside this module would otherwise pay."""
    return pytest.importorskip("ranx")


def per_query(evaluation: rankgate.Evaluation) -> dict[str, dict[str, float]]:
    return {row.pop("query_id"): row for row in evaluation.per_query()}


@pytest.fixture(scope="module")
def from_traces(tmp_path_factory: pytest.TempPathFactory) -> rankgate.Evaluation:
    path = tmp_path_factory.mktemp("traces") / "traces.jsonl"
    path.write_text("".join(json.dumps(record) + "\n" for record in TRACES))
    return rankgate.evaluate(path, METRICS)


# --- one run, every form --------------------------------------------------------------------------


FORMS = {
    "dicts": lambda: (RUN, QRELS),
    "ranx": lambda: (ranx_module().Run(RUN), ranx_module().Qrels(QRELS)),
    "ir_measures lists": lambda: (scored_docs(), judgments()),
    "ir_measures generators": lambda: (iter(scored_docs()), iter(judgments())),
    "mixed": lambda: (ranx_module().Run(RUN), iter(judgments())),
}


@pytest.mark.parametrize("form", FORMS)
def test_every_form_scores_as_the_equivalent_trace_file(
    form: str, from_traces: rankgate.Evaluation
) -> None:
    run, qrels = FORMS[form]()
    evaluation = rankgate.evaluate(run, METRICS, labels=qrels)
    assert per_query(evaluation) == per_query(from_traces)
    summary = evaluation.summary
    assert (summary.read, summary.scored) == (from_traces.summary.read, 2)
    assert (
        summary.skipped
        == from_traces.summary.skipped
        == {
            "unlabeled": 1,  # q3
            "no_relevant": 1,  # q5
            "invalid": 0,
        }
    )
    # q4 is judged but has no ranking: a missing trace, left out as trec_eval leaves it out.
    assert (summary.missing_trace, summary.query_set) == (1, "labels")


def test_the_tie_rule_is_trec_evals(from_traces: rankgate.Evaluation) -> None:
    # q1 ranks d2 (grade 0), d10, d1: the first relevant document is at rank 2.
    assert per_query(from_traces)["q1"]["mrr"] == 0.5
    (table,) = open_source(RUN).batches()
    assert table.column("retrieved_ids").to_pylist() == [t["retrieved_ids"] for t in TRACES]


def test_a_run_scores_as_the_same_trec_files(tmp_path: Path) -> None:
    run_file, qrels_file = tmp_path / "run.txt", tmp_path / "qrels.txt"
    # The rank column says the opposite of the scores: trec_eval ignores it, and so do both.
    lines = [
        f"{q} Q0 {d} {rank} {s} tag"
        for q, docs in RUN.items()
        for rank, (d, s) in enumerate(sorted(docs.items(), key=lambda kv: kv[1]), start=1)
    ]
    run_file.write_text("\n".join(lines) + "\n")
    qrels_file.write_text(
        "".join(f"{q} 0 {d} {g}\n" for q, docs in QRELS.items() for d, g in docs.items())
    )
    from_files = rankgate.evaluate(TrecSource(run_file, qrels_file), METRICS)
    assert per_query(rankgate.evaluate(RUN, METRICS, labels=QRELS)) == per_query(from_files)


def test_duplicates_in_a_tuple_stream_count_as_in_a_trec_file(tmp_path: Path) -> None:
    stream = [*scored_docs(), ir_measures.ScoredDoc("q1", "d3", 9.0)]
    run_file, qrels_file = tmp_path / "run.txt", tmp_path / "qrels.txt"
    run_file.write_text("".join(f"{q} Q0 {d} 0 {s}\n" for q, d, s in stream))
    qrels_file.write_text(
        "".join(f"{q} 0 {d} {g}\n" for q, docs in QRELS.items() for d, g in docs.items())
    )
    ours = rankgate.evaluate(stream, METRICS, labels=QRELS)
    theirs = rankgate.evaluate(TrecSource(run_file, qrels_file), METRICS)
    assert per_query(ours) == per_query(theirs)
    assert ours.summary.duplicates_dropped == theirs.summary.duplicates_dropped == 1


def test_integer_ids_read_as_their_decimal_text() -> None:
    numbered = rankgate.evaluate({1: {10: 1.0, 2: 1.0}}, ["mrr"], labels={"1": {"10": 1}})
    # Tied, so "2" > "10" as text ranks first, as trec_eval reads the same IDs from a file.
    assert per_query(numbered) == {"1": {"mrr": 0.5}}


def test_a_query_that_retrieved_nothing_scores_zero_as_pytrec_eval_does() -> None:
    run = {"q1": {"d1": 1.0}, "q2": {}}
    qrels = {"q1": {"d1": 1}, "q2": {"d9": 1}}
    oracle = pytrec_eval.RelevanceEvaluator(qrels, {"map"}).evaluate(run)
    ours = per_query(rankgate.evaluate(run, ["map"], labels=qrels))
    assert (
        ours
        == {q: {"map": values["map"]} for q, values in oracle.items()}
        == {
            "q1": {"map": 1.0},
            "q2": {"map": 0.0},
        }
    )


def test_a_run_without_labels_is_counted_unlabeled_as_traces_without_labels_are() -> None:
    evaluation = rankgate.evaluate(RUN, ["map"])
    assert evaluation.summary.scored == 0
    assert evaluation.summary.skipped["unlabeled"] == len(RUN)
    assert math.isnan(evaluation.mean("map"))


def test_other_iterables_are_still_read_as_records() -> None:
    # Peeking at a generator must not lose its first item.
    generator = (dict(record) for record in TRACES)
    assert rankgate.evaluate(generator, ["mrr"]).summary.read == len(TRACES)
    rows = (
        {"query_id": q, "doc_id": d, "grade": g}
        for q, docs in QRELS.items()
        for d, g in docs.items()
        if g >= 0
    )
    assert per_query(rankgate.evaluate(RUN, ["mrr"], labels=rows))["q1"] == {"mrr": 0.5}


def test_ranx_is_not_imported_by_rankgate() -> None:
    script = (
        "import sys, rankgate\n"
        "rankgate.evaluate({'q': {'d': 1.0}}, ['mrr'], labels={'q': {'d': 1}}, "
        "settings=rankgate.Settings(resamples=0))\n"
        "assert 'ranx' not in sys.modules and 'ir_measures' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True)


# --- pytrec_eval as the oracle --------------------------------------------------------------------


def tied_run(seed: int, queries: int = 40) -> tuple[dict[str, Any], dict[str, Any]]:
    """A run whose scores take few values (ties everywhere, some within float32 rounding) and
    graded qrels over the same documents, from a seeded generator."""
    rng = np.random.default_rng(seed)
    run: dict[str, dict[str, float]] = {}
    qrels: dict[str, dict[str, int]] = {}
    for q in range(queries):
        documents = [f"D{n}" for n in rng.choice(60, size=int(rng.integers(1, 30)), replace=False)]
        levels = rng.choice([0.0, 0.5, 1.0, 1.0 + 1e-9, 2.5, -1.0], size=len(documents))
        run[f"Q{q}"] = {d: float(s) for d, s in zip(documents, levels, strict=True)}
        judged = rng.choice(60, size=int(rng.integers(1, 15)), replace=False)
        qrels[f"Q{q}"] = {f"D{n}": int(rng.integers(0, 4)) for n in judged}
    return run, qrels


@pytest.mark.parametrize("seed", range(3))
def test_values_equal_pytrec_eval_on_tied_scores(seed: int) -> None:
    run, qrels = tied_run(seed)
    measures = {"ndcg_cut.10", "map", "recip_rank", "recall.100", "P.5"}
    oracle = pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(run)
    ours = per_query(rankgate.evaluate(run, list(ORACLE), labels=qrels))
    # rankgate skips a query with no relevant document (empty_relevant="skip"); trec_eval
    # scores it 0.
    assert set(ours) == {q for q, grades in qrels.items() if max(grades.values()) >= 1}
    for query_id, values in ours.items():
        for metric, measure in ORACLE.items():
            assert math.isclose(values[metric], oracle[query_id][measure], abs_tol=1e-12), (
                query_id,
                metric,
            )


def test_scores_equal_in_float32_tie_as_in_trec_eval() -> None:
    # trec_eval holds scores as single-precision floats: 1 + 1e-9 and 1 are a tie there, broken by
    # docno descending ("b" first); 1 + 1e-6 is not.
    qrels = {"q": {"b": 1}}
    for score, expected in ((1.0 + 1e-9, 1.0), (1.0 + 1e-6, 0.5)):
        run = {"q": {"a": score, "b": 1.0}}
        oracle = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(run)
        assert oracle["q"]["recip_rank"] == expected
        assert per_query(rankgate.evaluate(run, ["mrr"], labels=qrels))["q"]["mrr"] == expected


# --- compare and gates ----------------------------------------------------------------------------

CANDIDATE = {"q1": {"d1": 3.0, "d10": 2.0}, "q2": {"a": 2.0, "b": 1.0}, "q5": {"p": 1.0}}


def test_compare_two_run_dicts() -> None:
    comparison = rankgate.compare(
        RUN, CANDIDATE, labels=QRELS, metrics=["mrr"], gates=["mrr>=0.9"], pairing="paired"
    )
    (result,) = comparison.results
    assert (comparison.baseline, result.name) == ("baseline", "candidate 1")
    rows = {row["query_id"]: row for row in result.per_query()}
    assert {q: (row["mrr baseline"], row["mrr candidate"]) for q, row in rows.items()} == {
        "q1": (0.5, 1.0),
        "q2": (1 / 3, 1.0),
    }
    (gate,) = result.candidate.gates
    assert (str(gate.gate), gate.passed) == ("mrr>=0.9", True)


def test_compare_named_ranx_runs_with_ir_measures_qrels() -> None:
    ranx = ranx_module()
    comparison = rankgate.compare(
        ranx.Run(RUN, name="bm25"),
        ranx.Run(CANDIDATE, name="dense"),
        labels=iter(judgments()),
        metrics=["mrr"],
    )
    assert (comparison.baseline, comparison.results[0].name) == ("bm25", "dense")
    plain = rankgate.compare(RUN, CANDIDATE, labels=QRELS, metrics=["mrr"])
    assert comparison.results[0].per_query() == plain.results[0].per_query()


def test_gates_given_as_strings() -> None:
    evaluation = rankgate.evaluate(RUN, ["mrr"], ["mrr>=0.4", "map>=0.5"], labels=QRELS)
    # mrr: (1/2 + 1/3) / 2; map: ((1/2 + 2/3) / 3 + 1/3) / 2
    assert [(str(o.gate), o.passed) for o in evaluation.gates] == [
        ("mrr>=0.4", True),
        ("map>=0.5", False),
    ]
    assert not evaluation.passed


# --- what is refused, in one line naming the query and document ----------------------------------

ERRORS = [
    ({"q1": {"d1": "high"}}, QRELS, InputError, "run query 'q1' document 'd1': field 'score'"),
    ({"q1": {"d1": math.nan}}, QRELS, InputError, "expected a finite number, got nan"),
    ({"q1": {"d1": None}}, QRELS, InputError, "'d1': field 'score': expected a number, got None"),
    ({"q1": {"": 1.0}}, QRELS, InputError, "'q1' document '': field 'doc_id'"),
    ({"q1": {"d1": 1.0}}, {"q1": {"d1": "yes"}}, InputError, "qrels query 'q1' document 'd1'"),
    ({"q1": {"d1": 1.0}}, {"q1": {"d1": 0.75}}, InputError, "got 0.75 (a run's score?"),
    ({"q1": {"d1": 1.0}}, {"q1": {"d1": True}}, InputError, "whole number, got a bool"),
    ({}, QRELS, UsageError, "the run has no query"),
    (lambda: ranx_module().Qrels(QRELS), QRELS, UsageError, "a ranx Qrels where a run was"),
    (judgments(), QRELS, UsageError, "got Qrel tuples (judgments) where a run"),
    (RUN, lambda: ranx_module().Run(RUN), UsageError, "a ranx Run where qrels (labels=) was"),
    (RUN, lambda: iter(scored_docs()), UsageError, "got ScoredDoc tuples (a run) where qrels"),
    (
        lambda: iter([ir_measures.ScoredDoc("q1", "d1", 1.0), {"query_id": "q1"}]),
        QRELS,
        InputError,
        "run item 2: expected a named tuple (query_id, doc_id, score)",
    ),
    (
        [ir_measures.ScoredDoc("q1", "d1", 1.0), ir_measures.ScoredDoc("q1", "d2", math.inf)],
        QRELS,
        InputError,
        "run item 2 (query 'q1', document 'd2'): field 'score': expected a finite number",
    ),
    (
        RUN,
        [ir_measures.Qrel("q1", "d1", 1), ir_measures.Qrel(None, "d2", 1)],
        InputError,
        "qrels item 2 (query None): field 'query_id'",
    ),
    # 1 and "1" are one ID once written: two queries would merge into one.
    ({1: {"d1": 1.0}, "1": {"d2": 1.0}}, QRELS, InputError, "query 1 is given both as an int"),
    (RUN, {"1": {"d1": 1}, 1: {"d2": 1}}, InputError, "qrels query 1: field 'query_id': query 1"),
    # A lone surrogate is no text, in a run as in qrels, and the message says where.
    ({"q\udc80": {"d1": 1.0}}, QRELS, InputError, "run query 'q\\udc80': field 'query_id'"),
    (RUN, {"q1": {"d\udc80": 1}}, InputError, "document 'd\\udc80': field 'doc_id': the ID"),
    # Past Python's int -> str digit limit, the message still names the entry.
    ({10**5000: {"d1": 1.0}}, QRELS, InputError, "run query an integer of 16,610 bits"),
]


@pytest.mark.parametrize(("run", "qrels", "kind", "words"), ERRORS)
def test_malformed_inputs_are_refused_in_one_line(
    run: Any, qrels: Any, kind: type[Exception], words: str
) -> None:
    # Objects that are costly to build (ranx) or one-shot (iterators) come as callables.
    run, qrels = (item() if callable(item) else item for item in (run, qrels))
    with pytest.raises(kind) as caught:
        rankgate.evaluate(run, ["mrr"], labels=qrels)
    message = str(caught.value)
    assert words in message
    assert "\n" not in message


def test_compare_refuses_a_malformed_side() -> None:
    with pytest.raises(InputError, match=r"run query 'q2' document 'b': field 'score'"):
        rankgate.compare(RUN, {"q2": {"b": math.inf}}, labels=QRELS, metrics=["mrr"])


def test_an_empty_label_dict_still_means_no_labels() -> None:
    evaluation = rankgate.evaluate(RUN, ["mrr"], labels={}, settings=Settings(resamples=0))
    assert evaluation.summary.skipped["unlabeled"] == len(RUN)


@pytest.mark.parametrize(
    ("run", "qrels", "field"),
    [
        ({"q1": {"d1": 10**400}}, {"q1": {"d1": 1}}, "score"),
        ({"q1": {"d1": 1.0}}, {"q1": {"d1": 10**400}}, "relevance"),
    ],
)
def test_integers_too_large_are_one_line_errors(run: Any, qrels: Any, field: str) -> None:
    with pytest.raises(rankgate.RankgateError) as raised:
        rankgate.evaluate(run, ["map"], labels=qrels)
    assert "\n" not in str(raised.value)
