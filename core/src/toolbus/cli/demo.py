"""``toolbus demo``: the whole idea in one process, on the in-memory bus."""

from __future__ import annotations

from typing import Any

import typer

from toolbus.application.calls.client import ToolServiceClient
from toolbus.application.calls.host import running
from toolbus.application.calls.tools import Tools
from toolbus.cli.app import app
from toolbus.cli.common import run
from toolbus.domain.access.check import check_access
from toolbus.domain.config.loading import load_registry
from toolbus.domain.config.registry import Registry, normalize_state
from toolbus.domain.errors import AccessDenied
from toolbus.memory.bus import connect
from toolbus.runtime import resolve_service

# Two services, three tools: two of them share the joke service with different config.
DEMO_CONFIG: dict[str, Any] = {
    "tool-service": {
        "joke-service": {
            "id": "joke-service",
            "request-queue": "non-persistent://tg/request/joke",
            "response-queue": "non-persistent://tg/response/joke",
            "config-params": [{"name": "style", "required": False}],
        },
        "calculator": {
            "id": "calculator",
            "request-queue": "non-persistent://tg/request/calc",
            "response-queue": "non-persistent://tg/response/calc",
            "config-params": [],
        },
    },
    "tool": {
        "tell-joke": {
            "type": "tool-service",
            "name": "tell-joke",
            "description": "Tell a pun on a topic",
            "service": "joke-service",
            "style": "pun",
            "group": ["fun"],
            "arguments": [{"name": "topic", "type": "string", "description": "The topic"}],
        },
        "calculate": {
            "type": "tool-service",
            "name": "calculate",
            "description": "Evaluate arithmetic",
            "service": "calculator",
            "group": ["math"],
            "state": "calculated",
            "applicable-states": ["undefined"],
            "arguments": [{"name": "expression", "type": "string", "description": "e.g. 6 * 7"}],
        },
        "celebrate": {
            "type": "tool-service",
            "name": "celebrate",
            "description": "A one-liner to celebrate a result",
            "service": "joke-service",
            "style": "one-liner",
            "group": ["fun", "math"],
            "applicable-states": ["calculated"],
            "arguments": [{"name": "topic", "type": "string", "description": "The topic"}],
        },
    },
}

PERMISSIONS = {"alice": ["fun", "math"], "bob": ["fun"]}


def _names(registry: Registry, groups: list[str], state: str) -> str:
    return ", ".join(t.name for t in registry.available(groups, state)) or "(none)"


async def _demo() -> None:
    say = typer.echo
    registry = load_registry(DEMO_CONFIG)
    bus = await connect("memory://demo")
    services = [resolve_service("joke-service"), resolve_service("calculator")]
    async with running(bus, *services), ToolServiceClient(bus) as client:
        tools = Tools(client, registry)
        say("toolbus demo: two tool services and three tools on the in-memory bus\n")
        for service in services:
            say(f"  service {service.id:<13} {service.request_queue}")
        for tool in registry.tools.values():
            states = ", ".join(tool.applicable_states or ("any",))
            say(
                f"  tool    {tool.name:<13} groups: {', '.join(tool.groups):<10} "
                f"states: {states:<11} -> {tool.state or '(stays)'}"
            )

        say("\nWho may use what (groups come from the request, checked against permissions):")
        for user, groups in (("alice", ["fun", "math"]), ("bob", ["fun"]), ("bob", ["math"])):
            try:
                check_access(user, groups, PERMISSIONS[user])
            except AccessDenied as exc:
                say(f"  {user} asks for {groups}: refused: {exc}")
                continue
            say(f"  {user} asks for {groups}: offered {_names(registry, groups, 'undefined')}")

        say("\nalice's session, state by state:")
        groups, state = ["fun", "math"], normalize_state(None)
        say(f"  [{state}] offered: {_names(registry, groups, state)}")
        answer = await tools.call("calculate", {"expression": "6 * 7"}, user="alice")
        say(f"  calculate(6 * 7) -> {answer}")
        state = registry.next_state("calculate", state)
        say(f"  [{state}] offered: {_names(registry, groups, state)}")
        joke = await tools.call("celebrate", {"topic": "programming"}, user="alice")
        say("  celebrate(programming) ->\n    " + joke.replace("\n", "\n    "))

        say("\nbob's session:")
        joke = await tools.call("tell-joke", {"topic": "llamas"}, user="bob")
        say("  tell-joke(llamas) ->\n    " + joke.replace("\n", "\n    "))
        say(
            "\nNext: `toolbus tools --config DIR`, `toolbus serve joke-service --broker "
            "nats://127.0.0.1:4222`, and the docs/ folder."
        )
    await bus.close()


@app.command("demo")
def demo() -> None:
    """Run a short tour on the in-memory bus: services, tools, groups, states."""
    run(_demo)
