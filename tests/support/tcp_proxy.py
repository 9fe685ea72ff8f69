"""A TCP proxy between clients and a server that a test cuts, holds down, restores and slows.

Clients connect to :attr:`TcpProxy.port` instead of the server's port. The proxy
runs its own asyncio event loop in a thread of its own, so that it serves
clients in other processes and in the test's own loop alike, and a test drives it
with plain method calls:

* :meth:`TcpProxy.cut` resets every connection it carries (each side gets a TCP
  reset, as when a route or a firewall drops a flow) and stops listening, so that
  clients trying again are refused until :meth:`TcpProxy.restore`;
* :attr:`TcpProxy.latency` delays every chunk of data, each way, by that many
  seconds (order kept, throughput not limited), as a long network path does.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
from collections.abc import Coroutine
from types import TracebackType
from typing import Any, TypeVar

from tests.support.servers import LOOPBACK

T = TypeVar("T")

#: Bytes read at once from either side.
CHUNK = 64 * 1024


class TcpProxy:
    """A proxy on 127.0.0.1 to ``target_port``; use it as a context manager."""

    def __init__(self, target_port: int, *, host: str = LOOPBACK) -> None:
        self.target = (host, target_port)
        self.port = 0
        self.latency = 0.0
        #: Connections accepted since the proxy started.
        self.accepted = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="tcp-proxy", daemon=True
        )
        self._server: asyncio.Server | None = None
        self._pipes: set[asyncio.Task[None]] = set()
        self._transports: set[asyncio.Transport] = set()

    # -- driving it (from any thread but its own) -----------------------------------

    def __enter__(self) -> TcpProxy:
        self._thread.start()
        self._run(self._listen())
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._run(self._cut())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()

    @property
    def listening(self) -> bool:
        return self._server is not None

    @property
    def open_connections(self) -> int:
        return len(self._pipes)

    def cut(self) -> None:
        """Reset every connection and refuse new ones until :meth:`restore`."""
        self._run(self._cut())

    def restore(self) -> None:
        """Accept connections again, on the same port."""
        self._run(self._listen())

    def _run(self, work: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(work, self._loop).result(10)

    # -- on the proxy's loop ---------------------------------------------------------

    async def _listen(self) -> None:
        if self._server is not None:
            return
        self._server = await asyncio.start_server(
            self._accept, LOOPBACK, self.port, reuse_address=True
        )
        self.port = self._server.sockets[0].getsockname()[1]

    async def _cut(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
        for transport in list(self._transports):
            # SO_LINGER 0: closing sends a reset rather than an orderly FIN.
            sock = transport.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            transport.abort()
        self._transports.clear()
        pipes = list(self._pipes)
        for pipe in pipes:
            pipe.cancel()
        await asyncio.gather(*pipes, return_exceptions=True)
        if server is not None:
            await server.wait_closed()

    async def _accept(
        self, client_in: asyncio.StreamReader, client_out: asyncio.StreamWriter
    ) -> None:
        self.accepted += 1
        try:
            server_in, server_out = await asyncio.open_connection(*self.target)
        except OSError:
            client_out.transport.abort()  # the server is down: so is the proxied connection
            return
        for writer in (client_out, server_out):
            self._transports.add(writer.transport)  # type: ignore[arg-type]
        task = asyncio.current_task()
        assert task is not None
        self._pipes.add(task)
        pumps = [
            asyncio.ensure_future(self._pump(client_in, server_out)),
            asyncio.ensure_future(self._pump(server_in, client_out)),
        ]
        try:
            # One side went away: so does the other (below).
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            # Cut: asyncio's server would log a handler that ends cancelled.
            pass
        finally:
            for pump in pumps:
                pump.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)
            self._pipes.discard(task)
            for writer in (client_out, server_out):
                self._transports.discard(writer.transport)  # type: ignore[arg-type]
                writer.transport.abort()

    async def _pump(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        """Copy ``source`` to ``sink``, each chunk delayed by the latency at the time it came."""
        due: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
        loop = asyncio.get_running_loop()

        async def deliver() -> None:
            while True:
                when, data = await due.get()
                if not data:
                    sink.close()
                    return
                delay = when - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                sink.write(data)
                await sink.drain()

        delivering = asyncio.ensure_future(deliver())
        try:
            while data := await source.read(CHUNK):
                due.put_nowait((loop.time() + self.latency, data))
            due.put_nowait((loop.time() + self.latency, b""))  # end of stream, in order
            await delivering
        finally:
            delivering.cancel()
