"""Tokens of a shared identity provider: only those issued for this gateway, and fresh enough.

An identity provider signs the tokens of every application it serves with
the same keys, so a key set (``jwks-file``) alone would take a token issued
for another application. The gateway needs ``issuer`` and ``audience`` with
one, and can refuse tokens older than ``max-age``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.gateway.support import (
    AUDIENCE,
    ISSUER,
    RunningGateway,
    Signer,
)
from toolbus.application.identity.bearer import JwtVerifier
from toolbus.domain.errors import ConfigError
from toolbus_gateway import parse_gateway_settings

pytestmark = pytest.mark.anyio

WHERE = "toolbus.toml [gateway.jwt]"


@pytest.mark.parametrize(
    ("given", "missing"),
    [
        ({}, ["issuer", "audience"]),
        ({"issuer": ISSUER}, ["audience"]),
        ({"audience": AUDIENCE}, ["issuer"]),
    ],
)
def test_a_key_set_needs_an_issuer_and_an_audience(
    tmp_path: Path, signer: Signer, given: dict[str, str], missing: list[str]
) -> None:
    (tmp_path / "jwks.json").write_text(json.dumps(signer.jwks()))
    settings = parse_gateway_settings({"jwt": {"jwks-file": "jwks.json", **given}})
    assert settings.jwt is not None

    with pytest.raises(ConfigError) as refused:
        JwtVerifier.from_settings(settings.jwt, where=WHERE, base_dir=tmp_path)

    text = str(refused.value)
    for name in missing:
        assert f"field '{name}': is required with jwks-file" in text
    assert "only tokens issued for this door pass" in text


@pytest.fixture
def jwt_settings() -> dict[str, Any]:
    """Tokens issued at most a minute ago."""
    return {"max-age": 60}


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
    served: RunningGateway, signer: Signer, alg: str, claims: dict[str, Any], reason: str
) -> None:
    issued = {"iat": int(time.time())}
    token = signer.token("ops", alg, **{**issued, **claims})
    fresh = signer.token("ops", alg, **issued)
    async with served.client(token=token) as http:
        refused = await http.get("/v1/tools")
    async with served.client(token=fresh) as http:
        served = await http.get("/v1/tools")

    assert refused.status_code == 401, refused.text
    assert refused.json()["reason"] == reason
    assert served.status_code == 200, served.text
