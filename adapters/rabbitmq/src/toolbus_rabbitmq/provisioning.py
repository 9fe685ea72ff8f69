"""Declaring the exchanges and queues a queue name needs, before it is used.

Every declaration matches trustgraph-base's RabbitMQ backend exactly, so that
whichever side declares a name first, the other's declaration is accepted
(RabbitMQ refuses to declare an existing name with other settings):

* the exchange: ``fanout``, durable, for every class of queue;
* a group's queue on a ``non-persistent://`` queue: not durable, not exclusive,
  not auto-deleted (TrustGraph's ``request`` class);
* a group's queue on a ``persistent://`` queue: durable (TrustGraph's ``flow``
  class), or a quorum queue when the ``queue_type`` option says so;
* a fan-out subscriber's queue: exclusive to its connection and auto-deleted
  (TrustGraph's ``response`` and ``notify`` classes).

Declarations go through aio-pika's robust channels, which remember them and
declare them again after a reconnection: a broker that restarted without its
data gets its exchanges, queues and bindings back, made by the clients that
use them.
"""

from __future__ import annotations

from typing import Any

from aio_pika import ExchangeType
from aio_pika.abc import AbstractChannel, AbstractExchange, AbstractQueue

from toolbus_rabbitmq.naming import fanout_queue, group_queue
from toolbus_rabbitmq.options import RabbitMQOptions


async def declare_exchange(channel: AbstractChannel, name: str) -> AbstractExchange:
    """The fanout exchange ``name``, made if it does not exist."""
    return await channel.declare_exchange(name, ExchangeType.FANOUT, durable=True)


async def declare_queue(
    channel: AbstractChannel,
    exchange: AbstractExchange,
    group: str | None,
    persistent: bool,
    options: RabbitMQOptions,
) -> AbstractQueue:
    """The queue a subscription reads, bound to ``exchange``: the group's, or one of its own."""
    if group is None:
        queue = await channel.declare_queue(
            fanout_queue(exchange.name), durable=False, exclusive=True, auto_delete=True
        )
    else:
        arguments: dict[str, Any] | None = None
        if persistent and options.queue_type == "quorum":
            arguments = {"x-queue-type": "quorum"}
        queue = await channel.declare_queue(
            group_queue(exchange.name, group),
            durable=persistent,
            exclusive=False,
            auto_delete=False,
            arguments=arguments,
        )
    await queue.bind(exchange, routing_key="")
    return queue
