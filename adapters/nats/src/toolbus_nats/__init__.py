"""toolbus on NATS: core NATS for ``non-persistent://`` queues, JetStream for ``persistent://``.

::

    from toolbus_nats import connect

    bus = await connect("nats://127.0.0.1:4222")

or, through the plugin registry, ``toolbus.plugins.connect("nats://...")``.
See ``docs/adapters/nats.md`` for the URL, the options and the delivery rules.

Modules, as in every adapter: ``plugin`` (the entry point), ``options``
(URL and options), ``security`` (TLS and credentials), ``bus`` (the Bus port),
``publishing`` (sizing messages, storing them in JetStream), ``subscription``
(reading; a package, split by persistence: ``core`` for non-persistent queues,
``jetstream`` for persistent ones), ``provisioning`` (JetStream streams and
consumers, made before use), ``naming`` (queue names to subjects, streams and
consumers), ``errors`` (nats-py's exceptions as toolbus errors) and
``asyncapi`` (NATS in AsyncAPI terms). There is no ``logs``: nats-py reports
through the callbacks the bus gives it, not through Python logging. Beyond the
shape: ``micro`` (served services listed as NATS micro services), and the
key-value state store, ``state`` and ``state_options``.
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
