"""Registers the joke service and its default ``tell-joke`` tool."""

from __future__ import annotations

from toolbus.plugins import ToolRegistrar, hookimpl
from toolbus_joke.service import joke_service


@hookimpl
def toolbus_register_tools(register: ToolRegistrar) -> None:
    register.service(
        joke_service,
        tools={
            "tell-joke": {
                "name": "tell-joke",
                "description": "Tell a joke on a given topic",
                "style": "pun",
                # Its argument comes from JokeService.arguments_schema.
            }
        },
    )
