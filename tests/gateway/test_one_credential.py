"""One caller per request: two ``Authorization`` headers are a 400 on every path.

Sent as raw HTTP (httpx keeps repeated headers given as a list of pairs) to the
gateway under uvicorn: a reader that took the first header and one that took
the last would otherwise name different callers for the same request.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from tests.gateway.support import KEYS, RunningGateway, metric

pytestmark = pytest.mark.anyio

ALICE_FIRST = [("Authorization", f"Bearer {KEYS['alice']}"), ("Authorization", "Bearer x")]
BOB_LAST = [
    ("Authorization", f"Bearer {KEYS['alice']}"),
    ("Authorization", f"Bearer {KEYS['bob']}"),
]
SECURITY = ("content-security-policy", "x-frame-options", "x-content-type-options")


async def _chunked(body: bytes) -> AsyncIterator[bytes]:
    yield body


def _refused(answer: httpx.Response) -> None:
    assert answer.status_code == 400, (answer.status_code, answer.text)
    body = answer.json()
    assert body["error"] == "several-credentials"
    assert "more than one Authorization header" in body["message"]
    assert all(answer.headers.get(name) for name in SECURITY)


@pytest.mark.parametrize("credentials", [ALICE_FIRST, BOB_LAST], ids=["stranger last", "bob last"])
async def test_a_call_with_two_credentials_is_refused_on_the_direct_and_the_routed_path(
    served: RunningGateway, credentials: list[tuple[str, str]]
) -> None:
    body = b'{"arguments": {"text": "hello"}}'
    headers = [*credentials, ("Content-Type", "application/json")]
    async with httpx.AsyncClient(base_url=served.url, timeout=30) as http:
        direct = await http.post("/v1/tools/echo/call", content=body, headers=headers)
        routed = await http.post("/v1/tools/echo/call", content=_chunked(body), headers=headers)
        counted = (await http.get("/metrics", headers=[credentials[0]])).text

    assert "content-length" in direct.request.headers  # the direct path's kind of request
    assert "content-length" not in routed.request.headers  # FastAPI's
    _refused(direct)
    _refused(routed)
    assert direct.json() == routed.json()
    assert not served.gateway.audit.records  # no session was opened for anybody
    labels = {"route": "unmatched", "status": "400"}
    assert metric(counted, "toolbus_gateway_http_requests_total", labels) == 2


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/healthz"),
        ("GET", "/v1/tools"),
        ("POST", "/v1/sessions"),
        ("GET", "/v1/approvals"),
        ("GET", "/console"),
        ("GET", "/openapi.json"),
        ("GET", "/no-such-path"),
    ],
)
async def test_every_path_refuses_two_credentials(
    served: RunningGateway, method: str, path: str
) -> None:
    async with httpx.AsyncClient(base_url=served.url, timeout=30) as http:
        answer = await http.request(method, path, headers=BOB_LAST, json={})
        one = await http.request(method, path, headers=BOB_LAST[:1], json={})

    _refused(answer)
    assert one.status_code != 400  # the same request with one credential is served
