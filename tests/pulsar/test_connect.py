"""Connecting: fail fast on a dead broker (library and CLI), share the client, find the plugin."""

from __future__ import annotations

import socket
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import pytest

from tests.pulsar.processes import child_environment, toolbus_command
from tests.pulsar.server import pulsar_lite_server
from tests.support.servers import LOOPBACK, refusing_port
from toolbus.plugins import adapter_for
from toolbus.plugins import connect as connect_any
from toolbus_pulsar import BrokerUnreachable, PulsarBus, connect
from toolbus_pulsar.clients import shared_clients

pytestmark = [pytest.mark.anyio, pytest.mark.broker]


@contextmanager
def nothing_listening() -> Iterator[str]:
    """A Pulsar URL where connections are refused until the block ends."""
    with refusing_port() as port:
        yield f"pulsar://127.0.0.1:{port}"


async def test_a_broker_that_does_not_answer_fails_after_connect_timeout_naming_the_url() -> None:
    # Something accepts connections (the kernel does, into the backlog) and never
    # speaks Pulsar: only the client's timeout can tell.
    with socket.create_server((LOOPBACK, 0)) as silent:
        url = f"pulsar://{LOOPBACK}:{silent.getsockname()[1]}"
        before = shared_clients()
        with anyio.fail_after(10), pytest.raises(BrokerUnreachable) as caught:
            await connect(url, {"connect_timeout": 1})
    message = str(caught.value)
    assert url in message
    assert "connect_timeout" in message
    assert shared_clients() == before  # the client made for the attempt is gone


async def test_a_url_where_nothing_listens_fails_at_once_saying_so() -> None:
    before = shared_clients()
    with nothing_listening() as url, pytest.raises(BrokerUnreachable) as caught:
        await connect(url, {"connect_timeout": 60})
    assert url in str(caught.value) and "nothing listens" in str(caught.value)
    assert shared_clients() == before


async def test_the_plugin_serves_pulsar_urls(pulsar_url: str) -> None:
    assert "pulsar+ssl" in adapter_for("pulsar+ssl://broker:6651").schemes
    bus = await connect_any(pulsar_url)
    try:
        assert isinstance(bus, PulsarBus)
    finally:
        await bus.close()


async def test_buses_of_one_process_share_a_client(pulsar_url: str) -> None:
    before = shared_clients()
    first, second = await connect(pulsar_url), await connect(pulsar_url)
    assert shared_clients() == before + 1
    other = await connect(pulsar_url, {"operation_timeout": 3})  # other client options
    assert shared_clients() == before + 2
    for bus in (first, second, other):
        await bus.close()
    assert shared_clients() == before


@pytest.mark.parametrize(
    ("scheme", "options"),
    [("persistent", {}), ("non-persistent", {"confirm_non_persistent": True})],
    ids=["persistent", "non-persistent-confirmed"],
)
async def test_a_broker_that_dies_later_makes_confirmed_sends_fail_not_hang(
    tmp_path: Path, scheme: str, options: dict[str, object]
) -> None:
    queue = f"{scheme}://lost/broker/{uuid.uuid4().hex[:8]}"
    with pulsar_lite_server(tmp_path) as url:
        bus = await connect(url, {"operation_timeout": 1, **options})
        await bus.publish(queue, b"while it lives")
    try:
        with anyio.fail_after(10), pytest.raises(BrokerUnreachable) as caught:
            await bus.publish(queue, b"after it died")
        assert url in str(caught.value)
        assert "operation_timeout" in str(caught.value)
    finally:
        with anyio.fail_after(10):
            await bus.close()


async def test_a_broker_that_dies_later_stops_unconfirmed_sends_too(tmp_path: Path) -> None:
    # Sends to a non-persistent topic do not wait for the broker's receipt; once
    # one fails, the next publish raises, and the bound on unreceipted sends
    # keeps a publisher from running on regardless.
    queue = f"non-persistent://lost/broker/{uuid.uuid4().hex[:8]}"
    with pulsar_lite_server(tmp_path) as url:
        bus = await connect(url, {"operation_timeout": 1, "max_pending_messages": 10})
        await bus.publish(queue, b"while it lives")
    try:
        sent = 0
        with anyio.fail_after(10), pytest.raises(BrokerUnreachable) as caught:
            while True:
                await bus.publish(queue, b"after it died")
                sent += 1
        assert sent <= 10
        assert "Timeout" in str(caught.value)
    finally:
        with anyio.fail_after(10):
            await bus.close()


def test_the_cli_reports_an_unreachable_broker_and_exits(tmp_path: Path) -> None:
    with nothing_listening() as url:
        done = subprocess.run(
            [*toolbus_command(), "serve", "joke-service", "--broker", f"{url}?connect_timeout=1"],
            cwd=tmp_path,  # no toolbus.toml here
            env=child_environment(),
            capture_output=True,
            text=True,
            timeout=30,  # a hang guard: refused, it says so at once
            check=False,
        )
    assert done.returncode == 1, done.stderr
    assert f"cannot reach the Pulsar broker at {url}" in done.stderr
    assert "nothing listens" in done.stderr


async def test_a_url_listing_several_brokers_works_when_one_is_down(pulsar_url: str) -> None:
    live = pulsar_url.removeprefix("pulsar://")
    with nothing_listening() as url:
        dead = url.removeprefix("pulsar://")
        bus = await connect(f"pulsar://{dead},{live}", {"connect_timeout": 5})
    try:
        queue = f"persistent://test/several/{uuid.uuid4().hex[:8]}"
        subscription = await bus.subscribe(queue, group="g")
        await bus.publish(queue, b"reached", {"id": "1"})
        with anyio.fail_after(10):
            delivery = await anext(aiter(subscription))
        assert delivery.body == b"reached"
        await delivery.ack()
        await subscription.close()
    finally:
        await bus.close()
