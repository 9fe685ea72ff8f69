"""Sealed door state: what a front door keeps in a shared store, authenticated and bound.

* :func:`sealed` wraps a :class:`~toolbus.ports.StateStore` so that every value
  is encrypted and authenticated (AES-GCM) and bound to its namespace and key;
* :class:`Cipher` seals one value under the keys, bound to a namespace and a key
  (a tool service's input state, :mod:`toolbus.application.calls.asking`);
* :func:`load_seal_keys` reads the keys (``seal-keys`` in ``toolbus.toml``,
  or ``TOOLBUS_SEAL_KEYS``) that every replica of every door shares.

See docs/state-stores.md#sealed-state.
"""

from toolbus.application.sealing.keys import (
    SealKey,
    SealKeyError,
    SealKeys,
    load_seal_keys,
    new_seal_jwk,
)
from toolbus.application.sealing.store import Cipher, RefusedRecord, SealedStore, sealed

__all__ = [
    "Cipher",
    "RefusedRecord",
    "SealKey",
    "SealKeyError",
    "SealKeys",
    "SealedStore",
    "load_seal_keys",
    "new_seal_jwk",
    "sealed",
]
