"""Registers the Kafka adapter for ``kafka://`` URLs (entry point ``toolbus.adapters: kafka``)."""

from __future__ import annotations

from toolbus.plugins import AdapterInfo, AdapterRegistrar, hookimpl
from toolbus_kafka.asyncapi import KafkaAsyncApi
from toolbus_kafka.bus import connect


@hookimpl
def toolbus_register_adapters(register: AdapterRegistrar) -> None:
    register(
        AdapterInfo(
            schemes=("kafka",),
            connect=connect,
            distribution="toolbus-kafka",
            asyncapi=KafkaAsyncApi,
        )
    )
