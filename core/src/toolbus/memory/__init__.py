"""The in-memory bus and state store: real adapters, held to the same conformance suites as
the brokers and the networked stores.

``memory://name`` connects to an in-process broker of that name; all connections
to one name on one event loop share it. Modules, in the shape of every
adapter: ``plugin`` (the entry point), ``options`` (URL and options), ``bus``
(the broker and the Bus port; publishing is a few lines of it) and
``subscription`` (reading). A broker in the same process needs no security,
provisioning, naming, errors or logs of its own. The state store is
:mod:`toolbus.memory.state`.
"""

from toolbus.memory.bus import MemoryBroker, MemoryBus, connect
from toolbus.memory.options import MemoryOptions, parse_options
from toolbus.memory.subscription import MemoryDelivery, MemorySubscription

__all__ = [
    "MemoryBroker",
    "MemoryBus",
    "MemoryDelivery",
    "MemoryOptions",
    "MemorySubscription",
    "connect",
    "parse_options",
]
