"""``--live``: tools that services announce appear in the API without a restart."""

from __future__ import annotations

import anyio
import pytest

from tests.gateway.support import authenticator, serving
from toolbus import Announcer, running
from toolbus.plugins import connect
from toolbus.testing.conformance import echo_service
from toolbus_gateway import Gateway

pytestmark = pytest.mark.anyio


async def test_announced_tools_are_served_as_they_come(broker_url: str) -> None:
    bus = await connect(broker_url)
    service = echo_service()
    try:
        # No permissions anywhere: served only because access control is turned off.
        gateway = Gateway(
            broker_url,
            authenticator=authenticator(),
            live=True,
            config_fetch_timeout=0.2,
            access_control=False,
        )
        async with serving(gateway) as served, served.client("alice") as http:
            assert (await http.get("/v1/tools")).json()["tools"] == []
            assert gateway.live_registry is not None
            async with running(bus, service):
                await Announcer(bus, service).announce()
                with anyio.fail_after(10):
                    await gateway.live_registry.wait_until(lambda r: bool(r.tools))
                listed = (await http.get("/v1/tools")).json()["tools"]
                name = listed[0]["function"]["name"]
                called = await http.post(
                    f"/v1/tools/{name}/call", json={"arguments": {"text": "hi"}}
                )
                assert called.json()["observation"] == "alice:hi"
                services = (await http.get("/v1/services")).json()
                assert name in services["announced_tools"]
            ready = (await http.get("/readyz")).json()
            assert ready["checks"]["config"].startswith("loaded (live)")
    finally:
        await bus.close()
