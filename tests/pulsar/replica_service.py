"""A tool service for the killed-replica test, run by ``toolbus serve`` in its own process.

Its queues and id come from the environment, so that the test can give each run
fresh ones. It announces each call on stdout, then never answers: the test kills
the process while the call is in flight.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import anyio

from toolbus.application.calls.service import tool_service

STARTED = "call started"


@tool_service(
    os.environ.get("REPLICA_SERVICE_ID", "replica"),
    request_queue=os.environ.get("REPLICA_REQUEST_QUEUE", "persistent://test/request/replica"),
    response_queue=os.environ.get("REPLICA_RESPONSE_QUEUE", "non-persistent://test/response/r"),
)
async def hangs(user: str, config: dict[str, Any], arguments: dict[str, Any]) -> str:
    print(STARTED, flush=True)
    sys.stdout.flush()
    await anyio.sleep_forever()
    raise AssertionError("unreachable")
