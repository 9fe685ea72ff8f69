"""The MCP client the official conformance suite's client scenarios run: an imported toolset.

``python -m tests.mcp.conformance_client URL`` imports the MCP server at URL
as ``toolbus serve mcp --toolset conformance --url URL`` does (the bridge's
:class:`~toolbus_mcp.importing.toolsets.McpToolset`, announcing its tools on a
bus), then plays the agent a scenario needs: it calls the imported tools over
the bus, as a model's tool calls would, and exits. The suite names the
scenario in ``MCP_CONFORMANCE_SCENARIO`` (and the calls some scenarios want
made in ``MCP_CONFORMANCE_CONTEXT``) and checks what reached its server.

The agent answers what the imported tools ask (through the bridge, which asks
its own caller): it accepts every form as it is (leaving the defaults to be
filled in), and says where it works.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import anyio

from toolbus import ElicitationAnswer, Root, RootsAnswer, SamplingAnswer
from toolbus.application.calls.client import ToolServiceClient
from toolbus.application.calls.relaying import relaying
from toolbus.application.live.registry import LiveRegistry
from toolbus.domain.calls.input_requests import InputAnswer, InputAsk
from toolbus.domain.config.schemas import json_schema
from toolbus.domain.errors import ToolCallError
from toolbus.plugins import connect
from toolbus_mcp.importing.addresses import McpServerAddress
from toolbus_mcp.importing.toolsets import McpToolset

TOOLSET = "conformance"


class Agreeable:
    """The agent's answers to what a tool asks: yes to every form, as it stands."""

    kinds = frozenset({"elicitation", "sampling", "roots"})

    async def answer(self, asked: InputAsk) -> dict[str, InputAnswer]:
        answers: dict[str, InputAnswer] = {}
        for key, request in asked.requests.items():
            if request.kind == "elicitation":
                answers[key] = ElicitationAnswer("accept", {})
            elif request.kind == "sampling":
                answers[key] = SamplingAnswer("yes", "conformance-model")
            else:
                answers[key] = RootsAnswer((Root("file:///conformance", "conformance"),))
        return answers


def _calls(scenario: str, tools: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The tool calls (bus names, arguments) the scenario expects a client to make."""
    prefixed = {name.removeprefix(f"{TOOLSET}_"): name for name in tools}
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    if context.get("toolCalls"):  # the calls the scenario names, with their arguments
        return [
            (prefixed[call["name"]], call.get("arguments") or {})
            for call in context["toolCalls"]
            if call["name"] in prefixed
        ]
    if scenario in ("initialize", "tools_call") and prefixed:
        first = next(iter(prefixed.values()))
        return [(first, {"a": 2, "b": 3})]
    if scenario == "http-invalid-tool-headers":  # the valid tool beside malformed ones
        return [(prefixed["valid_tool"], {"region": "us-west1"})]
    if scenario in ("sep-2322-client-request-state", "elicitation-sep1034-client-defaults"):
        return [(name, {}) for name in prefixed.values()]  # every tool, each on its own
    if scenario == "json-schema-2020-12-preservation":
        focal = tools[prefixed["json_schema_2020_12_tool"]]
        return [(prefixed["json_schema_echo"], {"schema": json_schema(focal)})]
    return []


async def main(url: str, scenario: str) -> None:
    address = McpServerAddress.parse(url=url)
    toolset = McpToolset(TOOLSET, address, call_timeout=20, connect_timeout=20)
    bus = await connect(f"memory://conformance-{os.getpid()}")
    try:
        async with anyio.create_task_group() as tasks:
            await tasks.start(lambda task_status: toolset.serve(bus, task_status=task_status))
            async with (
                ToolServiceClient(bus, default_timeout=30) as client,
                LiveRegistry(bus, follow_config=False) as live,
            ):
                with anyio.fail_after(30):
                    await toolset.wait_connected()
                imported = set(toolset.tools)
                await live.wait_until(lambda registry: imported <= set(registry.tools), timeout=30)
                tools = live.tools(client)
                for name, arguments in _calls(scenario, dict(live.registry.tools)):
                    try:
                        with relaying(Agreeable()):
                            answer = await tools.call(name, arguments, user="conformance")
                    except ToolCallError as exc:
                        answer = f"error: {exc}"
                    print(json.dumps({"tool": name, "answer": answer}), flush=True)
            tasks.cancel_scope.cancel()
    finally:
        await bus.close()


if __name__ == "__main__":
    anyio.run(main, sys.argv[-1], os.environ.get("MCP_CONFORMANCE_SCENARIO", ""))
