"""toolbus on Apache Pulsar: the ``pulsar://`` and ``pulsar+ssl://`` broker adapter.

Installed, it is picked by URL: ``toolbus.connect("pulsar://localhost:6650")``.
Queue names are Pulsar topics; service replicas share a Shared subscription
named after the service, and every client has a fan-out subscription of its own.
See ``docs/adapters/pulsar.md`` for options, delivery guarantees and tuning.

Modules, as in every adapter: ``plugin`` (the entry point), ``options`` (URL
and options), ``security`` (TLS and authentication), ``bus`` (the Bus port),
``publishing`` (a producer per topic, sends receipted), ``subscription`` (a
consumer per subscription), ``errors`` (pulsar-client's results as toolbus
errors), ``logs`` (its log lines into Python logging) and ``asyncapi``
(Pulsar in AsyncAPI terms). Pulsar makes topics
itself and they are named as toolbus queues are, so there is no
``provisioning`` or ``naming``. Two more are what pulsar-client's threads need:
``handoff`` (its callbacks into asyncio) and ``clients`` (one client per broker
and process).
"""

from toolbus_pulsar.bus import PulsarBus, connect
from toolbus_pulsar.errors import BrokerUnreachable, PulsarAdapterError
from toolbus_pulsar.options import PulsarOptions, parse_options
from toolbus_pulsar.subscription import PulsarDelivery, PulsarSubscription

__all__ = [
    "BrokerUnreachable",
    "PulsarAdapterError",
    "PulsarBus",
    "PulsarDelivery",
    "PulsarOptions",
    "PulsarSubscription",
    "connect",
    "parse_options",
]
