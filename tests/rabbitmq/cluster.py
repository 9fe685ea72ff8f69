"""Three RabbitMQ nodes on 127.0.0.1 forming one cluster: Debian's rabbitmq-server, as our own
processes.

Each node is a :class:`~tests.rabbitmq.server.RabbitMQServer` with a node name,
AMQP port, distribution port and data directory of its own; the three share one
port mapper (``epmd``, on a free port: nodes find each other through it) and one
Erlang cookie (in each node's ``HOME``), and list each other for RabbitMQ's
classic peer discovery. The first node starts alone; the other two join it when
they start. A node that is killed (SIGKILL) and started again with its data
comes back into the cluster by itself.

Ready means every node answers AMQP and ``rabbitmqctl cluster_status`` on the
first node lists all three as running.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.rabbitmq.server import EPMD, RabbitMQServer, require_rabbitmq
from tests.support.servers import (
    LOOPBACK,
    PORT_TRIES,
    PortTaken,
    free_port,
    log_size,
    stop_process,
    wait_for_port,
)

RABBITMQCTL = Path("/usr/lib/rabbitmq/bin/rabbitmqctl")
#: Seconds the cluster may take to form.
FORM_TIMEOUT = 120.0


@dataclass
class RabbitMQCluster:
    """Three nodes, clustered; see the module docs."""

    workdir: Path
    size: int = 3
    #: The port mapper the nodes share: a free port chosen as the cluster starts.
    epmd_port: int = 0
    cookie: str = field(default_factory=lambda: secrets.token_hex(20).upper())
    nodes: list[RabbitMQServer] = field(default_factory=list)
    _running: dict[int, AbstractContextManager[Any]] = field(default_factory=dict)
    _epmd: subprocess.Popen[bytes] | None = None

    def __post_init__(self) -> None:
        suffix = uuid.uuid4().hex[:6]
        names = [f"rabbit-{n}-{suffix}@localhost" for n in range(1, self.size + 1)]
        peers = "".join(
            f"cluster_formation.classic_config.nodes.{n} = {name}\n"
            for n, name in enumerate(names, 1)
        )
        config = (
            "cluster_formation.peer_discovery_backend = classic_config\n"
            + peers
            # Nodes started one after the other need no random wait to avoid a race.
            + "cluster_formation.randomized_startup_delay_range.min = 0\n"
            + "cluster_formation.randomized_startup_delay_range.max = 0\n"
        )
        self.nodes = [
            RabbitMQServer(
                self.workdir / f"n{n}",
                epmd_port=self.epmd_port,
                extra_config=config,
                node=name,
                own_epmd=False,
            )
            for n, name in enumerate(names, 1)
        ]

    def url(self, first: int = 0, **options: object) -> str:
        """An AMQP URL listing every node, node ``first`` first (tried first)."""
        order = self.nodes[first:] + self.nodes[:first]
        hosts = ",".join(f"{LOOPBACK}:{node.port}" for node in order)
        query = "&".join(f"{name}={value}" for name, value in options.items())
        return f"amqp://{hosts}" + (f"?{query}" if query else "")

    # -- the nodes --------------------------------------------------------------------

    def _prepare(self, node: RabbitMQServer) -> None:
        node.workdir.mkdir(parents=True, exist_ok=True)
        cookie = node.workdir / ".erlang.cookie"
        if not cookie.exists():
            cookie.write_text(self.cookie)
            cookie.chmod(0o400)

    def start(self, index: int) -> None:
        """Start node ``index`` (with its data, if it ran before); returns once it answers AMQP."""
        node = self.nodes[index]
        self._prepare(node)
        running = node.running()
        running.__enter__()
        self._running[index] = running

    def stop(self, index: int) -> None:
        """SIGTERM node ``index`` (an orderly stop) and wait until it has exited."""
        running = self._running.pop(index, None)
        if running is not None:
            running.__exit__(None, None, None)

    def kill(self, index: int) -> None:
        """SIGKILL node ``index``: it dies at once, as in a crash."""
        self.nodes[index].kill()
        self.stop(index)

    def is_running(self, index: int) -> bool:
        return index in self._running

    def ctl(self, index: int, *args: str) -> Any:
        """``rabbitmqctl ARGS --formatter json`` on node ``index``; None when it fails."""
        node = self.nodes[index]
        environment = {
            **os.environ,
            "HOME": str(node.workdir),  # the cookie
            "ERL_EPMD_PORT": str(self.epmd_port),
        }
        done = subprocess.run(
            [str(RABBITMQCTL), "-n", node.node, *args, "--formatter", "json"],
            env=environment,
            capture_output=True,
            text=True,
            timeout=60,
        )
        return json.loads(done.stdout) if done.returncode == 0 else None

    def status(self, index: int = 0) -> dict[str, Any]:
        """``rabbitmqctl cluster_status`` of node ``index`` ({} when it does not answer)."""
        return dict(self.ctl(index, "cluster_status") or {})

    def queue_types(self, index: int = 0) -> dict[str, str]:
        """Each queue's type (``classic``, ``quorum``), by name."""
        listed = self.ctl(index, "list_queues", "name", "type") or []
        return {queue["name"]: queue["type"] for queue in listed}

    def running_nodes(self, index: int = 0) -> set[str]:
        return set(self.status(index).get("running_nodes", []))

    def wait_until_formed(self, index: int = 0) -> None:
        """Until node ``index`` sees every running node of the cluster running."""
        wanted = {self.nodes[i].node for i in self._running}
        deadline = time.monotonic() + FORM_TIMEOUT
        while time.monotonic() < deadline:
            if self.running_nodes(index) >= wanted:
                return
            # rabbitmqctl is how a foreign cluster tells its membership.
            time.sleep(0.5)
        raise RuntimeError(
            f"the cluster did not form within {FORM_TIMEOUT} s: {self.status(index)}"
        )

    def _start_epmd(self) -> None:
        """The nodes' port mapper, on a free port (another where it was taken)."""
        log = self.workdir / "epmd.log"
        for attempt in range(1, PORT_TRIES + 1):
            self.epmd_port = free_port()
            log_from = log_size(log)
            with log.open("ab") as out:
                self._epmd = subprocess.Popen(
                    [str(EPMD), "-port", str(self.epmd_port), "-address", LOOPBACK],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            try:
                wait_for_port(self.epmd_port, self._epmd, 10.0, log, log_from=log_from)
            except PortTaken:
                if attempt == PORT_TRIES:
                    raise
                continue
            for node in self.nodes:
                node.epmd_port = self.epmd_port
            return

    @contextlib.contextmanager
    def running(self) -> Iterator[RabbitMQCluster]:
        """The cluster, formed, for the ``with`` block; every node stopped after it."""
        require_rabbitmq()
        self.workdir.mkdir(parents=True, exist_ok=True)
        try:
            self._start_epmd()
            self.start(0)  # the first alone: the others join it, side by side
            with ThreadPoolExecutor() as starting:
                for started in [starting.submit(self.start, i) for i in range(1, self.size)]:
                    started.result()  # a node that failed to start says why
            self.wait_until_formed()
            yield self
        finally:
            for index in list(self._running):
                self.stop(index)
            if self._epmd is not None:
                stop_process(self._epmd)
