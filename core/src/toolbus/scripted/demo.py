"""The script ``toolbus demo`` runs its agent with when no real model is configured."""

from __future__ import annotations

from typing import Any

#: For the demo's question, against its calculator and joke tools.
DEMO_SCRIPT: list[dict[str, Any]] = [
    {
        "text": "I will work it out first.",
        "calls": [{"name": "calculate", "arguments": {"expression": "6 * 7"}}],
    },
    {
        "text": "That is 42; now a celebration.",
        "calls": [{"name": "celebrate", "arguments": {"topic": "the number 42"}}],
    },
    {"text": "6 * 7 is 42, and that deserves a joke."},
]
