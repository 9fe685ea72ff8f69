"""``toolbus demo``: the whole idea in one process, on the in-memory bus."""

from __future__ import annotations

import os
from typing import Annotated, Any

import typer

from toolbus.application.agent.loop import AgentLoop
from toolbus.application.calls.client import ToolServiceClient
from toolbus.application.calls.host import running
from toolbus.application.calls.tools import Tools
from toolbus.cli._agent_output import EventPrinter
from toolbus.cli._app import app
from toolbus.cli.agent import LLM_VARIABLE
from toolbus.cli.plugin_api import redact_url, run
from toolbus.domain.access.check import check_access
from toolbus.domain.agent.wire import AgentEvent, AgentRequest
from toolbus.domain.config.loading import load_registry
from toolbus.domain.config.registry import Registry, normalize_state
from toolbus.domain.errors import AccessDenied
from toolbus.memory import connect
from toolbus.plugins import connect_llm
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

#: What alice asks the agent (the scripted model's turns are written for it).
AGENT_QUESTION = "What is 6 * 7? Celebrate the result."


def _names(registry: Registry, groups: list[str], state: str) -> str:
    return ", ".join(t.name for t in registry.available(groups, state)) or "(none)"


async def _demo(llm_url: str | None) -> None:
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
        await _agent_section(tools, llm_url)
        say(
            "\nNext: `toolbus tools --config DIR`, `toolbus serve joke-service --broker "
            "nats://127.0.0.1:4222`, `toolbus agent serve --llm URL`, and the docs/ folder."
        )
    await bus.close()


async def _agent_section(tools: Tools, llm_url: str | None) -> None:
    """The agent loop answering alice, with the configured model or the scripted one."""
    say = typer.echo
    if llm_url is None:
        say(
            "\nThe agent loop, with a SCRIPTED model (deterministic turns, not an LLM; "
            f"pass --llm URL or set {LLM_VARIABLE} for a real one):"
        )
        url = "scripted://demo"
    else:
        say(f"\nThe agent loop, with the model {redact_url(llm_url)}:")
        url = llm_url
    llm = await connect_llm(url)
    try:
        loop = AgentLoop(llm, tools)
        say(f"  alice asks: {AGENT_QUESTION}")
        printer = EventPrinter(indent="  ")
        request = AgentRequest(
            question=AGENT_QUESTION,
            user="alice",
            group=["fun", "math"],
            # A real model's answer is worth watching as it comes; the script's is short.
            streaming=llm_url is not None,
        )

        async def show(event: AgentEvent) -> None:
            printer.show(event)

        await loop.run(request, emit=show)
    finally:
        await llm.aclose()


@app.command("demo")
def demo(
    llm: Annotated[
        str | None,
        typer.Option(
            "--llm",
            metavar="URL",
            help="A model for the agent section (e.g. openai://gpt-4.1-mini); default "
            "TOOLBUS_LLM, else a scripted model.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Run a short tour on the in-memory bus: services, tools, groups, states, the agent loop."""
    run(_demo, llm or os.environ.get(LLM_VARIABLE) or None)
