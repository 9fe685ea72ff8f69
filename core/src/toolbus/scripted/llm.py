"""The scripted model as an LLM adapter: ``scripted://NAME`` or ``scripted:///path.json``."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

import anyio

from toolbus.application.agent.llm import LLM, LLMError, ToolCallStarted, TurnEvent
from toolbus.domain.agent.turns import ModelTurn, TextDelta, ToolCall, Usage
from toolbus.domain.config.schemas import ExportFormat
from toolbus.domain.errors import PluginError
from toolbus.scripted.demo import DEMO_SCRIPT
from toolbus.scripted.script import Script, conversation_key, prompt_words

#: Scripts ``scripted://NAME`` names.
BUILT_IN: dict[str, list[dict[str, Any]]] = {"demo": DEMO_SCRIPT}


class ScriptedLLM:
    """Replays a :class:`Script`, streaming each turn's text word by word.

    A failure turn raises :class:`LLMError` with its status, as an adapter does
    once its retries are spent.
    """

    def __init__(
        self, script: Script, *, model: str = "scripted", tool_format: ExportFormat = "openai"
    ) -> None:
        self.script = script
        self._model = model
        self._tool_format: ExportFormat = tool_format
        self._ids = itertools.count(1)

    @property
    def model(self) -> str:
        return self._model

    @property
    def tool_format(self) -> ExportFormat:
        return self._tool_format

    async def stream(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]]
    ) -> AsyncIterator[TurnEvent]:
        offered = [_tool_name(tool) for tool in tools]
        turn = self.script.next_turn(conversation_key(messages), offered)
        await anyio.lowlevel.checkpoint()
        if turn.failure is not None:
            raise LLMError(
                f"HTTP {turn.failure.status}: {turn.failure.message}", status=turn.failure.status
            )
        words = turn.text.split(" ")
        for index, word in enumerate(words):
            yield TextDelta(word if index == 0 else " " + word)
        calls = []
        for call in turn.calls:
            yield ToolCallStarted(call.name)
            calls.append(ToolCall(f"call_{next(self._ids)}", call.name, call.arguments_json))
        input_tokens, output_tokens = turn.usage(prompt_words(messages))
        yield ModelTurn(
            text=turn.text,
            tool_calls=tuple(calls),
            usage=Usage(input_tokens, output_tokens),
            stop_reason="tool_calls" if calls else "stop",
        )

    async def aclose(self) -> None:
        return None


def _tool_name(tool: Mapping[str, Any]) -> str:
    function = tool.get("function")
    if isinstance(function, Mapping):
        return str(function.get("name", ""))
    return str(tool.get("name", ""))


async def connect(url: str, options: Mapping[str, Any]) -> LLM:
    """``scripted://NAME`` (a built-in script), ``scripted:///abs/script.json`` or
    ``scripted:relative/script.json``."""
    parts = urlsplit(url)
    if parts.netloc:
        if parts.netloc not in BUILT_IN:
            raise PluginError(
                f"no built-in script {parts.netloc!r} in {url!r}; use one of "
                f"{', '.join(sorted(BUILT_IN))}, or scripted:///path/to/script.json"
            )
        script = Script(BUILT_IN[parts.netloc])
        name = parts.netloc
    else:
        try:
            script = Script.from_file(parts.path)
        except ValueError as exc:
            raise PluginError(str(exc)) from None
        name = parts.path.rsplit("/", 1)[-1]
    return ScriptedLLM(script, model=f"scripted-{name}")
