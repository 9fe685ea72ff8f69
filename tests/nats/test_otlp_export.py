"""``toolbus serve`` exports its spans over OTLP/HTTP when the OTEL_* variables say so.

The collector is an HTTP endpoint in the test on 127.0.0.1 that decodes the
OTLP protobuf the exporter posts, with the opentelemetry-proto package.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from tests.nats.processes import serve
from tests.support.otlp import Collector
from toolbus import ToolServiceClient
from toolbus_calculator import calculator_service
from toolbus_nats import connect

pytestmark = [pytest.mark.anyio, pytest.mark.broker, pytest.mark.slow]


@pytest.fixture
def collector() -> Iterator[Collector]:
    running = Collector()
    yield running
    running.close()


async def test_serve_exports_its_spans_to_the_collector_named_by_otel_variables(
    nats_url: str, tmp_path: Path, collector: Collector
) -> None:
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": collector.url,
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_BSP_SCHEDULE_DELAY": "100",
    }
    bus = await connect(nats_url)
    try:
        async with serve(["calculator"], nats_url, workdir=tmp_path, env=env):
            async with ToolServiceClient(bus) as client:
                answer = await client.call(
                    request_queue=calculator_service.request_queue,
                    response_queue=calculator_service.response_queue,
                    arguments={"expression": "6 * 7"},
                    timeout=30,
                )
            assert answer == "42"
            path, export = await anyio.to_thread.run_sync(collector.requests.get, True, 30)
    finally:
        await bus.close()

    assert path == "/v1/traces"
    [resource_spans] = export.resource_spans
    attributes = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
    assert attributes["service.name"] == "calculator"
    names = [span.name for scope in resource_spans.scope_spans for span in scope.spans]
    assert names == ["toolbus serve calculator"]
