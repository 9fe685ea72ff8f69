"""The NATS state store's URL, options and key names (no server needed but for connecting)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.nats.server import NatsServer
from tests.support.servers import LOOPBACK, refusing_port
from toolbus.domain.errors import (
    BrokerOptionError,
    StateKeyError,
    StateStoreError,
    StateStoreUnavailable,
)
from toolbus.plugins import connect_state
from toolbus_nats import connect
from toolbus_nats.state_options import MAX_KEY_LENGTH, bucket_key, parse_state_options


def test_the_url_gives_servers_credentials_and_the_buckets_settings() -> None:
    options = parse_state_options(
        "nats+tls://alice:s%40cret@n1:4223,n2?bucket=shop&replicas=3&storage=memory&timeout=2"
    )
    assert options.servers == ("n1:4223", "n2:4222")
    assert (options.user, options.password, options.tls) == ("alice", "s@cret", True)
    assert (options.bucket, options.replicas, options.storage) == ("shop", 3, "memory")
    assert options.timeout == 2.0
    connection = options.broker_options()
    assert "bucket" not in connection and "timeout" not in connection
    assert connection["password"] == "s@cret"


def test_configuration_wins_over_the_url() -> None:
    options = parse_state_options("nats://n1?bucket=url", {"bucket": "configured"})
    assert options.bucket == "configured"


def test_every_problem_is_reported_at_once_without_the_password() -> None:
    with pytest.raises(BrokerOptionError) as caught:
        parse_state_options("nats://alice:hunter2@n1:bad?replicas=6&bukket=x")
    message = str(caught.value)
    assert "hunter2" not in message
    assert "state store URL 'nats://***@n1:bad?replicas=***&bukket=***'" in message
    assert "'n1:bad' is not host[:port]" in message
    assert "'replicas': may be at most 5" in message
    assert "did you mean 'bucket'?" in message


def test_options_meant_for_a_broker_and_a_bad_bucket_name_are_refused() -> None:
    with pytest.raises(BrokerOptionError) as caught:
        parse_state_options("nats://n1?ack_wait=5&bucket=a.b", {"pull_batch": 8})
    message = str(caught.value)
    assert "'ack_wait': is for broker URLs; a state store does not use it" in message
    assert "'pull_batch': is for broker URLs" in message
    assert "'bucket': may hold only letters, digits" in message


def test_a_url_that_is_not_nats_is_refused() -> None:
    with pytest.raises(BrokerOptionError, match="is not a NATS URL"):
        parse_state_options("redis://n1:4222")


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("alice", "sessions.alice"),
        ("a/b-c_d", "sessions.a/b-c_d"),
        ("a.b", "sessions.a=2Eb"),
        ("a=b", "sessions.a=3Db"),
        ("a b", "sessions.a=20b"),
        ("é", "sessions.=C3=A9"),
        ("*", "sessions.=2A"),
    ],
)
def test_keys_keep_what_nats_allows_and_escape_the_rest(key: str, expected: str) -> None:
    assert bucket_key("sessions", key) == expected


def test_a_long_key_is_cut_and_ends_in_its_hash() -> None:
    long = "x" * (MAX_KEY_LENGTH + 1)
    name = bucket_key("sessions", long)
    assert len(name) <= len("sessions.") + MAX_KEY_LENGTH
    assert "=_" in name and name == bucket_key("sessions", long)
    assert name != bucket_key("sessions", long + "y")
    assert bucket_key("sessions", "x" * MAX_KEY_LENGTH) == "sessions." + "x" * MAX_KEY_LENGTH


def test_a_namespace_is_checked_before_anything_is_sent() -> None:
    with pytest.raises(StateKeyError, match="namespace 'Sessions'"):
        bucket_key("Sessions", "alice")


@pytest.mark.anyio
async def test_no_server_is_a_clear_error_within_the_connect_timeout() -> None:
    with refusing_port() as port, pytest.raises(StateStoreUnavailable) as caught:
        await connect_state(f"nats://bob:topsecret@{LOOPBACK}:{port}?connect_timeout=0.5")
    assert "cannot connect to NATS at" in str(caught.value)
    assert "topsecret" not in str(caught.value)


_NATS_KEY = re.compile(r"[-/_=.a-zA-Z0-9]+")


@given(st.text(min_size=1), st.text(min_size=1))
def test_the_key_mapping_is_one_to_one_and_gives_keys_nats_accepts(first: str, second: str) -> None:
    try:
        one, two = bucket_key("ns", first), bucket_key("ns", second)
    except StateKeyError:  # a lone surrogate: refused, not mapped
        return
    assert _NATS_KEY.fullmatch(one) and not one.endswith(".")
    assert one.count(".") == 1  # the namespace's token, then the key's: never more
    assert (one == two) == (first == second)


@pytest.mark.anyio
@pytest.mark.broker
async def test_a_bucket_without_per_message_ttls_is_refused_with_the_fix(
    nats_server: NatsServer,
) -> None:
    bus = await connect(nats_server.url)
    try:
        # A bucket made by other tools, as older servers and clients made them.
        await bus.nc.jetstream().add_stream(
            name="KV_legacy",
            subjects=["$KV.legacy.>"],
            max_msgs_per_subject=1,
            allow_rollup_hdrs=True,
            deny_delete=True,
        )
    finally:
        await bus.close()
    with pytest.raises(StateStoreError, match="does not allow per-message TTLs") as caught:
        await connect_state(f"{nats_server.url}?bucket=legacy")
    assert "name another bucket with the 'bucket' option" in str(caught.value)
