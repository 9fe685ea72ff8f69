"""A served tool service as a broker's own discovery tools show it, and what it has served.

A bus whose broker has a service-discovery protocol of its own (NATS micro
services) lists each served tool service there, so that the operators' tools
for that broker see toolbus services like any other. The listing is pure
data, built from the service and the tools it announces; the counts are read
from the service's host whenever the broker's tools ask.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ServiceListing:
    """What discovery shows of one served tool service.

    ``group`` is the competing consumers' group its replicas share;
    ``version`` the version of toolbus serving it; ``tools`` the names of the
    tools it announces (empty when it announces none).
    """

    service: str
    request_queue: str
    response_queue: str
    group: str
    description: str
    version: str
    tools: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ServedCounts:
    """What one host has answered since it started.

    ``requests`` counts every request answered (errors included), ``errors``
    those answered with an error, ``seconds`` the time spent answering them
    all, ``last_error`` the wire error type of the latest error (never its
    message, which may quote a secret).
    """

    requests: int = 0
    errors: int = 0
    seconds: float = 0.0
    last_error: str | None = None
