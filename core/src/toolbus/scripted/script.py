"""Scripts of model turns: what a scripted model says, turn by turn, per conversation.

A script is a list of turns. Each conversation (told apart by its first user
message, so that concurrent requests with different questions never share a
place in the script) starts at the first turn and moves one turn on per model
request. A turn is text, tool calls, or a failure (an HTTP status the scripted
server answers with: 500, 429...). After the last turn, a conversation gets
the last turn again.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ScriptedCall(_Model):
    """A tool call the scripted model makes: the tool's LLM name and its arguments."""

    name: str
    arguments: dict[str, Any] | str = Field(default_factory=dict)

    @property
    def arguments_json(self) -> str:
        return self.arguments if isinstance(self.arguments, str) else json.dumps(self.arguments)


class ScriptedFailure(_Model):
    """The model request fails: the HTTP ``status`` and ``message`` a provider would send."""

    status: int = 500
    message: str = "scripted failure"
    #: What the scripted server asks clients to wait before retrying, in milliseconds.
    retry_after_ms: int | None = None


class ScriptedTurn(_Model):
    """One model turn: ``text``, ``calls``, or a ``failure`` instead of an answer.

    ``input_tokens``/``output_tokens`` are reported as usage; by default one
    token per word, deterministic for tests.
    """

    text: str = ""
    calls: list[ScriptedCall] = Field(default_factory=list)
    failure: ScriptedFailure | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None

    def usage(self, prompt_words: int) -> tuple[int, int]:
        words = len(self.text.split()) + sum(len(c.arguments_json.split()) for c in self.calls)
        return (
            prompt_words if self.input_tokens is None else self.input_tokens,
            words if self.output_tokens is None else self.output_tokens,
        )


_TURNS = TypeAdapter(list[ScriptedTurn])


class Script:
    """Turns to replay, with a place in them per conversation; safe across threads."""

    def __init__(self, turns: Sequence[ScriptedTurn | Mapping[str, Any]]) -> None:
        if not turns:
            raise ValueError("a script needs at least one turn")
        self.turns: tuple[ScriptedTurn, ...] = tuple(
            t if isinstance(t, ScriptedTurn) else ScriptedTurn.model_validate(t) for t in turns
        )
        self._places: dict[str, int] = {}
        self._lock = threading.Lock()
        #: Every request the script answered: (conversation key, tool names offered).
        self.requests: list[tuple[str, list[str]]] = []

    @classmethod
    def from_file(cls, path: str | Path) -> Script:
        """A script from a JSON file holding a list of turns; clear errors for bad files."""
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ValueError(f"cannot read the script {str(path)!r}: {exc.strerror}") from None
        try:
            return cls(_TURNS.validate_json(text))
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "the file"
            raise ValueError(
                f"the script {str(path)!r} is not a list of turns: {where}: {first['msg']}"
            ) from None

    def next_turn(self, conversation: str, tools: Sequence[str] = ()) -> ScriptedTurn:
        """The turn ``conversation`` is at, moving it on by one."""
        with self._lock:
            place = self._places.get(conversation, 0)
            self._places[conversation] = place + 1
            self.requests.append((conversation, list(tools)))
        return self.turns[min(place, len(self.turns) - 1)]

    def offered(self, conversation: str | None = None) -> list[list[str]]:
        """The tool names offered on each request (of one conversation, if named)."""
        with self._lock:
            return [tools for key, tools in self.requests if conversation in (None, key)]


def conversation_key(messages: Sequence[Mapping[str, Any]]) -> str:
    """What tells conversations apart: the text of the first user message."""
    for message in messages:
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                return content
            if isinstance(content, list):
                return " ".join(
                    str(block.get("text", "")) for block in content if isinstance(block, Mapping)
                )
    return ""


def prompt_words(messages: Sequence[Mapping[str, Any]]) -> int:
    """A deterministic stand-in for input tokens: the words in the messages' text."""
    return sum(len(str(message.get("content") or "").split()) for message in messages)
