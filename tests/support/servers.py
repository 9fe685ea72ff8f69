"""Servers for tests on loopback ports, without racing other processes for the ports.

Two ways, by where the server runs:

* **In this process** (uvicorn in a thread or a task): :func:`bound_socket` binds
  port 0 and keeps the socket listening; the server is handed the socket
  (``sockets=[...]``), so no other process can take the port in between.
* **In a process of its own** (a broker, a store, haproxy): the port must be
  named on its command line, so it is chosen first (:func:`free_port`) and another
  process may take it before the server binds it. The server then fails to
  listen; :func:`server_process` and :func:`wait_for_port` tell that apart from
  other failures (:class:`PortTaken`), and :func:`on_free_ports` starts the server
  again on new ports, a few times at most. (A ``toolbus`` door needs none of this,
  but for its ``--workers``, which share a port it must be told: told ``--listen
  127.0.0.1:0``, it binds a port the system chooses and names it, see
  ``tests/doors/processes.py``.)

:func:`refusing_port` is a port where nothing listens, kept so for a test's block.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from pathlib import Path
from typing import Generic, NamedTuple, TypeVar

import anyio

LOOPBACK = "127.0.0.1"
#: How many times :func:`on_free_ports` starts a server whose port was taken.
PORT_TRIES = 5
#: How servers word a failed bind in their logs (Go, Rust, C, Erlang, Python).
ADDRESS_IN_USE = re.compile(r"address already in use|address in use|eaddrinuse", re.IGNORECASE)

T = TypeVar("T")


class PortTaken(RuntimeError):
    """A server could not listen: another process took its port first."""


def bound_socket() -> socket.socket:
    """A socket listening on a port of 127.0.0.1 the system chose, for an in-process server.

    Connections wait in its backlog until the server accepts them, so a server
    handed it is reachable as soon as this returns. Close it after the server.
    """
    return socket.create_server((LOOPBACK, 0), backlog=128)


@contextlib.contextmanager
def refusing_port() -> Iterator[int]:
    """A port of 127.0.0.1 that refuses connections until the block ends.

    Bound but not listening: a connection is refused at once, and no other process
    can start listening there meanwhile.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        yield int(sock.getsockname()[1])


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now.

    Only for a server in a process of its own, started through :func:`on_free_ports`
    (or :func:`on_free_ports_async`):
    by the time the server binds it, another process may have. A server in this
    process takes a :func:`bound_socket`.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def on_free_ports(
    start: Callable[[], AbstractContextManager[T]],
    choose: Callable[[], None],
    *,
    tries: int = PORT_TRIES,
) -> Iterator[T]:
    """Enter ``start()`` for the block, its ports picked by ``choose()`` (with :func:`free_port`).

    When the server finds a port taken (:class:`PortTaken`), ``choose()`` picks
    others and ``start()`` runs again, ``tries`` times in all.
    """
    for attempt in range(1, tries + 1):
        choose()
        with contextlib.ExitStack() as stack:
            try:
                started = stack.enter_context(start())
            except PortTaken:
                if attempt == tries:
                    raise
                continue
            yield started
            return


@contextlib.asynccontextmanager
async def on_free_ports_async(
    start: Callable[[], AbstractAsyncContextManager[T]],
    choose: Callable[[], None],
    *,
    tries: int = PORT_TRIES,
) -> AsyncIterator[T]:
    """:func:`on_free_ports` for a server started by an async context manager."""
    for attempt in range(1, tries + 1):
        choose()
        async with contextlib.AsyncExitStack() as stack:
            try:
                started = await stack.enter_async_context(start())
            except PortTaken:
                if attempt == tries:
                    raise
                continue
            yield started
            return


class StickyPort(Generic[T]):
    """A server in a process of its own on one port, restarted at the same address.

    ``start(port)`` runs it for a ``with`` block. The first :meth:`running` chooses a
    free port (another one where it was taken, see :func:`on_free_ports`); later
    ones keep it.
    """

    def __init__(self, start: Callable[[int], AbstractContextManager[T]]) -> None:
        self._start = start
        #: The port, once the server first started (0 before).
        self.port = 0

    def running(self) -> AbstractContextManager[T]:
        if self.port:
            return self._start(self.port)
        return on_free_ports(lambda: self._start(self.port), self._choose)

    def _choose(self) -> None:
        self.port = free_port()


def chosen(port: int) -> int:
    """``port`` of a server started through :func:`on_free_ports`, once chosen (it is 0 before).

    Reading a server's address before it first started is a mistake in the test:
    its ports may yet change.
    """
    if port == 0:
        raise RuntimeError(
            "the server's ports are chosen when it first starts: read its address inside "
            "its 'with ....running()' block"
        )
    return port


def port_in_use(port: int) -> bool:
    """Whether another socket holds ``port`` on 127.0.0.1, so that a server could not bind it.

    Connections of the past (TIME_WAIT) do not count, as for servers (SO_REUSEADDR).
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((LOOPBACK, port))
        except OSError:
            return True
        return False


def failed_to_listen(what: str, ports: Sequence[int], output: str) -> RuntimeError:
    """The error for a server that stopped before it listened: :class:`PortTaken` where one
    of its ``ports`` was taken (its ``output`` says so, or another process holds it)."""
    tail = output[-4000:]
    if ADDRESS_IN_USE.search(output) or any(map(port_in_use, ports)):
        return PortTaken(f"{what}: one of its ports {list(ports)} was taken:\n{tail}")
    return RuntimeError(f"{what}:\n{tail}")


def log_size(log: Path) -> int:
    """Where a run's output starts in ``log``, which earlier runs may have written to."""
    return log.stat().st_size if log.exists() else 0


def log_since(log: Path, offset: int) -> str:
    with log.open("rb") as read:
        read.seek(offset)
        return read.read().decode(errors="replace")


def listens(pid: int, port: int) -> bool | None:
    """Whether process ``pid`` (or one it started) listens on TCP ``port``.

    None where ``/proc`` cannot tell (not Linux): then a connection that is
    accepted is taken as the server's own.
    """
    try:
        inodes = _socket_inodes([pid, *_descendants(pid)])
        listening = set()
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            with contextlib.suppress(FileNotFoundError), open(table) as rows:
                for row in list(rows)[1:]:
                    fields = row.split()
                    if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                        listening.add(fields[9])
    except OSError:
        return None
    return bool(inodes & listening)


def _descendants(pid: int) -> list[int]:
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError):
            stat = Path(f"/proc/{entry}/stat").read_text()
            # The command name, in parentheses, may hold spaces: the fields follow it.
            parent = int(stat.rsplit(")", 1)[1].split()[1])
            parents.setdefault(parent, []).append(int(entry))
    found, queue = [], [pid]
    while queue:
        children = parents.get(queue.pop(), [])
        found += children
        queue += children
    return found


def _socket_inodes(pids: list[int]) -> set[str]:
    inodes = set()
    for pid in pids:
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                    if target.startswith("socket:["):
                        inodes.add(target[len("socket:[") : -1])
    return inodes


def wait_for_port(
    port: int,
    process: subprocess.Popen[bytes],
    timeout: float,
    log: Path,
    ports: Sequence[int] = (),
    log_from: int = 0,
) -> None:
    """Block until ``process`` listens on ``port``; fail with its log if it stops first.

    Raises :class:`PortTaken` where it stopped because ``port`` (or one of its other
    ``ports``) was taken, as its log from byte ``log_from`` on (this run's) or the
    port itself shows.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise failed_to_listen(
                f"server exited with {process.returncode} before listening on {port}",
                [port, *ports],
                log_since(log, log_from),
            )
        with contextlib.suppress(OSError), socket.create_connection((LOOPBACK, port), 0.2):
            # Accepted; by this server, or by another that took the port first (then
            # this one stops, and the next round says so)?
            if listens(process.pid, port) is not False:
                return
        # Polling a socket is the readiness signal a foreign server gives us.
        time.sleep(0.05)
    raise RuntimeError(
        f"server did not listen on {port} within {timeout} s:\n" + log_since(log, log_from)[-4000:]
    )


@contextlib.contextmanager
def server_process(
    argv: Sequence[str],
    *,
    port: int,
    workdir: Path,
    ready_timeout: float = 30.0,
    env: dict[str, str] | None = None,
    ports: Sequence[int] = (),
) -> Iterator[subprocess.Popen[bytes]]:
    """Run a server until the block ends; its output goes to ``workdir/server.log``.

    Ready once it listens on ``port``. Raises :class:`PortTaken` where it could not
    listen because ``port`` or one of its other ``ports`` was taken: start it
    through :func:`on_free_ports` to have it tried again on others.
    """
    log = workdir / "server.log"
    start = log_size(log)
    with log.open("ab") as out:
        process = subprocess.Popen(
            list(argv),
            cwd=workdir,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
        )
    try:
        wait_for_port(port, process, ready_timeout, log, ports, start)
        yield process
    finally:
        stop_process(process)


class Served(NamedTuple):
    """A server :func:`server_on_free_port` started: where, and its process."""

    port: int
    process: subprocess.Popen[bytes]


@contextlib.contextmanager
def server_on_free_port(
    argv: Callable[[int], Sequence[str]],
    *,
    workdir: Path,
    ready_timeout: float = 30.0,
    env: dict[str, str] | None = None,
) -> Iterator[Served]:
    """:func:`server_process` of ``argv(port)`` on a free port (another one where it was
    taken) until the block ends."""

    @contextlib.contextmanager
    def run(port: int) -> Iterator[Served]:
        with server_process(
            argv(port), port=port, workdir=workdir, ready_timeout=ready_timeout, env=env
        ) as process:
            yield Served(port, process)

    with StickyPort(run).running() as served:
        yield served


def nats_argv(binary: str) -> Callable[[int], list[str]]:
    """A plain nats-server's command line on a port, for :func:`server_on_free_port`."""
    return lambda port: [binary, "-a", LOOPBACK, "-p", str(port)]


def stop_process(process: subprocess.Popen[bytes], grace: float = 5.0) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class Restartable:
    """A server a test stops and starts again at the same address (with its data).

    ``run`` starts the server for a ``with`` block (``NatsServer.running`` and the
    like). Use it as a context manager: the server runs from ``with`` on, and is
    stopped at its end whatever the test did to it.
    """

    def __init__(self, run: Callable[[], AbstractContextManager[subprocess.Popen[bytes]]]) -> None:
        self._run = run
        self._running: AbstractContextManager[subprocess.Popen[bytes]] | None = None
        self._process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Restartable:
        self._start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._running is not None:
            self._running.__exit__(None, None, None)

    def _start(self) -> None:
        self._running = self._run()
        self._process = self._running.__enter__()

    async def stop(self) -> None:
        """Stop the server (SIGTERM, as an orderly restart does) and wait until it has."""
        assert self._process is not None
        await anyio.to_thread.run_sync(stop_process, self._process)

    async def start(self) -> None:
        """Start it again; returns once it listens."""
        await anyio.to_thread.run_sync(self._start)
