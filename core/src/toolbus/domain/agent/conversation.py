"""The chat the agent loop keeps: OpenAI-style messages built from requests and turns.

The loop speaks one message format, OpenAI's Chat Completions messages (the
one configured hooks inject too); LLM adapters for other APIs translate it
when they send it.
"""

from __future__ import annotations

import json
from typing import Any

from toolbus.domain.agent.turns import ModelTurn
from toolbus.domain.agent.wire import AgentRequest


def initial_messages(
    request: AgentRequest, system_prompt: str | None = None
) -> list[dict[str, Any]]:
    """The chat a request starts from: system prompt, history (or messages), then the question."""
    messages: list[dict[str, Any]] = []
    if system_prompt:
        messages.append({"role": "system", "content": system_prompt})
    if request.messages is not None:
        messages.extend(dict(message) for message in request.messages)
    for number, step in enumerate(request.history, 1):
        if step.action:
            call_id = f"history-{number}"
            messages.append(
                {
                    "role": "assistant",
                    "content": step.thought or None,
                    "tool_calls": [
                        {
                            "id": call_id,
                            "type": "function",
                            "function": {
                                "name": step.action,
                                "arguments": json.dumps(step.arguments),
                            },
                        }
                    ],
                }
            )
            messages.append({"role": "tool", "tool_call_id": call_id, "content": step.observation})
        elif step.thought or step.observation:
            messages.append({"role": "assistant", "content": step.thought or step.observation})
    if request.question.strip():
        messages.append({"role": "user", "content": request.question})
    return messages


def assistant_message(turn: ModelTurn) -> dict[str, Any]:
    """A model turn as the assistant message that goes back into the chat."""
    message: dict[str, Any] = {"role": "assistant", "content": turn.text or None}
    if turn.tool_calls:
        message["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call in turn.tool_calls
        ]
    return message
