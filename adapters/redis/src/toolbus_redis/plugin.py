"""Registers the Redis state store for ``redis://`` and ``rediss://`` URLs."""

from __future__ import annotations

from toolbus.plugins import StateStoreInfo, StateStoreRegistrar, hookimpl
from toolbus_redis.state import connect
from toolbus_redis.state_options import SCHEMES


@hookimpl
def toolbus_register_state_stores(register: StateStoreRegistrar) -> None:
    register(StateStoreInfo(schemes=SCHEMES, connect=connect, distribution="toolbus-redis"))
