"""``toolbus serve --metrics-port``: /healthz, /readyz and /metrics, against real NATS.

Readiness follows the broker connection and the subscriptions: ready once every
service (the config service included) is subscribed, not ready while the server
is down.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.nats.processes import ServeProcess, serve
from tests.nats.server import NatsServer

pytestmark = [pytest.mark.anyio, pytest.mark.broker]


async def get(url: str) -> tuple[int, str]:
    def fetch() -> tuple[int, str]:
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                return int(response.status), response.read().decode()
        except urllib.error.HTTPError as error:
            return int(error.code), error.read().decode()

    return await anyio.to_thread.run_sync(fetch)


def base_url(served: ServeProcess) -> str:
    for line in served.lines:
        found = re.search(r"metrics on (http://[\d.]+:\d+)/metrics", line)
        if found:
            return found.group(1)
    raise AssertionError("\n".join(served.lines))


async def readiness(base: str) -> tuple[int, dict[str, Any]]:
    status, body = await get(f"{base}/readyz")
    return status, json.loads(body)


async def test_health_and_readiness_follow_the_broker_and_the_services(
    own_nats_server: NatsServer, tmp_path: Path
) -> None:
    server = own_nats_server
    options = ["--metrics-port", "0", "--store", str(tmp_path / "store.json")]
    with server.running() as process:
        async with serve(
            ["calculator", "config"], server.url, workdir=tmp_path, options=options
        ) as served:
            base = base_url(served)

            assert await get(f"{base}/healthz") == (200, '{"status": "ok"}')
            assert await readiness(base) == (
                200,
                {
                    "ready": True,
                    "checks": {"broker": "ok", "service calculator": "ok", "service config": "ok"},
                },
            )
            status, text = await get(f"{base}/metrics")
            assert status == 200 and "toolbus_service_calls_total" in text
            status, text = await get(f"{base}/nothing-here")
            assert status == 404 and "/healthz" in text

            process.kill()
            process.wait()
            with anyio.fail_after(30):
                await served.wait_for("lost the connection")
            status, body = await readiness(base)
            assert status == 503
            assert body["checks"]["broker"] == "unreachable"
            assert await get(f"{base}/healthz") == (200, '{"status": "ok"}')
