"""Call tokens are standard JWS: another library verifies ours, and ours verifies theirs.

PyJWT stands for "any verifier": a token a :class:`CallSigner` makes verifies
with it (PyJWT knows Ed25519 by its older name, EdDSA, so the Ed25519
algorithm is registered under the name RFC 9864 gives it), and a token PyJWT
signs with the same claims is accepted by a :class:`CallVerifier`, while a
byte changed in it is refused.
"""

from __future__ import annotations

import time
from typing import Any

import jwt
import jwt.algorithms
import pytest

from tests.identity.support import KeyPair, key_pair
from toolbus.application.identity import CallVerifier
from toolbus.domain.calls import wire
from toolbus.domain.errors import Unauthorized
from toolbus.domain.identity import call_claims

ALGORITHMS = ["Ed25519", "HS256", "ES256"]
BODY = wire.encode_request("alice", None, {"text": "hello"})
PROPERTIES = {"deadline": "1900000000.5", "attempt": "2"}


def pyjwt(algorithm: str) -> jwt.PyJWS:
    jws = jwt.PyJWS()
    if algorithm == "Ed25519":
        jws.register_algorithm("Ed25519", jwt.algorithms.OKPAlgorithm())
    return jws


def native_keys(pair: KeyPair) -> tuple[Any, Any]:
    """The (signing, verifying) keys as PyJWT takes them: cryptography's, or the secret."""
    if pair.private.key_type == "oct":
        return pair.private.raw_value, pair.private.raw_value
    private = pair.private.private_key
    return private, private.public_key()


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_token_we_sign_verifies_with_pyjwt(algorithm: str) -> None:
    pair = key_pair(algorithm, kid=f"ours-{algorithm}")
    token = pair.signer(groups=["staff"]).sign(
        call_id="call-1", audience="svc", user="alice", body=BODY, properties=PROPERTIES
    )
    _, verifying = native_keys(pair)

    decoded = pyjwt(algorithm).decode_complete(token, verifying, algorithms=[algorithm])

    assert decoded["header"] == {"alg": algorithm, "kid": f"ours-{algorithm}", "typ": "JWT"}
    claims = jwt.PyJWT().decode(
        token,
        verifying,
        algorithms=[algorithm],
        audience="svc",
        options={"verify_signature": False},
    )
    assert claims["sub"] == "alice" and claims["jti"] == "call-1"
    assert claims["groups"] == ["staff"] and claims["prp"] == PROPERTIES


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_token_pyjwt_signs_verifies_with_ours(algorithm: str) -> None:
    pair = key_pair(algorithm, kid=f"theirs-{algorithm}")
    signing, _ = native_keys(pair)
    claims = call_claims(
        user="alice",
        groups=["staff"],
        audience="svc",
        call_id="call-1",
        body=BODY,
        now=time.time(),
        lifetime=60,
        properties=PROPERTIES,
    )
    # PyJWT writes its own JSON (spaces after separators) and header order.
    token = pyjwt(algorithm).encode(
        jwt.api_jws.json.dumps(claims).encode(),
        signing,
        algorithm,
        {"kid": f"theirs-{algorithm}", "typ": "JWT"},
    )
    verifier = CallVerifier([pair.public])

    def verify(token: str) -> Any:
        return verifier.verify(
            token,
            call_id="call-1",
            audiences={"svc"},
            user="alice",
            body=BODY,
            once=True,
            properties=PROPERTIES,
        )

    caller = verify(token)
    assert (caller.user, caller.groups, caller.verified) == ("alice", ("staff",), True)
    header, payload, signature = token.split(".")
    changed = "A" if payload[5] != "A" else "B"
    with pytest.raises(Unauthorized, match="signature does not verify"):
        verify(f"{header}.{payload[:5]}{changed}{payload[6:]}.{signature}")


def test_a_header_checked_once_still_refuses_other_headers_with_the_same_key() -> None:
    pair = key_pair("Ed25519", kid="checked-once")
    signer = pair.signer()
    verifier = CallVerifier([pair.public])

    def verify(token: str) -> Any:
        return verifier.verify(token, call_id="call-1", audiences={"svc"}, user="alice", body=BODY)

    good = signer.sign(call_id="call-1", audience="svc", user="alice", body=BODY)
    assert verify(good).verified  # its header's checks are now remembered
    _, payload, signature = good.split(".")
    unsigned = jwt.utils.base64url_encode(b'{"alg":"none","kid":"checked-once"}').decode()
    with pytest.raises(Unauthorized, match="algorithm 'none'"):
        verify(f"{unsigned}.{payload}.")
    other = jwt.utils.base64url_encode(b'{"alg":"HS256","kid":"checked-once"}').decode()
    with pytest.raises(Unauthorized, match="algorithm 'HS256'"):
        verify(f"{other}.{payload}.{signature}")
    with pytest.raises(Unauthorized, match="malformed"):
        verify(f"{good}.{signature}")
