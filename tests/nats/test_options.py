"""Reading the NATS URL and options (no server needed)."""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

import pytest

from toolbus_nats import NatsOptions, parse_options
from toolbus_nats.security import security_kwargs


def connect_kwargs(options: NatsOptions) -> dict[str, Any]:
    """Everything the adapter hands ``nats.connect`` (callbacks aside)."""
    return {**options.connection_kwargs(), **security_kwargs(options)}


def test_defaults_point_at_a_local_server() -> None:
    options = parse_options("nats://localhost")
    assert options.servers == ("localhost:4222",)
    assert options.server_urls() == ["nats://localhost:4222"]
    assert options.max_reconnect_attempts == -1
    assert options.ack_wait == 30.0 and options.max_deliveries == 5


def test_several_servers_in_one_url() -> None:
    options = parse_options("nats://a.example:4222,b.example:5222,c.example")
    assert options.servers == ("a.example:4222", "b.example:5222", "c.example:4222")


def test_user_and_password_from_the_url_stay_out_of_server_urls() -> None:
    options = parse_options("nats://alice:s%40cret@h1:4222,h2:4222")
    assert (options.user, options.password) == ("alice", "s@cret")
    kwargs = connect_kwargs(options)
    assert kwargs["user"] == "alice" and kwargs["password"] == "s@cret"
    assert all("alice" not in url and "cret" not in url for url in kwargs["servers"])
    assert "cret" not in repr(options)


def test_a_bare_userinfo_is_a_token() -> None:
    options = parse_options("nats://t0ken@h:4222")
    assert options.token == "t0ken" and options.user is None
    assert connect_kwargs(options)["token"] == "t0ken"


def test_query_options_are_typed() -> None:
    options = parse_options(
        "nats://h:1?ack_wait=2.5&max_deliveries=3&storage=memory&tls_handshake_first=true"
        "&name=svc-1"
    )
    assert options.ack_wait == 2.5
    assert options.max_deliveries == 3
    assert options.storage == "memory"
    assert options.tls_handshake_first is True
    assert options.name == "svc-1"


def test_typed_configuration_values_are_accepted() -> None:
    options = parse_options("nats://h:1", {"ack_wait": 2, "tls": True, "pull_batch": 8})
    assert options.ack_wait == 2.0 and isinstance(options.ack_wait, float)
    assert options.tls is True and options.pull_batch == 8


def test_configuration_wins_over_the_url() -> None:
    options = parse_options(
        "nats://h:1?ack_wait=2", {"ack_wait": 9, "token": "from-config", "servers": "x:1,y:2"}
    )
    assert options.ack_wait == 9
    assert options.token == "from-config"
    assert options.servers == ("x:1", "y:2")
    assert parse_options("nats://h:1", {"servers": ["a:1", "b"]}).servers == ("a:1", "b:4222")


def test_a_server_list_in_configuration_may_use_nats_urls() -> None:
    listed = ["nats://nats-1:4222", "tls://nats-2:4222", "nats-3"]
    options = parse_options("nats://unused", {"servers": listed})
    assert options.servers == ("nats-1:4222", "nats-2:4222", "nats-3:4222")


def test_acks_are_confirmed_unless_told_otherwise() -> None:
    assert parse_options("nats://a").confirm_acks is True
    assert parse_options("nats://a?confirm_acks=false").confirm_acks is False


def test_servers_are_tried_at_random_unless_told_otherwise() -> None:
    assert connect_kwargs(parse_options("nats://a,b"))["dont_randomize"] is False
    in_order = connect_kwargs(parse_options("nats://a,b?randomize=false"))
    assert in_order["dont_randomize"] is True
    assert in_order["servers"] == ["nats://a:4222", "nats://b:4222"]


@pytest.mark.parametrize(
    ("url", "options", "message"),
    [
        ("nats://h:1?ack_wiat=2", {}, "'ack_wiat': is not a NATS option"),
        ("nats://h:1", {"max_deliveries": "many"}, "'max_deliveries'"),
        ("nats://h:1?storage=disk", {}, "'storage'"),
        ("nats://h:1?ack_wait=0", {}, "'ack_wait': must be a positive"),
        ("nats://h:1?pull_batch=1000", {}, "at most 256"),
        ("nats://h:notaport", {}, "host[:port]"),
        ("nats://a:4222,,b:4222", {}, "NATS server '' is not host[:port]"),
        ("nats://h:1", {"servers": 4222}, "'servers': must be a list of host:port"),
        ("nats://h:1", {"servers": ["a:1", 2]}, "'servers': must be a list of host:port"),
        ("nats://h:1", {"servers": ["http://a:1"]}, "entry 1 of 1 is not"),
        ("kafka://h:1", {}, "not a NATS URL"),
        ("nats://h:1?tls_handshake_first=maybe", {}, "not a boolean"),
        ("nats://h:1", {"max_deliveries": 2.5}, "must be int, not float"),
        ("nats://h:1", {"tls": 1}, "must be bool, not int"),
    ],
)
def test_bad_options_say_what_is_wrong(url: str, options: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_options(url, options)


def test_tls_scheme_and_files_make_a_context(tmp_path: Path) -> None:
    assert parse_options("nats://h:1").ssl_context() is None
    options = parse_options("nats+tls://h:1?tls_hostname=broker.internal")
    assert options.tls and options.server_urls() == ["tls://h:1"]
    kwargs = connect_kwargs(options)
    assert isinstance(kwargs["tls"], ssl.SSLContext)
    assert kwargs["tls_hostname"] == "broker.internal"


def test_a_client_key_without_its_certificate_is_refused() -> None:
    with pytest.raises(ValueError, match="'tls_key': needs 'tls_cert'"):
        parse_options("nats+tls://h:1", {"tls_key": "client.key"})


def test_credentials_and_nkey_files_are_passed_on() -> None:
    kwargs = connect_kwargs(parse_options("nats://h:1?credentials=/etc/nats/app.creds"))
    assert kwargs["user_credentials"] == "/etc/nats/app.creds"
    kwargs = connect_kwargs(parse_options("nats://h:1", {"nkey_seed": "/etc/nats/seed.nk"}))
    assert kwargs["nkeys_seed"] == "/etc/nats/seed.nk"
