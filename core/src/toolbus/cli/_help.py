"""Help a person reads: ``--broker URL``, ``--timeout SECONDS``, ``toolbus call TOOL``.

typer labels each value with its Python type (``<str>``, ``<float range>``,
``<list[str]>``), gives flags a ``<bool>`` they take no value for, and writes a
required argument as ``{tool}``. Every ``toolbus`` command, those distributions
add included, is a :class:`CommandApp`, whose commands show instead the
words docs/cli.md uses: the option's ``metavar`` where it declares one, else a
word read from its type (``SECONDS`` for a float, ``N`` for a whole number,
``PATH`` for a path, the choices of an enum, the option's own name for text),
nothing for a flag, and arguments by their names in capitals.

typer builds its parameter objects itself and offers no way to choose their
classes, so each command gives its parameters the readable class (a subclass
that only changes how they are shown) as it hands them out.
"""

from __future__ import annotations

import enum
import inspect
import pathlib
from collections.abc import Callable
from typing import Any, get_args, get_origin

import typer
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption
from typer.models import CommandFunctionType


def _annotation(param: TyperArgument | TyperOption) -> Any:
    annotation: Any = param.type_descriptor.annotation
    if get_origin(annotation) in (list, tuple):
        (annotation, *_) = get_args(annotation) or (str,)
    return annotation


def value_word(param: TyperArgument | TyperOption) -> str:
    """The word a value of ``param`` is shown as, when it declares no ``metavar``."""
    annotation = _annotation(param)
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return "|".join(str(member.value) for member in annotation)
    if annotation is float:
        return "SECONDS"
    if annotation is int:
        return "N"
    if isinstance(annotation, type) and issubclass(annotation, pathlib.PurePath):
        return "PATH"
    longest = max(param.opts, key=len) if param.opts else (param.name or "value")
    return longest.lstrip("-").replace("-", "_").upper()


class ReadableOption(TyperOption):
    """An option shown with the word for its value, and a flag with none."""

    def display_type_rich(self, ctx: Any) -> str | None:
        if self.is_flag or self.count:
            return None
        word = self.metavar or value_word(self)
        return f"{word}..." if self.nargs != 1 else word


class ReadableArgument(TyperArgument):
    """An argument shown by its name in capitals (``TOOL``, ``SERVICE...``), typeless."""

    @property
    def display_name_raw(self) -> str:
        return self.metavar or (self.name or "value").upper()

    def display_type_rich(self, ctx: Any) -> str | None:
        return None

    def _usage_display_name(self) -> str:
        name = self.display_name_raw
        if self.nargs != 1:
            name += "..."
        return name if self.required else f"[{name}]"


def _readable(params: list[Any]) -> list[Any]:
    for param in params:
        if type(param) is TyperOption:
            param.__class__ = ReadableOption
        elif type(param) is TyperArgument:
            param.__class__ = ReadableArgument
    return params


def listed_help(help: str | None) -> str | None:
    """The first paragraph of ``help`` on one line, for a group's list of commands.

    typer joins a docstring's lines in a command's own help but keeps them in
    the list of commands, where a docstring wrapped at 90 columns would then
    break mid-sentence however wide the terminal.
    """
    if not help:
        return None
    first = inspect.cleandoc(help).partition("\f")[0].split("\n\n")[0]
    return " ".join(first.split())


class ReadableCommand(TyperCommand):
    """A command whose options and arguments read as docs/cli.md writes them."""

    def __init__(self, *args: Any, **options: Any) -> None:
        super().__init__(*args, **options)
        if self.short_help is None:
            self.short_help = listed_help(self.help)

    def get_params(self, ctx: Any) -> list[Any]:
        return _readable(super().get_params(ctx))


class ReadableGroup(TyperGroup):
    """A group of commands whose own options (``--help``, ``--version``) read the same way."""

    def __init__(self, *args: Any, **options: Any) -> None:
        super().__init__(*args, **options)
        if self.short_help is None:
            self.short_help = listed_help(self.help)

    def get_params(self, ctx: Any) -> list[Any]:
        return _readable(super().get_params(ctx))


class CommandApp(typer.Typer):
    """A ``typer.Typer`` whose commands and groups are readable ones (see the module)."""

    def __init__(self, *, cls: type[TyperGroup] = ReadableGroup, **options: Any) -> None:
        super().__init__(cls=cls, **options)

    def command(
        self, *args: Any, cls: type[TyperCommand] | None = None, **options: Any
    ) -> Callable[[CommandFunctionType], CommandFunctionType]:
        return super().command(*args, cls=cls or ReadableCommand, **options)
