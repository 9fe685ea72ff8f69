"""The calls answered before FastAPI's router get exactly FastAPI's answers.

A body of declared length takes the direct path; the same body sent chunked
(no Content-Length) is handed to FastAPI's route. Both must answer alike:
status, body, security headers, the request counter and the audit record.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tests.gateway.support import RunningGateway, metric

pytestmark = pytest.mark.anyio

CALL_ROUTE = "/v1/tools/{name}/call"
SECURITY = ("content-security-policy", "x-frame-options", "x-content-type-options")


async def _chunked(body: bytes) -> AsyncIterator[bytes]:
    yield body


def _comparable(answer: httpx.Response) -> dict[str, Any]:
    body = answer.json()
    body.pop("duration_ms", None)  # how long the call took differs between two calls
    return {
        "status": answer.status_code,
        "body": body,
        "type": answer.headers["content-type"],
        "security": {name: answer.headers.get(name) for name in SECURITY},
    }


@pytest.mark.parametrize(
    ("tool", "body"),
    [
        ("echo", b'{"arguments": {"text": "hello"}}'),  # answered
        ("nope", b"{}"),  # unknown: 404
        ("research", b"{}"),  # outside alice's groups: 404 as unknown
        ("checkout", b'{"arguments": {}}'),  # not in the entry state: 409
        ("find", b'{"arguments": {"action": "missing", "item": "hat"}}'),  # tool error: 502
        ("find", b'{"arguments": {"item": "hat"}}'),  # arguments it cannot use: 422
    ],
)
async def test_a_call_is_answered_alike_with_and_without_a_declared_length(
    served: RunningGateway, tool: str, body: bytes
) -> None:
    path = f"/v1/tools/{tool}/call"
    json_type = {"Content-Type": "application/json"}
    async with served.client("alice") as http:
        direct = await http.post(path, content=body, headers=json_type)
        routed = await http.post(path, content=_chunked(body), headers=json_type)
        counted = (await http.get("/metrics")).text
    assert "content-length" not in routed.request.headers  # FastAPI's route took it
    assert _comparable(direct) == _comparable(routed)
    assert all(direct.headers.get(name) for name in SECURITY)
    labels = {"route": CALL_ROUTE, "status": str(direct.status_code)}
    assert metric(counted, "toolbus_gateway_http_requests_total", labels) == 2
    records = served.gateway.audit.records
    assert len(records) == 2 and records[0].user == records[1].user == "alice"


async def test_a_bad_credential_or_body_on_the_direct_path_is_answered_by_fastapi(
    served: RunningGateway,
) -> None:
    async with served.client(token="not-a-key") as stranger:
        refused = await stranger.post("/v1/tools/echo/call", json={"arguments": {}})
    async with served.client("alice") as http:
        malformed = await http.post(
            "/v1/tools/echo/call", content=b"{", headers={"Content-Type": "application/json"}
        )
        wrong_shape = await http.post("/v1/tools/echo/call", json={"arguments": 3})
    assert refused.status_code == 401 and "WWW-Authenticate" in refused.headers
    assert malformed.status_code == 400
    assert wrong_shape.status_code == 422
