"""10,000 forged or mangled tokens: not one is accepted, and each is a clean refusal.

The forgeries start from genuine tokens of the trusted keys and change what an
attacker can: the header (algorithm, ``none`` included, and key id), the claims
without re-signing, the signature (truncated, flipped, swapped), or they sign
with the public key as an HMAC secret. The rest is noise.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import random
from collections.abc import Callable
from typing import Any

import pytest

from toolbus.application.calls.host import running
from toolbus.application.identity import CallVerifier
from toolbus.domain.calls import wire
from toolbus.domain.errors import Unauthorized
from toolbus.domain.identity import PROP_CALL_TOKEN
from toolbus.ports import Bus

from .support import key_pair, raw_exchange, whoami

AUDIENCE = "joke-service"
USER = "alice"
BODY = wire.encode_request(USER)
ALGORITHMS = ["none", "None", "NONE", "", "HS256", "HS512", "RS256", "ES256", "ES512", "Ed25519"]
ALGORITHMS += ["EdDSA", "Ed448", "PS256", "hs256", "A256GCM", "dir"]


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class Forger:
    def __init__(self, rng: random.Random, genuine: list[str], kids: list[str], public: bytes):
        self.rng = rng
        self.genuine = genuine
        self.kids = kids
        self.public = public

    def pick(self) -> list[str]:
        return self.rng.choice(self.genuine).split(".")

    def header(self) -> str:
        rng = self.rng
        header: dict[str, Any] = {}
        if rng.random() < 0.95:
            header["alg"] = rng.choice([*ALGORITHMS, None, 0, ["HS256"]])
        if rng.random() < 0.9:
            header["kid"] = rng.choice([*self.kids, "", "unknown", None, 7, "../../etc/passwd"])
        if rng.random() < 0.2:
            header[rng.choice(["crit", "jku", "jwk", "x5u", "b64", "typ"])] = rng.choice(
                [["exp"], "https://attacker.example/keys", {"kty": "oct", "k": "AA"}, False]
            )
        return b64(json.dumps(header).encode())

    def new_header(self) -> str:
        _, payload, signature = self.pick()
        return f"{self.header()}.{payload}.{signature}"

    def unsigned(self) -> str:
        _, payload, _ = self.pick()
        return f"{b64(json.dumps({'alg': 'none', 'kid': self.kids[0]}).encode())}.{payload}."

    def changed_claims(self) -> str:
        header, payload, signature = self.pick()
        claims = json.loads(unb64(payload))
        claims[self.rng.choice(["sub", "groups", "exp", "aud", "jti"])] = self.rng.choice(
            ["root", ["admin"], 4_000_000_000, "other", None]
        )
        return f"{header}.{b64(json.dumps(claims).encode())}.{signature}"

    def mangled_signature(self) -> str:
        header, payload, signature = self.pick()
        raw = bytearray(unb64(signature))
        choice = self.rng.randrange(4)
        if choice == 0:
            raw = raw[: self.rng.randrange(len(raw))]
        elif choice == 1 and raw:
            raw[self.rng.randrange(len(raw))] ^= 1 << self.rng.randrange(8)
        elif choice == 2:  # another genuine token's signature
            others = [t.split(".")[2] for t in self.genuine if t.split(".")[2] != signature]
            raw = bytearray(unb64(self.rng.choice(others)))
        else:
            raw = bytearray(self.rng.randbytes(self.rng.choice([0, 32, 64, 65])))
        return f"{header}.{payload}.{b64(bytes(raw))}"

    def public_key_as_secret(self) -> str:
        header = b64(json.dumps({"alg": "HS256", "kid": self.rng.choice(self.kids)}).encode())
        _, payload, _ = self.pick()
        mac = hmac.new(self.public, f"{header}.{payload}".encode(), hashlib.sha256).digest()
        return f"{header}.{payload}.{b64(mac)}"

    def noise(self) -> str:
        rng = self.rng
        alphabet = "abcXYZ019-_.=+/ \x00é"
        return "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 200)))

    def truncated(self) -> str:
        token = ".".join(self.pick())
        return token[: self.rng.randrange(len(token))]

    def forgeries(self) -> list[Callable[[], str]]:
        return [
            self.new_header,
            self.unsigned,
            self.changed_claims,
            self.mangled_signature,
            self.public_key_as_secret,
            self.noise,
            self.truncated,
        ]


def forger(seed: int) -> tuple[Forger, CallVerifier]:
    pairs = [key_pair("Ed25519"), key_pair("ES256"), key_pair("HS256")]
    genuine = [
        pair.signer().sign(call_id="c-1", audience=AUDIENCE, user=USER, body=BODY) for pair in pairs
    ]
    # The verifier trusts the asymmetric keys only: a genuine HS256 token of an
    # unknown secret is one more forgery.
    verifier = CallVerifier([pairs[0].public, pairs[1].public])
    kids = [str(pair.private.kid) for pair in pairs]
    public = json.dumps(pairs[0].public).encode()
    return Forger(random.Random(seed), genuine, kids, public), verifier


def test_ten_thousand_forged_tokens_are_all_refused() -> None:
    forge, verifier = forger(seed=20)
    kinds = forge.forgeries()
    accepted: list[str] = []
    for n in range(10_000):
        token = kinds[n % len(kinds)]()
        try:
            verifier.verify(
                token, call_id="c-1", audiences={AUDIENCE}, user=USER, body=BODY, once=False
            )
        except Unauthorized:
            continue
        accepted.append(token)
    assert accepted == []


@pytest.mark.anyio
async def test_forged_tokens_through_a_bus_run_nothing(bus: Bus) -> None:
    forge, verifier = forger(seed=21)
    tool = whoami()
    kinds = forge.forgeries()
    async with (
        running(bus, tool.service, verifier=verifier),
        raw_exchange(bus, tool.service) as send,
    ):
        for n in range(140):
            answer = await send(BODY, {"id": "c-1", PROP_CALL_TOKEN: kinds[n % len(kinds)]()})
            assert answer.error_type == "unauthorized"
    assert tool.served == []
