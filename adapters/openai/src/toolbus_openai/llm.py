"""OpenAI-compatible Chat Completions as a toolbus LLM, through the official ``openai`` SDK.

Works with OpenAI and with everything that speaks its API at another base URL:
vLLM, Ollama, llama.cpp's server, LiteLLM proxies. Retries (429, 5xx,
connection errors, with exponential backoff that honours ``Retry-After``) are
the SDK's own, configured by ``max_retries``. Streamed or whole turns and the
SDK's errors are handled as for every SDK adapter
(:class:`~toolbus.application.agent.llm_sdk.SdkChat`); this module reads
Chat Completions.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import openai

from toolbus.application.agent.llm import LLM, LLMError, ToolCallStarted, TurnEvent
from toolbus.application.agent.llm_sdk import SdkChat, SdkErrors
from toolbus.application.agent.llm_urls import api_key, parse_llm_url
from toolbus.domain.agent.turns import ModelTurn, TextDelta, ToolCall, Usage
from toolbus.domain.config.schemas import ExportFormat

DEFAULT_MAX_RETRIES = 3
DEFAULT_TIMEOUT = 120.0


class OpenAIChat(SdkChat):
    """A Chat Completions model. ``stream=False`` asks for whole completions instead."""

    errors = SdkErrors(openai.APIStatusError, openai.APIConnectionError, openai.OpenAIError)
    client: openai.AsyncOpenAI

    @property
    def tool_format(self) -> ExportFormat:
        return "openai"

    def request(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]]
    ) -> dict[str, Any]:
        request: dict[str, Any] = {"model": self.model, "messages": list(messages)}
        if tools:
            request["tools"] = list(tools)
        return request

    async def whole(self, request: dict[str, Any]) -> ModelTurn:
        completion = await self.client.chat.completions.create(**request)
        if not completion.choices:
            raise LLMError(f"{self.where()} answered with no choices")
        choice = completion.choices[0]
        calls = tuple(
            ToolCall(call.id, call.function.name, call.function.arguments or "{}")
            for call in choice.message.tool_calls or ()
            if call.type == "function"
        )
        usage = completion.usage
        return ModelTurn(
            text=choice.message.content or "",
            tool_calls=calls,
            usage=Usage(usage.prompt_tokens, usage.completion_tokens) if usage else Usage(),
            stop_reason=choice.finish_reason,
        )

    async def streamed(self, request: dict[str, Any]) -> AsyncIterator[TurnEvent]:
        chunks = await self.client.chat.completions.create(
            **request, stream=True, stream_options={"include_usage": True}
        )
        text: list[str] = []
        # Tool calls arrive in pieces, keyed by index: id and name first, arguments after.
        calls: dict[int, list[str]] = {}
        usage = Usage()
        stop_reason: str | None = None
        async for chunk in chunks:
            if chunk.usage is not None:
                usage = Usage(chunk.usage.prompt_tokens, chunk.usage.completion_tokens)
            for choice in chunk.choices:
                delta = choice.delta
                if delta.content:
                    text.append(delta.content)
                    yield TextDelta(delta.content)
                for piece in delta.tool_calls or ():
                    call = calls.get(piece.index)
                    if call is None:
                        call = calls[piece.index] = ["", "", ""]
                    if piece.id:
                        call[0] = piece.id
                    if piece.function is not None:
                        if piece.function.name:
                            started = not call[1]
                            call[1] += piece.function.name
                            if started:
                                yield ToolCallStarted(call[1])
                        if piece.function.arguments:
                            call[2] += piece.function.arguments
                if choice.finish_reason:
                    stop_reason = choice.finish_reason
        yield ModelTurn(
            text="".join(text),
            tool_calls=tuple(
                ToolCall(id or f"call_{index}", name, arguments or "{}")
                for index, (id, name, arguments) in sorted(calls.items())
            ),
            usage=usage,
            stop_reason=stop_reason,
        )


async def connect(url: str, options: Mapping[str, Any]) -> LLM:
    """``openai://MODEL`` or ``openai+http(s)://HOST:PORT/PATH/MODEL``.

    Options (query parameters or ``options``): ``max_retries`` (default 3),
    ``timeout`` (seconds, default 120), ``stream`` (default true),
    ``api_key_env`` (default ``OPENAI_API_KEY``). The key is required for
    ``openai://`` only: local servers usually need none.
    """
    location = parse_llm_url(url, options)
    key = api_key(location, "OPENAI_API_KEY", required=location.base_url is None)
    client = openai.AsyncOpenAI(
        # The SDK insists on a key; servers that need none ignore this one.
        api_key=key or "unused",
        base_url=location.base_url,
        max_retries=location.integer("max_retries", DEFAULT_MAX_RETRIES),
        timeout=location.number("timeout", DEFAULT_TIMEOUT),
    )
    return OpenAIChat(location.model, client, stream=location.flag("stream", True))
