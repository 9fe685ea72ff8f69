"""Reading the Kafka URL and options (no broker needed)."""

from __future__ import annotations

import ssl

import pytest

from toolbus.domain.errors import BrokerOptionError
from toolbus_kafka import parse_options


def test_several_brokers_and_the_default_port() -> None:
    options = parse_options("kafka://k1:9093,k2,[::1]:9094")
    assert options.bootstrap_servers == ("k1:9093", "k2:9092", "[::1]:9094")


def test_bootstrap_servers_from_configuration_win_over_the_url() -> None:
    listed = ["kafka-1:9092", "kafka-2:9093", "kafka-3"]
    options = parse_options("kafka://localhost", {"bootstrap_servers": listed})
    assert options.bootstrap_servers == ("kafka-1:9092", "kafka-2:9093", "kafka-3:9092")
    assert options.client_kwargs()["bootstrap_servers"] == list(options.bootstrap_servers)
    # The URL may then name no broker at all.
    assert parse_options("kafka://", {"bootstrap_servers": "a:1,b:2"}).bootstrap_servers == (
        "a:1",
        "b:2",
    )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"bootstrap_servers": 9092}, "'bootstrap_servers' must be a list of host:port"),
        ({"bootstrap_servers": []}, "'bootstrap_servers' must be a list of host:port"),
        ({"bootstrap_servers": "k1,,k2"}, "'' is not host"),
    ],
)
def test_bad_bootstrap_servers_say_what_to_fix(options: dict[str, object], message: str) -> None:
    with pytest.raises(BrokerOptionError, match=message):
        parse_options("kafka://k1", options)


def test_query_values_are_typed_and_the_mapping_wins() -> None:
    options = parse_options(
        "kafka://k1?partitions=8&acks=1&ssl_check_hostname=false",
        {"partitions": 12, "commit_interval_ms": "0"},
    )
    assert options.partitions == 12
    assert options.acks_setting == 1
    assert options.commit_interval_ms == 0
    assert options.ssl_check_hostname is False


def test_defaults_suit_request_reply() -> None:
    options = parse_options("kafka://k1")
    assert options.partitions == 4
    assert options.acks_setting == "all"
    assert options.linger_ms == 0
    assert options.fanout_fetch_max_wait_ms < options.group_fetch_max_wait_ms


def test_credentials_in_the_url_need_sasl_and_stay_out_of_repr() -> None:
    options = parse_options(
        "kafka://alice:s%40cret@k1:9092?security_protocol=SASL_SSL&sasl_mechanism=SCRAM-SHA-512"
    )
    assert (options.sasl_username, options.sasl_password) == ("alice", "s@cret")
    assert "s@cret" not in repr(options)
    kwargs = options.client_kwargs()
    assert kwargs["sasl_mechanism"] == "SCRAM-SHA-512"
    assert kwargs["sasl_plain_password"] == "s@cret"
    assert isinstance(kwargs["ssl_context"], ssl.SSLContext)


def test_credentials_over_plaintext_are_refused() -> None:
    with pytest.raises(BrokerOptionError, match="security_protocol=SASL_SSL"):
        parse_options("kafka://alice:secret@k1:9092")


def test_plaintext_sends_no_sasl_or_tls_settings() -> None:
    kwargs = parse_options("kafka://k1").client_kwargs()
    assert kwargs["security_protocol"] == "PLAINTEXT"
    assert "ssl_context" not in kwargs
    assert "sasl_plain_password" not in kwargs


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("nats://k1", "not a Kafka URL"),
        ("kafka://", "names no broker"),
        ("kafka://k1:port", "not host\\[:port\\]"),
        ("kafka://k1?partition=3", "unknown Kafka option 'partition'.*partitions"),
        ("kafka://k1?partitions=0", "'partitions' must be at least 1"),
        ("kafka://k1?partitions=many", "'partitions'"),
        ("kafka://k1?acks=2", "use all, 1 or 0"),
        ("kafka://k1?heartbeat_interval_ms=20000", "below 'session_timeout_ms'"),
        ("kafka://k1?security_protocol=TLS", "SASL_SSL"),
        ("kafka://k1?sasl_mechanism=MD5", "SCRAM-SHA-256"),
        ("kafka://k1?sasl_oauth_token_provider=x", "only be given in the options mapping"),
    ],
)
def test_bad_urls_and_options_say_what_to_fix(url: str, message: str) -> None:
    with pytest.raises(BrokerOptionError, match=message):
        parse_options(url)
