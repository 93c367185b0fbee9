"""Document-level scoring from chunk IDs (``--doc-id``, ``[ids]``, ``Settings.doc_ids``).

The oracle for the values is trec_eval (pytrec_eval-terrier) run on the document-level rankings
this file computes by itself, in plain Python: each chunk ID named by the part before its first
``#``, each document kept at its first occurrence. The counts (``chunks_collapsed``,
``duplicates_dropped``) are counted here the same plain way. Label aggregation by the highest grade
is checked on a case worked out by hand.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from jsonschema import Draft202012Validator

import rankgate
from rankgate import Settings
from rankgate.cli import main
from rankgate.doc_id_mismatch import detect_mismatch
from rankgate.doc_ids import (
    DocIdMapping,
    map_label_table,
    map_labels,
    map_rankings,
    parse_doc_id_option,
)
from rankgate.errors import ConfigError, InputError
from rankgate.report.json_report import eval_schema

pytrec_eval = pytest.importorskip("pytrec_eval")

TOLERANCE = 1e-9
# rankgate metric -> trec_eval measure (trec_eval's ndcg gains are linear in the grade).
PAIRS = [
    ("ndcg(gain=linear)@10", "ndcg_cut_10"),
    ("precision@5", "P_5"),
    ("recall@10", "recall_10"),
    ("map", "map"),
    ("mrr", "recip_rank"),
]
METRICS = [metric for metric, _ in PAIRS]
MEASURES = {"ndcg_cut.10", "P.5", "recall.10", "map", "recip_rank"}
METRIC_ARGS = [arg for metric in METRICS for arg in ("-m", metric)]
SUGGESTION = "--doc-id '#'"

Records = list[dict[str, Any]]


# --------------------------------------------------------------------------------------------
# The data and the independent oracle


def _chunk_records(seed: int, n_queries: int = 80) -> Records:
    """Rankings of chunk IDs ``d{q}_{i}#c{n}``: 1-4 chunks per document, all of a ranking's chunks
    shuffled (so a document's chunks are mostly not adjacent), some IDs repeated verbatim later
    in the ranking; labels graded 0-3 per document, some of them on documents never retrieved,
    every query with a grade >= 1."""
    rng = np.random.default_rng(seed)
    records = []
    for q in range(n_queries):
        documents = [f"d{q}_{i}" for i in range(40)]
        retrieved = [documents[i] for i in rng.permutation(40)[: int(rng.integers(1, 16))]]
        chunks = [
            f"{doc}#c{n}"
            for doc in retrieved
            for n in rng.choice(30, size=int(rng.integers(1, 5)), replace=False)
        ]
        chunks = [chunks[i] for i in rng.permutation(len(chunks))]
        for _ in range(int(rng.integers(0, 3))):
            at = int(rng.integers(0, len(chunks)))
            chunks.insert(int(rng.integers(at + 1, len(chunks) + 1)), chunks[at])
        labeled = [documents[i] for i in rng.permutation(40)[: int(rng.integers(3, 12))]]
        grades = {doc: int(rng.integers(0, 4)) for doc in labeled}
        grades[labeled[0]] = max(grades[labeled[0]], 1)
        records.append({"query_id": f"q{q}", "retrieved_ids": chunks, "relevance_scores": grades})
    return records


def _document(chunk_id: str) -> str:
    before, found, _ = chunk_id.partition("#")
    return before if found and before else chunk_id


def _collapse(ids: list[str]) -> list[str]:
    """Each document once, at its first chunk's place."""
    return list(dict.fromkeys(_document(chunk_id) for chunk_id in ids))


def _removed(ids: list[str]) -> tuple[int, int]:
    """(later chunks of an already ranked document, verbatim repeats of an ID) in one ranking."""
    seen_ids: set[str] = set()
    seen_documents: set[str] = set()
    collapsed = repeated = 0
    for chunk_id in ids:
        if chunk_id in seen_ids:
            repeated += 1
        elif _document(chunk_id) in seen_documents:
            collapsed += 1
        seen_ids.add(chunk_id)
        seen_documents.add(_document(chunk_id))
    return collapsed, repeated


def _document_records(records: Records) -> Records:
    return [{**r, "retrieved_ids": _collapse(r["retrieved_ids"])} for r in records]


def _trec(document_records: Records) -> dict[str, dict[str, float]]:
    # trec_eval ranks by score: distinct falling scores keep each ranking's order.
    run = {
        r["query_id"]: {
            doc: float(len(r["retrieved_ids"]) - i) for i, doc in enumerate(r["retrieved_ids"])
        }
        for r in document_records
    }
    qrels = {r["query_id"]: dict(r["relevance_scores"]) for r in document_records}
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, MEASURES, relevance_level=1)
    result: dict[str, dict[str, float]] = evaluator.evaluate(run)
    return result


def _assert_trec_equal(rows: list[dict[str, Any]], expected: dict[str, dict[str, float]]) -> None:
    ours = {row["query_id"]: row for row in rows}
    assert set(ours) == set(expected)
    for query_id, row in ours.items():
        for metric, measure in PAIRS:
            theirs = expected[query_id][measure]
            assert math.isclose(row[metric], theirs, rel_tol=0, abs_tol=TOLERANCE), (
                f"{query_id} {metric}: rankgate {row[metric]!r} != trec_eval {measure} {theirs!r}"
            )


def _jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def records() -> Records:
    data = _chunk_records(17)
    # The data must hold what the test is about.
    assert any(_removed(r["retrieved_ids"])[0] for r in data)
    assert sum(_removed(r["retrieved_ids"])[1] for r in data) >= 10
    assert any(
        _document(a) == _document(b) and a != b
        for r in data
        for a, between, b in zip(
            r["retrieved_ids"], r["retrieved_ids"][1:], r["retrieved_ids"][2:], strict=False
        )
        if _document(between) != _document(a)
    ), "no document's chunks are split by another document's"
    return data


@pytest.fixture(scope="module")
def expected(records: Records) -> dict[str, dict[str, float]]:
    return _trec(_document_records(records))


@dataclass
class Run:
    code: int
    out: str
    err: str

    def report(self) -> dict[str, Any]:
        assert self.code in (0, 1), self.err
        parsed: dict[str, Any] = json.loads(self.out)
        return parsed

    def assert_one_line_error(self, *parts: str) -> None:
        assert self.code == 2, (self.code, self.out, self.err)
        lines = self.err.strip().splitlines()
        assert len(lines) == 1, self.err
        assert lines[0].startswith("rankgate: error: "), self.err
        assert "Traceback" not in self.err + self.out
        for part in parts:
            assert part in lines[0], (part, lines[0])


@pytest.fixture
def rankgate_cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., Run]:
    """``rankgate ARGS`` in-process; a SystemExit becomes the exit code."""

    def run(*args: object) -> Run:
        capsys.readouterr()
        try:
            code = main([str(arg) for arg in args])
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else 2
        captured = capsys.readouterr()
        return Run(code, captured.out, captured.err)

    return run


def _subprocess(*args: object, stdin: bytes, cwd: Path) -> Run:
    proc = subprocess.run(
        [sys.executable, "-m", "rankgate", *map(str, args)],
        input=stdin,
        capture_output=True,
        cwd=cwd,
        timeout=120,
    )
    return Run(proc.returncode, proc.stdout.decode(), proc.stderr.decode())


def _per_query_json(run: Callable[..., Run], *args: object) -> dict[str, Any]:
    return run(
        "eval", *args, *METRIC_ARGS, "--per-query", "--format", "json", "--no-config"
    ).report()


def _rows(evaluation: rankgate.Evaluation) -> list[dict[str, Any]]:
    return evaluation.per_query()


# --------------------------------------------------------------------------------------------
# (a) The done-when: chunk rankings with --doc-id '#' score as trec_eval on the documents


def test_cli_chunk_rankings_equal_trec_eval_on_the_documents(
    tmp_path: Path,
    records: Records,
    expected: dict[str, dict[str, float]],
    rankgate_cli: Callable[..., Run],
) -> None:
    path = _jsonl(tmp_path / "chunks.jsonl", records)
    report = _per_query_json(rankgate_cli, path, "--doc-id", "#")
    _assert_trec_equal(report["per_query"], expected)
    # And the same as the document-level file scored as it is.
    documents = _jsonl(tmp_path / "docs.jsonl", _document_records(records))
    direct = _per_query_json(rankgate_cli, documents)
    assert report["metrics"] == direct["metrics"]
    assert report["per_query"] == direct["per_query"]


def test_api_chunk_rankings_equal_trec_eval_on_the_documents(
    records: Records, expected: dict[str, dict[str, float]]
) -> None:
    evaluation = rankgate.evaluate(
        records, METRICS, settings=Settings(doc_ids=DocIdMapping.separator("#"))
    )
    _assert_trec_equal(_rows(evaluation), expected)
    summary = evaluation.summary
    # (e) counted independently: later chunks of a ranked document, and verbatim repeats.
    counts = [_removed(r["retrieved_ids"]) for r in records]
    assert summary.chunks_collapsed == sum(c for c, _ in counts) > 0
    assert summary.duplicates_dropped == sum(d for _, d in counts) > 0
    assert summary.doc_ids == "#"
    assert not any(SUGGESTION in warning for warning in evaluation.warnings)
    # Not mapped, the same rankings meet no label: the setting is what makes the difference.
    plain = rankgate.evaluate(records, METRICS)
    assert plain.summary.chunks_collapsed == 0 and plain.summary.doc_ids is None
    assert all(value == 0.0 for value in plain.means.values())


def test_json_summary_counts_collapsed_chunks(
    tmp_path: Path, records: Records, rankgate_cli: Callable[..., Run]
) -> None:
    path = _jsonl(tmp_path / "chunks.jsonl", records)
    report = _per_query_json(rankgate_cli, path, "--doc-id", "#")
    # The schema documents both keys (and allows no undocumented ones).
    Draft202012Validator(eval_schema()).validate(report)
    summary = report["summary"]
    counts = [_removed(r["retrieved_ids"]) for r in records]
    assert summary["chunks_collapsed"] == sum(c for c, _ in counts)
    assert summary["duplicates_dropped"] == sum(d for _, d in counts)
    assert summary["doc_ids"] == "#"
    plain = _per_query_json(rankgate_cli, path)["summary"]
    assert plain["chunks_collapsed"] == 0 and plain["doc_ids"] is None


def test_json_array_file_and_slow_rows_take_the_mapping(
    tmp_path: Path,
    records: Records,
    expected: dict[str, dict[str, float]],
    rankgate_cli: Callable[..., Run],
) -> None:
    """A JSON array is read through the validator; so is a JSON Lines row holding an ID that is
    not valid UTF-8 (a lone surrogate escape, here on a grade-0 label of a document nobody
    retrieved, which changes no value). Both are mapped as the columnar rows are."""
    mixed = [dict(r) for r in records]
    for r in mixed[::7]:
        r["relevance_scores"] = {**r["relevance_scores"], "\udcff#c1": 0}
    path = tmp_path / "chunks.json"
    path.write_text(json.dumps(records), encoding="utf-8")
    report = _per_query_json(rankgate_cli, path, "--doc-id", "#")
    _assert_trec_equal(report["per_query"], expected)
    lines = _jsonl(tmp_path / "mixed.jsonl", mixed)
    mapping = DocIdMapping.separator("#")
    evaluation = rankgate.evaluate(lines, METRICS, settings=Settings(doc_ids=mapping))
    _assert_trec_equal(_rows(evaluation), expected)
    collapsed = sum(_removed(r["retrieved_ids"])[0] for r in records)
    assert evaluation.summary.chunks_collapsed == collapsed


# --------------------------------------------------------------------------------------------
# (b) Labels per chunk aggregate to their document by the highest grade


def test_chunk_labels_take_their_documents_highest_grade() -> None:
    """Ranking a#1 b#1 a#2 c#1; grades a#1=0 a#2=2 b#1=1 b#2=3 c#9=0, d=1 and d#1=2 (d: a direct
    label and a chunk label). Documents: a=2, b=3, c=0, d=2; ranked a b c; relevant (>= 1) a b d.

    ndcg(gain=linear)@3: DCG = 2/1 + 3/log2(3) + 0; ideal grades 3 2 2: 3 + 2/log2(3) + 2/2.
    precision@3 = 2/3, recall@3 = 2/3, AP = (1/1 + 2/2)/3 = 2/3, RR = 1.
    At threshold 3 only b is relevant: RR = 1/2, AP = 1/2 (a's chunk a#1 has grade 0, but a#2's
    2 is what a gets; nothing reaches 3 but b).
    """
    record = {
        "query_id": "q",
        "retrieved_ids": ["a#1", "b#1", "a#2", "c#1"],
        "relevance_scores": {"a#1": 0, "a#2": 2, "b#1": 1, "b#2": 3, "c#9": 0, "d": 1, "d#1": 2},
    }
    metrics = ["ndcg(gain=linear)@3", "precision@3", "recall@3", "map", "mrr"]
    mapping = DocIdMapping.separator("#")
    row = _rows(rankgate.evaluate([record], metrics, settings=Settings(doc_ids=mapping)))[0]
    log3 = math.log2(3)
    hand = {
        "ndcg(gain=linear)@3": (2 + 3 / log3) / (3 + 2 / log3 + 1),
        "precision@3": 2 / 3,
        "recall@3": 2 / 3,
        "map": 2 / 3,
        "mrr": 1.0,
    }
    for metric, value in hand.items():
        assert math.isclose(row[metric], value, rel_tol=0, abs_tol=TOLERANCE), metric
    strict = rankgate.evaluate(
        [record], ["mrr", "map"], settings=Settings(doc_ids=mapping, relevance_threshold=3)
    )
    assert strict.per_query()[0]["mrr"] == pytest.approx(1 / 2, abs=TOLERANCE)
    assert strict.per_query()[0]["map"] == pytest.approx(1 / 2, abs=TOLERANCE)
    grades = pa.array(
        [list(record["relevance_scores"].items())], pa.map_(pa.string(), pa.float64())
    )
    assert map_labels(grades, mapping).to_pylist() == [
        [("a", 2.0), ("b", 3.0), ("c", 0.0), ("d", 2.0)]
    ]


def test_label_table_keeps_the_stamp_of_the_winning_judgment() -> None:
    """d's grade 2 came from d#2 (2024); among equal grades the most recent stamp wins (e)."""
    scores = pa.array(
        [[("d#1", 1.0), ("d#2", 2.0), ("e#1", 1.0), ("e#2", 1.0)]],
        pa.map_(pa.string(), pa.float64()),
    )
    stamps = pa.array(
        [
            [
                ("d#1", 1_800_000_000),
                ("d#2", 1_700_000_000),
                ("e#1", 1_600_000_000),
                ("e#2", 1_650_000_000),
            ]
        ],
        pa.map_(pa.string(), pa.timestamp("s", tz="UTC")),
    )
    table = pa.table({"query_id": ["q"], "relevance_scores": scores, "labeled_at": stamps})
    mapped = map_label_table(table, DocIdMapping.separator("#"))
    assert mapped.column("relevance_scores").to_pylist() == [[("d", 2.0), ("e", 1.0)]]
    stamped = {key: value.timestamp() for key, value in mapped.column("labeled_at").to_pylist()[0]}
    assert stamped == {"d": 1_700_000_000, "e": 1_650_000_000}


def test_map_rankings_by_hand() -> None:
    ranked, collapsed = map_rankings(
        pa.array([["a#1", "b", "a#2", "a#1", "b#1"], [], None, ["#c1", "#c1", "x#"]]),
        DocIdMapping.separator("#"),
    )
    # a#1 repeated verbatim stays (the join drops it as a duplicate); a#2 and b#1 collapse.
    # '#c1' has an empty part before '#': it is no document and stays itself; 'x#' is x.
    assert ranked.to_pylist() == [["a", "b", "a"], [], None, ["#c1", "#c1", "x"]]
    assert collapsed.tolist() == [2, 0, 0, 0]


# --------------------------------------------------------------------------------------------
# (c) A regex and mapping files give what the separator gives


def _mapping_pairs(records: Records) -> list[tuple[str, str]]:
    chunks = dict.fromkeys(c for r in records for c in r["retrieved_ids"])
    return [(chunk, _document(chunk)) for chunk in chunks]


@pytest.mark.parametrize("form", ["csv", "parquet", "jsonl", "regex", "tsv-default-columns"])
def test_regex_and_mapping_files_equal_the_separator(
    tmp_path: Path, records: Records, rankgate_cli: Callable[..., Run], form: str
) -> None:
    path = _jsonl(tmp_path / "chunks.jsonl", records)
    pairs = _mapping_pairs(records)
    if form == "regex":
        rule = r"re:^(.+)#c[0-9]+$"
    elif form == "csv":
        lines = ["passage,document"] + [f"{c},{d}" for c, d in pairs]
        (tmp_path / "map.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
        rule = f"map:{tmp_path / 'map.csv'},passage,document"
    elif form == "tsv-default-columns":
        lines = ["doc_id\tchunk_id"] + [f"{d}\t{c}" for c, d in pairs]
        (tmp_path / "map.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
        rule = f"map:{tmp_path / 'map.tsv'}"
    elif form == "parquet":
        table = pa.table({"passage": [c for c, _ in pairs], "document": [d for _, d in pairs]})
        pq.write_table(table, tmp_path / "map.parquet")
        rule = f"map:{tmp_path / 'map.parquet'},passage,document"
    else:
        _jsonl(
            tmp_path / "map.jsonl", [{"passage": c, "document": d, "extra": 1} for c, d in pairs]
        )
        rule = f"map:{tmp_path / 'map.jsonl'},passage,document"
    separator = _per_query_json(rankgate_cli, path, "--doc-id", "#")
    mapped = _per_query_json(rankgate_cli, path, "--doc-id", rule)
    assert mapped["per_query"] == separator["per_query"]
    assert mapped["summary"]["chunks_collapsed"] == separator["summary"]["chunks_collapsed"]
    assert mapped["summary"]["duplicates_dropped"] == separator["summary"]["duplicates_dropped"]


def test_ids_the_rule_does_not_cover_stay_themselves() -> None:
    """A mapping file that lists some chunks only, a regex that matches some IDs only: the rest
    are scored as they are (here: the document-level IDs of the labels)."""
    mapping = DocIdMapping.regex(r"^(doc[0-9]+)_part[0-9]+$")
    assert mapping.documents_of(
        pa.array(["doc1_part2", "doc1", "doc1_partX", "x_part1"])
    ).to_pylist() == [
        "doc1",
        "doc1",
        "doc1_partX",
        "x_part1",
    ]
    # An empty group is no document either.
    empty = DocIdMapping.regex(r"^([a-z]*)#")
    assert empty.documents_of(pa.array(["#c1", "a#c1"])).to_pylist() == ["#c1", "a"]


@pytest.mark.parametrize(
    "value",
    ["#", "::", "re:^(.+)#c[0-9]+$", "re:(?P<doc>[^#]+)#", "sep:re:", "sep:map:x", "sep:sep:"],
)
def test_the_command_line_form_reads_back(value: str) -> None:
    mapping = parse_doc_id_option(value)
    assert parse_doc_id_option(str(mapping)) == mapping


# --------------------------------------------------------------------------------------------
# (d) [ids] in rankgate.toml, a relative map path, and --doc-id over it


def test_ids_table_with_a_map_file_relative_to_the_config(
    tmp_path: Path,
    records: Records,
    expected: dict[str, dict[str, float]],
    rankgate_cli: Callable[..., Run],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    project = tmp_path / "project"
    (project / "maps").mkdir(parents=True)
    lines = ["passage,document"] + [f"{c},{d}" for c, d in _mapping_pairs(records)]
    (project / "maps" / "chunks.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    config = project / "rankgate.toml"
    config.write_text(
        '[ids]\ndoc_id_map = "maps/chunks.csv"\nchunk_column = "passage"\ndoc_column = "document"\n',
        encoding="utf-8",
    )
    path = _jsonl(tmp_path / "chunks.jsonl", records)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    args = ("eval", path, *METRIC_ARGS, "--per-query", "--format", "json", "--config", config)
    report = rankgate_cli(*args).report()
    _assert_trec_equal(report["per_query"], expected)
    assert report["summary"]["doc_ids"] == f"map:{project / 'maps' / 'chunks.csv'},passage,document"
    # --doc-id overrides the file: a regex that matches nothing leaves the chunk IDs as they are.
    overridden = rankgate_cli(*args, "--doc-id", "re:^(nothing)$").report()
    assert all(value == 0.0 for value in overridden["metrics"].values())
    assert overridden["summary"]["chunks_collapsed"] == 0


def test_doc_id_option_overrides_a_separator_in_the_config(
    tmp_path: Path,
    records: Records,
    expected: dict[str, dict[str, float]],
    rankgate_cli: Callable[..., Run],
) -> None:
    config = tmp_path / "rankgate.toml"
    config.write_text('[ids]\ndoc_id = "|"\n', encoding="utf-8")
    path = _jsonl(tmp_path / "chunks.jsonl", records)
    args = ("eval", path, *METRIC_ARGS, "--per-query", "--format", "json", "--config", config)
    from_config = rankgate_cli(*args).report()
    assert all(value == 0.0 for value in from_config["metrics"].values())
    assert from_config["summary"]["doc_ids"] == "|"
    _assert_trec_equal(rankgate_cli(*args, "--doc-id", "#").report()["per_query"], expected)


# --------------------------------------------------------------------------------------------
# (f) The mismatch warning


def test_warning_fires_without_doc_id_and_names_the_option(
    tmp_path: Path, records: Records, rankgate_cli: Callable[..., Run]
) -> None:
    path = _jsonl(tmp_path / "chunks.jsonl", records)
    warnings = _per_query_json(rankgate_cli, path)["warnings"]
    suggestions = [w for w in warnings if SUGGESTION in w]
    assert len(suggestions) == 1
    assert "\n" not in suggestions[0]
    assert f"{len(records)} of {len(records)} labeled queries" in suggestions[0]
    console = rankgate_cli("eval", path, "-m", "mrr", "--no-config")
    assert console.code == 0
    assert any(
        line.startswith("warning:") and SUGGESTION in line for line in console.out.splitlines()
    )
    # Following the advice silences it.
    mapped = _per_query_json(rankgate_cli, path, "--doc-id", "#")
    assert not any("--doc-id" in w for w in mapped["warnings"])
    api = rankgate.evaluate(records, ["mrr"])
    assert [w for w in api.warnings if SUGGESTION in w] == suggestions


def test_warning_fires_for_chunk_labels_against_document_rankings(records: Records) -> None:
    """The reverse: rankings name documents, labels name chunks."""
    reverse = [
        {
            "query_id": r["query_id"],
            "retrieved_ids": _collapse(r["retrieved_ids"]),
            "relevance_scores": {
                f"{doc}#c{n}": grade for n, (doc, grade) in enumerate(r["relevance_scores"].items())
            },
        }
        for r in records
    ]
    warnings = [w for w in rankgate.evaluate(reverse, ["mrr"]).warnings if "--doc-id" in w]
    assert len(warnings) == 1
    assert "labeled IDs look like chunks" in warnings[0]


def test_warning_fires_on_binary_labels(tmp_path: Path, records: Records) -> None:
    """Labels as ``relevant_ids`` (no grades) are checked too, from a file and from stdin."""
    binary = [
        {
            "query_id": r["query_id"],
            "retrieved_ids": r["retrieved_ids"],
            "relevant_ids": [doc for doc, grade in r["relevance_scores"].items() if grade >= 1],
        }
        for r in records
    ]
    path = _jsonl(tmp_path / "binary.jsonl", binary)
    warnings = [w for w in rankgate.evaluate(path, ["mrr"]).warnings if "--doc-id" in w]
    assert len(warnings) == 1 and SUGGESTION in warnings[0]
    mapped = rankgate.evaluate(
        path, ["mrr"], settings=Settings(doc_ids=DocIdMapping.separator("#"))
    )
    assert not any("--doc-id" in w for w in mapped.warnings)
    assert mapped.means[rankgate.parse_metric("mrr")] > 0
    retrieved = pa.array([r["retrieved_ids"] for r in binary])
    relevant = pa.array([r["relevant_ids"] for r in binary])
    warning = detect_mismatch(retrieved, relevant)
    assert warning is not None and SUGGESTION in warning


def _differing_ids(records: Records) -> Records:
    """Rankings and labels over disjoint names with the same shape (``web-00017`` against
    ``kb-00099``): nothing meets, but no rule would make it meet."""
    return [
        {
            "query_id": r["query_id"],
            "retrieved_ids": [f"web-{i:05d}" for i in range(len(r["retrieved_ids"]))],
            "relevance_scores": {
                f"kb-{i:05d}": g for i, g in enumerate(r["relevance_scores"].values())
            },
        }
        for r in records
    ]


@pytest.mark.parametrize("case", ["documents", "differing", "differing-plain", "mapped", "too-few"])
def test_warning_stays_silent(case: str, records: Records) -> None:
    settings = Settings()
    if case == "documents":
        data = _document_records(records)
    elif case == "differing":
        data = _differing_ids(records)
    elif case == "differing-plain":
        data = [
            {
                **r,
                "relevance_scores": {
                    f"L{i}": g for i, g in enumerate(r["relevance_scores"].values())
                },
            }
            for r in _document_records(records)
        ]
    elif case == "mapped":
        data, settings = records, Settings(doc_ids=DocIdMapping.separator("#"))
    else:
        data = records[:4]
    evaluation = rankgate.evaluate(data, ["mrr"], settings=settings)
    assert not any("--doc-id" in w for w in evaluation.warnings), evaluation.warnings


def test_detection_reads_only_the_ids() -> None:
    """detect_mismatch on its own: a separator that both sides hold proves nothing; a chunk suffix
    (``_chunk_3``) is suggested as a regex when documents' own names hold the separator."""
    n = 8
    retrieved = pa.array([[f"my_doc_{q}_chunk_{c}" for c in range(3)] for q in range(n)])
    grades = pa.array(
        [[(f"my_doc_{q}", 1.0)] for q in range(n)], pa.map_(pa.string(), pa.float64())
    )
    warning = detect_mismatch(retrieved, grades)
    assert warning is not None and "--doc-id 're:^(.+)_chunk_[0-9]+$'" in warning
    suggested = parse_doc_id_option("re:^(.+)_chunk_[0-9]+$")
    assert suggested.documents_of(pa.array(["my_doc_1_chunk_2"])).to_pylist() == ["my_doc_1"]
    both = pa.array([[f"a_{q}"] for q in range(n)])
    other = pa.array([[(f"b_{q}", 1.0)] for q in range(n)], pa.map_(pa.string(), pa.float64()))
    assert detect_mismatch(both, other) is None


def test_compare_takes_the_ids_table(
    tmp_path: Path, records: Records, rankgate_cli: Callable[..., Run]
) -> None:
    """rankgate.toml's [ids] applies to both sides of compare: chunk rankings against the same
    rankings collapsed by hand have equal means."""
    chunks = _jsonl(tmp_path / "chunks.jsonl", records)
    documents = _jsonl(tmp_path / "docs.jsonl", _document_records(records))
    config = tmp_path / "rankgate.toml"
    config.write_text('[ids]\ndoc_id = "#"\n', encoding="utf-8")
    args = ("compare", chunks, documents, "-m", "map", "--format", "json")
    cell = rankgate_cli(*args, "--config", config).report()["cells"][0]
    assert cell["baseline_mean"] == pytest.approx(cell["candidate_mean"], abs=TOLERANCE)
    assert cell["baseline_mean"] > 0
    plain = rankgate_cli(*args, "--no-config").report()["cells"][0]
    assert plain["baseline_mean"] == 0.0


def test_compare_takes_the_doc_id_option(
    tmp_path: Path, records: Records, rankgate_cli: Callable[..., Run]
) -> None:
    """--doc-id on compare maps both sides; the JSON settings say which rule was used."""
    chunks = _jsonl(tmp_path / "chunks.jsonl", records)
    documents = _jsonl(tmp_path / "docs.jsonl", _document_records(records))
    run = rankgate_cli(
        "compare",
        chunks,
        documents,
        "-m",
        "map",
        "--format",
        "json",
        "--no-config",
        "--doc-id",
        "#",
    )
    assert run.code == 0, run.err
    report = run.report()
    cell = report["cells"][0]
    assert cell["baseline_mean"] == pytest.approx(cell["candidate_mean"], abs=TOLERANCE)
    assert cell["baseline_mean"] > 0
    assert report["settings"]["doc_ids"] == "#"
    unmapped = rankgate_cli(
        "compare", chunks, documents, "-m", "map", "--format", "json", "--no-config"
    ).report()
    assert unmapped["settings"]["doc_ids"] is None


# --------------------------------------------------------------------------------------------
# (g) stdin (the validator's path) and labels kept apart


def test_stdin_scores_and_warns_like_a_file(
    tmp_path: Path, records: Records, expected: dict[str, dict[str, float]]
) -> None:
    data = "".join(json.dumps(r) + "\n" for r in records).encode()
    args = ("eval", "-", *METRIC_ARGS, "--per-query", "--format", "json", "--no-config")
    mapped = _subprocess(*args, "--doc-id", "#", stdin=data, cwd=tmp_path).report()
    _assert_trec_equal(mapped["per_query"], expected)
    assert mapped["summary"]["chunks_collapsed"] == sum(
        _removed(r["retrieved_ids"])[0] for r in records
    )
    assert not any("--doc-id" in w for w in mapped["warnings"])
    plain = _subprocess(*args, stdin=data, cwd=tmp_path).report()
    assert sum(SUGGESTION in w for w in plain["warnings"]) == 1


def _judgment_lines(records: Records) -> list[dict[str, Any]]:
    return [
        {"query_id": r["query_id"], "document_id": doc, "grade": grade}
        for r in records
        for doc, grade in r["relevance_scores"].items()
    ]


def test_labels_apart_chunk_traces_against_document_labels(
    tmp_path: Path,
    records: Records,
    expected: dict[str, dict[str, float]],
    rankgate_cli: Callable[..., Run],
) -> None:
    traces = _jsonl(
        tmp_path / "traces.jsonl",
        [{"query_id": r["query_id"], "retrieved_ids": r["retrieved_ids"]} for r in records],
    )
    labels = _jsonl(tmp_path / "labels.jsonl", _judgment_lines(records))
    mapped = _per_query_json(rankgate_cli, traces, "--labels", labels, "--doc-id", "#")
    _assert_trec_equal(mapped["per_query"], expected)
    assert mapped["summary"]["chunks_collapsed"] == sum(
        _removed(r["retrieved_ids"])[0] for r in records
    )
    plain = _per_query_json(rankgate_cli, traces, "--labels", labels)
    assert sum(SUGGESTION in w for w in plain["warnings"]) == 1


def test_labels_apart_document_traces_against_chunk_labels(
    tmp_path: Path,
    records: Records,
    expected: dict[str, dict[str, float]],
    rankgate_cli: Callable[..., Run],
) -> None:
    """Labels per chunk (each document's grade split over 1-3 chunks, the highest being the
    document's), traces per document: the same values as the document labels."""
    rng = np.random.default_rng(3)
    judgments = []
    for r in records:
        for doc, grade in r["relevance_scores"].items():
            for n in range(int(rng.integers(1, 4))):
                judgments.append(
                    {
                        "query_id": r["query_id"],
                        "document_id": f"{doc}#c{n}",
                        "grade": int(rng.integers(0, grade + 1)),
                    }
                )
            judgments.append(
                {"query_id": r["query_id"], "document_id": f"{doc}#c9", "grade": grade}
            )
    labels = _jsonl(tmp_path / "chunk_labels.jsonl", judgments)
    document_records = _document_records(records)
    traces = _jsonl(
        tmp_path / "doc_traces.jsonl",
        [
            {"query_id": r["query_id"], "retrieved_ids": r["retrieved_ids"]}
            for r in document_records
        ],
    )
    mapped = _per_query_json(rankgate_cli, traces, "--labels", labels, "--doc-id", "#")
    _assert_trec_equal(mapped["per_query"], expected)
    assert mapped["summary"]["chunks_collapsed"] == 0
    plain = _per_query_json(rankgate_cli, traces, "--labels", labels)
    assert sum(SUGGESTION in w for w in plain["warnings"]) == 1


# --------------------------------------------------------------------------------------------
# (h) Bad rules: one line naming the option or file, exit 2


@pytest.mark.parametrize(
    ("rule", "parts"),
    [
        ("re:(", ["--doc-id", "'('", "not valid RE2"]),
        ("re:^doc[0-9]+$", ["--doc-id", "0 capturing groups"]),
        ("re:^(doc)([0-9]+)$", ["--doc-id", "2 capturing groups"]),
        ("re:", ["--doc-id", "regex is empty"]),
        ("", ["--doc-id", "expected a separator"]),
        ("map:", ["--doc-id", "names no file"]),
        ("map:absent.csv", ["absent.csv", "no such mapping file", "--doc-id"]),
        ("map:chunks.txt", ["chunks.txt", "cannot tell its format"]),
        (
            "map:no_column.csv",
            ["no_column.csv", "'chunk_id'", "columns: passage, doc_id", "--doc-id"],
        ),
        ("map:no_column.csv,passage,document", ["no_column.csv", "'document'"]),
        ("map:wide_row.csv", ["wide_row.csv:3", "expected 2 columns, got 3"]),
        ("map:broken.jsonl", ["broken.jsonl:3", "not a JSON object"]),
        ("map:empty_id.csv", ["empty_id.csv:3", "doc_id", "empty or missing ID"]),
        ("map:conflict.csv", ["conflict.csv:4", "'a#1' maps to 'b'"]),
        ("map:not.parquet", ["not.parquet", "not a readable parquet mapping file"]),
    ],
)
def test_bad_rule_is_a_one_line_error(
    tmp_path: Path,
    rankgate_cli: Callable[..., Run],
    monkeypatch: pytest.MonkeyPatch,
    rule: str,
    parts: list[str],
) -> None:
    (tmp_path / "no_column.csv").write_text("passage,doc_id\na#1,a\n", encoding="utf-8")
    (tmp_path / "chunks.txt").write_text("chunk_id,doc_id\n", encoding="utf-8")
    (tmp_path / "wide_row.csv").write_text(
        "chunk_id,doc_id\na#1,a\na#2,a,extra\n", encoding="utf-8"
    )
    (tmp_path / "broken.jsonl").write_text(
        '{"chunk_id": "a#1", "doc_id": "a"}\n\n{"chunk_id": \n', encoding="utf-8"
    )
    (tmp_path / "empty_id.csv").write_text("chunk_id,doc_id\na#1,a\na#2,\n", encoding="utf-8")
    (tmp_path / "conflict.csv").write_text(
        "chunk_id,doc_id\na#1,a\nb#1,b\na#1,b\n", encoding="utf-8"
    )
    (tmp_path / "not.parquet").write_bytes(b"not parquet at all\n")
    traces = _jsonl(
        tmp_path / "t.jsonl", [{"query_id": "q", "retrieved_ids": ["a#1"], "relevant_ids": ["a"]}]
    )
    monkeypatch.chdir(tmp_path)
    rankgate_cli("eval", traces, "--no-config", "--doc-id", rule).assert_one_line_error(*parts)


@pytest.mark.parametrize(
    ("table", "parts"),
    [
        ('doc_id_regex = "([a-z]+)#(c)"', ["[ids] doc_id_regex", "2 capturing groups"]),
        (
            'doc_id_map = "maps/absent.csv"',
            ["absent.csv", "no such mapping file", "[ids] doc_id_map"],
        ),
        ('doc_id = "#"\ndoc_id_regex = "(.*)#"', ["[ids] sets both doc_id and doc_id_regex"]),
        ('doc_id = "#"\nchunk_column = "passage"', ["chunk_column applies only with doc_id_map"]),
        ("doc_id = 3", ["[ids] doc_id must be a non-empty string"]),
        ('doc_ids = "#"', ["[ids]: unknown key 'doc_ids'"]),
    ],
)
def test_bad_ids_table_is_a_one_line_error(
    tmp_path: Path, rankgate_cli: Callable[..., Run], table: str, parts: list[str]
) -> None:
    config = tmp_path / "rankgate.toml"
    config.write_text(f"[ids]\n{table}\n", encoding="utf-8")
    traces = _jsonl(
        tmp_path / "t.jsonl", [{"query_id": "q", "retrieved_ids": ["a#1"], "relevant_ids": ["a"]}]
    )
    rankgate_cli("eval", traces, "--config", config).assert_one_line_error(str(config), *parts)


def test_library_errors_are_typed(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="regex"):
        DocIdMapping.regex("(a")
    with pytest.raises(ConfigError, match="separator is empty"):
        DocIdMapping.separator("")
    with pytest.raises(InputError, match="no such mapping file"):
        DocIdMapping.from_file(tmp_path / "absent.parquet")


# --------------------------------------------------------------------------------------------
# (i) Hostile IDs


def _one(rankgate_cli: Callable[..., Run], path: Path, *args: object) -> Run:
    return rankgate_cli(
        "eval",
        path,
        "-m",
        "mrr",
        "-m",
        "map",
        "--per-query",
        "--format",
        "json",
        "--no-config",
        *args,
    )


def test_ids_that_are_only_the_separator(tmp_path: Path, rankgate_cli: Callable[..., Run]) -> None:
    """'#' and '##' have nothing before the separator: they stay themselves (and '#' is labeled
    directly); a#1 and a#2 are a. Ranked: '#' '##' a '#c1'; relevant '#' and a: AP = (1 + 2/3)/2."""
    record = {
        "query_id": "q",
        "retrieved_ids": ["#", "##", "a#1", "a#2", "#c1"],
        "relevance_scores": {"a": 2, "#": 1},
    }
    report = _one(rankgate_cli, _jsonl(tmp_path / "t.jsonl", [record]), "--doc-id", "#").report()
    assert report["per_query"] == [
        {"query_id": "q", "mrr": 1.0, "map": pytest.approx(5 / 6, abs=TOLERANCE)}
    ]
    assert report["summary"]["chunks_collapsed"] == 1


def test_surrogate_escapes_are_ids_like_any_other(
    tmp_path: Path, rankgate_cli: Callable[..., Run]
) -> None:
    """A lone surrogate escaped in JSON (not valid UTF-8 once decoded) names the same document in
    the ranking and in the labels: it is matched, not a crash."""
    text = (
        '{"query_id": "q", "retrieved_ids": ["\\udcff#c1", "x#c1", "\\udcff#c2"], '
        '"relevance_scores": {"\\udcff": 1, "x": 0}}\n'
    )
    path = tmp_path / "t.jsonl"
    path.write_text(text, encoding="ascii")
    report = _one(rankgate_cli, path, "--doc-id", "#").report()
    assert report["summary"]["scored"] == 1
    assert report["per_query"][0]["mrr"] == 1.0
    assert report["summary"]["chunks_collapsed"] == 1


def test_invalid_utf8_and_empty_ids_are_rejected_as_without_a_mapping(
    tmp_path: Path, rankgate_cli: Callable[..., Run]
) -> None:
    raw = tmp_path / "raw.jsonl"
    raw.write_bytes(
        b'{"query_id": "q1", "retrieved_ids": ["ok#c1"], "relevance_scores": {"ok": 1}}\n'
        b'{"query_id": "q2", "retrieved_ids": ["\xff\xfe#c1", "d#c2"], "relevance_scores": {"d": 1}}\n'
    )
    empty = _jsonl(
        tmp_path / "empty.jsonl",
        [
            {"query_id": "q1", "retrieved_ids": ["ok#c1"], "relevance_scores": {"ok": 1}},
            {"query_id": "q2", "retrieved_ids": ["", "d#c1"], "relevance_scores": {"d": 1}},
        ],
    )
    for path, problem in ((raw, "raw.jsonl:2"), (empty, "empty.jsonl:2")):
        for extra in ((), ("--doc-id", "#")):
            _one(rankgate_cli, path, *extra).assert_one_line_error(problem)
            skipped = _one(rankgate_cli, path, "--on-invalid", "skip", *extra).report()
            assert (
                skipped["summary"]["scored"] == 1 and skipped["summary"]["skipped"]["invalid"] == 1
            )


def test_huge_ids(tmp_path: Path, rankgate_cli: Callable[..., Run]) -> None:
    """Just under the validator's size limit an ID maps like any other; over it, the row is
    rejected with the same located error as without a mapping."""
    long = "B" * 8000
    fits = _jsonl(
        tmp_path / "fits.jsonl",
        [
            {
                "query_id": "q",
                "retrieved_ids": ["z", f"{long}#c1", f"{long}#c2"],
                "relevance_scores": {long: 3},
            }
        ],
    )
    report = _one(rankgate_cli, fits, "--doc-id", "#").report()
    assert report["per_query"][0]["mrr"] == 0.5
    assert report["summary"]["chunks_collapsed"] == 1
    huge = "B" * 200_000
    over = _jsonl(
        tmp_path / "over.jsonl",
        [{"query_id": "q", "retrieved_ids": [f"{huge}#c1"], "relevance_scores": {huge: 3}}],
    )
    for extra in ((), ("--doc-id", "#")):
        _one(rankgate_cli, over, *extra).assert_one_line_error("over.jsonl:1", "retrieved_ids[0]")


def test_many_chunks_of_one_document(tmp_path: Path) -> None:
    """One ranking of 20,000 chunks of 3 documents collapses to 3 (no per-ID Python work)."""
    ids = [f"d{i % 3}#c{i}" for i in range(20_000)]
    ranked, collapsed = map_rankings(
        pa.array([ids], pa.large_list(pa.large_string())), DocIdMapping.separator("#")
    )
    assert ranked.to_pylist() == [["d0", "d1", "d2"]]
    assert collapsed.tolist() == [19_997]
