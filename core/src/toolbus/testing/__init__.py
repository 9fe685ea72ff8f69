"""Test kit: pytest fixtures (loaded through the ``pytest11`` entry point), the bus
conformance suite every adapter is held to (``conformance``) and the state store
conformance suite every store is held to (``state_conformance``)."""

from toolbus.testing.kit import ToolTestKit

__all__ = ["ToolTestKit"]
