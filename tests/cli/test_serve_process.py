"""``toolbus serve`` as a real process, and the drain it relies on, tested in-process.

memory:// lives inside one process, so no caller can reach a served process
through it: the process tests check start-up, the "serving" lines, signals and
exit codes, and the drain is shown on :class:`ServiceHost` directly.
"""

from __future__ import annotations

import logging
import os
import queue
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import pytest

from toolbus import ServiceHost, ToolService, ToolServiceClient, tool_service
from toolbus.domain.errors import ToolTimeout, Unavailable
from toolbus.memory.bus import MemoryBus, connect
from toolbus_calculator import calculator_service
from toolbus_joke import joke_service

STARTUP = 30.0  # seconds a fresh interpreter may take to import and subscribe
WAIT = 5.0


def toolbus_command() -> list[str]:
    script = Path(sys.executable).parent / "toolbus"
    if script.exists():
        return [str(script)]
    found = shutil.which("toolbus")
    assert found, "the toolbus console script is not installed in this environment"
    return [found]


class ServeProcess:
    """A ``toolbus serve`` child whose stderr is read line by line as it arrives."""

    def __init__(
        self,
        args: list[str],
        env: dict[str, str],
        cwd: Path,
        signal_on: tuple[str, signal.Signals] | None = None,
    ) -> None:
        #: Send this signal from the reading thread the moment a line holds this text,
        #: as a supervisor waiting for readiness would.
        self.signal_on = signal_on
        self.process = subprocess.Popen(
            [*toolbus_command(), "serve", *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=cwd,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            if self.signal_on is not None and self.signal_on[0] in line:
                self.process.send_signal(self.signal_on[1])
                self.signal_on = None
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def wait_for_line(self, predicate_text: str, timeout: float) -> str:
        """The first stderr line containing ``predicate_text``; fails on EOF or timeout."""
        while True:
            try:
                line = self.lines.get(timeout=timeout)
            except queue.Empty:
                pytest.fail(f"no line with {predicate_text!r} within {timeout} s: {self.seen}")
            if line is None:
                pytest.fail(f"the process ended before printing {predicate_text!r}: {self.seen}")
            self.seen.append(line)
            if predicate_text in line:
                return line

    def rest(self, timeout: float) -> list[str]:
        """Every remaining stderr line, once the process has exited."""
        self._reader.join(timeout)
        remaining = []
        while not self.lines.empty():
            line = self.lines.get_nowait()
            if line is not None:
                remaining.append(line)
        self.seen.extend(remaining)
        return remaining

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()


@pytest.fixture
def clean_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLBUS_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tmp_path), env.get("PYTHONPATH")]))
    yield env


@pytest.fixture
def started(tmp_path: Path, clean_env: dict[str, str]) -> Iterator[list[ServeProcess]]:
    processes: list[ServeProcess] = []
    yield processes
    for process in processes:
        process.kill()


def serve(
    started: list[ServeProcess],
    args: list[str],
    env: dict[str, str],
    cwd: Path,
    signal_on: tuple[str, signal.Signals] | None = None,
) -> ServeProcess:
    process = ServeProcess(args, env, cwd, signal_on)
    started.append(process)
    return process


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_serve_announces_each_service_and_exits_0_on_a_signal(
    started: list[ServeProcess],
    clean_env: dict[str, str],
    tmp_path: Path,
    signum: signal.Signals,
) -> None:
    # A supervisor may signal the moment the first service says it is serving.
    process = serve(
        started,
        ["joke-service", "calculator", "--broker", "memory://"],
        clean_env,
        tmp_path,
        signal_on=(f"serving {joke_service.id} ", signum),
    )

    joke_line = process.wait_for_line(f"serving {joke_service.id} ", STARTUP)
    assert process.process.wait(timeout=WAIT) == 0, process.rest(WAIT)
    rest = process.rest(WAIT)
    assert joke_line == f"serving joke-service on {joke_service.request_queue} via memory://"
    assert f"serving calculator on {calculator_service.request_queue} via memory://" in rest
    assert any(signum.name in line and "draining" in line for line in rest), rest
    assert not any("Traceback" in line for line in process.seen), process.seen


def test_serve_runs_a_service_from_an_import_path(
    started: list[ServeProcess], clean_env: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "shop_tools.py").write_text(
        textwrap.dedent(
            """
            from toolbus import tool_service

            @tool_service("stock-level", request_queue="persistent://shop/request/stock",
                          response_queue="non-persistent://shop/response/stock")
            async def stock_level(sku: str) -> int:
                return 7
            """
        ),
        encoding="utf-8",
    )

    process = serve(started, ["shop_tools:stock_level", "joke-service"], clean_env, tmp_path)

    line = process.wait_for_line("serving stock-level ", STARTUP)
    assert line == "serving stock-level on persistent://shop/request/stock via memory://"
    process.wait_for_line("serving joke-service ", WAIT)
    process.process.send_signal(signal.SIGTERM)
    assert process.process.wait(timeout=WAIT) == 0


def test_serve_imports_a_module_from_the_working_directory(
    started: list[ServeProcess], tmp_path: Path
) -> None:
    # What the README does: ``toolbus serve weather:weather`` beside weather.py,
    # with nothing on PYTHONPATH.
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "weather.py").write_text(
        textwrap.dedent(
            """
            from toolbus import tool_service

            @tool_service("weather")
            async def weather(city: str) -> str:
                return city
            """
        ),
        encoding="utf-8",
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLBUS_")}
    env.pop("PYTHONPATH", None)

    process = serve(started, ["weather:weather"], env, folder)

    process.wait_for_line("serving weather ", STARTUP)
    process.process.send_signal(signal.SIGTERM)
    assert process.process.wait(timeout=WAIT) == 0


def test_a_module_that_cannot_be_imported_exits_2_saying_what_to_do(
    started: list[ServeProcess], clean_env: dict[str, str], tmp_path: Path
) -> None:
    process = serve(started, ["no_such_module:weather"], clean_env, tmp_path)

    assert process.process.wait(timeout=STARTUP) == 2
    message = " ".join(process.rest(WAIT))
    assert "No module named 'no_such_module'" in message
    assert "folder that holds no_such_module.py" in message
    assert "PYTHONPATH" in message
    assert "Traceback" not in message


def test_serve_takes_the_broker_from_toolbus_toml(
    started: list[ServeProcess], clean_env: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "toolbus.toml").write_text('broker = "memory://from-the-file"\n')

    process = serve(started, ["calculator"], clean_env, tmp_path)

    line = process.wait_for_line("serving calculator ", STARTUP)
    assert line.endswith(" via memory://from-the-file")
    process.process.send_signal(signal.SIGTERM)
    assert process.process.wait(timeout=WAIT) == 0


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("no-such-service", "no installed tool plugin provides a service 'no-such-service'"),
        ("no_such_module:service", "cannot import tool service 'no_such_module:service'"),
        ("toolbus_joke.service:tell_joke", "not a tool service"),
    ],
)
def test_serve_with_a_bad_service_name_exits_2_with_a_readable_error(
    clean_env: dict[str, str], tmp_path: Path, name: str, fragment: str
) -> None:
    child = subprocess.run(
        [*toolbus_command(), "serve", name],
        capture_output=True,
        text=True,
        env=clean_env,
        cwd=tmp_path,
        timeout=STARTUP,
    )

    assert fragment in child.stderr
    assert "Traceback" not in child.stderr
    assert child.returncode == 2


def test_serve_with_an_uninstalled_broker_scheme_exits_2(
    clean_env: dict[str, str], tmp_path: Path
) -> None:
    child = subprocess.run(
        [*toolbus_command(), "serve", "calculator", "--broker", "carrier-pigeon://coop"],
        capture_output=True,
        text=True,
        env=clean_env,
        cwd=tmp_path,
        timeout=STARTUP,
    )

    assert "no broker adapter for carrier-pigeon://" in child.stderr
    assert "Traceback" not in child.stderr
    assert child.returncode == 2


# --- the drain, in-process ----------------------------------------------------------


class Gate:
    """A tool that holds each call until the test lets it go."""

    def __init__(self) -> None:
        self.entered = anyio.Event()
        self.release = anyio.Event()
        self.calls = 0
        gate = self

        @tool_service("gated")
        async def gated(text: str) -> str:
            gate.calls += 1
            gate.entered.set()
            await gate.release.wait()
            return f"done {text}"

        self.service: ToolService = gated


@pytest.fixture
async def bus() -> AsyncIterator[MemoryBus]:
    bus = await connect(f"memory://drain-{uuid.uuid4().hex}")
    try:
        yield bus
    finally:
        await bus.close()


@pytest.mark.anyio
@pytest.mark.parametrize("how", ["stop", "cancel"])
async def test_a_call_in_flight_when_the_host_stops_still_gets_its_answer(
    bus: MemoryBus, how: str
) -> None:
    gate = Gate()
    host = ServiceHost(bus, gate.service, concurrency=4)
    answers: list[str] = []

    async with ToolServiceClient(bus, default_timeout=WAIT) as client:

        async def first_call() -> None:
            answers.append(
                await client.call(
                    request_queue=gate.service.request_queue,
                    response_queue=gate.service.response_queue,
                    arguments={"text": "in flight"},
                )
            )

        async with anyio.create_task_group() as callers:
            callers.start_soon(first_call)
            async with anyio.create_task_group() as serving:
                await serving.start(host.serve)
                with anyio.fail_after(WAIT):
                    await gate.entered.wait()
                if how == "stop":
                    host.stop()
                else:
                    serving.cancel_scope.cancel()
                # serve() is now draining: the call in flight is let finish.
                assert host.in_flight == 1
                gate.release.set()
            # serve() has returned.

        assert answers == ["done in flight"]
        assert host.in_flight == 0
        assert client.pending == 0


@pytest.mark.anyio
async def test_after_stop_a_new_call_is_not_taken(bus: MemoryBus) -> None:
    gate = Gate()
    host = ServiceHost(bus, gate.service, concurrency=4)

    async with ToolServiceClient(bus, default_timeout=WAIT) as client:

        async def call(text: str, timeout: float) -> str:
            return await client.call(
                request_queue=gate.service.request_queue,
                response_queue=gate.service.response_queue,
                arguments={"text": text},
                timeout=timeout,
                service=gate.service.id,
            )

        late: list[BaseException] = []

        async def call_after_stop() -> None:
            try:
                await call("too late", 0.3)
            except ToolTimeout as exc:
                late.append(exc)

        async with anyio.create_task_group() as tasks:
            answers: list[str] = []

            async def first() -> None:
                answers.append(await call("first", WAIT))

            async with anyio.create_task_group() as serving:
                await serving.start(host.serve)
                tasks.start_soon(first)
                with anyio.fail_after(WAIT):
                    await gate.entered.wait()
                host.stop()
                # Free slots remain (concurrency 4), yet the stopped host takes nothing.
                tasks.start_soon(call_after_stop)
                with anyio.fail_after(WAIT):
                    await anyio.wait_all_tasks_blocked()
                assert gate.calls == 1
                gate.release.set()
            # serve() has returned: nothing more can be taken by this host.
            assert gate.calls == 1

        assert answers == ["done first"]
        assert len(late) == 1
        assert host.handled == 1
        assert client.pending == 0


@pytest.mark.anyio
async def test_a_call_still_running_after_the_drain_timeout_is_cut_off_and_told(
    bus: MemoryBus, caplog: pytest.LogCaptureFixture
) -> None:
    gate = Gate()
    assert gate.service.request_queue.startswith("non-persistent://")
    host = ServiceHost(bus, gate.service, drain_timeout=0.05)

    async with ToolServiceClient(bus, default_timeout=WAIT) as client:
        async with anyio.create_task_group() as tasks:

            async def stuck_call() -> None:
                # Lost on a non-persistent queue: the caller hears so, not its timeout.
                with pytest.raises(Unavailable, match="'gated' shut down before the call finished"):
                    await client.call(
                        request_queue=gate.service.request_queue,
                        response_queue=gate.service.response_queue,
                        arguments={"text": "stuck"},
                        timeout=60,
                    )

            tasks.start_soon(stuck_call)
            with caplog.at_level(logging.WARNING, logger="toolbus"):
                async with anyio.create_task_group() as serving:
                    await serving.start(host.serve)
                    with anyio.fail_after(WAIT):
                        await gate.entered.wait()
                    host.stop()
                # serve() returned although the call never finished.
            assert host.in_flight == 0
            assert any("cut off" in r.getMessage() for r in caplog.records)
        assert client.pending == 0
