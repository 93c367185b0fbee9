"""Unjudged-document policies, bpref and rank-biased precision, against independent oracles.

* ``unjudged=condensed`` against trec_eval -J (pytrec_eval ``judged_docs_only_flag=True``);
* ``unjudged=relevant`` against trec_eval fed qrels in which every unjudged retrieved document has
  been given the grade ``rel`` (the policy's definition, applied outside rankgate);
* ``bpref`` against trec_eval's ``bpref``;
* ``rbp`` and ``rbp_residual`` against values worked out by hand from Moffat & Zobel's definitions
  and against a plain loop written here.

Data is generated with a seeded ``numpy.random.Generator``, with most retrieved documents unjudged.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rankgate
from rankgate import Settings
from rankgate.batch import BatchBuilder
from rankgate.errors import SpecError
from rankgate.spec import UNJUDGED_POLICIES, parse_metric, unjudged_variants

pytrec_eval = pytest.importorskip("pytrec_eval")

TOLERANCE = 1e-9


def _records(seed: int, n_queries: int = 120) -> list[dict[str, Any]]:
    """Rankings over a pool of 60 documents, 8-30 of them labeled per query (so most retrieved
    documents are unjudged), grades 0-3, every query with at least one grade >= 1."""
    rng = np.random.default_rng(seed)
    records = []
    for q in range(n_queries):
        pool = [f"d{i}" for i in range(60)]
        depth = int(rng.integers(0, 35))
        ranking = [pool[i] for i in rng.permutation(60)[:depth]]
        labeled = [pool[i] for i in rng.permutation(60)[: int(rng.integers(8, 31))]]
        grades = {doc: int(rng.integers(0, 4)) for doc in labeled}
        grades[labeled[0]] = max(grades[labeled[0]], 1)
        records.append({"query_id": f"q{q}", "retrieved_ids": ranking, "relevance_scores": grades})
    return records


def _run(records: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    # trec_eval orders by score; distinct falling scores keep the ranking as given.
    return {
        r["query_id"]: {
            doc: float(len(r["retrieved_ids"]) - i) for i, doc in enumerate(r["retrieved_ids"])
        }
        for r in records
    }


def _qrels(records: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    return {r["query_id"]: dict(r["relevance_scores"]) for r in records}


def _trec(
    qrels: dict[str, dict[str, int]],
    records: list[dict[str, Any]],
    measures: set[str],
    *,
    level: int = 1,
    judged_only: bool = False,
) -> dict[str, dict[str, float]]:
    evaluator = pytrec_eval.RelevanceEvaluator(
        qrels, measures, relevance_level=level, judged_docs_only_flag=judged_only
    )
    result: dict[str, dict[str, float]] = evaluator.evaluate(_run(records))
    return result


def _ours(
    records: list[dict[str, Any]], metrics: list[str], **options: Any
) -> dict[str, dict[str, float]]:
    evaluation = rankgate.evaluate(records, metrics, settings=Settings(**options))
    return {row.pop("query_id"): row for row in evaluation.per_query()}


def _assert_equal(
    ours: dict[str, dict[str, float]],
    theirs: dict[str, dict[str, float]],
    pairs: list[tuple[str, str]],
) -> None:
    assert set(ours) == set(theirs)
    for query_id, row in ours.items():
        for metric, measure in pairs:
            expected = theirs[query_id][measure]
            assert math.isclose(row[metric], expected, rel_tol=0, abs_tol=TOLERANCE), (
                f"{query_id} {metric}: rankgate {row[metric]!r} != trec_eval {measure} {expected!r}"
            )


def _measures(pairs: list[tuple[str, str]]) -> set[str]:
    requested = set()
    for _, name in pairs:
        base, _, cutoff = name.rpartition("_")
        requested.add(f"{base}.{cutoff}" if cutoff.isdigit() else name)
    return requested


def _has_unjudged(records: list[dict[str, Any]]) -> float:
    retrieved = [d for r in records for d in r["retrieved_ids"]]
    judged = [d for r in records for d in r["retrieved_ids"] if d in r["relevance_scores"]]
    return 1 - len(judged) / len(retrieved)


CONDENSED = [
    ("ndcg(gain=linear,unjudged=condensed)@10", "ndcg_cut_10"),
    ("precision(unjudged=condensed)@5", "P_5"),
    ("recall(unjudged=condensed)@20", "recall_20"),
    ("map(unjudged=condensed)", "map"),
    ("mrr(unjudged=condensed)", "recip_rank"),
    ("r_precision(unjudged=condensed)", "Rprec"),
    ("hit_rate(unjudged=condensed)@5", "success_5"),
]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_condensed_equals_trec_eval_judged_docs_only(seed: int) -> None:
    records = _records(seed)
    assert _has_unjudged(records) > 0.5  # the case the policy is for
    ours = _ours(records, [metric for metric, _ in CONDENSED])
    theirs = _trec(_qrels(records), records, _measures(CONDENSED), judged_only=True)
    _assert_equal(ours, theirs, CONDENSED)


@pytest.mark.parametrize("level", [2, 3])
def test_condensed_with_a_higher_threshold_equals_trec_eval_level(level: int) -> None:
    records = [r for r in _records(10 + level) if max(r["relevance_scores"].values()) >= level]
    pairs = [(m.replace("unjudged=", f"rel={level},unjudged="), t) for m, t in CONDENSED[1:]]
    ours = _ours(records, [metric for metric, _ in pairs])
    theirs = _trec(_qrels(records), records, _measures(pairs), level=level, judged_only=True)
    _assert_equal(ours, theirs, pairs)


def test_relevant_equals_trec_eval_with_unjudged_documents_labeled_relevant() -> None:
    records = _records(4)
    completed = {
        r["query_id"]: {
            **{doc: 1 for doc in r["retrieved_ids"] if doc not in r["relevance_scores"]},
            **r["relevance_scores"],
        }
        for r in records
    }
    pairs = [
        ("ndcg(gain=linear,unjudged=relevant)@10", "ndcg_cut_10"),
        ("precision(unjudged=relevant)@5", "P_5"),
        ("recall(unjudged=relevant)@20", "recall_20"),
        ("map(unjudged=relevant)", "map"),
        ("mrr(unjudged=relevant)", "recip_rank"),
        ("r_precision(unjudged=relevant)", "Rprec"),
    ]
    ours = _ours(records, [metric for metric, _ in pairs])
    theirs = _trec(completed, records, _measures(pairs))
    _assert_equal(ours, theirs, pairs)
    for row in ours.values():
        assert 0.0 <= row["recall(unjudged=relevant)@20"] <= 1.0


def test_relevant_gives_unjudged_documents_the_metrics_own_rel() -> None:
    record = {"query_id": "q", "retrieved_ids": ["x", "a"], "relevance_scores": {"a": 3}}
    # rel=2: the unjudged x becomes grade 2, relevant; R = 2, both retrieved.
    values = _ours(
        [record], ["recall(rel=2,unjudged=relevant)", "precision(rel=2,unjudged=relevant)@2"]
    )
    assert values["q"]["recall(rel=2,unjudged=relevant)"] == 1.0
    assert values["q"]["precision(rel=2,unjudged=relevant)@2"] == 1.0
    # NDCG has no rel of its own: the run's threshold (here 2) is the grade, gain 2^2 - 1 = 3.
    ndcg = _ours([record], ["ndcg(unjudged=relevant)"], relevance_threshold=2)["q"]
    dcg = 3 / math.log2(2) + 7 / math.log2(3)
    ideal = 7 / math.log2(2) + 3 / math.log2(3)
    assert math.isclose(ndcg["ndcg(unjudged=relevant)"], dcg / ideal, abs_tol=1e-12)


def test_relevant_is_not_an_upper_bound_for_ap() -> None:
    """The docs' example: one relevant document at rank 1, judged non-relevant ones at ranks 2-9,
    an unjudged one at rank 10. AP is 1 when it counts as non-relevant, (1 + 2/10) / 2 when it
    counts as relevant."""
    ranking = [f"d{i}" for i in range(10)]
    labels = {"d0": 1, **{f"d{i}": 0 for i in range(1, 9)}}
    record = {"query_id": "q", "retrieved_ids": ranking, "relevance_scores": labels}
    values = _ours([record], ["map", "map(unjudged=relevant)"])["q"]
    assert values["map"] == 1.0
    assert math.isclose(values["map(unjudged=relevant)"], 0.6, abs_tol=1e-12)


@pytest.mark.parametrize("seed", [5, 6])
def test_nonrelevant_policy_changes_nothing(seed: int) -> None:
    records = _records(seed)
    plain = [
        "ndcg@10",
        "dcg@5",
        "precision@5",
        "recall@20",
        "map",
        "mrr",
        "hit_rate@3",
        "r_precision",
    ]
    explicit = [
        f"{m.split('@')[0]}(unjudged=nonrelevant)" + (f"@{m.split('@')[1]}" if "@" in m else "")
        for m in plain
    ]
    assert [str(parse_metric(m)) for m in explicit] == plain
    evaluation = rankgate.evaluate(records, plain)
    native = rankgate.evaluate(records, explicit)
    for name in plain:
        np.testing.assert_array_equal(evaluation.values_for(name), native.values_for(name))
    # The default still equals trec_eval without -J.
    pairs = [("ndcg(gain=linear)@10", "ndcg_cut_10"), ("precision@5", "P_5"), ("map", "map")]
    _assert_equal(
        _ours(records, [m for m, _ in pairs]),
        _trec(_qrels(records), records, _measures(pairs)),
        pairs,
    )


def test_compiled_and_numpy_paths_agree_under_every_policy() -> None:
    from rankgate import fast

    builder = BatchBuilder()
    for record in _records(7):
        builder.add(
            record["retrieved_ids"], {k: float(v) for k, v in record["relevance_scores"].items()}
        )
    batch = builder.build()
    specs = [
        variant
        for name in [
            "ndcg@10",
            "ndcg(gain=linear)",
            "dcg@3",
            "precision@5",
            "recall",
            "mrr@10",
            "map@20",
            "hit_rate@2",
            "r_precision",
            "rbp@10",
        ]
        for variant in unjudged_variants(parse_metric(name)).values()
    ]
    compiled = fast.score(batch, specs, {"rel": 1.0})
    numpy_only = fast.score(batch, specs, {"rel": 1.0}, native=False)
    for spec in specs:
        np.testing.assert_allclose(
            compiled[spec], numpy_only[spec], rtol=0, atol=1e-15, err_msg=str(spec)
        )


# ---------------------------------------------------------------------------------------------
# bpref


@pytest.mark.parametrize(("seed", "level"), [(8, 1), (9, 1), (10, 2)])
def test_bpref_equals_trec_eval(seed: int, level: int) -> None:
    records = [r for r in _records(seed) if max(r["relevance_scores"].values()) >= level]
    ours = _ours(records, [f"bpref(rel={level})"])
    theirs = _trec(_qrels(records), records, {"bpref"}, level=level)
    _assert_equal(ours, theirs, [(f"bpref(rel={level})", "bpref")])


def test_bpref_by_hand() -> None:
    # R = 2 (a, b), N = 3 (n1, n2, n3). Ranking: x (unjudged, ignored), n1, a, n2, b.
    # a has 1 non-relevant above: 1 - min(1, 2) / min(3, 2) = 1/2; b has 2: 1 - 2/2 = 0.
    record = {
        "query_id": "q",
        "retrieved_ids": ["x", "n1", "a", "n2", "b"],
        "relevance_scores": {"a": 1, "b": 2, "n1": 0, "n2": 0, "n3": 0},
    }
    assert _ours([record], ["bpref"])["q"]["bpref"] == pytest.approx(0.25, abs=1e-15)


# ---------------------------------------------------------------------------------------------
# Rank-biased precision


def _rbp_loop(
    ranking: list[str], labels: dict[str, float], p: float, k: int | None, rel: float
) -> tuple[float, float]:
    """RBP and its residual straight from Moffat & Zobel's definitions, one rank at a time."""
    shown = list(dict.fromkeys(ranking))
    if k is not None:
        shown = shown[:k]
    value = 0.0
    residual = 0.0
    weight = 1.0 - p
    for doc in shown:
        if doc not in labels:
            residual += weight
        elif labels[doc] >= rel:
            value += weight
        weight *= p
    return value, residual + p ** len(shown)


def test_rbp_by_hand() -> None:
    # p = 0.5; ranks: a relevant, n judged 0, b relevant, x unjudged, m judged 0.
    # RBP = 0.5 * (1 + 0.5^2) = 0.625; residual = 0.5 * 0.5^3 (x) + 0.5^5 (beyond rank 5) = 0.09375.
    record = {
        "query_id": "q",
        "retrieved_ids": ["a", "n", "b", "x", "m"],
        "relevance_scores": {"a": 1, "b": 3, "n": 0, "m": 0},
    }
    names = [
        "rbp(p=0.5)",
        "rbp_residual(p=0.5)",
        "rbp(p=0.5)@2",
        "rbp_residual(p=0.5)@2",
        "rbp(p=0.5,unjudged=relevant)",
    ]
    values = _ours([record], names)["q"]
    assert values["rbp(p=0.5)"] == pytest.approx(0.625, abs=1e-15)
    assert values["rbp_residual(p=0.5)"] == pytest.approx(0.09375, abs=1e-15)
    # Cut at 2: only a counts (0.5); the residual is everything beyond rank 2: 0.5^2.
    assert values["rbp(p=0.5)@2"] == pytest.approx(0.5, abs=1e-15)
    assert values["rbp_residual(p=0.5)@2"] == pytest.approx(0.25, abs=1e-15)
    # Optimistic policy: x counts, 0.625 + 0.0625.
    assert values["rbp(p=0.5,unjudged=relevant)"] == pytest.approx(0.6875, abs=1e-15)
    # The default persistence is the paper's 0.8; an empty ranking leaves everything open.
    empty = {"query_id": "e", "retrieved_ids": [], "relevance_scores": {"a": 1}}
    values = _ours([empty], ["rbp", "rbp_residual"])["e"]
    assert values == {"rbp": 0.0, "rbp_residual": 1.0}


@pytest.mark.parametrize(
    ("p", "k", "rel"), [(0.8, None, 1), (0.5, 10, 1), (0.95, 20, 2), (0.2, 3, 1)]
)
def test_rbp_and_residual_equal_a_plain_loop(p: float, k: int | None, rel: int) -> None:
    records = [r for r in _records(11) if max(r["relevance_scores"].values()) >= rel]
    cut = f"@{k}" if k else ""
    rbp_name = str(parse_metric(f"rbp(p={p},rel={rel}){cut}"))
    residual_name = str(parse_metric(f"rbp_residual(p={p}){cut}"))
    ours = _ours(records, [rbp_name, residual_name], relevance_threshold=rel)
    for record in records:
        value, residual = _rbp_loop(record["retrieved_ids"], record["relevance_scores"], p, k, rel)
        row = ours[record["query_id"]]
        assert math.isclose(row[rbp_name], value, rel_tol=0, abs_tol=1e-12)
        assert math.isclose(row[residual_name], residual, rel_tol=0, abs_tol=1e-12)
        assert row[rbp_name] + row[residual_name] <= 1.0 + 1e-12


def test_persistence_must_lie_strictly_between_0_and_1() -> None:
    for bad in ("0", "1", "1.5", "-0.2"):
        with pytest.raises(SpecError, match="parameter p"):
            parse_metric(f"rbp(p={bad})")


# ---------------------------------------------------------------------------------------------
# Grammar and the policy-variant helper


@pytest.mark.parametrize(
    ("typed", "canonical"),
    [
        ("ndcg(unjudged=condensed)@10", "ndcg(unjudged=condensed)@10"),
        ("ndcg(unjudged=condensed,gain=linear)@10", "ndcg(gain=linear,unjudged=condensed)@10"),
        ("nDCG(Unjudged=RELEVANT)@10", "ndcg(unjudged=relevant)@10"),
        ("ndcg(unjudged=nonrelevant)@10", "ndcg@10"),
        ("P(unjudged=condensed)@5", "precision(unjudged=condensed)@5"),
        ("map(rel=2,unjudged=condensed)", "map(rel=2,unjudged=condensed)"),
        ("rbp(p=0.8)", "rbp"),
        ("rbp(p=0.5,unjudged=relevant)@10", "rbp(p=0.5,unjudged=relevant)@10"),
        ("rbp_residual(p=0.9)@20", "rbp_residual(p=0.9)@20"),
    ],
)
def test_canonical_names_round_trip(typed: str, canonical: str) -> None:
    spec = parse_metric(typed)
    assert str(spec) == canonical
    assert parse_metric(str(spec)) == spec


def test_metrics_without_a_policy_refuse_one() -> None:
    for name in ("judged@10", "bpref", "rbp_residual"):
        base = name.split("@")[0]
        with pytest.raises(SpecError, match="unknown parameter 'unjudged'"):
            parse_metric(f"{base}(unjudged=condensed)")
        assert parse_metric(name).unjudged is None
        assert unjudged_variants(parse_metric(name)) == {}
    with pytest.raises(SpecError, match="expected one of nonrelevant, condensed, relevant"):
        parse_metric("ndcg(unjudged=optimistic)@10")


def test_policy_variants_of_a_spec() -> None:
    spec = parse_metric("precision(rel=2)@5")
    variants = unjudged_variants(spec)
    assert list(variants) == list(UNJUDGED_POLICIES)
    assert [str(v) for v in variants.values()] == [
        "precision(rel=2)@5",
        "precision(rel=2,unjudged=condensed)@5",
        "precision(rel=2,unjudged=relevant)@5",
    ]
    assert variants["nonrelevant"] == spec
    relevant = spec.with_params(unjudged="relevant")
    assert relevant.unjudged == "relevant"
    assert relevant.with_params(unjudged="nonrelevant") == spec
    with pytest.raises(SpecError):
        parse_metric("judged@5").with_params(unjudged="relevant")


# ---------------------------------------------------------------------------------------------
# End to end through the command line


def test_cli_scores_a_policy_metric(tmp_path: Path) -> None:
    records = _records(12, n_queries=40)
    source = tmp_path / "traces.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "rankgate",
            "eval",
            str(source),
            "-m",
            "ndcg(unjudged=condensed)@10",
            "-m",
            "bpref",
            "--no-config",
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        encoding="utf-8",
        cwd=tmp_path,
        timeout=120,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    means = json.loads(proc.stdout)["metrics"]
    # Exponential gain in trec_eval: give it 2^g - 1 as the grade.
    exponential = {
        q: {d: 2**g - 1 for d, g in labels.items()} for q, labels in _qrels(records).items()
    }
    theirs = _trec(exponential, records, {"ndcg_cut.10"}, judged_only=True)
    expected = np.mean([theirs[r["query_id"]]["ndcg_cut_10"] for r in records])
    assert math.isclose(means["ndcg(unjudged=condensed)@10"], expected, abs_tol=TOLERANCE)
    bpref = _trec(_qrels(records), records, {"bpref"})
    expected = np.mean([bpref[r["query_id"]]["bpref"] for r in records])
    assert math.isclose(means["bpref"], expected, abs_tol=TOLERANCE)


def test_rbp_residual_of_a_long_unjudged_ranking_stays_within_one() -> None:
    """Found by the registry properties: every rank unjudged, the terms sum to exactly 1, which in
    floating point came out one unit in the last place above it."""
    record = {
        "query_id": "q",
        "retrieved_ids": [f"d{i}" for i in range(13)],
        "relevant_ids": ["elsewhere"],
    }
    value = rankgate.evaluate([record], ["rbp_residual"]).values[parse_metric("rbp_residual")][0]
    assert value <= 1.0
    assert value == pytest.approx(1.0, abs=1e-12)
