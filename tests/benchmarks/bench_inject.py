"""How long :func:`toolbus.hooks.inject` takes on a 1,000-message history.

Run with ``uv run python tests/benchmarks/bench_inject.py``. The budget is
1 ms per call; hooks run on every agent request, before the model is asked.
"""

from __future__ import annotations

import timeit
from collections.abc import Callable
from typing import Any

from toolbus.hooks import inject

HISTORY_LENGTH = 1_000
BUDGET_US = 1_000.0
TOOL = "memory_server_get_memories"
ARGS = {"user_id": "current"}
NOW = 1_700_000_000


def plain_chat(length: int) -> list[dict[str, Any]]:
    """A long chat of text turns with, now and then, a real tool call."""
    chat: list[dict[str, Any]] = [{"role": "system", "content": "You are helpful."}]
    turn = 0
    while len(chat) < length:
        if turn % 5 == 4:
            call_id = f"call_{turn}"
            call = {"id": call_id, "type": "function", "function": {"name": "f", "arguments": "{}"}}
            chat.append({"role": "assistant", "content": None, "tool_calls": [call]})
            chat.append({"role": "tool", "tool_call_id": call_id, "content": "result " * 20})
        else:
            chat.append({"role": "user", "content": f"question {turn} " * 10})
            chat.append({"role": "assistant", "content": f"answer {turn} " * 30})
        turn += 1
    return chat[:length]


def chat_with_pair(content: str) -> list[dict[str, Any]]:
    """As after the first request: the hook's pair right after the first user message.

    The pair sits near the start, so finding it means walking the whole history.
    """
    return inject(
        plain_chat(HISTORY_LENGTH - 2),
        tool_name=TOOL,
        arguments=ARGS,
        content=content,
        frequency="append_if_changed",
        ttl_expiry=NOW,
    )


def measure(label: str, call: Callable[[], object]) -> float:
    runs, _ = timeit.Timer(call).autorange()
    best = min(timeit.repeat(call, number=runs, repeat=5)) / runs * 1e6
    verdict = "ok" if best < BUDGET_US else "OVER BUDGET"
    print(f"{label:<48} {best:8.1f} µs  {verdict}")
    return best


def main() -> None:
    memories = "The user prefers metric units and short answers. " * 40
    chat = chat_with_pair(memories)
    no_pair = plain_chat(HISTORY_LENGTH)

    def run(messages: list[dict[str, Any]], content: str, frequency: Any) -> object:
        return inject(
            messages,
            tool_name=TOOL,
            arguments=ARGS,
            content=content,
            frequency=frequency,
            ttl_expiry=NOW + 3600,
        )

    print(f"inject on a {len(chat)}-message history (best of 5, budget {BUDGET_US:g} µs)")
    results = [
        measure(
            "append_if_changed, same content (replace)",
            lambda: run(chat, memories, "append_if_changed"),
        ),
        measure(
            "append_if_changed, new content (append)",
            lambda: run(chat, "changed", "append_if_changed"),
        ),
        measure(
            "append_if_changed, first time (insert)",
            lambda: run(no_pair, memories, "append_if_changed"),
        ),
        measure("always (append)", lambda: run(chat, memories, "always")),
    ]
    print(f"worst: {max(results):.1f} µs per inject")


if __name__ == "__main__":
    main()
