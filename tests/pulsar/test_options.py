"""Broker URL and option parsing: every problem reported at once, secrets never shown."""

from __future__ import annotations

import pulsar
import pytest

from toolbus.domain.errors import ConfigError
from toolbus_pulsar.options import DEFAULT_MAX_MESSAGE_SIZE, parse_options


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
    assert options.client_arguments()["connection_timeout_ms"] == 5000
    assert options.client_arguments()["operation_timeout_seconds"] == 10
    assert options.authentication() is None


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
    assert options.client_arguments()["operation_timeout_seconds"] == 3


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
        ("pulsar://", "names no host"),
        ("pulsar://alice:secret@broker:6650", "carries credentials"),
        ("pulsar://b1:6650,,b3:6650", "lists '', which is not host[:port]"),
        ("pulsar://b1:6650,b2:http", "lists 'b2:http', which is not host[:port]"),
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
    assert "(hidden)" in message


def test_only_one_authentication_method() -> None:
    message = problems("pulsar://b:6650", {"token": "t", "basic_username": "u"})
    assert "several authentication methods" in message
    assert "tls_key_file" in problems("pulsar://b:6650", {"tls_cert_file": "/c.pem"})


@pytest.mark.parametrize(
    ("options", "kind"),
    [
        ({"token": "abc"}, pulsar.AuthenticationToken),
        ({"token_file": "/run/secrets/pulsar-token"}, pulsar.AuthenticationToken),
        ({"basic_username": "u", "basic_password": "p"}, pulsar.AuthenticationBasic),
        ({"oauth2": {"issuer_url": "https://i", "audience": "a"}}, pulsar.AuthenticationOauth2),
        ({"tls_cert_file": "/c.pem", "tls_key_file": "/k.pem"}, pulsar.AuthenticationTLS),
    ],
)
def test_authentication_methods(options: dict[str, object], kind: type) -> None:
    parsed = parse_options("pulsar+ssl://broker:6651", options)
    assert isinstance(parsed.authentication(), kind)
    assert isinstance(parsed.client_arguments()["authentication"], kind)
    assert "abc" not in repr(parsed)


def test_client_log_level_is_checked() -> None:
    assert parse_options("pulsar://b:6650?client_log_level=ERROR").client_log_level == "error"
    assert "debug, info, warn, error" in problems("pulsar://b:6650?client_log_level=loud")
