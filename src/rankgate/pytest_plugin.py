"""The pytest plugin: retrieval gates inside the test suite a team already runs.

Registered through the ``pytest11`` entry point, so installing rankgate is enough. It adds:

* the ``rankgate_check`` fixture: ``rankgate.testing.assert_retrieval`` (same arguments, returns
  the ``Evaluation``, raises ``RetrievalAssertionError`` with the miss list), which also records
  each assertion for the HTML report;
* the ``retrieval`` marker, registered so ``--strict-markers`` accepts it. A test that uses the
  fixture carries it without being tagged, so ``-m retrieval`` selects every retrieval test and
  ``-m "not retrieval"`` leaves them out of a quick run;
* ``--rankgate-report PATH``: one self-contained HTML file with the report of every assertion the
  fixture made in the session, one section per assertion (``rankgate eval``'s page, sections and
  all) under an index of test, source and verdict. Written even when no assertion ran, so a CI
  step that uploads it never finds it missing. Calls of ``assert_retrieval`` made without the
  fixture are not recorded: the plugin keeps no global state.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from rankgate.evaluate import Evaluation

# The plugin loads in every pytest session of an environment with rankgate installed, so what only
# an assertion or the report needs (the evaluator, the report renderers) is imported when used.

__all__ = [
    "MARKER",
    "Assertion",
    "RetrievalCheck",
    "pytest_addoption",
    "pytest_collection_modifyitems",
    "pytest_configure",
    "pytest_sessionfinish",
    "pytest_terminal_summary",
    "rankgate_check",
    "render_session_html",
]

MARKER = "retrieval"
FIXTURE = "rankgate_check"


@dataclass(frozen=True, slots=True)
class Assertion:
    """One call of the fixture: which test made it, on what, and how it ended (``evaluation`` is
    None when the input was refused; ``error`` then says why)."""

    nodeid: str
    number: int
    source: str
    evaluation: Evaluation | None
    message: str = ""
    error: str | None = None

    @property
    def outcome(self) -> str:
        if self.evaluation is None:
            return "error"
        return "pass" if self.evaluation.passed else "fail"


@dataclass(slots=True)
class _Recorder:
    """The session's assertions, kept only when a report was asked for."""

    path: Path | None
    assertions: list[Assertion] = field(default_factory=list)

    def add(self, assertion: Assertion) -> None:
        if self.path is not None:
            self.assertions.append(assertion)


_RECORDER = pytest.StashKey[_Recorder]()


class RetrievalCheck:
    """What the ``rankgate_check`` fixture gives a test: call it as ``assert_retrieval``."""

    def __init__(self, nodeid: str, recorder: _Recorder) -> None:
        self._nodeid = nodeid
        self._recorder = recorder
        self._calls = 0

    def __call__(self, source: Any, gates: Any = (), **options: Any) -> Evaluation:
        """``rankgate.testing.assert_retrieval(source, gates, **options)``, recorded."""
        __tracebackhide__ = True
        from rankgate.errors import RankgateError
        from rankgate.testing import RetrievalAssertionError, assert_retrieval, describe_source

        self._calls += 1
        source_name = describe_source(source)

        def record(
            evaluation: Evaluation | None, message: str = "", error: str | None = None
        ) -> None:
            self._recorder.add(
                Assertion(self._nodeid, self._calls, source_name, evaluation, message, error)
            )

        try:
            evaluation = assert_retrieval(source, gates, **options)
        except RetrievalAssertionError as failure:
            record(failure.evaluation, message=str(failure))
            raise
        except RankgateError as problem:
            record(None, error=str(problem))
            raise
        record(evaluation)
        return evaluation


@pytest.fixture
def rankgate_check(request: pytest.FixtureRequest) -> RetrievalCheck:
    """Assert retrieval quality: ``rankgate_check("golden.jsonl", gates=["ndcg@10>=0.7"])``.

    Takes ``rankgate.testing.assert_retrieval``'s arguments and returns its ``Evaluation``; each
    call is recorded for ``--rankgate-report``."""
    return RetrievalCheck(request.node.nodeid, request.config.stash[_RECORDER])


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("rankgate", "retrieval assertions (rankgate)")
    group.addoption(
        "--rankgate-report",
        metavar="PATH",
        default=None,
        help="write one self-contained HTML file with the rankgate report of every retrieval "
        f"assertion the {FIXTURE} fixture made in the session",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}: a test that asserts retrieval quality with rankgate (tests using the "
        f"{FIXTURE} fixture carry it without being tagged); select them with -m {MARKER}",
    )
    option = config.getoption("--rankgate-report")
    path = None
    if option:
        # Relative to where pytest was started, as --junitxml is, whatever a test later chdirs to.
        path = Path(config.invocation_params.dir, os.path.expanduser(option))
        if getattr(config.option, "numprocesses", None) or hasattr(config, "workerinput"):
            # Each pytest-xdist worker would hold only its own tests' assertions and write over
            # the others', and the controller none: a report that silently misses tests.
            raise pytest.UsageError(
                "--rankgate-report does not combine the assertions of pytest-xdist workers; run "
                "the retrieval tests in one process (e.g. pytest -m retrieval -n 0)"
            )
        if path.is_dir():
            raise pytest.UsageError(
                f"--rankgate-report {option}: is a directory; give a file name such as "
                f"{Path(option, 'rankgate-report.html')}"
            )
    config.stash[_RECORDER] = _Recorder(path)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tag every test that uses the fixture, before ``-m`` selects (hence ``tryfirst``)."""
    for item in items:
        if FIXTURE in getattr(item, "fixturenames", ()) and item.get_closest_marker(MARKER) is None:
            item.add_marker(MARKER)


def pytest_sessionfinish(session: pytest.Session) -> None:
    recorder = session.config.stash.get(_RECORDER, None)
    if recorder is None or recorder.path is None:
        return
    recorder.path.parent.mkdir(parents=True, exist_ok=True)
    recorder.path.write_text(render_session_html(recorder.assertions), encoding="utf-8")


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    recorder = config.stash.get(_RECORDER, None)
    if recorder is None or recorder.path is None:
        return
    terminalreporter.write_line(f"rankgate report: {recorder.path} ({_tally(recorder.assertions)})")


# --- the session's HTML -----------------------------------------------------------------------

#: Attributes whose values name element IDs on a report page: each is prefixed per assertion, so
#: the reports of one session, each with its own "worst" table and charts, share a page without
#: one's filter box or chart labels reaching into another's.
_ID_ATTRIBUTE = re.compile(r'(\s(?:id|data-table|aria-controls|aria-labelledby)=")([^"]*)(")')


def render_session_html(
    assertions: Sequence[Assertion], *, generated: datetime | None = None
) -> str:
    """One page holding every assertion's report: an index (test, source, verdict), then per
    assertion its miss list and ``rankgate eval``'s whole page body.

    The page is ``rankgate.report.html``'s own (its stylesheet, script and Content-Security-
    Policy); test names and sources are escaped like any value from the data.
    """
    from rankgate.report.html import _page
    from rankgate.report.svg import escape

    stamp = generated or datetime.now(UTC)
    body = [
        '<header><h1>rankgate · retrieval assertions</h1><p class="meta">pytest session · '
        f"{escape(_tally(assertions))}</p></header>",
        _index(assertions),
    ]
    body += [_assertion_section(a, n, stamp) for n, a in enumerate(assertions, 1)]
    return _page("rankgate · pytest session", body, stamp)


def _tally(assertions: Sequence[Assertion]) -> str:
    from rankgate.report.console import counted

    counts = {outcome: 0 for outcome in ("pass", "fail", "error")}
    for assertion in assertions:
        counts[assertion.outcome] += 1
    parts = [f"{counts['pass']} passed", f"{counts['fail']} failed"]
    if counts["error"]:
        parts.append(f"{counts['error']} refused as bad input")
    return f"{counted(len(assertions), 'retrieval assertion')}: {', '.join(parts)}"


def _name(assertion: Assertion) -> str:
    """The test's node ID, with the call's number when a test asserted more than once."""
    return assertion.nodeid if assertion.number == 1 else f"{assertion.nodeid} [{assertion.number}]"


def _index(assertions: Sequence[Assertion]) -> str:
    from rankgate.report.svg import escape

    if not assertions:
        return (
            "<section><h2>Assertions</h2><p>No retrieval assertion ran in this session (only "
            f"calls of the {FIXTURE} fixture are recorded).</p></section>"
        )
    rows = []
    for position, assertion in enumerate(assertions, 1):
        outcome = assertion.outcome
        rows.append(
            f'<tr class="{outcome}"><td class="status {outcome}">{outcome.upper()}</td>'
            f'<td><a href="#{_anchor(position)}"><bdi>{escape(_name(assertion))}'
            f"</bdi></a></td><td><bdi>{escape(assertion.source)}</bdi></td>"
            f"<td>{escape(_verdict(assertion))}</td></tr>"
        )
    return (
        '<section><h2>Assertions</h2><div class="scroll"><table><thead><tr>'
        '<th scope="col">result</th><th scope="col">test</th><th scope="col">source</th>'
        '<th scope="col">verdict</th></tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table></div></section>"
    )


def _verdict(assertion: Assertion) -> str:
    """The verdict in a line: the worst miss of a failure, the error of refused input."""
    from rankgate.report.console import _failures, eval_verdict_text

    evaluation = assertion.evaluation
    if evaluation is None:
        return f"error: {assertion.error}"
    failures = _failures(evaluation)
    if failures:
        more = f" (and {len(failures) - 1} more)" if len(failures) > 1 else ""
        return f"{eval_verdict_text(evaluation)}: {failures[0]}{more}"
    return eval_verdict_text(evaluation)


def _anchor(position: int) -> str:
    return f"a{position}"


def _assertion_section(assertion: Assertion, position: int, generated: datetime) -> str:
    from rankgate.report.html import render_eval_html
    from rankgate.report.svg import escape

    anchor = _anchor(position)
    head = (
        f'<section class="assertion" id="{anchor}"><h2><bdi>{escape(_name(assertion))}</bdi>'
        f'</h2><p class="meta">source: <bdi>{escape(assertion.source)}</bdi></p>'
    )
    evaluation = assertion.evaluation
    if evaluation is None:
        return (
            f'{head}<p class="status fail">Refused as bad input: '
            f"<bdi>{escape(assertion.error or '')}</bdi></p></section>"
        )
    # The failure as the test printed it, then the report it came from.
    message = f"<pre>{escape(assertion.message)}</pre>" if assertion.message else ""
    page = render_eval_html(evaluation, [assertion.source], generated=generated)
    return f"{head}{message}{_namespaced(_body_of(page, generated), anchor)}</section>"


def _body_of(page: str, generated: datetime) -> str:
    """The body of a page ``render_eval_html`` made: what it gave ``_page`` between the page's
    opening (head, stylesheet) and its closing (footer, script), found by rendering an empty
    page with the same time stamp."""
    from rankgate.report.html import _page

    before, after = _page("", ["\x00"], generated).split("\x00")
    opening = before[before.rindex("<body") :]
    start = page.find(opening)
    if start < 0 or not page.endswith(after):
        raise RuntimeError("rankgate.report.html's page layout changed: update render_session_html")
    return page[start + len(opening) : len(page) - len(after)]


def _namespaced(body: str, prefix: str) -> str:
    """``body`` with every element ID it defines or refers to prefixed. Values from the data are
    escaped (a quote is ``&quot;``), so an ``id="..."`` in this text is always markup."""

    def prefixed(match: re.Match[str]) -> str:
        names = " ".join(f"{prefix}-{name}" for name in match.group(2).split())
        return f"{match.group(1)}{names}{match.group(3)}"

    return _ID_ATTRIBUTE.sub(prefixed, body)
