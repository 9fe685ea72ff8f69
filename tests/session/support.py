"""The tool-group spec's workflow as real tool services, and what session tests share.

The five tools are those of the spec's section 5.1, each backed by a small
service that answers over the bus (and reports the user it was called for, so
tests can see the user travel with the call).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from toolbus.application.agent.audit import AuditSink
from toolbus.application.agent.session import AgentSession
from toolbus.application.calls.metrics import ToolbusMetrics
from toolbus.application.calls.service import FunctionToolService, tool_service
from toolbus.domain.access.permissions import Permissions
from toolbus.domain.config.loading import load_registry
from toolbus.domain.config.registry import Registry
from toolbus.domain.errors import ToolServiceError
from toolbus.testing.kit import ToolTestKit

SECRET_COLLECTION = "collection-with-s3cret-token"
BROKEN_DATASET = "broken"


@tool_service("knowledge-service", config_params=[{"name": "collection", "required": True}])
async def knowledge_service(question: str, user: str, config: dict[str, Any]) -> str:
    return f"[{user}] Company X is connected to Acme and Initech ({config['collection']})"


@tool_service("graph-service", config_params=[{"name": "collection", "required": True}])
async def graph_service(entity: str, operation: str, user: str) -> str:
    return f"[{user}] {operation} {entity}: done"


@tool_service("completion-service")
async def completion_service(prompt: str, user: str) -> str:
    return f"[{user}] Once upon a time, {prompt}"


@tool_service("analysis-service", config_params=["server"])
async def analysis_service(dataset: str, user: str) -> str:
    if dataset == BROKEN_DATASET:
        raise ToolServiceError(f"data set {dataset!r} is corrupt")
    return f"[{user}] {dataset}: 3 clusters, 1 outlier"


@tool_service("workflow-service")
async def workflow_service(user: str, config: dict[str, Any], arguments: dict[str, Any]) -> str:
    return f"[{user}] workflow reset"


SERVICES: tuple[FunctionToolService, ...] = (
    knowledge_service,
    graph_service,
    completion_service,
    analysis_service,
    workflow_service,
)

INITIAL_STATE = "undefined"
#: Groups that reach every step of the workflow (the spec's own example request
#: ``["knowledge", "compute"]`` would not reach reset-workflow, which is only in "admin").
WORKFLOW_GROUPS = ["read-only", "knowledge", "compute", "admin"]


def workflow_snapshot(
    permissions: dict[str, Any] | None = None, extra_tools: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The spec's five tools, served by :data:`SERVICES`."""

    def tool(
        name: str,
        service: str,
        description: str,
        arguments: Sequence[str],
        groups: list[str],
        state: str | None = None,
        states: list[str] | None = None,
        **config: Any,
    ) -> dict[str, Any]:
        descriptor: dict[str, Any] = {
            "type": "tool-service",
            "name": name,
            "description": description,
            "service": service,
            "arguments": [{"name": a, "type": "string", "description": a} for a in arguments],
            "group": groups,
            **config,
        }
        if state is not None:
            descriptor["state"] = state
        if states is not None:
            descriptor["applicable-states"] = states
        return descriptor

    tools = {
        "knowledge-query": tool(
            "knowledge-query",
            "knowledge-service",
            "Query the knowledge graph for entities and relationships",
            ["question"],
            ["read-only", "knowledge", "basic"],
            state="analysis",
            states=["undefined", "research"],
            collection=SECRET_COLLECTION,
        ),
        "graph-update": tool(
            "graph-update",
            "graph-service",
            "Add or modify entities in the knowledge graph",
            ["entity", "operation"],
            ["write", "knowledge", "admin"],
            states=["analysis", "modification"],
            collection=SECRET_COLLECTION,
        ),
        "text-completion": tool(
            "text-completion",
            "completion-service",
            "Generate text using language models",
            ["prompt"],
            ["read-only", "text", "basic"],
            state="undefined",
        ),
        "complex-analysis": tool(
            "complex-analysis",
            "analysis-service",
            "Perform complex data analysis",
            ["dataset"],
            ["advanced", "compute", "expensive"],
            state="results",
            states=["analysis"],
            server="analysis-server",
        ),
        "reset-workflow": tool(
            "reset-workflow",
            "workflow-service",
            "Reset to initial state",
            [],
            ["admin"],
            state="undefined",
            states=["analysis", "results"],
        ),
    }
    tools.update(extra_tools or {})
    snapshot: dict[str, Any] = {
        "tool-service": {service.id: service.descriptor() for service in SERVICES},
        "tool": tools,
    }
    if permissions is not None:
        snapshot["permissions"] = permissions
    return snapshot


def workflow_registry(permissions: dict[str, Any] | None = None) -> Registry:
    return load_registry(workflow_snapshot(permissions))


class FakeClock:
    """A clock and timer that move only when told to, for exact timestamps and durations."""

    def __init__(self, start: float = 1_704_103_200.0) -> None:  # 2024-01-01T10:00:00Z
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def offered(session: AgentSession) -> list[str]:
    """The names in the session's OpenAI tool list, as the LLM would see them."""
    return [entry["function"]["name"] for entry in session.tools("openai")]


def open_session(
    kit: ToolTestKit,
    registry: Registry,
    *,
    audit: AuditSink,
    metrics: ToolbusMetrics | None = None,
    clock: FakeClock | None = None,
    permissions: Permissions | None = None,
    **options: Any,
) -> AgentSession:
    """A session over the kit's client, recording into private sinks (never the globals)."""
    clock = clock or FakeClock()
    return AgentSession(
        kit.tools(registry),
        audit=audit,
        metrics=metrics or ToolbusMetrics.disabled(),
        clock=clock,
        timer=clock,
        permissions=permissions,
        **options,
    )
