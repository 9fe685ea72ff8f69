"""Broker URL and option parsing: every problem reported at once, secrets never shown."""

from __future__ import annotations

from typing import Any

import pulsar
import pytest

from toolbus.domain.errors import ConfigError
from toolbus_pulsar.options import DEFAULT_MAX_MESSAGE_SIZE, PulsarOptions, parse_options
from toolbus_pulsar.security import authentication, security_arguments


def client_arguments(options: PulsarOptions) -> dict[str, Any]:
    """What the adapter makes its pulsar-client Client with (the logger aside)."""
    return {**options.connection_arguments(), **security_arguments(options)}


def problems(url: str, options: dict[str, object] | None = None) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_options(url, options)
    return str(caught.value)


def test_defaults_suit_a_cli_that_must_fail_fast() -> None:
    options = parse_options("pulsar://broker:6650")
    assert options.service_url == "pulsar://broker:6650"
    assert options.connect_timeout == 5.0
    assert options.operation_timeout == 10.0
    assert options.nack_redelivery_delay == 1.0
    assert options.max_message_size == DEFAULT_MAX_MESSAGE_SIZE
    assert client_arguments(options)["connection_timeout_ms"] == 5000
    assert client_arguments(options)["operation_timeout_seconds"] == 10
    assert authentication(options) is None


def test_query_options_are_parsed_and_the_mapping_wins() -> None:
    options = parse_options(
        "pulsar+ssl://broker:6651?operation_timeout=2.5&receiver_queue_size=50&tls_allow_insecure=yes",
        {"receiver_queue_size": 7},
    )
    assert options.service_url == "pulsar+ssl://broker:6651"
    assert options.operation_timeout == 2.5
    assert options.receiver_queue_size == 7
    assert options.tls_allow_insecure is True
    # pulsar-client counts whole seconds: round up, never down to "no timeout".
    assert client_arguments(options)["operation_timeout_seconds"] == 3


def test_every_problem_is_reported_together() -> None:
    message = problems(
        "pulsar://broker:6650?operation_timeout=-1&receiver_queue_size=lots",
        {"colour": "blue", "tls_allow_insecure": "perhaps"},
    )
    assert "4 problems" in message
    assert "operation_timeout" in message and "greater than 0" in message
    assert "receiver_queue_size" in message
    assert "field 'colour': is not a Pulsar option" in message
    assert "tls_allow_insecure" in message and "true or false" in message


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("nats://broker:4222", "not a Pulsar URL"),
        ("pulsar://", "names no server"),
        ("pulsar://alice:secret@broker:6650", "carries credentials"),
        ("pulsar://b1:6650,,b3:6650", "Pulsar server '' is not host[:port]"),
        ("pulsar://b1:6650,b2:http", "Pulsar server 'b2:http' is not host[:port]"),
    ],
)
def test_bad_urls_are_explained(url: str, expected: str) -> None:
    message = problems(url)
    assert expected in message
    assert "secret" not in message


def test_several_brokers_in_one_url() -> None:
    url = "pulsar+ssl://pulsar-1:6651,pulsar-2:6651,[::1]:6651"
    assert parse_options(url).service_url == url


def test_secrets_never_appear_in_errors() -> None:
    message = problems("pulsar://broker:6650", {"token": "", "oauth2": "not-json-s3cr3t"})
    assert "s3cr3t" not in message


def test_only_one_authentication_method() -> None:
    message = problems("pulsar://b:6650", {"token": "t", "basic_username": "u"})
    assert "several authentication methods" in message
    assert "'tls_cert': needs 'tls_key'" in problems("pulsar://b:6650", {"tls_cert": "/c.pem"})


@pytest.mark.parametrize(
    ("options", "kind"),
    [
        ({"token": "abc"}, pulsar.AuthenticationToken),
        ({"token_file": "/run/secrets/pulsar-token"}, pulsar.AuthenticationToken),
        ({"basic_username": "u", "basic_password": "p"}, pulsar.AuthenticationBasic),
        ({"oauth2": {"issuer_url": "https://i", "audience": "a"}}, pulsar.AuthenticationOauth2),
        ({"tls_cert": "/c.pem", "tls_key": "/k.pem"}, pulsar.AuthenticationTLS),
    ],
)
def test_authentication_methods(options: dict[str, object], kind: type) -> None:
    parsed = parse_options("pulsar+ssl://broker:6651", options)
    assert isinstance(authentication(parsed), kind)
    assert isinstance(client_arguments(parsed)["authentication"], kind)
    assert "abc" not in repr(parsed)


def test_client_log_level_is_checked() -> None:
    assert parse_options("pulsar://b:6650?client_log_level=ERROR").client_log_level == "error"
    assert "debug, info, warn, error" in problems("pulsar://b:6650?client_log_level=loud")


def test_tls_is_the_scheme_pulsar_client_takes_it_from() -> None:
    assert parse_options("pulsar://b:6650?tls=true").service_url == "pulsar+ssl://b:6650"
    with_ca = parse_options("pulsar://b:6651", {"tls_ca": "/ca.pem"})
    assert with_ca.service_url == "pulsar+ssl://b:6651"
    assert client_arguments(with_ca)["tls_trust_certs_file_path"] == "/ca.pem"
    assert parse_options("pulsar+ssl://b:6651").tls is True
    assert parse_options("pulsar://b:6650").service_url == "pulsar://b:6650"
