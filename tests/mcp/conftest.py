"""The NATS server the MCP bridge's process tests share with the live-configuration tests."""

from tests.live.conftest import live_nats

__all__ = ["live_nats"]
