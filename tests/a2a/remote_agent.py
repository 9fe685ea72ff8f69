"""A remote A2A agent written with a2a-sdk, for ``toolbus serve a2a``: run as a process.

``python -m tests.a2a.remote_agent PORT TOKEN`` serves on 127.0.0.1:PORT (0: a free
port, printed as ``listening on PORT``), requires ``Authorization: Bearer TOKEN``,
and answers a message by the first word of its text:

* ``echo TEXT``: completes with TEXT in two streamed chunks, the last the whole;
* ``ask``: asks for input (input-required, "Which city?"); a message answering that
  task completes it with "booked for <answer>";
* ``fail``: fails, saying "the booking system is down";
* ``crash``: raises before answering (a2a-sdk answers with a protocol error);
* ``wait``: works without end (until cancelled).
"""

from __future__ import annotations

import socket
import sys

import anyio
import uvicorn
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes, create_rest_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Part,
    Task,
    TaskState,
    TaskStatus,
)
from starlette.applications import Starlette
from starlette.responses import JSONResponse


class Booking(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id and context.context_id and context.message
        text = context.get_user_input()
        if text == "crash":
            raise RuntimeError("the booking agent crashed")
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        if context.current_task is None:
            await event_queue.enqueue_event(
                Task(
                    id=context.task_id,
                    context_id=context.context_id,
                    status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED),
                    history=[context.message],
                )
            )
        elif context.current_task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED:
            await updater.add_artifact([Part(text=f"booked for {text}")], name="booking")
            await updater.complete()
            return
        await updater.start_work()
        word, _, rest = text.partition(" ")
        if word == "echo":
            middle = len(rest) // 2
            await updater.add_artifact([Part(text=rest[:middle])], artifact_id="a", name="echo")
            await updater.add_artifact(
                [Part(text=rest[middle:])], artifact_id="a", name="echo", append=True
            )
            await updater.complete()
        elif word == "wait":
            await anyio.sleep_forever()
        elif word == "ask":
            await updater.requires_input(updater.new_agent_message([Part(text="Which city?")]))
        else:
            await updater.failed(
                updater.new_agent_message([Part(text="the booking system is down")])
            )

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id and context.context_id
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


def main() -> None:
    port, token = int(sys.argv[1]), sys.argv[2]
    listener = socket.socket()
    listener.bind(("127.0.0.1", port))
    port = listener.getsockname()[1]
    base = f"http://127.0.0.1:{port}"
    card = AgentCard(
        name="Booking Agent",
        description="Books trips.",
        version="1.0",
        supported_interfaces=[
            AgentInterface(url=f"{base}/rpc", protocol_binding="JSONRPC", protocol_version="1.0"),
            AgentInterface(
                url=f"{base}/rest", protocol_binding="HTTP+JSON", protocol_version="1.0"
            ),
        ],
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[
            AgentSkill(id="book", name="book", description="Book a trip to a city", tags=["travel"])
        ],
    )
    handler = DefaultRequestHandler(
        agent_executor=Booking(), task_store=InMemoryTaskStore(), agent_card=card
    )
    app = Starlette(
        routes=[
            *create_agent_card_routes(card),
            *create_jsonrpc_routes(handler, "/rpc"),
            *create_rest_routes(handler, path_prefix="/rest"),
        ]
    )

    async def guarded(scope, receive, send):  # type: ignore[no-untyped-def]
        headers = dict(scope.get("headers") or [])
        public = scope["type"] != "http" or scope["path"].endswith("agent-card.json")
        if not public and headers.get(b"authorization") != f"Bearer {token}".encode():
            await JSONResponse({"error": "unauthenticated"}, status_code=401)(scope, receive, send)
            return
        await app(scope, receive, send)

    print(f"listening on {port}", flush=True)
    server = uvicorn.Server(uvicorn.Config(guarded, log_level="warning"))
    server.run(sockets=[listener])


if __name__ == "__main__":
    main()
