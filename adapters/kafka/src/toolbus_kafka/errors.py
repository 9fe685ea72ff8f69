"""Errors the Kafka adapter raises on top of toolbus's own (each says what to do next)."""

from __future__ import annotations

from toolbus.domain.errors import BusClosed, MessageRefused, ToolbusError


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


class KafkaUnavailable(BusClosed):
    """The Kafka brokers could not be reached, or refused a request."""


def message_refused(size: int, topic: str) -> MessageRefused:
    """The broker refused a message of ``size`` bytes on ``topic`` as too large."""
    return MessageRefused(
        size,
        f"the Kafka broker refused a message of {size:,} bytes on topic {topic!r} as too large",
        "raise the topic's max.message.bytes (and the broker's message.max.bytes), or lower "
        "the adapter's max_message_size to what the broker accepts",
    )
