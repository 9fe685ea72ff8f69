"""Registers the Redis state store for ``redis://`` and ``rediss://`` URLs."""

from __future__ import annotations

from toolbus.plugins import StateStoreInfo, StateStoreRegistrar, hookimpl
from toolbus_redis.options import SCHEMES
from toolbus_redis.store import connect


@hookimpl
def toolbus_register_state_stores(register: StateStoreRegistrar) -> None:
    register(StateStoreInfo(schemes=SCHEMES, connect=connect, distribution="toolbus-redis"))
