"""A scripted model server: the stand-in for hosted LLMs, spoken to by the real SDKs.

A real HTTP server (Starlette on uvicorn, 127.0.0.1, a free port) that answers
OpenAI Chat Completions (``POST /v1/chat/completions``, whole or streamed) and
Anthropic Messages (``POST /v1/messages``, whole or streamed) from a
:class:`~toolbus.scripted.Script`: text in word-sized deltas, tool calls with
their arguments in pieces, usage, and failures (500, 429 with ``retry-after-ms``)
as providers send them. Tests put a script in with :meth:`ModelServer.play`.
"""

from __future__ import annotations

import itertools
import json
import socket
import threading
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any

import pytest
import uvicorn
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from toolbus.scripted.script import (
    Script,
    ScriptedTurn,
    conversation_key,
    prompt_words,
)

LOOPBACK = "127.0.0.1"


def _pieces(text: str) -> list[str]:
    words = text.split(" ")
    return [word if index == 0 else " " + word for index, word in enumerate(words) if text]


def _halves(text: str) -> list[str]:
    middle = len(text) // 2
    return [part for part in (text[:middle], text[middle:]) if part]


class ModelServer:
    """The running server and the script it replays; see the module docs."""

    def __init__(self) -> None:
        self.script = Script([ScriptedTurn(text="No script was played.")])
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        #: Every request body received, in order (JSON), for assertions.
        self.bodies: list[dict[str, Any]] = []
        app = Starlette(
            routes=[
                Route("/v1/chat/completions", self._openai, methods=["POST"]),
                Route("/v1/messages", self._anthropic, methods=["POST"]),
            ]
        )
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind((LOOPBACK, 0))
        # Listening before the server thread starts: connections wait in the
        # backlog until uvicorn accepts them, so there is nothing to wait for.
        self._socket.listen(128)
        self.port: int = self._socket.getsockname()[1]
        config = uvicorn.Config(app, log_level="warning", lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._socket.close()

    # ------------------------------------------------------------------ for tests

    def play(self, turns: Sequence[ScriptedTurn | Mapping[str, Any]]) -> Script:
        """Replay ``turns`` from now on (a fresh script; earlier bodies are forgotten)."""
        self.script = Script(turns)
        with self._lock:
            self.bodies = []
        return self.script

    def openai_url(self, model: str = "scripted-gpt", **options: Any) -> str:
        query = "&".join(f"{key}={value}" for key, value in options.items())
        return f"openai+http://{LOOPBACK}:{self.port}/v1/{model}" + (f"?{query}" if query else "")

    def anthropic_url(self, model: str = "scripted-claude", **options: Any) -> str:
        query = "&".join(f"{key}={value}" for key, value in options.items())
        return f"anthropic+http://{LOOPBACK}:{self.port}/{model}" + (f"?{query}" if query else "")

    # ------------------------------------------------------------------ shared

    async def _next(
        self, request: Request, tools: list[str]
    ) -> tuple[dict[str, Any], ScriptedTurn]:
        body = await request.json()
        with self._lock:
            self.bodies.append(body)
        messages = body.get("messages", [])
        return body, self.script.next_turn(conversation_key(messages), tools)

    def _call_id(self, prefix: str) -> str:
        return f"{prefix}{next(self._ids)}"

    # ------------------------------------------------------------------ OpenAI

    async def _openai(self, request: Request) -> Response:
        peek = await request.json()
        tools = [tool["function"]["name"] for tool in peek.get("tools") or ()]
        body, turn = await self._next(request, tools)
        if turn.failure is not None:
            headers = {}
            if turn.failure.retry_after_ms is not None:
                headers["retry-after-ms"] = str(turn.failure.retry_after_ms)
            return JSONResponse(
                {"error": {"message": turn.failure.message, "type": "server_error"}},
                status_code=turn.failure.status,
                headers=headers,
            )
        prompt, completion = turn.usage(prompt_words(body.get("messages", [])))
        usage = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }
        calls = [
            {
                "id": self._call_id("call_"),
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments_json},
            }
            for call in turn.calls
        ]
        finish = "tool_calls" if calls else "stop"
        model = body.get("model", "scripted")
        if not body.get("stream"):
            message: dict[str, Any] = {"role": "assistant", "content": turn.text or None}
            if calls:
                message["tool_calls"] = calls
            return JSONResponse(
                {
                    "id": self._call_id("chatcmpl-"),
                    "object": "chat.completion",
                    "created": 0,
                    "model": model,
                    "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                    "usage": usage,
                }
            )
        completion_id = self._call_id("chatcmpl-")

        def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> str:
            return json.dumps(
                {
                    "id": completion_id,
                    "object": "chat.completion.chunk",
                    "created": 0,
                    "model": model,
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
                }
            )

        async def events() -> AsyncIterator[str]:
            yield chunk({"role": "assistant", "content": ""})
            for piece in _pieces(turn.text):
                yield chunk({"content": piece})
            for index, call in enumerate(calls):
                function = call["function"]
                yield chunk(
                    {
                        "tool_calls": [
                            {
                                "index": index,
                                "id": call["id"],
                                "type": "function",
                                "function": {"name": function["name"], "arguments": ""},
                            }
                        ]
                    }
                )
                for part in _halves(function["arguments"]):
                    yield chunk({"tool_calls": [{"index": index, "function": {"arguments": part}}]})
            yield chunk({}, finish)
            if (body.get("stream_options") or {}).get("include_usage"):
                yield json.dumps(
                    {
                        "id": completion_id,
                        "object": "chat.completion.chunk",
                        "created": 0,
                        "model": model,
                        "choices": [],
                        "usage": usage,
                    }
                )
            yield "[DONE]"

        return EventSourceResponse(events(), ping=600)

    # ------------------------------------------------------------------ Anthropic

    async def _anthropic(self, request: Request) -> Response:
        peek = await request.json()
        tools = [tool["name"] for tool in peek.get("tools") or ()]
        body, turn = await self._next(request, tools)
        if turn.failure is not None:
            headers = {}
            if turn.failure.retry_after_ms is not None:
                headers["retry-after-ms"] = str(turn.failure.retry_after_ms)
            kind = "rate_limit_error" if turn.failure.status == 429 else "api_error"
            return JSONResponse(
                {"type": "error", "error": {"type": kind, "message": turn.failure.message}},
                status_code=turn.failure.status,
                headers=headers,
            )
        prompt, completion = turn.usage(prompt_words(body.get("messages", [])))
        blocks: list[dict[str, Any]] = []
        if turn.text:
            blocks.append({"type": "text", "text": turn.text})
        for call in turn.calls:
            arguments = call.arguments if isinstance(call.arguments, dict) else {}
            blocks.append(
                {
                    "type": "tool_use",
                    "id": self._call_id("toolu_"),
                    "name": call.name,
                    "input": arguments,
                }
            )
        stop = "tool_use" if turn.calls else "end_turn"
        model = body.get("model", "scripted")
        message = {
            "id": self._call_id("msg_"),
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": blocks,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": {"input_tokens": prompt, "output_tokens": completion},
        }
        if not body.get("stream"):
            return JSONResponse(message)

        def event(name: str, data: dict[str, Any]) -> ServerSentEvent:
            return ServerSentEvent(data=json.dumps({"type": name, **data}), event=name)

        async def events() -> AsyncIterator[ServerSentEvent]:
            start = {**message, "content": [], "stop_reason": None}
            start["usage"] = {"input_tokens": prompt, "output_tokens": 0}
            yield event("message_start", {"message": start})
            for index, block in enumerate(blocks):
                if block["type"] == "text":
                    yield event(
                        "content_block_start",
                        {"index": index, "content_block": {"type": "text", "text": ""}},
                    )
                    for piece in _pieces(block["text"]):
                        yield event(
                            "content_block_delta",
                            {"index": index, "delta": {"type": "text_delta", "text": piece}},
                        )
                else:
                    yield event(
                        "content_block_start",
                        {"index": index, "content_block": {**block, "input": {}}},
                    )
                    for part in _halves(json.dumps(block["input"])):
                        yield event(
                            "content_block_delta",
                            {
                                "index": index,
                                "delta": {"type": "input_json_delta", "partial_json": part},
                            },
                        )
                yield event("content_block_stop", {"index": index})
            yield event(
                "message_delta",
                {
                    "delta": {"stop_reason": stop, "stop_sequence": None},
                    "usage": {"output_tokens": completion},
                },
            )
            yield event("message_stop", {})

        return EventSourceResponse(events(), ping=600)


@pytest.fixture(scope="session")
def model_server() -> Iterator[ModelServer]:
    """The scripted model server, for the whole test session; tests call ``play``."""
    server = ModelServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()
