"""toolbus on Apache Kafka (and Kafka-compatible brokers), through aiokafka.

::

    from toolbus_kafka import connect

    bus = await connect("kafka://127.0.0.1:9092")

or, through the plugin registry, ``toolbus.plugins.connect("kafka://...")``.
A queue maps to the topic ``tenant.namespace.name``; services are consumer
groups; offsets are committed once a request is acked. See
``docs/adapters/kafka.md`` for the URL, the options and the delivery rules.

Modules: ``bus``, ``options``, ``errors`` and ``plugin`` do the jobs their
namesakes do in every adapter. The rest is split by what Kafka makes the
adapter do itself: ``subscription`` (consumer groups and fan-out),
``provisioning`` (creating topics before use, as NATS provisions streams) and
``tracking`` (which offsets may be committed when acks arrive out of order).
Fetched deliveries reach a subscription's readers through the core's
``toolbus._internal.delivery_buffer``, as in every adapter; its readers take turns to fetch.
"""

from toolbus.domain.errors import BrokerOptionError
from toolbus_kafka.bus import KafkaBus, connect
from toolbus_kafka.errors import KafkaTopicError, KafkaUnavailable, MessageRefused
from toolbus_kafka.options import KafkaOptions, parse_options

__all__ = [
    "BrokerOptionError",
    "KafkaBus",
    "KafkaOptions",
    "KafkaTopicError",
    "KafkaUnavailable",
    "MessageRefused",
    "connect",
    "parse_options",
]
