"""Two tool services for the cluster tests, one per delivery guarantee.

``toolbus serve cluster_services:stored cluster_services:plain``: ``stored``
reads a ``persistent://`` request queue, ``plain`` a ``non-persistent://`` one
(queue names from ``CLUSTER_QUEUES``, unique per test). Each run appends its
``call`` argument and its process id to ``CLUSTER_RUN_LOG`` (one line, one write, so processes
sharing the file do not interleave), and takes ``CLUSTER_WORK_SECONDS``, so
that calls are in flight when a node dies.
"""

from __future__ import annotations

import os

import anyio

from toolbus import tool_service

QUEUES = os.environ.get("CLUSTER_QUEUES", "cluster")
RUN_LOG = os.environ.get("CLUSTER_RUN_LOG", os.devnull)
WORK_SECONDS = float(os.environ.get("CLUSTER_WORK_SECONDS", "0.05"))


def record_run(call: str) -> None:
    descriptor = os.open(RUN_LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(descriptor, f"{call} {os.getpid()}\n".encode())
    finally:
        os.close(descriptor)


@tool_service(
    "stored",
    request_queue=f"persistent://test/request/{QUEUES}-stored",
    response_queue=f"persistent://test/response/{QUEUES}-stored",
)
async def stored(call: str) -> str:
    record_run(call)
    await anyio.sleep(WORK_SECONDS)
    return f"{call} done"


@tool_service(
    "plain",
    request_queue=f"non-persistent://test/request/{QUEUES}-plain",
    response_queue=f"non-persistent://test/response/{QUEUES}-plain",
)
async def plain(call: str) -> str:
    record_run(call)
    await anyio.sleep(WORK_SECONDS)
    return f"{call} done"
