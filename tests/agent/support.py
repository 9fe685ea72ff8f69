"""What the agent tests share: the workflow's tools on a private bus, a model, collecting events.

The tools are the tool-group spec's five (``tests.session.support``), served
for real on the in-memory bus; the model is the scripted model server, reached
through the real ``openai`` or ``anthropic`` SDK.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tests.session.support import WORKFLOW_GROUPS, workflow_snapshot
from tests.support.model_server import ModelServer
from toolbus.application.agent.audit import AuditRecord, ListAuditSink
from toolbus.application.agent.llm import LLM
from toolbus.application.agent.loop import AgentLimits, AgentLoop, AgentResult
from toolbus.application.calls.metrics import ToolbusMetrics
from toolbus.application.calls.service import FunctionToolService
from toolbus.domain.agent.wire import AgentEvent, AgentRequest
from toolbus.domain.config.loading import load_registry
from toolbus.testing.kit import ToolTestKit

#: The providers every model-facing case runs against, each through its own SDK.
PROVIDERS = ("openai", "anthropic")


def llm_url(server: ModelServer, provider: str, **options: Any) -> str:
    options.setdefault("max_retries", 2)
    if provider == "openai":
        return server.openai_url(**options)
    return server.anthropic_url(**options)


@dataclass
class Run:
    """One request's events and result."""

    result: AgentResult
    events: list[AgentEvent] = field(default_factory=list)

    def kinds(self) -> list[str]:
        """The event kinds, with streamed chunks of one message counted once."""
        kinds: list[str] = []
        for index, event in enumerate(self.events):
            previous = self.events[index - 1] if index else None
            if previous is not None and not previous.end_of_message:
                continue  # a continuation of the message before
            kinds.append(event.chunk_type)
        return kinds

    def of(self, kind: str) -> list[AgentEvent]:
        return [event for event in self.events if event.chunk_type == kind]


class AgentHarness:
    """A loop over the kit's bus and the model server, with private audit and metrics."""

    def __init__(
        self,
        kit: ToolTestKit,
        llm: LLM,
        snapshot: Mapping[str, Any] | None = None,
        **loop_options: Any,
    ) -> None:
        self.kit = kit
        self.llm = llm
        self.audit = ListAuditSink()
        self.registry = load_registry(dict(snapshot or workflow_snapshot()))
        loop_options.setdefault("limits", AgentLimits(max_iterations=8, time_limit=30))
        loop_options.setdefault("metrics", ToolbusMetrics.disabled())
        self.loop = AgentLoop(llm, kit.tools(self.registry), audit=self.audit, **loop_options)

    async def ask(self, question: str = "", **request: Any) -> Run:
        request.setdefault("user", "alice")
        request.setdefault("group", WORKFLOW_GROUPS)
        events: list[AgentEvent] = []

        async def emit(event: AgentEvent) -> None:
            events.append(event)

        result = await self.loop.run(AgentRequest(question=question, **request), emit=emit)
        return Run(result, events)

    def record(self, run: Run) -> AuditRecord:
        return self.audit.by_request_id(run.result.request_id)


def call(name: str, **arguments: Any) -> dict[str, Any]:
    """A scripted tool call."""
    return {"name": name, "arguments": arguments}


def extra_tool(name: str, service: FunctionToolService, **descriptor: Any) -> dict[str, Any]:
    return {
        "type": "tool-service",
        "name": name,
        "description": name,
        "service": service.id,
        "arguments": [],
        "group": ["read-only"],
        **descriptor,
    }


def snapshot_with(*services: FunctionToolService, **tools: dict[str, Any]) -> dict[str, Any]:
    snapshot = workflow_snapshot(extra_tools=tools)
    for service in services:
        snapshot["tool-service"][service.id] = service.descriptor()
    return snapshot
