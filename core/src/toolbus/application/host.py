"""Deprecated import path, kept for one release.

Use :mod:`toolbus.application.calls.host` instead.
"""

from __future__ import annotations

from typing import Any

from toolbus.domain._moved import forward


def __getattr__(name: str) -> Any:
    return forward(__name__, name, "toolbus.application.calls.host")
