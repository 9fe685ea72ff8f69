"""A tool service for the process-level tests, configured through the environment.

``toolbus serve replica:service`` with ``REPLICA_SERVICE_ID``,
``REPLICA_REQUEST_QUEUE``, ``REPLICA_RESPONSE_QUEUE`` and ``REPLICA_MODE``:
``hang`` says so on stderr and never answers (a replica about to be killed),
``answer`` answers with its name (``REPLICA_NAME``).
"""

from __future__ import annotations

import os
import sys
from typing import Any

import anyio

from toolbus import tool_service


@tool_service(
    os.environ.get("REPLICA_SERVICE_ID", "replica"),
    request_queue=os.environ.get("REPLICA_REQUEST_QUEUE", "persistent://test/request/replica"),
    response_queue=os.environ.get("REPLICA_RESPONSE_QUEUE", "non-persistent://test/response/rep"),
)
async def service(user: str, config: dict[str, Any], arguments: dict[str, Any]) -> str:
    if os.environ.get("REPLICA_MODE") == "hang":
        print("CALL STARTED", file=sys.stderr, flush=True)
        await anyio.sleep_forever()
    return f"answered by {os.environ.get('REPLICA_NAME', 'a replica')}"
