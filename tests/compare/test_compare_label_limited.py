"""A comparison that is fair to change: a candidate that surfaces relevant documents nobody judged
is label-limited, not a regression; once those pairs are judged it is an improvement; a candidate
that is really worse on equally judged arms is still a regression.

The data is ``unjudged_ab_data`` (seeded); every count the tests compare with rankgate's is
counted here from the records, and judged@k from its definition, without rankgate."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from rankgate import Settings, Variant, compare
from rankgate.compare import Comparison, Significance
from rankgate.errors import ConfigError
from unjudged_ab_data import (
    DEPTH,
    TOPICS,
    reveal,
    unjudged_ab,
    unjudged_in_top,
    with_labels,
)

METRICS = ["ndcg@10", "precision@5", "mrr"]
SETTINGS = Settings(segment_by=("topic",))


@pytest.fixture(scope="module")
def ab() -> Any:
    return unjudged_ab()


def _compare(
    baseline: list[dict[str, Any]], candidate: list[dict[str, Any]], **options: Any
) -> Comparison:
    return compare(
        Variant("baseline", baseline),
        Variant("candidate", candidate),
        metrics=METRICS,
        settings=SETTINGS,
        **options,
    )


def _queries(traces: list[dict[str, Any]], segment: str | None) -> set[str]:
    return {t["query_id"] for t in traces if segment is None or f"topic={t['topic']}" == segment}


@pytest.fixture(scope="module")
def surfacing(ab: Any) -> Comparison:
    return _compare(with_labels(ab.baseline, ab.labels), ab.surfacing, list_unjudged=True)


def test_the_pessimistic_reading_alone_flags_a_regression(surfacing: Comparison) -> None:
    # What compare did before: every unjudged document non-relevant, flag on the adjusted p.
    for cell in surfacing.cells:
        assert cell.evidence is not None
        nonrelevant = cell.evidence.deltas[0]
        assert nonrelevant.policy == "nonrelevant"
        assert nonrelevant.delta == pytest.approx(cell.delta, abs=1e-12)
        assert nonrelevant.p_adjusted == pytest.approx(cell.p_adjusted, abs=1e-12)
        assert cell.delta < 0 and cell.p_adjusted < 0.05
        assert nonrelevant.flag == "regression"


def test_the_cells_are_label_limited_with_the_pairs_that_decide_them(
    ab: Any, surfacing: Comparison
) -> None:
    assert not surfacing.regressions and not surfacing.improvements
    assert len(surfacing.label_limited) == len(surfacing.cells) == 9
    assert surfacing.passed  # label-limited cells pass unless asked otherwise
    for cell in surfacing.cells:
        assert cell.status == "label-limited" and cell.flag is None
        evidence = cell.evidence
        assert evidence is not None and evidence.reason
        k = cell.metric.k or DEPTH  # mrr: the deepest cutoff of the run, 10
        assert evidence.depth == k
        queries = _queries(ab.baseline, None if cell.segment is None else str(cell.segment))
        unjudged = unjudged_in_top(ab.surfacing, ab.labels, k)
        assert evidence.unjudged_pairs == sum(len(unjudged[q]) for q in queries)
        assert evidence.unjudged_pairs > 0
        # The baseline's top 10 is the judged pool: nothing of it is unjudged.
        assert evidence.baseline_unjudged_pairs == 0
        assert evidence.baseline_judged == pytest.approx(1.0)
        judged = [1 - len(unjudged[q]) / k for q in sorted(queries)]
        assert evidence.candidate_judged == pytest.approx(float(np.mean(judged)), abs=1e-12)
        # Relevant documents surfaced: better when they count as relevant.
        assert evidence.delta("relevant") > 0 > evidence.delta("nonrelevant")
        assert "less judged" in evidence.reason


def test_the_listing_holds_exactly_the_counted_pairs(ab: Any, surfacing: Comparison) -> None:
    assert surfacing.unjudged_pairs is not None
    listed = {(p.query_id, p.doc_id): p for p in surfacing.unjudged_pairs}
    assert len(listed) == len(surfacing.unjudged_pairs)  # each pair once
    expected = {
        (query, doc)
        for query, docs in unjudged_in_top(ab.surfacing, ab.labels, DEPTH).items()
        for doc in docs
    }
    assert set(listed) == expected
    assert len(listed) == surfacing.cell("ndcg@10").evidence.unjudged_pairs  # type: ignore[union-attr]
    for pair in listed.values():
        ranking = next(t for t in ab.surfacing if t["query_id"] == pair.query_id)
        assert ranking["retrieved_ids"][pair.rank - 1] == pair.doc_id
        assert (pair.side, pair.candidate) == ("candidate", "candidate")


def test_judging_the_listed_pairs_reveals_the_improvement(ab: Any, surfacing: Comparison) -> None:
    assert surfacing.unjudged_pairs is not None
    revealed = reveal(
        ab.labels, ab.truth, [(p.query_id, p.doc_id) for p in surfacing.unjudged_pairs]
    )
    after = _compare(with_labels(ab.baseline, revealed), ab.surfacing)
    assert not after.label_limited and not after.regressions
    assert len(after.improvements) == len(after.cells) == 9
    for cell in after.cells:
        assert cell.evidence is not None
        assert cell.evidence.unjudged_pairs == 0
        assert cell.evidence.candidate_judged == pytest.approx(1.0)


def test_equally_judged_arms_still_show_a_real_regression(ab: Any) -> None:
    control = _compare(with_labels(ab.baseline, ab.control_labels), ab.regressed)
    assert not control.label_limited
    assert len(control.regressions) == len(control.cells) == 9
    assert not control.passed
    for cell in control.cells:
        evidence = cell.evidence
        assert evidence is not None
        assert evidence.baseline_judged == evidence.candidate_judged == pytest.approx(1.0)
        assert evidence.unjudged_pairs == evidence.baseline_unjudged_pairs == 0
        assert [d.flag for d in evidence.deltas] == ["regression"] * 3


def test_a_label_limited_cell_fails_only_when_asked(ab: Any) -> None:
    strict = _compare(
        with_labels(ab.baseline, ab.labels),
        ab.surfacing,
        significance=Significance(fail_on_label_limited=True),
    )
    assert len(strict.label_limited) == 9 and not strict.regressions
    assert not strict.passed
    assert not strict.results[0].passed


def test_unpaired_comparisons_are_label_limited_too(ab: Any) -> None:
    unpaired = _compare(with_labels(ab.baseline, ab.labels), ab.surfacing, pairing="unpaired")
    overall = unpaired.cell("ndcg@10")
    assert overall.design == "unpaired" and overall.status == "label-limited"
    unjudged = unjudged_in_top(ab.surfacing, ab.labels, DEPTH)
    assert overall.evidence is not None
    assert overall.evidence.unjudged_pairs == sum(len(docs) for docs in unjudged.values())


def test_the_tolerance_is_an_option(ab: Any) -> None:
    # Nothing is material at a tolerance of 1; the delta still changes sign between the readings.
    loose = _compare(
        with_labels(ab.baseline, ab.labels),
        ab.surfacing,
        significance=Significance(unjudged_tolerance=1.0),
    )
    cell = loose.cell("ndcg@10")
    assert cell.status == "label-limited"
    assert cell.evidence is not None and cell.evidence.reason is not None
    assert "less judged" not in cell.evidence.reason
    assert "changes sign" in cell.evidence.reason


@pytest.mark.parametrize("value", [-0.1, 1.5, float("nan"), "0.05"])
def test_a_bad_tolerance_is_a_config_error(value: Any) -> None:
    with pytest.raises(ConfigError, match="unjudged_tolerance"):
        Significance(unjudged_tolerance=value)


def test_a_metric_without_an_unjudged_policy_has_no_evidence(ab: Any) -> None:
    result = compare(
        Variant("baseline", with_labels(ab.baseline, ab.labels)),
        Variant("candidate", ab.surfacing),
        metrics=["bpref", "judged@10"],
    )
    for cell in result.cells:
        assert cell.evidence is None and cell.status == "ok"
        assert cell.statistics()["unjudged_pairs"] is None


def test_cells_keep_their_segments_apart(ab: Any, surfacing: Comparison) -> None:
    total = surfacing.cell("precision@5").evidence
    parts = [surfacing.cell("precision@5", f"topic={topic}").evidence for topic in TOPICS]
    assert total is not None and all(part is not None for part in parts)
    assert total.unjudged_pairs == sum(part.unjudged_pairs for part in parts)  # type: ignore[union-attr]


def test_text_arrow_cannot_hold_takes_the_record_path_with_the_same_listing(ab: Any) -> None:
    # A lone surrogate (a JSON escape can spell one) sends the comparison through the records.
    candidate = [dict(trace) for trace in ab.surfacing[:60]]
    candidate[0]["retrieved_ids"] = ["odd\ud800", *candidate[0]["retrieved_ids"]]
    result = compare(
        Variant("baseline", with_labels(ab.baseline[:60], ab.labels)),
        Variant("candidate", candidate),
        metrics=["ndcg@10"],
        list_unjudged=True,
    )
    cell = result.cell("ndcg@10")
    expected = unjudged_in_top(candidate, ab.labels, DEPTH)
    assert cell.status == "label-limited" and cell.evidence is not None
    assert cell.evidence.unjudged_pairs == sum(len(docs) for docs in expected.values())
    assert result.unjudged_pairs is not None
    assert {(p.query_id, p.doc_id) for p in result.unjudged_pairs} == {
        (query, doc) for query, docs in expected.items() for doc in docs
    }


def test_chunk_ids_under_a_document_mapping_list_documents(ab: Any) -> None:
    from rankgate.doc_ids import DocIdMapping

    def chunked(traces: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [
            {**t, "retrieved_ids": [f"{d}#c{c}" for d in t["retrieved_ids"] for c in (1, 2)]}
            for t in traces
        ]

    def pairs(result: Comparison) -> set[tuple[str, str, int]]:
        assert result.unjudged_pairs is not None
        return {(p.query_id, p.doc_id, p.rank) for p in result.unjudged_pairs}

    options: dict[str, Any] = {"metrics": ["ndcg@10"], "list_unjudged": True}
    by_chunk = compare(
        Variant("baseline", with_labels(chunked(ab.baseline[:60]), ab.labels)),
        Variant("candidate", chunked(ab.surfacing[:60])),
        settings=Settings(doc_ids=DocIdMapping.separator("#")),
        **options,
    )
    by_document = compare(
        Variant("baseline", with_labels(ab.baseline[:60], ab.labels)),
        Variant("candidate", ab.surfacing[:60]),
        **options,
    )
    chunk_cell, document_cell = by_chunk.cell("ndcg@10"), by_document.cell("ndcg@10")
    assert chunk_cell.evidence == document_cell.evidence
    assert pairs(by_chunk) == pairs(by_document)
    assert by_chunk.unjudged_pairs and not any("#" in p.doc_id for p in by_chunk.unjudged_pairs)
