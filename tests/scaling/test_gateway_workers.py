"""``toolbus gateway --workers 2`` with its sessions in a state store (Redis).

The worker processes share one address: a session's calls on fresh connections,
taken by whichever worker accepts each, keep its state. The command says it
serves only once every worker accepts (each one alone answers at once, the other
stopped), shares its console key with them (a console log-in on one is good on
the other), and exits non-zero with one line when a worker cannot start.
"""

from __future__ import annotations

import os
import re
import signal
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from pathlib import Path

import anyio
import httpx
import pytest

from tests.doors.processes import TOOLBUS, DoorProcess, door_environment
from tests.nats.cluster import NatsCluster
from tests.redis.server import RedisServer
from tests.scaling.deployment import ALICE_KEY, GROUPS, TEN_CALLS, Deployment
from tests.support.servers import (
    failed_to_listen,
    free_port,
    on_free_ports_async,
    refusing_port,
)

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.broker]


def worker_pids(pid: int) -> list[int]:
    """The worker processes the command ``pid`` runs (spawned children; not the resource
    tracker multiprocessing may start beside them)."""
    found = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    pids = []
    for child in found:
        try:
            command = Path(f"/proc/{child}/cmdline").read_bytes()
        except FileNotFoundError:
            continue  # gone meanwhile
        if b"spawn_main" in command:
            pids.append(int(child))
    return pids


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def workers(pid: int) -> int:
    return len(worker_pids(pid))


async def test_workers_share_the_sessions_through_the_store(
    scaling_cluster: NatsCluster, scaling_redis: RedisServer, tmp_path: Path
) -> None:
    deployment = Deployment(
        tmp_path, scaling_cluster.url(), scaling_redis.url, {"prefix": "toolbus-workers"}
    )
    async with AsyncExitStack() as stack:
        await stack.enter_async_context(deployment.tool_replicas(1))
        door, port = await stack.enter_async_context(deployment.door("gateway", "--workers", "2"))
        # Every request on a connection of its own, so each is accepted by either worker.
        http = await stack.enter_async_context(
            httpx.AsyncClient(
                base_url=f"http://127.0.0.1:{port}",
                headers={"Authorization": f"Bearer {ALICE_KEY}"},
                limits=httpx.Limits(max_keepalive_connections=0),
                timeout=30,
            )
        )
        # The workers are the command's children; the port accepts once the first is up,
        # and a foreign process tells the rest only by what it shows.
        with anyio.fail_after(60):
            while True:
                if (
                    workers(door.process.pid) == 2
                    and (await http.get("/readyz")).status_code == 200
                ):
                    break
                await anyio.sleep(0.1)

        opened = await http.post("/v1/sessions", json={"groups": GROUPS})
        assert opened.status_code == 201, opened.text
        session = opened.json()["session_id"]
        for n, (tool, state_after) in enumerate(TEN_CALLS):
            answer = await http.post(
                f"/v1/sessions/{session}/calls",
                json={"name": tool, "arguments": {"n": n}, "tool_call_id": f"c{n}"},
            )
            assert answer.status_code == 200, answer.text
            assert answer.json()["state"] == state_after, answer.json()

        closed = await http.delete(f"/v1/sessions/{session}")
        assert closed.status_code == 200, closed.text
        calls = closed.json()["audit"]["calls"]
        assert [call["tool_call_id"] for call in calls] == [f"c{n}" for n in range(10)]
    assert sorted(deployment.runs.values()) == [1] * 10, deployment.runs


SERVING = "toolbus gateway on http://"


def fresh_connections(port: int, **headers: str) -> httpx.AsyncClient:
    """A client opening a connection per request: each goes to whichever worker accepts."""
    return httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{port}",
        headers=headers,
        limits=httpx.Limits(max_keepalive_connections=0),
        timeout=30,
    )


@contextmanager
def paused(pid: int) -> Iterator[None]:
    """SIGSTOP ``pid`` for the block: it accepts nothing meanwhile."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


@asynccontextmanager
async def two_workers(
    cluster: NatsCluster, redis: RedisServer, tmp_path: Path
) -> AsyncIterator[tuple[DoorProcess, int]]:
    """``toolbus gateway --workers 2``, alice allowed the console; ready once it says it serves."""
    deployment = Deployment(tmp_path, cluster.url(), redis.url, {"prefix": "toolbus-workers"})
    settings = deployment.workdir / "toolbus.toml"
    settings.write_text(settings.read_text() + 'console-users = ["alice"]\n')  # in [gateway]
    # Ready once it says it serves (on a free port; another where it was taken).
    async with deployment.door("gateway", "--workers", "2") as (door, port):
        yield door, port


async def test_serving_is_said_once_every_worker_accepts(
    scaling_cluster: NatsCluster, scaling_redis: RedisServer, tmp_path: Path
) -> None:
    async with (
        two_workers(scaling_cluster, scaling_redis, tmp_path) as (door, port),
        fresh_connections(port) as http,
    ):
        first, second = worker_pids(door.process.pid)
        # Each alone answers at once, the other stopped: both accepted already.
        for alone, stopped in ((first, second), (second, first)):
            with paused(stopped), anyio.fail_after(3):
                assert (await http.get("/healthz")).status_code == 200, f"worker {alone}"
    assert door.output().count(SERVING) == 1
    # SIGTERM (leaving the block): the workers finish, and so does the command, cleanly.
    assert door.process.returncode == 0, door.output()
    assert not [pid for pid in (first, second) if alive(pid)]


async def test_a_console_log_in_on_one_worker_holds_on_the_other(
    scaling_cluster: NatsCluster, scaling_redis: RedisServer, tmp_path: Path
) -> None:
    async with (
        two_workers(scaling_cluster, scaling_redis, tmp_path) as (door, port),
        fresh_connections(port) as http,
    ):
        with anyio.fail_after(60):  # both workers up, whenever the command said so
            while True:
                pids = worker_pids(door.process.pid)
                if len(pids) == 2 and (await http.get("/readyz")).status_code == 200:
                    break
                await anyio.sleep(0.1)
        first, second = pids
        with paused(second):  # logged in on the first
            with anyio.fail_after(30):
                page = await http.get("/console")
            token = re.search(r'name="csrf" value="([^"]+)"', page.text)
            assert token is not None, page.text
            logged_in = await http.post(
                "/console/login", data={"token": ALICE_KEY, "csrf": token.group(1)}
            )
            assert logged_in.status_code in (200, 303), logged_in.text
        with paused(first), anyio.fail_after(30):  # read by the second
            console = await http.get("/console")
        assert console.status_code == 200 and "log out" in console.text, console.text


async def test_a_worker_that_cannot_start_ends_the_command_with_its_error(
    tmp_path: Path,
) -> None:
    listen = 0

    def choose() -> None:
        nonlocal listen
        listen = free_port()

    @asynccontextmanager
    async def command(deployment: Deployment) -> AsyncIterator[tuple[int | None, str]]:
        argv = ["gateway", "--workers", "2", "--config", str(deployment.config)]
        argv += ["--listen", f"127.0.0.1:{listen}"]
        process = await anyio.run_process(
            [TOOLBUS, *argv],
            cwd=tmp_path,
            env=door_environment(deployment.environment),
            check=False,
        )
        stderr = process.stderr.decode()
        if "cannot listen" in stderr:  # another process took the port first
            raise failed_to_listen("toolbus gateway --workers 2", [listen], stderr)
        yield process.returncode, stderr

    with refusing_port() as broker, refusing_port() as store:  # nothing listens there
        deployment = Deployment(
            tmp_path, f"nats://127.0.0.1:{broker}", f"redis://127.0.0.1:{store}", {}
        )
        async with on_free_ports_async(lambda: command(deployment), choose) as (returncode, stderr):
            pass
    assert returncode == 1, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "cannot connect to NATS" in errors[0], stderr
    assert "Traceback" not in stderr and SERVING not in stderr, stderr
