"""toolbus on RabbitMQ, through aio-pika, with the exchanges and queues TrustGraph uses.

::

    from toolbus_rabbitmq import connect

    bus = await connect("amqp://127.0.0.1:5672")

or, through the plugin registry, ``toolbus.plugins.connect("amqp://...")``. A
queue is a fanout exchange named ``tenant.namespace.name``; a service's
replicas share a queue bound to it, and each client has a queue of its own.
See ``docs/adapters/rabbitmq.md`` for the URL, the options and the delivery rules.

Modules, each with the job its namesake has in every adapter: ``bus`` (the Bus
port: connecting, and wiring the rest), ``options`` (the URL and options),
``security`` (TLS and where the password comes from), ``publishing`` (channels,
confirms and retries of a publish), ``subscription`` (consumers, acks, and the
hand-over to readers through the core's ``toolbus._internal.delivery_buffer``),
``provisioning`` (declaring exchanges and queues), ``naming`` (queue names to
exchange and queue names), ``errors`` (aio-pika's exceptions as toolbus
errors), ``logs`` (aio-pika's log lines, throttled), ``asyncapi`` (RabbitMQ in
AsyncAPI terms) and ``plugin`` (the entry point).
"""

from toolbus.domain.errors import BrokerOptionError
from toolbus_rabbitmq.bus import RabbitMQBus, connect
from toolbus_rabbitmq.errors import RabbitMQRefused, RabbitMQUnavailable
from toolbus_rabbitmq.options import RabbitMQOptions, parse_options

__all__ = [
    "BrokerOptionError",
    "RabbitMQBus",
    "RabbitMQOptions",
    "RabbitMQRefused",
    "RabbitMQUnavailable",
    "connect",
    "parse_options",
]
