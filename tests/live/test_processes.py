"""Separate processes on a real broker: services come and go, agents keep up, no restarts."""

from __future__ import annotations

import os
import signal
import sys
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import anyio
import pytest
from anyio.abc import Process
from anyio.streams.text import TextReceiveStream

from toolbus.application.calls.client import ToolServiceClient
from toolbus.application.live.registry import LiveRegistry
from toolbus.plugins import connect

pytestmark = [pytest.mark.anyio, pytest.mark.broker, pytest.mark.slow]

SCRIPT = Path(__file__).with_name("announcing_process.py")
STARTUP = 60.0  # a fresh interpreter on a busy machine


@asynccontextmanager
async def started(
    argv: list[str], ready: str, *, cwd: Path | None = None, path: Path | None = None
) -> AsyncIterator[Process]:
    """Start a process; yield once a line of its stderr holds ``ready``; kill it if still up.

    ``path`` is put in front of the process's PYTHONPATH (for modules a test writes).
    """
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if path is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(path), env.get("PYTHONPATH")]))
    process = await anyio.open_process(argv, env=env, cwd=cwd)
    try:
        assert process.stderr is not None
        output = ""
        with anyio.fail_after(STARTUP):
            async for text in TextReceiveStream(process.stderr):
                output += text
                if ready in output:
                    break
            else:
                raise AssertionError(f"{argv[1:3]} exited early:\n{output}")
        yield process
    finally:
        with anyio.CancelScope(shield=True):
            if process.returncode is None:
                process.kill()
            await process.wait()
            await process.aclose()


def announcing_process(
    broker: str, service: str, *, interval: float, ttl: float
) -> AbstractAsyncContextManager[Process]:
    """The announcing echo service of ``announcing_process.py``, once it has announced."""
    argv = [sys.executable, str(SCRIPT), "--broker", broker, "--service", service]
    argv += ["--interval", str(interval), "--ttl", str(ttl)]
    return started(argv, f"announced {service}")


async def test_services_in_other_processes_come_and_go_without_restarting_the_agent(
    live_nats: str,
) -> None:
    service = f"echo-{uuid.uuid4().hex[:8]}"
    present = lambda registry: service in registry.tools  # noqa: E731
    absent = lambda registry: service not in registry.tools  # noqa: E731
    bus = await connect(live_nats)
    try:
        async with (
            ToolServiceClient(bus, default_timeout=10) as client,
            LiveRegistry(bus, follow_config=False) as live,
        ):
            tools = live.tools(client)  # no configuration at all

            async with announcing_process(live_nats, service, interval=0.5, ttl=2.0) as first:
                await live.wait_until(present, timeout=30)
                answer = await tools.call(service, {"text": "hello"})
                assert answer == f"hello (pid {first.pid})"

                first.send_signal(signal.SIGKILL)  # a crash: nothing is withdrawn
                await first.wait()
                died = time.monotonic()
                await live.wait_until(absent, timeout=30)
                # It lived on until its TTL ran out: at least TTL - interval after its
                # last announcement, which came before the crash.
                assert time.monotonic() - died >= 1.0

            # Restarted (with a TTL far longer than this test): it is back.
            async with announcing_process(live_nats, service, interval=0.5, ttl=600) as second:
                await live.wait_until(present, timeout=30)
                assert await tools.call(service, {"text": "again"}) == f"again (pid {second.pid})"

                second.terminate()  # a graceful stop withdraws at once
                await live.wait_until(absent, timeout=30)
                assert await second.wait() == 0
    finally:
        await bus.close()
