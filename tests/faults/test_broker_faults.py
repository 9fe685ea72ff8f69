"""Every broker, the same faults, injected for real under load: nothing ends, nothing is lost.

On each broker (:mod:`tests.faults.brokers`) the matrix's processes run
(:mod:`tests.faults.deployment`) while the test calls both echo services
twenty times a second. Then, one after the other on the same processes:

* ``restart``: the broker stops (SIGTERM) for :data:`OUTAGE` seconds, then
  starts again with its data;
* ``kill``: the broker is SIGKILLed, and started again :data:`OUTAGE` seconds later;
* ``cut``: the proxy resets every connection and refuses new ones for
  :data:`OUTAGE` seconds;
* ``latency``: the proxy delays everything by :data:`LATENCY` each way for
  :data:`OUTAGE` seconds.

(pulsar-lite sends its clients to its own address after they look a topic up, so
the proxy's faults do not reach it: those two are not run there, see the conftest.)

For each: every toolbus process is still running and logged no traceback;
each call that failed did so with a timeout or ``BrokerUnavailable``, never
later than its deadline; calls flow again without restarting anything; the
gateway answered throughout (``/healthz``, and calls with a JSON error) and
serves calls again; on the persistent queue no request the broker took is
lost (except what a broker that keeps nothing over a restart dropped: Tansu
runs in memory), and no call runs twice. The figures go to the report
(:mod:`tests.faults.report`).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import Counter
from collections.abc import Iterator

import anyio
import httpx
import pytest

from tests.faults import report
from tests.faults.deployment import GATEWAY_CALL_TIMEOUT, BrokerDeployment
from tests.faults.load import CallLoad, PublishLog, figures, settled_runs
from tests.nats.micro_clients import ask
from toolbus import ToolServiceClient, connect

pytestmark = [pytest.mark.anyio, pytest.mark.broker, pytest.mark.slow, pytest.mark.timeout(300)]

FAULTS = ("restart", "kill", "cut", "latency")
#: How long each fault lasts: longer than the announcement interval (1 s), so that
#: background work falls due while the broker is away.
OUTAGE = 2.0
#: Added each way by the ``latency`` fault.
LATENCY = 0.1
#: Seconds after the fault's end within which calls must flow again.
RECOVERY_LIMIT = 45.0
#: More lines than this of one kind in a process's log during a fault is a flood.
FLOOD = 20


@contextlib.contextmanager
def tracebacks_logged() -> Iterator[list[logging.LogRecord]]:
    """Records logged in this process (the test's client) that carry a traceback."""
    found: list[logging.LogRecord] = []

    class Catch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.exc_info:
                found.append(record)

    handler = Catch(logging.DEBUG)
    logging.getLogger().addHandler(handler)
    try:
        yield found
    finally:
        logging.getLogger().removeHandler(handler)


async def inject(fault: str, deployment: BrokerDeployment) -> None:
    """The fault, from its start until it is over (the broker listening again, the
    network restored, the latency gone)."""
    broker = deployment.broker
    proxy = broker.proxy
    assert proxy is not None
    if fault == "restart":
        await anyio.to_thread.run_sync(broker.stop)
        await anyio.sleep(OUTAGE)  # the outage is the scenario, not a wait for an event
        await anyio.to_thread.run_sync(broker.start)
    elif fault == "kill":
        await anyio.to_thread.run_sync(broker.kill)
        await anyio.sleep(OUTAGE)
        await anyio.to_thread.run_sync(broker.start)
    elif fault == "cut":
        proxy.cut()
        await anyio.sleep(OUTAGE)
        proxy.restore()
    else:
        proxy.latency = LATENCY
        await anyio.sleep(OUTAGE)
        proxy.latency = 0.0


class GatewayWatch:
    """The gateway through a fault: ``/healthz`` and a call every half second."""

    def __init__(self, deployment: BrokerDeployment) -> None:
        self.deployment = deployment
        self.health: Counter[int] = Counter()
        self.calls: Counter[int] = Counter()
        #: Call answers that took longer than the gateway's call timeout allows.
        self.slow = 0
        #: Answers that were not JSON.
        self.not_json = 0
        #: The longest a call took to be answered (seconds).
        self.longest = 0.0
        self.longest_health = 0.0
        self._n = deployment.numbers(10_000)

    async def call(self, http: httpx.AsyncClient) -> int:
        started = time.monotonic()
        self._n += 1
        answer = await http.post(
            "/v1/tools/faults-echo-np/call", json={"arguments": {"n": self._n}}
        )
        took = time.monotonic() - started
        self.longest = max(self.longest, took)
        if took > GATEWAY_CALL_TIMEOUT + 2:
            self.slow += 1
        try:
            answer.json()
        except ValueError:
            self.not_json += 1
        return answer.status_code

    async def watch(self, until: anyio.Event) -> None:
        async with self.deployment.gateway() as http:
            while not until.is_set():
                started = time.monotonic()
                self.health[(await http.get("/healthz")).status_code] += 1
                self.longest_health = max(self.longest_health, time.monotonic() - started)
                self.calls[await self.call(http)] += 1
                with anyio.move_on_after(0.5):
                    await until.wait()

    async def until_serving(self, limit: float) -> float:
        """Seconds until a gateway call is answered 200."""
        started = time.monotonic()
        async with self.deployment.gateway() as http:
            with anyio.fail_after(limit):
                while True:
                    if await self.call(http) == 200:
                        break
                    await anyio.sleep(0.2)  # the pace of asking
        return time.monotonic() - started


class ServeWatch:
    """``toolbus serve``'s ``/metrics`` and ``/readyz`` through a fault, every half second."""

    def __init__(self, deployment: BrokerDeployment) -> None:
        self.base = f"http://127.0.0.1:{deployment.metrics_port}"
        self.metrics: Counter[int] = Counter()
        self.ready: Counter[int] = Counter()

    async def watch(self, until: anyio.Event) -> None:
        async with httpx.AsyncClient(base_url=self.base, timeout=10) as http:
            while not until.is_set():
                self.metrics[(await http.get("/metrics")).status_code] += 1
                self.ready[(await http.get("/readyz")).status_code] += 1
                with anyio.move_on_after(0.5):
                    await until.wait()

    async def until_ready(self, limit: float) -> None:
        async with httpx.AsyncClient(base_url=self.base, timeout=10) as http:
            with anyio.fail_after(limit):
                while True:
                    if (await http.get("/readyz")).status_code == 200:
                        return
                    await anyio.sleep(0.1)  # the pace of asking


async def micro_stats_answered(url: str, timeout: float) -> None:
    """``$SRV.STATS`` is answered for the persistent echo service (asked again until it is)."""
    with anyio.fail_after(timeout):
        while True:
            try:
                answers = await ask(url.split("?")[0], "STATS", "faults-echo", 1, timeout=2)
            except TimeoutError:
                continue  # its subscription is being made again
            assert answers[0].endpoints[0].num_requests > 0
            return


def floods(log: str) -> dict[str, int]:
    """Kinds of line (logger and the start of the message) written more than FLOOD times."""
    kinds: Counter[str] = Counter()
    for line in log.splitlines():
        parts = line.split(" ", 4)
        if len(parts) == 5 and parts[2] in {"WARNING", "ERROR"}:
            kinds[f"{parts[3]} {parts[4][:50]}"] += 1
    return {kind: count for kind, count in kinds.items() if count > FLOOD}


@pytest.mark.parametrize("fault", FAULTS)
async def test_a_fault_ends_no_process_and_loses_no_call(
    deployment: BrokerDeployment, fault: str
) -> None:
    broker = deployment.broker
    for name, logged in deployment.processes.items():
        assert logged.alive, f"{name} ended before this fault:\n{logged.process.output()[-3000:]}"
    bus = PublishLog(await connect(broker.url))
    gateway = GatewayWatch(deployment)
    serve = ServeWatch(deployment)
    try:
        async with ToolServiceClient(bus) as client:  # type: ignore[arg-type]
            load = CallLoad(client, first=deployment.numbers())
            with tracebacks_logged() as tracebacks:
                stop_load, stop_watch = anyio.Event(), anyio.Event()
                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(load.run, stop_load)
                    await load.until_flowing(time.monotonic(), 60)  # flowing before the fault
                    deployment.mark()
                    tasks.start_soon(gateway.watch, stop_watch)
                    tasks.start_soon(serve.watch, stop_watch)
                    started = time.monotonic()
                    await inject(fault, deployment)
                    ended = time.monotonic()
                    await load.until_flowing(ended, RECOVERY_LIMIT)
                    stop_watch.set()
                    stop_load.set()
                gateway_back = await gateway.until_serving(RECOVERY_LIMIT)
                await serve.until_ready(RECOVERY_LIMIT)
                if broker.kind == "nats":  # the services are NATS micro services too
                    await micro_stats_answered(broker.url, timeout=RECOVERY_LIMIT)
    finally:
        await bus.close()
    runs = await settled_runs(deployment.runs, load, bus.taken, limit=10)
    found = figures(broker.kind, fault, load, runs, bus.taken, started, ended)
    report.FIGURES.append(found)
    print(
        f"\n{found.row()}\n  run twice: {found.run_twice}; errors: {found.errors}; gateway: "
        f"health {dict(gateway.health)}, calls {dict(gateway.calls)} (longest "
        f"{gateway.longest:.2f} s, healthz {gateway.longest_health:.2f} s), serving again "
        f"after {gateway_back:.2f} s; toolbus serve: /metrics {dict(serve.metrics)}, "
        f"/readyz {dict(serve.ready)}"
    )

    for name, logged in deployment.processes.items():
        log = logged.since_mark()
        assert logged.alive, f"{name} ended during the fault:\n{logged.process.output()[-3000:]}"
        assert "Traceback" not in log, f"{name} logged a traceback:\n{log[-6000:]}"
        assert not floods(log), f"{name} flooded its log: {floods(log)}"
    assert not tracebacks, [r.getMessage() for r in tracebacks]
    undocumented = [(c.outcome, c.message) for c in load.calls if c.outcome and not c.documented]
    assert not undocumented, undocumented[:5]
    assert found.hung == 0, "calls ended later than their deadline"
    assert found.duplicated["persistent"] == 0, found.run_twice
    if broker.keeps_data or fault in ("cut", "latency"):
        assert found.lost == 0
    if fault == "latency":
        assert sum(found.failed.values()) == 0, found.errors
    assert set(gateway.health) == {200}, gateway.health
    assert gateway.slow == 0 and gateway.not_json == 0
    assert set(gateway.calls) <= {200, 404, 502, 503}, gateway.calls
    assert set(serve.metrics) == {200}, serve.metrics
    assert set(serve.ready) <= {200, 503}, serve.ready
