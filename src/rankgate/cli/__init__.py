"""The ``rankgate`` command: parse arguments, call the library, map outcomes to exit codes.

Exit codes are a contract, and only a verdict ever gives 0 or 1:

* 0: every gate passed (or none was set), nothing was flagged, or the command did its job;
* 1: a gate failed (``eval``) or a regression was flagged (``compare``);
* 2: usage or input error, told in one line on stderr naming the file, line and field. Every
  ``RankgateError`` ends here, and so does an operating-system refusal that is the user's to fix
  (a file the user named is missing or unreadable, a folder where a file was expected, a full disk);
* 3: internal error, a bug in rankgate: one line naming the exception, and the traceback only with
  ``--debug`` (anywhere on the command line) or ``RANKGATE_DEBUG=1``;
* 130: interrupted (Ctrl-C); 141: the reader of stdout went away before the output was complete.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import importlib
import os
import sys
import traceback
from collections.abc import Sequence
from typing import Any, NoReturn

from rankgate import __version__
from rankgate.cli.terminal import (
    EXIT_FAILED,
    EXIT_INTERNAL,
    EXIT_OK,
    EXIT_USAGE,
    abort,
    mask_credentials,
    one_line,
)
from rankgate.errors import RankgateError

__all__ = ["DEBUG_ENV", "EXIT_INTERRUPTED", "EXIT_STDOUT_CLOSED", "build_parser", "main"]

DEBUG_ENV = "RANKGATE_DEBUG"
EXIT_INTERRUPTED = 130
EXIT_STDOUT_CLOSED = 141  # 128 + SIGPIPE, what a shell reports for a writer whose reader left

# An exception's message is clipped to this many characters in the internal-error line: it may
# quote a whole record, and the line has to stay readable in a CI log.
_MAX_MESSAGE = 500

EPILOG = f"""\
exit codes:
  0    passed: every gate held (or none was set), nothing flagged, or the command did its job
  1    a gate failed (eval) or a regression was flagged (compare)
  2    usage or input error, told in one line on stderr
  3    internal error (a bug in rankgate): add --debug or set {DEBUG_ENV}=1 for the traceback
  130  interrupted
"""

# Refusals by the operating system that the user fixes (permissions, a full or read-only disk,
# a folder where a file belongs), whatever path they concern.
_ENVIRONMENT_ERRNOS = frozenset(
    code
    for code in (
        errno.EACCES,
        errno.EPERM,
        errno.EISDIR,
        errno.ENOTDIR,
        errno.ENAMETOOLONG,
        errno.ELOOP,
        errno.ENOSPC,
        errno.EROFS,
        getattr(errno, "EDQUOT", None),
        getattr(errno, "EFBIG", None),
    )
    if code is not None
)


class _Parser(argparse.ArgumentParser):
    """Every parser of the command, sub-commands included (``add_subparsers`` builds its parsers
    with the class of the parser it hangs from).

    Prefix matching is off: with it, ``compare a b --variant x`` was silently read as
    ``--variant-field x``. And ``--debug`` is accepted wherever it is written, since the
    internal-error line asks for it to be added to the command just run.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        self.add_argument(
            "--debug",
            action="store_true",
            default=argparse.SUPPRESS,
            help=f"on an internal error (exit 3), print the traceback (also: {DEBUG_ENV}=1)",
        )

    def error(self, message: str) -> NoReturn:
        """A usage error is one line, like every other refusal, naming where the usage is."""
        self.exit(2, f"rankgate: error: {message} (see '{self.prog} --help')\n")


# Each top-level command (aliases included), by the module that adds its parser and the function
# that does. A run imports only its own command's module: all of them together took a third of a
# second to import (the monitor's web server, the store drivers, the HTML report), which every
# ``eval`` on a small file paid.
_COMMANDS: dict[str, tuple[str, str]] = {
    "eval": ("eval_command", "add_parser"),
    "compare": ("compare_command", "add_parser"),
    "metrics": ("metrics_command", "add_parser"),
    "trace": ("store_command", "add_parsers"),
    "traces": ("store_command", "add_parsers"),
    "label": ("store_command", "add_parsers"),
    "labels": ("store_command", "add_parsers"),
    "store": ("store_command", "add_parsers"),
    "monitor": ("monitor_command", "add_parser"),
    "plan": ("plan_command", "add_parser"),
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The command's parser: with ``command`` (a name in ``_COMMANDS``), only that command's
    parsers are added; without, every command's (for the help and the list of choices)."""
    parser = _Parser(
        prog="rankgate",
        description="Score the retrieval stage of search and RAG systems from recorded traces.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"rankgate {__version__}")
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")
    wanted = [_COMMANDS[command]] if command in _COMMANDS else list(_COMMANDS.values())
    for module_name, adder in dict.fromkeys(wanted):
        module = importlib.import_module(f"rankgate.cli.{module_name}")
        getattr(module, adder)(commands)
    return parser


def _command_named(arguments: Sequence[str]) -> str | None:
    """The command the arguments name (their first that is not an option), if it is one."""
    for argument in arguments:
        if argument == "--":
            return None
        if not argument.startswith("-"):
            return argument if argument in _COMMANDS else None
    return None


def main(argv: Sequence[str] | None = None) -> int:
    arguments = [str(item) for item in (sys.argv[1:] if argv is None else argv)]
    # Read before parsing, so that a failure while parsing can show its traceback too.
    debug = "--debug" in arguments or os.environ.get(DEBUG_ENV, "").strip() not in ("", "0")
    try:
        return _run(arguments)
    except KeyboardInterrupt:
        sys.stderr.write("rankgate: interrupted\n")
        return EXIT_INTERRUPTED
    except RankgateError as problem:
        abort(str(problem))
    except BrokenPipeError:
        # The reader of stdout left (``| head``): nothing to say, and no verdict to give.
        _silence_stdout()
        return EXIT_STDOUT_CLOSED
    except MemoryError:
        return _internal_error("MemoryError", "ran out of memory", debug)
    except OSError as problem:
        refusal = _environment_refusal(problem, arguments)
        if refusal is None:
            return _internal_error(_type_name(problem), str(problem), debug)
        abort(refusal)
    except Exception as problem:  # the last line of defence: never a bare traceback
        return _internal_error(_type_name(problem), str(problem), debug)


def _run(arguments: list[str]) -> int:
    # Trace IDs may hold lone surrogates (JSON allows "\ud800"): print them escaped, not crash.
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")
    parser = build_parser(_command_named(arguments))
    args = parser.parse_args(arguments)
    if not hasattr(args, "handler"):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    code = args.handler(args)
    if code not in (EXIT_OK, EXIT_FAILED):
        # Only a verdict may end a command normally: anything else is a bug, not a pass or fail.
        raise RuntimeError(f"command handler returned {code!r} instead of an exit code 0 or 1")
    return int(code)


def _internal_error(kind: str, message: str, debug: bool) -> int:
    """The one line of an unexpected failure (a bug in rankgate), with the traceback if asked."""
    if debug:
        with contextlib.suppress(MemoryError):
            traceback.print_exc(file=sys.stderr)
    text = one_line(mask_credentials(message)).strip()
    if len(text) > _MAX_MESSAGE:
        text = text[:_MAX_MESSAGE] + "..."
    hint = "" if debug else " (run with --debug for the traceback)"
    sys.stderr.write(f"rankgate: internal error: {kind}{': ' + text if text else ''}{hint}\n")
    return EXIT_INTERNAL


def _type_name(problem: BaseException) -> str:
    kind = type(problem)
    return (
        kind.__qualname__
        if kind.__module__ == "builtins"
        else f"{kind.__module__}.{kind.__qualname__}"
    )


def _environment_refusal(problem: OSError, arguments: list[str]) -> str | None:
    """The one-line message for an OS refusal the user can fix, or None when it looks like a bug.

    A missing file counts only when the user named it (or a folder holding it): a file rankgate
    itself expected to find is rankgate's fault.
    """
    code = problem.errno
    if code not in _ENVIRONMENT_ERRNOS and not (
        code == errno.ENOENT
        and problem.filename is not None
        and _named_by_user(problem.filename, arguments)
    ):
        return None
    reason = (problem.strerror or os.strerror(code)) if code is not None else str(problem)
    if problem.filename is None:
        return f"cannot read or write: {reason}"
    where = os.fsdecode(problem.filename)
    if problem.filename2 is not None:
        where += f" -> {os.fsdecode(problem.filename2)}"
    return f"{where}: {reason}"


def _named_by_user(filename: Any, arguments: list[str]) -> bool:
    """Whether ``filename`` is, or lies inside, a path on the command line (``--opt=PATH``,
    ``sqlite:///PATH`` and the implicit ``./rankgate.toml`` included)."""
    try:
        target = os.path.abspath(os.fsdecode(filename))
    except (TypeError, ValueError):
        return False
    candidates = ["rankgate.toml"]
    for item in arguments:
        candidates.append(item)
        if "=" in item:
            candidates.append(item.split("=", 1)[1])
        if item.startswith("sqlite:///"):
            candidates.append(item.removeprefix("sqlite:///"))
    for candidate in candidates:
        if not candidate or candidate == "-":
            continue
        try:
            named = os.path.abspath(candidate)
        except ValueError:  # a NUL byte in an argument
            continue
        if target == named or target.startswith(named.rstrip(os.sep) + os.sep):
            return True
    return False


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not fail again."""
    with contextlib.suppress(OSError, ValueError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
