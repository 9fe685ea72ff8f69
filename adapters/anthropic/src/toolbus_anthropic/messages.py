"""OpenAI-style chat messages as the Anthropic Messages API takes them.

The agent loop keeps its chat in OpenAI's format. Anthropic's differs: the
system prompt is a separate parameter, tool calls are ``tool_use`` content
blocks of the assistant, and observations are ``tool_result`` blocks of a
*user* message; consecutive messages of one role are merged into one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any


def to_anthropic(
    messages: Sequence[Mapping[str, Any]],
) -> tuple[str | None, list[dict[str, Any]]]:
    """``(system prompt, messages)`` for ``messages.create``."""
    system: list[str] = []
    converted: list[dict[str, Any]] = []

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if not blocks:
            return
        if converted and converted[-1]["role"] == role:
            converted[-1]["content"].extend(blocks)
        else:
            converted.append({"role": role, "content": blocks})

    for message in messages:
        role = message.get("role")
        content = message.get("content")
        if role in ("system", "developer"):
            system.append(_text(content))
        elif role == "user":
            add("user", _blocks(content))
        elif role == "assistant":
            blocks = _blocks(content)
            for call in message.get("tool_calls") or ():
                function = call.get("function", {})
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": call["id"],
                        "name": function.get("name", ""),
                        "input": _input(function.get("arguments")),
                    }
                )
            add("assistant", blocks)
        elif role == "tool":
            add(
                "user",
                [
                    {
                        "type": "tool_result",
                        "tool_use_id": message.get("tool_call_id", ""),
                        "content": _text(content),
                    }
                ],
            )
    return ("\n\n".join(system) or None), converted


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, Mapping))
    return str(content)


def _blocks(content: Any) -> list[dict[str, Any]]:
    text = _text(content)
    return [{"type": "text", "text": text}] if text else []


def _input(arguments: Any) -> dict[str, Any]:
    """A tool call's arguments as the ``input`` object; text that is no object is kept whole."""
    if isinstance(arguments, Mapping):
        return dict(arguments)
    if not arguments:
        return {}
    try:
        parsed = json.loads(arguments)
    except (TypeError, json.JSONDecodeError):
        return {"arguments": str(arguments)}
    return parsed if isinstance(parsed, dict) else {"arguments": parsed}
