"""Registers the Pulsar adapter for ``pulsar://`` and ``pulsar+ssl://`` URLs."""

from __future__ import annotations

from toolbus.plugins import AdapterInfo, AdapterRegistrar, hookimpl
from toolbus_pulsar.asyncapi import PulsarAsyncApi
from toolbus_pulsar.bus import connect
from toolbus_pulsar.options import SCHEMES


@hookimpl
def toolbus_register_adapters(register: AdapterRegistrar) -> None:
    register(
        AdapterInfo(
            schemes=SCHEMES, connect=connect, distribution="toolbus-pulsar", asyncapi=PulsarAsyncApi
        )
    )
