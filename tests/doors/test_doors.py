"""Every front door held to the same promises: the conformance suite bound to each door.

Each door runs as its users run it, on a real broker (nats-server) that the
suite's tool service shares: the gateway and the MCP HTTP bridge as processes
behind uvicorn on 127.0.0.1, the MCP stdio bridge as a process per caller
spoken to by the SDK's client, the agent service asked by ``toolbus ask``
processes with the scripted model, the A2A door in front of it spoken to by
a2a-sdk's client, and Python in this process.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from tests.doors.a2a_driver import a2a_door
from tests.doors.agent_driver import agent_door
from tests.doors.gateway_driver import gateway_door
from tests.doors.mcp_driver import mcp_http_door, mcp_stdio_door
from tests.doors.python_driver import python_door
from tests.support.model_server import ModelServer
from toolbus.testing.doors import DoorConformance, DoorDriver, DoorSetup

pytestmark = pytest.mark.slow


class _OnNats(DoorConformance):
    @pytest.fixture(scope="class")
    @classmethod
    def door_broker(cls, doors_nats: str) -> str:
        return doors_nats

    @pytest.fixture(scope="class")
    @classmethod
    def door_state(cls, doors_nats: str) -> str:
        """The doors keep their state in the broker's key-value store (a bucket each)."""
        return f"{doors_nats}?bucket=doors-{uuid.uuid4().hex[:8]}"


class TestGateway(_OnNats):
    @pytest.fixture(scope="class")
    @classmethod
    async def door(cls, door_setup: DoorSetup) -> AsyncIterator[DoorDriver]:
        async with gateway_door(door_setup) as driver:
            yield driver


class TestMcpStdio(_OnNats):
    @pytest.fixture(scope="class")
    @classmethod
    async def door(cls, door_setup: DoorSetup) -> AsyncIterator[DoorDriver]:
        async with mcp_stdio_door(door_setup) as driver:
            yield driver


class TestMcpHttp(_OnNats):
    @pytest.fixture(scope="class")
    @classmethod
    async def door(cls, door_setup: DoorSetup) -> AsyncIterator[DoorDriver]:
        async with mcp_http_door(door_setup) as driver:
            yield driver


class TestAgent(_OnNats):
    @pytest.fixture(scope="class")
    @classmethod
    async def door(
        cls, door_setup: DoorSetup, model_server: ModelServer
    ) -> AsyncIterator[DoorDriver]:
        async with agent_door(door_setup, model_server) as driver:
            yield driver


class TestPython(_OnNats):
    @pytest.fixture(scope="class")
    @classmethod
    async def door(cls, door_setup: DoorSetup) -> AsyncIterator[DoorDriver]:
        async with python_door(door_setup) as driver:
            yield driver


class TestA2A(_OnNats):
    @pytest.fixture(scope="class")
    @classmethod
    async def door(
        cls, door_setup: DoorSetup, model_server: ModelServer
    ) -> AsyncIterator[DoorDriver]:
        async with a2a_door(door_setup, model_server) as driver:
            yield driver
