"""Answering a tool that asks, at a terminal: ``toolbus call``'s input relay.

A form (elicitation) is shown with its message and asked field by field, typed
as its schema says (yes or no, a number, one of the choices, several of them
separated by commas, text); leaving an optional field empty leaves it out (its
default, if the form has one, then applies). A request for the caller's model
(sampling) shows the messages and asks the person to write the completion. The
caller's roots are the ``--root`` directories, or the working directory.
Prompts go to standard error, so that standard output carries the answer only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import click

from toolbus.domain.calls.input_requests import (
    Elicitation,
    ElicitationAnswer,
    InputAnswer,
    InputAsk,
    InputKind,
    Root,
    RootsAnswer,
    Sampling,
    SamplingAnswer,
)

#: Who wrote a completion typed at the terminal.
PERSON = "a person at toolbus call"


class TerminalRelay:
    """Asks the person at the terminal (see the module docs)."""

    kinds: frozenset[InputKind] = frozenset({"elicitation", "sampling", "roots"})

    def __init__(self, roots: Sequence[Path] = ()) -> None:
        self.roots = tuple(roots) or (Path.cwd(),)

    async def answer(self, asked: InputAsk) -> Mapping[str, InputAnswer]:
        answers: dict[str, InputAnswer] = {}
        for key, request in asked.requests.items():
            if isinstance(request, Elicitation):
                answers[key] = _fill(request)
            elif isinstance(request, Sampling):
                answers[key] = _complete(request)
            else:
                roots = (Root(path.resolve().as_uri(), path.name) for path in self.roots)
                answers[key] = RootsAnswer(tuple(roots))
        return answers


def _say(text: str) -> None:
    click.echo(text, err=True)


def _fill(request: Elicitation) -> ElicitationAnswer:
    _say(f"\nThe tool asks: {request.message}")
    action = click.prompt(
        "accept, decline or cancel",
        type=click.Choice(["accept", "decline", "cancel"]),
        default="accept",
        err=True,
    )
    if action == "decline":
        return ElicitationAnswer("decline")
    if action == "cancel":
        return ElicitationAnswer("cancel")
    properties = request.schema.get("properties") or {}
    required = set(request.schema.get("required") or ())
    content: dict[str, Any] = {}
    for name, described in properties.items():
        value = _field(name, described if isinstance(described, Mapping) else {}, name in required)
        if value is not None:
            content[name] = value
    return ElicitationAnswer("accept", content)


def _field(name: str, described: Mapping[str, Any], required: bool) -> Any:
    label = str(described.get("title") or name)
    if described.get("description"):
        label += f" ({described['description']})"
    kind = described.get("type")
    default = described.get("default")
    if kind == "boolean":
        return click.confirm(
            label, default=bool(default) if default is not None else None, err=True
        )
    choices = _choices(described)
    if kind == "array":
        options = _choices(described.get("items") or {})
        hint = (
            f" [{', '.join(options)}], separated by commas" if options else ", separated by commas"
        )
        text = click.prompt(label + hint, default="", show_default=False, err=True)
        picked = [part.strip() for part in text.split(",") if part.strip()]
        bad = [part for part in picked if options and part not in options]
        if bad:
            _say(f"not among the choices: {', '.join(bad)}; asking again")
            return _field(name, described, required)
        return picked or None
    value_type: Any = str
    if choices:
        value_type = click.Choice(choices)
    elif kind == "integer":
        value_type = int
    elif kind == "number":
        value_type = float
    if required or default is not None:
        return click.prompt(label, type=value_type, default=default, err=True)
    text = click.prompt(label + " (optional)", default="", show_default=False, err=True)
    if text == "":
        return None
    return (
        value_type(text)
        if not isinstance(value_type, click.Choice)
        else value_type.convert(text, None, None)
    )


def _choices(described: Mapping[str, Any]) -> list[str]:
    if isinstance(described.get("enum"), list):
        return [str(value) for value in described["enum"]]
    titled = described.get("oneOf") or described.get("anyOf")
    if isinstance(titled, list):
        return [str(option.get("const")) for option in titled if isinstance(option, Mapping)]
    return []


def _complete(request: Sampling) -> SamplingAnswer:
    _say("\nThe tool asks for a completion of:")
    params = request.params()
    if params.get("systemPrompt"):
        _say(f"  (system) {params['systemPrompt']}")
    for role, text in request.texts():
        _say(f"  ({role}) {text}")
    text = click.prompt("your completion", err=True)
    return SamplingAnswer(text, PERSON)
