"""Tool services on a three-node NATS cluster while nodes fail, under steady load.

Two ``toolbus serve`` replicas, each attached to its own node, serve a
``persistent://`` service (requests and answers in R3 JetStream streams) and a
``non-persistent://`` one; a client on a third node keeps calls in flight on
both. Each test breaks
the cluster the way production breaks, prints what became of every call, and
asserts the guarantees: on the persistent queue no call is lost and the tool
runs once per call; on the non-persistent queue only calls in flight at the
failure may go unanswered.
"""

from __future__ import annotations

import re
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest

from tests.nats.cluster import READY_TIMEOUT, ClusterNode, NatsCluster
from tests.nats.load import CallOutcomes, SteadyLoad
from tests.nats.processes import ServeProcess, serve_many
from tests.nats.server import nats_server_binary
from tests.support.doc_examples import DOCS, assert_runs_as_documented, examples
from tests.support.servers import free_port, log_size, on_free_ports, wait_for_port
from toolbus import ToolServiceClient
from toolbus.domain.calls.queues import parse_queue
from toolbus_nats import NatsBus, connect
from toolbus_nats.naming import subject_for

pytestmark = [pytest.mark.anyio, pytest.mark.broker, pytest.mark.slow]

#: Options of every connection: the servers in the order given (so each process
#: is attached to the node listed first), R3 streams and quick reconnects.
#: ``ack_wait`` and ``publish_timeout`` must outlast a leader election (a few
#: seconds): acks and stores are retried until confirmed, for that long.
CLUSTER_OPTIONS = {
    "randomize": "false",
    "replicas": 3,
    "reconnect_wait": 0.1,
    "ack_wait": 15,
    "publish_timeout": 15,
}
IN_FLIGHT = 8
#: Answers each load must get before a failure, and after it (calls flow again).
ANSWERS = 100
STORED_TIMEOUT = 30.0
PLAIN_TIMEOUT = 5.0
#: Bound on each phase of a test: breaking, recovering, finishing.
PHASE_TIMEOUT = 45.0


SERVICES = ["cluster_services:stored", "cluster_services:plain"]


@dataclass
class Deployment:
    """Replicas and a client on a running cluster, with the loads and their run log."""

    cluster: NatsCluster
    replicas: dict[str, ServeProcess]
    client_bus: NatsBus
    stored: SteadyLoad
    plain: SteadyLoad
    #: What the replicas' processes are started with (queue names, run log).
    env: dict[str, str]

    def brokers(self, names: list[str]) -> list[str]:
        """Broker URLs for replicas called ``names``, the i-th attached to node i first."""
        return [self.cluster.url(i, name=name, **CLUSTER_OPTIONS) for i, name in enumerate(names)]

    def node_of(self, replica: str) -> ClusterNode:
        node = self.cluster.attached_to(replica)
        assert node is not None, f"{replica} is attached to no node"
        return node

    def mark(self) -> None:
        self.stored.mark()
        self.plain.mark()

    async def finish(self) -> None:
        """Stop both loads; return once every call has its outcome."""
        with anyio.fail_after(PHASE_TIMEOUT):
            await self.stored.finish()
            await self.plain.finish()

    async def calls_flow(self) -> None:
        """Until both services have answered another ``ANSWERS`` calls each."""
        with anyio.fail_after(PHASE_TIMEOUT):
            await self.stored.wait_for_answers(ANSWERS)
            await self.plain.wait_for_answers(ANSWERS)


@asynccontextmanager
async def deployed(
    cluster: NatsCluster, workdir: Path, client_node: int
) -> AsyncIterator[Deployment]:
    """Two replicas on nodes 0 and 1 (of the URL order), the client on ``client_node``.

    On leaving, the loads stop, every call gets its outcome, and the replicas
    drain and stop before the run log is read into the loads' outcomes.
    """
    queues = f"cluster-{uuid.uuid4().hex[:8]}"
    run_log = workdir / "runs.log"
    env = {"CLUSTER_QUEUES": queues, "CLUSTER_RUN_LOG": str(run_log)}
    names = [f"replica-{i}-{queues}" for i in (1, 2)]
    brokers = [cluster.url(i, name=name, **CLUSTER_OPTIONS) for i, name in enumerate(names)]
    async with serve_many(SERVICES, brokers, workdir=workdir, env=env) as processes:
        client_bus = await connect(cluster.url(client_node, name="client", **CLUSTER_OPTIONS))
        try:
            async with ToolServiceClient(client_bus) as client, anyio.create_task_group() as loads:
                stored, plain = (
                    SteadyLoad(
                        client,
                        label=kind,
                        request_queue=f"{persistence}://test/request/{queues}-{kind}",
                        response_queue=f"{persistence}://test/response/{queues}-{kind}",
                        in_flight=IN_FLIGHT,
                        timeout=timeout,
                    )
                    for kind, persistence, timeout in (
                        ("stored", "persistent", STORED_TIMEOUT),
                        ("plain", "non-persistent", PLAIN_TIMEOUT),
                    )
                )
                loads.start_soon(stored.run)
                loads.start_soon(plain.run)
                deployment = Deployment(
                    cluster, dict(zip(names, processes, strict=True)), client_bus,
                    stored, plain, env,
                )  # fmt: skip
                await deployment.calls_flow()
                yield deployment
                await deployment.finish()
        finally:
            await client_bus.close()
    # Replicas stopped (drained): every run is in the log.
    for load in (stored, plain):
        load.outcomes.read_run_logs([run_log])


def report_and_check(deployment: Deployment, *, rollout: bool = False) -> None:
    stored, plain = deployment.stored.outcomes, deployment.plain.outcomes
    print(f"\n{stored.report()}\n{plain.report()}")
    for refusal in sorted(stored.refusals):
        print(f"  refused: {refusal}")
    assert_persistent_guarantees(stored)
    # At most once: a call may go unanswered only if it was in flight at a failure,
    # and a rollout is no failure: a stopping replica hands over what it holds.
    assert not plain.refused, plain.report()
    allowed = 0 if rollout else plain.in_flight_at_mark
    assert len(plain.timed_out) <= allowed, plain.report()
    assert plain.ran_more_than_once == set(), plain.report()


def assert_persistent_guarantees(outcomes: CallOutcomes) -> None:
    # Requests and answers both stored: every call is answered, none refused.
    assert outcomes.answered and not outcomes.timed_out, outcomes.report()
    assert not outcomes.refused, outcomes.report()
    assert outcomes.never_ran == set(), outcomes.report()
    twice = {call: outcomes.runners[call] for call in outcomes.ran_more_than_once}
    assert twice == {}, outcomes.report()
    assert outcomes.recoveries, f"no call was answered after the failure: {outcomes.report()}"


async def test_killing_the_node_a_replica_is_attached_to(
    nats_cluster: NatsCluster, tmp_path: Path
) -> None:
    async with deployed(nats_cluster, tmp_path, client_node=2) as deployment:
        victim_name = next(iter(deployment.replicas))
        node = deployment.node_of(victim_name)
        assert node is nats_cluster.nodes[0]
        node.kill()
        deployment.mark()
        await deployment.calls_flow()
        moved_to = await anyio.to_thread.run_sync(nats_cluster.wait_attached, victim_name)
        assert moved_to is not node
    report_and_check(deployment)


async def test_killing_the_stream_leader(nats_cluster: NatsCluster, tmp_path: Path) -> None:
    async with deployed(nats_cluster, tmp_path, client_node=2) as deployment:
        subject = subject_for(parse_queue(deployment.stored.request_queue))
        stream = await deployment.client_bus.streams.stream_for(subject)
        info = await deployment.client_bus.streams.js.stream_info(stream)
        assert info.cluster is not None and info.cluster.leader
        assert len(info.cluster.replicas or []) == 2  # R3: the leader and two followers
        leader = nats_cluster.node(info.cluster.leader)
        leader.kill()
        deployment.mark()
        await deployment.calls_flow()
    report_and_check(deployment)


async def test_a_rolling_restart_of_every_node(nats_cluster: NatsCluster, tmp_path: Path) -> None:
    async with deployed(nats_cluster, tmp_path, client_node=2) as deployment:
        for node in nats_cluster.nodes:
            # SIGTERM, an orderly stop: JetStream hands its leaderships over first.
            # (Production restarts use lame-duck mode, which takes 30 s at least.)
            deployment.mark()
            await anyio.to_thread.run_sync(node.stop)
            await anyio.to_thread.run_sync(nats_cluster.restart, node)
            await deployment.calls_flow()
    report_and_check(deployment)


async def test_rolling_out_a_new_service_version(nats_cluster: NatsCluster, tmp_path: Path) -> None:
    """Start the new version's replicas, then stop the old ones (SIGTERM: drain, then exit)."""
    async with deployed(nats_cluster, tmp_path, client_node=2) as deployment:
        new_version = deployment.brokers([f"v2-{i}" for i in (1, 2)])
        async with serve_many(SERVICES, new_version, workdir=tmp_path, env=deployment.env):
            deployment.mark()
            for old in deployment.replicas.values():
                await old.stop()
                assert old.process.returncode == 0, "\n".join(old.lines)
            await deployment.calls_flow()
            await deployment.finish()  # while the new version still serves
    report_and_check(deployment, rollout=True)


RECIPE = re.compile(r"<!-- recipe: nats-cluster -->\n```bash\n(.*?)```", re.S)
PORT = re.compile(r"\b(?:42|62|82)2[2-4]\b")


@contextmanager
def recipe_cluster(recipe: str, ports: dict[str, str], workdir: Path) -> Iterator[str]:
    """The recipe's three nats-servers, its ports made ``ports``, until the block ends.

    Yields the NATS_URL the recipe sets.
    """
    localised = PORT.sub(lambda match: ports[match.group()], recipe)
    commands = [line.removesuffix("&").split() for line in localised.splitlines()]
    servers = [argv[2:] for argv in commands if argv[:2] == ["uv", "run"]]
    (url,) = [
        line.partition("NATS_URL=")[2] for line in localised.splitlines() if "NATS_URL=" in line
    ]
    assert len(servers) == 3 and all(argv[0] == "nats-server" for argv in servers)

    nodes: list[ClusterNode] = []
    try:
        for argv in servers:
            flags = {
                flag: value
                for flag, value in zip(argv, [*argv[1:], ""], strict=True)
                if flag.startswith("-") and not value.startswith("-")
            }
            node = ClusterNode(
                flags["--server_name"],
                workdir,
                port=int(flags["-p"]),
                route_port=int(flags["--cluster"].rpartition(":")[2]),
                monitor_port=int(flags["-m"]),
            )
            log = workdir / f"{node.name}.log"
            start = log_size(log)
            with log.open("ab") as out:
                node.process = subprocess.Popen(
                    [nats_server_binary(), *argv[1:]], cwd=workdir, stdout=out, stderr=out
                )
            nodes.append(node)
            others = [node.route_port, node.monitor_port]
            wait_for_port(node.port, node.process, READY_TIMEOUT, log, others, start)
        NatsCluster(workdir, nodes).wait_ready()
        yield url
    finally:
        for node in nodes:
            node.stop()


def test_the_deployment_example_runs_on_the_cluster_its_recipe_starts(tmp_path: Path) -> None:
    """The page's three nats-server commands make the cluster its example runs on."""
    (recipe,) = RECIPE.findall((DOCS / "deployment.md").read_text())
    # The page's ports, each made a free one: other test runs share this machine.
    ports: dict[str, str] = {}

    def choose() -> None:
        ports.update({port: str(free_port()) for port in sorted(set(PORT.findall(recipe)))})

    with on_free_ports(lambda: recipe_cluster(recipe, ports, tmp_path), choose) as url:
        (example,) = [e for e in examples(DOCS / "deployment.md") if e.output is not None]
        assert_runs_as_documented(example, tmp_path, env={"NATS_URL": url}, timeout=60)
