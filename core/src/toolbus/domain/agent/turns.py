"""What a model says in one turn: text, tool calls and token usage.

These are the values the LLM port (:mod:`toolbus.application.agent.llm`)
produces, kept here so that the decisions about them stay pure.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Usage:
    """Tokens one or more model turns consumed."""

    input_tokens: int = 0
    output_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens, self.output_tokens + other.output_tokens
        )

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool call a model asked for. ``arguments`` is the JSON text the model wrote."""

    id: str
    name: str
    arguments: str = "{}"


@dataclass(frozen=True, slots=True)
class TextDelta:
    """A piece of the turn's text, as the model streams it."""

    text: str


@dataclass(frozen=True, slots=True)
class ToolCallStarted:
    """The model began writing a tool call (streamed turns): the tool's name."""

    name: str


@dataclass(frozen=True, slots=True)
class ModelTurn:
    """A whole model turn: its text, the tool calls it makes, what it cost.

    ``stop_reason`` is the provider's own word (``stop``, ``tool_calls``,
    ``end_turn``, ``length``...), kept for diagnostics.
    """

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = field(default_factory=Usage)
    stop_reason: str | None = None
