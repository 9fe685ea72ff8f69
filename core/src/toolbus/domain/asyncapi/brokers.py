"""How a broker appears in an AsyncAPI document: its server, channel addresses and bindings.

Each broker adapter describes itself (an :class:`AsyncApiBroker`, registered
with the adapter, see ``toolbus.plugins.AdapterInfo``): the AsyncAPI protocol
name, where its servers are, what a queue is called on it, and the AsyncAPI
bindings of its servers, channels and operations. A broker whose adapter says
nothing gets :class:`PlainBroker`: the URL's scheme as the protocol, queue
names as written, no bindings.
"""

from __future__ import annotations

from typing import Any, Protocol
from urllib.parse import urlsplit

from toolbus.domain.calls.queues import QueueName


class AsyncApiBroker(Protocol):
    """A broker described in AsyncAPI 3.0 terms."""

    def server(self) -> dict[str, Any]:
        """The AsyncAPI Server Object: ``host``, ``protocol``, and optionally
        ``pathname``, ``protocolVersion``, ``description``, ``bindings``."""
        ...

    def address(self, queue: QueueName) -> str:
        """What the broker calls ``queue`` (a NATS subject, a Kafka or Pulsar topic)."""
        ...

    def channel_bindings(self, queue: QueueName) -> dict[str, Any]:
        """The channel's bindings (``{"kafka": {...}}``); empty when it has none."""
        ...

    def operation_bindings(self, queue: QueueName, group: str) -> dict[str, Any]:
        """The bindings of receiving ``queue`` as competing consumers in ``group``."""
        ...


class PlainBroker:
    """A broker described by its URL alone: scheme as protocol, queue names as written."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.protocol = parts.scheme or "memory"
        # Credentials stay out: the document may be published.
        self.host = parts.hostname or parts.netloc.rpartition("@")[2] or "localhost"
        if parts.port is not None:
            self.host = f"{self.host}:{parts.port}"

    def server(self) -> dict[str, Any]:
        return {"host": self.host, "protocol": self.protocol}

    def address(self, queue: QueueName) -> str:
        return queue.raw

    def channel_bindings(self, queue: QueueName) -> dict[str, Any]:
        return {}

    def operation_bindings(self, queue: QueueName, group: str) -> dict[str, Any]:
        return {}
