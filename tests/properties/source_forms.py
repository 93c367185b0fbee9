"""One trace set, written in every form rankgate reads, and what it must evaluate to.

The property suites ``test_every_source`` and ``test_every_command`` draw random trace sets
(``trace_sets``), write the same traces as JSON Lines, JSON arrays, CSV, Parquet (map, struct and
JSON-text grades), DataFrames, stores, TREC files and separately kept labels (the ``Form``
writers below), and hold each evaluation to ``expect``: an oracle that joins every query by hand
and applies the registry definitions to that query alone. ``expect`` never goes through
rankgate's readers, validator, batch builder or compiled join, so a discrepancy it finds is
rankgate's. ``check_oracle_against_trec_eval`` in turn holds the oracle to pytrec_eval.

Every record here has a unique query ID, string document IDs (no white space, so a TREC file can
hold them) and integer grades 0-3, so that values can be compared bit for bit.
"""

from __future__ import annotations

import csv
import gzip
import json
import math
import os
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from hypothesis import strategies as st

import rankgate
from rankgate import MetricSpec
from rankgate.batch import RankedBatch
from rankgate.metrics.registry import all_metrics

#: Raise (e.g. to 500) for a longer hunt; the defaults keep the suites to a few minutes.
FUZZ_SCALE = float(os.environ.get("RANKGATE_FUZZ_EXAMPLES", "0") or 0)


def examples(default: int) -> int:
    """Hypothesis example count: ``default``, or RANKGATE_FUZZ_EXAMPLES when that is larger."""
    return max(default, int(FUZZ_SCALE))


DOCS = ["a", "b", "c", "d", "e", "f", "g", "h", "ü-doc", "文档", "🦀", "x:y", "0", "D", "d-1"]
TEAMS = ["red", "blue", "ünï"]
AS_OF = datetime(2026, 12, 1, tzinfo=UTC)
MAX_AGE = timedelta(days=30)
FRESH = "2026-11-20T00:00:00Z"  # 11 days before AS_OF
OLD = "2026-09-01T00:00:00+00:00"  # 91 days before AS_OF


def _registry_specs() -> list[MetricSpec]:
    """Every registered metric uncut and at 3, and each choice of its parameters once."""
    specs: list[MetricSpec] = []
    for definition in all_metrics():
        cutoffs: list[int | None] = [None, 3] if definition.cutoff else [None]
        variants: list[dict[str, Any]] = [{}]
        for param in definition.params:
            variants += [{param.name: choice} for choice in param.choices[1:]]
        for k in cutoffs:
            for variant in variants:
                spec = rankgate.make_metric(definition.name, k, variant)
                if spec not in specs:
                    specs.append(spec)
    return specs


SPECS = _registry_specs()
SPEC_NAMES = [str(spec) for spec in SPECS]

# --- traces ------------------------------------------------------------------------------------

LABEL_STYLES = ["scores", "ids", "both", "unlabeled", "empty_ids", "empty_scores", "zeros"]
#: What a label file can say: a query labeled with nothing at all is no judgment, so unlabeled.
JUDGMENT_STYLES = ["scores", "ids", "both", "unlabeled", "zeros"]


@st.composite
def trace_sets(
    draw: st.DrawFn,
    *,
    min_queries: int = 1,
    max_queries: int = 8,
    styles: Sequence[str] = LABEL_STYLES,
    stamps: bool = False,
    allow_empty_ranking: bool = True,
) -> list[dict[str, Any]]:
    """Trace records with unique query IDs: duplicates in rankings, empty rankings, unlabeled
    queries, labels that hold nothing relevant, ``relevant_ids`` overridden by a grade, and a
    ``team`` segment field that some records leave null. With ``stamps``, labeled records carry a
    ``labeled_at`` (one time for all labels, or one per document)."""
    count = draw(st.integers(min_queries, max_queries))
    document = st.sampled_from(DOCS)
    records = []
    for index in range(count):
        ranking = draw(st.lists(document, min_size=0 if allow_empty_ranking else 1, max_size=12))
        record: dict[str, Any] = {"query_id": f"q{index}", "retrieved_ids": ranking}
        style = draw(st.sampled_from(list(styles)))
        grades = draw(st.dictionaries(document, st.integers(0, 3), min_size=1, max_size=6))
        if style == "scores":
            record["relevance_scores"] = grades
        elif style == "ids":
            record["relevant_ids"] = sorted(grades)
        elif style == "both":
            record["relevant_ids"] = draw(st.lists(document, min_size=1, max_size=4, unique=True))
            record["relevance_scores"] = grades
        elif style == "empty_ids":
            record["relevant_ids"] = []
        elif style == "empty_scores":
            record["relevance_scores"] = {}
        elif style == "zeros":
            record["relevance_scores"] = dict.fromkeys(grades, 0)
        # A segment field no record names at all is a usage error, while a column of nulls is a
        # field that exists: the key is always there, its value sometimes null.
        record["team"] = draw(st.sampled_from([*TEAMS, None]))
        if stamps and style not in ("unlabeled",):
            labeled = sorted(effective_grades(record) or {})
            if draw(st.booleans()) or not labeled:
                record["labeled_at"] = draw(st.sampled_from([FRESH, OLD]))
            else:
                record["labeled_at"] = {doc: draw(st.sampled_from([FRESH, OLD])) for doc in labeled}
        records.append(record)
    return records


def effective_grades(record: dict[str, Any]) -> dict[str, float] | None:
    """The grades a record means (None: unlabeled): relevant_ids say 1, a score overrides it."""
    if "relevant_ids" not in record and "relevance_scores" not in record:
        return None
    if record.get("relevant_ids") is None and record.get("relevance_scores") is None:
        return None
    grades = {str(doc): 1.0 for doc in record.get("relevant_ids") or []}
    grades.update({str(d): float(g) for d, g in (record.get("relevance_scores") or {}).items()})
    return grades


# --- the oracle --------------------------------------------------------------------------------


@dataclass
class Expected:
    """What an evaluation of a trace set must report."""

    query_ids: list[str] = field(default_factory=list)
    values: dict[MetricSpec, list[float]] = field(default_factory=dict)
    read: int = 0
    scored: int = 0
    skipped: dict[str, int] = field(
        default_factory=lambda: {"unlabeled": 0, "no_relevant": 0, "invalid": 0}
    )
    labeled: int = 0
    duplicates: int = 0
    stale: int = 0
    expired: int = 0
    lost_all_relevant: int = 0

    def value(self, spec: MetricSpec, query_id: str) -> float:
        return self.values[spec][self.query_ids.index(query_id)]


def one_query_batch(ranking: Sequence[str], grades: dict[str, float]) -> RankedBatch:
    """A single query joined by hand: each document at its first rank, its grade or 0."""
    distinct = list(dict.fromkeys(ranking))
    labels = sorted(grades.values(), reverse=True)
    return RankedBatch(
        ranked_offsets=np.array([0, len(distinct)], dtype=np.int64),
        ranked_grades=np.array([grades.get(doc, 0.0) for doc in distinct], dtype=np.float64),
        ranked_judged=np.array([doc in grades for doc in distinct], dtype=np.bool_),
        label_offsets=np.array([0, len(labels)], dtype=np.int64),
        label_grades=np.array(labels, dtype=np.float64),
    )


def per_query_values(
    ranking: Sequence[str],
    grades: dict[str, float],
    specs: Sequence[MetricSpec],
    threshold: float = 1.0,
) -> dict[MetricSpec, float]:
    """Each registry definition applied to one query alone; 0 everywhere when nothing is
    relevant (what empty_relevant="zero" promises)."""
    if not any(grade >= threshold for grade in grades.values()):
        return dict.fromkeys(specs, 0.0)
    batch = one_query_batch([str(doc) for doc in ranking], grades)
    return {spec: float(spec.compute(batch, {"rel": threshold})[0]) for spec in specs}


def _older(stamp: Any) -> bool:
    moment = datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
    return moment < AS_OF - MAX_AGE


def expect(
    records: Sequence[dict[str, Any] | None],
    specs: Sequence[MetricSpec] = SPECS,
    *,
    threshold: float = 1.0,
    empty: str = "skip",
    corpus: frozenset[str] | None = None,
    max_age: bool = False,
    invalid: frozenset[int] = frozenset(),
) -> Expected:
    """The evaluation a trace set must give, worked out query by query. ``invalid`` holds the
    positions of records that must be skipped as invalid (``on_invalid="skip"``); None in
    ``records`` is such a record too."""
    out = Expected(values={spec: [] for spec in specs})
    for position, record in enumerate(records):
        out.read += 1
        if record is None or position in invalid:
            out.skipped["invalid"] += 1
            continue
        grades = effective_grades(record)
        if grades is None:
            out.skipped["unlabeled"] += 1
            continue
        out.labeled += 1
        before = grades
        if corpus is not None:
            grades = {doc: grade for doc, grade in grades.items() if doc in corpus}
            out.stale += len(before) - len(grades)
        if max_age and "labeled_at" in record:
            stamps = record["labeled_at"]
            kept = {
                doc: grade
                for doc, grade in grades.items()
                if not _older(stamps.get(doc) if isinstance(stamps, dict) else stamps)
                or (isinstance(stamps, dict) and doc not in stamps)
            }
            out.expired += len(grades) - len(kept)
            grades = kept
        relevant = any(grade >= threshold for grade in grades.values())
        if not relevant and any(grade >= threshold for grade in before.values()):
            out.lost_all_relevant += 1
        if not relevant and empty == "skip":
            out.skipped["no_relevant"] += 1
            continue
        ranking = [str(doc) for doc in record["retrieved_ids"]]
        out.scored += 1
        out.duplicates += len(ranking) - len(set(ranking))
        out.query_ids.append(str(record.get("query_id")))
        for spec, value in per_query_values(ranking, grades, specs, threshold).items():
            out.values[spec].append(value)
    return out


def assert_matches(evaluation: Any, expected: Expected, where: str = "") -> None:
    """Values bit for bit, query order, and every count of the summary."""
    summary = evaluation.summary
    got_counts = {
        "read": summary.read,
        "scored": summary.scored,
        "skipped": dict(summary.skipped),
        "labeled": summary.labeled,
        "duplicates": summary.duplicates_dropped,
        "stale": summary.labels_removed_stale,
        "expired": summary.labels_removed_expired,
        "lost_all_relevant": summary.lost_all_relevant,
    }
    want_counts = {
        "read": expected.read,
        "scored": expected.scored,
        "skipped": expected.skipped,
        "labeled": expected.labeled,
        "duplicates": expected.duplicates,
        "stale": expected.stale,
        "expired": expected.expired,
        "lost_all_relevant": expected.lost_all_relevant,
    }
    assert got_counts == want_counts, f"{where}: counts"
    assert list(evaluation.query_ids) == expected.query_ids, f"{where}: query order"
    for spec, want in expected.values.items():
        got = evaluation.values[spec].tolist()
        assert got == want, f"{where}: {spec}: got {got}, expected {want}"


def same_evaluation(got: Any, reference: Any, where: str = "") -> None:
    """Two evaluations of the same traces report the same thing: values, counts, means,
    intervals, segments (with their counts) and warnings."""
    # Invalid examples are located in each form's own terms; their words are compared apart.
    assert replace(got.summary, invalid_examples=()) == replace(
        reference.summary, invalid_examples=()
    ), where
    assert list(got.query_ids) == list(reference.query_ids), where
    for spec in reference.values:
        assert got.values[spec].tolist() == reference.values[spec].tolist(), (where, str(spec))
    assert repr(got.overall) == repr(reference.overall), where
    assert [repr(g) for g in got.segments] == [repr(g) for g in reference.segments], where
    assert got.warnings == reference.warnings, where


# --- forms -------------------------------------------------------------------------------------


def full_rows(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Records with every column in every row (None where a record lacks it), as a table built
    from dicts needs: Arrow infers its columns from the first row alone."""
    names = ["query_id", "retrieved_ids", "relevant_ids", "relevance_scores", "team"]
    extra = [n for r in records for n in r if n not in names]
    names += list(dict.fromkeys(extra))
    return [{name: record.get(name) for name in names} for record in records]


def write_jsonl(records: Sequence[Any], path: Path) -> Path:
    opener: Callable[..., Any] = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wt", encoding="utf-8") as out:
        for record in records:
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
    return path


def write_json_array(records: Sequence[Any], path: Path) -> Path:
    """One record a line, so record i starts on line i + 1 of the file."""
    body = ",\n".join(json.dumps(record, ensure_ascii=False) for record in records)
    path.write_text(f"[{body}]\n", encoding="utf-8")
    return path


def write_csv(records: Sequence[dict[str, Any]], path: Path, delimiter: str = ",") -> Path:
    """Lists and maps as JSON text cells; a missing value as an empty cell."""
    rows = full_rows(records)
    with path.open("w", encoding="utf-8", newline="") as out:
        writer = csv.writer(out, delimiter=delimiter)
        writer.writerow(list(rows[0]))
        for row in rows:
            writer.writerow(
                [
                    ""
                    if value is None
                    else json.dumps(value, ensure_ascii=False)
                    if isinstance(value, (list, dict))
                    else value
                    for value in row.values()
                ]
            )
    return path


def arrow_map_table(records: Sequence[dict[str, Any]]) -> Any:
    """Grades as map<string, int64>: the canonical table shape."""
    import pyarrow as pa

    rows = full_rows(records)
    for row in rows:
        if isinstance(row["relevance_scores"], dict):
            row["relevance_scores"] = list(row["relevance_scores"].items())
        if isinstance(row.get("labeled_at"), dict):
            row["labeled_at"] = json.dumps(row["labeled_at"])
    fields = [
        ("query_id", pa.string()),
        ("retrieved_ids", pa.list_(pa.string())),
        ("relevant_ids", pa.list_(pa.string())),
        ("relevance_scores", pa.map_(pa.string(), pa.int64())),
        ("team", pa.string()),
    ]
    fields += [(name, pa.string()) for name in rows[0] if name not in dict(fields)]
    return pa.Table.from_pylist(rows, schema=pa.schema(fields))


def arrow_json_text_table(records: Sequence[dict[str, Any]]) -> Any:
    """Lists and grades as JSON text columns, as a database export often has them."""
    import pyarrow as pa

    rows = full_rows(records)
    for row in rows:
        for name in ("retrieved_ids", "relevant_ids", "relevance_scores", "labeled_at"):
            if isinstance(row.get(name), (list, dict)):
                row[name] = json.dumps(row[name], ensure_ascii=False)
    return pa.Table.from_pylist(rows, schema=pa.schema([(n, pa.string()) for n in rows[0]]))


def struct_table(records: Sequence[dict[str, Any]]) -> Any:
    """What ``pyarrow.Table.from_pylist`` makes of dicts: grades as a struct, one field per
    document ID seen anywhere."""
    import pyarrow as pa

    return pa.Table.from_pylist(full_rows(records))


def has_struct_grades(table: Any) -> bool:
    import pyarrow as pa

    names = table.schema.names
    return "relevance_scores" in names and pa.types.is_struct(
        table.schema.field("relevance_scores").type
    )


def write_parquet(table: Any, path: Path) -> Path:
    import pyarrow.parquet as pq

    pq.write_table(table, path, row_group_size=3)
    return path


def nested(record: dict[str, Any]) -> dict[str, Any]:
    """The record with its trace fields moved down to dotted paths (see ``NESTED_FIELDS``)."""
    out: dict[str, Any] = {"meta": {"qid": record["query_id"], "ret": {}}, "labels": {}}
    out["meta"]["ret"]["ids"] = record["retrieved_ids"]
    if "relevant_ids" in record:
        out["labels"]["ids"] = record["relevant_ids"]
    if "relevance_scores" in record:
        out["labels"]["scores"] = record["relevance_scores"]
    for key, value in record.items():
        if key not in ("query_id", "retrieved_ids", "relevant_ids", "relevance_scores"):
            out[key] = value
    return out


NESTED_FIELDS = rankgate.FieldMap(
    query_id="meta.qid",
    retrieved_ids="meta.ret.ids",
    relevant_ids="labels.ids",
    relevance_scores="labels.scores",
)


def without_labels(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {k: v for k, v in r.items() if k not in ("relevant_ids", "relevance_scores")}
        for r in records
    ]


def labels_apart_holds(records: Sequence[dict[str, Any]]) -> bool:
    """A label file names judgments, so a query labeled with nothing reads as unlabeled."""
    return all(effective_grades(r) != {} for r in records)


def write_label_records(records: Sequence[dict[str, Any]], path: Path) -> Path:
    """One label record per labeled query, as a trace would carry them."""
    rows = []
    for record in records:
        grades = effective_grades(record)
        if grades:
            rows.append({"query_id": record["query_id"], "relevance_scores": grades})
    return write_jsonl(rows, path)


def write_judgments(records: Sequence[dict[str, Any]], path: Path) -> Path:
    """One judgment per line, as annotation tools export them."""
    rows = []
    for record in records:
        for doc, grade in (effective_grades(record) or {}).items():
            rows.append({"query_id": record["query_id"], "document_id": doc, "grade": grade})
    return write_jsonl(rows, path)


def write_qrels(records: Sequence[dict[str, Any]], path: Path) -> Path:
    lines = []
    for record in records:
        for doc, grade in (effective_grades(record) or {}).items():
            lines.append(f"{record['query_id']} 0 {doc} {int(grade)}\n")
    path.write_text("".join(lines), encoding="utf-8")
    return path


def trec_holds(records: Sequence[dict[str, Any]]) -> bool:
    """A run file cannot hold an empty ranking, nor qrels a query labeled with nothing."""
    return all(r["retrieved_ids"] for r in records) and labels_apart_holds(records)


def write_run(records: Sequence[dict[str, Any]], path: Path) -> Path:
    """Scores falling with rank, so trec_eval's order (by score) is the ranking's order."""
    lines = []
    for record in records:
        ranking = record["retrieved_ids"]
        for rank, doc in enumerate(ranking, start=1):
            lines.append(f"{record['query_id']} Q0 {doc} {rank} {len(ranking) - rank + 1} run\n")
    path.write_text("".join(lines), encoding="utf-8")
    return path


# --- stores ------------------------------------------------------------------------------------

POSTGRES_ADMIN = os.environ.get(
    "RANKGATE_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/postgres"
)
REQUIRE_SERVICES = os.environ.get("RANKGATE_REQUIRE_SERVICES") == "1"


def postgres_unavailable() -> str | None:
    try:
        import psycopg
    except ImportError as problem:
        return f"psycopg is not installed ({problem})"
    try:
        psycopg.connect(POSTGRES_ADMIN, connect_timeout=3).close()
    except psycopg.Error as problem:
        return f"no PostgreSQL server at {POSTGRES_ADMIN} ({str(problem).strip().splitlines()[0]})"
    return None


@contextmanager
def postgres_database() -> Iterator[str]:
    """A database of its own on the server, dropped afterwards."""
    import psycopg

    name = f"rankgate_props_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(POSTGRES_ADMIN, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
        try:
            yield f"{POSTGRES_ADMIN.rsplit('/', 1)[0]}/{name}"
        finally:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
                (name,),
            )
            admin.execute(f'DROP DATABASE IF EXISTS "{name}"')


def empty_postgres_store(url: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute("DROP TABLE IF EXISTS rankgate_traces, rankgate_labels, rankgate_schema")


def fill_store(url: str, records: Sequence[dict[str, Any]], *, label_table: bool = False) -> None:
    """The traces in a store, in input order. Their labels travel in the attributes, as a trace
    that carries its own labels is stored, or with ``label_table`` in the labels table."""
    from rankgate.store.backends import LabelRow, TraceRow, connect

    start = datetime(2026, 11, 30, tzinfo=UTC)
    backend = connect(url)
    try:
        rows, labels = [], []
        for number, record in enumerate(records):
            attributes = {k: v for k, v in record.items() if k not in ("query_id", "retrieved_ids")}
            if label_table:
                attributes.pop("relevant_ids", None)
                attributes.pop("relevance_scores", None)
                for doc, grade in (effective_grades(record) or {}).items():
                    labels.append(LabelRow(record["query_id"], doc, grade, None, "test"))
            rows.append(
                TraceRow(
                    trace_id=f"t{number}",
                    query_id=record["query_id"],
                    recorded_at=start + timedelta(seconds=number),
                    variant=None,
                    retrieved_ids=list(record["retrieved_ids"]),
                    attributes=attributes,
                )
            )
        backend.insert_traces(rows)
        if labels:
            backend.upsert_labels(labels)
        backend.commit()
    finally:
        backend.close()


# --- pytrec_eval -------------------------------------------------------------------------------

#: Oracle spec -> pytrec_eval measure, where trec_eval defines the same number.
TREC_MEASURES = {
    "ndcg(gain=linear)@3": "ndcg_cut_3",
    "precision@3": "P_3",
    "recall@3": "recall_3",
    "map": "map",
    "map@3": "map_cut_3",
    "mrr": "recip_rank",
    "r_precision": "Rprec",
    "hit_rate@3": "success_3",
}


def trec_eval_values(
    records: Sequence[dict[str, Any]], expected: Expected
) -> dict[str, dict[str, float]]:
    """pytrec_eval's per-query values for the scored queries of ``expected``."""
    import pytrec_eval

    by_id = {str(r["query_id"]): r for r in records}
    qrels: dict[str, dict[str, int]] = {}
    run: dict[str, dict[str, float]] = {}
    for query_id in expected.query_ids:
        record = by_id[query_id]
        qrels[query_id] = {d: int(g) for d, g in (effective_grades(record) or {}).items()}
        ranking = list(dict.fromkeys(map(str, record["retrieved_ids"])))
        run[query_id] = {doc: float(len(ranking) - rank) for rank, doc in enumerate(ranking)}
    # "ndcg_cut.3" asks for that cutoff; the results name it "ndcg_cut_3".
    measures = {
        m[: m.rindex("_")] + "." + m[m.rindex("_") + 1 :] if m[-1].isdigit() else m
        for m in TREC_MEASURES.values()
    }
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, measures)
    results: dict[str, dict[str, float]] = evaluator.evaluate(run)
    return results


def close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-12)


def column(values: Sequence[float]) -> npt.NDArray[np.float64]:
    return np.asarray(values, dtype=np.float64)


# --- every form, by name -----------------------------------------------------------------------


@dataclass(frozen=True)
class Form:
    """One way to hand the same traces to ``rankgate.evaluate``.

    ``build(records, folder)`` returns what ``evaluate`` takes; ``location(folder, position)``
    what an error about the record at that 0-based position must be located at; ``kind`` says
    what the form can hold: ``json`` (anything), ``text`` (cells are text: no empty-string ID,
    a list may be any JSON) or ``typed`` (typed columns: a ranking is a list or null)."""

    name: str
    build: Callable[[list[dict[str, Any]], Path], Any]
    location: Callable[[Path, int], str]
    kind: str = "typed"
    holds: Callable[[list[dict[str, Any]]], bool] = lambda records: True


def _file(name: str) -> Callable[[Path], Path]:
    return lambda folder: folder / name


def _polars(records: list[dict[str, Any]]) -> Any:
    import polars as pl

    return pl.DataFrame(full_rows(records))


def _pandas(records: list[dict[str, Any]]) -> Any:
    import pandas as pd

    return pd.DataFrame(full_rows(records))


FORMS = [
    Form(
        "jsonl",
        lambda r, d: write_jsonl(r, d / "t.jsonl"),
        lambda d, i: f"{d / 't.jsonl'}:{i + 1}",
        "json",
    ),
    Form(
        "jsonl.gz",
        lambda r, d: write_jsonl(r, d / "t.jsonl.gz"),
        lambda d, i: f"{d / 't.jsonl.gz'}:{i + 1}",
        "json",
    ),
    Form(
        "json array",
        lambda r, d: write_json_array(r, d / "t.json"),
        lambda d, i: f"{d / 't.json'}:{i + 1}",
        "json",
    ),
    Form(
        "list of dicts",
        lambda r, d: [dict(x) for x in r],
        lambda d, i: f"<records> row {i + 1}",
        "json",
    ),
    Form(
        "csv",
        lambda r, d: write_csv(r, d / "t.csv"),
        lambda d, i: f"{d / 't.csv'}:{i + 2}",
        "text",
    ),
    Form(
        "tsv",
        lambda r, d: write_csv(r, d / "t.tsv", "\t"),
        lambda d, i: f"{d / 't.tsv'}:{i + 2}",
        "text",
    ),
    Form(
        "parquet map grades",
        lambda r, d: write_parquet(arrow_map_table(r), d / "map.parquet"),
        lambda d, i: f"{d / 'map.parquet'} row {i + 1}",
    ),
    Form(
        "parquet struct grades",
        lambda r, d: write_parquet(struct_table(r), d / "struct.parquet"),
        lambda d, i: f"{d / 'struct.parquet'} row {i + 1}",
        # Parquet cannot store a struct without fields: grades must name some document.
        holds=lambda records: any(r.get("relevance_scores") for r in records),
    ),
    Form(
        "parquet JSON-text grades",
        lambda r, d: write_parquet(arrow_json_text_table(r), d / "text.parquet"),
        lambda d, i: f"{d / 'text.parquet'} row {i + 1}",
        "text",
    ),
    Form("arrow table (map)", lambda r, d: arrow_map_table(r), lambda d, i: f"<Table> row {i + 1}"),
    Form(
        "arrow Table.from_pylist",
        lambda r, d: struct_table(r),
        lambda d, i: f"<Table> row {i + 1}",
    ),
    Form("pandas from dicts", lambda r, d: _pandas(r), lambda d, i: f"<DataFrame> row {i + 1}"),
    Form("polars from dicts", lambda r, d: _polars(r), lambda d, i: f"<DataFrame> row {i + 1}"),
]
FORMS_BY_NAME = {form.name: form for form in FORMS}
