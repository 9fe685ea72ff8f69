"""How toolbus queue names map onto RabbitMQ exchanges and queues, as TrustGraph maps them.

trustgraph-base's RabbitMQ backend (2.4 and later) gives each of its queues
``class:topicspace:topic`` a durable *fanout exchange* named
``topicspace.class.topic``; producers publish to it with an empty routing key,
and each consumer binds a queue of its own kind to it:

* Exchange: ``tenant.namespace.name`` of the queue, the topic's own words kept
  as written, so ``request:tg:joke`` and ``non-persistent://tg/request/joke``
  are both ``tg.request.joke``, and ``request:tg:tool:ws1`` is
  ``tg.request.tool:ws1`` (TrustGraph keeps the colon). A plain name is its own
  exchange.
* Competing consumers (a group): the queue ``<exchange>.<group>``, shared by
  the group's members, as TrustGraph names a subscription's queue.
* Fan-out: a queue per subscriber, exclusive to its connection and deleted with
  it, bound to the same exchange.

RabbitMQ limits names to 255 bytes; a longer group queue name keeps its
beginning and ends in a hash of the whole, so it stays unique.

A message on a persistent queue carries the time it was published, in
milliseconds, in the header :data:`PUBLISHED_AT_HEADER` (the name RabbitMQ's own
timestamp plugin and message interceptor write, so a broker set up to stamp
messages itself is read the same way).
"""

from __future__ import annotations

import hashlib
import uuid

from toolbus.domain.calls.queues import QueueName
from toolbus.domain.errors import QueueNameError

#: RabbitMQ's limit on exchange and queue names, in bytes.
MAX_NAME_BYTES = 255
#: Names RabbitMQ keeps for itself.
RESERVED_PREFIX = "amq."
_DIGEST_CHARACTERS = 32
#: The header a persistent message's publish time rides in (Unix milliseconds).
PUBLISHED_AT_HEADER = "timestamp_in_ms"


def exchange_for(queue: QueueName) -> str:
    """The fanout exchange a queue is published to."""
    name = queue.name if queue.plain else f"{queue.tenant}.{queue.namespace}.{queue.name}"
    if name.startswith(RESERVED_PREFIX):
        raise QueueNameError(
            f"queue name {queue.raw!r} maps to the RabbitMQ exchange {name!r}, and RabbitMQ "
            f"keeps names starting with {RESERVED_PREFIX!r} for itself; rename the queue"
        )
    return name


def group_queue(exchange: str, group: str) -> str:
    """The queue shared by the members of ``group`` on ``exchange``."""
    return _fitted(f"{exchange}.{group}")


def fanout_queue(exchange: str) -> str:
    """A fresh name for one fan-out subscriber's own queue on ``exchange``."""
    return _fitted(f"{exchange}.fanout-{uuid.uuid4().hex[:16]}")


def _fitted(name: str) -> str:
    encoded = name.encode("utf-8")
    if len(encoded) <= MAX_NAME_BYTES:
        return name
    digest = hashlib.sha256(encoded).hexdigest()[:_DIGEST_CHARACTERS]
    keep = encoded[: MAX_NAME_BYTES - _DIGEST_CHARACTERS - 1].decode("utf-8", "ignore")
    return f"{keep}~{digest}"
