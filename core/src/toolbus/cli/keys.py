"""``toolbus keys new``: make a key pair for signing calls, or a key that seals door state."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated

import typer

from toolbus.application.identity import SigningKeyError, generate_key, private_jwk, public_jwk
from toolbus.application.sealing import SealKeyError, new_seal_jwk
from toolbus.application.sealing.keys import ALGORITHM as SEAL_ALGORITHM
from toolbus.cli._app import app
from toolbus.cli._help import CommandApp
from toolbus.cli.plugin_api import fail

keys_app = CommandApp(
    name="keys",
    help="Make keys: for signed calls (needs toolbus\\[signing]), or to seal door state.",
    no_args_is_help=True,
)
app.add_typer(keys_app, name="keys")


@keys_app.command("new")
def new(
    private: Annotated[
        Path,
        typer.Argument(
            metavar="PRIVATE_FILE",
            help="Where to write the private key (JWK); readable by you only.",
        ),
    ],
    public: Annotated[
        Path | None,
        typer.Option(
            metavar="PUBLIC_FILE",
            help="Where to write the public key (JWK) that services verify with.",
        ),
    ] = None,
    kid: Annotated[
        str | None,
        typer.Option(
            metavar="NAME",
            help="Key id; default: the key's thumbprint. A dated name rotates well.",
        ),
    ] = None,
    algorithm: Annotated[
        str,
        typer.Option(
            metavar="Ed25519|ES256|HS256|A256GCM",
            help="Ed25519 (default), ES256, or HS256 (a shared secret) to sign calls; "
            "A256GCM for a seal key (seal-keys: what doors keep in a shared store).",
        ),
    ] = "Ed25519",
) -> None:
    """Generate a signing key (the caller keeps the private file, services get the public
    one), or with --algorithm A256GCM a seal key every door sharing a store is given."""
    if private.exists():
        fail(f"{private} exists already; choose another file name (keys are never overwritten)")
    if algorithm == SEAL_ALGORITHM:
        try:
            _write_private(private, new_seal_jwk(kid))
        except SealKeyError as exc:
            fail(str(exc))
        typer.echo(
            f"seal key written to {private}: give every door that shares the state store this "
            'same file, kept secret, and name it in toolbus.toml: seal-keys = ["'
            f'{private.name}"]',
            err=True,
        )
        return
    try:
        key = generate_key(algorithm, kid)
    except SigningKeyError as exc:
        fail(str(exc))
    _write_private(private, private_jwk(key))
    typer.echo(f"private key {key.kid} written to {private}", err=True)
    if algorithm == "HS256":
        typer.echo("a shared secret: give services this same file, kept just as secret", err=True)
        return
    if public is not None:
        public.write_text(json.dumps(public_jwk(key)) + "\n", encoding="utf-8")
        typer.echo(f"public key written to {public}", err=True)
    else:
        typer.echo(json.dumps(public_jwk(key)))


def _write_private(path: Path, jwk: object) -> None:
    # Created readable by the owner only, before any secret is written to it.
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        json.dump(jwk, handle)
