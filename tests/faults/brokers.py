"""The brokers of the fault matrix: real servers a test restarts, kills, cuts off and slows.

Each :class:`FaultyBroker` is one server process on a loopback port (a free one
when it first starts, another where that was taken, the same after) with
its data in a directory of its own, and a :class:`~tests.support.tcp_proxy.TcpProxy`
in front of it. Every toolbus process of the matrix connects through the proxy,
so the test can cut the network between them and the broker, or slow it, as
well as stop the broker (SIGTERM, an orderly restart) or kill it (SIGKILL, a
crash) and start it again at the same address with its data. Tansu is told to
advertise the proxy's address, so that its clients come back through it;
pulsar-lite advertises its own (it has no setting for it), so after a topic
lookup its clients connect to it directly.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from tests.kafka.broker import TANSU_OPTIONS, tansu_binary
from tests.nats.server import NatsServer
from tests.pulsar.server import BINARY as PULSAR_LITE
from tests.pulsar.server import CONFIG as PULSAR_LITE_CONFIG
from tests.rabbitmq.server import RabbitMQServer, require_rabbitmq
from tests.support.servers import (
    LOOPBACK,
    PORT_TRIES,
    PortTaken,
    free_port,
    log_size,
    stop_process,
    wait_for_port,
)
from tests.support.tcp_proxy import TcpProxy

#: Every broker the matrix runs on.
KINDS = ("nats", "kafka", "pulsar", "rabbitmq")
#: Faults made by the proxy, which a broker that sends its clients elsewhere escapes.
PROXY_FAULTS = ("cut", "latency")
#: Brokers whose clients escape the proxy: pulsar-lite answers a topic lookup with its
#: own address, and clients connect there, so a proxy in front of it carries the lookups
#: only (it has no setting for the address it advertises). The proxy's faults are not
#: run on them.
ESCAPE_THE_PROXY = frozenset({"pulsar"})

#: Options the matrix's toolbus processes connect with, beyond the defaults, and why.
OPTIONS = {
    # A persistent request whose ack was lost with the connection comes back after
    # ack_wait: 5 s rather than 30 s keeps the test short.
    "nats": "ack_wait=5",
    # Tansu holds a group's first join for half the session timeout: short group
    # timers keep the test short (below what a Kafka cluster accepts).
    "kafka": TANSU_OPTIONS,
    "pulsar": "",
    "rabbitmq": "",
}


@dataclass
class FaultyBroker:
    """One broker server that a test can stop, kill and start again, behind a proxy."""

    kind: str
    workdir: Path
    #: The server's own port: chosen when it first starts (0 until then), kept after.
    port: int = 0
    proxy: TcpProxy | None = None
    #: Whether the broker keeps what it holds over a restart (Tansu keeps it in memory).
    keeps_data: bool = True
    _process: subprocess.Popen[bytes] | None = None
    _rabbitmq: RabbitMQServer | None = None
    _rabbitmq_running: AbstractContextManager[Any] | None = None

    def __post_init__(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        if self.kind == "kafka":
            self.keeps_data = False
        if self.kind == "rabbitmq":
            require_rabbitmq()
            self._rabbitmq = RabbitMQServer(self.workdir)

    @property
    def url(self) -> str:
        """The broker URL toolbus processes use: through the proxy, with :data:`OPTIONS`."""
        assert self.proxy is not None
        address = f"{LOOPBACK}:{self.proxy.port}"
        scheme = {"nats": "nats", "kafka": "kafka", "pulsar": "pulsar", "rabbitmq": "amqp"}
        options = OPTIONS[self.kind]
        return f"{scheme[self.kind]}://{address}" + (f"?{options}" if options else "")

    @property
    def running(self) -> bool:
        if self._rabbitmq is not None:
            return self._rabbitmq_running is not None
        return self._process is not None and self._process.poll() is None

    # -- the server ------------------------------------------------------------------

    def _argv(self, proxy_port: int) -> list[str]:
        if self.kind == "nats":
            return NatsServer(self.workdir, port=self.port).argv()
        if self.kind == "kafka":
            listener = f"tcp://{LOOPBACK}:{self.port}"
            # Clients are told to come back through the proxy, not straight here.
            advertised = f"tcp://{LOOPBACK}:{proxy_port}"
            return [
                str(tansu_binary()), "broker",
                "--listener-url", listener,
                "--advertised-listener-url", advertised,
                "--storage-engine", "memory://tansu/",
            ]  # fmt: skip
        config = self.workdir / "pulsar-lite.toml"
        config.write_text(PULSAR_LITE_CONFIG)
        return [
            str(PULSAR_LITE),
            "--config", str(config),
            "--addr", f"{LOOPBACK}:{self.port}",
            "--db-path", str(self.workdir / "data"),
            "--log-level", "warn",
        ]  # fmt: skip

    def start(self) -> None:
        """Start the server (same port, same data); returns once it serves."""
        assert not self.running
        proxy = self.proxy
        assert proxy is not None
        if self._rabbitmq is not None:
            running = self._rabbitmq.running()  # its ports chosen the first time
            running.__enter__()
            self._rabbitmq_running = running
            self.port = self._rabbitmq.port
            proxy.target = (LOOPBACK, self.port)
            return
        if self.port:
            self._start()
            return
        for attempt in range(1, PORT_TRIES + 1):
            self.port = free_port()
            proxy.target = (LOOPBACK, self.port)
            try:
                self._start()
                return
            except PortTaken:  # another process took it first: another port
                if attempt == PORT_TRIES:
                    raise

    def _start(self) -> None:
        assert self.proxy is not None
        log = self.workdir / "server.log"
        log_from = log_size(log)  # this run's output: earlier runs' is not its
        with log.open("ab") as out:
            self._process = subprocess.Popen(
                self._argv(self.proxy.port), cwd=self.workdir, stdout=out, stderr=subprocess.STDOUT
            )
        wait_for_port(self.port, self._process, 60.0, log, log_from=log_from)

    def stop(self) -> None:
        """SIGTERM, as an orderly restart does; returns once it has exited."""
        if self._rabbitmq is not None:
            running, self._rabbitmq_running = self._rabbitmq_running, None
            if running is not None:
                running.__exit__(None, None, None)
            return
        if self._process is not None:
            stop_process(self._process)

    def kill(self) -> None:
        """SIGKILL: the server dies at once, as in a crash (nothing flushed, no goodbye)."""
        if self._rabbitmq is not None:
            self._rabbitmq.kill()
            self.stop()  # the run's bookkeeping; the node is gone already
            return
        assert self._process is not None
        self._process.kill()
        self._process.wait()

    async def restart(self) -> None:
        await anyio.to_thread.run_sync(self.stop)
        await anyio.to_thread.run_sync(self.start)

    async def crash_and_start(self) -> None:
        await anyio.to_thread.run_sync(self.kill)
        await anyio.to_thread.run_sync(self.start)

    def close(self) -> None:
        self.stop()
        if self._rabbitmq is not None:
            self._rabbitmq.close()


@contextlib.contextmanager
def faulty_broker(kind: str, workdir: Path) -> Iterator[FaultyBroker]:
    """A :class:`FaultyBroker` of ``kind`` running, behind its proxy, for the block."""
    broker = FaultyBroker(kind, workdir)
    with TcpProxy(broker.port) as proxy:
        broker.proxy = proxy
        try:
            broker.start()
            yield broker
        finally:
            broker.close()
