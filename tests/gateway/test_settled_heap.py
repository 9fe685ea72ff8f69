"""A command's HTTP server sets aside what it built at start-up from the cycle collector."""

from __future__ import annotations

import gc
import socket

import anyio
import pytest
import uvicorn
from starlette.applications import Starlette

from toolbus._internal.web_server import CommandServer, bind

pytestmark = pytest.mark.anyio


class _Watched(CommandServer):
    """Says when it has started: uvicorn itself only sets a flag."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ready = anyio.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        self.ready.set()


async def test_a_started_server_has_frozen_its_start_up_heap() -> None:
    gc.unfreeze()
    server = _Watched(uvicorn.Config(Starlette(), lifespan="off", log_level="warning"))
    try:
        with bind("127.0.0.1", 0) as listener:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(server.serve, [listener])
                await server.ready.wait()
                frozen = gc.get_freeze_count()
                server.shut_down()
        assert frozen > 1000, "the imports and the app alone are thousands of objects"
    finally:
        gc.unfreeze()
