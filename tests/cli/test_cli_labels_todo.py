"""``rankgate labels todo`` end to end: the pairs that decide label-limited cells come first, an
annotator fills them in, ``label import`` stores them, and a second compare resolves the cells with
judged@k where the command said it would be.

The expected pairs are computed here from the records (set arithmetic on the top 10 of each arm),
independently of rankgate."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

from conftest import RunCli, WriteJsonl
from unjudged_ab_data import DEPTH, label_records, unjudged_ab

METRICS = ["-m", "ndcg@10", "--segment-by", "topic", "--no-config"]
# Labels taken away from the baseline's rank-1 document of these queries: an unjudged document
# both arms rank in their top 10, so it moves both and decides nothing.
SHARED_UNJUDGED = ("q3", "q8", "q13")


@pytest.fixture(scope="module")
def ab() -> Any:
    return unjudged_ab(queries=120, seed=5)


@pytest.fixture
def files(write_jsonl: WriteJsonl, ab: Any) -> dict[str, Path]:
    labels = {query: dict(grades) for query, grades in ab.labels.items()}
    for query in SHARED_UNJUDGED:
        first = next(t for t in ab.baseline if t["query_id"] == query)["retrieved_ids"][0]
        labels[query].pop(first)
    return {
        "baseline": write_jsonl(ab.baseline, "baseline.jsonl"),
        "candidate": write_jsonl(ab.surfacing, "candidate.jsonl"),
        "labels": write_jsonl(label_records(labels), "labels.jsonl"),
        "labels_dict": labels,  # type: ignore[dict-item]
    }


def _top(traces: list[dict[str, Any]]) -> dict[str, list[str]]:
    return {t["query_id"]: list(dict.fromkeys(t["retrieved_ids"]))[:DEPTH] for t in traces}


def _decisive(ab: Any, labels: dict[str, dict[str, float]]) -> set[tuple[str, str]]:
    """Unjudged documents in one arm's top 10 and not the other's (every query is in the
    label-limited overall cell here)."""
    base, cand = _top(ab.baseline), _top(ab.surfacing)
    found = set()
    for query, grades in labels.items():
        for doc in set(base[query]) ^ set(cand[query]):
            if doc not in grades:
                found.add((query, doc))
    return found


def _fill(rows: list[dict[str, Any]], truth: dict[str, dict[str, float]]) -> list[dict[str, Any]]:
    """A simulated annotator: the hidden true grade of every listed pair."""
    return [{**row, "grade": truth[row["query_id"]].get(row["document_id"], 0.0)} for row in rows]


def _cells(result_text: str) -> dict[str, dict[str, Any]]:
    report = json.loads(result_text)
    return {
        "overall" if cell["segment"] is None else _group(cell["segment"]): cell
        for cell in report["cells"]
        if cell["metric"] == "ndcg@10"
    }


def _group(segment: Any) -> str:
    if isinstance(segment, dict):
        return f"{segment['field']}={segment['value']}"
    return str(segment)


def test_the_deciding_pairs_come_first_and_judging_them_resolves_the_cells(
    cli: RunCli, files: dict[str, Path], ab: Any, tmp_path: Path
) -> None:
    labels: dict[str, dict[str, float]] = files["labels_dict"]  # type: ignore[assignment]
    decisive = _decisive(ab, labels)
    assert len(decisive) > 100
    shared = {(q, _top(ab.baseline)[q][0]) for q in SHARED_UNJUDGED}
    assert not shared & decisive

    before = cli(
        "compare",
        files["baseline"],
        files["candidate"],
        "--labels",
        files["labels"],
        *METRICS,
        "--format",
        "json",
    )
    assert before.code == 0, before.err
    assert {group: cell["status"] for group, cell in _cells(before.out).items()} == {
        "overall": "label-limited",
        "topic=docs": "label-limited",
        "topic=news": "label-limited",
    }

    todo = tmp_path / "todo.jsonl"
    listed = cli(
        "labels",
        "todo",
        files["baseline"],
        files["candidate"],
        "--labels",
        files["labels"],
        *METRICS,
        "--budget",
        str(len(decisive)),
        "-o",
        todo,
    )
    assert listed.code == 0, listed.err
    rows = [json.loads(line) for line in todo.read_text().splitlines()]
    assert {(r["query_id"], r["document_id"]) for r in rows} == decisive
    assert all(r["reason"] == "decides a label-limited cell" and r["grade"] is None for r in rows)
    assert [r["priority"] for r in rows] == list(range(1, len(rows) + 1))
    cand_top = _top(ab.surfacing)
    for row in rows:
        side, rank = next(iter(row["ranks"].items()))
        assert side == str(files["candidate"])
        assert cand_top[row["query_id"]][rank - 1] == row["document_id"]
    # What the command predicts: the candidate's top 10 fully judged, the cells resolved.
    assert (
        "label-limited cells: 3; the list judges every unjudged document of both arms' top k"
        " in 0, and closes the judged@k gap in 3" in listed.out
    )
    overall = next(line for line in listed.out.splitlines() if "ndcg@10 (overall)" in line)
    predicted = float(overall.split("candidate ")[1].split(" -> ")[1].split("%")[0]) / 100

    # With a larger budget the shared unjudged pairs follow, by rank.
    wider = cli(
        "labels",
        "todo",
        files["baseline"],
        files["candidate"],
        "--labels",
        files["labels"],
        *METRICS,
        "-o",
        tmp_path / "all.jsonl",
    )
    assert wider.code == 0, wider.err
    everything = [json.loads(line) for line in (tmp_path / "all.jsonl").read_text().splitlines()]
    assert {(r["query_id"], r["document_id"]) for r in everything[len(decisive) :]} == shared
    assert all(len(r["ranks"]) == 2 for r in everything[len(decisive) :])

    # The annotator fills the file; label import stores it beside the first labels.
    filled = tmp_path / "filled.jsonl"
    filled.write_text("".join(json.dumps(r) + "\n" for r in _fill(rows, ab.truth)))
    store = f"sqlite:///{tmp_path / 'labels.db'}"
    assert cli("label", "import", files["labels"], "--store", store).code == 0
    imported = cli("label", "import", filled, "--store", store)
    assert imported.code == 0, imported.err
    assert f"{len(rows):,} judgments" in imported.out

    after = cli(
        "compare",
        files["baseline"],
        files["candidate"],
        "--labels",
        store,
        *METRICS,
        "--format",
        "json",
    )
    assert after.code == 0, after.err
    cells = _cells(after.out)
    for group, cell in cells.items():
        assert cell["status"] == "ok", group
        assert cell["flag"] == "improvement", group  # the truth: the candidate is better
    # judged@10 rose as predicted: all but the three shared pairs, which were left out.
    judged = cells["overall"]["candidate_judged"]
    assert judged == pytest.approx(1 - len(SHARED_UNJUDGED) / (120 * DEPTH))
    assert predicted == pytest.approx(judged, abs=0.0005)


def test_filled_csv_and_a_partly_filled_file_import_unchanged(
    cli: RunCli, files: dict[str, Path], ab: Any, tmp_path: Path
) -> None:
    todo = tmp_path / "todo.csv"
    result = cli(
        "labels",
        "todo",
        files["baseline"],
        files["candidate"],
        "--labels",
        files["labels"],
        *METRICS,
        "--budget",
        "30",
        "-o",
        todo,
    )
    assert result.code == 0, result.err
    with todo.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 30 and all(row["grade"] == "" for row in rows)
    # Half graded, half left empty: the empty ones are counted, not refused.
    for row in rows[:15]:
        row["grade"] = str(ab.truth[row["query_id"]].get(row["document_id"], 0.0))
    with todo.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    store = f"sqlite:///{tmp_path / 'labels.db'}"
    imported = cli("label", "import", todo, "--store", store)
    assert imported.code == 0, imported.err
    assert "15 judgments" in imported.out and "15 ungraded" in imported.out


def test_label_studio_tasks_round_trip_through_an_export(
    cli: RunCli, files: dict[str, Path], ab: Any, tmp_path: Path
) -> None:
    tasks_file = tmp_path / "tasks.json"
    result = cli(
        "labels",
        "todo",
        files["baseline"],
        files["candidate"],
        "--labels",
        files["labels"],
        *METRICS,
        "--budget",
        "6",
        "-o",
        tasks_file,
    )
    assert result.code == 0, result.err
    tasks = json.loads(tasks_file.read_text())
    assert len(tasks) == 6 and all(set(task) == {"data"} for task in tasks)
    # What Label Studio exports once annotated: the task's data, its annotations (the latest
    # one counts; a cancelled one does not), here one task left unannotated.
    exported = []
    for number, task in enumerate(tasks):
        data = task["data"]
        grade = ab.truth[data["query_id"]].get(data["document_id"], 0.0)
        annotations = (
            []
            if number == 5
            else [
                {
                    "was_cancelled": False,
                    "updated_at": "2026-12-01T10:00:00Z",
                    "result": [
                        {
                            "from_name": "grade",
                            "type": "choices",
                            "value": {"choices": [str(int(3 - grade))]},
                        }
                    ],
                },
                {
                    "was_cancelled": False,
                    "updated_at": "2026-12-02T10:00:00Z",
                    "result": [
                        {
                            "from_name": "grade",
                            "type": "choices",
                            "value": {"choices": [str(int(grade))]},
                        }
                    ],
                },
                {
                    "was_cancelled": True,
                    "updated_at": "2026-12-03T10:00:00Z",
                    "result": [
                        {"from_name": "grade", "type": "choices", "value": {"choices": ["3"]}}
                    ],
                },
            ]
        )
        exported.append({"id": number + 1, "data": data, "annotations": annotations})
    export = tmp_path / "export.json"
    export.write_text(json.dumps(exported))
    store = f"sqlite:///{tmp_path / 'labels.db'}"
    imported = cli("label", "import", export, "--store", store)
    assert imported.code == 0, imported.err
    assert "5 judgments" in imported.out and "1 ungraded" in imported.out
    import sqlite3

    with sqlite3.connect(tmp_path / "labels.db") as db:
        stored = {
            (q, d): g
            for q, d, g in db.execute("SELECT query_id, document_id, grade FROM rankgate_labels")
        }
    expected = {
        (t["data"]["query_id"], t["data"]["document_id"]): ab.truth[t["data"]["query_id"]].get(
            t["data"]["document_id"], 0.0
        )
        for t in tasks[:5]
    }
    assert stored == expected


def test_a_sample_of_queries_is_stratified_and_seeded(
    cli: RunCli, files: dict[str, Path], tmp_path: Path
) -> None:
    out = tmp_path / "sample.jsonl"
    args = [
        "labels",
        "todo",
        files["candidate"],
        "--labels",
        files["labels"],
        *METRICS,
        "--sample-queries",
        "10",
        "--seed",
        "3",
    ]
    first = cli(*args, "-o", out)
    assert first.code == 0, first.err
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    queries = list(dict.fromkeys(r["query_id"] for r in rows))
    # Topics alternate by query number: 60 docs and 60 news queries, 5 of each sampled. Not every
    # sampled query has an unjudged document, so count the sample as the summary states it.
    assert (
        "sampled 10 queries at random (seed 3; per stratum: news 5, docs 5)" in first.out
        or "sampled 10 queries at random (seed 3; per stratum: docs 5, news 5)" in first.out
    )
    assert all(r["reason"] == "sampled query" and r["sample"] for r in rows)
    again = cli(*args, "-o", tmp_path / "again.jsonl")
    assert again.code == 0
    assert (tmp_path / "again.jsonl").read_text() == out.read_text()
    other = cli(*args[:-1], "4", "-o", tmp_path / "other.jsonl")
    assert other.code == 0
    assert (tmp_path / "other.jsonl").read_text() != out.read_text()
    assert queries  # the candidate surfaces unjudged documents on most queries


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--budget", "0"], "--budget: expected a whole number >= 1"),
        (["--depth", "x"], "--depth: expected a whole number >= 1"),
        (["--format", "csv", "-o", "todo.jsonl"], "names a jsonl file, but --format is csv"),
    ],
)
def test_bad_options_exit_2_with_one_line(
    cli: RunCli,
    files: dict[str, Path],
    extra: list[str],
    message: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    output = [] if "-o" in extra else ["-o", "todo.jsonl"]
    result = cli("labels", "todo", files["candidate"], *extra, *output)
    assert result.code == 2
    assert message in result.err
    assert "Traceback" not in result.err


def test_a_missing_source_exits_2(cli: RunCli, tmp_path: Path) -> None:
    result = cli("labels", "todo", tmp_path / "nope.jsonl", "-o", tmp_path / "t.jsonl")
    assert result.code == 2
    assert "nope.jsonl" in result.err
    assert not (tmp_path / "t.jsonl").exists()


def test_hostile_ids_round_trip_through_csv_and_an_input_is_never_overwritten(
    cli: RunCli, write_jsonl: WriteJsonl, tmp_path: Path
) -> None:
    ids = ["a\rb", "c\nd", 'q"uote', "=1+1", "é,ü", "<script>", "-x", "t\tab"]
    traces = write_jsonl([{"query_id": "q\r1", "retrieved_ids": ids}], "hostile.jsonl")
    out = tmp_path / "out.csv"
    assert cli("labels", "todo", traces, "--no-config", "-o", out).code == 0
    with out.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [row["document_id"] for row in rows] == ids
    assert {row["query_id"] for row in rows} == {"q\r1"}
    for row in rows:
        row["grade"] = "1"
    with out.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    store = f"sqlite:///{tmp_path / 'h.db'}"
    imported = cli("label", "import", out, "--store", store)
    assert imported.code == 0, imported.err
    assert f"{len(ids)} judgments" in imported.out
    refused = cli("labels", "todo", traces, "--no-config", "-o", traces)
    assert refused.code == 2 and "is also an input" in refused.err
    assert traces.read_text().count("\n") == 1  # untouched


def test_text_arrow_cannot_hold_is_a_clear_refusal(cli: RunCli, tmp_path: Path) -> None:
    traces = tmp_path / "surrogate.jsonl"
    traces.write_text('{"query_id": "q", "retrieved_ids": ["\\ud800", "b"]}\n')
    result = cli("labels", "todo", traces, "--no-config", "-o", tmp_path / "t.jsonl")
    assert result.code == 2
    assert "not valid Unicode" in result.err and "Traceback" not in result.err


def test_a_label_studio_export_with_garbage_results_is_read_not_crashed(
    cli: RunCli, tmp_path: Path
) -> None:
    export = tmp_path / "export.json"
    export.write_text(
        json.dumps(
            [
                {"data": {"query_id": "q", "document_id": "d"}, "annotations": [{"result": 5}]},
                {"data": {"query_id": "q", "document_id": "e"}, "annotations": "x"},
                {"data": {"query_id": "q", "document_id": "f"}},
            ]
        )
    )
    result = cli("label", "import", export, "--store", f"sqlite:///{tmp_path / 'x.db'}")
    assert result.code == 0, result.err
    assert "3 ungraded" in result.out


def test_pairs_of_queries_with_their_own_labels_get_a_note(
    cli: RunCli, write_jsonl: WriteJsonl, tmp_path: Path
) -> None:
    traces = write_jsonl(
        [{"query_id": "q", "retrieved_ids": ["a", "b"], "relevance_scores": {"a": 1}}]
    )
    result = cli("labels", "todo", traces, "--no-config", "-o", tmp_path / "t.jsonl")
    assert result.code == 0
    assert "1 listed pair belongs to queries whose trace records carry labels" in result.out
