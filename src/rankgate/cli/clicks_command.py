"""``rankgate labels from-clicks``: relevance labels from impression and click logs, corrected for
position bias (see ``rankgate.clicks``)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rankgate.cli.terminal import EXIT_OK, write_stdout
from rankgate.clicks import (
    DEFAULT_CLIP,
    DEFAULT_ESTIMATOR,
    DEFAULT_GRADES,
    DEFAULT_MAX_RANK,
    DEFAULT_MIN_EXAMINATIONS,
    DEFAULT_PRIOR_STRENGTH,
    DEFAULT_THRESHOLDS,
    ESTIMATORS,
    MAX_GRADES,
    Propensities,
    click_labels,
    estimate_propensities,
    power_law,
    propensity_table,
    read_click_log,
    read_human_grades,
    summarise,
)
from rankgate.errors import ConfigError, UsageError
from rankgate.io import FORMATS
from rankgate.report.console import counted

__all__ = ["add_parser"]

# Deeper than this, a per-rank propensity is neither estimable nor useful.
MAX_RANKS_ESTIMATED = 1000


def add_parser(label_commands: Any) -> None:
    parser = label_commands.add_parser(
        "from-clicks",
        help="labels from click logs, corrected for position bias",
        description="Estimate graded relevance labels from impression/click logs under the "
        "position-based model: clicks over expected examinations, with examination propensities "
        "given or estimated from the logs. Writes one record per query with relevance_scores "
        "(what rankgate eval --labels reads) and each label's confidence.",
    )
    parser.add_argument(
        "clicks",
        help="impression log: one impression per record (query_id, document_id, rank, clicked) "
        "or one list per record (query_id, retrieved_ids, clicked_ids)",
    )
    parser.add_argument(
        "-o", "--output", type=Path, metavar="FILE", help="labels to write (JSON Lines; required)"
    )
    # The option's first name, kept working for scripts written against it; -o/--output is the
    # name every command shares.
    parser.add_argument("--out", type=Path, dest="output_deprecated", help=argparse.SUPPRESS)
    parser.add_argument(
        "--propensity",
        default=DEFAULT_ESTIMATOR,
        metavar="HOW",
        help=f"harvest, em or swap to estimate from the logs (default {DEFAULT_ESTIMATOR}); "
        "power:ETA for (1/k)^ETA; or a file with one propensity per line for ranks 1, 2, ...",
    )
    parser.add_argument(
        "--max-rank",
        type=int,
        default=DEFAULT_MAX_RANK,
        metavar="K",
        help=f"ranks the propensities cover; deeper ranks take rank K's (default {DEFAULT_MAX_RANK})",
    )
    parser.add_argument(
        "--clip",
        type=float,
        default=DEFAULT_CLIP,
        help=f"smallest propensity used, bounding any click's weight (default {DEFAULT_CLIP})",
    )
    parser.add_argument(
        "--prior-strength",
        type=float,
        default=DEFAULT_PRIOR_STRENGTH,
        metavar="N",
        help="how many examinations' worth the global click rate counts for in each estimate "
        f"(default {DEFAULT_PRIOR_STRENGTH:g})",
    )
    parser.add_argument(
        "--min-examinations",
        type=float,
        default=DEFAULT_MIN_EXAMINATIONS,
        metavar="N",
        help="pairs with fewer expected examinations stay unlabeled "
        f"(default {DEFAULT_MIN_EXAMINATIONS:g})",
    )
    grading = parser.add_mutually_exclusive_group()
    grading.add_argument(
        "--grades",
        type=int,
        metavar="N",
        help=f"grades 0 to N-1 at the click rates fitted to the logs (the default grading, N "
        f"{DEFAULT_GRADES}): each pair gets its most probable grade",
    )
    grading.add_argument(
        "--thresholds",
        metavar="T1,T2,T3",
        help="click scores where grades 1, 2, 3 ... begin, instead of fitted levels (the fixed "
        "default of earlier versions: " + ",".join(f"{t:g}" for t in DEFAULT_THRESHOLDS) + ")",
    )
    grading.add_argument(
        "--calibrate",
        metavar="FILE",
        help="human labels of some pairs: thresholds are set so their grades match",
    )
    parser.add_argument("--input-format", choices=FORMATS[:4], help="override detection")
    parser.add_argument(
        "--on-invalid",
        choices=("fail", "skip"),
        default="fail",
        help="malformed records: stop with exit 2 (default) or skip and count them",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    output = _output(args)
    if not 1 <= args.max_rank <= MAX_RANKS_ESTIMATED:
        raise UsageError(f"--max-rank must be between 1 and {MAX_RANKS_ESTIMATED}")
    if args.grades is not None and not 2 <= args.grades <= MAX_GRADES:
        raise UsageError(f"--grades {args.grades}: expected a whole number from 2 to {MAX_GRADES}")
    log, skipped = read_click_log(
        args.clicks, input_format=args.input_format, on_invalid=args.on_invalid
    )
    if not log.impressions:
        raise UsageError(f"{args.clicks}: no impressions to learn from")
    propensities = _propensities(args, log)
    labels = click_labels(
        log,
        propensities,
        clip=args.clip,
        prior_strength=args.prior_strength,
        min_examinations=args.min_examinations,
        thresholds=_thresholds(args.thresholds),
        calibration=None if args.calibrate is None else read_human_grades(args.calibrate),
        grades=args.grades,
    )
    written = 0
    try:
        with output.open("w", encoding="utf-8") as out:
            for record in labels.records():
                out.write(json.dumps(record, ensure_ascii=False) + "\n")
                written += 1
    except OSError as problem:
        raise UsageError(f"{output}: cannot write labels ({problem.strerror})") from None
    lines = summarise(labels)
    if skipped:
        lines.append(f"skipped as invalid: {counted(skipped.get('invalid', 0), 'record')}")
    lines.append(f"wrote labels for {counted(written, 'query')} to {output}")
    write_stdout("\n".join(lines) + "\n")
    return EXIT_OK


def _output(args: argparse.Namespace) -> Path:
    if args.output is not None and args.output_deprecated is not None:
        raise UsageError("-o/--output and --out name the same thing; keep -o/--output")
    output: Path | None = args.output or args.output_deprecated
    if output is None:
        raise UsageError("name the labels file to write with -o/--output FILE")
    return output


def _propensities(args: argparse.Namespace, log: Any) -> Propensities:
    how = args.propensity
    if how in ESTIMATORS:
        return estimate_propensities(log, how, args.max_rank)
    if how.startswith("power:"):
        try:
            eta = float(how.split(":", 1)[1])
        except ValueError:
            raise UsageError(f"--propensity {how!r}: expected power:ETA, e.g. power:1") from None
        return power_law(eta, args.max_rank)
    path = Path(how)
    if not path.is_file():
        raise UsageError(
            f"--propensity {how!r}: not em, harvest, swap, power:ETA or a file of propensities"
        )
    values = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        try:
            values.append(float(text.split()[-1]))
        except ValueError:
            raise UsageError(f"{path}:{number}: expected a propensity, got {line!r}") from None
    try:
        return propensity_table(values)
    except ConfigError as problem:
        raise UsageError(f"{path}: {problem}") from None


def _thresholds(text: str | None) -> tuple[float, ...] | None:
    if text is None:
        return None
    try:
        return tuple(float(part) for part in text.split(","))
    except ValueError:
        raise UsageError(f"--thresholds {text!r}: expected numbers such as 0.1,0.3,0.6") from None
