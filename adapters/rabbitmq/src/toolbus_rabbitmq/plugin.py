"""Registers the RabbitMQ adapter for ``amqp://``, ``amqps://`` and ``rabbitmq://`` broker URLs."""

from __future__ import annotations

from toolbus.plugins import AdapterInfo, AdapterRegistrar, hookimpl
from toolbus_rabbitmq.asyncapi import RabbitMQAsyncApi
from toolbus_rabbitmq.bus import connect
from toolbus_rabbitmq.options import SCHEMES


@hookimpl
def toolbus_register_adapters(register: AdapterRegistrar) -> None:
    register(
        AdapterInfo(
            schemes=SCHEMES,
            connect=connect,
            distribution="toolbus-rabbitmq",
            asyncapi=RabbitMQAsyncApi,
        )
    )
