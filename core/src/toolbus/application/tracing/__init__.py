"""Trace context across hops, and OpenTelemetry spans when an SDK is configured.

Importing names from this package itself is deprecated
(use :mod:`toolbus.application.tracing.propagation`);
that path goes away in the next release.
"""

from __future__ import annotations

from typing import Any

from toolbus.domain._moved import forward


def __getattr__(name: str) -> Any:
    return forward(__name__, name, "toolbus.application.tracing.propagation")
