"""``toolbus keys new``: make a key pair for signing calls."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated

import typer

from toolbus.application.identity import SigningKeyError, generate_key, private_jwk, public_jwk
from toolbus.cli._app import app
from toolbus.cli._help import CommandApp
from toolbus.cli.plugin_api import fail

keys_app = CommandApp(
    name="keys",
    help="Make keys for signed calls (needs toolbus\\[signing]).",
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
            metavar="Ed25519|ES256|HS256",
            help="Ed25519 (default), ES256, or HS256 (a shared secret).",
        ),
    ] = "Ed25519",
) -> None:
    """Generate a signing key; the caller keeps the private file, services get the public one."""
    if private.exists():
        fail(f"{private} exists already; choose another file name (keys are never overwritten)")
    try:
        key = generate_key(algorithm, kid)
    except SigningKeyError as exc:
        fail(str(exc))
    # Created readable by the owner only, before any secret is written to it.
    descriptor = os.open(private, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        json.dump(private_jwk(key), handle)
    typer.echo(f"private key {key.kid} written to {private}", err=True)
    if algorithm == "HS256":
        typer.echo("a shared secret: give services this same file, kept just as secret", err=True)
        return
    if public is not None:
        public.write_text(json.dumps(public_jwk(key)) + "\n", encoding="utf-8")
        typer.echo(f"public key written to {public}", err=True)
    else:
        typer.echo(json.dumps(public_jwk(key)))
