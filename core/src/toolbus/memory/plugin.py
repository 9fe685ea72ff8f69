"""Registers the in-memory bus and state store through the same entry points as every adapter."""

from __future__ import annotations

from toolbus.memory import state
from toolbus.memory.bus import connect
from toolbus.plugins import (
    AdapterInfo,
    AdapterRegistrar,
    StateStoreInfo,
    StateStoreRegistrar,
    hookimpl,
)


@hookimpl
def toolbus_register_adapters(register: AdapterRegistrar) -> None:
    register(AdapterInfo(schemes=("memory",), connect=connect, distribution="toolbus"))


@hookimpl
def toolbus_register_state_stores(register: StateStoreRegistrar) -> None:
    register(StateStoreInfo(schemes=("memory",), connect=state.connect, distribution="toolbus"))
