"""The pytest plugin and ``rankgate.testing.assert_retrieval``, run through pytest's own ``pytester``.

Every expected value is worked out by hand from four queries, each with one relevant document
``a``, so the reciprocal rank is 1 / (rank of ``a``), or 0 when ``a`` was not retrieved:

    query  type       ranking   RR
    q1     factual    a b c     1
    q2     factual    b a c     1/2
    q3     multi_hop  c b a     1/3
    q4     multi_hop  c b       0

MRR: overall 11/24 = 0.458333, factual 3/4 = 0.75, multi_hop 1/6 = 0.166667. Against the gate
``mrr>=0.5`` with ``query_type=multi_hop`` held to ``mrr>=0.3`` instead: overall misses by
-0.041667, multi_hop by -0.133333, factual passes.

The plugin is loaded with ``-p rankgate.pytest_plugin``, which is a no-op once the ``pytest11``
entry point (named ``rankgate.pytest_plugin`` for exactly this reason) is installed.
"""

from __future__ import annotations

import json
import textwrap
import warnings
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import lxml.html
import pytest

from rankgate import InputError, UsageError
from rankgate.errors import ConfigError, RankgateError, SpecError
from rankgate.gates import GatePolicy
from rankgate.testing import RetrievalAssertionError, RetrievalWarning, assert_retrieval

pytest_plugins = ["pytester"]

PLUGIN = ("-p", "rankgate.pytest_plugin", "-p", "no:cacheprovider")

TRACES = [
    {"query_id": "q1", "retrieved_ids": ["a", "b", "c"], "relevant_ids": ["a"], "query_type": "factual"},
    {"query_id": "q2", "retrieved_ids": ["b", "a", "c"], "relevant_ids": ["a"], "query_type": "factual"},
    {"query_id": "q3", "retrieved_ids": ["c", "b", "a"], "relevant_ids": ["a"], "query_type": "multi_hop"},
    {"query_id": "q4", "retrieved_ids": ["c", "b"], "relevant_ids": ["a"], "query_type": "multi_hop"},
]  # fmt: skip

SEGMENTED: dict[str, Any] = dict(
    gates=["mrr>=0.5"],
    segments=["query_type"],
    segment_gates={"query_type=multi_hop": ["mrr>=0.3"]},
    policy=GatePolicy(min_queries=2),
)

# The message, line for line: the verdict, then the misses as `rankgate eval` lists them (the
# largest miss first), each with its group's lowest-scoring queries on the gated metric.
FAILURE = """\
FAIL · 2 of 3 checks failed · 4 queries scored
what failed, worst first:
  query_type=multi_hop: mrr = 0.1667, needs >= 0.3 (margin -0.1333, 2 queries)
    worst queries on mrr: q4 0.0000, q3 0.3333
  mrr = 0.4583, needs >= 0.5 (margin -0.0417, 4 queries)
    worst queries on mrr: q4 0.0000, q3 0.3333, q2 0.5000, q1 1.0000"""

# A test module for the inner pytest runs: one passing and one failing assertion.
INNER_TESTS = """
import pytest
from rankgate.gates import GatePolicy


def test_overall_passes(rankgate_check):
    evaluation = rankgate_check("golden.jsonl", gates=["mrr>=0.4"])
    assert evaluation.mean("mrr") == pytest.approx(11 / 24)


def test_multi_hop_misses(rankgate_check):
    rankgate_check(
        "golden.jsonl",
        gates=["mrr>=0.5"],
        segments=["query_type"],
        segment_gates={"query_type=multi_hop": ["mrr>=0.3"]},
        policy=GatePolicy(min_queries=2),
    )
"""


def _jsonl(records: Sequence[Mapping[str, object]]) -> str:
    return "".join(json.dumps(record) + "\n" for record in records)


@pytest.fixture
def golden(pytester: pytest.Pytester) -> Path:
    """The four traces as ``golden.jsonl`` in the inner runs' directory."""
    path = pytester.path / "golden.jsonl"
    path.write_text(_jsonl(TRACES), encoding="utf-8")
    return path


# --- assert_retrieval --------------------------------------------------------------------------


def test_a_passing_assertion_returns_the_evaluation() -> None:
    evaluation = assert_retrieval(TRACES, "mrr>=0.4")
    assert evaluation.passed
    assert evaluation.mean("mrr") == pytest.approx(11 / 24)
    # Only the gated metric is computed, not rankgate's default set.
    assert [str(spec) for spec in evaluation.metrics] == ["mrr"]


def test_a_failing_assertion_raises_with_the_miss_list() -> None:
    with pytest.raises(RetrievalAssertionError) as raised:
        assert_retrieval(TRACES, **SEGMENTED)
    assert str(raised.value) == FAILURE
    assert isinstance(raised.value, AssertionError)
    # The whole result travels with the failure.
    evaluation = raised.value.evaluation
    assert evaluation.segment("query_type", "multi_hop").means[evaluation.metrics[0]] == (
        pytest.approx(1 / 6)
    )


def test_a_gate_from_above_lists_the_highest_queries_first() -> None:
    """Under ``<=`` the worst queries are the highest: q1 (1) and q2 (1/2) pull the mean over."""
    with pytest.raises(RetrievalAssertionError) as raised:
        assert_retrieval(TRACES, ["mrr<=0.4"], worst=2)
    assert str(raised.value) == (
        "FAIL · 1 of 1 check failed · 4 queries scored\n"
        "what failed, worst first:\n"
        "  mrr = 0.4583, needs <= 0.4 (margin +0.0583, 4 queries)\n"
        "    worst queries on mrr: q1 1.0000, q2 0.5000"
    )


def test_a_coverage_minimum_failure_is_listed() -> None:
    unlabeled = [*TRACES, {"query_id": "q5", "retrieved_ids": ["a"]}]
    with pytest.raises(RetrievalAssertionError) as raised:
        assert_retrieval(unlabeled, "mrr>=0.4", policy=GatePolicy(min_coverage=0.9))
    assert str(raised.value).splitlines()[-1] == (
        "  overall: annotation coverage 80.0% is below the minimum 90%: too few labeled queries "
        "to trust this evaluation (a coverage problem, not a quality one)"
    )


def test_gates_and_segment_gates_come_from_a_config(tmp_path: Path) -> None:
    config = tmp_path / "rankgate.toml"
    config.write_text(
        textwrap.dedent(
            """
            segment_by = ["query_type"]
            min_queries = 2

            [gates]
            mrr = 0.5

            [segments.query_type.multi_hop.gates]
            mrr = 0.3
            """
        ),
        encoding="utf-8",
    )
    with pytest.raises(RetrievalAssertionError) as raised:
        assert_retrieval(TRACES, config=config)
    assert str(raised.value) == FAILURE
    # A gate given in the call replaces the config's on the same metric and operator.
    assert assert_retrieval(TRACES, "mrr>=0.1", config=config, segment_gates={
        "query_type=multi_hop": "mrr>=0.1"
    }).passed  # fmt: skip


def test_segments_too_small_to_check_warn() -> None:
    with pytest.warns(RetrievalWarning, match=r"2 gates not checked.*query_type=multi_hop"):
        assert_retrieval(TRACES, "mrr>=0.1", segments="query_type")


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (
            lambda path: assert_retrieval(path / "nowhere.jsonl", "mrr>=0.5"),
            UsageError,
            "nowhere.jsonl: no such file",
        ),
        (
            lambda path: assert_retrieval(
                [*TRACES, {"query_id": "q5", "retrieved_ids": "a b"}], "mrr>=0.5"
            ),
            InputError,
            "<records> row 5: field 'retrieved_ids': expected a list of IDs, got string",
        ),
        (lambda path: assert_retrieval(TRACES, "mrr>=high"), SpecError, "is not a number"),
        (lambda path: assert_retrieval(TRACES), UsageError, "checks nothing"),
        (
            lambda path: assert_retrieval(TRACES, ["mrr>=0.5", "mrr>=0.6"]),
            UsageError,
            "gate 'mrr>=0.6' repeats 'mrr>=0.5'",
        ),
        (
            lambda path: assert_retrieval(TRACES, segment_gates={"multi_hop": ["mrr>=0.3"]}),
            ConfigError,
            "must name one segment as FIELD=VALUE",
        ),
        (
            lambda path: assert_retrieval(
                TRACES, "mrr>=0.5", config=path / "rankgate.toml", policy=GatePolicy()
            ),
            UsageError,
            "config and policy both set",
        ),
    ],
    ids=["missing file", "malformed record", "bad gate", "no gate", "repeated gate",
         "segment without value", "config and policy"],
)  # fmt: skip
def test_bad_input_raises_rankgate_errors_not_assertion_errors(
    tmp_path: Path, call: Callable[[Path], object], error: type[RankgateError], message: str
) -> None:
    with pytest.raises(error) as raised:
        call(tmp_path)
    assert message in str(raised.value)
    assert not isinstance(raised.value, AssertionError)


# --- the plugin, through pytester -------------------------------------------------------------


def test_the_fixture_passes_and_fails_like_an_assertion(
    pytester: pytest.Pytester, golden: Path
) -> None:
    pytester.makepyfile(test_search=INNER_TESTS)
    result = pytester.runpytest(*PLUGIN)
    result.assert_outcomes(passed=1, failed=1)
    # The failure reads as the miss list, pointing at the test's own call.
    result.stdout.fnmatch_lines(
        [
            "E       rankgate.testing.RetrievalAssertionError: "
            + FAILURE.splitlines()[0].replace("[", "[[]"),
            *(f"E       {line}" for line in FAILURE.splitlines()[1:]),
            "",
            "test_search.py:11: RetrievalAssertionError",
        ],
        consecutive=True,
    )
    # No frame inside rankgate is shown: __tracebackhide__.
    assert "rankgate/testing.py" not in result.stdout.str()


def test_bad_input_is_an_error_in_the_test_not_a_retrieval_failure(
    pytester: pytest.Pytester, golden: Path
) -> None:
    golden.write_text(
        _jsonl(TRACES) + '{"query_id": "q5", "retrieved_ids": "a b"}\n', encoding="utf-8"
    )
    pytester.makepyfile(
        """
        def test_broken_golden_set(rankgate_check):
            rankgate_check("golden.jsonl", gates=["mrr>=0.5"])

        def test_missing_golden_set(rankgate_check):
            rankgate_check("missing.jsonl", gates=["mrr>=0.5"])
        """
    )
    result = pytester.runpytest(*PLUGIN)
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(
        [
            "E *rankgate.errors.InputError: golden.jsonl:5: field 'retrieved_ids': "
            "expected a list of IDs, got string",
            "E *rankgate.errors.UsageError: missing.jsonl: no such file",
        ]
    )
    assert "RetrievalAssertionError" not in result.stdout.str()


def test_the_marker_is_registered_and_selects_retrieval_tests(
    pytester: pytest.Pytester, golden: Path
) -> None:
    pytester.makepyfile(
        """
        import pytest
        from rankgate.testing import assert_retrieval

        @pytest.mark.retrieval
        def test_tagged():
            assert_retrieval("golden.jsonl", "mrr>=0.4")

        def test_uses_the_fixture(rankgate_check):
            rankgate_check("golden.jsonl", gates=["mrr>=0.4"])

        def test_unrelated():
            pass
        """
    )
    strict = ("--strict-markers", "-W", "error::pytest.PytestUnknownMarkWarning")
    selected = pytester.runpytest(*PLUGIN, *strict, "-m", "retrieval", "-v")
    selected.assert_outcomes(passed=2, deselected=1)
    selected.stdout.fnmatch_lines(["*::test_tagged PASSED*", "*::test_uses_the_fixture PASSED*"])
    others = pytester.runpytest(*PLUGIN, *strict, "-m", "not retrieval", "-v")
    others.assert_outcomes(passed=1, deselected=2)
    others.stdout.fnmatch_lines(["*::test_unrelated PASSED*"])
    markers = pytester.runpytest(*PLUGIN, "--markers")
    markers.stdout.fnmatch_lines(["@pytest.mark.retrieval: a test that asserts retrieval quality*"])


def test_the_report_holds_every_assertion(pytester: pytest.Pytester, golden: Path) -> None:
    # A query ID that looks like markup, and a test ID that is markup: both must stay text.
    (pytester.path / "odd.jsonl").write_text(
        _jsonl([{"query_id": 'q" id="evil', "retrieved_ids": ["x"], "relevant_ids": ["a"]}]),
        encoding="utf-8",
    )
    pytester.makepyfile(
        test_search=INNER_TESTS
        + textwrap.dedent(
            """
            @pytest.mark.parametrize("label", ["<b>bold</b>"])
            def test_twice(rankgate_check, label):
                rankgate_check("golden.jsonl", gates="mrr>=0.4")
                rankgate_check("odd.jsonl", gates="mrr>=0.5", metrics=["ndcg@10"])

            def test_refused(rankgate_check):
                rankgate_check("missing.jsonl", gates="mrr>=0.4")
            """
        )
    )
    result = pytester.runpytest(*PLUGIN, "--rankgate-report", "reports/session.html")
    result.assert_outcomes(passed=1, failed=3)
    report = pytester.path / "reports" / "session.html"
    result.stdout.fnmatch_lines(
        [
            f"rankgate report: {report} (5 retrieval assertions: 2 passed, 2 failed, "
            "1 refused as bad input)"
        ]
    )
    page = lxml.html.fromstring(report.read_bytes())

    nodeids = [
        "test_search.py::test_overall_passes",
        "test_search.py::test_multi_hop_misses",
        "test_search.py::test_twice[<b>bold</b>]",
        "test_search.py::test_twice[<b>bold</b>] [2]",
        "test_search.py::test_refused",
    ]
    rows = page.xpath("//section[h2='Assertions']//tbody/tr")
    assert [row.xpath("string(td[2])") for row in rows] == nodeids
    assert [row.xpath("string(td[1])") for row in rows] == ["PASS", "FAIL", "PASS", "FAIL", "ERROR"]
    assert [row.xpath("string(td[3])") for row in rows] == [
        "golden.jsonl", "golden.jsonl", "golden.jsonl", "odd.jsonl", "missing.jsonl"
    ]  # fmt: skip
    assert rows[1].xpath("string(td[4])") == (
        "FAIL · 2 of 3 checks failed: query_type=multi_hop: mrr = 0.1667, needs >= 0.3 "
        "(margin -0.1333, 2 queries) (and 1 more)"
    )
    assert rows[4].xpath("string(td[4])") == "error: missing.jsonl: no such file"
    assert [row.xpath("string(td[2]/a/@href)") for row in rows] == [f"#a{n}" for n in range(1, 6)]

    sections = page.xpath("//section[@class='assertion']")
    assert [s.get("id") for s in sections] == [f"a{n}" for n in range(1, 6)]
    assert [s.xpath("string(h2)") for s in sections] == nodeids
    # A failure shows the message the test printed, then its full eval report.
    assert sections[1].xpath("string(pre)") == FAILURE
    assert "rankgate eval" in sections[1].xpath("string(.//h1)")
    assert sections[1].xpath(".//h2[.='Segments']")
    assert sections[0].xpath("pre") == []
    assert "Refused as bad input: missing.jsonl: no such file" in sections[4].text_content()

    # Markup in names and IDs stayed text; every element ID is unique once per page.
    assert page.xpath("//b[.='bold']") == []
    assert "test_twice[<b>bold</b>]" in sections[2].xpath("string(h2)")
    assert 'q" id="evil' in sections[3].text_content()
    ids = Counter(element.get("id") for element in page.iter() if element.get("id"))
    assert [name for name, count in ids.items() if count > 1] == []
    assert "evil" not in ids and "a4-evil" not in ids
    # Each report's filter box reaches its own table.
    for position, section in enumerate(sections[:4], 1):
        box = section.xpath(".//input[@class='filter']")[0]
        assert box.get("data-table") == f"a{position}-worst"
        assert section.xpath(f".//table[@id='a{position}-worst']")
    # The page keeps the report's Content-Security-Policy.
    policy = page.xpath("string(//meta[@http-equiv='Content-Security-Policy']/@content)")
    assert policy.startswith("default-src 'none'")


def test_the_report_is_written_when_no_assertion_ran(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_unrelated():\n    pass\n")
    pytester.runpytest(*PLUGIN, "--rankgate-report", "report.html").assert_outcomes(passed=1)
    page = lxml.html.fromstring((pytester.path / "report.html").read_bytes())
    assert "No retrieval assertion ran in this session" in page.text_content()


def test_a_report_path_that_is_a_directory_is_refused(pytester: pytest.Pytester) -> None:
    (pytester.path / "out").mkdir()
    pytester.makepyfile("def test_unrelated():\n    pass\n")
    result = pytester.runpytest(*PLUGIN, "--rankgate-report", "out")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--rankgate-report out: is a directory; give a file name*"])


def test_a_report_under_xdist_is_refused(pytester: pytest.Pytester) -> None:
    """pytest-xdist's ``-n``/``--numprocesses`` (stood in for here) would split the
    assertions over workers, each writing its own part over the others'."""
    pytester.makeconftest(
        """
        def pytest_addoption(parser):
            parser.addoption("--numprocesses", dest="numprocesses", type=int, default=None)
        """
    )
    pytester.makepyfile("def test_unrelated():\n    pass\n")
    result = pytester.runpytest(*PLUGIN, "--numprocesses=2", "--rankgate-report", "report.html")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*does not combine the assertions of pytest-xdist workers*"])
    single = pytester.runpytest(*PLUGIN, "--numprocesses=0", "--rankgate-report", "report.html")
    single.assert_outcomes(passed=1)


def test_without_the_option_nothing_is_kept_or_written(
    pytester: pytest.Pytester, golden: Path
) -> None:
    pytester.makepyfile(test_search=INNER_TESTS)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = pytester.runpytest(*PLUGIN)
    result.assert_outcomes(passed=1, failed=1)
    assert "rankgate report" not in result.stdout.str()
    assert sorted(p.name for p in pytester.path.iterdir()) == ["golden.jsonl", "test_search.py"]
