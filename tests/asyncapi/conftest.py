"""The NATS server the live ``toolbus asyncapi`` test shares with the live-configuration tests."""

from tests.live.conftest import live_nats

__all__ = ["live_nats"]
