"""Every source kind gives the registry definitions' numbers, and so the same numbers as JSON Lines.

Random trace sets (``source_forms.trace_sets``) are written in each form rankgate reads: JSON
Lines (plain and gzip), JSON arrays, CSV/TSV, Parquet with map, struct and JSON-text grades, Arrow
tables, pandas and polars DataFrames built from dicts, lists of dicts, the SQLite and PostgreSQL
stores, labels kept apart (label records, judgments, qrels), stale-label filtering, dotted field
paths and TREC run + qrels. Each evaluation is held to the oracle (``source_forms.expect``:
each query joined by hand and scored alone by the registry definitions) bit for bit, in values,
query order and every count, and to the JSON Lines evaluation in means, intervals, segments and
warnings. Invalid rows mixed in must give every form that can hold them the same counts and the
same message. The oracle itself is held to pytrec_eval.

RANKGATE_FUZZ_EXAMPLES=500 runs more examples; RANKGATE_REQUIRE_SERVICES=1 turns a missing
PostgreSQL server from a skip into a failure.
"""

from __future__ import annotations

import dataclasses
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from source_forms import (
    AS_OF,
    DOCS,
    FORMS,
    FORMS_BY_NAME,
    JUDGMENT_STYLES,
    LABEL_STYLES,
    MAX_AGE,
    NESTED_FIELDS,
    REQUIRE_SERVICES,
    SPECS,
    TREC_MEASURES,
    Form,
    arrow_map_table,
    assert_matches,
    close,
    effective_grades,
    empty_postgres_store,
    examples,
    expect,
    fill_store,
    has_struct_grades,
    labels_apart_holds,
    nested,
    postgres_database,
    postgres_unavailable,
    same_evaluation,
    struct_table,
    trace_sets,
    trec_eval_values,
    trec_holds,
    without_labels,
    write_csv,
    write_jsonl,
    write_judgments,
    write_label_records,
    write_parquet,
    write_qrels,
    write_run,
)

import rankgate
from rankgate import InputError, Settings
from rankgate.io import FORMATS
from rankgate.io.trec import TrecSource
from rankgate.stale import LabelFilter

FUNCTION_FIXTURES = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]


@pytest.fixture(scope="module")
def folder() -> Iterator[Path]:
    """One scratch folder for every example of the module (files are overwritten)."""
    with tempfile.TemporaryDirectory(prefix="rankgate-props-") as name:
        yield Path(name)


def _run(empty: str, **changes: Any) -> Settings:
    options: dict[str, Any] = {"segment_by": ("team",), "resamples": 25, "seed": 7}
    return Settings(empty_relevant=empty, **{**options, **changes})  # type: ignore[arg-type]


def _reference(records: list[dict[str, Any]], folder: Path, run: Settings) -> Any:
    return rankgate.evaluate(write_jsonl(records, folder / "reference.jsonl"), SPECS, settings=run)


# --- the oracle itself ---------------------------------------------------------------------------


@settings(max_examples=examples(150), deadline=None)
@given(trace_sets(max_queries=10))
def test_the_oracle_agrees_with_trec_eval(records: list[dict[str, Any]]) -> None:
    expected = expect(records)
    trec = trec_eval_values(records, expected)
    by_name = {str(spec): spec for spec in SPECS}
    for name, measure in TREC_MEASURES.items():
        spec = by_name[name]
        for query_id in expected.query_ids:
            # pytrec_eval leaves out a query with nothing retrieved: every measure is 0 there.
            theirs = trec.get(query_id, {}).get(measure, 0.0)
            assert close(expected.value(spec, query_id), theirs), (name, query_id)


# --- every form ------------------------------------------------------------------------------------


@pytest.mark.parametrize("form", FORMS, ids=lambda f: f.name)
@settings(max_examples=examples(30), deadline=None, suppress_health_check=FUNCTION_FIXTURES)
@given(records=trace_sets(), empty=st.sampled_from(["skip", "zero"]))
def test_every_form_equals_the_definitions(
    folder: Path, form: Form, records: list[dict[str, Any]], empty: str
) -> None:
    assume(form.holds(records))
    run = _run(empty)
    source = form.build(records, folder)
    evaluation = rankgate.evaluate(source, SPECS, settings=run)
    assert_matches(evaluation, expect(records, empty=empty), form.name)
    same_evaluation(evaluation, _reference(records, folder, run), form.name)


def test_struct_grades_are_what_tables_from_dicts_hold(folder: Path) -> None:
    """The struct forms above really hold struct grades (not maps inferred some other way)."""
    records = [
        {"query_id": "q0", "retrieved_ids": ["a", "b"], "relevance_scores": {"a": 1}},
        {"query_id": "q1", "retrieved_ids": ["c"], "relevance_scores": {"c": 2, "d": 0}},
    ]
    assert has_struct_grades(struct_table(records))
    import pyarrow.parquet as pq

    path = FORMS_BY_NAME["parquet struct grades"].build(records, folder)
    assert has_struct_grades(pq.read_table(path))


def test_arrow_ipc_files() -> None:
    """The issue lists Arrow among the file formats; until a reader exists this says so."""
    if not {"arrow", "ipc", "feather"} & set(FORMATS):
        pytest.skip(f"Arrow IPC files are not an input format yet (formats: {', '.join(FORMATS)})")
    raise AssertionError("an Arrow IPC reader exists: add it to source_forms.FORMS")


# --- stdin -------------------------------------------------------------------------------------


@settings(max_examples=examples(4), deadline=None, suppress_health_check=FUNCTION_FIXTURES)
@given(records=trace_sets())
def test_stdin_equals_the_definitions(folder: Path, records: list[dict[str, Any]]) -> None:
    import json
    import subprocess
    import sys

    path = write_jsonl(records, folder / "stdin.jsonl")
    names = ",".join(str(spec) for spec in SPECS)
    command = [sys.executable, "-m", "rankgate", "eval", "-", "--no-config", "--format", "json"]
    command += ["--per-query", "-m", names, "--resamples", "0", "--no-progress"]
    done = subprocess.run(
        command, input=path.read_bytes(), capture_output=True, timeout=120, check=False
    )
    assert done.returncode in (0, 1), done.stderr.decode()
    report = json.loads(done.stdout)
    expected = expect(records)
    summary = report["summary"]
    assert (summary["read"], summary["scored"], summary["skipped"]) == (
        expected.read,
        expected.scored,
        expected.skipped,
    )
    assert summary["duplicates_dropped"] == expected.duplicates
    assert [row["query_id"] for row in report["per_query"]] == expected.query_ids
    for spec in SPECS:
        got = [row[str(spec)] for row in report["per_query"]]
        assert got == expected.values[spec], str(spec)


# --- stores --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    reason = postgres_unavailable()
    if reason is not None:
        if REQUIRE_SERVICES:
            pytest.fail(reason + " (RANKGATE_REQUIRE_SERVICES=1)")
        pytest.skip(reason)
    with postgres_database() as url:
        yield url


@pytest.fixture(params=["sqlite", "postgresql"])
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _store_url(kind: str, request: pytest.FixtureRequest, folder: Path) -> str:
    if kind == "sqlite":
        path = folder / "store.db"
        path.unlink(missing_ok=True)
        return f"sqlite:///{path}"
    url = str(request.getfixturevalue("postgres_url"))
    empty_postgres_store(url)
    return url


@pytest.mark.parametrize("label_table", [False, True], ids=["labels in traces", "labels table"])
@settings(max_examples=examples(12), deadline=None, suppress_health_check=FUNCTION_FIXTURES)
@given(data=st.data(), empty=st.sampled_from(["skip", "zero"]))
def test_stores_equal_the_definitions(
    request: pytest.FixtureRequest,
    folder: Path,
    store_kind: str,
    label_table: bool,
    data: st.DataObject,
    empty: str,
) -> None:
    records = data.draw(trace_sets(styles=JUDGMENT_STYLES if label_table else LABEL_STYLES))
    url = _store_url(store_kind, request, folder)
    fill_store(url, records, label_table=label_table)
    run = _run(empty)
    evaluation = rankgate.evaluate(url, SPECS, settings=run)
    assert_matches(evaluation, expect(records, empty=empty), url)
    same_evaluation(_without_query_set(evaluation, url), _reference(records, folder, run), url)


def _without_query_set(evaluation: Any, where: str) -> Any:
    """The evaluation as a file with inline labels gives it: labels kept apart (a label file, a
    store read whole) name the query set and count their labels by kind, which inline labels do
    not. Every labeled query here has its trace, so none may be missing; every label is a
    human's."""
    summary = evaluation.summary
    assert summary.missing_trace == 0, where
    assert summary.label_sources.get("judge", 0) == 0, where
    if summary.query_set is None and not summary.label_sources:
        return evaluation
    if summary.query_set is not None:
        assert summary.expected_queries is not None and summary.expected_queries >= 0, where
    return dataclasses.replace(
        evaluation,
        summary=dataclasses.replace(
            summary, query_set=None, expected_queries=None, label_sources={}
        ),
    )


# --- labels kept apart ----------------------------------------------------------------------------

LABEL_FILES = {
    "label records": lambda r, d: write_label_records(r, d / "labels.jsonl"),
    "judgments": lambda r, d: write_judgments(r, d / "judgments.jsonl"),
    "qrels": lambda r, d: write_qrels(r, d / "labels.qrels"),
}
TRACES_WITHOUT_LABELS = {
    "jsonl": lambda r, d: write_jsonl(r, d / "bare.jsonl"),
    "parquet": lambda r, d: write_parquet(arrow_map_table(r), d / "bare.parquet"),
    "list of dicts": lambda r, d: r,
}


@pytest.mark.parametrize("labels_form", list(LABEL_FILES))
@pytest.mark.parametrize("traces_form", list(TRACES_WITHOUT_LABELS))
@settings(max_examples=examples(15), deadline=None, suppress_health_check=FUNCTION_FIXTURES)
@given(records=trace_sets(styles=JUDGMENT_STYLES), empty=st.sampled_from(["skip", "zero"]))
def test_labels_kept_apart_equal_the_definitions(
    folder: Path, labels_form: str, traces_form: str, records: list[dict[str, Any]], empty: str
) -> None:
    assume(labels_apart_holds(records))
    labels = LABEL_FILES[labels_form](records, folder)
    traces = TRACES_WITHOUT_LABELS[traces_form](without_labels(records), folder)
    run = _run(empty)
    evaluation = rankgate.evaluate(traces, SPECS, settings=run, labels=labels)
    assert_matches(evaluation, expect(records, empty=empty), f"{traces_form} + {labels_form}")
    same_evaluation(
        _without_query_set(evaluation, traces_form), _reference(records, folder, run), traces_form
    )


@settings(max_examples=examples(15), deadline=None, suppress_health_check=FUNCTION_FIXTURES)
@given(records=trace_sets(styles=JUDGMENT_STYLES), data=st.data())
def test_own_labels_win_over_labels_kept_apart(
    folder: Path, records: list[dict[str, Any]], data: st.DataObject
) -> None:
    """A trace with labels of its own keeps them; the label file labels only the others."""
    assume(labels_apart_holds(records))
    keep = [data.draw(st.booleans()) for _ in records]
    traces = [r if k else without_labels([r])[0] for r, k in zip(records, keep, strict=True)]
    # The label file says something else for the queries that keep their own labels.
    decoys = [
        {**without_labels([r])[0], "relevance_scores": {DOCS[0]: 3}}
        if k and effective_grades(r) is not None
        else r
        for r, k in zip(records, keep, strict=True)
    ]
    labels = write_label_records(decoys, folder / "labels.jsonl")
    evaluation = rankgate.evaluate(traces, SPECS, settings=_run("skip"), labels=labels)
    assert_matches(evaluation, expect(records), "own labels")


# --- stale labels -------------------------------------------------------------------------------

STALE_FORMS = ["jsonl", "list of dicts", "csv", "parquet map grades", "parquet JSON-text grades"]


@pytest.mark.parametrize("form_name", STALE_FORMS)
@settings(max_examples=examples(20), deadline=None, suppress_health_check=FUNCTION_FIXTURES)
@given(
    records=trace_sets(stamps=True),
    corpus=st.none() | st.frozensets(st.sampled_from(DOCS), max_size=len(DOCS)),
    aged=st.booleans(),
    empty=st.sampled_from(["skip", "zero"]),
)
def test_stale_label_filtering_equals_the_definitions(
    folder: Path,
    form_name: str,
    records: list[dict[str, Any]],
    corpus: frozenset[str] | None,
    aged: bool,
    empty: str,
) -> None:
    label_filter = LabelFilter(corpus=corpus, max_age=MAX_AGE if aged else None, as_of=AS_OF)
    run = _run(empty, label_filter=label_filter)
    form = FORMS_BY_NAME[form_name]
    evaluation = rankgate.evaluate(form.build(records, folder), SPECS, settings=run)
    expected = expect(records, empty=empty, corpus=corpus, max_age=aged)
    assert_matches(evaluation, expected, form_name)
    same_evaluation(evaluation, _reference(records, folder, run), form_name)


# --- dotted field paths -----------------------------------------------------------------------------

NESTED_FORMS = {
    "jsonl": lambda r, d: write_jsonl(r, d / "nested.jsonl"),
    "list of dicts": lambda r, d: r,
    "parquet (struct columns)": lambda r, d: write_parquet(
        __import__("pyarrow").Table.from_pylist(r), d / "nested.parquet"
    ),
}


@pytest.mark.parametrize("form_name", list(NESTED_FORMS))
@settings(max_examples=examples(20), deadline=None, suppress_health_check=FUNCTION_FIXTURES)
@given(records=trace_sets(), empty=st.sampled_from(["skip", "zero"]))
def test_dotted_field_paths_equal_the_definitions(
    folder: Path, form_name: str, records: list[dict[str, Any]], empty: str
) -> None:
    if form_name.startswith("parquet"):
        # Parquet cannot store a struct without fields: grades must name some document.
        assume(any(r.get("relevance_scores") for r in records))
    moved = [nested(record) for record in records]
    if form_name.startswith("parquet"):
        # Every row with every key, as a table from dicts needs (see source_forms.full_rows).
        for row in moved:
            row["labels"] = {"ids": row["labels"].get("ids"), "scores": row["labels"].get("scores")}
            row.setdefault("team", None)
    run = _run(empty, fields=NESTED_FIELDS)
    evaluation = rankgate.evaluate(NESTED_FORMS[form_name](moved, folder), SPECS, settings=run)
    assert_matches(evaluation, expect(records, empty=empty), form_name)
    same_evaluation(evaluation, _reference(records, folder, _run(empty)), form_name)


# --- TREC run + qrels ---------------------------------------------------------------------------------


@settings(max_examples=examples(30), deadline=None, suppress_health_check=FUNCTION_FIXTURES)
@given(
    records=trace_sets(styles=JUDGMENT_STYLES, allow_empty_ranking=False),
    empty=st.sampled_from(["skip", "zero"]),
)
def test_trec_run_and_qrels_equal_the_definitions(
    folder: Path, records: list[dict[str, Any]], empty: str
) -> None:
    assume(trec_holds(records))
    source = TrecSource(write_run(records, folder / "t.run"), write_qrels(records, folder / "q"))
    run = _run(empty, segment_by=())
    evaluation = rankgate.evaluate(source, SPECS, settings=run)
    assert_matches(evaluation, expect(records, empty=empty), "trec")


# --- invalid rows -------------------------------------------------------------------------------------

#: kind -> (how to break a record, the field the message must name, form kinds that hold it).
INVALID_KINDS: dict[str, tuple[Any, str, tuple[str, ...]]] = {
    "empty document ID": (
        lambda r: {**r, "retrieved_ids": [*r["retrieved_ids"], ""]},
        "retrieved_ids[",
        ("json", "text", "typed"),
    ),
    "negative grade": (
        lambda r: {**r, "relevance_scores": {"a": -1}},
        "relevance_scores.a",
        ("json", "text", "typed"),
    ),
    "grade past the largest": (
        lambda r: {**r, "relevance_scores": {"b": 5000}},
        "relevance_scores.b",
        ("json", "text", "typed"),
    ),
    "ranking missing": (
        lambda r: {k: v for k, v in r.items() if k != "retrieved_ids"},
        "retrieved_ids",
        ("json", "text", "typed"),
    ),
    "ranking not a list": (
        lambda r: {**r, "retrieved_ids": "abc"},
        "retrieved_ids",
        ("json", "text"),
    ),
    "relevant_ids not a list": (
        lambda r: {**r, "relevant_ids": 7},
        "relevant_ids",
        ("json",),
    ),
}


@st.composite
def with_invalid_rows(draw: st.DrawFn) -> tuple[list[dict[str, Any]], dict[int, str]]:
    """A trace set with some records broken, and which kind broke each."""
    records = draw(trace_sets(min_queries=2, max_queries=8))
    broken: dict[int, str] = {}
    for position in range(len(records)):
        if draw(st.integers(0, 3)) == 0:
            kind = draw(st.sampled_from(list(INVALID_KINDS)))
            records[position] = INVALID_KINDS[kind][0](records[position])
            broken[position] = kind
    return records, broken


def _holds(form: Form, broken: dict[int, str]) -> bool:
    return all(form.kind in INVALID_KINDS[kind][2] for kind in broken.values())


@pytest.mark.parametrize("form", FORMS, ids=lambda f: f.name)
@settings(max_examples=examples(25), deadline=None, suppress_health_check=FUNCTION_FIXTURES)
@given(case=with_invalid_rows())
def test_invalid_rows_give_the_same_counts_and_messages(
    folder: Path, form: Form, case: tuple[list[dict[str, Any]], dict[int, str]]
) -> None:
    records, broken = case
    assume(_holds(form, broken) and form.holds(records))
    source = form.build(records, folder)
    skip = _run("skip", on_invalid="skip")
    evaluation = rankgate.evaluate(source, SPECS, settings=skip)
    assert_matches(evaluation, expect(records, invalid=frozenset(broken)), form.name)
    reference = _reference(records, folder, skip)
    same_evaluation(evaluation, reference, form.name)
    # The invalid examples name the same fields and problems; their locations are the form's own.
    got = [(e.field, e.problem) for e in evaluation.summary.invalid_examples]
    want = [(e.field, e.problem) for e in reference.summary.invalid_examples]
    assert got == want
    for example, position in zip(evaluation.summary.invalid_examples, sorted(broken), strict=False):
        assert example.location == form.location(folder, position)
        assert (example.field or "").startswith(INVALID_KINDS[broken[position]][1])
    if not broken:
        return
    # Stopping at the first: one line, located at that record, the same words as JSON Lines.
    first = min(broken)
    with pytest.raises(InputError) as failure:
        rankgate.evaluate(form.build(records, folder), SPECS, settings=_run("skip"))
    with pytest.raises(InputError) as reference_failure:
        rankgate.evaluate(folder / "reference.jsonl", SPECS, settings=_run("skip"))
    message = str(failure.value)
    assert "\n" not in message
    assert message.startswith(form.location(folder, first) + ": "), message
    assert (failure.value.field, failure.value.problem) == (
        reference_failure.value.field,
        reference_failure.value.problem,
    )


#: What a store row can hold: its ranking column is always a list, its attributes any JSON.
STORE_INVALID_KINDS = [
    "empty document ID",
    "negative grade",
    "grade past the largest",
    "relevant_ids not a list",
]


@settings(max_examples=examples(10), deadline=None, suppress_health_check=FUNCTION_FIXTURES)
@given(case=with_invalid_rows())
def test_invalid_store_rows_give_the_same_counts_and_messages(
    request: pytest.FixtureRequest,
    folder: Path,
    store_kind: str,
    case: tuple[list[dict[str, Any]], dict[int, str]],
) -> None:
    records, broken = case
    assume(all(kind in STORE_INVALID_KINDS for kind in broken.values()))
    url = _store_url(store_kind, request, folder)
    fill_store(url, records)
    skip = _run("skip", on_invalid="skip")
    evaluation = rankgate.evaluate(url, SPECS, settings=skip)
    assert_matches(evaluation, expect(records, invalid=frozenset(broken)), url)
    reference = _reference(records, folder, skip)
    same_evaluation(_without_query_set(evaluation, url), reference, url)
    got = [(e.field, e.problem) for e in evaluation.summary.invalid_examples]
    assert got == [(e.field, e.problem) for e in reference.summary.invalid_examples]
    if broken:
        with pytest.raises(InputError) as failure:
            rankgate.evaluate(url, SPECS, settings=_run("skip"))
        assert str(failure.value).endswith(
            str(reference.summary.invalid_examples[0]).split(": ", 1)[1]
        )
        assert f" row {min(broken) + 1}: " in str(failure.value)


def test_a_message_names_the_record_not_a_neighbour(folder: Path) -> None:
    """A fixed case of the property above, readable on its own."""
    records = [
        {"query_id": "q0", "retrieved_ids": ["a"], "relevant_ids": ["a"]},
        {"query_id": "q1", "retrieved_ids": ["a", ""], "relevant_ids": ["a"]},
    ]
    for form in FORMS:
        with pytest.raises(InputError) as failure:
            rankgate.evaluate(form.build(records, folder), ["mrr"])
        assert str(failure.value) == (
            f"{form.location(folder, 1)}: field 'retrieved_ids[1]': document ID is an empty string"
        ), form.name


def test_csv_location_counts_the_header(folder: Path) -> None:
    path = write_csv([{"query_id": "q0", "retrieved_ids": "x"}], folder / "one.csv")
    with pytest.raises(InputError, match=re.escape(f"{path}:2: field 'retrieved_ids'")):
        rankgate.evaluate(path, ["mrr"])
