"""``rankgate metrics``: list every metric with its formula, parameters and aliases."""

from __future__ import annotations

import argparse
import json
from typing import Any

from rankgate.cli.terminal import EXIT_OK, write_stdout
from rankgate.metrics.registry import all_metrics, describe
from rankgate.report.metric_docs import render_metrics_markdown, render_metrics_text


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "metrics",
        help="list the metrics with their formulas",
        description="List every metric rankgate computes, with formula, parameters and aliases.",
    )
    parser.add_argument(
        "--format",
        choices=("text", "markdown", "json"),
        default="text",
        dest="listing_format",
        help="text (default), markdown (the table of docs/metrics.md) or json",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.listing_format == "json":
        text = json.dumps([describe(d) for d in all_metrics()], indent=2, ensure_ascii=False) + "\n"
    elif args.listing_format == "markdown":
        text = render_metrics_markdown()
    else:
        text = render_metrics_text()
    write_stdout(text)
    return EXIT_OK
