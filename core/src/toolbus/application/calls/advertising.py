"""Listing served tool services in the broker's own service discovery, for operators.

On a bus that can (:class:`~toolbus.ports.AdvertisingBus`: NATS lists NATS
micro services), :func:`advertised` lists every host's service for the
duration of a block, with its queues, its group, the tools it announces and
the counts its host keeps, so that the broker's tools (``nats micro ls``,
``info``, ``stats``) show toolbus services, their replicas, requests, errors
and processing time. On any other bus it does nothing.

Discovery is an extra for operators: a listing that fails is logged and the
service goes on serving.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from importlib.metadata import PackageNotFoundError, version

import anyio

from toolbus.application.calls.host import ServiceHost
from toolbus.domain.calls.listing import ServiceListing
from toolbus.ports import Advertisement, AdvertisingBus, Bus

log = logging.getLogger("toolbus.service")


def toolbus_version() -> str:
    """The installed toolbus's version (``0.0.0`` when run from an uninstalled tree)."""
    try:
        return version("toolbus")
    except PackageNotFoundError:
        return "0.0.0"


def listing_for(host: ServiceHost, tools: Sequence[str] = ()) -> ServiceListing:
    """What discovery shows of ``host``'s service; ``tools`` are the names it announces."""
    service = host.service
    doc = (service.__doc__ or "").strip()
    summary = doc.splitlines()[0] if doc else ""
    return ServiceListing(
        service=service.id,
        request_queue=service.request_queue,
        response_queue=service.response_queue,
        group=host.group,
        description=summary or f"toolbus tool service {service.id}",
        version=toolbus_version(),
        tools=tuple(tools),
    )


@asynccontextmanager
async def advertised(
    bus: Bus,
    hosts: Iterable[ServiceHost],
    tools: Mapping[str, Sequence[str]] | None = None,
) -> AsyncIterator[list[Advertisement]]:
    """List each host's service in the broker's discovery for the duration of the block.

    ``tools`` maps a service id to the names of the tools it announces. Yields
    the advertisements made (none on a bus without discovery); they are
    withdrawn when the block ends, before the hosts stop taking calls.
    """
    made: list[Advertisement] = []
    if not isinstance(bus, AdvertisingBus):
        yield made
        return
    try:
        for host in hosts:
            listing = listing_for(host, (tools or {}).get(host.service.id, ()))
            try:
                advertisement = await bus.advertise(listing, host.served)
            except Exception as exc:
                log.warning("could not list %r in the broker's discovery: %s", listing.service, exc)
                continue
            if advertisement is not None:
                made.append(advertisement)
        yield made
    finally:
        with anyio.CancelScope(shield=True):
            for advertisement in made:
                try:
                    await advertisement.close()
                except Exception as exc:
                    log.debug("withdrawing %s: %s", advertisement.where, exc)
