"""A 3-node RabbitMQ cluster: a node SIGKILLed under load loses no call.

Two replicas of the echo services (:mod:`tests.faults.tools`) connect first to
nodes 1 and 2, the client to node 3; every URL lists all three nodes and asks
for quorum queues, so the persistent request queue is replicated on every node
(its leader on node 1, where it was first declared). Calls go to both services
twenty times a second. Node 1 (the queue's leader, and replica A's node) is
SIGKILLed, started again a few seconds later, and the load runs on until calls
flow. Every persistent request the cluster confirmed runs; the figures go to the
fault matrix's report.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import AsyncExitStack
from pathlib import Path

import anyio
import pytest

from tests.faults import report
from tests.faults.load import CallLoad, PublishLog, figures, settled_runs
from tests.faults.tools import RUNS_FILE, persistent_echo, volatile_echo
from tests.rabbitmq.cluster import RabbitMQCluster
from tests.rabbitmq.server import EPMD, require_rabbitmq
from tests.support.doc_examples import DOCS, assert_runs_as_documented, examples
from tests.support.servers import (
    LOOPBACK,
    failed_to_listen,
    free_port,
    on_free_ports,
    stop_process,
    wait_for_port,
)
from toolbus import ToolServiceClient, running
from toolbus_rabbitmq import connect

pytestmark = [pytest.mark.anyio, pytest.mark.broker, pytest.mark.slow, pytest.mark.timeout(400)]

#: How long the killed node stays down.
OUTAGE = 3.0
RECOVERY_LIMIT = 60.0
OPTIONS = {"queue_type": "quorum"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RabbitMQCluster]:
    with RabbitMQCluster(tmp_path_factory.mktemp("rabbitmq-cluster")).running() as formed:
        yield formed


async def test_a_node_killed_under_load_loses_no_call(
    cluster: RabbitMQCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = tmp_path / "runs.txt"
    monkeypatch.setenv(RUNS_FILE, str(runs))
    async with AsyncExitStack() as stack:
        for first in (0, 1):  # replica A on node 1, replica B on node 2
            bus = await connect(cluster.url(first, **OPTIONS))
            stack.push_async_callback(bus.close)
            await stack.enter_async_context(running(bus, persistent_echo, volatile_echo))
        client_bus = PublishLog(await connect(cluster.url(2, **OPTIONS)))
        stack.push_async_callback(client_bus.close)
        client = await stack.enter_async_context(ToolServiceClient(client_bus))  # type: ignore[arg-type]
        load = CallLoad(client)
        stop = anyio.Event()
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(load.run, stop)
            await load.until_flowing(time.monotonic(), 60)
            started = time.monotonic()
            await anyio.to_thread.run_sync(cluster.kill, 0)
            await anyio.sleep(OUTAGE)  # the outage is the scenario, not a wait for an event
            await anyio.to_thread.run_sync(cluster.start, 0)
            ended = time.monotonic()
            await load.until_flowing(ended, RECOVERY_LIMIT)
            stop.set()
    settled = await settled_runs(runs, load, client_bus.taken, limit=20)
    found = figures(
        "rabbitmq 3-node cluster", "SIGKILL a node", load, settled, client_bus.taken, started, ended
    )
    report.FIGURES.append(found)
    print(f"\n{found.row()}\n  errors: {found.errors}")
    assert found.lost == 0
    assert found.hung == 0
    await anyio.to_thread.run_sync(cluster.wait_until_formed)  # the node is back in the cluster
    # The services' persistent group queue is a quorum queue, replicated on the nodes.
    types = await anyio.to_thread.run_sync(cluster.queue_types)
    assert types["faults.request.echo.faults-echo"] == "quorum", types


RECIPE = re.compile(r"<!-- recipe: rabbitmq-cluster -->\n```bash\n(.*?)```", re.S)
PORT = re.compile(r"\b(?:4369|2?567[2-4])\b")


@contextlib.contextmanager
def recipe_cluster(recipe: str, ports: dict[str, str], workdir: Path) -> Iterator[tuple[str, str]]:
    """The cluster the page's commands start, on ``ports`` (the page's, each made another),
    in ``workdir``, for the block: its URL and the recipe's output. :class:`PortTaken`
    where one of the ports was taken."""
    workdir.mkdir(parents=True)
    localised = PORT.sub(lambda match: ports[match.group()], recipe)
    (url,) = re.findall(r"RABBITMQ_URL=(\S+)", localised)
    # Our own port mapper, on the page's port, so that the nodes start none that outlives
    # the test.
    epmd_log = workdir / "epmd.log"
    with epmd_log.open("ab") as out:
        epmd = subprocess.Popen(
            [str(EPMD), "-port", ports["4369"], "-address", LOOPBACK],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    recipe_run: subprocess.Popen[str] | None = None
    try:
        wait_for_port(int(ports["4369"]), epmd, 10.0, epmd_log)
        # A session of its own: the nodes the recipe starts in the background are stopped
        # with it.
        recipe_run = subprocess.Popen(
            ["bash", "-ec", localised],
            cwd=workdir,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        output, _ = recipe_run.communicate(timeout=300)
        if recipe_run.returncode != 0:
            # The nodes' own logs say whether a port was taken (eaddrinuse).
            logs = sorted((workdir / "rabbitmq-cluster").glob("rabbit-*.log"))
            said = output + "".join(log.read_text(errors="replace") for log in logs)
            raise failed_to_listen("the page's cluster recipe", [], said)
        yield url, output
    finally:
        if recipe_run is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(recipe_run.pid, signal.SIGTERM)  # the nodes stop cleanly
            for node in (1, 2, 3):
                pid = workdir / "rabbitmq-cluster" / f"rabbit-{node}.pid"
                if pid.exists():
                    with contextlib.suppress(ProcessLookupError, ValueError):
                        wait_gone(int(pid.read_text().strip()))
            with contextlib.suppress(ProcessLookupError):
                os.killpg(recipe_run.pid, signal.SIGKILL)
        stop_process(epmd)


def test_the_deployment_example_runs_on_the_cluster_its_recipe_starts(tmp_path: Path) -> None:
    """The page's commands make the cluster its example runs on."""
    require_rabbitmq()
    (recipe,) = RECIPE.findall((DOCS / "deployment.md").read_text())
    # The page's ports, each made a free one (others where one was taken): other test
    # runs share this machine.
    ports: dict[str, str] = {}
    tries = iter(range(1, 100))

    def choose() -> None:
        ports.update({port: str(free_port()) for port in sorted(set(PORT.findall(recipe)))})

    def started() -> contextlib.AbstractContextManager[tuple[str, str]]:
        return recipe_cluster(recipe, ports, tmp_path / f"try-{next(tries)}")

    with on_free_ports(started, choose) as (url, output):
        for n in (1, 2, 3):
            assert f"rabbit-{n}@localhost" in output.partition("Running Nodes")[2], output
        (example,) = [
            e for e in examples(DOCS / "deployment.md") if e.name == "rabbitmq_cluster_example.py"
        ]
        assert_runs_as_documented(example, tmp_path, env={"RABBITMQ_URL": url}, timeout=60)


def wait_gone(pid: int, timeout: float = 30.0) -> None:
    """Until process ``pid`` has exited (a node stopping); SIGKILL it after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)  # a foreign process tells its end only by being gone
    os.kill(pid, signal.SIGKILL)
