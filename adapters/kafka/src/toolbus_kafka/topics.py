"""Deprecated import path, kept for one release.

Use :mod:`toolbus_kafka.provisioning` instead.
"""

from __future__ import annotations

from typing import Any

from toolbus.domain._moved import forward


def __getattr__(name: str) -> Any:
    return forward(__name__, name, "toolbus_kafka.provisioning")
