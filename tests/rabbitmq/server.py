"""A RabbitMQ node of the test suite's own: Debian's rabbitmq-server, run as a plain process.

Never the system service: every node gets its own node name, data and log
directories, Erlang cookie (``HOME``), configuration and port-mapper daemon
(``epmd``), each on free loopback ports, and no plugin (the management plugin
is not needed). Starting takes a few seconds (an Erlang VM), so the suite shares
one node per session; a test that stops the broker makes its own.

Ready means answering AMQP: the node is asked for its ``Connection.Start``, the
first frame of every AMQP connection, read with pamqp (aio-pika's frame codec).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from pamqp import frame as amqp_frame
from pamqp import header as amqp_header
from pamqp.exceptions import PAMQPException, UnmarshalingException

from tests.support.real_parts import require
from tests.support.servers import (
    LOOPBACK,
    chosen,
    failed_to_listen,
    free_port,
    log_since,
    log_size,
    on_free_ports,
    wait_for_port,
)

#: Where Debian's package puts the node's own start script (the one in /usr/sbin
#: switches to the rabbitmq user and the system's directories).
RABBITMQ_SERVER = Path("/usr/lib/rabbitmq/bin/rabbitmq-server")
EPMD = Path("/usr/bin/epmd")
INSTALL = "apt-get install rabbitmq-server"
#: Seconds a node may take to answer AMQP (Erlang starts slowly on a loaded machine).
READY_TIMEOUT = 90.0
#: Seconds a node may take to stop cleanly before it is killed.
STOP_TIMEOUT = 30.0


def require_rabbitmq() -> None:
    """Skip (locally) or fail (in CI), naming the install line, without Debian's rabbitmq-server."""
    require(RABBITMQ_SERVER.is_file() and EPMD.is_file(), "Debian's rabbitmq-server", INSTALL)


@dataclass
class RabbitMQServer:
    """A RabbitMQ node that a test may stop and start again, keeping its data.

    Its ports are chosen when it first starts (0 until then), and kept after.
    """

    workdir: Path
    port: int = 0
    dist_port: int = 0
    epmd_port: int = 0
    #: A TLS listener too, on ``tls_port`` (``ssl_options`` go in ``extra_config``).
    tls: bool = False
    tls_port: int = 0
    #: Extra lines for rabbitmq.conf.
    extra_config: str = ""
    node: str = field(default_factory=lambda: f"toolbus-{uuid.uuid4().hex[:8]}@localhost")
    _epmd: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"amqp://{LOOPBACK}:{chosen(self.port)}"

    @property
    def ports(self) -> list[int]:
        return [self.port, self.dist_port, self.epmd_port, *([self.tls_port] if self.tls else [])]

    def _environment(self) -> dict[str, str]:
        work = self.workdir
        (work / "rabbitmq.conf").write_text(
            f"listeners.tcp.default = {LOOPBACK}:{self.port}\n"
            + (f"listeners.ssl.default = {LOOPBACK}:{self.tls_port}\n" if self.tls else "")
            +
            # guest may log in from 127.0.0.1 only, which is where the tests are.
            "loopback_users.guest = true\n"
            # Disk and memory alarms would stop publishers on a busy test machine.
            "disk_free_limit.absolute = 1MB\n"
            "vm_memory_high_watermark.relative = 0.9\n"
            f"{self.extra_config}\n"
        )
        (work / "enabled_plugins").write_text("[].\n")
        (work / "rabbitmq-env.conf").write_text("")
        (work / "advanced.config").write_text("[].\n")
        return {
            **os.environ,
            # The Erlang cookie lives in $HOME: the node's own, not root's.
            "HOME": str(work),
            "RABBITMQ_CONF_ENV_FILE": str(work / "rabbitmq-env.conf"),
            "RABBITMQ_CONFIG_FILE": str(work / "rabbitmq.conf"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(work / "advanced.config"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(work / "enabled_plugins"),
            "RABBITMQ_MNESIA_BASE": str(work / "mnesia"),
            "RABBITMQ_LOG_BASE": str(work / "log"),
            "RABBITMQ_PID_FILE": str(work / "rabbitmq.pid"),
            "RABBITMQ_LOGS": "-",
            "RABBITMQ_NODENAME": self.node,
            "RABBITMQ_NODE_IP_ADDRESS": LOOPBACK,
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "ERL_EPMD_PORT": str(self.epmd_port),
            "ERL_EPMD_ADDRESS": LOOPBACK,
            # Erlang distribution on the loopback interface only.
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "-kernel inet_dist_use_interface {127,0,0,1}",
        }

    def running(self) -> contextlib.AbstractContextManager[str]:
        """Run the node for the ``with`` block; yields its AMQP URL. On free ports the
        first time, on the same ones after that."""
        require_rabbitmq()
        if self.port:
            return self._node()
        return on_free_ports(self._node, self._choose_ports)

    def _choose_ports(self) -> None:
        self.port, self.dist_port, self.epmd_port, self.tls_port = (free_port() for _ in range(4))
        if self._epmd is not None:  # on the port mapper's port that was taken
            _stop(self._epmd)
            self._epmd = None

    @contextlib.contextmanager
    def _node(self) -> Iterator[str]:
        self.workdir.mkdir(parents=True, exist_ok=True)
        environment = self._environment()
        if self._epmd is None or self._epmd.poll() is not None:
            # Our own port mapper, in the foreground so that it is ours to stop; a
            # node that found none would start a daemon that outlives the tests.
            epmd_log = self.workdir / "epmd.log"
            epmd_from = log_size(epmd_log)
            with epmd_log.open("ab") as out:
                self._epmd = subprocess.Popen(
                    [str(EPMD), "-port", str(self.epmd_port), "-address", LOOPBACK],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=environment,
                    start_new_session=True,
                )
            wait_for_port(self.epmd_port, self._epmd, 10.0, epmd_log, log_from=epmd_from)
        log = self.workdir / "server.log"
        log_from = log_size(log)
        with log.open("ab") as out:
            process = subprocess.Popen(
                [str(RABBITMQ_SERVER)],
                cwd=self.workdir,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=environment,
                start_new_session=True,
            )
        try:
            wait_for_port(self.port, process, READY_TIMEOUT, log, self.ports, log_from)
            _wait_for_amqp(self.port, process, READY_TIMEOUT, log, self.ports, log_from)
            yield self.url
        finally:
            _stop(process)

    def close(self) -> None:
        """Stop the port mapper (after the last run of the node)."""
        if self._epmd is not None:
            _stop(self._epmd)
            self._epmd = None


@contextlib.contextmanager
def rabbitmq_node(workdir: Path) -> Iterator[str]:
    """A node of its own in ``workdir`` for the ``with`` block; yields its AMQP URL."""
    server = RabbitMQServer(workdir)
    try:
        with server.running() as url:
            yield url
    finally:
        server.close()


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM (the node stops cleanly, keeping its data), then the rest of the session it
    was started in (its own: ``start_new_session``)."""
    if process.poll() is None:
        process.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(STOP_TIMEOUT)
    # The Erlang VM and its helpers run in the session the script was started in.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def _failure(what: str, log: Path | None) -> RuntimeError:
    tail = log.read_text(errors="replace")[-4000:] if log is not None and log.exists() else ""
    return RuntimeError(f"{what}:\n{tail}")


def _first_frame(sock: socket.socket) -> str:
    """The name of the first AMQP frame the node sends ("" if it hangs up first)."""
    data = b""
    while chunk := sock.recv(4096):
        data += chunk
        try:
            return str(amqp_frame.unmarshal(data)[2].name)
        except UnmarshalingException:
            continue  # not all of it yet
    return ""


def _wait_for_amqp(
    port: int,
    process: subprocess.Popen[bytes],
    timeout: float,
    log: Path,
    ports: list[int],
    log_from: int,
) -> None:
    """Until the node answers an AMQP protocol header with ``Connection.Start``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            # Listening on AMQP's port, but one of the others was taken?
            raise failed_to_listen(
                f"exited with {process.returncode} while starting",
                ports,
                log_since(log, log_from),
            )
        with (
            contextlib.suppress(OSError, PAMQPException),
            socket.create_connection((LOOPBACK, port), 2.0) as sock,
        ):
            sock.settimeout(2.0)
            sock.sendall(amqp_header.ProtocolHeader().marshal())
            if _first_frame(sock) == "Connection.Start":
                return
        time.sleep(0.1)
    raise _failure(f"did not answer AMQP on {port} within {timeout} s", log)
