"""Make ``labels.jsonl``: the annotators' judgments of ``traces.jsonl`` as an annotation tool exports
them, one (query, document, grade) per line, for ``rankgate label import``.

They are the same grades the trace records carry (``relevant_ids`` count as grade 1 unless
``relevance_scores`` grades them), so scoring the store gives the file's numbers. The judging
happened the day after the queries, in two batches.
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    lines = []
    for line in (HERE / "traces.jsonl").read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        if "relevant_ids" not in record and "relevance_scores" not in record:
            continue  # never judged
        grades = dict.fromkeys(record.get("relevant_ids") or (), 1)
        grades.update(record.get("relevance_scores") or {})
        number = int(record["query_id"].split("-")[1])
        batch = "batch-a" if number % 2 else "batch-b"
        stamp = "2026-12-01T09:00:00Z" if number % 2 else "2026-12-01T15:30:00Z"
        for document_id, grade in grades.items():
            lines.append(
                json.dumps(
                    {
                        "query_id": record["query_id"],
                        "document_id": document_id,
                        "grade": grade,
                        "labeled_at": stamp,
                        "source": batch,
                    }
                )
            )
    (HERE / "labels.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
