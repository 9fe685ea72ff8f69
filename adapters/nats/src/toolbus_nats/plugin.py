"""Registers the NATS adapter for ``nats://`` and ``nats+tls://`` broker URLs."""

from __future__ import annotations

from toolbus.plugins import AdapterInfo, AdapterRegistrar, hookimpl
from toolbus_nats.bus import connect
from toolbus_nats.options import SCHEMES


@hookimpl
def toolbus_register_adapters(register: AdapterRegistrar) -> None:
    register(AdapterInfo(schemes=SCHEMES, connect=connect, distribution="toolbus-nats"))
