"""Write the generated pages of the documentation site from the code they describe.

* ``cli-reference.md``: every command, sub-command and option of the ``rankgate`` parser
  (``rankgate.cli.build_parser``), with its help text;
* ``api.md``: the public Python API, exactly ``rankgate.__all__``, from signatures and docstrings;
* ``metrics.md``: the metric registry, as ``rankgate metrics --format markdown`` prints it.

Run it from anywhere; ``make docs`` runs it before ``mkdocs build --strict``::

    python docs/gen_reference.py               # rewrite the pages in docs/
    python docs/gen_reference.py --out DIR     # write them into DIR instead
    python docs/gen_reference.py --check       # exit 1 when a committed page is out of date

Nothing here is imported by rankgate; ``tests/docs`` loads this file to compare the committed
pages with what the code says today.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import re
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

DOCS = Path(__file__).resolve().parent

#: The generated pages, by file name in docs/.
GENERATED = ("cli-reference.md", "api.md", "metrics.md")

# Widest signature written on one line in api.md; longer ones get one parameter per line.
_SIGNATURE_WIDTH = 88


# --- the command line ------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Command:
    """One parser of the command tree: ``("label", "todo")`` is ``rankgate label todo``."""

    path: tuple[str, ...]
    parser: argparse.ArgumentParser
    aliases: tuple[tuple[str, ...], ...]  # the other spellings of the same parser
    summary: str  # the help its parent lists it with

    @property
    def name(self) -> str:
        return " ".join(("rankgate", *self.path))


def walk_commands(parser: argparse.ArgumentParser) -> list[Command]:
    """Every parser of the tree, parents before children, each once (aliases folded in)."""
    found: list[Command] = []

    def visit(current: argparse.ArgumentParser, path: tuple[str, ...], summary: str) -> None:
        found.append(Command(path, current, (), summary))
        for action in current._actions:
            if not isinstance(action, argparse._SubParsersAction):
                continue
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            names_of: dict[int, list[str]] = {}
            for name, child in action.choices.items():
                names_of.setdefault(id(child), []).append(name)
            for names in names_of.values():
                child = action.choices[names[0]]
                start = len(found)
                visit(child, (*path, names[0]), helps.get(names[0], ""))
                # An alias names the same parser: it and everything under it get the other
                # spelling of this step as an alias.
                for index in range(start, len(found)):
                    command = found[index]
                    others = tuple(
                        (*path, alias, *command.path[len(path) + 1 :]) for alias in names[1:]
                    )
                    found[index] = dataclasses.replace(command, aliases=command.aliases + others)

    visit(parser, (), parser.description or "")
    return found


def visible_actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The options and arguments ``--help`` shows (hidden ones and sub-command lists left out)."""
    return [
        action
        for action in parser._actions
        if action.help != argparse.SUPPRESS and not isinstance(action, argparse._SubParsersAction)
    ]


def option_help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """An action's help as ``--help`` prints it: ``%(default)s`` filled in, ``%%`` as ``%``."""
    if not action.help:
        return ""
    return str(parser._get_formatter()._expand_help(action))


def _metavar(action: argparse.Action) -> str:
    if action.metavar is not None:
        return str(action.metavar)
    if action.choices is not None:
        return "{" + ",".join(str(choice) for choice in action.choices) + "}"
    return action.dest if not action.option_strings else action.dest.upper()


def argument_form(action: argparse.Action) -> str:
    """``--metric METRIC``, ``[URL]``, ``TRACES [TRACES ...]``: how an action is written."""
    metavar = _metavar(action)
    nargs = action.nargs
    if nargs == 0:
        value = ""
    elif nargs is None:
        value = metavar
    elif nargs == "?":
        value = f"[{metavar}]"
    elif nargs == "*":
        value = f"[{metavar} ...]"
    elif nargs == "+":
        value = f"{metavar} [{metavar} ...]"
    elif isinstance(nargs, int):
        value = " ".join([metavar] * nargs)
    else:
        value = f"{metavar} ..."
    return value


def _synopsis(command: Command) -> str:
    parser = command.parser
    words = [command.name]
    if any(action.option_strings for action in visible_actions(parser)):
        words.append("[OPTIONS]")
    for action in visible_actions(parser):
        if not action.option_strings:
            words.append(argument_form(action))
    if any(isinstance(action, argparse._SubParsersAction) for action in parser._actions):
        words.append("COMMAND ...")
    return " ".join(words)


def _anchor(command: Command) -> str:
    # The slug Python-Markdown's toc extension gives the section heading.
    return re.sub(r"[^a-z0-9]+", "-", command.name.lower()).strip("-")


def _children(commands: list[Command], parent: Command) -> list[Command]:
    depth = len(parent.path) + 1
    return [
        command
        for command in commands
        if len(command.path) == depth and command.path[:-1] == parent.path
    ]


def _markdown_text(text: str) -> str:
    """Help text for a table cell: code spans kept, Markdown and HTML characters escaped."""
    pieces = re.split(r"(`[^`]*`)", " ".join(text.split()))
    out = []
    for index, piece in enumerate(pieces):
        if index % 2:  # a code span: Python-Markdown's tables leave its pipes alone
            out.append(piece)
            continue
        piece = piece.replace("\\", "\\\\").replace("&", "&amp;").replace("<", "&lt;")
        piece = re.sub(r"([*_\[\]|])", r"\\\1", piece)
        out.append(piece)
    return "".join(out)


def _default_note(action: argparse.Action, help_text: str) -> str:
    """The parser's default when the help text does not state one and it means something."""
    default = action.default
    if (
        not action.option_strings
        or action.nargs == 0
        or default in (None, argparse.SUPPRESS, [], ())
        or "default" in help_text.lower()
    ):
        return ""
    return f" (default: `{default}`)"


# The page that explains each command, linked from its section.
COMMAND_PAGES = {
    "": ("getting-started.md", "Getting started"),
    "eval": ("eval.md", "rankgate eval"),
    "compare": ("compare.md", "rankgate compare"),
    "metrics": ("metrics.md", "Metrics"),
    "trace": ("stores.md", "Trace stores"),
    "trace import": ("stores.md#recording-traces-rankgate-trace-import", "Recording traces"),
    "label": ("incomplete-labels.md#closing-the-gaps", "When labels are incomplete"),
    "label from-clicks": ("clicks.md", "Labels from clicks"),
    "label todo": ("labels-todo.md", "What to judge next"),
    "label import": ("stores.md#importing-labels-rankgate-label-import", "Importing labels"),
    "store": ("stores.md", "Trace stores"),
    "store info": ("stores.md#what-a-store-holds-rankgate-store-info", "Trace stores"),
    "store init": ("stores.md#what-a-store-holds-rankgate-store-info", "Trace stores"),
    "monitor": ("monitor.md", "Live monitoring"),
    "plan": ("plan.md", "Planning"),
}


def render_cli_reference(parser: argparse.ArgumentParser | None = None) -> str:
    """docs/cli-reference.md: every command and option of the parser, with its help."""
    if parser is None:
        from rankgate.cli import build_parser

        parser = build_parser()
    commands = walk_commands(parser)
    lines = [
        "# Command-line reference",
        "",
        "Generated by `python docs/gen_reference.py` from the command's own parser; do not edit by",
        "hand. It lists every option of every command with the help `rankgate COMMAND --help`",
        "prints. Each section links to the page that explains the command.",
        "",
        "Options are never matched by prefix: write them in full. `--debug` is accepted anywhere on",
        "the command line. Exit codes: 0 pass, 1 a gate failed or a regression was flagged, 2 usage",
        "or input error, 3 internal error (see [Concepts](concepts.md#exit-codes)).",
        "",
    ]
    for command in commands:
        lines += _command_section(command, commands)
    return "\n".join(lines).rstrip("\n") + "\n"


def _command_section(command: Command, commands: list[Command]) -> list[str]:
    parser = command.parser
    lines = [f"## {command.name}", ""]
    description = parser.description or command.summary
    if description:
        lines += [_markdown_text(description), ""]
    key = " ".join(command.path)
    if key in COMMAND_PAGES:
        page, title = COMMAND_PAGES[key]
        lines += [f"Explained in [{title}]({page}).", ""]
    if command.aliases:
        spelled = ", ".join(f"`{' '.join(('rankgate', *alias))}`" for alias in command.aliases)
        lines += [f"Also written {spelled}.", ""]
    lines += ["```text", _synopsis(command), "```", ""]
    children = _children(commands, command)
    if children:
        lines += ["| command | what it does |", "|---|---|"]
        for child in children:
            lines.append(
                f"| [`{child.name}`](#{_anchor(child)}) | {_markdown_text(child.summary)} |"
            )
        lines.append("")
    groups = [group for group in parser._action_groups if _group_actions(group)]
    for group in groups:
        actions = _group_actions(group)
        title = group.title or "options"
        lines += [f"**{_markdown_text(title)}**", ""]
        if group.description:
            lines += [_markdown_text(group.description), ""]
        header = "option" if any(action.option_strings for action in actions) else "argument"
        lines += [f"| {header} | what it does |", "|---|---|"]
        for action in actions:
            value = argument_form(action)
            if action.option_strings:
                written = ", ".join(
                    f"`{name} {value}`" if value else f"`{name}`" for name in action.option_strings
                )
            else:
                written = f"`{value}`"
            help_text = option_help(parser, action)
            cell = _markdown_text(help_text) + _default_note(action, help_text)
            lines.append(f"| {written} | {cell.strip()} |")
        lines.append("")
    if parser.epilog:
        lines += ["```text", parser.epilog.rstrip(), "```", ""]
    return lines


def _group_actions(group: argparse._ArgumentGroup) -> list[argparse.Action]:
    return [
        action
        for action in group._group_actions
        if action.help != argparse.SUPPRESS and not isinstance(action, argparse._SubParsersAction)
    ]


# --- the Python API --------------------------------------------------------------------------


def _annotation(value: Any) -> str:
    if value is inspect.Parameter.empty:
        return ""
    if isinstance(value, str):
        return value
    return str(inspect.formatannotation(value))


def _parameter(parameter: inspect.Parameter) -> str:
    prefix = ""
    if parameter.kind is inspect.Parameter.VAR_POSITIONAL:
        prefix = "*"
    elif parameter.kind is inspect.Parameter.VAR_KEYWORD:
        prefix = "**"
    text = prefix + parameter.name
    annotation = _annotation(parameter.annotation)
    if annotation:
        text += f": {annotation}"
    if parameter.default is not inspect.Parameter.empty:
        text += (" = " if annotation else "=") + repr(parameter.default)
    return text


def render_signature(name: str, obj: Any) -> str:
    """``name(a: int, *, b: str = 'x') -> T``, wrapped one parameter a line when long."""
    try:
        signature = inspect.signature(obj)
    except (TypeError, ValueError):
        return name
    parameters = list(signature.parameters.values())
    if inspect.isclass(obj) is False and parameters and parameters[0].name in ("self", "cls"):
        parameters = parameters[1:]
    words: list[str] = []
    star_written = False
    for index, parameter in enumerate(parameters):
        if parameter.kind is inspect.Parameter.VAR_POSITIONAL:
            star_written = True
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY and not star_written:
            words.append("*")
            star_written = True
        words.append(_parameter(parameter))
        following = parameters[index + 1] if index + 1 < len(parameters) else None
        if parameter.kind is inspect.Parameter.POSITIONAL_ONLY and (
            following is None or following.kind is not inspect.Parameter.POSITIONAL_ONLY
        ):
            words.append("/")
    returns = _annotation(signature.return_annotation)
    tail = f" -> {returns}" if returns and not inspect.isclass(obj) else ""
    one_line = f"{name}({', '.join(words)}){tail}"
    if len(one_line) <= _SIGNATURE_WIDTH or not words:
        return one_line
    body = "".join(f"    {word},\n" for word in words)
    return f"{name}(\n{body}){tail}"


_SECTION = re.compile(
    r"^(Args|Arguments|Parameters|Returns|Return|Yields|Raises|Attributes|Examples?|Notes?|"
    r"Warns|Warnings|See Also|References):\s*$"
)
_ITEM = re.compile(
    r"^(\*{0,2}[A-Za-z_][\w.]*(?:, \*{0,2}[A-Za-z_][\w.]*)*(?: \([^)]*\))?):\s*(.*)$"
)


def _inline(text: str) -> str:
    """Docstring prose as Markdown: ``code`` to `code`, Markdown characters escaped elsewhere."""
    text = re.sub(r"``(.+?)``", r"`\1`", text)
    pieces = re.split(r"(`[^`]*`)", text)
    out = []
    for index, piece in enumerate(pieces):
        if index % 2:
            out.append(piece)
            continue
        piece = piece.replace("&", "&amp;").replace("<", "&lt;")
        piece = re.sub(r"([*_\[\]])", r"\\\1", piece)
        out.append(piece)
    return "".join(out)


_LIST_ITEM = re.compile(r"^\s*([-*]|\d+\.)\s+(.*)$")


def _paragraphs(lines: list[str]) -> Iterator[str]:
    """Prose lines as Markdown, one line per paragraph or list item (so that a code span may run
    across the docstring's line breaks); doctests and ``::`` literal blocks become code blocks."""
    index = 0
    in_list = False
    while index < len(lines):
        stripped = lines[index].strip()
        if not stripped:
            yield ""
            in_list = False
            index += 1
            continue
        if stripped.startswith(">>>"):
            block = []
            while index < len(lines) and lines[index].strip():
                block.append(lines[index].strip())
                index += 1
            yield from ("", "```pycon", *block, "```", "")
            in_list = False
            continue
        item = _LIST_ITEM.match(lines[index])
        text = item.group(2) if item else stripped
        index += 1
        while not text.endswith("::") and index < len(lines):
            following = lines[index].strip()
            if not following or following.startswith(">>>") or _LIST_ITEM.match(lines[index]):
                break
            text += " " + following
            index += 1
        literal = text.endswith("::")
        if literal:
            text = text[:-1]  # "as follows::" reads "as follows:"
        if item:
            if not in_list:
                yield ""
            yield f"{item.group(1)} {_inline(text)}"
            in_list = True
        else:
            yield _inline(text)
            in_list = False
        if literal:
            # A reStructuredText literal block: the indented lines after the marker are code.
            block = []
            while index < len(lines) and (not lines[index].strip() or lines[index][:1] == " "):
                block.append(lines[index])
                index += 1
            code = textwrap.dedent("\n".join(block)).strip("\n").splitlines()
            yield from ("", "```python", *code, "```", "")
            in_list = False


def render_docstring(doc: str | None) -> list[str]:
    """A Google-style docstring as Markdown: prose, then titled lists for its sections."""
    if not doc:
        return []
    lines = inspect.cleandoc(doc).splitlines()
    out: list[str] = []
    prose: list[str] = []
    index = 0
    while index < len(lines):
        match = _SECTION.match(lines[index])
        if not match:
            prose.append(lines[index])
            index += 1
            continue
        out += list(_paragraphs(prose))
        prose = []
        title = match.group(1)
        index += 1
        body: list[str] = []
        while index < len(lines) and (not lines[index].strip() or lines[index][:1] == " "):
            body.append(lines[index])
            index += 1
        out += ["", f"**{title}**", ""]
        out += _section(textwrap.dedent("\n".join(body)).strip("\n").splitlines())
        out.append("")
    out += list(_paragraphs(prose))
    text = "\n".join(out)
    return re.sub(r"\n{3,}", "\n\n", text).strip("\n").splitlines()


def _section(lines: list[str]) -> list[str]:
    items: list[tuple[str, list[str]]] = []
    loose: list[str] = []
    for line in lines:
        match = _ITEM.match(line) if line[:1] not in (" ", "") else None
        if match:
            items.append((match.group(1), [match.group(2)]))
        elif items and (line.startswith(" ") or not line.strip()):
            items[-1][1].append(line.strip())
        else:
            loose.append(line)
    if loose and not items:
        return list(_paragraphs(loose))
    out = [_inline(line) for line in loose]
    for name, text in items:
        words = " ".join(part for part in text if part)
        out.append(f"- `{name}`: {_inline(words)}")
    return out


def _public_members(cls: type) -> list[tuple[str, Any]]:
    """Methods and properties a user calls, in definition order, rankgate's own classes only."""
    fields = (
        {field.name for field in dataclasses.fields(cls)}
        if dataclasses.is_dataclass(cls)
        else set()
    )
    seen: set[str] = set()
    members: list[tuple[str, Any]] = []
    for klass in cls.__mro__:
        if not klass.__module__.startswith("rankgate"):
            continue
        for name, value in vars(klass).items():
            if name.startswith("_") or name in fields or name in seen:
                continue
            if isinstance(value, (property, classmethod, staticmethod)) or inspect.isfunction(
                value
            ):
                seen.add(name)
                members.append((name, value))
    return members


def _fields_table(cls: type) -> list[str]:
    if not dataclasses.is_dataclass(cls):
        return []
    lines = ["| field | type | default |", "|---|---|---|"]
    for field in dataclasses.fields(cls):
        if not field.init:
            continue
        if field.default is not dataclasses.MISSING:
            default = f"`{field.default!r}`"
        elif field.default_factory is not dataclasses.MISSING:
            default = f"`{_factory_name(field.default_factory)}()`"
        else:
            default = "(required)"
        kind = field.type if isinstance(field.type, str) else inspect.formatannotation(field.type)
        lines.append(f"| `{field.name}` | `{kind}` | {default} |")
    return [*lines, ""]


def _factory_name(factory: Callable[[], Any]) -> str:
    return str(
        getattr(factory, "__qualname__", None) or getattr(factory, "__name__", repr(factory))
    )


def _member_section(owner: str, name: str, value: Any) -> list[str]:
    if isinstance(value, property):
        heading = f"#### `{owner}.{name}`"
        kind = _annotation(inspect.signature(value.fget).return_annotation) if value.fget else ""
        head = f"{owner}.{name}" + (f" -> {kind}" if kind else "")
        lines = [heading, "", "```python", f"{head}  # property", "```", ""]
        lines += render_docstring(inspect.getdoc(value))
        return [*lines, ""]
    function = value.__func__ if isinstance(value, (classmethod, staticmethod)) else value
    label = "classmethod" if isinstance(value, classmethod) else ""
    signature = render_signature(f"{owner}.{name}", function)
    if isinstance(value, classmethod):
        signature = signature.replace(f"{owner}.{name}(cls, ", f"{owner}.{name}(", 1)
    lines = [f"#### `{owner}.{name}()`", "", "```python"]
    lines += [f"{signature}{'  # ' + label if label else ''}", "```", ""]
    lines += render_docstring(inspect.getdoc(function))
    return [*lines, ""]


def render_api(module: Any = None) -> str:
    """docs/api.md: every name of ``rankgate.__all__`` with its signature and docstring."""
    if module is None:
        import rankgate as module
    names = list(module.__all__)
    objects = {name: getattr(module, name) for name in names}
    functions = [n for n in names if inspect.isfunction(objects[n])]
    errors = [
        n for n in names if inspect.isclass(objects[n]) and issubclass(objects[n], BaseException)
    ]
    classes = [n for n in names if inspect.isclass(objects[n]) and n not in errors]
    constants = [n for n in names if n not in functions and n not in classes and n not in errors]
    lines = [
        "# Python API",
        "",
        "Generated by `python docs/gen_reference.py` from the signatures and docstrings of",
        "`rankgate.__all__`; do not edit by hand. These names are the whole public API: every other",
        "module and name is private and may change. [Python](python.md) shows them at work.",
        "",
        "| name | what it is |",
        "|---|---|",
    ]
    for name in names:
        if name in constants:
            summary = _CONSTANTS.get(name, "")
        else:
            summary = (inspect.getdoc(objects[name]) or "").split("\n\n")[0]
            summary = re.sub(r"::$", ":", summary.strip())
        lines.append(f"| [`{name}`](#{_api_anchor(name)}) | {_inline(' '.join(summary.split()))} |")
    lines.append("")
    if functions:
        lines += ["## Functions", ""]
        for name in functions:
            lines += [f"### `{name}`", "", "```python"]
            lines += [render_signature(f"rankgate.{name}", objects[name]), "```", ""]
            lines += [*render_docstring(inspect.getdoc(objects[name])), ""]
    for title, group in (("Classes", classes), ("Errors", errors)):
        if not group:
            continue
        lines += [f"## {title}", ""]
        for name in group:
            cls = objects[name]
            lines += [f"### `{name}`", ""]
            bases = [base.__name__ for base in cls.__bases__ if base is not object]
            head = f"class rankgate.{name}" + (f"({', '.join(bases)})" if bases else "")
            if title == "Classes" and not dataclasses.is_dataclass(cls):
                head = render_signature(f"class rankgate.{name}", cls)
            lines += ["```python", head, "```", ""]
            lines += [*render_docstring(inspect.getdoc(cls)), ""]
            fields = _fields_table(cls)
            if fields:
                lines += ["Fields:", "", *fields]
            for member, value in _public_members(cls):
                lines += _member_section(name, member, value)
    if constants:
        lines += ["## Constants", ""]
        for name in constants:
            value = objects[name]
            # The version is named, not quoted, so that a release does not make this page stale.
            shown = f": {type(value).__name__}" if name == "__version__" else f" = {value!r}"
            lines += [f"### `{name}`", "", "```python", f"rankgate.{name}{shown}", "```", ""]
            lines += [_inline(_CONSTANTS.get(name, "")), ""]
    text = "\n".join(lines)
    return re.sub(r"\n{3,}", "\n\n", text).rstrip("\n") + "\n"


_CONSTANTS = {
    "DEFAULT_METRICS": "The metrics a report shows when none are asked for (`--metric` or "
    "`metrics` in `rankgate.toml`), plus any metric a gate names.",
    "__version__": "The installed rankgate version, as `rankgate --version` prints it.",
}


def _api_anchor(name: str) -> str:
    return re.sub(r"[^a-z0-9_]+", "-", name.lower()).strip("-")


# --- metrics and the command -----------------------------------------------------------------


def render_metrics() -> str:
    """docs/metrics.md: the registry, exactly what ``rankgate metrics --format markdown`` prints."""
    from rankgate.report.metric_docs import render_metrics_markdown

    return str(render_metrics_markdown())


RENDERERS: dict[str, Callable[[], str]] = {
    "cli-reference.md": render_cli_reference,
    "api.md": render_api,
    "metrics.md": render_metrics,
}


def write_pages(out: Path) -> list[Path]:
    """Write every generated page into ``out``; the paths written."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name in GENERATED:
        path = out / name
        path.write_text(RENDERERS[name](), encoding="utf-8")
        written.append(path)
    return written


def stale_pages(docs: Path = DOCS) -> list[str]:
    """The generated pages in ``docs`` that differ from what the code gives today."""
    stale = []
    for name in GENERATED:
        path = docs / name
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current != RENDERERS[name]():
            stale.append(name)
    return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DOCS, help="folder to write the pages into")
    parser.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 when a page is out of date"
    )
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_pages(args.out)
        for name in stale:
            print(
                f"{args.out / name}: out of date; run: python docs/gen_reference.py",
                file=sys.stderr,
            )
        return 1 if stale else 0
    for path in write_pages(args.out):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
