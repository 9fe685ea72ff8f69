"""A running service and client recover when the broker restarts empty.

Tansu keeps topics in memory, so it comes back with none: the topics, the
group and every position are gone. The service (a consumer group member) and
the client (a fan-out reader) must carry on without being restarted.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from tests.kafka.broker import TANSU_OPTIONS, tansu_binary
from tests.support.servers import LOOPBACK, free_port, server_process
from toolbus import ToolServiceClient, ToolTimeout, running, tool_service
from toolbus.domain.errors import ToolbusError
from toolbus_kafka import connect

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.broker,
    pytest.mark.slow,
    # Recovers in 5-10 s on a quiet machine; under a loaded one the group has been
    # seen not to settle within the limit. Not strict until that is understood.
    pytest.mark.xfail(
        strict=False, reason="recovery from an empty restart is not yet reliable under load"
    ),
]

#: What recovery may take at most; the figure measured is printed.
RECOVERY_LIMIT = 60.0
#: How long the broker is away.
OUTAGE = 3.0


@contextlib.contextmanager
def tansu_on(port: int, workdir: Path) -> Iterator[None]:
    listener = f"tcp://{LOOPBACK}:{port}"
    argv = [str(tansu_binary()), "broker", "--listener-url", listener]
    argv += ["--advertised-listener-url", listener, "--storage-engine", "memory://tansu/"]
    with server_process(argv, port=port, workdir=workdir):
        yield


@pytest.mark.parametrize("kind", ["persistent", "non-persistent"])
async def test_calls_work_again_after_the_broker_restarts_empty(
    tmp_path: Path, kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    suffix = uuid.uuid4().hex[:8]

    @tool_service(
        f"echo-{suffix}",
        request_queue=f"{kind}://test/request/echo-{suffix}",
        response_queue=f"non-persistent://test/response/echo-{suffix}",
    )
    async def echo(text: str) -> str:
        return text

    port = free_port()
    url = f"kafka://{LOOPBACK}:{port}?{TANSU_OPTIONS}"
    with contextlib.ExitStack() as broker:
        broker.enter_context(tansu_on(port, tmp_path))
        service_bus, client_bus = await connect(url), await connect(url)
        try:
            async with running(service_bus, echo), ToolServiceClient(client_bus) as client:

                async def call(text: str, timeout: float) -> str:
                    return await client.call(
                        request_queue=echo.request_queue,
                        response_queue=echo.response_queue,
                        arguments={"text": text},
                        timeout=timeout,
                    )

                assert await call("before", 30) == "before"
                broker.close()  # the broker stops, and its topics with it
                # The outage is the scenario, not a wait for an event: longer than
                # the group session (2 s), so the broker forgets the member too.
                await anyio.sleep(OUTAGE)
                broker.enter_context(tansu_on(port, tmp_path))
                restarted = time.monotonic()
                recovered = None
                while time.monotonic() - restarted < RECOVERY_LIMIT:
                    try:
                        # Recovered once three calls in a row are answered.
                        for n in range(3):
                            assert await call(f"after {n}", 5) == f"after {n}"
                    except (ToolTimeout, ToolbusError):
                        continue
                    recovered = time.monotonic() - restarted
                    break
        finally:
            await service_bus.close()
            await client_bus.close()

    with capsys.disabled():
        print(f"\nKafka ({kind} requests): calls answered again {recovered} s after restart")
    assert recovered is not None, f"no recovery within {RECOVERY_LIMIT} s"
