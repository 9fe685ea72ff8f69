"""The LLM port: chat with tools, streamed, with token usage.

An LLM adapter is anything with this shape; the agent loop depends on nothing
else. Adapters are found by URL through the ``toolbus.llms`` entry-point group
(:func:`toolbus.plugins.connect_llm`): ``openai://gpt-4.1-mini``,
``openai+http://127.0.0.1:11434/v1/llama3``, ``anthropic://claude-sonnet-4-5``,
``scripted://demo``.

Messages are OpenAI Chat Completions messages (``system``, ``user``,
``assistant`` with ``tool_calls``, ``tool``); an adapter for another API
translates them. Tools come in the format the adapter names in
:attr:`LLM.tool_format` (see :func:`toolbus.domain.config.schemas.export_tools`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from toolbus.domain.agent.turns import ModelTurn, TextDelta, ToolCall, ToolCallStarted, Usage
from toolbus.domain.config.schemas import ExportFormat

__all__ = [
    "LLM",
    "LLMError",
    "LLMFactory",
    "ModelTurn",
    "TextDelta",
    "ToolCall",
    "ToolCallStarted",
    "TurnEvent",
    "Usage",
    "complete",
    "provider_error_message",
]


#: What :meth:`LLM.stream` yields: deltas as they come, then the whole turn, last.
TurnEvent = TextDelta | ToolCallStarted | ModelTurn


class LLMError(Exception):
    """The model could not answer (after the adapter's retries); the message says why.

    ``status`` is the HTTP status the provider answered with, when there was one.
    Messages never contain API keys.
    """

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def provider_error_message(body: object, fallback: str) -> str:
    """The provider's own words from an HTTP error body, else ``fallback``.

    OpenAI-compatible servers and Anthropic both answer errors as
    ``{"error": {"message": ...}}``; some local servers put ``message`` at the top.
    """
    if isinstance(body, Mapping):
        error = body.get("error", body)
        if isinstance(error, Mapping) and error.get("message"):
            return str(error["message"])
    return fallback


@runtime_checkable
class LLM(Protocol):
    """A chat model that can call tools."""

    @property
    def model(self) -> str:
        """The model's name, as the provider knows it (for events and the audit record)."""
        ...

    @property
    def tool_format(self) -> ExportFormat:
        """The tool-list format the provider takes: ``"openai"`` or ``"anthropic"``."""
        ...

    def stream(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]]
    ) -> AsyncIterator[TurnEvent]:
        """One model turn. Yields text deltas and tool-call starts as they come (an
        adapter that does not stream yields none), then exactly one :class:`ModelTurn`,
        last. Raises :class:`LLMError` when the provider fails after retries."""
        ...

    async def aclose(self) -> None:
        """Release connections."""
        ...


LLMFactory = Callable[[str, Mapping[str, Any]], Awaitable[LLM]]
"""``await factory(url, options)`` makes the LLM ``url`` names."""


async def complete(
    llm: LLM, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] = ()
) -> ModelTurn:
    """One whole turn, for callers that do not stream."""
    async for event in llm.stream(messages, tools):
        if isinstance(event, ModelTurn):
            return event
    raise LLMError(f"the {llm.model!r} adapter ended a turn without a result")
