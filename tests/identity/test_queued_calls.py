"""Signed calls that wait in a persistent queue: served after an outage, or dead-lettered.

The service comes back "later" through its verifier's clock: the broker's own
timestamp on each call says when it was really taken. A call is checked as of
then; one older than the maximum queue age is moved to the queue's dead
letters, counted, logged, and listed by ``toolbus dead-letters``.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from contextlib import AsyncExitStack
from pathlib import Path

import anyio
import pytest
from prometheus_client import CollectorRegistry

import toolbus
from tests.nats.server import NatsServer
from toolbus import ToolServiceClient, running
from toolbus.application.calls.dead_letters import DEAD_LETTERS_GROUP, PROP_FROM, PROP_REASON
from toolbus.application.calls.metrics import ToolbusMetrics
from toolbus.application.identity import CallVerifier
from toolbus.domain.calls.queues import dead_letter_queue
from toolbus.domain.errors import DeadlineExceeded
from toolbus.ports import Bus
from toolbus.testing.conformance import next_delivery

from .support import WAIT, KeyPair, WhoAmI, key_pair, whoami

pytestmark = pytest.mark.anyio

TOOLBUS = str(Path(sys.executable).parent / "toolbus")
#: How long the service was away, by its clock.
OUTAGE = 120.0


def later(seconds: float = OUTAGE) -> float:
    return time.time() + seconds


async def call_queued(
    bus: Bus, tool: WhoAmI, gateway: KeyPair, verifier: CallVerifier, **host: object
) -> str:
    """Call ``tool`` while it is down; bring it back (``OUTAGE`` s later, by its clock)."""
    # Served once, so that the broker keeps the service's group (and so its calls).
    async with running(bus, tool.service):
        pass
    outcome: list[str | BaseException] = []
    done = anyio.Event()
    async with AsyncExitStack() as stack:
        client = await stack.enter_async_context(
            ToolServiceClient(bus, signer=gateway.signer(lifetime=60.0))
        )
        # A fan-out reader of the request queue sees the call the moment the broker has it.
        watch = await bus.subscribe(tool.service.request_queue)
        stack.push_async_callback(watch.close)

        async def ask() -> None:
            try:
                outcome.append(
                    await client.call(
                        service=tool.service.id,
                        request_queue=tool.service.request_queue,
                        response_queue=tool.service.response_queue,
                        user="alice",
                        timeout=WAIT,
                    )
                )
            except Exception as exc:
                outcome.append(exc)
            done.set()

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(ask)
            await next_delivery(watch, WAIT)
            async with running(bus, tool.service, verifier=verifier, **host):
                await done.wait()
    (result,) = outcome
    if isinstance(result, BaseException):
        raise result
    return result


async def test_a_call_that_waited_longer_than_its_token_lives_is_served(bus: Bus) -> None:
    gateway = key_pair()
    tool = whoami(persistent=True)
    verifier = CallVerifier([gateway.public], clock=later)

    answer = await call_queued(bus, tool, gateway, verifier)

    assert answer == "alice  verified=True"
    assert len(tool.served) == 1


async def test_a_call_older_than_the_maximum_queue_age_is_dead_lettered_counted_and_logged(
    bus: Bus, caplog: pytest.LogCaptureFixture
) -> None:
    gateway = key_pair()
    tool = whoami(persistent=True)
    registry = CollectorRegistry()
    verifier = CallVerifier([gateway.public], clock=later, max_queue_age=OUTAGE / 2)
    source = tool.service.request_queue

    with (
        caplog.at_level(logging.WARNING, logger="toolbus"),
        pytest.raises(DeadlineExceeded, match=r"waited 1[12]\d s in the queue.*maximum queue age"),
    ):
        await call_queued(bus, tool, gateway, verifier, metrics=ToolbusMetrics(registry))

    assert tool.served == []
    moved = registry.get_sample_value(
        "toolbus_service_dead_letters_total",
        {"service": tool.service.id, "reason": "queued-too-long"},
    )
    assert moved == 1
    assert f"toolbus dead-letters {source}" in caplog.text
    dead = await bus.subscribe(dead_letter_queue(source), group=DEAD_LETTERS_GROUP)
    try:
        letter = await next_delivery(dead, WAIT)
        await letter.ack()
    finally:
        await dead.close()
    assert letter.properties[PROP_FROM] == source
    assert "maximum queue age of 60 s" in letter.properties[PROP_REASON]
    assert letter.properties["user"] == "alice"


@pytest.mark.broker
@pytest.mark.slow
async def test_toolbus_dead_letters_lists_them_and_drops_them_on_request(
    identity_nats: NatsServer, tmp_path: Path
) -> None:
    bus = await toolbus.connect(identity_nats.url)
    gateway = key_pair()
    tool = whoami(persistent=True)
    verifier = CallVerifier([gateway.public], clock=later, max_queue_age=OUTAGE / 2)
    try:
        with pytest.raises(DeadlineExceeded):
            await call_queued(bus, tool, gateway, verifier)
    finally:
        await bus.close()

    def dead_letters(*options: str) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLBUS_")}
        argv = [TOOLBUS, "dead-letters", tool.service.request_queue, "--broker", identity_nats.url]
        return subprocess.run(
            [*argv, *options], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
        )

    listed = dead_letters("--json", "--wait", "1")
    again = dead_letters("--drop", "--wait", "1")
    after = dead_letters("--wait", "1")

    assert listed.returncode == 0, listed.stderr
    (line,) = listed.stdout.splitlines()
    letter = json.loads(line)
    assert letter["user"] == "alice" and letter["queue"] == tool.service.request_queue
    assert "maximum queue age" in letter["reason"]
    assert "1 dead letter(s)" in listed.stderr and "kept" in listed.stderr
    assert again.returncode == 0 and "user alice" in again.stdout
    assert "dropped" in again.stderr
    assert after.returncode == 0 and after.stdout == ""
    assert "0 dead letter(s)" in after.stderr


def test_dead_letters_are_named_after_their_queue() -> None:
    assert (
        dead_letter_queue("non-persistent://tg/request/joke")
        == "persistent://tg/request/joke-dead-letters"
    )
    assert dead_letter_queue("request:tg:joke") == "flow:tg:joke-dead-letters"
    assert dead_letter_queue("joke") == "joke-dead-letters"
