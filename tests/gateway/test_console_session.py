"""The console's log-in: a session of its own, CSRF-protected forms, and safe page headers.

In a real Chromium and with raw HTTP against uvicorn: the browser never holds
the API key or JWT it logged in with; the session cookie is HttpOnly,
SameSite=Strict, expiring, Secure behind TLS, and dead once logged out; a form
without its CSRF token does nothing; every answer says how it may be framed,
sniffed and scripted.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from joserfc import jwt
from joserfc.jwk import OctKey

from tests.gateway.conftest import needs_chromium
from tests.gateway.support import KEYS, RunningGateway, Signer, authenticator, serving, snapshot
from toolbus_gateway import Gateway, parse_gateway_settings

pytestmark = pytest.mark.anyio

CONSOLE_KEY = "console-key-0123456789abcdef0123456789"
SECURITY_HEADERS = {
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
}


@pytest.fixture
def gateway_settings(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Console sessions signed with a known key, behind a proxy that ends TLS."""
    monkeypatch.setenv("TEST_CONSOLE_KEY", CONSOLE_KEY)
    return {"console-key-env": "TEST_CONSOLE_KEY", "tls-proxy-header": "X-Forwarded-Proto"}


@pytest.fixture
def console(served: RunningGateway) -> RunningGateway:
    return served


def session_cookie(value: str) -> dict[str, str]:
    """A request header sending ``value`` as the console session cookie, as a browser would."""
    return {"Cookie": f"toolbus_console={value}"}


def form_token(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found is not None, html
    return found.group(1)


async def log_in(http: httpx.AsyncClient, key: str, **headers: str) -> httpx.Response:
    """The log-in form, fetched and posted as a browser does."""
    page = await http.get("/console")
    return await http.post(
        "/console/login", data={"token": key, "csrf": form_token(page.text)}, headers=headers
    )


@needs_chromium
async def test_the_browser_holds_a_session_not_the_key_and_log_out_ends_it(
    console: RunningGateway, browser_context: Any
) -> None:
    page = await browser_context.new_page()
    await page.goto(f"{console.url}/console")
    await page.fill("input[name=token]", KEYS["ops"])
    await page.click("button[type=submit]")
    await page.wait_for_selector("body.live")  # the page runs under its CSP
    (cookie,) = [c for c in await browser_context.cookies() if c["name"] == "toolbus_console"]

    assert KEYS["ops"] not in cookie["value"]
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["path"] == "/console"
    assert time.time() < cookie["expires"] <= time.time() + 8 * 3600 + 60
    async with httpx.AsyncClient(base_url=console.url) as http:
        replayed = await http.get("/console", headers=session_cookie(cookie["value"]))
        api = await http.get("/v1/tools", headers=session_cookie(cookie["value"]))
    assert replayed.status_code == 200 and "log out" in replayed.text
    assert api.status_code == 401  # the API takes the Authorization header only

    await page.click("header button[type=submit]")  # log out
    await page.wait_for_selector("input[name=token]")
    async with httpx.AsyncClient(base_url=console.url) as http:
        after = await http.get("/console", headers=session_cookie(cookie["value"]))
    assert after.status_code == 401 and 'name="token"' in after.text


async def test_a_form_without_its_csrf_token_does_nothing(console: RunningGateway) -> None:
    async with httpx.AsyncClient(base_url=console.url) as http:
        forged = await http.post("/console/login", data={"token": KEYS["ops"]})
        # A token from the form of another browser (its cookie is not this one's).
        async with httpx.AsyncClient(base_url=console.url) as other:
            elsewhere = form_token((await other.get("/console")).text)
        await http.get("/console")
        crossed = await http.post("/console/login", data={"token": KEYS["ops"], "csrf": elsewhere})
        assert "toolbus_console" not in http.cookies
        logged_in = await log_in(http, KEYS["ops"])
        session = http.cookies["toolbus_console"]
        no_token = await http.post("/console/logout")
        still = await http.get("/console")
        logout_token = form_token(still.text)
        out = await http.post("/console/logout", data={"csrf": logout_token})
    async with httpx.AsyncClient(base_url=console.url) as http:
        after = await http.get("/console", headers=session_cookie(session))

    assert forged.status_code == 403 and crossed.status_code == 403
    assert "log-in form expired" in forged.text
    assert logged_in.status_code == 303
    assert no_token.status_code == 403
    assert still.status_code == 200 and "log out" in still.text
    assert out.status_code == 303
    assert after.status_code == 401


async def test_a_session_cookie_is_signed_and_expires(console: RunningGateway) -> None:
    def cookie(key: str, expires_in: float) -> str:
        now = int(time.time())
        claims = {
            "sub": "ops",
            "via": "api-key",
            "cred": "ops",
            "sid": "s-1",
            "csrf": "c-1",
            "iat": now,
            "exp": int(now + expires_in),
        }
        return jwt.encode({"alg": "HS256"}, claims, OctKey.import_key(key))

    answers = {}
    async with httpx.AsyncClient(base_url=console.url) as http:
        for name, value in {
            "valid": cookie(CONSOLE_KEY, 60),
            "expired": cookie(CONSOLE_KEY, -60),
            "forged": cookie("another-key-0123456789abcdef0123456789", 60),
            "a key": KEYS["ops"],
        }.items():
            answers[name] = (await http.get("/console", headers=session_cookie(value))).status_code

    assert answers == {"valid": 200, "expired": 401, "forged": 401, "a key": 401}


async def test_the_cookie_is_secure_behind_a_tls_proxy(console: RunningGateway) -> None:
    async with httpx.AsyncClient(base_url=console.url) as http:
        plain = await log_in(http, KEYS["ops"])
    async with httpx.AsyncClient(base_url=console.url) as http:
        proxied = await log_in(http, KEYS["ops"], **{"X-Forwarded-Proto": "https"})

    assert "secure" not in plain.headers["set-cookie"].lower()
    session = [c for c in proxied.headers.get_list("set-cookie") if "toolbus_console=" in c]
    assert any("secure" in c.lower() for c in session), proxied.headers.get_list("set-cookie")


async def test_every_answer_says_how_it_may_be_framed_sniffed_and_scripted(
    console: RunningGateway,
) -> None:
    async with httpx.AsyncClient(base_url=console.url) as http:
        answers = [
            await http.get("/console"),
            await http.get("/console/static/console.js"),
            await http.get("/healthz"),
            await http.get("/v1/tools", headers={"Authorization": f"Bearer {KEYS['alice']}"}),
        ]
        await log_in(http, KEYS["ops"])
        answers.append(await http.get("/console"))
        answers.append(await http.get("/console/fragments/status"))

    for answer in answers:
        for name, value in SECURITY_HEADERS.items():
            assert answer.headers.get(name) == value, (answer.url, name)
        policy = answer.headers["content-security-policy"]
        assert "frame-ancestors 'none'" in policy and "script-src 'self'" in policy
        assert "unsafe-inline" not in policy


async def test_replicas_sharing_the_console_key_read_each_others_sessions(
    console: RunningGateway,
    broker_url: str,
    tool_services: tuple[Any, ...],
    signer: Signer,
    tmp_path: Path,
) -> None:
    settings = parse_gateway_settings({"console-key-env": "TEST_CONSOLE_KEY"})
    twin = Gateway(
        broker_url,
        authenticator=authenticator(signer, tmp_path),
        config=snapshot(*tool_services),
        settings=settings,
    )
    async with httpx.AsyncClient(base_url=console.url) as http:
        await log_in(http, KEYS["ops"])
        session = http.cookies["toolbus_console"]
    async with serving(twin) as other, httpx.AsyncClient(base_url=other.url) as http:
        answer = await http.get("/console", headers=session_cookie(session))

    assert answer.status_code == 200 and "log out" in answer.text


async def test_counts_agree_with_their_nouns(console: RunningGateway) -> None:
    async with httpx.AsyncClient(base_url=console.url) as http:
        await log_in(http, KEYS["ops"])
        text = " ".join(
            [(await http.get(f"/console/fragments/{name}")).text for name in ("status", "tools")]
        )

    counted = re.findall(
        r"\b(\d+) (tool|group|configured service|service|open session|event stream)(s?)\b",
        text,
    )
    assert {noun for _, noun, _ in counted} >= {"tool", "group", "configured service", "service"}
    assert any(n == "1" for n, _, _ in counted), counted  # the case the plurals got wrong
    assert [(n, noun, s) for n, noun, s in counted if (n == "1") != (s == "")] == []
