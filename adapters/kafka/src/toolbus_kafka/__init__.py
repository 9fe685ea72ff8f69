"""toolbus on Apache Kafka (and Kafka-compatible brokers), through aiokafka.

::

    from toolbus_kafka import connect

    bus = await connect("kafka://127.0.0.1:9092")

or, through the plugin registry, ``toolbus.plugins.connect("kafka://...")``.
A queue maps to the topic ``tenant.namespace.name``; services are consumer
groups; offsets are committed once a request is acked. See
``docs/adapters/kafka.md`` for the URL, the options and the delivery rules.

Modules, as in every adapter: ``plugin`` (the entry point), ``options`` (URL
and options), ``security`` (TLS and SASL), ``bus`` (the Bus port),
``publishing`` (the producer, partitions by call id), ``subscription``
(reading; a package: consumer groups, fan-out, and the offsets a group may
commit), ``provisioning`` (creating topics before use, as NATS provisions
streams), ``errors`` (aiokafka's failures as toolbus errors), ``logs``
(aiokafka's log lines, throttled) and ``asyncapi`` (Kafka in AsyncAPI terms).
Queue names map to topics in ``bus`` (``tenant.namespace.name``), so there is
no ``naming``. Fetched deliveries reach
a subscription's readers through the core's ``toolbus._internal.delivery_buffer``,
as in every adapter; its readers take turns to fetch.
"""

from toolbus.domain.errors import BrokerOptionError
from toolbus_kafka.bus import KafkaBus, connect
from toolbus_kafka.errors import KafkaTopicError, KafkaUnavailable
from toolbus_kafka.options import KafkaOptions, parse_options

__all__ = [
    "BrokerOptionError",
    "KafkaBus",
    "KafkaOptions",
    "KafkaTopicError",
    "KafkaUnavailable",
    "connect",
    "parse_options",
]
