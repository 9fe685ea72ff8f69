"""toolbus on Apache Pulsar: the ``pulsar://`` and ``pulsar+ssl://`` broker adapter.

Installed, it is picked by URL: ``toolbus.connect("pulsar://localhost:6650")``.
Queue names are Pulsar topics; service replicas share a Shared subscription
named after the service, and every client has a fan-out subscription of its own.
See ``docs/adapters/pulsar.md`` for options, delivery guarantees and tuning.

Modules: ``bus``, ``options``, ``errors`` and ``plugin`` do the jobs their
namesakes do in every adapter. The rest is split by direction, because
pulsar-client has a producer per topic and a consumer per subscription:
``sending`` and ``subscription``; plus what its threaded client needs:
``handoff`` (its callbacks into asyncio), ``clients`` (one client per broker)
and ``logs`` (its log lines into Python logging).
"""

from toolbus_pulsar.bus import PulsarBus, connect
from toolbus_pulsar.errors import BrokerUnreachable, PulsarAdapterError
from toolbus_pulsar.options import OPTION_NAMES, PulsarOptions, parse_options
from toolbus_pulsar.subscription import PulsarDelivery, PulsarSubscription

__all__ = [
    "OPTION_NAMES",
    "BrokerUnreachable",
    "PulsarAdapterError",
    "PulsarBus",
    "PulsarDelivery",
    "PulsarOptions",
    "PulsarSubscription",
    "connect",
    "parse_options",
]
