"""Tools for the replica scaling benchmark, served by ``toolbus serve`` processes.

``wait_*`` await ``BENCH_WAIT_SECONDS`` (a tool that calls an API or a
database); ``echo_*`` do no work at all (the bus and the processes' CPU are
the limit). ``*_stored`` read a ``persistent://`` request queue, ``*_plain`` a
``non-persistent://`` one; queue names start with ``BENCH_PREFIX``.
"""

from __future__ import annotations

import os

import anyio

from toolbus import tool_service

PREFIX = os.environ.get("BENCH_PREFIX", "bench")
WAIT_SECONDS = float(os.environ.get("BENCH_WAIT_SECONDS", "0.02"))


def queues(kind: str, persistence: str) -> dict[str, str]:
    return {
        "request_queue": f"{persistence}://bench/request/{PREFIX}-{kind}",
        "response_queue": f"non-persistent://bench/response/{PREFIX}-{kind}",
    }


@tool_service("wait-stored", **queues("wait-stored", "persistent"))
async def wait_stored(text: str) -> str:
    await anyio.sleep(WAIT_SECONDS)
    return text


@tool_service("wait-plain", **queues("wait-plain", "non-persistent"))
async def wait_plain(text: str) -> str:
    await anyio.sleep(WAIT_SECONDS)
    return text


@tool_service("echo-stored", **queues("echo-stored", "persistent"))
async def echo_stored(text: str) -> str:
    return text


@tool_service("echo-plain", **queues("echo-plain", "non-persistent"))
async def echo_plain(text: str) -> str:
    return text
