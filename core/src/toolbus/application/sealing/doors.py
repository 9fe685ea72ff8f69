"""The state store of a front door: sealed when it is shared, refused when it cannot be.

Every door that keeps state (the gateway, ``toolbus mcp serve``, ``toolbus agent
serve``, ``toolbus approvals``) takes its store through :func:`door_store`, so
that the rule is one rule: a store other processes can reach (anything but
``memory://``) is sealed with the configured seal keys, and without them the
door refuses to start, saying how to make one. A ``memory://`` store lives in
the process: it is sealed only when keys are given anyway.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from toolbus.application.sealing.keys import SealKeyError, SealKeys, load_seal_keys
from toolbus.application.sealing.store import OnRefused, SealedStore, sealed
from toolbus.domain.errors import ConfigError, Problem
from toolbus.ports import StateStore


class SealKeysMissing(ConfigError):
    """A door would keep its state in a shared store without a seal key."""


def shared_url(url: str | None) -> bool:
    """Whether a store at ``url`` is reachable by other processes (not ``memory://``)."""
    return url is not None and not url.startswith("memory:")


def door_seal_keys(
    door: str,
    url: str | None,
    sources: Sequence[str] | None,
    *,
    base_dir: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> SealKeys | None:
    """The keys ``door`` seals its store at ``url`` with; ``None`` for a private store
    given none.

    Raises :class:`SealKeysMissing` for a shared store with no keys, and
    :class:`~toolbus.domain.errors.ConfigError` naming a key that cannot be read.
    Called before the store is connected, so a door without keys stops at once.
    """
    if not sources:
        if shared_url(url):
            raise SealKeysMissing([_missing(door, _scheme(url))])
        return None
    try:
        return load_seal_keys(sources, base_dir=base_dir, environ=environ)
    except SealKeyError as exc:
        raise ConfigError([Problem(door, "seal-keys", str(exc))]) from None


def door_store(
    door: str,
    store: StateStore,
    keys: SealKeys | None,
    *,
    private: bool,
    on_refused: OnRefused | None = None,
) -> StateStore:
    """``store`` as ``door`` uses it: sealed with ``keys``; as it is without them only if
    it is ``private`` (in this process) or sealed already (:class:`SealKeysMissing`
    otherwise)."""
    if isinstance(store, SealedStore):
        return store
    if keys is None:
        if not private:
            raise SealKeysMissing([_missing(door, type(store).__name__)])
        return store
    return sealed(store, keys, on_refused=on_refused)


def _missing(door: str, kind: str) -> Problem:
    return Problem(
        door,
        "seal-keys",
        f"keeps its state in a shared store ({kind}), which whoever can reach it could "
        "forge without a seal key. Make one with `toolbus keys new seal.jwk --algorithm "
        "A256GCM`, give the same key to every door that shares the store, and name it in "
        'toolbus.toml: seal-keys = ["seal.jwk"] (or TOOLBUS_SEAL_KEYS=seal.jwk)',
    )


def _scheme(url: str | None) -> str:
    """The store's kind, all of its URL a message needs (the rest may hold a password)."""
    return (url or "").partition("://")[0] or "?"
