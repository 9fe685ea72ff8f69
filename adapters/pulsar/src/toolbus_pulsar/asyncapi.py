"""Pulsar in AsyncAPI terms: protocol ``pulsar``, full topic names, tenant and namespace."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from toolbus.domain.calls.queues import QueueName
from toolbus_pulsar.options import parse_options

#: The AsyncAPI Pulsar bindings version written.
BINDING_VERSION = "0.1.0"


class PulsarAsyncApi:
    """How a Pulsar deployment appears in an AsyncAPI document."""

    def __init__(self, url: str, options: Mapping[str, Any] | None = None) -> None:
        self.options = parse_options(url, options)

    def server(self) -> dict[str, Any]:
        parts = urlsplit(self.options.safe_url)
        return {
            "host": parts.netloc,
            "protocol": parts.scheme,
            "description": "Pulsar binary protocol; shared subscriptions for competing consumers.",
        }

    def address(self, queue: QueueName) -> str:
        return queue.topic

    def channel_bindings(self, queue: QueueName) -> dict[str, Any]:
        return {
            "pulsar": {
                "namespace": queue.namespace,
                "persistence": "persistent" if queue.persistent else "non-persistent",
                "bindingVersion": BINDING_VERSION,
            }
        }

    def operation_bindings(self, queue: QueueName, group: str) -> dict[str, Any]:
        return {}
