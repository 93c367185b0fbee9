"""JUnit XML: each gate a test case, so CI systems show retrieval regressions in their test panes.

The layout is the one Jenkins, GitLab, GitHub Actions reporters and Azure Pipelines read:
``<testsuites>`` holding a ``<testsuite>`` per group of queries (overall, then each segment), each
holding a ``<testcase>`` per gate. A missed gate carries a ``<failure>`` whose message gives the
value, the threshold and the margin; a segment with too few queries is ``<skipped>`` (a failure
under strict segments). For ``compare``, a suite per candidate holds a test case per metric x
segment cell, failed when the cell is a regression, and the candidate's gates.

Names come from traces and may hold anything; ElementTree escapes markup, and characters that XML
1.0 cannot carry at all (most control characters) are replaced, so the file always parses.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Sequence

from rankgate.compare import CandidateResult, Cell, Comparison
from rankgate.compare_unjudged import LABEL_LIMITED
from rankgate.evaluate import Evaluation
from rankgate.gates import CoverageOutcome, GateOutcome
from rankgate.report.console import counted, format_p
from rankgate.report.numbers import format_against, format_threshold
from rankgate.report.unjudged_text import label_limited_text

__all__ = ["render_comparison_junit", "render_eval_junit"]

# Characters outside XML 1.0's Char production.
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _text(value: str) -> str:
    return _NOT_XML.sub("\ufffd", value)


def render_eval_junit(evaluation: Evaluation, sources: Sequence[str]) -> str:
    """One suite per group that has gates or a coverage minimum; one case per check."""
    root = ET.Element("testsuites", name=_text("rankgate eval " + ", ".join(sources)))
    groups: dict[str, list[GateOutcome | CoverageOutcome]] = {}
    for outcome in evaluation.gates:
        groups.setdefault(_group(outcome.segment), []).append(outcome)
    for check in evaluation.coverage_checks:
        groups.setdefault(_group(check.segment), []).append(check)
    for group, checks in groups.items():
        suite = _suite(root, group)
        for item in checks:
            if isinstance(item, GateOutcome):
                _gate_case(suite, group, item)
            else:
                _coverage_case(suite, group, item)
        _count(suite)
    _count(root)
    return _serialise(root)


def render_comparison_junit(comparison: Comparison) -> str:
    """One suite per candidate: a case per cell (failed when a regression), then its gates."""
    root = ET.Element("testsuites", name=_text(f"rankgate compare {comparison.baseline}"))
    for result in comparison.results:
        suite = _suite(root, f"{result.name} vs {comparison.baseline}")
        for cell in result.cells:
            _cell_case(suite, result, cell)
        for outcome in result.candidate.gates:
            _gate_case(suite, f"{result.name} {_group(outcome.segment)}", outcome)
        for check in result.candidate.coverage_checks:
            _coverage_case(suite, f"{result.name} {_group(check.segment)}", check)
        _count(suite)
    _count(root)
    return _serialise(root)


def _group(segment: object) -> str:
    return "overall" if segment is None else str(segment)


def _suite(root: ET.Element, name: str) -> ET.Element:
    return ET.SubElement(root, "testsuite", name=_text(name))


def _case(suite: ET.Element, classname: str, name: str) -> ET.Element:
    return ET.SubElement(
        suite, "testcase", classname=_text(f"rankgate.{classname}"), name=_text(name), time="0"
    )


def _gate_case(suite: ET.Element, classname: str, outcome: GateOutcome) -> None:
    gate = outcome.gate
    case = _case(suite, classname, f"{gate.metric} {gate.op} {format_threshold(gate.threshold)}")
    statistic = "" if outcome.statistic == "mean" else f" ({outcome.statistic.replace('_', ' ')})"
    if outcome.value is None or outcome.margin is None:
        detail = f"{gate.metric} has no value: no query was scored"
    else:
        detail = (
            f"{gate.metric} = {format_against(outcome.value, gate.threshold, 4)}{statistic}, "
            f"needs {gate.op} {format_threshold(gate.threshold)} "
            f"(margin {outcome.margin:+.4f}, {counted(outcome.scored, 'query')})"
        )
    if outcome.status == "insufficient":
        message = (
            f"insufficient data: {counted(outcome.scored, 'scored query')}, fewer than min_queries"
        )
        if outcome.passed:
            ET.SubElement(case, "skipped", message=_text(message))
        else:
            _failure(case, message + " (strict segments)", "insufficient_data")
    elif not outcome.passed:
        _failure(case, detail, "gate_missed")
    else:
        ET.SubElement(case, "system-out").text = _text(detail)


def _coverage_case(suite: ET.Element, classname: str, check: CoverageOutcome) -> None:
    case = _case(suite, classname, f"annotation coverage >= {check.minimum:g}")
    coverage = "n/a" if check.coverage is None else f"{check.coverage:.4f}"
    detail = f"annotation coverage {coverage}, needs >= {check.minimum:g}"
    if check.passed:
        ET.SubElement(case, "system-out").text = detail
    else:
        _failure(case, detail + ": too few labeled queries (coverage, not quality)", "coverage")


def _cell_case(suite: ET.Element, result: CandidateResult, cell: Cell) -> None:
    case = _case(suite, f"{result.name} {cell.group}", f"{cell.metric} no regression")
    if cell.design == "unpaired":
        queries = (
            f"unpaired: {counted(cell.baseline_queries or 0, 'baseline query', 'baseline queries')}, "
            f"{counted(cell.candidate_queries or 0, 'candidate query', 'candidate queries')} ({result.pairing.reason})"
        )
    else:
        queries = counted(cell.queries, "query")
    detail = (
        f"{cell.metric} {cell.baseline_mean:.4f} -> {cell.candidate_mean:.4f}, delta "
        f"{cell.delta:+.4f} [{cell.interval[0]:+.4f}, {cell.interval[1]:+.4f}], p adj "
        f"{format_p(cell.p_adjusted)}, {queries}"
    )
    if cell.evidence is not None:
        evidence = cell.evidence
        detail += (
            f", judged@{evidence.depth} baseline {evidence.baseline_judged:.1%} candidate "
            f"{evidence.candidate_judged:.1%}, {evidence.unjudged_pairs:,} unjudged pairs in the "
            "candidate's top k"
        )
    if cell.status == LABEL_LIMITED:
        # Undecided until the pairs are judged: skipped, or a failure when the run asks.
        text = f"{detail}; label-limited: {label_limited_text(cell)}"
        if result.fail_on_label_limited:
            _failure(case, text, "label-limited")
        else:
            ET.SubElement(case, "skipped", message=_text(text))
    elif cell.flag == "regression":
        _failure(case, detail, "regression")
    else:
        ET.SubElement(case, "system-out").text = _text(
            detail + (f" ({cell.flag})" if cell.flag else "")
        )


def _failure(case: ET.Element, message: str, kind: str) -> None:
    failure = ET.SubElement(case, "failure", message=_text(message), type=kind)
    failure.text = _text(message)


def _count(element: ET.Element) -> None:
    """tests / failures / skipped / errors / time attributes, summed over the cases below."""
    cases = list(element.iter("testcase"))
    element.set("tests", str(len(cases)))
    element.set("failures", str(sum(1 for c in cases if c.find("failure") is not None)))
    element.set("errors", "0")
    element.set("skipped", str(sum(1 for c in cases if c.find("skipped") is not None)))
    element.set("time", "0")


def _serialise(root: ET.Element) -> str:
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"
