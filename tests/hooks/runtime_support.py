"""Real tool services and configuration for the hook runtime tests.

A small memory service (what hooks are for), a preferences service, one that
fails, one that hangs until released, and a tool only admins are offered.
Each test gets its own :class:`Services`, so call counts never leak.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anyio

from toolbus.application.agent.audit import ListAuditSink
from toolbus.application.agent.code_hooks import CompiledHooks
from toolbus.application.agent.session import AgentSession
from toolbus.application.calls.metrics import ToolbusMetrics
from toolbus.application.calls.service import FunctionToolService, tool_service
from toolbus.domain.config.loading import load_registry
from toolbus.domain.config.registry import Registry
from toolbus.domain.errors import ToolServiceError
from toolbus.domain.hooks.configured import HookConfig
from toolbus.testing.kit import ToolTestKit

NOW = 1_700_000_000.0
#: An argument value that must never reach a log line.
SECRET = "s3cret-argument-value"

SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
USER = {"role": "user", "content": "Plan my weekend."}


class FakeClock:
    """Unix time that moves only when told to."""

    def __init__(self, now: float = NOW) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class Services:
    """The services of one test, and what they saw."""

    def __init__(self) -> None:
        self.memories: dict[str, str] = {"alice": "Likes hiking. Lives in Oslo."}
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.release = anyio.Event()  # lets the hanging service go at the end of a test
        self.prefs_called = anyio.Event()
        #: Make the memory service answer only once the preferences service was called.
        self.memory_waits_for_prefs = False

        @tool_service("memory-service")
        async def memory(user: str, config: dict[str, Any], arguments: dict[str, Any]) -> str:
            self.calls.append(("memory", arguments))
            if self.memory_waits_for_prefs:
                await self.prefs_called.wait()
            return self.memories.get(str(arguments.get("user_id")), "No memories.")

        @tool_service("prefs-service")
        async def prefs(user: str, config: dict[str, Any], arguments: dict[str, Any]) -> str:
            self.calls.append(("prefs", arguments))
            self.prefs_called.set()
            return f"units: metric (for {user})"

        @tool_service("broken-service")
        async def broken(user: str, config: dict[str, Any], arguments: dict[str, Any]) -> str:
            self.calls.append(("broken", arguments))
            raise ToolServiceError(f"cannot handle {arguments}")

        @tool_service("hanging-service")
        async def hanging(user: str, config: dict[str, Any], arguments: dict[str, Any]) -> str:
            self.calls.append(("hanging", arguments))
            await self.release.wait()
            return "too late"

        self.all: tuple[FunctionToolService, ...] = (memory, prefs, broken, hanging)

    def count(self, service: str) -> int:
        return sum(1 for name, _ in self.calls if name == service)


def _tool(name: str, service: str, **extra: Any) -> dict[str, Any]:
    return {
        "type": "tool-service",
        "name": name,
        "description": f"The {name} tool",
        "service": service,
        "arguments": [],
        # The services are untyped functions: they read whatever arguments they are sent.
        "additional-arguments": True,
        **extra,
    }


def snapshot(services: Services, hooks: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    found: dict[str, Any] = {
        "tool-service": {service.id: service.descriptor() for service in services.all},
        "tool": {
            "memory": _tool("memory_server_get_memories", "memory-service", state="remembered"),
            "prefs": _tool("user_prefs", "prefs-service"),
            "broken": _tool("broken_tool", "broken-service"),
            "hanging": _tool("hanging_tool", "hanging-service"),
            "admin-only": _tool("admin_notes", "memory-service", group=["admin"]),
            "later": _tool("later_notes", "memory-service", **{"applicable-states": ["later"]}),
        },
    }
    if hooks is not None:
        found["hooks"] = hooks
    return found


def registry(services: Services, hooks: list[dict[str, Any]] | None = None) -> Registry:
    return load_registry(snapshot(services, hooks))


def hook(tool_name: str, **fields: Any) -> dict[str, Any]:
    """A hook as a manifest writes it."""
    return {"kind": "tool_call", "event": "on_request_start", "tool_name": tool_name, **fields}


MEMORY_HOOK = hook(
    "get_memories",
    name="Memories",
    toolset_name="memory_server",
    arguments={"user_id": "alice"},
)


def open_session(
    kit: ToolTestKit,
    registry: Registry,
    *,
    clock: FakeClock | None = None,
    audit: ListAuditSink | None = None,
    hooks: Sequence[HookConfig] | None = None,
    code_hooks: CompiledHooks | None = None,
    **options: Any,
) -> AgentSession:
    """A session as a gateway opens one, recording into private sinks."""
    return AgentSession(
        kit.tools(registry),
        user=options.pop("user", "alice"),
        audit=audit or ListAuditSink(),
        metrics=ToolbusMetrics.disabled(),
        clock=clock or FakeClock(),
        hooks=hooks,
        code_hooks=code_hooks,
        **options,
    )
