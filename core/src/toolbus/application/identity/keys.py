"""Signing and verification keys: loaded from files or environment variables, by key id.

A key *source* is a file path, or ``env:NAME`` for an environment variable's
value. Either holds a JWK, a JWK Set (``{"keys": [...]}``) or a PEM key.
Every key has a key id (``kid``), which is how a service picks the key a token
names, so that several keys can be live at once while they rotate:

* a JWK's own ``kid``; for a PEM key (or a public JWK without ``kid``) the
  RFC 7638 thumbprint;
* a shared secret (``"kty": "oct"``) must name its ``kid``: a thumbprint would
  publish a hash of the secret in every token.

Three algorithms, one per key type: Ed25519 (``OKP`` keys, RFC 9864's name for
EdDSA over Ed25519), ES256 (``EC`` keys on P-256) and HS256 (``oct`` secrets of
at least 32 bytes). Nothing else is ever accepted, ``none`` least of all.
"""

from __future__ import annotations

import hmac
import json
import os
import warnings
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolbus.domain.errors import ToolbusError

if TYPE_CHECKING:
    from joserfc.jwk import Key

#: Key type (and curve) -> the one signing algorithm used with it.
ALGORITHMS = {"OKP:Ed25519": "Ed25519", "EC:P-256": "ES256", "oct": "HS256"}
MIN_SECRET_BYTES = 32
INSTALL_HINT = "call signing needs the JOSE library: pip install 'toolbus[signing]'"


class SigningKeyError(ToolbusError, ValueError):
    """A signing or verification key cannot be loaded or used."""


def jose() -> Any:
    """joserfc's modules, or a clear error naming the extra to install."""
    try:
        from joserfc import jwk, jws
    except ImportError as exc:
        raise SigningKeyError(INSTALL_HINT) from exc
    return jwk, jws


def algorithm_for(key: Key) -> str:
    """The signing algorithm for ``key``, or :class:`SigningKeyError` for a key type we refuse."""
    kind = key.key_type if key.key_type == "oct" else f"{key.key_type}:{key.get('crv')}"
    algorithm = ALGORITHMS.get(kind)
    if algorithm is None:
        raise SigningKeyError(
            f"key {key.kid!r} is of type {kind}; use an Ed25519 (OKP), P-256 (EC) or "
            "shared-secret (oct) key"
        )
    return algorithm


def signs_with(key: Key, algorithm: Any) -> Callable[[bytes], bytes]:
    """What signs a token's signing input with ``key`` and ``algorithm`` (joserfc's model).

    The key's checks (``key_ops``, private) are made here, once. A shared
    secret signs with the standard library's HMAC, the one joserfc runs, keyed
    once: each token copies the keyed state (``hmac.HMAC.copy``) rather than
    hashing the key's pads again, a fifth of an HMAC's cost.
    """
    secret = key.get_op_key("sign")
    if algorithm.name == "HS256":
        return _keyed_hmac(key, secret)
    sign = algorithm.sign
    return lambda data: sign(data, key)


def verifies_with(key: Key, algorithm: Any) -> Callable[[bytes, bytes], bool]:
    """What checks a signature over a signing input with ``key`` and ``algorithm``,
    its key checks made once (see :func:`signs_with`)."""
    secret = key.get_op_key("verify")
    if algorithm.name == "HS256":
        mac, same = _keyed_hmac(key, secret), hmac.compare_digest
        return lambda data, signature: same(mac(data), signature)
    verify = algorithm.verify
    return lambda data, signature: verify(data, signature, key)


def _keyed_hmac(key: Key, secret: object) -> Callable[[bytes], bytes]:
    """HMAC-SHA256 under ``secret``, its keyed state computed once."""
    # as_key refuses short secrets; an empty one would forge nothing
    if not isinstance(secret, bytes) or not secret:
        raise SigningKeyError(f"key {key.kid!r} is not a usable secret")
    keyed = hmac.new(secret, digestmod="sha256")

    def mac(data: bytes) -> bytes:
        state = keyed.copy()
        state.update(data)
        return state.digest()

    return mac


def _read(source: str, environ: Mapping[str, str]) -> str:
    if source.startswith("env:"):
        name = source[4:]
        value = environ.get(name)
        if not value:
            raise SigningKeyError(f"key source {source}: environment variable {name} is not set")
        return value
    try:
        return Path(source).read_text(encoding="utf-8")
    except OSError as exc:
        raise SigningKeyError(
            f"key source {source}: cannot read the file ({exc.strerror}); give a key file "
            "path or env:VARIABLE"
        ) from None


def _import(source: str, data: Any) -> Key:
    jwk, _ = jose()
    try:
        # The library warns about weak keys; the checks below refuse them with a reason.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if isinstance(data, dict):
                key: Key = jwk.JWKRegistry.import_key(data)
            else:
                key = _import_pem(source, jwk, data)
    except SigningKeyError:
        raise
    except Exception as exc:
        # The library's message, never the key material.
        raise SigningKeyError(
            f"key source {source}: not a usable key ({type(exc).__name__})"
        ) from None
    return _checked(f"key source {source}", key)


def _checked(where: str, key: Key) -> Key:
    """``key`` if it is fit to sign or verify with; every key passes here, however given."""
    if key.key_type == "oct":
        if not key.get("kid"):
            raise SigningKeyError(
                f"{where}: a shared secret needs a 'kid' (any name you choose); "
                "a thumbprint of a secret would reveal a hash of it"
            )
        secret = key.raw_value
        if not isinstance(secret, bytes) or len(secret) < MIN_SECRET_BYTES:
            raise SigningKeyError(
                f"{where}: a shared secret must be at least {MIN_SECRET_BYTES} random bytes"
            )
    key.ensure_kid()
    algorithm_for(key)
    return key


def _import_pem(source: str, jwk: Any, text: str) -> Key:
    for kind in ("OKP", "EC"):
        try:
            key: Key = jwk.JWKRegistry.import_key(text, kind)
            return key
        except Exception:
            continue
    raise SigningKeyError(
        f"key source {source}: not a JWK, a JWK Set or a PEM key of type Ed25519 or EC P-256"
    )


def as_key(key: Key | Mapping[str, Any]) -> Key:
    """A key object from a key object or a JWK given as a dict, checked alike.

    A ready key object gets the checks a key from text gets: a shared secret
    needs its ``kid`` and at least :data:`MIN_SECRET_BYTES` bytes, and only the
    three key types are accepted.
    """
    if isinstance(key, Mapping):
        return _import("a JWK", dict(key))
    jwk, _ = jose()
    if not isinstance(key, jwk.OctKey | jwk.OKPKey | jwk.ECKey | jwk.RSAKey):
        raise SigningKeyError(
            f"{type(key).__name__} is not a key; give a joserfc key object or a JWK dict"
        )
    return _checked(f"key {key.get('kid') or type(key).__name__!r}", key)


def load_keys(sources: Iterable[str], environ: Mapping[str, str] | None = None) -> list[Key]:
    """Every key in ``sources`` (files or ``env:NAME``), each with a unique key id."""
    env = os.environ if environ is None else environ
    keys: list[Key] = []
    seen: dict[str, str] = {}
    for source in sources:
        text = _read(source, env).strip()
        try:
            data = json.loads(text) if text.startswith("{") else text
        except json.JSONDecodeError as exc:
            raise SigningKeyError(f"key source {source}: not valid JSON ({exc.msg})") from None
        entries = data["keys"] if isinstance(data, dict) and "keys" in data else [data]
        if not isinstance(entries, list) or not entries:
            raise SigningKeyError(f"key source {source}: 'keys' must be a non-empty list of JWKs")
        for entry in entries:
            key = _import(source, entry)
            kid = str(key.kid)
            if kid in seen:
                raise SigningKeyError(
                    f"key id {kid!r} is given twice ({seen[kid]} and {source}); "
                    "every key needs its own kid"
                )
            seen[kid] = source
            keys.append(key)
    return keys


def load_key(source: str, environ: Mapping[str, str] | None = None) -> Key:
    """The one key in ``source``: a signer's private key, or a shared secret."""
    keys = load_keys([source], environ)
    if len(keys) != 1:
        raise SigningKeyError(
            f"key source {source}: holds {len(keys)} keys; a signer uses exactly one"
        )
    return keys[0]


def generate_key(algorithm: str = "Ed25519", kid: str | None = None) -> Key:
    """A new private key (or shared secret) for ``algorithm``: Ed25519, ES256 or HS256."""
    jwk, _ = jose()
    parameters = {"kid": kid} if kid else None
    if algorithm == "Ed25519":
        key: Key = jwk.OKPKey.generate_key("Ed25519", parameters, auto_kid=kid is None)
    elif algorithm == "ES256":
        key = jwk.ECKey.generate_key("P-256", parameters, auto_kid=kid is None)
    elif algorithm == "HS256":
        if not kid:
            raise SigningKeyError("a shared secret needs a kid: generate_key('HS256', kid='...')")
        key = jwk.OctKey.generate_key(8 * MIN_SECRET_BYTES, parameters)
    else:
        raise SigningKeyError(f"unknown algorithm {algorithm!r}; use Ed25519, ES256 or HS256")
    return key


def public_jwk(key: Key) -> dict[str, Any]:
    """What a service needs to verify ``key``'s tokens (a shared secret is its own public part)."""
    key.ensure_kid()
    data: dict[str, Any] = dict(key.as_dict(private=key.key_type == "oct"))
    return data


def private_jwk(key: Key) -> dict[str, Any]:
    """The whole key, to store for the signer (keep it secret)."""
    key.ensure_kid()
    return dict(key.as_dict(private=True))
