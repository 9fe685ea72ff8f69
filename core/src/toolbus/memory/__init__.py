"""The in-memory bus: a real adapter, held to the same conformance suite as the brokers."""

from toolbus.memory.bus import MemoryBroker, MemoryBus, connect

__all__ = ["MemoryBroker", "MemoryBus", "connect"]
