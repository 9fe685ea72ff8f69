"""Reading the Kafka URL and options (no broker needed)."""

from __future__ import annotations

import ssl
from typing import Any

import pytest

from toolbus.domain.errors import BrokerOptionError
from toolbus_kafka import KafkaOptions, parse_options
from toolbus_kafka.security import security_kwargs


def client_kwargs(options: KafkaOptions) -> dict[str, Any]:
    """What the adapter makes each aiokafka client with."""
    return {**options.connection_kwargs(), **security_kwargs(options)}


def test_several_brokers_and_the_default_port() -> None:
    options = parse_options("kafka://k1:9093,k2,[::1]:9094")
    assert options.bootstrap_servers == ("k1:9093", "k2:9092", "[::1]:9094")


def test_bootstrap_servers_from_configuration_win_over_the_url() -> None:
    listed = ["kafka-1:9092", "kafka-2:9093", "kafka-3"]
    options = parse_options("kafka://localhost", {"bootstrap_servers": listed})
    assert options.bootstrap_servers == ("kafka-1:9092", "kafka-2:9093", "kafka-3:9092")
    assert client_kwargs(options)["bootstrap_servers"] == list(options.bootstrap_servers)
    # The URL may then name no broker at all.
    assert parse_options("kafka://", {"bootstrap_servers": "a:1,b:2"}).bootstrap_servers == (
        "a:1",
        "b:2",
    )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"bootstrap_servers": 9092}, "'bootstrap_servers': must be a list of host:port"),
        ({"bootstrap_servers": []}, "'bootstrap_servers': must be a list of host:port"),
        ({"bootstrap_servers": "k1,,k2"}, "entry 2 of 3 is not"),
    ],
)
def test_bad_bootstrap_servers_say_what_to_fix(options: dict[str, object], message: str) -> None:
    with pytest.raises(BrokerOptionError, match=message):
        parse_options("kafka://k1", options)


def test_query_values_are_typed_and_the_mapping_wins() -> None:
    options = parse_options(
        "kafka://k1?partitions=8&acks=1&tls_check_hostname=false",
        {"partitions": 12, "commit_interval_ms": "0"},
    )
    assert options.partitions == 12
    assert options.acks_setting == 1
    assert options.commit_interval_ms == 0
    assert options.tls_check_hostname is False


def test_defaults_suit_request_reply() -> None:
    options = parse_options("kafka://k1")
    assert options.partitions == 4
    assert options.acks_setting == "all"
    assert options.linger_ms == 0
    assert options.fanout_fetch_max_wait_ms < options.group_fetch_max_wait_ms


def test_credentials_in_the_url_need_sasl_and_stay_out_of_repr() -> None:
    options = parse_options(
        "kafka://alice:s%40cret@k1:9092?tls=true&sasl=true&sasl_mechanism=SCRAM-SHA-512"
    )
    assert (options.sasl_username, options.sasl_password) == ("alice", "s@cret")
    assert "s@cret" not in repr(options)
    kwargs = client_kwargs(options)
    assert kwargs["security_protocol"] == "SASL_SSL"
    assert kwargs["sasl_mechanism"] == "SCRAM-SHA-512"
    assert kwargs["sasl_plain_password"] == "s@cret"
    assert isinstance(kwargs["ssl_context"], ssl.SSLContext)


@pytest.mark.parametrize(
    ("query", "protocol"),
    [
        ("", "PLAINTEXT"),
        ("tls=true", "SSL"),
        ("sasl=true", "SASL_PLAINTEXT"),
        ("tls=yes&sasl=on", "SASL_SSL"),
    ],
)
def test_tls_and_sasl_make_the_security_protocol(query: str, protocol: str) -> None:
    assert client_kwargs(parse_options(f"kafka://k1?{query}"))["security_protocol"] == protocol


def test_credentials_without_sasl_are_refused() -> None:
    with pytest.raises(BrokerOptionError, match="set sasl=true and tls=true"):
        parse_options("kafka://alice:secret@k1:9092")
    with pytest.raises(BrokerOptionError, match="set sasl=true and tls=true"):
        parse_options("kafka://alice:secret@k1:9092?tls=true")


def test_plaintext_sends_no_sasl_or_tls_settings() -> None:
    kwargs = client_kwargs(parse_options("kafka://k1"))
    assert kwargs["security_protocol"] == "PLAINTEXT"
    assert "ssl_context" not in kwargs
    assert "sasl_plain_password" not in kwargs


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("nats://k1", "not a Kafka URL"),
        ("kafka://", "names no server.*or the bootstrap_servers option"),
        ("kafka://k1:port", "not host\\[:port\\]"),
        ("kafka://k1?partition=3", "'partition': is not a Kafka option.*partitions"),
        ("kafka://k1?partitions=0", "'partitions': must be at least 1"),
        ("kafka://k1?partitions=many", "'partitions'"),
        ("kafka://k1?acks=2", "must be all, 1 or 0"),
        ("kafka://k1?heartbeat_interval_ms=20000", "below 'session_timeout_ms'"),
        ("kafka://k1?security_protocol=SSL", "'security_protocol': is not a Kafka option"),
        ("kafka://k1?tls_key=/k.pem", "'tls_key': needs 'tls_cert'"),
        ("kafka://k1?sasl_mechanism=MD5", "SCRAM-SHA-256"),
        ("kafka://k1?sasl_oauth_token_provider=x", "only be given in the options mapping"),
    ],
)
def test_bad_urls_and_options_say_what_to_fix(url: str, message: str) -> None:
    with pytest.raises(BrokerOptionError, match=message):
        parse_options(url)
