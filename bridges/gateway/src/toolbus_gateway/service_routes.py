"""``/v1/services``: the running services and configured ones, as far as the caller reaches.

A caller sees a service, and the tools of it, only when one of its groups is
among the groups the caller may request; operators (allowed ``"*"``) see all.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from fastapi import Request

from toolbus.domain.config.descriptors import DEFAULT_GROUP
from toolbus.domain.config.registry import WILDCARD
from toolbus_gateway.http_auth import gateway_of
from toolbus_gateway.models import ServicesView, ServiceView
from toolbus_gateway.routing import v1_router
from toolbus_gateway.services import announced_groups
from toolbus_gateway.tool_routes import CallerDep

router = v1_router()


def _reaches(allowed: Collection[str], groups: Iterable[str]) -> bool:
    return WILDCARD in allowed or not set(groups).isdisjoint(allowed)


@router.get("/services", response_model=ServicesView, summary="Running services")
async def list_services(request: Request, caller: CallerDep) -> ServicesView:
    """Services that announce themselves (replicas, age) and the configured service ids,
    with the tools the caller's groups reach."""
    gateway = gateway_of(request)
    assert gateway.watch is not None and gateway.door is not None
    registry = gateway.registry
    permissions = gateway.door.rules(registry, places=False).permissions
    assert permissions is not None
    allowed = caller.narrowed(permissions.allowed(caller.user))
    live = []
    for service in gateway.watch.services():
        tools = [
            name
            for name in service.tools
            if _reaches(allowed, service.groups.get(name, (DEFAULT_GROUP,)))
        ]
        if tools:
            live.append(
                ServiceView(
                    service=service.service,
                    replicas=list(service.replicas),
                    age_seconds=round(service.age, 3),
                    expires_in_seconds=round(service.expires_in, 3),
                    request_queue=service.request_queue,
                    tools=tools,
                )
            )
    if gateway.live_registry is not None:
        announced = sorted(
            str(tool.get("name", key))
            for a in gateway.live_registry.announced
            for key, tool in a.tools.items()
            if _reaches(allowed, announced_groups(tool.get("group")))
        )
    else:
        announced = sorted({name for s in live for name in s.tools})
    configured = sorted(
        {
            tool.service
            for tool in registry.tools.values()
            if tool.service is not None and _reaches(allowed, tool.groups)
        }
    )
    return ServicesView(live=live, configured=configured, announced_tools=announced)
