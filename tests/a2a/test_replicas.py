"""Two ``toolbus a2a serve`` replicas on one sealed NATS key-value store, behind a real
round-robin load balancer (haproxy): a task started through one is read, followed, listed
and answered through the other, and when the replica running a task dies, the other one
goes on with it to its end."""

from __future__ import annotations

import signal
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path
from urllib.parse import urlsplit

import anyio
import httpx
import pytest
from a2a.types import AgentCard, GetTaskRequest, ListTasksRequest, TaskState
from google.protobuf.json_format import ParseDict

from tests.a2a.conftest import AGENT, A2ASite, a2a_client, calling, message
from tests.a2a.test_serving import followed, later
from tests.scaling.balancer import round_robin
from tests.support.model_server import ModelServer
from toolbus.application.tasks import TaskBook
from toolbus.runtime import door_state, seal_keys_of
from toolbus_a2a.serving.settings import DOOR_NAME

pytestmark = [pytest.mark.slow, pytest.mark.anyio]


@pytest.fixture(scope="module")
async def site(
    a2a_nats: str, model_server: ModelServer, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[A2ASite]:
    site = A2ASite(tmp_path_factory.mktemp("a2a-replicas"), a2a_nats, state=a2a_nats)
    async with site.tools(), site.agent(model_server):
        yield site


async def card_behind(replica: str, balancer: str) -> AgentCard:
    """The agent's card as a replica serves it, its interfaces at ``balancer`` (what
    ``--public-url`` says in a deployment whose balancer's address is known beforehand)."""
    async with httpx.AsyncClient() as http:
        response = await http.get(f"{replica}/agents/{AGENT}/.well-known/agent-card.json")
        response.raise_for_status()
    card = ParseDict(response.json(), AgentCard(), ignore_unknown_fields=True)
    for interface in card.supported_interfaces:
        interface.url = balancer + urlsplit(interface.url).path
    return card


async def test_a_task_is_shared_by_the_replicas_and_outlives_the_one_running_it(
    site: A2ASite, model_server: ModelServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The doors' task book, read here to see when a replica takes a task over.
    monkeypatch.setenv("SEAL_KEY", site.environment["SEAL_KEY"])
    keys = seal_keys_of({"seal-keys": ["env:SEAL_KEY"]}, tmp_path, door=DOOR_NAME, url=site.state)
    async with AsyncExitStack() as stack:
        book = TaskBook(
            await stack.enter_async_context(door_state(site.state, None, keys, door=DOOR_NAME))
        )
        left, left_url = await stack.enter_async_context(site.door())
        right, right_url = await stack.enter_async_context(site.door())
        balancer = stack.enter_context(round_robin([left.port, right.port], tmp_path / "lb"))
        card = await card_behind(left_url, balancer)
        client = await stack.enter_async_context(a2a_client(card, "alice"))
        streaming = await stack.enter_async_context(a2a_client(card, "alice", streaming=True))

        # Through the balancer: each request reaches the next replica.
        key = uuid.uuid4().hex
        model_server.play(calling("hold", key, "Held and done."))
        [response] = [r async for r in client.send_message(later(message("Hold on.")))]
        task_id = response.task.id
        await site.reached(key)
        working = [await client.get_task(GetTaskRequest(id=task_id)) for _ in range(2)]

        async def let_go() -> None:
            site.let_go(key)

        seen = await followed(streaming, task_id, let_go)
        done = [await client.get_task(GetTaskRequest(id=task_id)) for _ in range(2)]
        listed = [await client.list_tasks(ListTasksRequest()) for _ in range(2)]

        # The replica running a task dies; the other one takes it over (once the dead
        # one's lease ran out) and follows the agent's run to its end.
        key = uuid.uuid4().hex
        model_server.play(calling("hold", key, "Survived."))
        left_client = await stack.enter_async_context(a2a_client(left_url, "alice"))
        right_streaming = await stack.enter_async_context(
            a2a_client(right_url, "alice", streaming=True)
        )
        [orphan] = [r async for r in left_client.send_message(later(message("Hold on.")))]
        await site.reached(key)
        running = await book.get(orphan.task.id)
        assert running is not None
        left.process.send_signal(signal.SIGKILL)
        await left.process.wait()
        with anyio.fail_after(60):
            async for now in book.changes(orphan.task.id):
                if now is not None and now.runner != running.runner:
                    break

        async def let_go_again() -> None:
            site.let_go(key)

        after = await followed(right_streaming, orphan.task.id, let_go_again)
        survived = await client.get_task(GetTaskRequest(id=orphan.task.id))

    assert [t.status.state for t in working] == [TaskState.TASK_STATE_WORKING] * 2
    assert seen[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    assert [t.status.state for t in done] == [TaskState.TASK_STATE_COMPLETED] * 2
    assert [[p.text for a in t.artifacts for p in a.parts] for t in done] == [
        ["Held and done."]
    ] * 2
    assert [[t.id for t in page.tasks] for page in listed] == [[task_id]] * 2
    assert after[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    assert survived.status.state == TaskState.TASK_STATE_COMPLETED
    assert [p.text for a in survived.artifacts for p in a.parts] == ["Survived."]
