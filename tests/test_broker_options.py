"""Every broker, the in-memory one included, rejects a bad URL or option with one error type."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Annotated, Any, ClassVar

import pytest

import toolbus
from toolbus import BrokerOptionError, ConfigError
from toolbus._internal.broker_options import (
    BrokerOptions,
    Flag,
    PositiveInt,
    PositiveSeconds,
    Seconds,
    SecretText,
    WholeNumber,
    at_least,
    at_most,
    one_of,
    parse_broker_options,
    server_list,
)
from toolbus.domain.errors import Problem
from toolbus_kafka import KafkaOptions
from toolbus_kafka import parse_options as kafka_options
from toolbus_nats import NatsOptions
from toolbus_nats import parse_options as nats_options
from toolbus_pulsar import PulsarOptions
from toolbus_pulsar import parse_options as pulsar_options
from toolbus_rabbitmq import RabbitMQOptions
from toolbus_rabbitmq import parse_options as rabbitmq_options

pytestmark = pytest.mark.anyio

PARSERS: dict[str, tuple[Callable[..., Any], str]] = {
    "nats": (nats_options, "nats://127.0.0.1:4222"),
    "kafka": (kafka_options, "kafka://127.0.0.1:9092"),
    "pulsar": (pulsar_options, "pulsar://127.0.0.1:6650"),
    "rabbitmq": (rabbitmq_options, "amqp://127.0.0.1:5672"),
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
    ("broker", "url", "servers"),
    [
        ("nats", "nats://[::1]", ("[::1]:4222",)),
        ("nats", "nats://[::1]:5222,[fe80::2]", ("[::1]:5222", "[fe80::2]:4222")),
        ("kafka", "kafka://[::1]", ("[::1]:9092",)),
        ("kafka", "kafka://[::1]:9093,host", ("[::1]:9093", "host:9092")),
        ("rabbitmq", "amqp://[::1]", ("[::1]:5672",)),
        ("rabbitmq", "amqps://[::1]:5673,host", ("[::1]:5673", "host:5671")),
    ],
)
def test_ipv6_hosts_with_or_without_a_port(broker: str, url: str, servers: tuple[str]) -> None:
    parse, _ = PARSERS[broker]
    options = parse(url)

    found = options.bootstrap_servers if broker == "kafka" else options.servers
    assert tuple(found) == servers


@pytest.mark.parametrize("server", ["[::1", "[::1]x", "host:1:2", "::1", "host:port"])
@pytest.mark.parametrize("broker", ["nats", "kafka", "rabbitmq"])
def test_a_malformed_server_is_named(broker: str, server: str) -> None:
    parse, _ = PARSERS[broker]
    with pytest.raises(BrokerOptionError, match=r"is not host\[:port\]|IPv6 host goes in brackets"):
        parse(f"{broker}://{server}")


# -- one reader for every broker --------------------------------------------------

MODELS = {
    "nats": NatsOptions,
    "kafka": KafkaOptions,
    "pulsar": PulsarOptions,
    "rabbitmq": RabbitMQOptions,
}


@pytest.mark.parametrize("broker", sorted(MODELS))
def test_every_broker_describes_its_options_on_the_shared_base(broker: str) -> None:
    model = MODELS[broker]

    assert issubclass(model, BrokerOptions)
    assert model.model_config.get("extra") == "forbid"


@pytest.mark.parametrize(
    ("broker", "options", "names"),
    [
        (
            "nats",
            {"ack_wait": "soon", "pull_batch": 0, "tls": "perhaps"},
            ("ack_wait", "pull_batch", "tls"),
        ),
        (
            "kafka",
            {"partitions": "many", "acks": "2", "linger_ms": -1},
            ("partitions", "acks", "linger_ms"),
        ),
        (
            "pulsar",
            {"io_threads": 0, "batching_delay": "x", "colour": 1},
            ("io_threads", "batching_delay", "colour"),
        ),
        (
            "rabbitmq",
            {"prefetch": 0, "queue_type": "stream", "heartbeat": "often"},
            ("prefetch", "queue_type", "heartbeat"),
        ),
    ],
)
def test_every_bad_option_is_reported_in_one_error(
    broker: str, options: dict[str, object], names: tuple[str, ...]
) -> None:
    parse, url = PARSERS[broker]
    with pytest.raises(BrokerOptionError) as caught:
        parse(url, options)

    assert sorted(problem.field for problem in caught.value.problems) == sorted(names)


@pytest.mark.parametrize(
    ("broker", "url"),
    [("nats", "nats://a:4222,b:x"), ("kafka", "kafka://a:9092,b:x"), ("rabbitmq", "amqp://a,b:x")],
)
def test_a_bad_server_and_a_bad_option_come_in_one_error(broker: str, url: str) -> None:
    parse, _ = PARSERS[broker]
    with pytest.raises(BrokerOptionError) as caught:
        parse(f"{url}?bogus=1")

    message = str(caught.value)
    assert "2 problems" in message
    assert "'b:x' is not host[:port]" in message and "'bogus'" in message


@pytest.mark.parametrize("broker", ["nats", "kafka", "pulsar"])
def test_a_server_that_is_not_host_port_is_one_problem(broker: str) -> None:
    parse, url = PARSERS[broker]
    with pytest.raises(BrokerOptionError) as caught:
        parse(url.rpartition(":")[0] + ":notaport")

    assert len(caught.value.problems) == 1, str(caught.value)
    assert "is not host[:port]" in str(caught.value)


@pytest.mark.parametrize(
    ("broker", "options"),
    [
        ("kafka", {"acks": "s3cret-word"}),
        ("nats", {"servers": ["s3cret-word:4222", "host:s3cret"]}),
        ("kafka", {"bootstrap_servers": "a:9092,s3cret:x"}),
        ("nats", {"tls": "s3cret"}),
    ],
)
def test_option_messages_name_the_option_once_and_never_echo_its_value(
    broker: str, options: dict[str, object]
) -> None:
    parse, url = PARSERS[broker]
    with pytest.raises(BrokerOptionError) as caught:
        parse(url, options)

    message = str(caught.value)
    assert "s3cret" not in message
    (name,) = options
    assert message.count(repr(name)) == 1, message


SECRET = "s3cr3t-value"


@pytest.mark.parametrize(
    ("broker", "option"),
    [
        ("nats", "max_deliveries"),
        ("nats", "tls"),
        ("nats", "ack_wait"),
        ("kafka", "partitions"),
        ("kafka", "tls_check_hostname"),
        ("pulsar", "operation_timeout"),
        ("pulsar", "oauth2"),
        ("rabbitmq", "prefetch"),
        ("rabbitmq", "tls"),
    ],
)
def test_a_bad_value_is_never_echoed(broker: str, option: str) -> None:
    parse, url = PARSERS[broker]
    for where in ({option: SECRET}, None):
        query = "" if where else f"?{option}={SECRET}"
        with pytest.raises(BrokerOptionError, match=option) as caught:
            parse(url + query, where)

        assert SECRET not in str(caught.value)


@pytest.mark.parametrize(
    ("broker", "option", "value"),
    [
        ("kafka", "partitions", 2.5),
        ("kafka", "tls_check_hostname", "perhaps"),
        ("pulsar", "io_threads", 2.0),
    ],
)
def test_configuration_values_are_type_checked_on_every_broker(
    broker: str, option: str, value: object
) -> None:
    parse, url = PARSERS[broker]
    with pytest.raises(BrokerOptionError, match=option):
        parse(url, {option: value})


@pytest.mark.parametrize(
    ("broker", "option", "field"),
    [
        ("nats", "ack_wiat", "ack_wait"),
        ("kafka", "partiton", "partitions"),
        ("pulsar", "operation_timout", "operation_timeout"),
    ],
)
def test_a_misspelt_option_is_answered_with_the_likely_one(
    broker: str, option: str, field: str
) -> None:
    parse, url = PARSERS[broker]
    with pytest.raises(BrokerOptionError, match=f"did you mean '{field}'"):
        parse(url, {option: 1})


@pytest.mark.parametrize(
    ("broker", "option"),
    [
        ("nats", "tls_handshake_first"),
        ("kafka", "tls_check_hostname"),
        ("pulsar", "tls_allow_insecure"),
    ],
)
@pytest.mark.parametrize(
    ("word", "meaning"), [("yes", True), ("Off", False), ("1", True), (False, False)]
)
def test_every_broker_reads_a_flag_the_same_way(
    broker: str, option: str, word: object, meaning: bool
) -> None:
    parse, url = PARSERS[broker]

    assert getattr(parse(url, {option: word}), option) is meaning


def test_a_setting_is_matched_whatever_its_case() -> None:
    assert kafka_options("kafka://k?sasl_mechanism=scram-sha-256").sasl_mechanism == "SCRAM-SHA-256"
    assert nats_options("nats://n?storage=Memory").storage == "memory"


def test_a_pulsar_url_urlsplit_cannot_read_is_a_broker_option_error() -> None:
    with pytest.raises(BrokerOptionError, match="IPv6 host goes in brackets"):
        pulsar_options("pulsar://[::1:6650")


@pytest.mark.parametrize(
    ("parse", "url", "example"),
    [
        (nats_options, "nats://[::1:4222", "[::1]:4222"),
        (kafka_options, "kafka://[::1:9092", "[::1]:9092"),
        (pulsar_options, "pulsar://[::1:6650", "[::1]:6650"),
    ],
)
def test_an_unreadable_url_shows_the_fix_with_the_brokers_own_port(
    parse: Callable[[str], Any], url: str, example: str
) -> None:
    with pytest.raises(BrokerOptionError) as caught:
        parse(url)

    assert str(caught.value).endswith(example)


def test_pulsar_lists_ipv6_brokers_with_or_without_a_port() -> None:
    url = "pulsar://[::1],[fe80::2]:6651"

    assert pulsar_options(url).service_url == url


class Sample(BrokerOptions):
    """A broker's options, as an adapter writes them."""

    broker: ClassVar[str] = "Sample"

    wait: PositiveSeconds = 1.0
    linger: Seconds = 0.0
    count: PositiveInt = 1
    small: Annotated[WholeNumber, at_least(0), at_most(9)] = 0
    on: Flag = False
    mode: Annotated[str, one_of("fast", "safe")] = "safe"
    servers: Annotated[tuple[str, ...], server_list(1234)] = ("localhost:1234",)
    password: SecretText = None

    def conflicts(self) -> Iterator[tuple[str, str]]:
        if self.linger > self.wait:
            yield "linger", "must not be longer than 'wait'"


def test_the_shared_types_read_text_and_typed_values_alike() -> None:
    parsed = parse_broker_options(
        Sample,
        "wait=2.5&count=3&on=yes&mode=FAST&servers=a,[::1]:9",
        {"small": 9, "linger": 1, "password": "pw"},
        where="sample",
    )

    assert (parsed.wait, parsed.linger, parsed.count, parsed.small) == (2.5, 1.0, 3, 9)
    assert parsed.on is True and parsed.mode == "fast"
    assert parsed.servers == ("a:1234", "[::1]:9")
    assert "pw" not in repr(parsed)


def test_the_shared_types_say_what_is_wrong_and_hide_secrets() -> None:
    with pytest.raises(BrokerOptionError) as caught:
        parse_broker_options(
            Sample,
            "wait=0&linger=-1&count=1.5&small=10&on=2&mode=slow&servers=",
            {"password": 7},
            where="sample",
        )

    said = {problem.field: problem.message for problem in caught.value.problems}
    # Each names its option once (as its field) and never the value given.
    assert said == {
        "wait": "must be a positive number of seconds (greater than 0)",
        "linger": "must be a number of seconds, 0 or more",
        "count": "must be a whole number",
        "small": "may be at most 9",
        "on": "is not a boolean; use true or false",
        "mode": "must be one of fast, safe",
        "servers": "must list servers as host[:port]; entry 1 of 1 is not",
        "password": "must be a non-empty string, not int",
    }


def test_conflicts_are_checked_once_every_option_is_valid() -> None:
    with pytest.raises(BrokerOptionError, match="'linger': must not be longer than 'wait'"):
        parse_broker_options(Sample, "linger=5", None, where="sample")


def test_problems_with_the_url_are_reported_with_the_options() -> None:
    found = Problem("sample URL", "", "names no host")
    with pytest.raises(BrokerOptionError) as caught:
        parse_broker_options(Sample, "count=0", None, where="sample", problems=[found])

    assert caught.value.problems[0] == found and len(caught.value.problems) == 2
