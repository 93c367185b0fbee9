"""The ``rankgate`` command: parse arguments, call the library, map outcomes to exit codes.

Exit codes are a contract: 0 all gates passed, 1 a gate failed or a regression was flagged, 2 usage
or input error. Every
``RankgateError`` becomes one line on stderr and exit 2, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from rankgate import __version__
from rankgate.cli import (
    compare_command,
    eval_command,
    metrics_command,
    monitor_command,
    store_command,
)
from rankgate.cli.terminal import EXIT_USAGE, abort
from rankgate.errors import RankgateError

__all__ = ["main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rankgate",
        description="Score the retrieval stage of search and RAG systems from recorded traces.",
    )
    parser.add_argument("--version", action="version", version=f"rankgate {__version__}")
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")
    eval_command.add_parser(commands)
    compare_command.add_parser(commands)
    metrics_command.add_parser(commands)
    store_command.add_parsers(commands)
    monitor_command.add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    # Trace IDs may hold lone surrogates (JSON allows "\ud800"): print them escaped, not crash.
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")
    parser = build_parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "handler"):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        code: int = args.handler(args)
    except RankgateError as problem:
        abort(str(problem))
    except KeyboardInterrupt:
        sys.stderr.write("rankgate: interrupted\n")
        return 130
    return code
