"""Three nats-server processes on 127.0.0.1 forming one cluster, JetStream replicated.

Each node has its own client, route and monitoring port and its own JetStream
store directory, so a node can be killed (SIGKILL) and started again on the
same ports with its data, as a crashed or restarted machine would be.
Readiness is read from the monitoring endpoints: a node is up when ``/healthz``
says its JetStream is current, the cluster when every node agrees on a meta
leader.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.nats.server import MAX_PAYLOAD, nats_server_binary
from tests.support.servers import (
    LOOPBACK,
    free_port,
    log_size,
    on_free_ports,
    stop_process,
    wait_for_port,
)

CLUSTER_NAME = "toolbus-test"
#: Longest a node (or the whole cluster) may take to become ready.
READY_TIMEOUT = 30.0
# How often the monitoring endpoints are asked while waiting: a foreign
# server's HTTP status is the only readiness signal it gives.
POLL_INTERVAL = 0.05


@dataclass
class ClusterNode:
    """One nats-server of the cluster, which a test may kill and start again."""

    name: str
    workdir: Path
    #: Chosen when the cluster first starts (0 until then), kept after.
    port: int = 0
    route_port: int = 0
    monitor_port: int = 0
    process: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def config(self, routes: list[str]) -> str:
        route_list = ", ".join(f'"nats-route://{route}"' for route in routes)
        return (
            f"server_name: {self.name}\n"
            f'listen: "{self.address}"\n'
            f'http: "{LOOPBACK}:{self.monitor_port}"\n'
            f"max_payload: {MAX_PAYLOAD}\n"
            "jetstream {\n"
            f'  store_dir: "{self.workdir / "jetstream"}"\n'
            "  max_memory_store: 256MB\n"
            "  max_file_store: 1GB\n"
            "}\n"
            "cluster {\n"
            f"  name: {CLUSTER_NAME}\n"
            f'  listen: "{LOOPBACK}:{self.route_port}"\n'
            f"  routes: [{route_list}]\n"
            "}\n"
        )

    def start(self, routes: list[str]) -> None:
        """Start the server (same ports, same store as before); returns once it listens."""
        assert not self.running, f"{self.name} is already running"
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "nats.conf"
        config.write_text(self.config(routes))
        log = self.workdir / "server.log"
        start = log_size(log)
        with log.open("ab") as out:
            self.process = subprocess.Popen(
                [nats_server_binary(), "-c", str(config)],
                cwd=self.workdir,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        ports = [self.route_port, self.monitor_port]
        wait_for_port(self.port, self.process, READY_TIMEOUT, log, ports, start)

    def kill(self) -> None:
        """SIGKILL: the node dies at once, as in a crash (no lame-duck mode, no flush)."""
        assert self.process is not None
        self.process.kill()
        self.process.wait()

    def stop(self) -> None:
        """SIGTERM, as an orderly restart does (SIGKILL if it hangs)."""
        if self.process is not None:
            stop_process(self.process)

    def monitor(self, path: str) -> tuple[int, Any]:
        """GET a monitoring endpoint: (HTTP status, JSON body); (0, None) if it does not answer."""
        url = f"http://{LOOPBACK}:{self.monitor_port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                return response.status, json.load(response)
        except urllib.error.HTTPError as exc:
            return exc.code, None
        except OSError:
            return 0, None

    def healthy(self) -> bool:
        """JetStream on this node is up and caught up with the cluster (/healthz says ok)."""
        return self.running and self.monitor("/healthz")[0] == 200

    def meta_leader(self) -> str | None:
        """The JetStream meta leader this node knows of (/jsz), if any."""
        status, body = self.monitor("/jsz")
        if status != 200 or not body:
            return None
        leader = (body.get("meta_cluster") or {}).get("leader")
        return str(leader) if leader else None

    def connection_names(self) -> set[str]:
        """Names of the client connections attached to this node (/connz)."""
        status, body = self.monitor("/connz?limit=1024")
        if status != 200 or not body:
            return set()
        return {c["name"] for c in body.get("connections", []) if c.get("name")}


@dataclass
class NatsCluster:
    """Three nodes routed to each other; ``url`` lists all of them."""

    workdir: Path
    nodes: list[ClusterNode] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.nodes:
            self.nodes = [ClusterNode(f"n{i}", self.workdir / f"n{i}") for i in (1, 2, 3)]

    @property
    def routes(self) -> list[str]:
        return [f"{LOOPBACK}:{node.route_port}" for node in self.nodes]

    def url(self, first: int = 0, **options: object) -> str:
        """A URL listing every node, node ``first`` first (tried first with ``randomize=false``)."""
        order = self.nodes[first:] + self.nodes[:first]
        servers = ",".join(node.address for node in order)
        query = "&".join(f"{name}={value}" for name, value in options.items())
        return f"nats://{servers}" + (f"?{query}" if query else "")

    def node(self, name: str) -> ClusterNode:
        return next(node for node in self.nodes if node.name == name)

    def attached_to(self, connection_name: str) -> ClusterNode | None:
        """The running node a named client connection is attached to now."""
        for node in self.nodes:
            if node.running and connection_name in node.connection_names():
                return node
        return None

    def wait_attached(self, connection_name: str, timeout: float = READY_TIMEOUT) -> ClusterNode:
        """The node a named connection is attached to, once it is attached to one."""
        deadline = time.monotonic() + timeout
        while (node := self.attached_to(connection_name)) is None:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{connection_name} attached to no node within {timeout} s")
            time.sleep(POLL_INTERVAL)
        return node

    def start(self) -> None:
        for node in self.nodes:
            node.start(self.routes)
        self.wait_ready()

    def restart(self, node: ClusterNode) -> None:
        """Start ``node`` again and wait until the whole cluster is ready."""
        node.start(self.routes)
        self.wait_ready()

    def wait_ready(self, timeout: float = READY_TIMEOUT) -> None:
        """Until every running node is healthy and all of them name the same live meta leader."""
        deadline = time.monotonic() + timeout
        while True:
            running = [node for node in self.nodes if node.running]
            leaders = {node.meta_leader() for node in running}
            # A dead leader is still named for a while after it died.
            alive = {node.name for node in running}
            if len(leaders) == 1 and leaders <= alive and all(node.healthy() for node in running):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"the NATS cluster was not ready within {timeout} s "
                    f"(meta leaders seen: {leaders}); logs in {self.workdir}"
                )
            time.sleep(POLL_INTERVAL)

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    def running(self) -> AbstractContextManager[NatsCluster]:
        """Run the cluster for a ``with`` block, on free ports (others where one was taken)."""
        return on_free_ports(self._running, self._choose_ports)

    def _choose_ports(self) -> None:
        for node in self.nodes:
            node.port, node.route_port, node.monitor_port = free_port(), free_port(), free_port()

    @contextmanager
    def _running(self) -> Iterator[NatsCluster]:
        try:
            self.start()
            yield self
        finally:
            self.stop()
