"""Generate ``traces.jsonl``: synthetic search traces for the rankgate README demo.

Each line is one query as a production logger would record it: the query text and type, the 20
documents the retriever returned in rank order, and (for most queries) the annotators' graded
relevance labels. The retriever is simulated so that the scores look like a real, decent system:
easy query types rank their relevant documents near the top, multi-hop questions do clearly worse.
The data also carries the untidy parts real logs have (unlabeled queries, queries where annotators
found nothing relevant, a logger that sometimes records a document twice) so the demo shows how
rankgate treats them.

The output is fully determined by ``SEED``: re-running this script rewrites the file byte for byte,
so the demo's numbers never drift. Standard library only.

    python examples/generate_traces.py
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

SEED = 20261130
QUERY_COUNT = 400
CORPUS_SIZE = 5000
RANKING_LENGTH = 20
OUTPUT = Path(__file__).with_name("traces.jsonl")

# A fixed day, not the clock: timestamps must not change between runs.
DAY_START = datetime(2026, 11, 30, tzinfo=UTC)
SECONDS_PER_DAY = 24 * 60 * 60

# Exact counts rather than per-record coin flips, so the README can state them and they stay put
# if the simulation is retuned.
UNLABELED_COUNT = 48  # 12 %
NOTHING_RELEVANT_COUNT = 9  # ~2.6 % of the labeled queries
DUPLICATE_COUNT = 8  # 2 %
BASELINE_COUNT = 40  # 10 % served by the older lexical retriever

MAIN_RETRIEVER = "hybrid-v2"
BASELINE_RETRIEVER = "bm25-v1"
# The lexical baseline ranks the same documents lower and misses a few more.
BASELINE_RANK_STRETCH = 1.5
BASELINE_EXTRA_MISS = 0.05


@dataclass(frozen=True, slots=True)
class QueryKind:
    """How one query type is labeled and how well the simulated retriever serves it."""

    share: float
    relevant_count: tuple[int, int]  # inclusive range of truly relevant documents
    grade_weights: tuple[float, float, float]  # how often a relevant document is grade 1, 2, 3
    # Probability that the retriever never returns a relevant document of grade 1, 2, 3.
    miss: tuple[float, float, float]
    # Mean distance below rank 1 at which a relevant document of grade 1, 2, 3 lands; lower grades
    # sit further down because a retriever's score correlates, loosely, with how relevant a doc is.
    rank_spread: tuple[float, float, float]
    # Navigational queries have one page the user is looking for; it is always grade 3.
    first_grade: int | None = None


KINDS: dict[str, QueryKind] = {
    "factual": QueryKind(
        share=0.35,
        relevant_count=(1, 3),
        grade_weights=(0.3, 0.35, 0.35),
        miss=(0.06, 0.03, 0.01),
        rank_spread=(2.5, 1.2, 0.5),
    ),
    "navigational": QueryKind(
        share=0.20,
        relevant_count=(1, 2),
        grade_weights=(0.7, 0.3, 0.0),
        miss=(0.1, 0.05, 0.02),
        rank_spread=(5.0, 3.0, 0.4),
        first_grade=3,
    ),
    "troubleshooting": QueryKind(
        share=0.30,
        relevant_count=(1, 4),
        grade_weights=(0.35, 0.35, 0.3),
        miss=(0.14, 0.1, 0.06),
        rank_spread=(4.5, 2.5, 1.3),
    ),
    "multi_hop": QueryKind(
        share=0.15,
        relevant_count=(3, 6),
        grade_weights=(0.35, 0.35, 0.3),
        miss=(0.28, 0.2, 0.12),
        rank_spread=(9.0, 6.0, 4.0),
    ),
}

# Small vocabularies for plausible query text; realism of the language is not the point.
PRODUCTS = [
    "the CLI",
    "the dashboard",
    "the Python SDK",
    "the REST API",
    "the mobile app",
    "the billing portal",
    "the admin console",
    "webhooks",
]
SETTINGS = [
    "rate limit",
    "session timeout",
    "max upload size",
    "retention period",
    "default region",
    "token lifetime",
    "page size",
    "retry budget",
]
FEATURES = [
    "SSO",
    "audit logs",
    "usage alerts",
    "scheduled exports",
    "role-based access",
    "custom domains",
    "IP allowlists",
    "data residency",
]
PAGES = [
    "pricing",
    "status",
    "changelog",
    "API reference",
    "quickstart",
    "release notes",
    "security overview",
    "terms of service",
]
ERRORS = [
    "a 401 error",
    "a 429 error",
    "a timeout",
    "an SSL handshake failure",
    '"invalid signature"',
    "a blank page",
    "duplicate events",
    "a stuck job",
]
ACTIONS = [
    "rotating an API key",
    "uploading a file",
    "logging in with SSO",
    "exporting a report",
    "upgrading the SDK",
    "adding a team member",
    "deleting a project",
    "replaying a webhook",
]

TEMPLATES: dict[str, list[str]] = {
    "factual": [
        "what is the default {setting} in {product}",
        "what is the {setting} for {product}",
        "does {product} support {feature}",
        "which plans include {feature}",
        "how long is the {setting}",
    ],
    "navigational": [
        "{page} page",
        "{product} {page}",
        "link to the {page}",
        "open {page}",
    ],
    "troubleshooting": [
        "how do I fix {error} when {action}",
        "{product} returns {error} after {action}",
        "why do I get {error} when {action}",
        "{error} in {product}",
        "how do I recover from {error}",
    ],
    "multi_hop": [
        "can I use {feature} together with {feature2} on {product}",
        "does the {setting} change when {feature} is enabled",
        "which setting affects both {feature} and the {setting}",
        "how does {action} interact with {feature} and {feature2}",
    ],
}


def doc_id(number: int) -> str:
    return f"doc-{number:05d}"


def query_text(rng: random.Random, kind: str) -> str:
    # Two distinct features, or "SSO together with SSO" reads like a bug.
    first, second = rng.sample(FEATURES, 2)
    return rng.choice(TEMPLATES[kind]).format(
        product=rng.choice(PRODUCTS),
        setting=rng.choice(SETTINGS),
        feature=first,
        feature2=second,
        page=rng.choice(PAGES),
        error=rng.choice(ERRORS),
        action=rng.choice(ACTIONS),
    )


def draw_relevant(rng: random.Random, kind: QueryKind) -> dict[str, int]:
    """The documents that truly answer the query, with their grades 1..3."""
    count = rng.randint(*kind.relevant_count)
    numbers = rng.sample(range(1, CORPUS_SIZE + 1), count)
    grades = rng.choices((1, 2, 3), weights=kind.grade_weights, k=count)
    if kind.first_grade is not None:
        grades[0] = kind.first_grade
    return {doc_id(n): g for n, g in zip(numbers, grades, strict=True)}


def simulate_ranking(
    rng: random.Random, kind: QueryKind, relevant: dict[str, int], stretch: float, extra_miss: float
) -> list[str]:
    """The retriever's top 20: relevant docs where the simulation puts them, noise elsewhere."""
    targets: list[tuple[float, str]] = []
    for doc, grade in relevant.items():
        if rng.random() < kind.miss[grade - 1] + extra_miss:
            continue
        # An exponential tail: mostly near the top, occasionally far down or past the cut-off.
        targets.append((rng.expovariate(1.0 / (kind.rank_spread[grade - 1] * stretch)), doc))
    targets.sort()

    placed: dict[int, str] = {}
    next_free = 0
    for offset, doc in targets:
        position = max(int(offset), next_free)  # two documents cannot share a rank
        if position >= RANKING_LENGTH:
            break
        placed[position] = doc
        next_free = position + 1

    taken = set(relevant)  # membership only; never iterated, so hash order cannot leak in
    for position in range(RANKING_LENGTH):
        if position not in placed:
            placed[position] = random_doc(rng, taken)
            taken.add(placed[position])
    return [placed[position] for position in range(RANKING_LENGTH)]


def random_doc(rng: random.Random, taken: set[str]) -> str:
    while True:
        candidate = doc_id(rng.randint(1, CORPUS_SIZE))
        if candidate not in taken:
            return candidate


def judged_non_relevant(
    rng: random.Random, ranking: list[str], relevant: dict[str, int]
) -> list[str]:
    """Grade-0 judgements: annotators mostly look at what was shown, i.e. the top of the ranking."""
    shown = [doc for doc in ranking[:10] if doc not in relevant]
    count = min(rng.randint(1, 4), len(shown))
    judged = rng.sample(shown, count)
    if rng.random() < 0.2:  # now and then a pooled doc from another system was judged too
        judged.append(random_doc(rng, set(ranking) | set(relevant)))
    return judged


def log_twice(rng: random.Random, ranking: list[str]) -> list[str]:
    """Mimic a logger bug that records a top document a second time a few ranks later."""
    source = rng.randrange(10)
    copy_at = source + rng.randint(1, 3)
    doubled = [*ranking[:copy_at], ranking[source], *ranking[copy_at:]]
    return doubled[:RANKING_LENGTH]  # the logger still caps the list at 20 entries


def build_record(
    rng: random.Random,
    number: int,
    kind_name: str,
    *,
    labeled: bool,
    nothing_relevant: bool,
    duplicate: bool,
    retriever: str,
    seconds: int,
) -> dict[str, Any]:
    kind = KINDS[kind_name]
    baseline = retriever == BASELINE_RETRIEVER
    # A query the annotators found nothing for has no relevant documents to simulate.
    relevant = {} if nothing_relevant else draw_relevant(rng, kind)
    ranking = simulate_ranking(
        rng,
        kind,
        relevant,
        stretch=BASELINE_RANK_STRETCH if baseline else 1.0,
        extra_miss=BASELINE_EXTRA_MISS if baseline else 0.0,
    )
    if duplicate:
        ranking = log_twice(rng, ranking)

    # Key order follows the production logger; json.dumps keeps insertion order.
    record: dict[str, Any] = {
        "query_id": f"q-{number:04d}",
        "query": query_text(rng, kind_name),
        "query_type": kind_name,
        "retrieved_ids": ranking,
    }
    if labeled:
        grades = dict(relevant)
        grades.update(dict.fromkeys(judged_non_relevant(rng, ranking, relevant), 0))
        # Highest grade first, then by ID: a stable order a reader can scan.
        ordered = sorted(grades.items(), key=lambda item: (-item[1], item[0]))
        record["relevant_ids"] = [doc for doc, grade in ordered if grade >= 1]
        record["relevance_scores"] = dict(ordered)
    record["timestamp"] = (DAY_START + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")
    record["retriever"] = retriever
    return record


def generate(seed: int = SEED) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    names = list(KINDS)
    kinds = rng.choices(names, weights=[KINDS[n].share for n in names], k=QUERY_COUNT)

    indices = range(QUERY_COUNT)
    unlabeled = set(rng.sample(indices, UNLABELED_COUNT))
    labeled = [i for i in indices if i not in unlabeled]
    nothing_relevant = set(rng.sample(labeled, NOTHING_RELEVANT_COUNT))
    duplicates = set(rng.sample(indices, DUPLICATE_COUNT))
    baseline = set(rng.sample(indices, BASELINE_COUNT))
    # Sorted so that query IDs and timestamps rise together, as they would in a real log.
    seconds = sorted(rng.randrange(SECONDS_PER_DAY) for _ in indices)

    return [
        build_record(
            rng,
            i + 1,
            kinds[i],
            labeled=i not in unlabeled,
            nothing_relevant=i in nothing_relevant,
            duplicate=i in duplicates,
            retriever=BASELINE_RETRIEVER if i in baseline else MAIN_RETRIEVER,
            seconds=seconds[i],
        )
        for i in indices
    ]


def main() -> None:
    lines = (json.dumps(record, ensure_ascii=False) + "\n" for record in generate())
    # newline="\n": the same bytes on every platform.
    with OUTPUT.open("w", encoding="utf-8", newline="\n") as handle:
        handle.writelines(lines)
    print(f"wrote {QUERY_COUNT} records to {OUTPUT}")


if __name__ == "__main__":
    main()
