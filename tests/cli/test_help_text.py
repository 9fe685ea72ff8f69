"""Every command's ``--help`` shows its text as written: nothing lost to Rich markup.

typer renders help through Rich, which reads ``[word]`` as a style tag and drops
it; help text must escape literal brackets (``\\[``). Every command is walked,
those installed distributions add and ``toolbus serve``'s kinds included.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
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
