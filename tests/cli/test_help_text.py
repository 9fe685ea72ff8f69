"""Every command's ``--help`` shows its text as written: nothing lost to Rich markup.

typer renders help through Rich, which reads ``[word]`` as a style tag and drops
it; help text must escape literal brackets (``\\[``). Every command is walked,
those installed distributions add and ``toolbus serve``'s kinds included.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

import toolbus.cli
from toolbus.cli import app

BRACKETED = re.compile(r"\\?\[([^\]\[]*)\]")


def commands(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """``command`` and everything under it, with the words that reach each."""
    yield path, command
    if hasattr(command, "commands"):
        for name, sub in command.commands.items():
            yield from commands(sub, (*path, name))


def written_brackets(command: Any) -> set[str]:
    """``[text]`` as the help strings of ``command``, its options and its commands give it."""
    texts = [command.help or "", command.short_help or ""]
    texts += [getattr(param, "help", None) or "" for param in command.params]
    if hasattr(command, "commands"):
        # A group lists each command by its first paragraph only.
        texts += [
            sub.short_help or (sub.help or "").split("\n\n")[0] for sub in command.commands.values()
        ]
    return {f"[{inner}]" for text in texts for inner in BRACKETED.findall(text)}


def flat(text: str) -> str:
    """Help output without box drawing and line wrapping."""
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", text).split())


def all_commands() -> list[tuple[tuple[str, ...], Any]]:
    toolbus.cli.assemble()
    return [
        (path, command)
        for path, command in commands(typer.main.get_command(app))
        # The stand-ins for uninstalled distributions take no --help: they answer
        # with the install line. Their text is checked in their group's help.
        if command.add_help_option
    ]


def test_every_command_is_walked() -> None:
    paths = {" ".join(path) for path, _ in all_commands()}

    assert {"", "call", "tools", "serve", "serve services", "config", "config put"} <= paths


@pytest.mark.parametrize(
    ("path", "command"), all_commands(), ids=lambda v: " ".join(v) if isinstance(v, tuple) else ""
)
@pytest.mark.usefixtures("wide_help")
def test_help_keeps_every_bracketed_word(path: tuple[str, ...], command: Any) -> None:
    result = CliRunner().invoke(app, [*path, "--help"])

    assert result.exit_code == 0, result.output
    shown = flat(result.output)
    for bracketed in written_brackets(command):
        assert flat(bracketed) in shown, (
            f"{bracketed!r} lost from 'toolbus {' '.join(path)} --help'"
        )


#: typer's own labels for values: Python types, ranges, and ``{name}`` for an argument.
PYTHON_LABELS = re.compile(r"<[a-z][a-z_\[\], |]*>|\{[a-z_]+\}")


@pytest.mark.parametrize(
    ("path", "command"), all_commands(), ids=lambda v: " ".join(v) if isinstance(v, tuple) else ""
)
def test_help_shows_words_a_person_reads_not_python_types(
    path: tuple[str, ...], command: Any
) -> None:
    result = CliRunner().invoke(app, [*path, "--help"], env={"TERMINAL_WIDTH": "400"})

    assert result.exit_code == 0, result.output
    assert PYTHON_LABELS.findall(result.output) == [], result.output


DOCS_CLI = Path(__file__).parent.parent.parent / "docs" / "cli.md"
#: A synopsis block of docs/cli.md: a plain code block starting with ``toolbus``.
SYNOPSIS = re.compile(r"```\n(toolbus .*?)```", re.S)
#: A row of an options table: ``| `--option WORD` |``.
TABLE_ROW = re.compile(r"^\| `(--[a-z-]+) ([^`]+)`", re.M)
HEADING = re.compile(r"^## `toolbus ([a-z ]+)`", re.M)
COMMAND_WORD = re.compile(r"[a-z][a-z-]*")
OPTION_WORD = re.compile(r"(--[a-z][a-z-]*) (\S+)")


def _word(token: str) -> str:
    """``NAME[=SOURCE]]...`` as ``NAME[=SOURCE]``: the word, without the synopsis's brackets."""
    token = token.removesuffix("...").rstrip(")")
    while token.count("]") > token.count("["):
        token = token[: token.rindex("]")]
    return token.removesuffix("...")


def documented_words() -> list[tuple[tuple[str, ...], str, str]]:
    """``(command path, option, word)`` for every option docs/cli.md writes with a value word."""
    text = DOCS_CLI.read_text(encoding="utf-8")
    found: list[tuple[tuple[str, ...], str, str]] = []
    for block in SYNOPSIS.findall(text):
        words = block.split()
        path = tuple(itertools.takewhile(COMMAND_WORD.fullmatch, words[1:]))
        # "toolbus serve SERVICE..." is short for "toolbus serve services SERVICE...".
        path = ("serve", "services") if path == ("serve",) else path
        for option, token in OPTION_WORD.findall(block):
            if not token.startswith(("-", "[")):
                found.append((path, option, _word(token)))
    headings = list(HEADING.finditer(text))
    for index, heading in enumerate(headings):
        end = headings[index + 1].start() if index + 1 < len(headings) else len(text)
        path = tuple(heading.group(1).split())
        for option, token in TABLE_ROW.findall(text[heading.end() : end]):
            found.append((path, option, _word(token)))
    return found


def shown_word(path: tuple[str, ...], option: str) -> str | None:
    """The word ``toolbus PATH --help`` shows for ``option``'s value."""
    group = typer.main.get_command(app)
    context = group.make_context("toolbus", [], resilient_parsing=True)
    command = group
    for name in path:
        command = command.get_command(context, name)
        context = command.make_context(name, [], parent=context, resilient_parsing=True)
    for param in command.get_params(context):
        if option in param.opts:
            word: str | None = param.display_type_rich(context)
            return word.removesuffix("...") if word else word
    raise AssertionError(f"'toolbus {' '.join(path)}' has no option {option}")


def test_docs_cli_names_a_value_word_for_options_of_every_kind() -> None:
    paths = {path for path, _, _ in documented_words()}

    assert {("call",), ("serve", "services"), ("mcp", "serve"), ("agent", "serve")} <= paths


@pytest.mark.parametrize(
    ("path", "option", "word"), documented_words(), ids=lambda v: str(v).replace(" ", "_")
)
def test_help_writes_each_value_as_docs_cli_does(
    path: tuple[str, ...], option: str, word: str
) -> None:
    toolbus.cli.assemble()

    assert shown_word(path, option) == word


def listed_commands(output: str) -> list[str]:
    """The lines of the Commands panel of a group's help."""
    lines = output.splitlines()
    start = next(n for n, line in enumerate(lines) if "─ Commands " in line)
    end = next(n for n in range(start, len(lines)) if lines[n].startswith("╰"))
    return lines[start + 1 : end]


@pytest.mark.parametrize(
    "path",
    [path for path, command in all_commands() if hasattr(command, "commands")],
    ids=lambda path: " ".join(path) or "toolbus",
)
@pytest.mark.usefixtures("wide_help")
def test_a_groups_list_of_commands_has_no_hard_line_breaks(path: tuple[str, ...]) -> None:
    """Each command's first paragraph on one line, wide enough: the docstring's own
    line breaks do not show."""
    result = CliRunner().invoke(app, [*path, "--help"])

    assert result.exit_code == 0, result.output
    rows = listed_commands(result.output)
    continued = [row for row in rows if re.match(r"│\s{3,}\S", row)]
    assert rows and not continued, "\n".join(rows)
