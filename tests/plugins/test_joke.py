"""The joke plugin: topics to categories, styles, the answer's format, and serving it."""

from __future__ import annotations

import re
from typing import Any

import pytest

from toolbus.domain.config.loading import load_registry
from toolbus.plugins import ToolRegistrar
from toolbus.testing import ToolTestKit
from toolbus_joke import STYLES, joke_service, pick_category, tell_joke
from toolbus_joke import plugin as joke_plugin
from toolbus_joke.jokes import JOKES

ANSWER = re.compile(r"Hey (?P<user>.*)! Here's a (?P<style>\S+) for you:\n\n(?P<joke>.+)", re.S)

# Every documented example, plus a few more of each kind.
CATEGORY_CASES = [
    ("programming", "programming"),
    ("software engineering", "programming"),
    ("Programming", "programming"),
    ("llama", "llama"),
    ("llamas", "llama"),
    ("LLAMAS", "llama"),
    ("animals", "animals"),
    ("my dog", "animals"),
    ("food", "food"),
    ("cooking recipes", "food"),
    ("", "default"),
    ("history", "default"),
    ("space travel", "default"),
    ("knitting", "default"),
]

# Topics that merely *contain* a keyword's letters are still "anything else":
# "weather" holds "eat", "education" holds "cat", "competition" holds "pet".
UNRELATED_TOPICS = ["weather", "education", "competition", "theatre", "dogma"]


def parse(answer: str) -> dict[str, str]:
    match = ANSWER.fullmatch(answer)
    assert match, f"not in the 'Hey {{user}}! Here's a {{style}} for you:' format: {answer!r}"
    return match.groupdict()


def categories_of(joke: str) -> list[str]:
    """The categories whose tables hold ``joke``."""
    return [
        category
        for category, by_style in JOKES.items()
        if any(joke in jokes for jokes in by_style.values())
    ]


def test_every_category_has_a_joke_in_every_style_and_no_joke_is_shared() -> None:
    assert set(JOKES) == {"programming", "llama", "animals", "food", "default"}
    seen: list[str] = []
    for category, by_style in JOKES.items():
        assert set(by_style) == set(STYLES), category
        for style, jokes in by_style.items():
            assert jokes, f"{category}/{style} is empty"
            seen.extend(jokes)
    # Distinct jokes let every test below tell the category from the joke alone.
    assert len(seen) == len(set(seen))


@pytest.mark.parametrize(("topic", "category"), CATEGORY_CASES)
def test_topic_maps_to_category(topic: str, category: str) -> None:
    assert pick_category(topic) == category


@pytest.mark.parametrize("topic", UNRELATED_TOPICS)
def test_a_word_that_only_contains_a_keyword_is_anything_else(topic: str) -> None:
    assert pick_category(topic) == "default"


@pytest.mark.parametrize(("topic", "category"), CATEGORY_CASES)
@pytest.mark.parametrize("style", STYLES)
def test_the_joke_comes_from_the_topics_category_and_the_asked_style(
    topic: str, category: str, style: str
) -> None:
    parts = parse(tell_joke("alice", topic, style))

    assert parts["user"] == "alice"
    assert parts["style"] == style
    assert parts["joke"] in JOKES[category][style]


@pytest.mark.parametrize("style", ["", "limerick", "PUN", " pun"])
def test_an_empty_or_unknown_style_picks_a_valid_one(style: str) -> None:
    for topic, category in CATEGORY_CASES:
        parts = parse(tell_joke("bob", topic, style))

        assert parts["style"] in STYLES
        assert parts["joke"] in JOKES[category][parts["style"]]


def test_the_answer_is_exactly_the_documented_format() -> None:
    answer = tell_joke("carol", "llamas", "dad-joke")
    joke = parse(answer)["joke"]

    assert answer == f"Hey carol! Here's a dad-joke for you:\n\n{joke}"


def test_the_plugin_registers_the_service_and_tell_joke_as_the_issue_describes() -> None:
    registrar = ToolRegistrar()
    joke_plugin.toolbus_register_tools(register=registrar)

    assert registrar.services == [joke_service]
    assert registrar.service_descriptors == {
        "joke-service": {
            "id": "joke-service",
            "request-queue": "non-persistent://tg/request/joke",
            "response-queue": "non-persistent://tg/response/joke",
            "config-params": [{"name": "style", "required": False}],
        }
    }
    tool = registrar.tools["tell-joke"]
    assert tool["type"] == "tool-service"
    assert tool["service"] == "joke-service"
    assert tool["name"] == "tell-joke"
    assert tool["style"] == "pun"
    assert [argument["name"] for argument in tool["arguments"]] == ["topic"]
    # The defaults are a valid configuration on their own.
    registry = load_registry(
        {"tool-service": registrar.service_descriptors, "tool": registrar.tools}
    )
    assert registry.tool("tell-joke").config == {"style": "pun"}


# --- over the in-memory bus -------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize(("topic", "category"), CATEGORY_CASES)
async def test_served_on_the_bus_the_answer_follows_topic_style_and_user(
    toolbus: ToolTestKit, topic: str, category: str
) -> None:
    await toolbus.serve(joke_service)

    answer = await toolbus.call(
        joke_service, {"topic": topic}, user="alice", config={"style": "one-liner"}
    )

    parts = parse(answer)
    assert parts["user"] == "alice"
    assert parts["style"] == "one-liner"
    assert parts["joke"] in JOKES[category]["one-liner"]


@pytest.mark.anyio
@pytest.mark.parametrize("config", [{}, {"style": ""}, {"style": "sonnet"}])
async def test_served_on_the_bus_a_missing_or_unknown_style_still_answers(
    toolbus: ToolTestKit, config: dict[str, Any]
) -> None:
    await toolbus.serve(joke_service)

    parts = parse(await toolbus.call(joke_service, {"topic": "my dog"}, config=config))

    assert parts["style"] in STYLES
    assert parts["joke"] in JOKES["animals"][parts["style"]]


@pytest.mark.anyio
async def test_tell_joke_by_name_gets_the_style_from_its_descriptor(toolbus: ToolTestKit) -> None:
    registrar = ToolRegistrar()
    joke_plugin.toolbus_register_tools(register=registrar)
    registry = load_registry(
        {"tool-service": registrar.service_descriptors, "tool": registrar.tools}
    )
    await toolbus.serve(joke_service)

    answer = await toolbus.tools(registry).call(
        "tell-joke", {"topic": "cooking recipes"}, user="dave"
    )

    parts = parse(answer)
    assert parts["user"] == "dave"
    assert parts["style"] == registry.tool("tell-joke").config["style"]
    assert categories_of(parts["joke"]) == ["food"]
    assert parts["joke"] in JOKES["food"][parts["style"]]
