"""Every way of proving who you are, and every way of failing to, against a real server."""

from __future__ import annotations

import base64
import json
import time

import pytest
from joserfc import jwt
from joserfc.jwk import OctKey

from tests.gateway.support import KEYS, RunningGateway, Signer, metric

pytestmark = pytest.mark.anyio


async def test_no_credential_is_401_with_a_bearer_challenge(served: RunningGateway) -> None:
    async with served.client() as http:
        answer = await http.get("/v1/tools")
    assert answer.status_code == 401
    assert answer.headers["www-authenticate"] == 'Bearer realm="toolbus"'
    assert answer.json()["reason"] == "missing"
    assert "Authorization: Bearer" in answer.json()["message"]


@pytest.mark.parametrize(
    "header",
    ["Bearer not-a-key-0123456789abcdef", "Basic YWxpY2U6c2VjcmV0", "Bearer a.b.c"],
)
async def test_a_bad_credential_is_401_and_never_echoed(
    served: RunningGateway, header: str
) -> None:
    async with served.client() as http:
        answer = await http.get("/v1/tools", headers={"Authorization": header})
    assert answer.status_code == 401
    assert header.split()[-1] not in answer.text
    assert answer.json()["reason"] in {"unknown-key", "invalid-token", "missing"}


async def test_an_expired_token_is_401_expired(served: RunningGateway, signer: Signer) -> None:
    token = signer.token("alice", "RS256", expires_in=-3600)
    async with served.client() as http:
        answer = await http.get("/v1/tools", headers={"Authorization": f"Bearer {token}"})
    assert answer.status_code == 401
    assert answer.json()["reason"] == "expired"
    assert 'error="invalid_token"' in answer.headers["www-authenticate"]


async def test_a_token_signed_with_another_key_is_401(served: RunningGateway) -> None:
    impostor = Signer.generate()  # same kid, different key: a forged token
    for alg in ("RS256", "ES256"):
        token = impostor.token("ops", alg)
        async with served.client() as http:
            answer = await http.get("/v1/tools", headers={"Authorization": f"Bearer {token}"})
        assert answer.status_code == 401, alg
        assert answer.json()["reason"] == "bad-signature"


async def test_a_token_from_another_issuer_is_401(served: RunningGateway, signer: Signer) -> None:
    token = signer.token("alice", iss="someone-else")
    async with served.client() as http:
        answer = await http.get("/v1/tools", headers={"Authorization": f"Bearer {token}"})
    assert answer.status_code == 401
    assert answer.json()["reason"] == "invalid-token"


async def test_an_unsigned_or_key_confused_token_is_401(
    served: RunningGateway, signer: Signer
) -> None:
    def part(data: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()

    claims = {"sub": "ops", "exp": int(time.time()) + 300, "iss": "test-idp"}
    unsigned = f"{part({'alg': 'none'})}.{part(claims)}."
    # HS256 "signed" with the RSA public key, hoping the verifier uses it as a secret.
    public = json.dumps(signer.jwks()["keys"][0])
    confused = jwt.encode({"alg": "HS256"}, claims, OctKey.import_key(public))
    for token in (unsigned, confused):
        async with served.client(token=token) as http:
            answer = await http.get("/v1/tools", params={"groups": "*"})
        assert answer.status_code == 401, token
        assert answer.json()["reason"] in {"invalid-token", "bad-signature"}


@pytest.mark.parametrize("alg", ["HS256", "RS256", "ES256"])
async def test_valid_tokens_name_the_user(served: RunningGateway, signer: Signer, alg: str) -> None:
    token = signer.token("bob", alg)
    async with served.client() as http:
        answer = await http.get(
            "/v1/tools", params={"groups": "research"}, headers={"Authorization": f"Bearer {token}"}
        )
    assert answer.status_code == 200, answer.text
    assert [t["function"]["name"] for t in answer.json()["tools"]] == ["research"]


async def test_a_valid_api_key_names_the_user(served: RunningGateway) -> None:
    async with served.client("alice") as http:
        answer = await http.get("/v1/tools")
    assert answer.status_code == 200
    names = [t["function"]["name"] for t in answer.json()["tools"]]
    assert names == ["echo", "add-to-cart", "find", "words"]


async def test_failures_are_counted_by_reason_and_keys_stay_out_of_metrics(
    served: RunningGateway,
) -> None:
    async with served.client() as http:
        await http.get("/v1/tools")
        await http.get("/v1/tools", headers={"Authorization": "Bearer wrong-key-0123456789abcdef"})
        text = (await http.get("/metrics")).text
    assert metric(text, "toolbus_gateway_auth_failures_total", {"reason": "missing"}) == 1
    assert metric(text, "toolbus_gateway_auth_failures_total", {"reason": "unknown-key"}) == 1
    assert not any(key in text for key in KEYS.values())
