"""The keys that seal what front doors keep in a shared state store: :class:`SealKeys`.

A seal key is a 256-bit secret for AES-GCM, kept as a JSON Web Key::

    {"kty": "oct", "alg": "A256GCM", "use": "enc", "kid": "seal-2026-11", "k": "<base64url>"}

``toolbus keys new seal.jwk --algorithm A256GCM --kid seal-2026-11`` makes one.
Every replica of every door that shares a store is given the same keys, by
*source*: a file path, or ``env:NAME`` for an environment variable's value,
each holding one such key or a JWK Set of them. The first key of the first
source seals; every key opens what it sealed, found by the key id each sealed
record names, so that keys rotate without dropping a session:

1. give every replica the new key as a *second* key (it opens, it does not seal yet);
2. once all run with it, make it the first (it seals from now on);
3. once the old key's records have expired (a day, or the longest TTL), drop it.

Only ``A256GCM`` keys are taken: a signing secret (``HS256``) is refused, so that
one secret never serves two purposes.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolbus.domain.errors import ToolbusError
from toolbus.domain.identity import base64url

#: The one algorithm seal keys are for.
ALGORITHM = "A256GCM"
KEY_BYTES = 32
#: Key ids are written into every sealed record: short, and plain ASCII.
MAX_KID = 64
INSTALL_HINT = (
    "sealing state needs the cryptography library: pip install 'toolbus[seal]' "
    "(the shared stores, toolbus[redis] and toolbus[nats], bring it)"
)


class SealKeyError(ToolbusError, ValueError):
    """A seal key cannot be loaded; the message names the source and the fix, never the key."""


@dataclass(frozen=True, slots=True)
class SealKey:
    """One seal key: its id and its secret (never shown by ``repr``)."""

    kid: str
    secret: bytes

    def __repr__(self) -> str:
        return f"SealKey(kid={self.kid!r}, secret='***')"


@dataclass(frozen=True, slots=True)
class SealKeys:
    """The keys of a door: ``sealing`` seals, every one of ``keys`` opens."""

    keys: tuple[SealKey, ...]

    def __post_init__(self) -> None:
        if not self.keys:
            raise SealKeyError(
                "no seal key given; make one with toolbus keys new --algorithm A256GCM"
            )
        kids = [key.kid for key in self.keys]
        doubled = sorted({kid for kid in kids if kids.count(kid) > 1})
        if doubled:
            raise SealKeyError(
                f"seal key id(s) {', '.join(map(repr, doubled))} given twice; every key needs "
                "an id of its own (rotate by adding a key with a new --kid)"
            )

    @property
    def sealing(self) -> SealKey:
        return self.keys[0]

    def find(self, kid: str) -> SealKey | None:
        for key in self.keys:
            if key.kid == kid:
                return key
        return None


def new_seal_jwk(kid: str | None = None) -> dict[str, str]:
    """A fresh seal key as a JWK (``kid`` defaults to a random one)."""
    name = kid if kid is not None else f"seal-{secrets.token_hex(4)}"
    _check_kid(name, "the new key")
    return {
        "kty": "oct",
        "alg": ALGORITHM,
        "use": "enc",
        "kid": name,
        "k": base64url.encode(secrets.token_bytes(KEY_BYTES)).decode("ascii"),
    }


def load_seal_keys(
    sources: Iterable[str],
    *,
    base_dir: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> SealKeys:
    """The keys ``sources`` hold, in order (see the module docs).

    Raises :class:`SealKeyError` naming the source and what is wrong with it.
    """
    env = os.environ if environ is None else environ
    keys: list[SealKey] = []
    for source in sources:
        keys.extend(_read(source, base_dir or Path.cwd(), env))
    return SealKeys(tuple(keys))


def _read(source: str, base_dir: Path, environ: Mapping[str, str]) -> list[SealKey]:
    if source.startswith("env:"):
        name = source[4:]
        text = environ.get(name)
        if not text:
            raise SealKeyError(
                f"seal key source {source!r}: the environment variable {name} is not set "
                "(or empty); set it to a key made by toolbus keys new --algorithm A256GCM"
            )
        where = f"environment variable {name}"
    else:
        path = Path(source)
        if not path.is_absolute():
            path = base_dir / path
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise SealKeyError(
                f"seal key file {path} cannot be read ({exc.strerror}); make one with "
                "toolbus keys new FILE --algorithm A256GCM"
            ) from None
        where = f"seal key file {path}"
    try:
        document = json.loads(text)
    except ValueError:
        raise SealKeyError(
            f"{where} does not hold JSON; it must hold a JWK made by "
            "toolbus keys new --algorithm A256GCM"
        ) from None
    if isinstance(document, dict) and isinstance(document.get("keys"), list):
        return [_key(jwk, where) for jwk in document["keys"]]
    return [_key(document, where)]


def _key(jwk: Any, where: str) -> SealKey:
    if not isinstance(jwk, dict):
        raise SealKeyError(f"{where}: a key must be a JSON object (a JWK)")
    if jwk.get("kty") != "oct" or jwk.get("alg") != ALGORITHM:
        raise SealKeyError(
            f"{where}: key {jwk.get('kid')!r} is not a seal key (it must say "
            f'"kty": "oct" and "alg": "{ALGORITHM}"); a signing key is never used to seal '
            "state: make a seal key with toolbus keys new --algorithm A256GCM"
        )
    kid = jwk.get("kid")
    if not isinstance(kid, str):
        raise SealKeyError(f"{where}: a seal key must name its kid")
    _check_kid(kid, where)
    encoded = jwk.get("k")
    try:
        secret = base64url.decode(encoded) if isinstance(encoded, str) else b""
    except ValueError:
        secret = b""
    if len(secret) != KEY_BYTES:
        raise SealKeyError(
            f'{where}: seal key {kid!r} must hold {KEY_BYTES} bytes in its "k"; make a new '
            "one with toolbus keys new --algorithm A256GCM"
        )
    return SealKey(kid, secret)


def _check_kid(kid: str, where: str) -> None:
    if not kid or len(kid) > MAX_KID or not kid.isascii() or not kid.isprintable():
        raise SealKeyError(
            f"{where}: a seal key id must be 1 to {MAX_KID} printable ASCII characters"
        )
