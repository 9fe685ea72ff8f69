"""Keys from files and environment variables: every form, and a clear error for each mistake."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from toolbus.application.identity import (
    CallSigner,
    CallVerifier,
    SigningKeyError,
    generate_key,
    load_key,
    load_keys,
    private_jwk,
    public_jwk,
)


def write(path: Path, data: object) -> str:
    path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
    return str(path)


def pem(key: object, private: bool) -> str:
    if private:
        return key.private_bytes(  # type: ignore[attr-defined,no-any-return]
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ).decode()
    return (
        key.public_key()
        .public_bytes(  # type: ignore[attr-defined,no-any-return]
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        .decode()
    )


def roundtrip(signer: CallSigner, verifier: CallVerifier) -> bool:
    token = signer.sign(call_id="c", audience="s", user="u", body=b"{}")
    caller = verifier.verify(token, call_id="c", audiences={"s"}, user="u", body=b"{}")
    return caller.verified and caller.key_id == signer.key_id


def test_jwk_files_a_key_set_and_env_variables_load_by_key_id(tmp_path: Path) -> None:
    first, second, secret = (
        generate_key(kid="a"),
        generate_key("ES256", "b"),
        generate_key("HS256", "c"),
    )
    key_set = write(tmp_path / "set.json", {"keys": [public_jwk(first), public_jwk(second)]})
    environ = {"SHARED": json.dumps(private_jwk(secret))}
    keys = load_keys([key_set, "env:SHARED"], environ)
    assert [k.kid for k in keys] == ["a", "b", "c"]
    verifier = CallVerifier(keys)
    for key in (first, second, secret):
        assert roundtrip(CallSigner(key), verifier)
    signer = CallSigner.load(write(tmp_path / "a.jwk", private_jwk(first)))
    assert roundtrip(signer, verifier)


@pytest.mark.parametrize(
    "make", [ed25519.Ed25519PrivateKey.generate, lambda: ec.generate_private_key(ec.SECP256R1())]
)
def test_pem_keys_get_their_thumbprint_as_key_id(tmp_path: Path, make: object) -> None:
    private = make()  # type: ignore[operator]
    signer = CallSigner(load_key(write(tmp_path / "private.pem", pem(private, True))))
    public = load_key(write(tmp_path / "public.pem", pem(private, False)))
    assert public.kid == signer.key_id == public.thumbprint()
    assert roundtrip(signer, CallVerifier([public]))


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"kty": "oct", "k": "' + "A" * 43 + '"}', "a shared secret needs a 'kid'"),
        ('{"kty": "oct", "kid": "short", "k": "AAAA"}', "at least 32 random bytes"),
        ('{"kty": "OKP", "crv": "Ed25519"', "not valid JSON"),
        ('{"keys": []}', "'keys' must be a non-empty list"),
        ('{"kty": "EC", "crv": "P-384", "x": "AA", "y": "AA"}', "not a usable key"),
        ("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n", "not a JWK"),
    ],
    ids=["secret-without-kid", "short-secret", "bad-json", "empty-set", "bad-curve", "bad-pem"],
)
def test_a_bad_key_file_is_named_with_the_fix(tmp_path: Path, content: str, message: str) -> None:
    source = write(tmp_path / "key.json", content)
    with pytest.raises(SigningKeyError, match=message) as raised:
        load_keys([source])
    assert source in str(raised.value)


def test_an_rsa_key_is_refused_with_the_types_that_work(tmp_path: Path) -> None:
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    source = write(tmp_path / "rsa.pem", pem(private, True))
    with pytest.raises(SigningKeyError, match="Ed25519 or EC P-256"):
        load_keys([source])


def test_missing_sources_and_duplicate_ids_are_named(tmp_path: Path) -> None:
    with pytest.raises(SigningKeyError, match="environment variable NOPE is not set"):
        load_keys(["env:NOPE"], {})
    with pytest.raises(SigningKeyError, match=r"cannot read the file .*env:VARIABLE"):
        load_keys([str(tmp_path / "missing.jwk")])
    key = public_jwk(generate_key(kid="same"))
    one, two = write(tmp_path / "1.jwk", key), write(tmp_path / "2.jwk", key)
    with pytest.raises(SigningKeyError, match="key id 'same' is given twice"):
        load_keys([one, two])


def test_a_signer_needs_a_private_key_and_never_shows_it() -> None:
    key = generate_key(kid="gateway")
    with pytest.raises(SigningKeyError, match="a signer needs the private key"):
        CallSigner(public_jwk(key))
    signer = CallSigner(key)
    assert repr(signer) == "<CallSigner kid='gateway' alg=Ed25519>"
    assert private_jwk(key)["d"] not in repr(signer)
    with pytest.raises(SigningKeyError, match="a verifier needs at least one key"):
        CallVerifier([])
    with pytest.raises(SigningKeyError, match="unknown algorithm 'RS256'"):
        generate_key("RS256")
    with pytest.raises(TypeError, match="not the string"):
        CallSigner(key, groups="admin")


def test_without_the_signing_extra_the_core_works_and_signing_says_what_to_install() -> None:
    script = """
import sys
sys.modules["joserfc"] = None  # as if toolbus[signing] were not installed
import asyncio, toolbus
from toolbus.application.identity import SigningKeyError, generate_key

async def main():
    @toolbus.tool_service("echo")
    async def echo(text: str) -> str:
        return text
    bus = await toolbus.connect("memory://")
    async with toolbus.running(bus, echo), toolbus.ToolServiceClient(bus) as client:
        print(await client.call(request_queue=echo.request_queue,
                                response_queue=echo.response_queue, arguments={"text": "ok"}))

asyncio.run(main())
try:
    generate_key()
except SigningKeyError as exc:
    print(exc)
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "ok",
        "call signing needs the JOSE library: pip install 'toolbus[signing]'",
    ]


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda jwk: jwk.OctKey.generate_key(128, {"kid": "short"}), "at least 32"),
        (lambda jwk: jwk.OctKey.generate_key(256), "needs a 'kid'"),
        (lambda jwk: jwk.RSAKey.generate_key(2048), "Ed25519"),
    ],
    ids=["short-secret", "secret-without-kid", "rsa"],
)
@pytest.mark.parametrize("use", ["signer", "verifier"])
def test_a_key_object_gets_the_checks_a_key_file_gets(make: object, reason: str, use: str) -> None:
    from joserfc import jwk

    key = make(jwk)  # type: ignore[operator]
    with pytest.raises(SigningKeyError, match=reason):
        if use == "signer":
            CallSigner(key)
        else:
            CallVerifier([key])


def test_a_key_for_encryption_only_is_refused_when_the_signer_is_made() -> None:
    key = private_jwk(generate_key("Ed25519", "encrypts"))
    key["use"] = "enc"

    with pytest.raises(SigningKeyError, match="key 'encrypts' cannot sign") as refused:
        CallSigner(key)
    assert key["d"] not in str(refused.value)
