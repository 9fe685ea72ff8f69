"""Served tool services as NATS micro services, for ``nats micro ls|info|stats``.

nats-py's own micro support (:mod:`nats.micro`) answers the ``$SRV.PING``,
``$SRV.INFO`` and ``$SRV.STATS`` requests. Its endpoints are request-reply
handlers of their own, which is not how a tool service reads its queue (a
queue group or a JetStream consumer, answering on the response queue), so no
endpoint is added through it: the service reports its one endpoint, the
request queue's subject and group, in what it answers, and the statistics of
that endpoint are the host's own counts.

Each tool service is one micro service (replicas of a service are instances
of the same micro service): its name is the service id with anything NATS
does not allow in a name written as ``_``; the toolbus version is its version;
its metadata holds the service id, its queues and the tools it announces.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import replace

from nats.aio.client import Client
from nats.micro.service import (
    EndpointInfo,
    EndpointStats,
    Service,
    ServiceConfig,
    ServiceInfo,
    ServiceStats,
)

from toolbus.domain.calls.listing import ServedCounts, ServiceListing

#: Metadata keys of a listed service (values are strings, as NATS micro requires).
SERVICE_KEY = "toolbus.service"
REQUEST_QUEUE_KEY = "toolbus.request_queue"
RESPONSE_QUEUE_KEY = "toolbus.response_queue"
TOOLS_KEY = "toolbus.tools"
PERSISTENT_KEY = "toolbus.persistent"

_NOT_A_NAME = re.compile(r"[^A-Za-z0-9_-]+")


def micro_name(service: str) -> str:
    """A NATS micro service or endpoint name for ``service`` (letters, digits, ``-``, ``_``)."""
    return _NOT_A_NAME.sub("_", service).strip("_") or "toolbus"


class ToolServiceListing(Service):
    """One tool service as a NATS micro service; its endpoint is its request queue.

    ``info()`` and ``stats()`` are what nats-py answers ``$SRV.INFO`` and
    ``$SRV.STATS`` with: the base class's service-level fields, with the one
    endpoint this service reads.
    """

    def __init__(
        self,
        nc: Client,
        listing: ServiceListing,
        subject: str,
        persistent: bool,
        counts: Callable[[], ServedCounts],
    ) -> None:
        super().__init__(
            nc,
            ServiceConfig(
                name=micro_name(listing.service),
                version=listing.version,
                description=listing.description,
                metadata={
                    SERVICE_KEY: listing.service,
                    REQUEST_QUEUE_KEY: listing.request_queue,
                    RESPONSE_QUEUE_KEY: listing.response_queue,
                    TOOLS_KEY: json.dumps(list(listing.tools)),
                },
            ),
        )
        self.listing = listing
        self._counts = counts
        self._endpoint = EndpointInfo(
            name=micro_name(listing.service),
            subject=subject,
            queue_group=listing.group,
            metadata={
                REQUEST_QUEUE_KEY: listing.request_queue,
                PERSISTENT_KEY: "true" if persistent else "false",
            },
        )

    @property
    def where(self) -> str:
        return f"NATS micro service {self.info().name} (id {self.id})"

    def info(self) -> ServiceInfo:
        return replace(super().info(), endpoints=[self._endpoint])

    def stats(self) -> ServiceStats:
        counts = self._counts()
        nanoseconds = int(counts.seconds * 1e9)
        endpoint = EndpointStats(
            name=self._endpoint.name,
            subject=self._endpoint.subject,
            queue_group=self._endpoint.queue_group,
            num_requests=counts.requests,
            num_errors=counts.errors,
            processing_time=nanoseconds,
            average_processing_time=nanoseconds // counts.requests if counts.requests else 0,
            last_error=counts.last_error,
        )
        return replace(super().stats(), endpoints=[endpoint])

    async def close(self) -> None:
        await self.stop()


async def advertise(
    nc: Client,
    listing: ServiceListing,
    subject: str,
    persistent: bool,
    counts: Callable[[], ServedCounts],
) -> ToolServiceListing:
    """List ``listing`` as a NATS micro service until the result is closed."""
    service = ToolServiceListing(nc, listing, subject, persistent, counts)
    await service.start()
    return service
