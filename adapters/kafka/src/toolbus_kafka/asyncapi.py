"""Kafka in AsyncAPI terms: protocol ``kafka``, topics as channels, consumer groups."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from toolbus.domain.calls.queues import QueueName
from toolbus_kafka.options import parse_options
from toolbus_kafka.security import security_protocol

#: The AsyncAPI Kafka bindings version written.
BINDING_VERSION = "0.5.0"


class KafkaAsyncApi:
    """How a Kafka deployment appears in an AsyncAPI document."""

    def __init__(self, url: str, options: Mapping[str, Any] | None = None) -> None:
        self.options = parse_options(url, options)

    def server(self) -> dict[str, Any]:
        servers = self.options.bootstrap_servers
        protocol = security_protocol(self.options)
        return {
            "host": servers[0],
            "protocol": "kafka-secure" if self.options.uses_tls else "kafka",
            "description": f"Kafka ({protocol}); bootstrap servers: " + ", ".join(servers),
        }

    def address(self, queue: QueueName) -> str:
        return queue.dotted

    def channel_bindings(self, queue: QueueName) -> dict[str, Any]:
        return {"kafka": {"topic": queue.dotted, "bindingVersion": BINDING_VERSION}}

    def operation_bindings(self, queue: QueueName, group: str) -> dict[str, Any]:
        return {
            "kafka": {
                "groupId": {"type": "string", "enum": [group]},
                "bindingVersion": BINDING_VERSION,
            }
        }
