"""Each broker restarts under a running service and a running client: calls work again.

Nothing is restarted but the broker: the service keeps serving and the client
keeps calling on the same connections. NATS, pulsar-lite and RabbitMQ come back
with their data (same data directory); Tansu keeps everything in memory, so it
comes back empty, without topics, groups or offsets. The time from the broker
listening again to calls being answered (the first of five sent in a row that
were all answered) is printed per broker and queue kind; the only limit asserted is a generous
one that turns a hang into a failure.
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from types import EllipsisType
from typing import Any

import anyio
import pytest

from tests.kafka.broker import TANSU_OPTIONS, tansu_broker
from tests.nats.server import NatsServer
from tests.pulsar.server import pulsar_lite_server
from tests.rabbitmq.server import RabbitMQServer
from tests.support.servers import LOOPBACK, StickyPort
from toolbus import ToolServiceClient, connect, running, tool_service
from toolbus.domain.errors import ToolbusError

pytestmark = [pytest.mark.anyio, pytest.mark.broker, pytest.mark.slow]

#: How long the broker is away: longer than the Kafka group session (2 s in
#: the tests), so the broker would forget the member even if it kept its data.
OUTAGE = 3.0
#: What recovery may take at most before the test fails.
RECOVERY_LIMIT = 60.0
#: A probing call is sent this often (seconds)...
PROBE_INTERVAL = 0.1
#: ... and given this long to be answered.
PROBE_TIMEOUT = 5.0
#: Calls answered in a row that count as recovered.
CALLS_IN_A_ROW = 5
#: More lines than this of one kind while the broker is away (3 to 6 s) is a
#: flood: a line per retry. Kafka wrote about a thousand before aiokafka's lines
#: were throttled; pulsar-client, whose reconnects back off, writes about six per
#: client (all of one kind on its relayed logger).
FLOOD = 20


@dataclass
class Broker:
    """A broker a test can stop and start again at the same address (chosen at its first run)."""

    name: str
    run: Callable[[], AbstractContextManager[Any]]
    address: Callable[[], str]

    @property
    def url(self) -> str:
        return self.address()


@pytest.fixture(params=["nats", "pulsar", "kafka", "rabbitmq"])
def broker(request: pytest.FixtureRequest, tmp_path: Path) -> Broker:
    kind: str = request.param
    if kind == "rabbitmq":
        rabbitmq = RabbitMQServer(tmp_path / "rabbitmq")
        request.addfinalizer(rabbitmq.close)
        # Reconnection attempts every 0.1 s rather than every second.
        return Broker(kind, rabbitmq.running, lambda: f"{rabbitmq.url}?reconnect_interval=0.1")
    if kind == "nats":
        server = NatsServer(tmp_path)
        # Reconnect attempts every 0.1 s rather than every second.
        return Broker(kind, server.running, lambda: f"{server.url}?reconnect_wait=0.1&ack_wait=1")
    if kind == "pulsar":
        pulsar = StickyPort(lambda port: pulsar_lite_server(tmp_path, port=port))
        return Broker(kind, pulsar.running, lambda: f"pulsar://{LOOPBACK}:{pulsar.port}")
    tansu = StickyPort(lambda port: tansu_broker(tmp_path, port))
    return Broker(kind, tansu.running, lambda: f"kafka://{LOOPBACK}:{tansu.port}?{TANSU_OPTIONS}")


def echo_on(kind: str) -> Any:
    suffix = uuid.uuid4().hex[:8]

    @tool_service(
        f"echo-{kind}-{suffix}",
        request_queue=f"{kind}://test/request/echo-{suffix}",
        response_queue=f"non-persistent://test/response/echo-{suffix}",
    )
    async def echo(text: str) -> str:
        return text

    return echo


@contextlib.contextmanager
def warnings_counted() -> Iterator[Counter[tuple[str, str]]]:
    """Counts WARNING and ERROR records by logger and message template, for the block."""
    counts: Counter[tuple[str, str]] = Counter()

    class Count(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            counts[record.name, str(record.msg)[:60]] += 1

    handler = Count(logging.WARNING)
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield counts
    finally:
        root.removeHandler(handler)


async def time_to_recover(client: ToolServiceClient, service: Any, restarted: float) -> float:
    """Seconds from ``restarted`` until calls are answered again.

    A call is sent every ``PROBE_INTERVAL``; recovered is the first of
    ``CALLS_IN_A_ROW`` calls (in the order they were sent) that were all
    answered, and the time is when it was answered. A call may be lost in the
    first moments after a restart (a broker that restarts empty loses what it
    took before the topic was made again); those sent after it must all work.
    """
    #: Per call in the order sent: when it was answered, None if it failed, or
    #: ``...`` while it runs.
    outcomes: list[float | EllipsisType | None] = []
    recovered: list[float] = []

    def check() -> None:
        run = 0
        for n, outcome in enumerate(outcomes):
            if outcome is ...:
                return  # the calls before a streak must be settled too
            run = 0 if outcome is None else run + 1
            if run == CALLS_IN_A_ROW:
                first = outcomes[n - run + 1]
                assert isinstance(first, float)
                recovered.append(first)
                return

    async def probe(n: int) -> None:
        try:
            answer = await client.call(
                request_queue=service.request_queue,
                response_queue=service.response_queue,
                arguments={"text": f"probe {n}"},
                timeout=PROBE_TIMEOUT,
            )
        except ToolbusError:  # timed out, or refused while the client reconnects
            outcomes[n] = None
        else:
            assert answer == f"probe {n}"
            outcomes[n] = time.monotonic() - restarted
        check()

    async with anyio.create_task_group() as probes:
        while not recovered:
            outcomes.append(...)
            probes.start_soon(probe, len(outcomes) - 1)
            # The pace of probing is the measurement's resolution.
            await anyio.sleep(PROBE_INTERVAL)
        probes.cancel_scope.cancel()
    return recovered[0]


async def test_a_running_service_and_client_recover_when_the_broker_restarts(
    broker: Broker, capsys: pytest.CaptureFixture[str]
) -> None:
    services = {kind: echo_on(kind) for kind in ("persistent", "non-persistent")}
    recovered: dict[str, float] = {}
    with contextlib.ExitStack() as running_broker:
        running_broker.enter_context(broker.run())
        service_bus, client_bus = await connect(broker.url), await connect(broker.url)
        try:
            async with (
                running(service_bus, *services.values()),
                ToolServiceClient(client_bus) as client,
            ):
                for service in services.values():  # both answer before the restart
                    await time_to_recover(client, service, time.monotonic())
                with warnings_counted() as warnings:
                    running_broker.close()  # the broker stops
                    # The outage is the scenario, not a wait for an event.
                    await anyio.sleep(OUTAGE)
                    running_broker.enter_context(broker.run())
                    restarted = time.monotonic()
                    with anyio.fail_after(RECOVERY_LIMIT):
                        async with anyio.create_task_group() as probes:
                            for kind, service in services.items():

                                async def probe(kind: str = kind, service: Any = service) -> None:
                                    recovered[kind] = await time_to_recover(
                                        client, service, restarted
                                    )

                                probes.start_soon(probe)
        finally:
            await service_bus.close()
            await client_bus.close()

    with capsys.disabled():
        figures = ", ".join(f"{kind} queue {seconds:.2f} s" for kind, seconds in recovered.items())
        print(f"\n{broker.name}: calls answered again after the restart: {figures}")
        print(f"  most repeated warnings meanwhile: {warnings.most_common(3)}")
    # Failures that repeat while the broker is away are not logged once per retry.
    flooding = {kind: count for kind, count in warnings.items() if count > FLOOD}
    assert not flooding, flooding
