"""Deprecated import path, kept for one release.

The buffer between nats-py's callbacks and a subscription's readers is the
core's :mod:`toolbus.delivery_buffer`, shared by every adapter.
"""

from __future__ import annotations

from typing import Any

from toolbus.domain._moved import forward


def __getattr__(name: str) -> Any:
    return forward(__name__, name, "toolbus.delivery_buffer")
