"""Token, user/password and TLS options reach the server (servers of the tests' own)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import pytest

from tests.nats.server import nats_server_binary
from tests.support.certificates import make_certificates
from tests.support.real_parts import requires
from tests.support.servers import LOOPBACK, server_on_free_port
from toolbus.domain.errors import BusClosed
from toolbus.testing.conformance import fresh_queue, next_delivery
from toolbus_nats import connect

pytestmark = [pytest.mark.anyio, pytest.mark.broker]


@contextmanager
def plain_server(workdir: Path, *flags: str) -> Iterator[int]:
    """A core-NATS server with ``flags`` (no JetStream needed here); yields its port."""
    binary = nats_server_binary()

    def argv(port: int) -> list[str]:
        return [binary, "-a", LOOPBACK, "-p", str(port), *flags]

    with server_on_free_port(argv, workdir=workdir) as (port, _):
        yield port


async def round_trip(url: str, **options: object) -> None:
    bus = await connect(url, {"connect_timeout": 2, **options})
    try:
        queue = fresh_queue()
        subscription = await bus.subscribe(queue)
        await bus.publish(queue, b"ok", {"id": "1"})
        assert (await next_delivery(subscription, 5)).body == b"ok"
    finally:
        await bus.close()


async def test_token_from_the_url_or_from_configuration(tmp_path: Path) -> None:
    with plain_server(tmp_path, "--auth", "s3cret") as port:
        await round_trip(f"nats://s3cret@{LOOPBACK}:{port}")
        await round_trip(f"nats://{LOOPBACK}:{port}", token="s3cret")
        with anyio.fail_after(10), pytest.raises(BusClosed, match="Authorization Violation"):
            await round_trip(f"nats://wrong@{LOOPBACK}:{port}")


async def test_user_and_password(tmp_path: Path) -> None:
    with plain_server(tmp_path, "--user", "alice", "--pass", "p@ss") as port:
        await round_trip(f"nats://alice:p%40ss@{LOOPBACK}:{port}")
        await round_trip(f"nats://{LOOPBACK}:{port}", user="alice", password="p@ss")
        with anyio.fail_after(10), pytest.raises(BusClosed, match="Authorization"):
            await round_trip(f"nats://alice:nope@{LOOPBACK}:{port}")


@requires(shutil.which("openssl") is not None, "the openssl command", "apt-get install openssl")
async def test_tls_with_a_private_certificate_authority(tmp_path: Path) -> None:
    make_certificates(tmp_path, "nats")
    flags = (
        "--tls",
        "--tlscert",
        str(tmp_path / "server.pem"),
        "--tlskey",
        str(tmp_path / "server.key"),
    )
    with plain_server(tmp_path, *flags) as port:
        ca = tmp_path / "ca.pem"
        await round_trip(f"nats+tls://{LOOPBACK}:{port}?tls_ca={ca}")
        await round_trip(f"nats://{LOOPBACK}:{port}", tls=True, tls_ca=str(ca))
        # The system trust store does not know our CA: refused.
        with anyio.fail_after(10), pytest.raises(BusClosed):
            await round_trip(f"nats+tls://{LOOPBACK}:{port}")
