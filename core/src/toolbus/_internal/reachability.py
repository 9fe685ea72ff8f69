"""Telling at once that no broker listens where a URL points.

A broker client retries a refused connection until its connect timeout runs
out (five seconds by default), which is right for a broker that is restarting
and slow for the usual mistake: nothing runs at that address at all. When
every server of a URL refuses a TCP connection at once, :func:`refused_by_all`
says so, and ``connect`` fails without waiting; anything else (a server that
accepts, or one that does not answer in time) leaves the decision to the
client and its timeout.
"""

from __future__ import annotations

from collections.abc import Sequence

import anyio

#: Seconds a server may take to accept or refuse before the client decides instead.
CHECK_TIMEOUT = 1.0


def _host_port(server: str) -> tuple[str, int]:
    host, _, port = server.rpartition(":")
    return host.strip("[]"), int(port)


def _refused(exc: BaseException | None) -> bool:
    """Whether every address tried refused (anyio reports its attempts as the cause)."""
    if isinstance(exc, ConnectionRefusedError):
        return True
    if isinstance(exc, BaseExceptionGroup):
        return all(_refused(inner) for inner in exc.exceptions)
    return exc is not None and _refused(exc.__cause__)


async def _refusal(server: str, timeout: float) -> str | None:
    host, port = _host_port(server)
    try:
        with anyio.fail_after(timeout):
            stream = await anyio.connect_tcp(host, port)
    except (TimeoutError, OSError) as exc:
        if _refused(exc):
            return f"nothing listens on {server} (connection refused)"
        return None  # unreachable for now, or slow: the client's timeout decides
    await stream.aclose()
    return None


async def refused_by_all(servers: Sequence[str], timeout: float = CHECK_TIMEOUT) -> str | None:
    """Why every one of ``servers`` (``host:port``) refused a connection, or None if one did not."""
    reasons: list[str | None] = [None] * len(servers)

    async def check(index: int, server: str) -> None:
        reasons[index] = await _refusal(server, timeout)

    async with anyio.create_task_group() as tasks:
        for index, server in enumerate(servers):
            tasks.start_soon(check, index, server)
    if not servers or any(reason is None for reason in reasons):
        return None
    return "; ".join(reason for reason in reasons if reason is not None)
