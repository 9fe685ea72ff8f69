"""One connection per state store URL in a process, counted by the server (``CLIENT LIST``).

Every part of a process that keeps state (a door's held sessions and approvals,
the agent's run checkpoints) opens the store through ``shared_state``; the
connections are named (the ``name`` option) so that the server tells them apart.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path

import anyio
import pytest
import redis.asyncio

from tests.doors.processes import door_process
from tests.redis.server import RedisServer
from tests.support.model_server import ModelServer
from toolbus.application.sealing import new_seal_jwk
from toolbus.runtime import shared_state

pytestmark = pytest.mark.anyio


@pytest.fixture
async def server_clients(redis_server: RedisServer) -> AsyncIterator[redis.asyncio.Redis]:
    """The server's own view of who is connected, through a connection of the test's."""
    observer = redis.asyncio.Redis(host="127.0.0.1", port=redis_server.port)
    yield observer
    await observer.aclose()


async def named(observer: redis.asyncio.Redis, name: str) -> int:
    """How many connections named ``name`` the server has now."""
    return sum(1 for client in await observer.client_list() if client.get("name") == name)


async def until_named(observer: redis.asyncio.Redis, name: str, count: int) -> None:
    """Wait until the server counts ``count`` connections named ``name`` (a closed
    connection leaves the server's list when the server has read its end)."""
    with anyio.fail_after(10):
        while await named(observer, name) != count:  # noqa: ASYNC110 - the server's count
            await anyio.sleep(0.02)


async def test_parts_of_one_process_share_one_connection_and_the_last_closes_it(
    redis_server: RedisServer, server_clients: redis.asyncio.Redis
) -> None:
    name = f"shared-{uuid.uuid4().hex[:8]}"
    options = {"name": name}
    async with shared_state(redis_server.url, options) as sessions:
        async with shared_state(redis_server.url, options) as approvals:
            assert approvals is sessions
            await approvals.put("approvals", "a", b"1")
            assert (await sessions.get("approvals", "a")) is not None
            assert await named(server_clients, name) == 1
        # one part left: the other still uses the connection
        assert (await sessions.get("approvals", "a")) is not None
        assert await named(server_clients, name) == 1
    await until_named(server_clients, name, 0)


async def test_parts_starting_at_once_share_the_connection_being_made(
    redis_server: RedisServer, server_clients: redis.asyncio.Redis
) -> None:
    name = f"together-{uuid.uuid4().hex[:8]}"
    got: list[object] = []
    all_in, counted = anyio.Event(), anyio.Event()

    async def part() -> None:
        async with shared_state(redis_server.url, {"name": name}) as store:
            got.append(store)
            if len(got) == 5:
                all_in.set()
            await counted.wait()

    async with anyio.create_task_group() as parts:
        for _ in range(5):
            parts.start_soon(part)
        await all_in.wait()
        assert await named(server_clients, name) == 1
        counted.set()
    assert len({id(store) for store in got}) == 1
    await until_named(server_clients, name, 0)


async def test_other_options_are_another_connection(
    redis_server: RedisServer, server_clients: redis.asyncio.Redis
) -> None:
    first, second = (f"{tag}-{uuid.uuid4().hex[:8]}" for tag in ("first", "second"))
    async with AsyncExitStack() as stack:
        one = await stack.enter_async_context(shared_state(redis_server.url, {"name": first}))
        two = await stack.enter_async_context(shared_state(redis_server.url, {"name": second}))
        assert one is not two
        assert (await named(server_clients, first), await named(server_clients, second)) == (1, 1)


async def test_a_store_that_cannot_be_reached_is_not_kept_for_the_next_part() -> None:
    url = "redis://127.0.0.1:1?timeout=0.5"  # nothing listens on port 1
    for _ in range(2):
        with pytest.raises(Exception, match="cannot connect to Redis"):
            async with shared_state(url):
                pass


@pytest.mark.slow
async def test_an_agent_service_with_approvals_keeps_one_connection_to_its_store(
    redis_server: RedisServer,
    server_clients: redis.asyncio.Redis,
    model_server: ModelServer,
    tmp_path: Path,
) -> None:
    """Its conversations and run checkpoints, and its door's approvals, in one store."""
    from tests.nats.server import NatsServer

    name = f"agent-{uuid.uuid4().hex[:8]}"
    suffix = uuid.uuid4().hex[:8]
    (tmp_path / "toolbus.toml").write_text(
        f'state = "{redis_server.url}"\nseal-keys = ["seal.jwk"]\n\n'
        f'[state-options]\nname = "{name}"\n\n'
        '[permissions]\nfallback = ["default"]\n\n'
        '[approvals]\napprovers = ["ops"]\ntools = ["tell-joke"]\n'
    )
    (tmp_path / "seal.jwk").write_text(json.dumps(new_seal_jwk("seal-test")), encoding="utf-8")
    (tmp_path / "nats").mkdir()
    nats = NatsServer(tmp_path / "nats")
    with nats.running():
        argv = ["agent", "serve", "--broker", nats.url, "--llm", model_server.openai_url()]
        argv += ["--request-queue", f"non-persistent://tg/request/agent-{suffix}"]
        argv += ["--response-queue", f"non-persistent://tg/response/agent-{suffix}"]
        async with door_process(argv, cwd=tmp_path, environment={}, ready="serving agent"):
            assert await named(server_clients, name) == 1
        await until_named(server_clients, name, 0)
