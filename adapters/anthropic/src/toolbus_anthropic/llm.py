"""The Anthropic Messages API as a toolbus LLM, through the official ``anthropic`` SDK.

Retries (429, 5xx, overloaded, connection errors, with exponential backoff that
honours ``Retry-After``) are the SDK's own, configured by ``max_retries``.
Streamed or whole turns and the SDK's errors are handled as for every SDK
adapter (:class:`~toolbus.application.agent.llm_sdk.SdkChat`); this module
reads the Messages API.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import anthropic

from toolbus.application.agent.llm import LLM, ToolCallStarted, TurnEvent
from toolbus.application.agent.llm_sdk import SdkChat, SdkErrors
from toolbus.application.agent.llm_urls import api_key, parse_llm_url
from toolbus.domain.agent.turns import ModelTurn, TextDelta, ToolCall, Usage
from toolbus.domain.config.schemas import ExportFormat
from toolbus_anthropic.messages import to_anthropic

DEFAULT_MAX_RETRIES = 3
DEFAULT_TIMEOUT = 120.0
DEFAULT_MAX_TOKENS = 4096


class AnthropicChat(SdkChat):
    """A Messages API model. ``stream=False`` asks for whole messages instead."""

    errors = SdkErrors(
        anthropic.APIStatusError, anthropic.APIConnectionError, anthropic.AnthropicError
    )
    client: anthropic.AsyncAnthropic

    def __init__(
        self,
        model: str,
        client: anthropic.AsyncAnthropic,
        *,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        stream: bool = True,
    ) -> None:
        super().__init__(model, client, stream=stream)
        self.max_tokens = max_tokens

    @property
    def tool_format(self) -> ExportFormat:
        return "anthropic"

    def request(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]]
    ) -> dict[str, Any]:
        system, converted = to_anthropic(messages)
        request: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "messages": converted,
        }
        if system:
            request["system"] = system
        if tools:
            request["tools"] = list(tools)
        return request

    async def whole(self, request: dict[str, Any]) -> ModelTurn:
        message = await self.client.messages.create(**request)
        text: list[str] = []
        calls: list[ToolCall] = []
        for block in message.content:
            if block.type == "text":
                text.append(block.text)
            elif block.type == "tool_use":
                calls.append(ToolCall(block.id, block.name, json.dumps(block.input)))
        return ModelTurn(
            text="".join(text),
            tool_calls=tuple(calls),
            usage=Usage(message.usage.input_tokens, message.usage.output_tokens),
            stop_reason=message.stop_reason,
        )

    async def streamed(self, request: dict[str, Any]) -> AsyncIterator[TurnEvent]:
        events = await self.client.messages.create(**request, stream=True)
        text: list[str] = []
        # Content blocks by index: tool calls as [id, name, input JSON so far].
        calls: dict[int, list[str]] = {}
        input_tokens = output_tokens = 0
        stop_reason: str | None = None
        async for event in events:
            if event.type == "message_start":
                input_tokens = event.message.usage.input_tokens
                output_tokens = event.message.usage.output_tokens
            elif event.type == "content_block_start":
                block = event.content_block
                if block.type == "tool_use":
                    calls[event.index] = [block.id, block.name, ""]
                    yield ToolCallStarted(block.name)
            elif event.type == "content_block_delta":
                delta = event.delta
                if delta.type == "text_delta":
                    text.append(delta.text)
                    yield TextDelta(delta.text)
                elif delta.type == "input_json_delta" and event.index in calls:
                    calls[event.index][2] += delta.partial_json
            elif event.type == "message_delta":
                stop_reason = event.delta.stop_reason or stop_reason
                output_tokens = event.usage.output_tokens
        yield ModelTurn(
            text="".join(text),
            tool_calls=tuple(
                ToolCall(id, name, arguments or "{}")
                for _, (id, name, arguments) in sorted(calls.items())
            ),
            usage=Usage(input_tokens, output_tokens),
            stop_reason=stop_reason,
        )


async def connect(url: str, options: Mapping[str, Any]) -> LLM:
    """``anthropic://MODEL`` or ``anthropic+http(s)://HOST:PORT/PATH/MODEL``.

    Options (query parameters or ``options``): ``max_retries`` (default 3),
    ``timeout`` (seconds, default 120), ``max_tokens`` (default 4096),
    ``stream`` (default true), ``api_key_env`` (default ``ANTHROPIC_API_KEY``;
    required for ``anthropic://`` only).
    """
    location = parse_llm_url(url, options)
    key = api_key(location, "ANTHROPIC_API_KEY", required=location.base_url is None)
    client = anthropic.AsyncAnthropic(
        api_key=key or "unused",
        base_url=location.base_url,
        max_retries=location.integer("max_retries", DEFAULT_MAX_RETRIES),
        timeout=location.number("timeout", DEFAULT_TIMEOUT),
    )
    return AnthropicChat(
        location.model,
        client,
        max_tokens=location.integer("max_tokens", DEFAULT_MAX_TOKENS),
        stream=location.flag("stream", True),
    )
