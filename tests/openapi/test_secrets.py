"""An API credential from the service's environment reaches the API and is seen nowhere else.

The secret is planted in the tool service's environment and sent as a bearer
token, a header or a query parameter; the API even echoes it back, and fails
with it. Then everything that left the service is scanned: every log record of
every logger at DEBUG (httpx and httpcore included), every message on the
service's queues and the announcements queue, every audit record, every
observation and error message, every metric sample and every span.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from tests.context.support import formatted, span_texts, tapped
from tests.openapi.conftest import Api
from tests.openapi.test_calls import registry_of
from toolbus import AgentSession
from toolbus.application.agent.audit import ListAuditSink
from toolbus.application.calls.metrics import ToolbusMetrics
from toolbus.application.live.announcements import ANNOUNCEMENTS_QUEUE, Announcer
from toolbus.domain.errors import ToolCallError
from toolbus.testing.kit import ToolTestKit
from toolbus_openapi import Credential

pytestmark = pytest.mark.anyio

CREDENTIALS = {
    "bearer": Credential("bearer", "SHOP_SECRET"),
    "header": Credential("header", "SHOP_SECRET", "X-API-Key"),
    "query": Credential("query", "SHOP_SECRET", "api_key"),
}
#: Or no credential: the tool's options inject the secret as the query argument api_key.
ENVS = {"shop_whoAmI": {"options": {"envs": {"api_key": "SHOP_SECRET"}}}}


@pytest.mark.parametrize("kind", [*sorted(CREDENTIALS), "options-envs"])
async def test_the_credential_reaches_the_api_and_nothing_else(
    toolbus: ToolTestKit,
    shop: Api,
    make_toolset: Any,
    caplog: pytest.LogCaptureFixture,
    spans: Any,
    kind: str,
) -> None:
    caplog.set_level(logging.DEBUG)
    secret = shop.secret
    environ = {"SHOP_SECRET": secret}
    if kind in CREDENTIALS:
        service = make_toolset(credentials=(CREDENTIALS[kind],), environ=environ)
        options = {}
    else:
        service = make_toolset(env_params=("SHOP_SECRET",))
        options = ENVS
    prometheus = CollectorRegistry()
    metrics = ToolbusMetrics(prometheus)
    await toolbus.serve(service, metrics=metrics, environ=environ)
    audit = ListAuditSink()
    seen: list[str] = []
    queues = [service.request_queue, service.response_queue, ANNOUNCEMENTS_QUEUE]
    async with tapped(toolbus.bus, *queues) as tap:
        await Announcer(toolbus.bus, service, tools=service.tools()).announce()
        tools = toolbus.tools(registry_of(service, **options))
        async with AgentSession(tools, user="alice", audit=audit, metrics=metrics) as session:
            for name, arguments in [
                ("shop_whoAmI", {}),
                ("shop_broken", {}),
            ]:
                outcome = await session.call(name, arguments)
                seen.append(outcome.observation)
        with pytest.raises(ToolCallError) as caught:
            await tools.call("shop_getItem", {"item_id": "404"})
        seen.append(str(caught.value))

    # The API got the credential, and echoed it: the answer says it was redacted.
    reached = [hit for hit in shop.hits.hits if secret in f"{hit.headers} {hit.query}"]
    assert "/api/whoami" in [hit.path for hit in reached]
    assert '"credential":"***"' in seen[0]
    leaks = [
        *(text for text in seen if secret in text),
        *(text for text in tap.texts() if secret in text),
        *(r.to_json() for r in audit.records if secret in r.to_json()),
        *(line for line in formatted(caplog.records) if secret in line),
        *(text for text in span_texts(spans.get_finished_spans()) if secret in text),
    ]
    assert leaks == []
    assert secret not in generate_latest(prometheus).decode()
    assert any(r.name.startswith("httpx") for r in caplog.records), "httpx logged nothing"
    assert len(tap.on(ANNOUNCEMENTS_QUEUE)) == 1
    assert spans.get_finished_spans(), "no spans were recorded"


async def test_a_credential_whose_variable_is_unset_fails_the_call_clearly(
    toolbus: ToolTestKit, shop: Api, make_toolset: Any
) -> None:
    from toolbus.domain.errors import Unavailable
    from toolbus_openapi import ToolsetSettings, open_toolset

    environ: dict[str, str] = {}
    settings = ToolsetSettings(
        "shop",
        shop.spec_url,
        base_url=f"{shop.url}/api",
        credentials=(CREDENTIALS["bearer"],),
        allow_insecure_spec=True,
    )
    service = open_toolset(settings, environ=environ, require_credentials=False)
    try:
        tools = toolbus.tools(registry_of(service))
        await toolbus.serve(service)
        with pytest.raises(Unavailable, match=r"environment variable SHOP_SECRET .* is not set"):
            await tools.call("shop_whoAmI")
    finally:
        await service.executor.aclose()
    assert shop.hits.hits == []
