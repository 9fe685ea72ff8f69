"""What the commands that read and write the doors' shared state have in common.

``toolbus approvals`` and ``toolbus tasks`` (and ``toolbus call --async``) work
in the state store the doors share (``state`` in ``toolbus.toml``, or
``TOOLBUS_STATE``), sealed with the doors' seal keys (``seal-keys``), so that
what they write reaches whichever replica of whichever door. Whoever runs them
proves who they are like every other client: with their API key
(``TOOLBUS_API_KEY``), checked against ``[credentials]`` in ``toolbus.toml``,
never a name given on the command line.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, TypeVar

import typer

from toolbus.application.identity.credentials import Secret, load_credentials
from toolbus.application.sealing import SealKeys
from toolbus.application.sealing.doors import door_store, shared_url
from toolbus.cli.plugin_api import fail, redact_url, run
from toolbus.domain.errors import ConfigError
from toolbus.plugins import connect_state
from toolbus.ports import StateStore
from toolbus.runtime import seal_keys_of
from toolbus.settings import Settings, load_settings

T = TypeVar("T")

#: The environment variable holding the caller's API key (never a flag: it would be
#: in the shell's history and the process list).
API_KEY_ENV = "TOOLBUS_API_KEY"

StateOption = Annotated[
    str | None,
    typer.Option(
        "--state",
        metavar="URL",
        help="State store URL; default TOOLBUS_STATE, then state in toolbus.toml.",
    ),
]


@dataclass(frozen=True, slots=True)
class DoorState:
    """Where the doors keep their state, the keys that seal it, and this command's name
    (in messages about the keys)."""

    settings: Settings
    keys: SealKeys | None
    door: str

    @property
    def base(self) -> Path:
        path = self.settings.file_path
        return path.parent if path is not None else Path.cwd()


def door_state(state: str | None, *, door: str, missing: str) -> DoorState:
    """The doors' state store the settings name; exits 2 with ``missing`` (what the user
    should do) when none is named, or naming the fix for the seal keys."""
    try:
        settings = load_settings(state=state)
    except ConfigError as exc:
        fail(str(exc))
    if settings.state is None:
        fail(missing)
    base = settings.file_path.parent if settings.file_path is not None else Path.cwd()
    try:
        keys = seal_keys_of(settings, base, door=door, url=settings.state)
    except ConfigError as exc:
        fail(str(exc))
    return DoorState(settings, keys, door)


def authenticated_user(settings: Settings, *, who: str) -> str:
    """Who runs the command, proven by their API key; exits 2 naming the fix otherwise.
    ``who`` names them in messages (``approvers``, ``callers``)."""
    base = settings.file_path.parent if settings.file_path is not None else Path.cwd()
    try:
        table = load_credentials(settings=settings.file, base_dir=base)
    except ConfigError as exc:
        fail(str(exc))
    if table is None or len(table) == 0:
        fail(
            f"{who} prove who they are with an API key, and toolbus.toml has no "
            "[credentials] table to check one against; add their keys there "
            '([[credentials.api-keys]] user = "ops", env = "..."), as the gateway has them'
        )
    presented = os.environ.get(API_KEY_ENV)
    if not presented:
        fail(
            f"set {API_KEY_ENV} to your API key: {who} prove who they are, the command "
            "line cannot name them"
        )
    identity = table.authenticate(Secret(presented))
    if identity is None:
        fail(f"{API_KEY_ENV} is not an API key of [credentials] in toolbus.toml")
    return identity.user


def with_store(where: DoorState, what: str, work: Callable[[StateStore], Awaitable[T]]) -> T:
    """Run ``work`` with the doors' store, sealed as the doors seal it; says on stderr
    where ``what`` (``approvals``, ``tasks``) are read from."""
    url, options = where.settings.state, where.settings.state_options
    assert url is not None

    async def main() -> T:
        store = await connect_state(url, options)
        try:
            return await work(
                door_store(where.door, store, where.keys, private=not shared_url(url))
            )
        finally:
            await store.close()

    typer.echo(f"{what} in {redact_url(url)}", err=True)
    return run(main)
