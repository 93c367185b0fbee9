"""Issue 15, library side: hostile metric specs, one rule for names and case, segment fields that
do not exist, gates on interval bounds without intervals, short reprs, to_json, and missing extras."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rankgate
from rankgate import SpecError, make_metric, parse_metric, parse_metric_list
from rankgate.errors import UsageError
from rankgate.gates import GatePolicy, SegmentRule, parse_gate
from rankgate.metrics.registry import MetricDef, all_metrics
from rankgate.segments import SegmentKey
from rankgate.spec import MAX_CUTOFF, MAX_SPEC_LENGTH

# ---------------------------------------------------------------------------------------------
# Item 1: any text is a spec or a SpecError, never another exception.


@pytest.mark.parametrize(
    "text",
    [
        "ndcg@99999999999999999999",
        f"ndcg@{MAX_CUTOFF + 1}",
        "ndcg@" + "9" * 5000,
        "ndcg_" + "9" * 5000,
        "P_99999999999999999999",
        "x" * (MAX_SPEC_LENGTH + 1),
        "precision(rel=1e999)@5",
        "precision(rel=nan)@5",
        "ndcg@10\x00",
        "ndcg@1\u0660",
    ],
)
def test_hostile_specs_are_spec_errors_naming_the_spec(text: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_metric(text)
    message = str(caught.value)
    assert "\n" not in message.strip()
    assert repr(text)[1:20] in message or "characters long" in message


def test_the_deepest_cutoff_allowed_still_parses() -> None:
    assert parse_metric(f"recall@{MAX_CUTOFF}").k == MAX_CUTOFF
    assert parse_metric(f"recall_{MAX_CUTOFF}").k == MAX_CUTOFF
    with pytest.raises(SpecError, match="beyond the largest allowed"):
        parse_metric_list([f"ndcg@5,{MAX_CUTOFF + 1}"])
    with pytest.raises(SpecError, match="beyond the largest allowed"):
        make_metric("ndcg", 10**30)


def test_a_huge_cutoff_in_a_gate_is_a_spec_error() -> None:
    with pytest.raises(SpecError, match="beyond the largest allowed"):
        parse_gate("ndcg@99999999999999999999>=0.5")


@pytest.mark.parametrize("value", [None, 10, b"ndcg@10", ["ndcg@10"]])
def test_parse_metric_refuses_non_text_with_a_spec_error(value: Any) -> None:
    with pytest.raises(SpecError):
        parse_metric(value)


_SPEC_ALPHABET = st.sampled_from([*"ndcgpmrapecisol@()=,._-0123456789 NDCGPRMAL", "\u202e"])


@settings(max_examples=600, deadline=None)
@given(text=st.one_of(st.text(max_size=40), st.text(_SPEC_ALPHABET, max_size=30)))
def test_any_text_parses_or_raises_spec_error_and_round_trips(text: str) -> None:
    try:
        spec = parse_metric(text)
    except SpecError as problem:
        assert str(problem)
        return
    assert parse_metric(str(spec)) == spec
    assert str(parse_metric(str(spec))) == str(spec)


@settings(max_examples=300, deadline=None)
@given(texts=st.lists(st.text(_SPEC_ALPHABET, max_size=25), max_size=3))
def test_any_metric_list_parses_or_raises_spec_error(texts: list[str]) -> None:
    try:
        specs = parse_metric_list(texts)
    except SpecError:
        return
    assert [parse_metric(str(spec)) for spec in specs] == specs


# ---------------------------------------------------------------------------------------------
# Item 2: metric names ignore case; aliases resolve exactly to their documented canonical form.


def _documented_forms(definition: MetricDef) -> list[tuple[str, str]]:
    """(a spelling, the canonical spec it must parse to) for the name and every alias."""
    k = 7 if definition.cutoff else None
    canonical = str(make_metric(definition.name, k))
    forms = [(definition.name + (f"@{k}" if k else ""), canonical)]
    for alias in definition.aliases:
        expected = str(make_metric(definition.name, k, dict(alias.params)))
        if alias.style == "trec":
            forms.append((f"{alias.name}_{k}" if k else alias.name, expected))
            if k:
                forms.append((f"{alias.name}.{k}", expected))
        else:
            forms.append((alias.name + (f"@{k}" if k else ""), expected))
    return forms


ALL_FORMS = [form for definition in all_metrics() for form in _documented_forms(definition)]


@settings(max_examples=400, deadline=None)
@given(form=st.sampled_from(ALL_FORMS), flips=st.lists(st.booleans(), min_size=40, max_size=40))
def test_every_alias_in_any_case_parses_to_its_documented_canonical_form(
    form: tuple[str, str], flips: list[bool]
) -> None:
    typed, canonical = form
    variant = "".join(
        char.swapcase() if flip else char
        for char, flip in zip(typed, [*flips, *[False] * len(typed)], strict=False)
    )
    assert str(parse_metric(variant)) == canonical
    assert str(parse_metric(typed.upper())) == canonical
    assert str(parse_metric(typed.lower())) == canonical


def test_no_two_metrics_share_a_name_that_differs_only_in_case() -> None:
    owners: dict[tuple[str, str], str] = {}
    for definition in all_metrics():
        names = [("at", definition.name)] + [(a.style, a.name) for a in definition.aliases]
        for style, name in names:
            key = (style, name.lower())
            assert owners.setdefault(key, definition.name) == definition.name, key


def test_the_metrics_listing_documents_ndcg_where_it_resolves() -> None:
    """``nDCG@10`` is ``ndcg@10`` (exponential gain): the listing and the docs say so under ndcg,
    and the linear-gain alias is trec_eval's ndcg_cut."""
    assert parse_metric("nDCG@10") == parse_metric("ndcg@10") == parse_metric("NDCG@10")
    assert parse_metric("ndcg_cut_10") == parse_metric("ndcg(gain=linear)@10")
    from pathlib import Path

    from rankgate.report.metric_docs import render_metrics_markdown

    generated = render_metrics_markdown()
    docs = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"
    assert docs.read_text(encoding="utf-8") == generated, "regenerate docs/metrics.md"
    ndcg_row = next(line for line in generated.splitlines() if line.startswith("| `ndcg("))
    assert "`nDCG@10` and `NDCG@10` are `ndcg@10`, exponential gain" in ndcg_row
    assert "ndcg_cut_k" in ndcg_row


RECORDS = [
    {
        "query_id": f"q{i}",
        "retrieved_ids": ["a", "b", "c"],
        "relevance_scores": {"a": i % 3, "c": 2},
        "query_type": "faq" if i % 2 else "howto",
    }
    for i in range(12)
]


@pytest.mark.parametrize("spelling", ["nDCG@10", "NDCG@10", "ndcg(gain=Exponential)@10"])
def test_every_lookup_accepts_any_spelling_of_the_same_spec(spelling: str) -> None:
    evaluation = rankgate.evaluate(RECORDS, ["ndcg@10"], [f"{spelling}>=0.1"], settings=None)
    assert evaluation.mean(spelling) == evaluation.mean("ndcg@10")
    assert evaluation.interval(spelling) == evaluation.intervals[parse_metric("ndcg@10")]
    assert evaluation.values_for(spelling) is evaluation.values[parse_metric("ndcg@10")]
    with pytest.raises(KeyError, match=r"computed: ndcg@10"):
        evaluation.mean("ndcg_cut_10")  # linear gain: a different metric, not computed
    assert evaluation.gates[0].gate.metric == parse_metric("ndcg@10")
    assert evaluation.metrics == (parse_metric("ndcg@10"),)
    comparison = rankgate.compare(RECORDS, RECORDS, metrics=["ndcg@10"])
    assert comparison.cell(spelling) == comparison.cell("ndcg@10")


# ---------------------------------------------------------------------------------------------
# Item 4: a gate on an interval bound without intervals is refused, not checked on the mean.


@pytest.mark.parametrize("gate_on", ["lower_bound", "upper_bound"])
def test_gating_on_a_bound_without_resamples_is_refused(gate_on: str) -> None:
    with pytest.raises(UsageError, match=f"--gate-on {gate_on} needs resamples > 0"):
        rankgate.evaluate(
            RECORDS,
            ["ndcg@10"],
            ["ndcg@10>=0.1"],
            settings=rankgate.Settings(resamples=0),
            policy=GatePolicy(gate_on=gate_on),
        )


def test_a_segment_rule_gating_on_a_bound_without_resamples_is_refused() -> None:
    rule = SegmentRule(SegmentKey("query_type", "faq"), gate_on="lower_bound")
    with pytest.raises(UsageError, match=r"query_type=faq.*needs resamples > 0"):
        rankgate.evaluate(
            RECORDS,
            ["ndcg@10"],
            settings=rankgate.Settings(resamples=0),
            policy=GatePolicy(rules=(rule,)),
        )


def test_gating_on_the_mean_without_resamples_still_works() -> None:
    evaluation = rankgate.evaluate(
        RECORDS, ["ndcg@10"], ["ndcg@10>=0.1"], settings=rankgate.Settings(resamples=0)
    )
    assert evaluation.passed and evaluation.gates[0].statistic == "mean"


def test_the_cli_refuses_lower_bound_with_zero_resamples(tmp_path: Any) -> None:
    traces = tmp_path / "t.jsonl"
    traces.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "rankgate",
            "eval",
            str(traces),
            "--gate",
            "ndcg@10>=0.1",
            "--gate-on",
            "lower_bound",
            "--resamples",
            "0",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 2, run.stderr
    assert "--gate-on lower_bound needs resamples > 0" in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1


# ---------------------------------------------------------------------------------------------
# Item 3: a segment field no record has is an error; soft problems are warnings the result carries.


def test_a_misspelled_segment_field_is_a_usage_error_naming_the_fields_that_exist() -> None:
    with pytest.raises(UsageError) as caught:
        rankgate.evaluate(
            RECORDS,
            ["ndcg@10"],
            ["ndcg@10>=0.7"],
            settings=rankgate.Settings(segment_by=("query_tpye",)),
        )
    message = str(caught.value)
    assert "'query_tpye'" in message and "'query_type'" in message
    assert "12 records" in message


def test_the_cli_fails_a_misspelled_segment_field_with_exit_2(tmp_path: Any) -> None:
    traces = tmp_path / "t.jsonl"
    traces.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    base = [sys.executable, "-m", "rankgate", "eval", str(traces), "--gate", "ndcg@10>=0.99"]
    wrong = subprocess.run(
        [*base, "--segment-by", "query_tpye"], capture_output=True, text=True, check=False
    )
    assert wrong.returncode == 2
    assert "query_tpye" in wrong.stderr and "query_type" in wrong.stderr
    assert len(wrong.stderr.strip().splitlines()) == 1
    right = subprocess.run(
        [*base, "--segment-by", "query_type"], capture_output=True, text=True, check=False
    )
    assert right.returncode == 1  # the correct spelling is the gate failing, as it should


def test_a_field_some_records_have_is_segmented_without_error() -> None:
    records = [dict(r) for r in RECORDS]
    for record in records[:9]:
        del record["query_type"]
    evaluation = rankgate.evaluate(
        records, ["ndcg@10"], settings=rankgate.Settings(segment_by=("query_type",))
    )
    assert [w for w in evaluation.warnings if "'query_type' is missing on 9 of 12" in w]
    # Cut at the rankings' depth (3), so the served-depth check has nothing to say.
    mostly_present = rankgate.evaluate(
        RECORDS[:3] + records[9:],
        ["ndcg@3"],
        settings=rankgate.Settings(segment_by=("query_type",)),
    )
    assert mostly_present.warnings == ()


def test_a_rule_for_a_value_never_seen_is_a_warning_listing_the_values_seen() -> None:
    rule = SegmentRule(SegmentKey("query_type", "FAQ"), gates=(parse_gate("ndcg@3>=0.99"),))
    evaluation = rankgate.evaluate(RECORDS, ["ndcg@3"], policy=GatePolicy(rules=(rule,)))
    (warning,) = evaluation.warnings
    assert "[segments.query_type.FAQ] matched no record" in warning
    assert "'faq', 'howto'" in warning


def test_a_rule_for_a_field_no_record_has_is_a_warning() -> None:
    rule = SegmentRule(SegmentKey("query_tpye", "faq"), gates=(parse_gate("ndcg@3>=0.99"),))
    evaluation = rankgate.evaluate(RECORDS, ["ndcg@3"], policy=GatePolicy(rules=(rule,)))
    (warning,) = evaluation.warnings
    assert "[segments.query_tpye]" in warning and "'query_type'" in warning


def test_a_config_section_for_a_value_never_seen_reaches_the_evaluation(tmp_path: Any) -> None:
    from rankgate.config import load_config

    config = tmp_path / "rankgate.toml"
    config.write_text('[segments.query_type.FAQ.gates]\n"ndcg@10" = 0.99\n')
    loaded = load_config(config)
    evaluation = rankgate.evaluate(
        RECORDS, ["ndcg@10"], policy=GatePolicy(rules=loaded.rules), settings=None
    )
    assert any("[segments.query_type.FAQ] matched no record" in w for w in evaluation.warnings)


def test_no_warning_for_a_clean_segmentation() -> None:
    evaluation = rankgate.evaluate(
        RECORDS, ["ndcg@3"], settings=rankgate.Settings(segment_by=("query_type",))
    )
    assert evaluation.warnings == ()


# ---------------------------------------------------------------------------------------------
# Item 5: short reprs, to_json beside to_pandas, and a hint naming the extra to install.


def _big_evaluation() -> Any:
    records = [
        {
            "query_id": f"query-{i:05d}",
            "retrieved_ids": [f"doc-{i}-{j}" for j in range(20)],
            "relevance_scores": {f"doc-{i}-3": 2},
            "query_type": "x" * 50,
        }
        for i in range(2000)
    ]
    return rankgate.evaluate(
        records,
        ["ndcg@10", "mrr"],
        ["ndcg@10>=0.9"],
        settings=rankgate.Settings(segment_by=("query_type",)),
    )


def test_evaluation_repr_is_a_short_summary() -> None:
    evaluation = _big_evaluation()
    text = repr(evaluation)
    assert len(text) < 300, text
    assert "2,000 read, 2,000 scored" in text
    assert f"ndcg@10={evaluation.mean('ndcg@10'):.4g}" in text
    assert "FAIL (0 of 2 checks passed)" in text and "1 segments" in text
    assert str(evaluation) == text


def test_comparison_repr_is_short() -> None:
    comparison = rankgate.compare(RECORDS, RECORDS, metrics=["ndcg@10", "mrr"])
    text = repr(comparison)
    assert len(text) < 300, text
    assert text.startswith("<Comparison baseline ") and "12 paired" in text and "PASS" in text
    assert len(repr(comparison.results[0])) < 200


def test_to_json_is_the_json_report() -> None:
    from rankgate.report.json_report import eval_report

    evaluation = rankgate.evaluate(RECORDS, ["ndcg@10"], ["ndcg@10>=0.1"])
    document = json.loads(evaluation.to_json(sources=["mem"]))
    assert document == json.loads(json.dumps(eval_report(evaluation, ["mem"])))
    assert document["passed"] is True and document["metrics"]["ndcg@10"] == evaluation.mean(
        "ndcg@10"
    )
    assert len(json.loads(evaluation.to_json(per_query=True))["per_query"]) == 12
    comparison = rankgate.compare(RECORDS, RECORDS, metrics=["ndcg@10"])
    assert json.loads(comparison.to_json())["passed"] is True


@pytest.mark.parametrize(("method", "package"), [("to_pandas", "pandas"), ("to_polars", "polars")])
def test_a_missing_dataframe_package_names_the_extra(
    method: str, package: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run in the same process with the package hidden: importing it raises ImportError."""
    monkeypatch.setitem(sys.modules, package, None)
    evaluation = rankgate.evaluate(RECORDS, ["ndcg@10"])
    with pytest.raises(UsageError) as caught:
        getattr(evaluation, method)()
    assert str(caught.value) == f"{method}() needs {package}: pip install 'rankgate[{package}]'"
    comparison = rankgate.compare(RECORDS, RECORDS, metrics=["ndcg@10"])
    with pytest.raises(UsageError, match=rf"rankgate\[{package}\]"):
        getattr(comparison, method)()


def test_a_missing_package_in_a_real_interpreter_gives_one_line() -> None:
    """A second interpreter whose import system finds no pandas, as on an install without it."""
    script = (
        "import rankgate\n"
        "ev = rankgate.evaluate([{'query_id':'q','retrieved_ids':['a'],'relevant_ids':['a']}],"
        " ['mrr'])\n"
        "try:\n"
        "    ev.to_pandas()\n"
        "except rankgate.UsageError as e:\n"
        "    print(e)\n"
    )
    hide = (
        "import sys\n"
        "class Hide:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'pandas' or name.startswith('pandas.'):\n"
        "            raise ModuleNotFoundError(name)\n"
        "sys.meta_path.insert(0, Hide())\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", hide + script], capture_output=True, text=True, check=False
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "to_pandas() needs pandas: pip install 'rankgate[pandas]'"


# ---------------------------------------------------------------------------------------------
# Item 6: EM propensities divide only where the posterior is defined (warnings are errors here).


ALWAYS_CLICKED = [
    {"query_id": "q", "retrieved_ids": ["a", "b"], "clicked_ids": ["a", "b"]},
    {"query_id": "q", "retrieved_ids": ["b", "a"], "clicked_ids": ["a", "b"]},
]


def test_em_on_pairs_clicked_every_time_gives_finite_propensities_without_warnings() -> None:
    import warnings

    import numpy as np

    from rankgate.clicks import click_labels, estimate_propensities, read_click_log

    log, _ = read_click_log(ALWAYS_CLICKED)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        propensities = estimate_propensities(log, "em", max_rank=2)
        click_labels(log, propensities)
    # Everything shown was clicked: both ranks were examined every time.
    assert np.array_equal(propensities.values, [1.0, 1.0])


def test_em_posterior_of_an_unclicked_impression_follows_the_model() -> None:
    """One pair shown at rank 1 (clicked) and rank 2 (not), another at rank 2 (clicked) and 1 (not):
    EM must stay finite and keep rank 1 at 1 by definition."""
    import numpy as np

    from rankgate.clicks import estimate_propensities, read_click_log

    log, _ = read_click_log(
        [
            {"query_id": "q", "retrieved_ids": ["a", "b"], "clicked_ids": ["a"]},
            {"query_id": "q", "retrieved_ids": ["b", "a"], "clicked_ids": ["a"]},
            {"query_id": "q", "retrieved_ids": ["a", "b"], "clicked_ids": []},
        ]
    )
    values = estimate_propensities(log, "em", max_rank=2).values
    assert np.all(np.isfinite(values)) and values[0] == 1.0 and values[1] > 0.0


def test_labels_from_clicks_em_prints_no_runtime_warning(tmp_path: Any) -> None:
    clicks = tmp_path / "clicks.jsonl"
    clicks.write_text("".join(json.dumps(r) + "\n" for r in ALWAYS_CLICKED))
    run = subprocess.run(
        [
            sys.executable,
            "-W",
            "error",
            "-m",
            "rankgate",
            "labels",
            "from-clicks",
            str(clicks),
            "--propensity",
            "em",
            "-o",
            str(tmp_path / "labels.jsonl"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert "Warning" not in run.stderr


# ---------------------------------------------------------------------------------------------
# Item 7: the HTML report isolates direction, never emits NUL, and clips long values.

RLO = "\u202e"
LONG_TEXT = "q" * 1_000_000  # the readers' bound on one text value is 1 MiB


def _hostile_records() -> list[dict[str, Any]]:
    return [
        {
            "query_id": f"id\x00{i}{RLO}",
            "query": LONG_TEXT if i == 0 else f"text {i}",
            "retrieved_ids": ["a", f"b{RLO}\x00"],
            "relevant_ids": [f"b{RLO}\x00"] if i % 4 else ["not-retrieved"],
            # U+202E before "gnp.exe" shows as "exe.png"; before a margin it would reverse it.
            "query_type": f"{RLO}gnp.exe" if i % 2 else "faq\u2066",
        }
        for i in range(40)
    ]


def _parse(page: str) -> Any:
    from lxml import html as lxml_html

    return lxml_html.document_fromstring(page)


def _hostile_page() -> str:
    from rankgate.report.html import render_eval_html

    evaluation = rankgate.evaluate(
        _hostile_records(),
        ["ndcg@10"],
        ["ndcg@10>=0.99"],
        settings=rankgate.Settings(segment_by=("query_type",)),
        policy=GatePolicy(min_queries=1),
        worst=40,
    )
    return render_eval_html(evaluation, [f"traces{RLO}.jsonl"])


def test_html_neutralises_bidi_controls_and_nul_everywhere() -> None:
    page = _hostile_page()
    for control in ["\x00", RLO, "\u2066", "\u2069"]:
        assert control not in page
    doc = _parse(page)
    text = doc.text_content()
    assert "<U+202E>gnp.exe" in text and "faq<U+2066>" in text
    assert "id\ufffd1<U+202E>" in text  # NUL shown as U+FFFD, the control made visible


def test_html_isolates_every_value_from_the_data_in_bdi() -> None:
    doc = _parse(_hostile_page())
    isolated = [element.text_content() for element in doc.cssselect("bdi")]
    # The segment named in the verdict's worst miss is isolated from the margin that follows it.
    verdict = doc.cssselect("section.verdict")[0]
    # (The verdict also lists warnings, each isolated too: the rankings hold 2 IDs, cut at 10.)
    group = verdict.cssselect("bdi")[0].text_content()
    assert group.startswith("query_type=")
    assert "margin" in verdict.text_content().split(group, 1)[1]
    # Source names, segment values, query IDs, document IDs and query text.
    assert "traces<U+202E>.jsonl" in isolated
    assert "query_type=<U+202E>gnp.exe" in isolated
    assert any(value.startswith("id\ufffd") for value in isolated)
    assert "text 3" in isolated
    for cell in doc.cssselect("#worst td.id, #segments tbody tr td:first-child"):
        assert cell.cssselect("bdi"), cell.text_content()


def test_html_clips_long_values_and_notes_their_length() -> None:
    from rankgate.report.html import TEXT_SHOWN
    from rankgate.report.svg import TOOLTIP_SHOWN

    page = _hostile_page()
    assert len(page.encode()) < 200_000  # the 1,000,000-character query text adds about 1 KB
    doc = _parse(page)
    (clipped,) = [span for span in doc.cssselect("#worst .clipped") if "qqq" in span.text_content()]
    assert clipped.text_content() == "q" * (TEXT_SHOWN - 1) + "…"
    assert clipped.getnext().text_content() == " (1,000,000 characters)"
    tooltip = clipped.get("title")
    assert tooltip.startswith("q" * 100) and tooltip.endswith("… (1,000,000 characters)")
    assert len(tooltip) <= TOOLTIP_SHOWN + 30


def test_comparison_html_isolates_and_clips_names_and_ids() -> None:
    from rankgate.report.html import render_comparison_html

    records = _hostile_records()
    worse = [dict(r, retrieved_ids=["a"]) for r in records]
    comparison = rankgate.compare(
        rankgate.Variant(f"base{RLO}", records),
        rankgate.Variant("x" * 5000, worse),
        metrics=["ndcg@10"],
        settings=rankgate.Settings(segment_by=("query_type",)),
    )
    page = render_comparison_html(comparison)
    assert "\x00" not in page and RLO not in page
    assert "x" * 1200 not in page  # a 5,000-character name is clipped everywhere it appears
    doc = _parse(page)
    assert "base<U+202E>" in [b.text_content() for b in doc.cssselect("header bdi")]
    verdict = doc.cssselect("section.verdict")[0]
    assert verdict.cssselect("bdi"), "the worst cell's candidate and group are isolated"


def test_html_shows_the_evaluation_warnings() -> None:
    from rankgate.report.html import render_eval_html

    rule = SegmentRule(SegmentKey("query_type", "FAQ"), gates=(parse_gate("ndcg@3>=0.99"),))
    evaluation = rankgate.evaluate(RECORDS, ["ndcg@3"], policy=GatePolicy(rules=(rule,)))
    doc = _parse(render_eval_html(evaluation, ["mem"]))
    (warning,) = doc.cssselect("section.verdict ul.warnings li")
    assert "[segments.query_type.FAQ] matched no record" in warning.text_content()


def test_an_empty_dry_run_under_a_bound_policy_is_allowed() -> None:
    """The Spark engine settles metrics with evaluate([]) at resamples=0 under the user's policy."""
    evaluation = rankgate.evaluate(
        [],
        ["ndcg@10"],
        ["ndcg@10>=0.5"],
        settings=rankgate.Settings(resamples=0),
        policy=GatePolicy(gate_on="lower_bound"),
    )
    assert evaluation.summary.read == 0


def test_a_partial_run_leaves_whole_input_checks_to_its_caller() -> None:
    """An engine scoring one partition cannot know whether another partition has the field; it
    passes partial=True and runs check_segments once over the combined counts."""
    from rankgate.segments import check_segments

    settings = rankgate.Settings(segment_by=("query_tpye",), resamples=0)
    part = rankgate.evaluate(
        RECORDS,
        ["ndcg@10"],
        settings=settings,
        policy=GatePolicy(gate_on="lower_bound"),
        partial=True,
    )
    assert part.warnings == ()
    with pytest.raises(UsageError, match="'query_tpye' is in none of the 12 records"):
        check_segments(settings, GatePolicy(), _counts(part), {}, part.segments, part.attributes)


def _counts(evaluation: Any) -> Any:
    from rankgate.segments import GroupCounts

    return GroupCounts(read=evaluation.summary.read, labeled=evaluation.summary.labeled)


def test_a_field_present_but_null_everywhere_is_a_warning_not_an_error() -> None:
    """A column of nulls exists (its name is right); it is reported as missing on every query."""
    records = [dict(record, shard=None) for record in RECORDS]
    evaluation = rankgate.evaluate(
        records, ["ndcg@10"], settings=rankgate.Settings(segment_by=("shard",))
    )
    assert any("'shard' is missing on 12 of 12 scored queries" in w for w in evaluation.warnings)


def test_with_nothing_scored_a_missing_field_cannot_change_the_verdict() -> None:
    unlabeled = [{"query_id": "q", "retrieved_ids": ["a"]}]
    evaluation = rankgate.evaluate(
        unlabeled,
        ["ndcg@10"],
        ["ndcg@10>=0.5"],
        settings=rankgate.Settings(segment_by=("query_tpye",)),
    )
    assert not evaluation.passed  # no value: the gate fails whatever the segmentation


_GATE_PIECES = st.sampled_from([*"ndcgmrap@()=<>,._-0123456789 e+", "inf", "nan", "\u202e"])


@settings(max_examples=400, deadline=None)
@given(text=st.one_of(st.text(max_size=40), st.lists(_GATE_PIECES, max_size=25).map("".join)))
def test_any_text_is_a_gate_or_a_spec_error(text: str) -> None:
    try:
        gate = parse_gate(text)
    except SpecError as problem:
        assert "\n" not in str(problem).strip()
        return
    assert parse_gate(str(gate)).metric == gate.metric


@pytest.mark.parametrize("text", [None, "ndcg@10>=" + "1" * 5000, "x" * 10_000 + ">=0.5"])
def test_hostile_gates_are_spec_errors(text: Any) -> None:
    with pytest.raises(SpecError):
        parse_gate(text)
