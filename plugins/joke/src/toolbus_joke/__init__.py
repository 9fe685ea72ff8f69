"""The joke tool service: the example from TrustGraph's tool-services specification.

Served on TrustGraph's own queues, so a TrustGraph agent can call it unchanged.
"""

from toolbus_joke.service import STYLES, joke_service, pick_category, tell_joke

__all__ = ["STYLES", "joke_service", "pick_category", "tell_joke"]
