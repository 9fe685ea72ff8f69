"""Served tool services are NATS micro services: ``nats micro ls|info|stats`` see them.

The ``nats`` CLI itself cannot be installed here (no registry reachable from
this machine ships the Go binary), so the services are asked the way it asks:
through the documented ``$SRV`` protocol with nats-py (always), and through the
official JavaScript client's services client, which the CLI's Go library
mirrors (when Node and ``tests/node``'s packages are installed).
"""

from __future__ import annotations

import contextlib
import json
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import nats
import nats.errors
import pytest

from tests.live.test_processes import started
from tests.nats.micro_clients import ask, ask_with_node, needs_node_client
from toolbus import ToolCallError, ToolServiceClient, running, tool_service
from toolbus.application.calls.advertising import advertised, toolbus_version
from toolbus.application.calls.service import FunctionToolService
from toolbus.plugins import connect
from toolbus.ports import Bus
from toolbus_joke import joke_service
from toolbus_nats.micro import micro_name

pytestmark = [pytest.mark.anyio, pytest.mark.broker]


def shouting_service(service_id: str, queue: str = "non-persistent") -> FunctionToolService:
    @tool_service(
        service_id,
        request_queue=f"{queue}://t/request/{service_id}",
        response_queue=f"non-persistent://t/response/{service_id}",
    )
    async def shout(text: str) -> str:
        """Shouts what it is told."""
        if text == "fail":
            raise ToolCallError("told to fail")
        return text.upper()

    return shout


@pytest.fixture
async def bus(nats_url: str) -> AsyncIterator[Bus]:
    bus = await connect(nats_url)
    try:
        yield bus
    finally:
        await bus.close()


async def test_each_replica_is_an_instance_with_its_own_real_counts(
    nats_url: str, bus: Bus
) -> None:
    service = shouting_service(f"shout-{uuid.uuid4().hex[:8]}")
    other_bus = await connect(nats_url)
    try:
        async with (
            running(bus, service, concurrency=1) as first,
            running(other_bus, service, concurrency=1) as second,
            advertised(bus, first, {service.id: ["shout"]}),
            advertised(other_bus, second, {service.id: ["shout"]}),
            ToolServiceClient(bus, default_timeout=10) as client,
        ):
            for text in ["a", "b", "c", "fail", "d", "fail"]:
                with contextlib.suppress(ToolCallError):
                    await client.invoke(
                        request_queue=service.request_queue,
                        response_queue=service.response_queue,
                        arguments={"text": text},
                    )
            stats = await ask(nats_url, "STATS", service.id, instances=2)
            info = await ask(nats_url, "INFO", service.id, instances=2)
    finally:
        await other_bus.close()

    assert len({answer.id for answer in stats}) == 2  # two instances of one service
    endpoints = [answer.endpoints[0] for answer in stats]
    assert sum(e.num_requests for e in endpoints) == 6
    assert sum(e.num_errors for e in endpoints) == 2
    assert all(e.processing_time > 0 for e in endpoints if e.num_requests)
    for e in endpoints:
        assert e.average_processing_time == (
            e.processing_time // e.num_requests if e.num_requests else 0
        )
    failed = [e for e in endpoints if e.num_errors]
    assert {e.last_error for e in failed} == {"tool-service-error"}
    [described] = {json.dumps(a.endpoints[0].to_dict(), sort_keys=True) for a in info}
    assert json.loads(described) == {
        "name": service.id,
        "subject": f"t.request.{service.id}",
        "queue_group": service.id,
        "metadata": {
            "toolbus.request_queue": service.request_queue,
            "toolbus.persistent": "false",
        },
    }
    assert info[0].name == service.id
    assert info[0].version == toolbus_version()
    assert info[0].description == "Shouts what it is told."
    assert info[0].metadata == {
        "toolbus.service": service.id,
        "toolbus.request_queue": service.request_queue,
        "toolbus.response_queue": service.response_queue,
        "toolbus.tools": '["shout"]',
    }


async def test_a_withdrawn_service_no_longer_answers_discovery(nats_url: str, bus: Bus) -> None:
    service = shouting_service(f"shout-{uuid.uuid4().hex[:8]}", queue="persistent")
    async with running(bus, service) as hosts:
        async with advertised(bus, hosts) as [advertisement]:
            [ping] = await ask(nats_url, "PING", service.id, instances=1)
            [info] = await ask(nats_url, "INFO", service.id, instances=1)
        assert advertisement.where == f"NATS micro service {service.id} (id {ping.id})"
        assert info.endpoints[0].metadata["toolbus.persistent"] == "true"
        assert info.metadata["toolbus.tools"] == "[]"
        nc = await nats.connect(nats_url)
        try:
            with pytest.raises(nats.errors.NoRespondersError):
                await nc.request(f"$SRV.PING.{service.id}", b"", timeout=10)
        finally:
            await nc.close()


def test_a_service_id_becomes_a_name_nats_micro_accepts() -> None:
    assert micro_name("joke-service") == "joke-service"
    assert micro_name("tg.tools/weather v2") == "tg_tools_weather_v2"
    assert micro_name("...") == "toolbus"


async def test_a_bus_without_discovery_lists_nothing() -> None:
    memory = await connect("memory://micro-none")
    try:
        async with (
            running(memory, shouting_service("quiet")) as hosts,
            advertised(memory, hosts) as made,
        ):
            assert made == []
    finally:
        await memory.close()


TOOLBUS = str(Path(sys.executable).with_name("toolbus"))


@pytest.mark.slow
@needs_node_client
async def test_toolbus_serve_is_seen_by_the_official_services_client(nats_url: str) -> None:
    argv = [TOOLBUS, "serve", "joke-service", "--broker", nats_url, "--announce-interval", "600"]
    bus = await connect(nats_url)
    try:
        async with (
            started(argv, "discoverable as NATS micro service joke-service"),
            ToolServiceClient(bus, default_timeout=30) as client,
        ):
            await client.invoke(
                request_queue=joke_service.request_queue,
                response_queue=joke_service.response_queue,
                arguments={"topic": "cats"},
            )
            pings = await ask_with_node(nats_url, "ping")
            [info] = await ask_with_node(nats_url, "info", "joke-service")
            [stats] = await ask_with_node(nats_url, "stats", "joke-service")
    finally:
        await bus.close()

    assert "joke-service" in {ping["name"] for ping in pings}
    assert info["version"] == toolbus_version()
    assert json.loads(info["metadata"]["toolbus.tools"]) == ["tell-joke"]
    assert info["endpoints"][0]["subject"] == "tg.request.joke"
    [endpoint] = stats["endpoints"]
    assert endpoint["num_requests"] == 1
    assert endpoint["num_errors"] == 0
    assert endpoint["processing_time"] > 0
