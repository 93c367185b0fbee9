"""The metric grammar: canonical forms, aliases, several cutoffs, and errors that say what is wrong."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rankgate import SpecError, make_metric, parse_metric, parse_metric_list
from rankgate.metrics.registry import all_metrics


@pytest.mark.parametrize(
    ("typed", "canonical"),
    [
        ("ndcg@10", "ndcg@10"),
        ("ndcg(gain=exponential)@10", "ndcg@10"),
        ("ndcg(gain=linear)@10", "ndcg(gain=linear)@10"),
        ("precision@5", "precision@5"),
        # rel's default comes from the run's threshold, so a written rel=1 is kept
        ("precision(rel=1)@5", "precision(rel=1)@5"),
        ("precision(rel=2)@5", "precision(rel=2)@5"),
        ("precision(rel=2.0)@5", "precision(rel=2)@5"),
        ("precision(rel=1.5)@5", "precision(rel=1.5)@5"),
        ("recall@20", "recall@20"),
        ("mrr", "mrr"),
        ("mrr@10", "mrr@10"),
        ("map", "map"),
        ("map@100", "map@100"),
        ("hit_rate@10", "hit_rate@10"),
        ("r_precision", "r_precision"),
        ("dcg@10", "dcg@10"),
        # aliases users type
        ("p@5", "precision@5"),
        ("P@5", "precision@5"),
        ("r@20", "recall@20"),
        ("R@20", "recall@20"),
        ("P_5", "precision@5"),
        ("P.5", "precision@5"),
        ("recall_20", "recall@20"),
        ("ndcg_cut_10", "ndcg(gain=linear)@10"),
        ("ndcg_cut.10", "ndcg(gain=linear)@10"),
        # names ignore case: nDCG is ndcg, exponential gain (trec_eval's linear gain is ndcg_cut)
        ("nDCG@10", "ndcg@10"),
        ("NDCG@10", "ndcg@10"),
        ("MAP", "map"),
        ("Recall@20", "recall@20"),
        ("NDCG_CUT_10", "ndcg(gain=linear)@10"),
        ("ndcg(Gain=Linear)@10", "ndcg(gain=linear)@10"),
        ("ndcg_burges@10", "ndcg@10"),
        ("recip_rank", "mrr"),
        ("RR@10", "mrr@10"),
        ("MRR", "mrr"),
        ("map_cut_10", "map@10"),
        ("AP", "map"),
        ("Rprec", "r_precision"),
        ("r-precision", "r_precision"),
        ("success_5", "hit_rate@5"),
        ("  ndcg@10 ", "ndcg@10"),
    ],
)
def test_spellings_resolve_to_the_canonical_name(typed: str, canonical: str) -> None:
    spec = parse_metric(typed)
    assert str(spec) == canonical
    assert parse_metric(str(spec)) == spec


@given(
    definition=st.sampled_from(all_metrics()),
    k=st.one_of(st.none(), st.integers(1, 10_000)),
    data=st.data(),
)
def test_every_metric_round_trips_through_its_string(definition, k, data) -> None:  # type: ignore[no-untyped-def]
    params = {}
    for param in definition.params:
        if param.choices:
            params[param.name] = data.draw(st.sampled_from(param.choices))
        elif param.maximum is not None:
            # A bounded parameter (rbp's persistence p lies in (0, 1)).
            params[param.name] = data.draw(
                st.floats(0.01, 0.99, allow_nan=False).map(lambda x: round(x, 3))
            )
        else:
            params[param.name] = data.draw(
                st.one_of(
                    st.integers(1, 5),
                    st.floats(0.01, 5, allow_nan=False).map(lambda x: round(x, 3)),
                )
            )
    spec = make_metric(definition.name, k if definition.cutoff else None, params)
    assert parse_metric(str(spec)) == spec
    assert str(parse_metric(str(spec))) == str(spec)


def test_several_cutoffs_at_once() -> None:
    specs = parse_metric_list(["ndcg@5,10,20", "mrr,precision(rel=2)@5,10", "ndcg@10"])
    assert [str(s) for s in specs] == [
        "ndcg@5",
        "ndcg@10",
        "ndcg@20",
        "mrr",
        "precision(rel=2)@5",
        "precision(rel=2)@10",
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("ndgc@10", "unknown metric 'ndgc' (did you mean 'ndcg'?)"),
        ("ndcg@0", "cutoff must be at least 1"),
        ("ndcg@-1", "cutoff must be a positive whole number"),
        ("ndcg@²", "cutoff must be a positive whole number"),
        ("ndcg@١٠", "cutoff must be a positive whole number"),
        ("NDCGG@10", "did you mean 'ndcg'?"),
        ("ndcg@99999999999999999999", "beyond the largest allowed"),
        ("ndcg@ten", "cutoff must be a positive whole number"),
        ("ndcg(gain=cubic)@10", "expected one of exponential, linear"),
        ("ndcg(rel=2)@10", "unknown parameter 'rel'"),
        ("precision(rel=0)@5", "expected a number > 0"),
        ("precision(rel=-1)@5", "expected a number > 0"),
        ("precision(rel=abc)@5", "expected a number"),
        ("precision(rel=2,rel=3)@5", "given twice"),
        ("precision(rel)@5", "not of the form name=value"),
        ("r_precision@5", "takes no cutoff"),
        ("@5", "cannot parse metric"),
        ("", "cannot parse metric"),
    ],
)
def test_bad_specs_raise_clear_errors(text: str, message: str) -> None:
    with pytest.raises(SpecError, match=None) as caught:
        parse_metric(text)
    assert message in str(caught.value)


def test_bare_cutoff_without_a_metric_before_it_is_an_error() -> None:
    with pytest.raises(SpecError, match="follows no metric with a cutoff"):
        parse_metric_list(["mrr,10"])
