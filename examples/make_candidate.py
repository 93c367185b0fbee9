"""Make ``candidate.jsonl``: the same day's queries as a new re-ranker would have answered them.

The candidate is derived from ``traces.jsonl`` with a fixed seed, so it never changes unless this
script does. It is built to show what ``rankgate compare`` finds:

* on ``factual`` queries the re-ranker moves the best-graded retrieved document to rank 1 (a real
  improvement);
* on ``multi_hop`` queries it pushes every relevant document but the first below rank 5 (a real
  regression on the hardest, rarest type);
* elsewhere it swaps two neighbouring documents now and then (noise with no direction);
* its logger dropped 6 queries and logged 3 the baseline never saw, and it records no labels: the
  labels come from the baseline's records, joined by ``query_id``.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SEED = 20261203


def rerank(record: dict[str, Any], rng: random.Random) -> list[str]:
    ranking = list(record["retrieved_ids"])
    grades = record.get("relevance_scores") or {}
    if record["query_type"] == "factual" and grades:
        best = max(ranking, key=lambda doc: grades.get(doc, 0))
        if grades.get(best, 0) > 0:
            ranking.remove(best)
            ranking.insert(0, best)
    elif record["query_type"] == "multi_hop" and grades:
        relevant = [doc for doc in ranking if grades.get(doc, 0) >= 1]
        demoted = relevant[1:]
        kept = [doc for doc in ranking if doc not in demoted]
        ranking = kept[:5] + demoted + kept[5:]
    elif rng.random() < 0.5:
        position = rng.randrange(1, len(ranking) - 1)
        ranking[position], ranking[position + 1] = ranking[position + 1], ranking[position]
    return ranking


def main() -> None:
    rng = random.Random(SEED)
    lines = (HERE / "traces.jsonl").read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines]
    dropped = set(rng.sample(range(len(records)), 6))
    out = []
    for index, record in enumerate(records):
        if index in dropped:
            continue
        out.append(
            {
                "query_id": record["query_id"],
                "retrieved_ids": rerank(record, rng),
                "timestamp": record["timestamp"],
                "retriever": "hybrid-v3-rerank",
            }
        )
    for extra in range(3):
        out.append(
            {
                "query_id": f"q-new-{extra + 1}",
                "retrieved_ids": [f"doc-{rng.randrange(1, 5001):05d}" for _ in range(20)],
                "timestamp": "2026-11-30T23:59:00Z",
                "retriever": "hybrid-v3-rerank",
            }
        )
    with (HERE / "candidate.jsonl").open("w", encoding="utf-8", newline="\n") as handle:
        handle.writelines(json.dumps(item, ensure_ascii=False) + "\n" for item in out)
    print(f"wrote {len(out)} records to {HERE / 'candidate.jsonl'}")


if __name__ == "__main__":
    main()
