"""NATS in AsyncAPI terms: protocol ``nats``, subjects as channel addresses, queue groups."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from toolbus.domain.calls.queues import QueueName
from toolbus_nats.naming import subject_for
from toolbus_nats.options import parse_options

#: The AsyncAPI NATS bindings version written.
BINDING_VERSION = "0.1.0"


class NatsAsyncApi:
    """How a NATS deployment appears in an AsyncAPI document."""

    def __init__(self, url: str, options: Mapping[str, Any] | None = None) -> None:
        self.options = parse_options(url, options)

    def server(self) -> dict[str, Any]:
        servers = self.options.servers
        server: dict[str, Any] = {"host": servers[0], "protocol": "nats"}
        server["description"] = (
            "NATS" + (" over TLS" if self.options.tls else "") + "; servers: " + ", ".join(servers)
            + ". Non-persistent queues are core NATS subjects; persistent ones are stored in "
            "JetStream streams."
        )  # fmt: skip
        return server

    def address(self, queue: QueueName) -> str:
        return subject_for(queue)

    def channel_bindings(self, queue: QueueName) -> dict[str, Any]:
        return {}

    def operation_bindings(self, queue: QueueName, group: str) -> dict[str, Any]:
        return {"nats": {"queue": group[:255], "bindingVersion": BINDING_VERSION}}
