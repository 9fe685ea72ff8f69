"""``toolbus gateway --workers N``: worker processes on one listening socket, started and
watched by the command.

The command binds the address itself, then starts N worker processes
(multiprocessing's *spawn*), each building the gateway from the command's
arguments, connecting it (broker, state store) and serving the inherited socket
with uvicorn. A worker tells the command over a pipe once it accepts connections,
or why it could not start. So the command

* says it serves (``toolbus gateway on http://...``) only once every worker
  accepts connections;
* when a worker cannot start, stops the others and exits non-zero with that
  worker's error, once;
* makes the console's session key itself (unless ``console-key-env`` names one)
  and hands it to every worker, so that a console log-in on one worker is good
  on all of them;
* on SIGTERM or SIGINT stops every worker (each finishes its requests in flight)
  and exits 0, and starts a new worker in place of one that dies meanwhile.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import secrets
import signal
import socket
import time
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any

import anyio
import uvicorn

from toolbus._internal.event_loops import backend_options, running_loop_name
from toolbus._internal.web_server import CommandServer
from toolbus.application.calls.supervision import plain_errors
from toolbus.domain.errors import ToolbusError
from toolbus_gateway._launch import GRACEFUL_SHUTDOWN, GatewayArguments, build_gateway, http_parser

log = logging.getLogger("toolbus.gateway")

#: The environment variable the workers read the command's console key from.
CONSOLE_KEY_VARIABLE = "TOOLBUS_GATEWAY_CONSOLE_KEY"
#: Seconds a worker that was told to stop may take before it is killed.
STOP_TIMEOUT = GRACEFUL_SHUTDOWN + 5
#: Seconds between tries to replace a worker that died and whose replacement failed.
RESTART_PAUSE = 5.0


class WorkerFailed(Exception):
    """A worker could not start; the message is its error."""


@dataclass
class _Worker:
    process: BaseProcess
    report: Connection
    #: "starting", "ready", or why it could not start.
    status: str = "starting"
    #: Lines it asked the command to show (once for all the workers).
    lines: list[str] = field(default_factory=list)


def shared_console_key(arguments: GatewayArguments, configured: str | None) -> GatewayArguments:
    """The arguments the workers get: with the command's own console key, made here and
    put in this process's environment (which the workers inherit), unless
    ``console-key-env`` names one already."""
    if configured is not None:
        return arguments
    os.environ[CONSOLE_KEY_VARIABLE] = secrets.token_urlsafe(32)
    return replace(arguments, console_key_env=CONSOLE_KEY_VARIABLE)


class Workers:
    """The command's worker processes; see the module docs."""

    def __init__(
        self,
        arguments: GatewayArguments,
        listener: socket.socket,
        count: int,
        *,
        verbose: bool,
        loop: str,
    ) -> None:
        self.arguments = arguments
        self.listener = listener
        self.count = count
        self.verbose = verbose
        self.loop = loop
        self._context = multiprocessing.get_context("spawn")
        self._workers: list[_Worker] = []
        #: SIGTERM and SIGINT received (caught from ``with`` on: never the default action,
        #: which would leave the workers behind).
        self._signals: list[int] = []
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> Workers:
        for sig in (signal.SIGTERM, signal.SIGINT):
            self._previous[sig] = signal.signal(sig, lambda number, _: self._signals.append(number))
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    @property
    def stopped_by(self) -> str | None:
        """The name of the signal that asked the command to stop, once one did."""
        return signal.Signals(self._signals[0]).name if self._signals else None

    def _spawn(self) -> _Worker:
        ours, theirs = self._context.Pipe(duplex=False)
        process = self._context.Process(
            target=serve_worker,
            args=(self.arguments.to_json(), self.listener, theirs, self.verbose, self.loop),
            name="toolbus-gateway-worker",
        )
        process.start()
        theirs.close()
        return _Worker(process, ours)

    def start(self) -> list[str]:
        """Start the workers; return once every one accepts connections, with the lines
        they asked to show (said once), or when a stop signal came first (see
        :attr:`stopped_by`). Raises :class:`WorkerFailed` (the others stopped) when
        one cannot start."""
        self._workers = [self._spawn() for _ in range(self.count)]
        lines: list[str] = []
        while any(worker.status == "starting" for worker in self._workers):
            if self._signals:
                return lines
            for worker in self._heard(0.5):
                if worker.status == "ready" and worker.process.is_alive():
                    continue
                self.stop()
                if worker.status == "ready":
                    raise WorkerFailed(
                        f"a gateway worker exited with {worker.process.exitcode} just after it "
                        "started; its log says why"
                    )
                raise WorkerFailed(worker.status)
            for worker in self._workers:
                lines += [line for line in worker.lines if line not in lines]
        return lines

    def _heard(self, timeout: float | None) -> list[_Worker]:
        """Read what the workers said (or that they exited) within ``timeout``; the
        workers whose status changed."""
        waiting = {w.report: w for w in self._workers if not w.report.closed}
        sentinels = {w.process.sentinel: w for w in self._workers}
        changed: list[_Worker] = []
        for ready in wait([*waiting, *sentinels], timeout):
            if ready in sentinels:
                worker = sentinels[ready]
                if worker.status == "starting" and not _drain(worker):
                    worker.status = (
                        f"a gateway worker exited with {worker.process.exitcode} while starting"
                    )
                changed.append(worker)
                continue
            worker = waiting[ready]  # type: ignore[index]  # a Connection, here
            if _drain(worker):
                changed.append(worker)
        return changed

    def serve_until_signalled(self) -> str:
        """Until SIGTERM or SIGINT, replace a worker that dies; the signal's name."""
        while not self._signals:
            for worker in self._heard(0.5):
                if worker.process.is_alive() or self._signals:
                    continue
                index = self._workers.index(worker)
                log.warning(
                    "gateway worker %d (pid %s) exited with %s; starting another",
                    index + 1,
                    worker.process.pid,
                    worker.process.exitcode,
                )
                self._workers[index] = self._replace()
        return signal.Signals(self._signals[0]).name

    def _replace(self) -> _Worker:
        """A new worker in place of one that died, once it accepts (tried again, after a
        pause, while it cannot start: the broker may be away), or once the command is
        told to stop (:meth:`stop` then ends it with the others)."""
        worker = self._spawn()
        while True:
            while worker.status == "starting" and not self._signals:
                if worker.report.poll(0.5):
                    _drain(worker)
                elif not worker.process.is_alive():
                    _drain(worker)
                    if worker.status == "starting":
                        worker.status = f"it exited with {worker.process.exitcode}"
            if worker.status in ("ready", "starting"):
                return worker
            log.warning("a new gateway worker could not start: %s", worker.status)
            worker.process.join()
            pause_until = time.monotonic() + RESTART_PAUSE
            while time.monotonic() < pause_until and not self._signals:
                time.sleep(0.1)  # a pause that a stop signal cuts short
            if self._signals:
                return worker
            worker = self._spawn()

    def stop(self) -> None:
        """SIGTERM every worker (each finishes its requests in flight); SIGKILL what is
        left after :data:`STOP_TIMEOUT`."""
        for worker in self._workers:
            if worker.process.is_alive():
                worker.process.terminate()
        deadline = time.monotonic() + STOP_TIMEOUT
        for worker in self._workers:
            worker.process.join(max(0.0, deadline - time.monotonic()))
            if worker.process.is_alive():
                worker.process.kill()
                worker.process.join()
            worker.report.close()


def _drain(worker: _Worker) -> bool:
    """Read the worker's messages; True when its status changed."""
    changed = False
    try:
        while worker.report.poll():
            kind, text = worker.report.recv()
            if kind == "line":
                worker.lines.append(text)
            else:
                worker.status = "ready" if kind == "ready" else text
                changed = True
    except (EOFError, OSError):
        worker.report.close()
    return changed


# -- in the worker process ----------------------------------------------------------------


class _ReportingServer(CommandServer):
    """Tells the command once it accepts connections."""

    def __init__(self, config: uvicorn.Config, report: Connection) -> None:
        super().__init__(config)
        self._report = report

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            self._report.send(("ready", ""))


def serve_worker(
    arguments_json: str, listener: socket.socket, report: Connection, verbose: bool, loop: str
) -> None:
    """A worker process: build and connect the gateway, serve ``listener`` until SIGTERM or
    SIGINT. Says on ``report`` when it accepts, or why it could not start."""
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    arguments = GatewayArguments.from_json(arguments_json)
    try:
        served, _, _ = build_gateway(arguments)

        async def main() -> None:
            from toolbus_gateway.app import create_app

            with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async with served:
                    lines = [f"event loop: {running_loop_name()}; HTTP parser: {http_parser()}"]
                    if served.warning is not None:
                        lines.insert(0, f"warning: {served.warning}")
                    for line in lines:
                        report.send(("line", line))
                    server = _ReportingServer(
                        uvicorn.Config(
                            create_app(served, run_gateway=False),
                            log_level="info" if verbose else "warning",
                            lifespan="on",
                            timeout_graceful_shutdown=GRACEFUL_SHUTDOWN,
                        ),
                        report,
                    )
                    async with anyio.create_task_group() as tasks:

                        async def stop_on_signal() -> None:
                            async for _ in signals:
                                # Callers waiting on a person or a task are answered
                                # first: they would wait longer than the requests are
                                # waited for.
                                await served.stopping()
                                server.shut_down()
                                return

                        tasks.start_soon(stop_on_signal)
                        await server.serve(sockets=[listener])
                        tasks.cancel_scope.cancel()
                    if not server.started:
                        raise ToolbusError("uvicorn could not start serving (its log says why)")

        with plain_errors():
            anyio.run(main, backend="asyncio", backend_options=backend_options(loop))
    except (ToolbusError, ValueError) as exc:  # a ConfigError is a ToolbusError
        report.send(("failed", str(exc)))
        raise SystemExit(1) from None
