"""One pulsar-client ``Client`` per process and broker, shared by every bus that needs it.

A ``Client`` owns I/O threads and a connection pool, and Pulsar's own guidance is
to create one per application and reuse it. Buses opened with the same URL and
client-level options therefore share one, counted by reference; the last bus to
let go closes it. Producers and consumers stay per bus, so closing one bus never
disturbs another.

Sharing also keeps consumer ids unique within a process: pulsar-client numbers
consumers per ``Client`` from 0, and pulsar-lite (unlike Apache Pulsar, which
scopes ids to a connection) refuses a second consumer with the same id on one
subscription.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import pulsar

from toolbus_pulsar.handoff import blocking
from toolbus_pulsar.logs import client_logger
from toolbus_pulsar.options import PulsarOptions
from toolbus_pulsar.security import security_arguments

log = logging.getLogger("toolbus_pulsar")


class _Entry:
    __slots__ = ("client", "users")

    def __init__(self, client: pulsar.Client) -> None:
        self.client = client
        self.users = 0


_clients: dict[tuple[Any, ...], _Entry] = {}
# Buses may live on different event loops (threads), so a thread lock, held only
# for dictionary updates, never across an await.
_lock = threading.Lock()


def acquire(options: PulsarOptions) -> pulsar.Client:
    """The shared client for ``options``, made on first use. Pair with :func:`release`."""
    key = options.client_key()
    with _lock:
        entry = _clients.get(key)
        if entry is None:
            # Creating a client does no I/O: it connects when first used.
            client = pulsar.Client(
                options.service_url,
                logger=client_logger(options.client_log_level),
                **options.connection_arguments(),
                **security_arguments(options),
            )
            entry = _clients[key] = _Entry(client)
        entry.users += 1
        return entry.client


async def release(options: PulsarOptions, client: pulsar.Client, *, at_once: bool = False) -> None:
    """Give back a client from :func:`acquire`; the last user closes it.

    ``at_once`` (the broker is gone) shuts it down without waiting for anything
    in progress, which could only time out.
    """
    key = options.client_key()
    with _lock:
        entry = _clients.get(key)
        if entry is None or entry.client is not client:
            return
        entry.users -= 1
        if entry.users > 0:
            return
        del _clients[key]
    try:
        await blocking(client.shutdown if at_once else client.close)
    except pulsar.PulsarException as exc:
        # Nothing is left to use it; a failed goodbye is not the caller's problem.
        log.debug("closing the pulsar client for %s failed: %s", options.safe_url, exc)


def shared_clients() -> int:
    """How many clients are open (for tests: 0 once every bus is closed)."""
    with _lock:
        return len(_clients)
