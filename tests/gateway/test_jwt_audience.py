"""Tokens of a shared identity provider: only those issued for this gateway, and fresh enough.

An identity provider signs the tokens of every application it serves with
the same keys, so a key set (``jwks-file``) alone would take a token issued
for another application. The gateway needs ``issuer`` and ``audience`` with
one, and can refuse tokens older than ``max-age``.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.gateway.support import (
    AUDIENCE,
    ISSUER,
    RunningGateway,
    Signer,
    authenticator,
    serving,
    snapshot,
)
from toolbus import running
from toolbus.domain.errors import ConfigError
from toolbus.plugins import connect
from toolbus_gateway import Gateway, JwtVerifier, parse_gateway_settings

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    ("given", "missing"),
    [
        ({}, ["issuer", "audience"]),
        ({"issuer": ISSUER}, ["audience"]),
        ({"audience": AUDIENCE}, ["issuer"]),
    ],
)
def test_a_key_set_needs_both_issuer_and_audience(
    tmp_path: Path, signer: Signer, given: dict[str, str], missing: list[str]
) -> None:
    (tmp_path / "jwks.json").write_text(json.dumps(signer.jwks()))
    settings = parse_gateway_settings({"jwt": {"jwks-file": "jwks.json", **given}})
    assert settings.jwt is not None

    with pytest.raises(ConfigError) as refused:
        JwtVerifier.from_settings(settings.jwt, base_dir=tmp_path)

    text = str(refused.value)
    for name in missing:
        assert f"field '{name}': is required with jwks-file" in text
    assert "only tokens issued for this gateway pass" in text


@pytest.fixture
async def strict(
    broker_url: str, tool_services: tuple[Any, ...], signer: Signer, tmp_path: Path
) -> AsyncIterator[RunningGateway]:
    """A gateway that takes tokens issued at most a minute ago."""
    bus = await connect(broker_url)
    try:
        async with running(bus, *tool_services):
            gateway = Gateway(
                broker_url,
                authenticator=authenticator(signer, tmp_path, jwt={"max-age": 60}),
                config=snapshot(*tool_services),
            )
            async with serving(gateway) as server:
                yield server
    finally:
        await bus.close()


@pytest.mark.parametrize("alg", ["RS256", "ES256"])
@pytest.mark.parametrize(
    ("claims", "reason"),
    [
        ({"aud": "another-app"}, "invalid-token"),
        ({"aud": None}, "invalid-token"),
        ({"iss": "another-idp"}, "invalid-token"),
        ({"iat": int(time.time()) - 7200}, "expired"),
        ({"iat": None}, "invalid-token"),
    ],
    ids=["other-audience", "no-audience", "other-issuer", "too-old", "no-iat"],
)
async def test_a_token_not_issued_for_this_gateway_or_too_old_is_refused(
    strict: RunningGateway, signer: Signer, alg: str, claims: dict[str, Any], reason: str
) -> None:
    issued = {"iat": int(time.time())}
    token = signer.token("ops", alg, **{**issued, **claims})
    fresh = signer.token("ops", alg, **issued)
    async with strict.client(token=token) as http:
        refused = await http.get("/v1/tools")
    async with strict.client(token=fresh) as http:
        served = await http.get("/v1/tools")

    assert refused.status_code == 401, refused.text
    assert refused.json()["reason"] == reason
    assert served.status_code == 200, served.text
