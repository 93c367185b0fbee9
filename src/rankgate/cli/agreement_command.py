"""``rankgate labels agreement``: how far an LLM judge's grades agree with human grades on the
(query, document) pairs both graded, overall and per segment.

A label's ``source`` decides whose it is: ``judge:...`` is a model judge (each distinct source a
judge of its own, reported apart), anything else, or no source, a human. Where one kind graded a
pair more than once, the judgment kept is the one ``QueryLabels.add`` keeps: the newest by
``labeled_at``, else the later one in the order the files are given. The statistics are
``rankgate.agreement``'s; this module pairs the labels, finds each pair's segment from its query's
trace and prints the result.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rankgate.agreement import DEFAULT_GRADES, Agreement, agreement, agreement_by_segment
from rankgate.cli.terminal import EXIT_OK, write_report
from rankgate.errors import InputError, UsageError
from rankgate.io import FieldMap, open_source, validate_record
from rankgate.labels import JUDGE_SOURCE_PREFIX, Judgment, is_judge_source, read_judgments
from rankgate.report.console import counted, shown_query_id
from rankgate.segments import MISSING_VALUE, segment_value

__all__ = [
    "NO_TRACE",
    "AgreementReport",
    "JudgeAgreement",
    "SegmentAgreement",
    "add_parser",
    "agreement_json",
    "agreement_text",
]

FORMATS = ("text", "json")
#: The segment of a pair whose query is in no trace of --traces.
NO_TRACE = "(no trace)"
# Human sources named in the text report; the JSON lists them all.
_SHOWN_SOURCES = 5

Pair = tuple[str, str]


@dataclass(frozen=True, slots=True)
class _Held:
    """The judgment kept for a pair, and the label file it came from (for error messages)."""

    judgment: Judgment
    file: str


@dataclass(frozen=True)
class SegmentAgreement:
    """Agreement on the compared pairs whose query has ``value`` for segment field ``field``."""

    field: str
    value: str
    agreement: Agreement


@dataclass(frozen=True)
class JudgeAgreement:
    """One judge against the humans.

    ``overall`` is None when no pair was graded by both this judge and a human; ``human_only``
    and ``judge_only`` count the pairs graded by one side alone (not compared).
    """

    source: str
    overall: Agreement | None
    segments: list[SegmentAgreement]
    human_only: int
    judge_only: int


@dataclass(frozen=True)
class AgreementReport:
    """Every judge's agreement with the human labels of the same label files."""

    threshold: int
    label_files: list[str]
    human_sources: list[str]
    human_pairs: int
    segment_by: list[str]
    judges: list[JudgeAgreement]


def add_parser(label_commands: Any) -> None:
    parser = label_commands.add_parser(
        "agreement",
        help="how far an LLM judge's grades agree with human grades",
        description="Compare every judge's labels (source 'judge:...', as `rankgate labels "
        "judge` writes them) with the human labels (any other source, or none) on the "
        "(query, document) pairs both graded: pairs compared, exact agreement, Cohen's kappa "
        "(unweighted, linear and quadratic weights), the judge's mean bias (judge - human), "
        "precision, recall and kappa of the judge's 'relevant' at --threshold, and the confusion "
        "matrix (rows human, columns judge). Each judge source is reported apart; where one side "
        "graded a pair more than once, the newest judgment by labeled_at counts, else the later "
        "one. Grades must be whole, 0 to 3. With --traces and --segment-by, the same per value "
        "of a trace field (a pair's segment is its query's). Exit 0, or 2 on bad input.",
        allow_abbrev=False,
    )
    parser.add_argument(
        "labels",
        nargs="+",
        metavar="LABELS",
        help="label files (JSON Lines, JSON, CSV, Parquet, TREC qrels, Label Studio exports): "
        "typically the human file and the judge file; a file whose records name no source is a "
        "human's",
    )
    segments = parser.add_argument_group("per segment")
    segments.add_argument(
        "--traces",
        metavar="FILE_OR_STORE",
        help="trace file or trace store URL giving each query's segment fields",
    )
    segments.add_argument(
        "--segment-by",
        action="append",
        default=[],
        metavar="FIELD",
        help="report agreement per value of this trace field (repeatable; needs --traces); a "
        f"query in no trace is in the segment {NO_TRACE}",
    )
    parser.add_argument(
        "--threshold",
        type=_threshold,
        default=1,
        metavar="GRADE",
        help="the lowest grade that counts as relevant for precision, recall and binary kappa "
        "(default 1)",
    )
    parser.add_argument(
        "--format",
        choices=FORMATS,
        dest="agreement_format",
        help="text (default) or json; an --output name ending in .json implies json",
    )
    parser.add_argument(
        "-o", "--output", type=Path, metavar="FILE", help="write the report to FILE"
    )
    parser.set_defaults(handler=run)


def _threshold(text: str) -> int:
    low, high = DEFAULT_GRADES[1], DEFAULT_GRADES[-1]
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a whole grade from {low} to {high}, got {text!r}"
        ) from None
    if not low <= value <= high:
        raise argparse.ArgumentTypeError(
            f"expected a whole grade from {low} to {high}, got {text!r}"
        )
    return value


def run(args: argparse.Namespace) -> int:
    if args.segment_by and args.traces is None:
        raise UsageError("--segment-by reads each query's segment from --traces FILE_OR_STORE")
    if args.traces is not None and not args.segment_by:
        raise UsageError("--traces is read for --segment-by FIELD: name the field to segment by")
    output: Path | None = args.output
    _check_output(output, [*args.labels, *([args.traces] if args.traces else [])])
    report_format = args.agreement_format or (
        "json" if output is not None and output.suffix.lower() == ".json" else "text"
    )
    human, judges, human_sources = _read_labels(args.labels)
    files = ", ".join(_shown(name) for name in args.labels)
    if not judges:
        raise UsageError(
            f"no judge labels in {files}: a judge's labels have a source starting with "
            f"'{JUDGE_SOURCE_PREFIX}'; make them with `rankgate labels judge` and give their "
            "file too"
        )
    if not human:
        raise UsageError(
            f"no human labels in {files}: every label's source starts with "
            f"'{JUDGE_SOURCE_PREFIX}'; give the human label file too"
        )
    if not any(key in human for held in judges.values() for key in held):
        raise UsageError(
            f"no (query, document) pair is graded by both a human and a judge "
            f"({counted(len(human), 'human pair')}, "
            f"{counted(sum(len(held) for held in judges.values()), 'judge pair')}): do the "
            "query and document IDs of the two files match?"
        )
    segment_of = _segments_of(args.traces, args.segment_by) if args.traces else {}
    report = AgreementReport(
        threshold=args.threshold,
        label_files=list(args.labels),
        human_sources=human_sources,
        human_pairs=len(human),
        segment_by=list(args.segment_by),
        judges=[
            _judge_agreement(source, held, human, segment_of, args.threshold)
            for source, held in sorted(judges.items())
        ],
    )
    text = agreement_json(report) if report_format == "json" else agreement_text(report)
    compared = sum(judge.overall.pairs for judge in report.judges if judge.overall is not None)
    write_report(
        text,
        output,
        f"labels agreement: {counted(len(report.judges), 'judge')}, "
        f"{counted(compared, 'pair')} compared",
    )
    return EXIT_OK


def _check_output(output: Path | None, inputs: Sequence[str]) -> None:
    """Refuse to write the report over one of the inputs, before they are read."""
    if output is None or str(output) == "-":
        return
    for given in inputs:
        if given != "-" and "://" not in given and Path(given).resolve() == output.resolve():
            raise UsageError(f"-o {output} is also an input of this run; write to a new file")


# --- pairing -------------------------------------------------------------------------------


def _read_labels(
    files: Sequence[str],
) -> tuple[dict[Pair, _Held], dict[str, dict[Pair, _Held]], list[str]]:
    """The human judgments by pair, each judge's by source then pair, and the human sources."""
    human: dict[Pair, _Held] = {}
    judges: dict[str, dict[Pair, _Held]] = {}
    human_sources: dict[str, None] = {}
    for file in files:
        for judgment in read_judgments(file):
            if is_judge_source(judgment.source):
                _keep(judges.setdefault(str(judgment.source), {}), _Held(judgment, file))
            else:
                _keep(human, _Held(judgment, file))
                human_sources[judgment.source or file] = None
    return human, judges, list(human_sources)


def _keep(held: dict[Pair, _Held], new: _Held) -> None:
    """Hold ``new`` for its pair unless the judgment held is newer, or dated while ``new`` is
    not: the rule of ``QueryLabels.add``, so the pair's grade is the one an evaluation uses."""
    judgment = new.judgment
    key = (judgment.query_id, judgment.document_id)
    known = held.get(key)
    if known is not None:
        stamp = known.judgment.labeled_at
        if stamp is not None and (judgment.labeled_at is None or judgment.labeled_at < stamp):
            return
    held[key] = new


def _whole_grade(held: _Held, kind: str) -> int:
    """A compared pair's grade as one of the agreement's grades, or a located one-line error."""
    grade = held.judgment.grade
    if grade.is_integer() and int(grade) in DEFAULT_GRADES:
        return int(grade)
    if not grade.is_integer():
        reason = "is not a whole grade (labels averaged over annotators? round them first)"
    else:
        reason = f"is outside the grades {DEFAULT_GRADES[0]}-{DEFAULT_GRADES[-1]} compared"
    raise InputError(
        held.file,
        "grade",
        f"{kind} grade {grade:g} of query {_shown(held.judgment.query_id)}, document "
        f"{_shown(held.judgment.document_id)} {reason}",
    )


def _judge_agreement(
    source: str,
    judged: dict[Pair, _Held],
    human: dict[Pair, _Held],
    segment_of: dict[str, dict[str, str]],
    threshold: int,
) -> JudgeAgreement:
    pairs = [key for key in judged if key in human]
    human_grades = [_whole_grade(human[key], "human") for key in pairs]
    judge_grades = [_whole_grade(judged[key], "judge") for key in pairs]
    overall = None
    segments: list[SegmentAgreement] = []
    try:
        if pairs:
            overall = agreement(human_grades, judge_grades, threshold=threshold)
        for name, values in segment_of.items():
            rows = (
                (values.get(query_id, NO_TRACE), human_grade, judge_grade)
                for (query_id, _), human_grade, judge_grade in zip(
                    pairs, human_grades, judge_grades, strict=True
                )
            )
            found = agreement_by_segment(rows, threshold=threshold)
            segments.extend(SegmentAgreement(name, value, found[value]) for value in sorted(found))
    except ValueError as problem:  # the grades were checked above: not the user's input
        raise RuntimeError(f"agreement of {source!r}: {problem}") from None
    return JudgeAgreement(
        source=source,
        overall=overall,
        segments=segments,
        human_only=len(human) - len(pairs),
        judge_only=len(judged) - len(pairs),
    )


def _segments_of(traces: str, fields: Sequence[str]) -> dict[str, dict[str, str]]:
    """Per segment field, each traced query's value. A query traced more than once takes the
    first value it has (a trace lacking the field does not hide a later one that has it)."""
    fields = list(dict.fromkeys(fields))
    values: dict[str, dict[str, str]] = {name: {} for name in fields}
    records = 0
    for raw in open_source(traces):
        trace = validate_record(raw, FieldMap(), require_query_id=True, require_ranking=False)
        records += 1
        for name in fields:
            value = segment_value(trace.attributes, name)
            if values[name].get(trace.query_id, MISSING_VALUE) == MISSING_VALUE:
                values[name][trace.query_id] = value
    if not records:
        raise UsageError(f"--traces {_shown(traces)} holds no trace record")
    for name in fields:
        if all(value == MISSING_VALUE for value in values[name].values()):
            raise UsageError(
                f"segment field {_shown(name)} is in none of the {counted(records, 'trace')} of "
                f"--traces {_shown(traces)}"
            )
    return values


# --- output --------------------------------------------------------------------------------


def agreement_json(report: AgreementReport) -> str:
    """The report as JSON: stable keys, every segment's full agreement, IDs escaped as JSON does."""
    document = {
        "threshold": report.threshold,
        "grades": list(DEFAULT_GRADES),
        "label_files": report.label_files,
        "human_sources": report.human_sources,
        "human_pairs": report.human_pairs,
        "segment_by": report.segment_by,
        "judges": [
            {
                "source": judge.source,
                "pairs": judge.overall.pairs if judge.overall is not None else 0,
                "human_only": judge.human_only,
                "judge_only": judge.judge_only,
                "agreement": _agreement_fields(judge.overall),
                "segments": [
                    {
                        "field": segment.field,
                        "value": segment.value,
                        "agreement": _agreement_fields(segment.agreement),
                    }
                    for segment in judge.segments
                ],
            }
            for judge in report.judges
        ],
    }
    return json.dumps(document, indent=2) + "\n"


def _agreement_fields(result: Agreement | None) -> dict[str, Any] | None:
    if result is None:
        return None
    binary = result.binary
    return {
        "pairs": result.pairs,
        "exact_agreement": result.exact_agreement,
        "kappa": result.kappa,
        "kappa_linear": result.kappa_linear,
        "kappa_quadratic": result.kappa_quadratic,
        "mean_bias": result.mean_bias,
        "binary": {
            "threshold": binary.threshold,
            "precision": binary.precision,
            "recall": binary.recall,
            "kappa": binary.kappa,
            "true_positives": binary.true_positives,
            "false_positives": binary.false_positives,
            "false_negatives": binary.false_negatives,
            "true_negatives": binary.true_negatives,
        },
        "confusion": result.confusion,
    }


def agreement_text(report: AgreementReport) -> str:
    """The report as readable text: one block per judge, a table per segment field. Every ID,
    source and segment value is shown escaped when it holds a control character."""
    sources = ", ".join(_shown(name) for name in report.human_sources[:_SHOWN_SOURCES])
    more = len(report.human_sources) - _SHOWN_SOURCES
    lines = [
        f"human labels: {counted(report.human_pairs, 'pair')} from {sources}"
        + (f" and {more:,} more" if more > 0 else ""),
        f"judges: {len(report.judges)}",
    ]
    for judge in report.judges:
        lines += ["", f"judge {_shown(judge.source)}"]
        lines += [f"  {line}" for line in _judge_lines(judge, report.threshold)]
    return "\n".join(lines) + "\n"


def _judge_lines(judge: JudgeAgreement, threshold: int) -> list[str]:
    left_out = (
        f"not compared: {counted(judge.human_only, 'pair')} graded by humans only, "
        f"{counted(judge.judge_only, 'pair')} by this judge only"
    )
    result = judge.overall
    if result is None:
        return [f"no pair graded by both this judge and a human; {left_out}"]
    binary = result.binary
    lines = [
        f"pairs compared: {result.pairs:,}; {left_out}",
        f"exact agreement: {result.exact_agreement:.1%}",
        f"Cohen's kappa: unweighted {_number(result.kappa)}, linear "
        f"{_number(result.kappa_linear)}, quadratic {_number(result.kappa_quadratic)}",
        f"mean bias (judge - human): {result.mean_bias:+.3f} ({_bias_words(result.mean_bias)})",
        f"relevant at grade >= {threshold}: judge precision {_number(binary.precision)}, recall "
        f"{_number(binary.recall)}, kappa {_number(binary.kappa)} (both relevant "
        f"{binary.true_positives:,}, judge only {binary.false_positives:,}, human only "
        f"{binary.false_negatives:,}, neither {binary.true_negatives:,})",
        "confusion matrix (rows: human grade, columns: judge grade):",
    ]
    lines += [f"  {line}" for line in _confusion_lines(result)]
    if any(_undefined(result) for result in _all(judge)):
        lines.append(
            "n/a: undefined (a kappa: both graders gave every pair one and the same grade; "
            "precision: the judge called no pair relevant; recall: the humans called none)"
        )
    fields = list(dict.fromkeys(segment.field for segment in judge.segments))
    for name in fields:
        lines.append(f"by {_shown(name)}:")
        rows = [segment for segment in judge.segments if segment.field == name]
        lines += [f"  {line}" for line in _segment_table(rows)]
    return lines


def _all(judge: JudgeAgreement) -> Iterable[Agreement]:
    if judge.overall is not None:
        yield judge.overall
    yield from (segment.agreement for segment in judge.segments)


def _undefined(result: Agreement) -> bool:
    binary = result.binary
    values = (result.kappa, result.kappa_linear, result.kappa_quadratic, binary.kappa)
    return any(value is None for value in (*values, binary.precision, binary.recall))


def _confusion_lines(result: Agreement) -> list[str]:
    width = max(7, *(len(f"{count:,}") for row in result.confusion for count in row))
    head = " " * 9 + "".join(f"  {'judge ' + str(grade):>{width}}" for grade in result.grades)
    rows = [
        f"human {grade:<3}" + "".join(f"  {count:>{width},}" for count in row)
        for grade, row in zip(result.grades, result.confusion, strict=True)
    ]
    return [head, *rows]


_SEGMENT_COLUMNS = (
    "pairs",
    "exact",
    "kappa",
    "linear",
    "quadratic",
    "bias",
    "precision",
    "recall",
    "bin. kappa",
)


def _segment_table(segments: Sequence[SegmentAgreement]) -> list[str]:
    names = [_shown(segment.value) for segment in segments]
    first = max(len("segment"), *(len(name) for name in names))
    cells = [
        [
            f"{result.pairs:,}",
            f"{result.exact_agreement:.1%}",
            _number(result.kappa),
            _number(result.kappa_linear),
            _number(result.kappa_quadratic),
            f"{result.mean_bias:+.3f}",
            _number(result.binary.precision),
            _number(result.binary.recall),
            _number(result.binary.kappa),
        ]
        for result in (segment.agreement for segment in segments)
    ]
    widths = [
        max(len(title), *(len(row[column]) for row in cells))
        for column, title in enumerate(_SEGMENT_COLUMNS)
    ]
    lines = [
        f"{'segment':<{first}}"
        + "".join(
            f"  {title:>{width}}" for title, width in zip(_SEGMENT_COLUMNS, widths, strict=True)
        )
    ]
    for name, row in zip(names, cells, strict=True):
        lines.append(
            f"{name:<{first}}"
            + "".join(f"  {cell:>{width}}" for cell, width in zip(row, widths, strict=True))
        )
    return lines


def _bias_words(bias: float) -> str:
    if bias > 0:
        return "the judge over-rates"
    if bias < 0:
        return "the judge under-rates"
    return "no bias"


def _number(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _shown(text: str) -> str:
    """An ID, source, file name or segment value from the data, safe on one line of a report."""
    return shown_query_id(text)
