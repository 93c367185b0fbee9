"""A saved baseline (``eval --save-baseline main.rgb``) as the baseline side of ``compare``: the
same cells, flags and p-values as a compare against the baseline's traces, and a refusal when the
two sides were scored differently."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ab_data import AB_METRICS, ab_traces
from rankgate.cli import main

METRIC_ARGS = [arg for metric in AB_METRICS for arg in ("-m", metric)]
COMMON = [*METRIC_ARGS, "--segment-by", "query_type", "--no-config", "--no-progress"]


def _run(capsys: pytest.CaptureFixture[str], *args: Any) -> tuple[int, str, str]:
    capsys.readouterr()
    try:
        code = main([str(arg) for arg in args])
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else 2
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _write(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
    return path


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    baseline, regressed, control = ab_traces(queries=300, seed=7)
    labels = [
        {"query_id": trace["query_id"], "relevance_scores": trace["relevance_scores"]}
        for trace in baseline
    ]
    unlabeled = [
        {key: value for key, value in trace.items() if key != "relevance_scores"}
        for trace in baseline
    ]
    return {
        "baseline": _write(tmp_path / "baseline.jsonl", unlabeled),
        "regressed": _write(tmp_path / "regressed.jsonl", regressed),
        "control": _write(tmp_path / "control.jsonl", control),
        "labels": _write(tmp_path / "labels.jsonl", labels),
        "dir": tmp_path,
    }


def _save(capsys: Any, files: dict[str, Path], *extra: Any, name: str = "main.rgb") -> Path:
    path = files["dir"] / name
    code, _, err = _run(
        capsys, "eval", files["baseline"], "--labels", files["labels"], *COMMON, *extra,
        "--save-baseline", path,
    )  # fmt: skip
    assert code in (0, 1), err
    assert f"saved to {path}" in err
    return path


def _cells(text: str) -> dict[tuple[str, str], dict[str, Any]]:
    report = json.loads(text)
    return {
        (cell["metric"], json.dumps(cell["segment"], sort_keys=True)): cell
        for cell in report["cells"]
    }


@pytest.mark.parametrize("pairing", ["paired", "unpaired"])
def test_a_saved_baseline_flags_what_its_traces_flag(
    capsys: pytest.CaptureFixture[str], files: dict[str, Path], pairing: str
) -> None:
    saved = _save(capsys, files)
    args = [files["regressed"], "--labels", files["labels"], *COMMON, "--format", "json",
            "--pairing", pairing]  # fmt: skip
    code_saved, against_saved, err = _run(capsys, "compare", saved, *args)
    code_traces, against_traces, _ = _run(capsys, "compare", files["baseline"], *args)
    assert code_saved == code_traces, err
    mine, theirs = _cells(against_saved), _cells(against_traces)
    assert mine.keys() == theirs.keys()
    flagged = {key for key, cell in theirs.items() if cell["flag"]}
    if pairing == "paired":
        # The injected regression: the NDCG family in multi_hop (and overall, which holds it).
        assert {key[0] for key in flagged} == {"ndcg@5", "ndcg@10"}
        assert all("multi_hop" in key[1] or key[1] == "null" for key in flagged)
        assert any("multi_hop" in key[1] for key in flagged)
    for key, cell in theirs.items():
        other = mine[key]
        assert (other["flag"], other["status"]) == (cell["flag"], cell["status"]), key
        for name in ("p_value", "p_adjusted", "delta", "baseline_mean", "candidate_mean"):
            assert other[name] == pytest.approx(cell[name], abs=1e-12, rel=0), (key, name)
        assert other["interval"] == pytest.approx(cell["interval"], abs=1e-12, rel=0)
        assert other["queries"] == cell["queries"]


def test_a_baseline_of_another_relevance_threshold_is_refused(
    capsys: pytest.CaptureFixture[str], files: dict[str, Path]
) -> None:
    saved = _save(capsys, files, "--relevance-threshold", "2")
    code, out, err = _run(capsys, "compare", saved, files["control"], "--labels", files["labels"],
                          *COMMON)  # fmt: skip
    assert code == 2, out
    assert "relevance threshold 2.0" in err and "1.0" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_other_labels_are_refused_and_named(
    capsys: pytest.CaptureFixture[str], files: dict[str, Path]
) -> None:
    saved = _save(capsys, files)
    records = [json.loads(line) for line in files["labels"].read_text().splitlines()]
    first = records[4]
    first["relevance_scores"] = {doc: 3 for doc in first["relevance_scores"]}
    changed = _write(files["dir"] / "changed.jsonl", records)
    code, out, err = _run(capsys, "compare", saved, files["control"], "--labels", changed,
                          *COMMON)  # fmt: skip
    assert code == 2, out
    assert "1 of the 300 paired queries have other labels" in err
    assert repr(first["query_id"]) in err


def test_a_metric_or_segment_the_baseline_lacks_is_refused(
    capsys: pytest.CaptureFixture[str], files: dict[str, Path]
) -> None:
    saved = _save(capsys, files)
    code, _, err = _run(capsys, "compare", saved, files["control"], "--labels", files["labels"],
                        *COMMON, "-m", "map")  # fmt: skip
    assert code == 2
    assert "holds no values of map" in err and "-m map" in err
    code, _, err = _run(capsys, "compare", saved, files["control"], "--labels", files["labels"],
                        *METRIC_ARGS, "--no-config", "--segment-by", "topic")  # fmt: skip
    assert code == 2
    assert "not segmented by topic" in err


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"not parquet at all", "not a baseline file"),
        (None, "not a rankgate baseline"),
    ],
)
def test_a_file_that_is_not_a_baseline_is_one_line(
    capsys: pytest.CaptureFixture[str], files: dict[str, Path], content: bytes | None, message: str
) -> None:
    path = files["dir"] / "fake.rgb"
    if content is None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.table({"query_id": ["q"]}), path)
    else:
        path.write_bytes(content)
    code, _, err = _run(capsys, "compare", path, files["control"], *COMMON)
    assert code == 2
    assert message in err and "fake.rgb" in err
    assert "Traceback" not in err


def test_save_baseline_needs_the_rgb_name(
    capsys: pytest.CaptureFixture[str], files: dict[str, Path]
) -> None:
    code, _, err = _run(capsys, "eval", files["baseline"], "--labels", files["labels"], *COMMON,
                        "--save-baseline", files["dir"] / "main.parquet")  # fmt: skip
    assert code == 2
    assert "name it *.rgb" in err


def test_pull_request_markdown_from_the_command_line(
    capsys: pytest.CaptureFixture[str], files: dict[str, Path]
) -> None:
    saved = _save(capsys, files)
    comment = files["dir"] / "comment.md"
    code, _, err = _run(capsys, "compare", saved, files["regressed"], "--labels", files["labels"],
                        *COMMON, "--format", "markdown-pr", "-o", comment)  # fmt: skip
    assert code == 1, err
    text = comment.read_text()
    assert text.startswith("**rankgate compare: FAIL**")
    assert "#### Regressions" in text and "<details>" in text
    code, out, _ = _run(capsys, "eval", files["baseline"], "--labels", files["labels"], *COMMON,
                        "--gate", "ndcg@10>=0.99", "--format", "markdown-pr")  # fmt: skip
    assert code == 1
    assert out.startswith("**rankgate eval: FAIL**")


def test_labels_todo_refuses_a_saved_baseline(
    capsys: pytest.CaptureFixture[str], files: dict[str, Path]
) -> None:
    saved = _save(capsys, files)
    code, _, err = _run(capsys, "labels", "todo", saved, files["control"], "-o",
                        files["dir"] / "todo.jsonl", "--no-config")  # fmt: skip
    assert code == 2
    assert "holds values, not rankings" in err


@pytest.mark.parametrize(
    "tamper", ["nan", "null_value", "scored_null", "settings", "segment_null", "query_int"]
)
def test_a_tampered_baseline_is_refused_in_one_line(
    capsys: pytest.CaptureFixture[str], files: dict[str, Path], tamper: str
) -> None:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    saved = _save(capsys, files)
    table = pq.read_table(saved)
    meta = dict(table.schema.metadata)
    if tamper == "nan":
        column = next(n for n in table.schema.names if n.startswith("metric:"))
        values = table.column(column).to_numpy().copy()
        values[0] = np.nan
        table = table.set_column(table.schema.get_field_index(column), column, pa.array(values))
    elif tamper == "null_value":
        column = next(n for n in table.schema.names if n.startswith("metric:"))
        values = table.column(column).to_pylist()
        values[0] = None
        table = table.set_column(table.schema.get_field_index(column), column, pa.array(values))
    elif tamper == "scored_null":
        at = table.schema.get_field_index("scored")
        table = table.set_column(at, "scored", pa.array([None] * table.num_rows, pa.bool_()))
    elif tamper == "settings":
        data = json.loads(meta[b"rankgate.baseline"])
        data["settings"] = []
        meta[b"rankgate.baseline"] = json.dumps(data).encode()
    elif tamper == "segment_null":
        at = table.schema.get_field_index("segment:query_type")
        table = table.set_column(
            at, "segment:query_type", pa.array([None] * table.num_rows, pa.large_string())
        )
    else:
        table = table.set_column(0, "query_id", pa.array(range(table.num_rows), pa.int64()))
    tampered = files["dir"] / "tampered.rgb"
    pq.write_table(table.replace_schema_metadata(meta), tampered)
    code, _, err = _run(capsys, "compare", tampered, files["control"], "--labels", files["labels"],
                        *COMMON)  # fmt: skip
    assert code == 2, err
    assert "tampered.rgb" in err and len(err.strip().splitlines()) == 1


def test_a_candidate_without_labels_and_an_input_as_target_are_refused(
    capsys: pytest.CaptureFixture[str], files: dict[str, Path]
) -> None:
    saved = _save(capsys, files)
    code, _, err = _run(capsys, "compare", saved, files["control"], *COMMON)
    assert code == 2, err
    assert "Traceback" not in err and "internal error" not in err
    code, _, err = _run(capsys, "eval", files["baseline"], "--labels", files["labels"], *COMMON,
                        "--save-baseline", saved, "--input-format", "json")  # fmt: skip
    same = files["dir"] / "same.rgb"
    same.write_bytes(files["baseline"].read_bytes())
    code, _, err = _run(capsys, "eval", same, "--input-format", "json", "--labels",
                        files["labels"], *COMMON, "--save-baseline", same)  # fmt: skip
    assert code == 2 and "is also an input" in err


def test_auto_pairing_counts_the_queries_the_baseline_read_without_labels(
    capsys: pytest.CaptureFixture[str], files: dict[str, Path]
) -> None:
    # 120 of the 300 queries labeled; the candidate ranks queries 100 to 299. Against the traces,
    # 200 of the smaller side's 200 queries are shared, so auto pairs; a baseline file that kept
    # only its 120 scored queries would share 20 of 120 and switch to the unpaired design.
    records = [json.loads(line) for line in files["labels"].read_text().splitlines()]
    partial = _write(files["dir"] / "partial.jsonl", records[:120])
    later = [json.loads(line) for line in files["regressed"].read_text().splitlines()][100:]
    candidate = _write(files["dir"] / "later.jsonl", later)
    saved = files["dir"] / "partial.rgb"
    code, _, err = _run(capsys, "eval", files["baseline"], "--labels", partial, *COMMON,
                        "--save-baseline", saved)  # fmt: skip
    assert code in (0, 1), err
    args = [candidate, "--labels", partial, *COMMON, "--format", "json"]
    code_saved, against_saved, err = _run(capsys, "compare", saved, *args)
    code_traces, against_traces, _ = _run(capsys, "compare", files["baseline"], *args)
    assert code_saved == code_traces, err
    mine, theirs = json.loads(against_saved), json.loads(against_traces)
    result_saved, result_traces = mine["results"][0], theirs["results"][0]
    assert result_saved["pairing"] == result_traces["pairing"]
    assert result_saved["design"] == result_traces["design"]
    assert result_traces["design"]["design"] == "paired"
    assert result_traces["pairing"]["paired"] == 200
    assert mine["read"][str(saved)] == theirs["read"][str(files["baseline"])] == 300
    cells = _cells(against_saved)
    assert cells.keys() == _cells(against_traces).keys()
    for key, cell in _cells(against_traces).items():
        assert cells[key]["queries"] == cell["queries"], key
        assert cells[key]["p_value"] == pytest.approx(cell["p_value"], abs=1e-12, rel=0), key
    assert max(cell["queries"] for cell in cells.values()) == 20


def test_labels_the_baseline_lacked_are_refused(
    capsys: pytest.CaptureFixture[str], files: dict[str, Path]
) -> None:
    records = [json.loads(line) for line in files["labels"].read_text().splitlines()]
    partial = _write(files["dir"] / "partial.jsonl", records[:120])
    saved = files["dir"] / "partial.rgb"
    code, _, err = _run(capsys, "eval", files["baseline"], "--labels", partial, *COMMON,
                        "--save-baseline", saved)  # fmt: skip
    assert code in (0, 1), err
    code, out, err = _run(capsys, "compare", saved, files["control"], "--labels",
                          files["labels"], *COMMON)  # fmt: skip
    assert code == 2, out
    assert "180 paired queries the baseline read without labels" in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (["--engine", "spark"], "--engine spark does not apply"),
        (["--unjudged-pairs", "pairs.csv"], "keeps no rankings"),
        (["--qrels", "qrels.txt"], "--qrels does not apply"),
    ],
)
def test_what_a_saved_baseline_cannot_serve_is_said_first(
    capsys: pytest.CaptureFixture[str], files: dict[str, Path], extra: list[str], expected: str
) -> None:
    saved = _save(capsys, files)
    code, out, err = _run(capsys, "compare", saved, files["control"], *COMMON, *extra)
    assert code == 2, out
    assert expected in err and len(err.strip().splitlines()) == 1
    code, out, err = _run(capsys, "compare", files["control"], saved, *COMMON)
    assert code == 2, out
    assert "it goes first" in err
