"""What the tests of limits, budgets and the cache share: a shop whose calls they count, its
configuration, and a front door over it built from a ``toolbus.toml`` table.

The shop is a real tool service on the in-memory bus; every call that reaches it
is counted by user and tool, so that a test tells a call made from one a limit
refused or the cache answered. Its answers name the user they were made for.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

from prometheus_client import CollectorRegistry

from toolbus.application.agent.audit import ListAuditSink
from toolbus.application.calls.metrics import ToolbusMetrics
from toolbus.application.calls.service import ToolResult, tool_service
from toolbus.application.doors.door import FrontDoor
from toolbus.domain.config.loading import load_registry
from toolbus.ports import StateStore
from toolbus.runtime import opened_door
from toolbus.testing.kit import ToolTestKit

SERVICE = "limits-shop"


class Shop:
    """The tools' one service; :attr:`calls` counts what reached it, by (user, tool)."""

    def __init__(self) -> None:
        self.calls: Counter[tuple[str, str]] = Counter()
        #: What a ``quote`` call says it cost (its ``cost`` property).
        self.quote_cost = 0.25
        #: Calls of ``flaky`` fail while this is set.
        self.failing = False

        @tool_service(SERVICE, config_params=[{"name": "action", "required": True}])
        async def shop(user: str, config: dict[str, Any], arguments: dict[str, Any]) -> Any:
            action = str(config["action"])
            self.calls[(user, action)] += 1
            count = self.calls[(user, action)]
            if action == "quote":
                return ToolResult(f"quote {count} for {user}", cost=self.quote_cost)
            if action == "flaky" and self.failing:
                raise RuntimeError("the catalogue is away")
            return f"{action} {count} for {user}: {arguments.get('item', '')}"

        self.service = shop

    def reached(self, user: str | None = None, tool: str | None = None) -> int:
        return sum(
            n
            for (who, what), n in self.calls.items()
            if user in (None, who) and tool in (None, what)
        )


def _tool(name: str, **extra: Any) -> dict[str, Any]:
    return {
        "type": "tool-service",
        "name": name,
        "description": f"the shop's {name}",
        "service": SERVICE,
        "action": name,
        "arguments": [
            {"name": "item", "type": "string", "description": "an item", "required": False}
        ],
        **extra,
    }


READ_ONLY = {"annotations": {"readOnlyHint": True}}


def snapshot(shop: Shop, **tools: dict[str, Any]) -> dict[str, Any]:
    """The shop's tools: ``search``, ``buy``, ``quote`` (reports its cost), ``catalog`` and
    ``report`` (read-only, cached; ``report`` only for the ``admin`` group), ``shared``
    (cached per group), ``flaky`` (cached, fails while the shop says so)."""
    return {
        "tool-service": {SERVICE: shop.service.descriptor()},
        "tool": {
            "search": _tool("search"),
            "buy": _tool("buy"),
            "quote": _tool("quote"),
            "catalog": _tool("catalog", cache="5m", **READ_ONLY),
            "report": _tool("report", cache="5m", group=["admin"], **READ_ONLY),
            "shared": _tool(
                "shared", cache={"ttl": "5m", "scope": "group"}, group=["a", "b"], **READ_ONLY
            ),
            "flaky": _tool("flaky", cache="5m", **READ_ONLY),
            **tools,
        },
    }


@asynccontextmanager
async def shop_door(
    settings: Mapping[str, Any],
    *,
    shop: Shop | None = None,
    store: StateStore | None = None,
    audit: ListAuditSink | None = None,
    metrics: ToolbusMetrics | None = None,
) -> AsyncIterator[tuple[FrontDoor, Shop]]:
    """A front door over the shop, as ``opened_door`` makes every door's, from ``settings``
    (a parsed ``toolbus.toml``); its store is ``store`` (else one in memory)."""
    shop = shop or Shop()
    async with AsyncExitStack() as stack:
        kit = await ToolTestKit.open(stack)
        await kit.serve(shop.service)
        door = await stack.enter_async_context(
            opened_door(
                kit.tools(load_registry(snapshot(shop))),
                local=None,
                settings=dict(settings),
                store=store,
                audit=audit if audit is not None else ListAuditSink(),
                metrics=metrics if metrics is not None else ToolbusMetrics.disabled(),
            )
        )
        yield door, shop


def private_metrics() -> tuple[ToolbusMetrics, CollectorRegistry]:
    registry = CollectorRegistry()
    return ToolbusMetrics(registry), registry
