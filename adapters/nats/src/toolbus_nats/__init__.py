"""toolbus on NATS: core NATS for ``non-persistent://`` queues, JetStream for ``persistent://``.

::

    from toolbus_nats import connect

    bus = await connect("nats://127.0.0.1:4222")

or, through the plugin registry, ``toolbus.plugins.connect("nats://...")``.
See ``docs/adapters/nats.md`` for the URL, the options and the delivery rules.

Modules: ``bus``, ``options``, ``errors`` and ``plugin`` do the jobs their
namesakes do in every adapter. The rest is split by persistence, because core
NATS and JetStream deliver so differently that they share almost no code:
``core`` (non-persistent queues), ``jetstream`` (persistent queues),
``provisioning`` (their streams and consumers, as Kafka provisions topics),
``naming`` (queue names to subjects, streams and consumers). Callback
deliveries reach a subscription's readers through the core's
``toolbus._internal.delivery_buffer``, as in every adapter and the in-memory bus.
"""

from toolbus.domain.errors import BrokerOptionError
from toolbus_nats.bus import NatsBus, connect
from toolbus_nats.errors import JetStreamError
from toolbus_nats.naming import consumer_name, dead_letter_subject, stream_name, subject_for
from toolbus_nats.options import NatsOptions, parse_options

__all__ = [
    "BrokerOptionError",
    "JetStreamError",
    "NatsBus",
    "NatsOptions",
    "connect",
    "consumer_name",
    "dead_letter_subject",
    "parse_options",
    "stream_name",
    "subject_for",
]
