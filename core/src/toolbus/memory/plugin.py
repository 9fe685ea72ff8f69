"""Registers the in-memory bus through the same entry point as every broker adapter."""

from __future__ import annotations

from toolbus.memory.bus import connect
from toolbus.plugins import AdapterInfo, AdapterRegistrar, hookimpl


@hookimpl
def toolbus_register_adapters(register: AdapterRegistrar) -> None:
    register(AdapterInfo(schemes=("memory",), connect=connect, distribution="toolbus"))
