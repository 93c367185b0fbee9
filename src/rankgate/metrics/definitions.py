"""Every metric rankgate computes, each declared once.

Definitions follow trec_eval (the reference implementation of TREC) wherever both define the same
measure; ``docs/metrics.md`` is generated from these declarations and lists where the design note's
reference code differs. Conventions shared by all metrics:

* rankings are de-duplicated before scoring (first rank wins);
* a document is relevant when its grade >= ``rel`` (default 1); grade 0 means judged non-relevant,
  and a document with no label counts as grade 0 unless the metric's ``unjudged`` parameter says
  otherwise (``UNJUDGED`` in the registry: applied once, to the batch, before any kernel runs);
* a denominator of zero (no relevant document at this metric's ``rel``, no ideal gain, nothing
  retrieved) scores 0 — queries with no relevant document at all are set aside before any kernel runs
  (see ``EmptyRelevantPolicy`` in ``rankgate.evaluate``).
"""

from __future__ import annotations

import numpy as np

from rankgate.batch import RankedBatch
from rankgate.metrics import kernels
from rankgate.metrics.kernels import Floats
from rankgate.metrics.registry import UNJUDGED, Alias, Param, metric

REL = Param(
    "rel",
    kind="number",
    default=1,
    description="minimum grade for a document to count as relevant",
    minimum=0.0,
    exclusive_min=True,
    run_default=True,
)
GAIN = Param(
    "gain",
    kind="choice",
    default="exponential",
    description="gain of a grade g: exponential = 2^g - 1, linear = g (trec_eval's ndcg_cut)",
    choices=("exponential", "linear"),
)

_MANNING = "Manning, Raghavan & Schütze, Introduction to Information Retrieval (2008), ch. 8"
_TREC = "trec_eval 9.0 (NIST)"


@metric(
    "ndcg",
    native="ndcg",
    params=(GAIN, UNJUDGED),
    summary="Normalised discounted cumulative gain of the top k.",
    formula="DCG@k / IDCG@k, DCG@k = Σ_{i≤k} gain(g_i) / log2(i + 1)",
    reference="Järvelin & Kekäläinen, TOIS 20(4) 2002; exponential gain: Burges et al., ICML 2005; "
    f"{_TREC} ndcg_cut (gain=linear)",
    edge_cases="IDCG is built from all labeled documents, cut at k, not at the number retrieved. "
    "Every positive grade adds gain; no `rel` threshold. 0 when IDCG is 0. Names ignore case, so "
    "`nDCG@10` and `NDCG@10` are `ndcg@10`, exponential gain; trec_eval's `ndcg_cut_10` (and "
    "ir_measures' `nDCG@10`) use linear gain: `ndcg(gain=linear)@10`.",
    aliases=(
        Alias("ndcg_cut", {"gain": "linear"}, style="trec"),
        Alias("ndcg_burges"),
    ),
)
def ndcg(batch: RankedBatch, k: int | None, gain: str) -> Floats:
    return kernels.ratio(kernels.dcg(batch, k, gain), kernels.ideal_dcg(batch, k, gain))


@metric(
    "dcg",
    native="dcg",
    params=(GAIN, UNJUDGED),
    summary="Discounted cumulative gain of the top k (not normalised).",
    formula="Σ_{i≤k} gain(g_i) / log2(i + 1)",
    reference="Järvelin & Kekäläinen, TOIS 20(4) 2002",
    edge_cases="The one unnormalised metric: values are >= 0 with no upper bound.",
    aliases=(Alias("dcg_burges"),),
    bounded=False,
    monotone_in_k=True,
)
def dcg(batch: RankedBatch, k: int | None, gain: str) -> Floats:
    return kernels.dcg(batch, k, gain)


@metric(
    "precision",
    native="precision",
    params=(REL, UNJUDGED),
    summary="Share of the top k that is relevant.",
    formula="|relevant ∩ top k| / k",
    reference=f"{_MANNING}; {_TREC} P_k",
    edge_cases="Divides by k even when fewer than k documents were retrieved. Without @k: "
    "relevant retrieved / retrieved (trec_eval set_P), 0 when nothing was retrieved.",
    aliases=(
        Alias("p"),
        Alias("prec"),
        Alias("P", style="trec"),
    ),
)
def precision(batch: RankedBatch, k: int | None, rel: float) -> Floats:
    found = kernels.per_query_count(batch, kernels.relevant_hits(batch, k, rel))
    if k is None:
        return kernels.ratio(found, batch.ranked_lengths.astype(np.float64))
    return found / float(k)


@metric(
    "recall",
    native="recall",
    params=(REL, UNJUDGED),
    summary="Share of all relevant documents found in the top k.",
    formula="|relevant ∩ top k| / R",
    reference=f"{_MANNING}; {_TREC} recall_k",
    edge_cases="R counts every relevant label, not min(R, k), as trec_eval does.",
    aliases=(Alias("r"), Alias("recall", style="trec")),
    monotone_in_k=True,
)
def recall(batch: RankedBatch, k: int | None, rel: float) -> Floats:
    found = kernels.per_query_count(batch, kernels.relevant_hits(batch, k, rel))
    return kernels.ratio(found, kernels.relevant_total(batch, rel))


@metric(
    "mrr",
    native="mrr",
    params=(REL, UNJUDGED),
    summary="Reciprocal rank of the first relevant document (mean over queries: MRR).",
    formula="1 / rank of the first relevant document in the top k",
    reference=f"Voorhees, TREC-8 QA track (1999); {_TREC} recip_rank",
    edge_cases="0 when no relevant document is in the top k.",
    aliases=(
        Alias("recip_rank"),
        Alias("rr"),
    ),
    monotone_in_k=True,
)
def mrr(batch: RankedBatch, k: int | None, rel: float) -> Floats:
    first = kernels.first_hit_rank(batch, kernels.relevant_hits(batch, k, rel))
    return kernels.ratio(np.ones_like(first), first)


@metric(
    "map",
    native="map",
    params=(REL, UNJUDGED),
    summary="Average precision at the ranks of relevant documents (mean over queries: MAP).",
    formula="Σ_{i≤k, i relevant} P@i / R",
    reference=f"{_MANNING} §8.4; {_TREC} map, map_cut_k",
    edge_cases="Divides by R, all relevant documents, also when cut at k (trec_eval map_cut).",
    aliases=(
        Alias("ap"),
        Alias("map", style="trec"),
        Alias("map_cut", style="trec"),
    ),
    monotone_in_k=True,
)
def average_precision(batch: RankedBatch, k: int | None, rel: float) -> Floats:
    hits = kernels.relevant_hits(batch, k, rel)
    precision_here = kernels.hits_so_far(batch, hits) / (batch.ranked_rank + 1.0)
    summed = kernels.per_query_sum(batch, np.where(hits, precision_here, 0.0))
    return kernels.ratio(summed, kernels.relevant_total(batch, rel))


@metric(
    "hit_rate",
    native="hit_rate",
    params=(REL, UNJUDGED),
    summary="1 when any relevant document is in the top k, else 0.",
    formula="[|relevant ∩ top k| > 0]",
    reference=f"{_TREC} success_k",
    edge_cases="Without @k: any relevant document retrieved at all.",
    aliases=(Alias("success", style="trec"), Alias("hit_rate", style="trec")),
    monotone_in_k=True,
)
def hit_rate(batch: RankedBatch, k: int | None, rel: float) -> Floats:
    found = kernels.per_query_count(batch, kernels.relevant_hits(batch, k, rel))
    return (found > 0).astype(np.float64)


@metric(
    "r_precision",
    native="r_precision",
    params=(REL, UNJUDGED),
    cutoff=False,
    summary="Precision at rank R, where R is the number of relevant documents.",
    formula="|relevant ∩ top R| / R",
    reference=f"{_MANNING} §8.4; {_TREC} Rprec",
    edge_cases="Divides by R even when fewer than R documents were retrieved.",
    aliases=(Alias("Rprec"), Alias("r-precision")),
)
def r_precision(batch: RankedBatch, k: int | None, rel: float) -> Floats:
    del k  # declared without a cutoff
    total = kernels.relevant_total(batch, rel)
    in_top_r = batch.ranked_rank < total[batch.ranked_query]
    hits = (batch.ranked_grades >= rel) & in_top_r
    return kernels.ratio(kernels.per_query_count(batch, hits), total)


@metric(
    "judged",
    native="judged",
    summary="Share of the retrieved top k that carries a label (grade 0 included).",
    formula="|labeled ∩ top k| / min(k, number retrieved)",
    reference="Buckley & Voorhees, SIGIR 2004 (judged fraction); cf. ir_measures Judged@k",
    edge_cases="Measures annotation depth, not quality. Divides by the documents actually in the "
    "top k, so a short ranking that is fully labeled scores 1 (ir_measures divides by k). 0 when "
    "nothing was retrieved.",
)
def judged(batch: RankedBatch, k: int | None) -> Floats:
    inside = kernels.within_cutoff(batch, k)
    labeled = kernels.per_query_count(batch, inside & batch.ranked_judged)
    shown = batch.ranked_lengths.astype(np.float64)
    if k is not None:
        shown = np.minimum(shown, float(k))
    return kernels.ratio(labeled, shown)


PERSISTENCE = Param(
    "p",
    kind="number",
    default=0.8,
    description="persistence of rank-biased precision: the chance that a user who has read one "
    "rank goes on to the next (expected reading depth 1 / (1 - p)); 0 < p < 1",
    minimum=0.0,
    exclusive_min=True,
    maximum=1.0,
    exclusive_max=True,
)

_MOFFAT_ZOBEL = (
    "Moffat & Zobel, TOIS 27(1) 2008, Rank-biased precision for measurement of retrieval"
)


@metric(
    "bpref",
    params=(REL,),
    cutoff=False,
    summary="Binary preference: how often judged relevant documents rank above judged "
    "non-relevant ones; unjudged documents are ignored.",
    formula="1/R Σ_{r relevant retrieved} (1 - min(n_r, R) / min(N, R)), n_r = judged "
    "non-relevant documents ranked above r, N = judged non-relevant documents (1 for r when n_r = 0)",
    reference=f"Buckley & Voorhees, SIGIR 2004; {_TREC} bpref (m_bpref.c)",
    edge_cases="Reads only judged documents, so every unjudged policy gives the same value: it "
    "takes no `unjudged` parameter. Non-relevant means labeled with a grade below `rel`. 0 when R "
    "is 0. No cutoff, as in trec_eval. infAP (Yilmaz & Aslam, CIKM 2006) is not offered: it "
    "estimates AP on the assumption that the judged documents are a uniform random sample of a "
    "defined pool, with pooled-but-unsampled documents marked apart from unpooled ones; production "
    "labels come from whatever annotators were shown and carry no such mark, so rankgate cannot "
    "tell when the assumption holds, and an estimate under a broken assumption is a confident, "
    "biased number. Use bpref, `unjudged=condensed`, or the range between `unjudged=nonrelevant` "
    "and `unjudged=relevant` instead.",
)
def bpref(batch: RankedBatch, k: int | None, rel: float) -> Floats:
    del k  # declared without a cutoff
    # An unjudged document has grade 0 < rel, so it is never relevant; nonrelevant needs a label.
    relevant = batch.ranked_grades >= rel
    nonrelevant = batch.ranked_judged & ~relevant
    total = kernels.relevant_total(batch, rel)
    judged_nonrelevant = np.bincount(
        batch.label_query[batch.label_grades < rel], minlength=batch.n_queries
    ).astype(np.float64)
    above = kernels.hits_so_far(batch, nonrelevant).astype(np.float64)
    r = total[batch.ranked_query]
    # above > 0 implies N > 0 and R > 0 (this position is relevant), so the ratio is defined there.
    penalty = kernels.ratio(
        np.minimum(above, r), np.minimum(judged_nonrelevant[batch.ranked_query], r)
    )
    credit = np.where(relevant, np.where(above > 0, 1.0 - penalty, 1.0), 0.0)
    return kernels.ratio(kernels.per_query_sum(batch, credit), total)


@metric(
    "rbp",
    params=(PERSISTENCE, REL, UNJUDGED),
    summary="Rank-biased precision: the expected rate of relevant documents read by a user who "
    "goes on from each rank with probability p.",
    formula="(1 - p) Σ_{i≤k} [g_i ≥ rel] p^(i-1)",
    reference=_MOFFAT_ZOBEL,
    edge_cases="Binary at `rel`, as in the paper; grades above `rel` earn no more. Not normalised "
    "by R: a finite ranking scores at most 1 - p^d (d = documents in the top k), so a perfect "
    "ranking does not score 1. Its uncertainty is `rbp_residual`: the true value under any "
    "labels of the unjudged documents and any continuation of the ranking lies between `rbp` "
    "and `rbp` + `rbp_residual` (M&Z §5); `rbp(unjudged=relevant)` is the upper end without the "
    "tail beyond the ranking.",
    monotone_in_k=True,
    perfect_scores_one=False,
)
def rbp(batch: RankedBatch, k: int | None, p: float, rel: float) -> Floats:
    hits = kernels.relevant_hits(batch, k, rel)
    weights = np.where(hits, (1.0 - p) * np.power(p, batch.ranked_rank.astype(np.float64)), 0.0)
    return kernels.per_query_sum(batch, weights)


@metric(
    "rbp_residual",
    params=(PERSISTENCE,),
    summary="The width rank-biased precision leaves open: the weight of unjudged documents in "
    "the top k plus the weight of every rank beyond what was scored.",
    formula="(1 - p) Σ_{i≤d, i unjudged} p^(i-1) + p^d, d = min(k, documents retrieved)",
    reference=f"{_MOFFAT_ZOBEL}, §5 (residuals)",
    edge_cases="1 for an empty ranking (nothing is known). A ranking shorter than k is treated as "
    "cut where it ends: the ranks it does not fill count to the residual, as in the paper. Reads "
    "only whether a document is judged, so it takes no `rel` or `unjudged` parameter. "
    "`rbp` + `rbp_residual` <= 1.",
    perfect_scores_one=False,
)
def rbp_residual(batch: RankedBatch, k: int | None, p: float) -> Floats:
    inside = kernels.within_cutoff(batch, k)
    weights = np.where(
        inside & ~batch.ranked_judged,
        (1.0 - p) * np.power(p, batch.ranked_rank.astype(np.float64)),
        0.0,
    )
    depth = batch.ranked_lengths.astype(np.float64)
    if k is not None:
        depth = np.minimum(depth, float(k))
    # The terms sum to at most 1 exactly; in floating point a long unjudged ranking can land a
    # unit in the last place above it.
    return np.minimum(kernels.per_query_sum(batch, weights) + np.power(p, depth), 1.0)
