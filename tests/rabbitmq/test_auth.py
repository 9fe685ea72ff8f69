"""Credentials, TLS and the broker's own message limit, on a node of the test's own.

The node has a user with a password (no guest from elsewhere), a TLS listener
with a certificate from a throw-away CA, and a ``max_message_size`` below the
adapter's, so each way in and each refusal is the broker's own.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from tests.rabbitmq.server import RabbitMQServer
from tests.support.certificates import make_certificates
from tests.support.real_parts import requires
from tests.support.servers import LOOPBACK
from toolbus import MessageRefused
from toolbus.domain.errors import BusClosed, MessageTooLarge
from toolbus.testing.conformance import fresh_queue, next_delivery
from toolbus_rabbitmq import connect

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.broker,
    pytest.mark.slow,
    requires(shutil.which("openssl") is not None, "the openssl command", "apt-get install openssl"),
]

USER, PASSWORD = "alice", "p@ss:w/rd"
BROKER_LIMIT = 1024 * 1024


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, int, Path]]:
    """The node's plain and TLS ports, and the CA file."""
    work = tmp_path_factory.mktemp("rabbitmq-secured")
    make_certificates(work, "rabbit")
    server = RabbitMQServer(
        work / "node",
        tls=True,
        extra_config="\n".join(
            [
                f"default_user = {USER}",
                f"default_pass = {PASSWORD}",
                f"ssl_options.cacertfile = {work / 'ca.pem'}",
                f"ssl_options.certfile = {work / 'server.pem'}",
                f"ssl_options.keyfile = {work / 'server.key'}",
                "ssl_options.verify = verify_none",
                "ssl_options.fail_if_no_peer_cert = false",
                f"max_message_size = {BROKER_LIMIT}",
            ]
        ),
    )
    try:
        with server.running():
            yield server.port, server.tls_port, work / "ca.pem"
    finally:
        server.close()


async def round_trip(url: str, **options: object) -> None:
    bus = await connect(url, {"connect_timeout": 5, **options})
    try:
        queue = fresh_queue()
        subscription = await bus.subscribe(queue)
        await bus.publish(queue, b"ok", {"id": "1"})
        assert (await next_delivery(subscription, 10)).body == b"ok"
    finally:
        await bus.close()


async def test_the_password_from_the_url_the_options_a_variable_or_a_file(
    secured: tuple[int, int, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    port, _, _ = secured
    node = f"{LOOPBACK}:{port}"
    monkeypatch.setenv("RABBIT_PASSWORD", PASSWORD)
    (tmp_path / "password").write_text(PASSWORD + "\n", encoding="utf-8")

    await round_trip(f"amqp://{USER}:p%40ss%3Aw%2Frd@{node}")
    await round_trip(f"amqp://{node}", user=USER, password=PASSWORD)
    await round_trip(f"amqp://{USER}@{node}", password_env="RABBIT_PASSWORD")
    await round_trip(f"amqp://{USER}@{node}", password_file=str(tmp_path / "password"))


async def test_a_refused_login_fails_at_once_and_names_no_secret(
    secured: tuple[int, int, Path],
) -> None:
    port, _, _ = secured
    with anyio.fail_after(15), pytest.raises(BusClosed, match="refused the login") as caught:
        await round_trip(f"amqp://{LOOPBACK}:{port}", user=USER, password="wrong-secret")
    assert "wrong-secret" not in str(caught.value)
    # Said once, with one piece of advice: the login's.
    message = str(caught.value)
    assert message.count("cannot connect") == 1, message
    assert message.count("check") == 1 and "the password" in message, message


async def test_tls_with_a_private_certificate_authority(secured: tuple[int, int, Path]) -> None:
    _, tls_port, ca = secured
    node = f"{LOOPBACK}:{tls_port}"
    credentials = {"user": USER, "password": PASSWORD}

    await round_trip(f"amqps://{node}?tls_ca={ca}", **credentials)
    await round_trip(f"amqp://{node}", tls=True, tls_ca=str(ca), **credentials)
    # The system trust store does not know our CA: refused.
    with anyio.fail_after(15), pytest.raises(BusClosed):
        await round_trip(f"amqps://{node}", **credentials)


async def test_a_message_over_the_broker_s_own_limit_is_refused_naming_both_settings(
    secured: tuple[int, int, Path],
) -> None:
    port, _, _ = secured
    bus = await connect(f"amqp://{USER}:p%40ss%3Aw%2Frd@{LOOPBACK}:{port}")
    big = b"x" * (BROKER_LIMIT + 1)
    refusals: list[str] = []
    refused = anyio.Event()

    class Refusals(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "refused a message" in record.getMessage():
                refusals.append(record.getMessage())
                refused.set()

    handler = Refusals(logging.WARNING)
    logging.getLogger("toolbus.rabbitmq").addHandler(handler)
    try:
        # Persistent: the broker's refusal comes back to the publisher.
        with pytest.raises(MessageRefused, match="max_message_size") as caught:
            await bus.publish(fresh_queue(persistent=True), big, {"id": "big"})
        assert isinstance(caught.value, MessageTooLarge)
        # Non-persistent: nothing is confirmed, so the refusal is logged when the
        # broker closes the channel; the message is lost (at most once), and the
        # channel is opened again for the next one.
        queue = fresh_queue()
        subscription = await bus.subscribe(queue)
        refusals.clear()
        refused = anyio.Event()
        await bus.publish(queue, big, {"id": "big"})
        with anyio.fail_after(10):
            await refused.wait()
        await bus.publish(queue, b"small", {"id": "small"})
        assert (await next_delivery(subscription, 10)).body == b"small"
        assert "max_message_size" in refusals[0]
    finally:
        logging.getLogger("toolbus.rabbitmq").removeHandler(handler)
        await bus.close()
