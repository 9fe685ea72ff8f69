"""Registers the NATS adapter for ``nats://`` and ``nats+tls://`` broker and state store URLs."""

from __future__ import annotations

from toolbus.plugins import (
    AdapterInfo,
    AdapterRegistrar,
    StateStoreInfo,
    StateStoreRegistrar,
    hookimpl,
)
from toolbus_nats import state
from toolbus_nats.asyncapi import NatsAsyncApi
from toolbus_nats.bus import connect
from toolbus_nats.options import SCHEMES


@hookimpl
def toolbus_register_adapters(register: AdapterRegistrar) -> None:
    register(
        AdapterInfo(
            schemes=SCHEMES, connect=connect, distribution="toolbus-nats", asyncapi=NatsAsyncApi
        )
    )


@hookimpl
def toolbus_register_state_stores(register: StateStoreRegistrar) -> None:
    register(
        StateStoreInfo(
            schemes=SCHEMES,
            connect=state.connect,
            distribution="toolbus-nats",
            beside_broker=state.connect_beside_broker,
        )
    )
