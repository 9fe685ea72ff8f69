"""RabbitMQ in AsyncAPI terms: protocol ``amqp``, fanout exchanges as channels, AMQP bindings."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from toolbus.domain.calls.queues import QueueName
from toolbus_rabbitmq.naming import exchange_for
from toolbus_rabbitmq.options import parse_options

#: The AsyncAPI AMQP bindings version written.
BINDING_VERSION = "0.3.0"


class RabbitMQAsyncApi:
    """How a RabbitMQ deployment appears in an AsyncAPI document."""

    def __init__(self, url: str, options: Mapping[str, Any] | None = None) -> None:
        self.options = parse_options(url, options)

    def server(self) -> dict[str, Any]:
        servers = self.options.servers
        return {
            "host": servers[0],
            "protocol": "amqps" if self.options.uses_tls else "amqp",
            "protocolVersion": "0.9.1",
            "pathname": "/" + self.options.vhost.lstrip("/"),
            "description": (
                f"RabbitMQ, virtual host {self.options.vhost!r}; nodes: "
                + ", ".join(servers)
                + ". A queue is a fanout exchange; a service's replicas share a queue "
                "'<exchange>.<service id>' bound to it."
            ),
        }

    def address(self, queue: QueueName) -> str:
        return exchange_for(queue)

    def channel_bindings(self, queue: QueueName) -> dict[str, Any]:
        exchange = {
            "name": exchange_for(queue),
            "type": "fanout",
            "durable": True,
            "autoDelete": False,
            "vhost": self.options.vhost,
        }
        return {
            "amqp": {"is": "routingKey", "exchange": exchange, "bindingVersion": BINDING_VERSION}
        }

    def operation_bindings(self, queue: QueueName, group: str) -> dict[str, Any]:
        # AMQP's operation bindings have no place for the group's queue; the
        # server's description says how it is named.
        return {
            "amqp": {
                "deliveryMode": 2 if queue.persistent else 1,
                "ack": queue.persistent,
                "bindingVersion": BINDING_VERSION,
            }
        }
