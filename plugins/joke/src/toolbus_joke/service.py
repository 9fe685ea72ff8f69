"""The joke service: ``tell-joke`` with a configurable style and a topic argument."""

from __future__ import annotations

import re
import zlib
from typing import Any

from pydantic import BaseModel, Field

from toolbus import ToolService
from toolbus_joke.jokes import JOKES

STYLES = ("pun", "dad-joke", "one-liner")

# Topic keywords, checked in order; the first category with a match wins.
_CATEGORY_KEYWORDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("programming", ("programming", "software", "coding", "code", "developer", "computer")),
    ("llama", ("llama",)),
    ("animals", ("animal", "dog", "cat", "pet", "bird")),
    ("food", ("food", "cooking", "recipe", "pizza", "eat")),
)


_WORD = re.compile(r"[a-z]+")


def pick_category(topic: str) -> str:
    """The joke category for a free-text topic; ``default`` when nothing matches.

    Keywords match whole words, singular or plural: "my dog" and "llamas" match,
    "dogma" and "weather" do not.
    """
    words = set(_WORD.findall(topic.lower()))
    for category, keywords in _CATEGORY_KEYWORDS:
        if any(keyword in words or f"{keyword}s" in words for keyword in keywords):
            return category
    return "default"


def _stable_index(text: str, count: int) -> int:
    # Deterministic (unlike hash()), so the same request gets the same joke.
    return zlib.crc32(text.encode("utf-8")) % count


def tell_joke(user: str, topic: str, style: str = "") -> str:
    """A joke for ``user`` on ``topic``; an empty or unknown style picks a valid one."""
    if style not in STYLES:
        style = STYLES[_stable_index(f"{topic}|{style}", len(STYLES))]
    jokes = JOKES[pick_category(topic)][style]
    joke = jokes[_stable_index(topic, len(jokes))]
    return f"Hey {user}! Here's a {style} for you:\n\n{joke}"


class JokeArguments(BaseModel):
    """What a caller of ``tell-joke`` passes."""

    topic: str = Field(description="The topic for the joke (e.g. programming, animals, food)")


class JokeService(ToolService):
    """TrustGraph's example tool service, on TrustGraph's queues."""

    id = "joke-service"
    request_queue = "non-persistent://tg/request/joke"
    response_queue = "non-persistent://tg/response/joke"
    config_params = ({"name": "style", "required": False},)
    # Declared once here; the plugin's default tool takes its arguments from it.
    # The service reads them leniently, as TrustGraph's does (a missing topic is "").
    arguments_schema = JokeArguments.model_json_schema()

    async def invoke(self, user: str, config: dict[str, Any], arguments: dict[str, Any]) -> str:
        topic = arguments.get("topic", "")
        style = config.get("style", "")
        return tell_joke(user or "there", str(topic), str(style or ""))


joke_service = JokeService()
