"""pytest fixtures for toolbus users, registered through the ``pytest11`` entry point.

* ``toolbus``: a :class:`~toolbus.testing.kit.ToolTestKit` on a private in-memory
  broker; services it serves stop when the test ends.
* ``memory_bus``: a bare connection to a private in-memory broker.

Both are async fixtures: mark the test with ``@pytest.mark.anyio``.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack

import pytest

from toolbus.memory import MemoryBus, connect
from toolbus.testing.kit import ToolTestKit


@pytest.fixture
async def toolbus() -> AsyncIterator[ToolTestKit]:
    async with AsyncExitStack() as stack:
        yield await ToolTestKit.open(stack)


@pytest.fixture
async def memory_bus() -> AsyncIterator[MemoryBus]:
    bus = await connect(f"memory://test-{uuid.uuid4().hex}")
    try:
        yield bus
    finally:
        await bus.close()
