"""Errors the Kafka adapter raises on top of toolbus's own (each says what to do next)."""

from __future__ import annotations

from toolbus.domain.errors import BrokerUnavailable, MessageTooLarge, ToolbusError


class KafkaTopicError(ToolbusError):
    """A topic toolbus needs does not exist and could not be created."""

    def __init__(self, topic: str, reason: str) -> None:
        self.topic = topic
        self.reason = reason
        super().__init__(
            f"Kafka topic {topic!r} does not exist and could not be created: {reason}; "
            "create it yourself (kafka-topics.sh --create --topic "
            f"{topic} --partitions N), or let this client create topics (ACL "
            "CREATE on the cluster or the topic), then try again"
        )


class KafkaUnavailable(BrokerUnavailable):
    """The Kafka brokers could not be reached, or refused a request."""


class MessageRefused(MessageTooLarge):
    """The broker refused a message as too large: its limit is below toolbus's own."""

    def __init__(self, size: int, topic: str) -> None:
        self.size = size
        #: The broker's limit is not known to the client.
        self.limit = 0
        self.topic = topic
        ToolbusError.__init__(
            self,
            f"the Kafka broker refused a message of {size:,} bytes on topic {topic!r} as too "
            "large; raise the topic's max.message.bytes (and the broker's message.max.bytes), "
            "or lower the adapter's max_message_size to what the broker accepts",
        )
