"""Every broker, the in-memory one included, rejects a bad URL or option with one error type."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import pytest

import toolbus
from toolbus import BrokerOptionError, ConfigError
from toolbus_kafka import parse_options as kafka_options
from toolbus_nats import parse_options as nats_options
from toolbus_pulsar import parse_options as pulsar_options

pytestmark = pytest.mark.anyio

PARSERS: dict[str, tuple[Callable[..., Any], str]] = {
    "nats": (nats_options, "nats://127.0.0.1:4222"),
    "kafka": (kafka_options, "kafka://127.0.0.1:9092"),
    "pulsar": (pulsar_options, "pulsar://127.0.0.1:6650"),
}


@pytest.mark.parametrize("broker", sorted(PARSERS))
def test_an_unknown_option_is_a_broker_option_error_naming_it(broker: str) -> None:
    parse, url = PARSERS[broker]
    with pytest.raises(BrokerOptionError, match="buffer_sise") as caught:
        parse(url, {"buffer_sise": 10})

    assert isinstance(caught.value, ConfigError) and isinstance(caught.value, ValueError)


async def test_the_memory_bus_rejects_unknown_options_too() -> None:
    with pytest.raises(BrokerOptionError, match=r"buffer_sise.*known: buffer_size"):
        await toolbus.connect("memory://options?buffer_sise=10")
    with pytest.raises(BrokerOptionError, match="max_message_size"):
        await toolbus.connect("memory://options", {"max_message_size": "lots"})
    with pytest.raises(BrokerOptionError, match="buffer_size"):
        await toolbus.connect("memory://options?buffer_size=0")


async def test_the_memory_bus_takes_its_options_from_the_url_and_the_mapping() -> None:
    bus = await toolbus.connect("memory://options-ok?max_message_size=8", {"buffer_size": "3"})
    try:
        assert bus.max_message_size == 8
    finally:
        await bus.close()


@pytest.mark.parametrize(
    ("module", "old"),
    [
        ("toolbus_nats", "NatsOptionError"),
        ("toolbus_nats.options", "NatsOptionError"),
        ("toolbus_kafka", "KafkaOptionsError"),
        ("toolbus_kafka.options", "KafkaOptionsError"),
    ],
)
def test_the_adapters_old_error_names_are_broker_option_error_with_a_warning(
    module: str, old: str
) -> None:
    with pytest.warns(DeprecationWarning, match=f"{old} is deprecated.*use BrokerOptionError"):
        value = getattr(importlib.import_module(module), old)

    assert value is BrokerOptionError


@pytest.mark.parametrize(
    ("broker", "url", "servers"),
    [
        ("nats", "nats://[::1]", ("[::1]:4222",)),
        ("nats", "nats://[::1]:5222,[fe80::2]", ("[::1]:5222", "[fe80::2]:4222")),
        ("kafka", "kafka://[::1]", ("[::1]:9092",)),
        ("kafka", "kafka://[::1]:9093,host", ("[::1]:9093", "host:9092")),
    ],
)
def test_ipv6_hosts_with_or_without_a_port(broker: str, url: str, servers: tuple[str]) -> None:
    parse, _ = PARSERS[broker]
    options = parse(url)

    found = options.servers if broker == "nats" else options.bootstrap_servers
    assert tuple(found) == servers


@pytest.mark.parametrize("server", ["[::1", "[::1]x", "host:1:2", "::1", "host:port"])
@pytest.mark.parametrize("broker", ["nats", "kafka"])
def test_a_malformed_server_is_named(broker: str, server: str) -> None:
    parse, _ = PARSERS[broker]
    with pytest.raises(BrokerOptionError, match=r"is not host\[:port\]|IPv6 host goes in brackets"):
        parse(f"{broker}://{server}")
