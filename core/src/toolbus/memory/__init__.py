"""The in-memory bus and state store: real adapters, held to the same conformance suites as
the brokers and the networked stores (the store is in :mod:`toolbus.memory.state`)."""

from toolbus.memory.bus import MemoryBroker, MemoryBus, connect

__all__ = ["MemoryBroker", "MemoryBus", "connect"]
