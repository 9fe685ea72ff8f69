"""Test kit: pytest fixtures (loaded through the ``pytest11`` entry point) and the
bus conformance suite every adapter is held to."""

from toolbus.testing.kit import ToolTestKit

__all__ = ["ToolTestKit"]
