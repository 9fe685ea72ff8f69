"""The Redis state store's URL and options, and what connecting says when it cannot."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.redis.server import RedisServer
from tests.support.servers import LOOPBACK, refusing_port
from toolbus.domain.errors import BrokerOptionError, StateStoreError, StateStoreUnavailable
from toolbus.plugins import connect_state
from toolbus_redis import RedisStateStore, parse_options


def test_the_url_gives_server_database_credentials_and_options() -> None:
    options = parse_options("rediss://app:s%40cret@cache.internal:6380/3?prefix=shop&timeout=2")
    assert options.server == "cache.internal:6380"
    assert (options.db, options.prefix, options.timeout) == (3, "shop", 2.0)
    assert (options.username, options.password, options.tls) == ("app", "s@cret", True)
    kwargs = options.client_kwargs()
    assert (kwargs["host"], kwargs["port"], kwargs["db"], kwargs["ssl"]) == (
        "cache.internal",
        6380,
        3,
        True,
    )


def test_a_password_alone_and_the_defaults() -> None:
    options = parse_options("redis://:only-password@[::1]")
    assert (options.server, options.username, options.password) == (
        "[::1]:6379",
        None,
        "only-password",
    )
    assert options.client_kwargs()["host"] == "::1"
    assert (options.db, options.prefix) == (0, "toolbus")


def test_configuration_wins_over_the_url() -> None:
    options = parse_options("redis://h/1?prefix=url", {"prefix": "configured", "db": 4})
    assert (options.prefix, options.db) == ("configured", 4)


def test_every_problem_is_reported_at_once_without_the_password() -> None:
    with pytest.raises(BrokerOptionError) as caught:
        parse_options("redis://app:hunter2@h1,h2/x?timout=1&max_connections=0")
    message = str(caught.value)
    assert "hunter2" not in message
    assert "state store URL 'redis://***@h1,h2/x?timout=***&max_connections=***'" in message
    assert "names several servers; give the primary's host:port only" in message
    assert "'db': must be a whole number" in message
    assert "did you mean 'timeout'?" in message
    assert "'max_connections': must be at least 1" in message


def test_a_url_that_is_not_redis_is_refused() -> None:
    with pytest.raises(BrokerOptionError, match="is not a Redis URL"):
        parse_options("nats://h:6379")


@pytest.mark.anyio
async def test_no_server_is_a_clear_error_naming_it() -> None:
    with refusing_port() as port, pytest.raises(StateStoreUnavailable) as caught:
        await connect_state(f"redis://:topsecret@{LOOPBACK}:{port}?timeout=0.5")
    assert f"cannot connect to Redis at {LOOPBACK}:{port}" in str(caught.value)
    assert "topsecret" not in str(caught.value)


@pytest.mark.anyio
@pytest.mark.broker
async def test_a_wrong_password_is_refused_once_and_clearly(tmp_path: Path) -> None:
    server = RedisServer(tmp_path, password="right-one")
    with server.running():
        with pytest.raises(StateStoreError, match="refused the credentials") as caught:
            await connect_state(f"redis://:wrong-one@{LOOPBACK}:{server.port}")
        assert "wrong-one" not in str(caught.value)
        store = await connect_state(server.url, {"password": "right-one"})
        try:
            assert isinstance(store, RedisStateStore)
            version = await store.put("sessions", "alice", b"ok")
            entry = await store.get("sessions", "alice")
            assert entry is not None and entry.version == version
        finally:
            await store.close()


@pytest.mark.anyio
@pytest.mark.broker
async def test_a_key_holding_something_else_is_a_clear_error(redis_server: RedisServer) -> None:
    store = await connect_state(f"{redis_server.url}?prefix=clash")
    try:
        assert isinstance(store, RedisStateStore)
        await store.client.set(b"clash:sessions:alice", b"not a hash")
        with pytest.raises(StateStoreError, match="give the store a 'prefix' nothing else uses"):
            await store.put("sessions", "alice", b"x")
    finally:
        await store.close()
