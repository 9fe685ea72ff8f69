"""Servers on loopback ports without racing other processes for them (tests/support/servers.py).

A real nats-server is started on a port another socket already listens on, as
happens when another process takes a chosen port first: the clash is told
apart from the other socket's answer and from other failures, and the server
is started again on another port.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.nats.server import nats_server_binary
from tests.support.servers import (
    LOOPBACK,
    PortTaken,
    StickyPort,
    bound_socket,
    free_port,
    listens,
    on_free_ports,
    refusing_port,
    server_process,
)


@contextmanager
def nats_on(port: int, workdir: Path) -> Iterator[int]:
    argv = [nats_server_binary(), "-a", LOOPBACK, "-p", str(port)]
    with server_process(argv, port=port, workdir=workdir) as process:
        assert listens(process.pid, port)
        yield port


def test_a_server_whose_port_was_taken_starts_again_on_another(tmp_path: Path) -> None:
    with bound_socket() as taken:
        ports = [taken.getsockname()[1], free_port()]
        tried: list[int] = []

        def choose() -> None:
            tried.append(ports[len(tried)])

        with on_free_ports(lambda: nats_on(tried[-1], tmp_path), choose) as port:
            # The taken port accepted connections (the other socket's backlog), yet the
            # server was not taken for started there.
            assert tried == ports and port == ports[1]
            with socket.create_connection((LOOPBACK, port), 5) as nats:
                assert nats.recv(4).startswith(b"INFO")  # nats-server speaks first


def test_a_port_taken_at_every_try_is_said_after_the_last(tmp_path: Path) -> None:
    with bound_socket() as taken:
        port = taken.getsockname()[1]
        tries = []

        with pytest.raises(PortTaken) as raised:  # noqa: SIM117
            with on_free_ports(lambda: nats_on(port, tmp_path), lambda: tries.append(1), tries=2):
                pass

    assert len(tries) == 2
    assert f"one of its ports [{port}] was taken" in str(raised.value)
    assert "address already in use" in str(raised.value)  # nats-server's own words


def test_a_server_failing_for_another_reason_is_not_started_again(tmp_path: Path) -> None:
    tries = []

    @contextmanager
    def wrong(port: int) -> Iterator[None]:
        argv = [nats_server_binary(), "-a", LOOPBACK, "-p", str(port), "--no-such-flag"]
        with server_process(argv, port=port, workdir=tmp_path):
            yield

    def choose() -> None:
        tries.append(free_port())

    with pytest.raises(RuntimeError) as raised:  # noqa: SIM117
        with on_free_ports(lambda: wrong(tries[-1]), choose):
            pass

    assert not isinstance(raised.value, PortTaken)
    assert len(tries) == 1
    assert "no-such-flag" in str(raised.value)


def test_a_sticky_port_is_kept_across_restarts(tmp_path: Path) -> None:
    server = StickyPort(lambda port: nats_on(port, tmp_path))
    with server.running() as first:
        pass
    with server.running() as again:
        pass

    assert first == again == server.port


def test_a_refusing_port_refuses_until_the_block_ends() -> None:
    with refusing_port() as port:
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((LOOPBACK, port), 5)
        # Nobody else can listen there meanwhile.
        with socket.socket() as other, pytest.raises(OSError):
            other.bind((LOOPBACK, port))


def test_a_bound_socket_is_listening_already() -> None:
    with bound_socket() as listener, socket.create_connection(listener.getsockname(), 5):
        accepted, _ = listener.accept()
        accepted.close()
