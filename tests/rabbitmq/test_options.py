"""The RabbitMQ URL and options: read as documented, every problem named, no secret shown."""

from __future__ import annotations

from pathlib import Path

import pytest

import toolbus
from toolbus import BrokerOptionError
from toolbus.plugins import adapter_for
from toolbus_rabbitmq import parse_options
from toolbus_rabbitmq.bus import connect, node_urls
from toolbus_rabbitmq.security import credentials

SECRET = "p@ss:w/rd"


def test_defaults() -> None:
    options = parse_options("amqp://rabbit-1")

    assert options.servers == ("rabbit-1:5672",)
    assert (options.vhost, options.tls, options.user) == ("/", False, None)
    assert (options.prefetch, options.queue_type) == (64, "classic")
    assert credentials(options) == ("guest", "guest")


@pytest.mark.parametrize(
    ("url", "servers", "tls"),
    [
        ("amqp://a,b:5673", ("a:5672", "b:5673"), False),
        ("rabbitmq://a", ("a:5672",), False),
        ("amqps://a,b:5000", ("a:5671", "b:5000"), True),
        ("amqp://a?tls=true", ("a:5672",), True),
    ],
)
def test_schemes_ports_and_tls(url: str, servers: tuple[str, ...], tls: bool) -> None:
    options = parse_options(url)

    assert (options.servers, options.tls) == (servers, tls)


@pytest.mark.parametrize(
    ("path", "vhost"),
    [("", "/"), ("/", "/"), ("/%2F", "/"), ("/prod", "prod"), ("/a%2Fb", "a/b")],
)
def test_the_path_is_the_vhost(path: str, vhost: str) -> None:
    assert parse_options(f"amqp://h{path}").vhost == vhost


def test_the_vhost_reaches_the_client_as_rabbitmq_reads_it() -> None:
    (url,) = node_urls(parse_options("amqp://h/a%2Fb"))

    # aiormq reads the vhost from the path, with "%2F" for "/".
    assert url.path[1:].replace("%2F", "/") == "a/b"
    (url,) = node_urls(parse_options("amqp://h"))
    assert url.path[1:].replace("%2F", "/") == "/"


def test_credentials_from_the_url_or_the_mapping_never_shown() -> None:
    from_url = parse_options("amqp://alice:p%40ss%3Aw%2Frd@h")
    from_mapping = parse_options("amqp://h", {"user": "alice", "password": SECRET})

    for options in (from_url, from_mapping):
        assert credentials(options) == ("alice", SECRET)
        assert SECRET not in repr(options) and "alice" not in repr(options)


def test_the_mapping_wins_over_the_query() -> None:
    options = parse_options("amqp://h?prefetch=5&queue_type=quorum", {"prefetch": 9})

    assert (options.prefetch, options.queue_type) == (9, "quorum")


def test_every_problem_at_once_and_no_value_echoed() -> None:
    with pytest.raises(BrokerOptionError) as caught:
        parse_options(
            f"ftp://h,bad:port?prefetch={SECRET}&heartbeat=70000&queue_type=stream",
            {"prefetc": 2, "password": SECRET},
        )

    fields = sorted(problem.field for problem in caught.value.problems)
    assert fields == ["", "", "heartbeat", "prefetc", "prefetch", "queue_type"]
    message = str(caught.value)
    assert "not a RabbitMQ URL" in message and "'bad:port' is not host[:port]" in message
    assert "did you mean 'prefetch'" in message
    assert "field 'queue_type': must be one of classic, quorum" in message
    assert SECRET not in message


def test_one_password_source_at_a_time(tmp_path: Path) -> None:
    with pytest.raises(BrokerOptionError, match="sets the password in 2 ways"):
        parse_options("amqp://alice:x@h", {"password_env": "RABBIT_PASSWORD"})
    with pytest.raises(BrokerOptionError, match="'tls_key': needs 'tls_cert'"):
        parse_options("amqps://h", {"tls_key": str(tmp_path / "key.pem")})


def test_a_password_from_the_environment_or_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RABBIT_PASSWORD", SECRET)
    secret_file = tmp_path / "password"
    secret_file.write_text(SECRET + "\n", encoding="utf-8")

    from_env = parse_options("amqp://alice@h", {"password_env": "RABBIT_PASSWORD"})
    from_file = parse_options("amqp://alice@h", {"password_file": str(secret_file)})

    assert credentials(from_env) == credentials(from_file) == ("alice", SECRET)


def test_a_missing_variable_or_file_is_named_and_nothing_is_sent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RABBIT_PASSWORD", raising=False)
    unset = parse_options("amqp://alice@h", {"password_env": "RABBIT_PASSWORD"})
    missing = parse_options("amqp://alice@h", {"password_file": str(tmp_path / "nope")})

    with pytest.raises(BrokerOptionError, match="'RABBIT_PASSWORD', which is not set"):
        credentials(unset)
    with pytest.raises(BrokerOptionError, match=r"cannot read .*nope"):
        credentials(missing)


@pytest.mark.anyio
async def test_connect_reports_bad_options_before_connecting() -> None:
    with pytest.raises(BrokerOptionError, match="prefetch"):
        await connect("amqp://127.0.0.1:1?prefetch=0")


@pytest.mark.parametrize("scheme", ["amqp", "amqps", "rabbitmq"])
def test_each_scheme_finds_the_adapter(scheme: str) -> None:
    assert adapter_for(f"{scheme}://h").distribution == "toolbus-rabbitmq"


@pytest.mark.anyio
async def test_a_node_that_is_not_there_fails_connect_naming_it() -> None:
    with pytest.raises(toolbus.BusClosed, match=r"127\.0\.0\.1:1") as caught:
        await toolbus.connect("amqp://127.0.0.1:1", {"connect_timeout": 2})

    assert "cannot connect to RabbitMQ" in str(caught.value)
