"""``toolbus a2a serve`` put together: :func:`serve_a2a`.

The door's parts, for the life of the command: the bus; the door's state store
(``state`` in ``toolbus.toml``, sealed with ``seal-keys``; memory otherwise)
holding its tasks (a :class:`~toolbus.application.tasks.TaskBook`, door
``a2a``) and its records; a :class:`~toolbus.application.tasks.TaskRunner`
that runs them and goes on with those another replica left; the task event
stream on the bus; the agents announced on the bus, one
:class:`~toolbus.application.agent.client.AgentClient` per agent; and uvicorn
serving a2a-sdk's transports.
"""

from __future__ import annotations

import logging
import socket
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import uvicorn
from a2a.server.request_handlers import RequestHandler
from a2a.types import AgentCard
from anyio.abc import TaskGroup, TaskStatus

from toolbus._internal.web_server import CommandServer, bind, cannot_listen
from toolbus.application.agent.client import AgentClient
from toolbus.application.identity.bearer import Authenticator
from toolbus.application.sealing.doors import shared_url
from toolbus.application.tasks import TaskBook, TaskEnd, TaskProgress, TaskRunner
from toolbus.cli.plugin_api import redact_url
from toolbus.domain.calls.input_requests import ElicitationAnswer
from toolbus.domain.errors import ToolbusError
from toolbus.domain.tasks import Task, TaskError, TaskSettings, parse_task_settings
from toolbus.plugins import connect
from toolbus.ports import Bus
from toolbus.runtime import door_state, seal_keys_of
from toolbus.settings import Settings, load_settings
from toolbus_a2a.serving.agents import AgentDirectory, ServedAgent
from toolbus_a2a.serving.app import a2a_app
from toolbus_a2a.serving.cards import agent_card
from toolbus_a2a.serving.events import BusTaskEventStream
from toolbus_a2a.serving.handler import TASK_DOOR, AgentHandler
from toolbus_a2a.serving.records import A2ARecords
from toolbus_a2a.serving.runs import RunParts, resume_work
from toolbus_a2a.serving.settings import DOOR_NAME, door_authenticator

log = logging.getLogger("toolbus.a2a")


class ListenError(ToolbusError):
    """The door's address cannot be listened on."""


@dataclass(frozen=True, slots=True)
class ServeOptions:
    """What ``toolbus a2a serve`` is told."""

    broker: str | None = None
    host: str = "127.0.0.1"
    port: int = 8100
    #: The URL callers reach the door at (cards name it); default http://HOST:PORT.
    public_url: str | None = None
    #: Serve only these agents (default: every agent announced).
    agents: Collection[str] = field(default_factory=tuple)
    #: The agent whose card is served at the root too.
    default: str | None = None
    #: Seconds to wait at start for the agents to announce themselves.
    discover: float = 3.0


class A2ADoor:
    """The door's parts once started; builds each agent's handler on demand."""

    def __init__(
        self,
        bus: Bus,
        book: TaskBook,
        runner: TaskRunner,
        records: A2ARecords,
        events: BusTaskEventStream,
        directory: AgentDirectory,
        tasks: TaskSettings,
        public_url: str,
        authenticator: Authenticator,
        group: TaskGroup,
    ) -> None:
        self.bus = bus
        self.book = book
        self.runner = runner
        self.records = records
        self.events = events
        self.directory = directory
        self.tasks = tasks
        self.public_url = public_url
        self.authenticator = authenticator
        #: The door's own tasks: each agent's client is held open by one of them.
        self._group = group
        self._clients: dict[tuple[str, str], AgentClient] = {}
        self._lock = anyio.Lock()

    async def parts(self, agent: ServedAgent) -> RunParts:
        """What ``agent``'s runs use: its client on the bus (one per agent's queues)."""
        queues = (agent.request_queue, agent.response_queue)
        async with self._lock:
            client = self._clients.get(queues)
            if client is None:
                client = AgentClient(self.bus, request_queue=queues[0], response_queue=queues[1])
                # Opened in a task of the door's, not the caller's: a client's task group
                # entered in a request's or a task's work would be left in that task's
                # cancel scopes when it ends.
                await self._group.start(_held_open, client)
                self._clients[queues] = client
        return RunParts(
            client,
            self.book,
            self.records,
            self.events,
            timeout=self.tasks.call_timeout,
            ttl=self.tasks.ttl,
        )

    async def handler_for(self, agent: ServedAgent) -> tuple[RequestHandler, AgentCard]:
        jwt = self.authenticator.jwt
        card = agent_card(
            agent,
            self.public_url,
            tokens=jwt is not None,
            issuer=None if jwt is None else jwt.issuer,
        )
        handler = AgentHandler(agent, card, await self.parts(agent), self.runner)
        return handler, card

    async def withdraw(self, task: Task) -> None:
        """A task that will not go on (cancelled, or its door stopped): a form its run's
        tool waited for is dismissed (``cancel``), so that the run does not wait on for an
        answer nobody will send."""
        if not task.input_requests:
            return
        record = await self.records.task(task.id)
        agent = self.directory.get(task.tool)
        if record is None or agent is None:
            return
        parts = await self.parts(agent)
        dismissed = dict.fromkeys(task.input_requests, ElicitationAnswer("cancel"))
        await parts.agents.send_answers(record.request_id, task.owner, dismissed)

    async def resume(self, task: Task, progress: TaskProgress) -> TaskEnd:
        """Go on with a task another replica left: follow its agent's run."""
        agent = self.directory.get(task.tool)
        if agent is None:
            agent = await self.directory.wait_for_name(task.tool, timeout=10.0)
        if agent is None:
            return TaskEnd(
                error=TaskError(
                    type="unavailable",
                    message=f"agent {task.tool!r} no longer answers; send the message again",
                )
            )
        return await resume_work(await self.parts(agent))(task, progress)


async def _held_open(
    client: AgentClient, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
) -> None:
    """Open ``client``, and keep it open until the door's tasks are cancelled."""
    async with client:
        task_status.started()
        await anyio.sleep_forever()


@asynccontextmanager
async def started_door(
    settings: Settings, options: ServeOptions, public_url: str, authenticator: Authenticator
) -> AsyncIterator[A2ADoor]:
    """The door's parts, started; see the module docs."""
    base = settings.file_path.parent if settings.file_path is not None else Path.cwd()
    tasks = parse_task_settings(settings.file.get("tasks"))
    keys = seal_keys_of(settings, base, door=DOOR_NAME, url=settings.state)
    async with AsyncExitStack() as stack:
        bus = await connect(settings.broker, settings.broker_options)
        stack.push_async_callback(bus.close)
        store = await stack.enter_async_context(
            door_state(settings.state, settings.state_options, keys, door=DOOR_NAME)
        )
        book = TaskBook(store)
        runner = await stack.enter_async_context(
            TaskRunner(book, shared=shared_url(settings.state), lease=tasks.lease)
        )
        events = await stack.enter_async_context(BusTaskEventStream(bus))
        directory = AgentDirectory(bus, only=options.agents)
        group = await stack.enter_async_context(anyio.create_task_group())
        stack.callback(group.cancel_scope.cancel)
        await group.start(directory.follow)
        door = A2ADoor(
            bus,
            book,
            runner,
            A2ARecords(store, ttl=tasks.ttl),
            events,
            directory,
            tasks,
            public_url,
            authenticator,
            group,
        )
        runner.resumes(TASK_DOOR, door.resume)
        runner.on_abandoned = door.withdraw
        try:
            yield door
        finally:
            with anyio.CancelScope(shield=True):
                # Told to stop: its running tasks go to another replica (or fail) now.
                await runner.leave()


async def _serve_http(
    door: A2ADoor,
    options: ServeOptions,
    listener: socket.socket,
    *,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    app = a2a_app(
        door.directory.agents,
        door.handler_for,
        door.authenticator,
        public_url=door.public_url,
        default=options.default,
    )
    web = CommandServer(uvicorn.Config(app, log_level="warning", lifespan="off"))

    async def serve() -> None:
        # Shielded, and stopped through should_exit: cancelling uvicorn mid-serve would
        # skip its shutdown (open streams).
        with anyio.CancelScope(shield=True):
            await web.serve(sockets=[listener])

    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(serve)
            task_status.started()
            try:
                await anyio.sleep_forever()
            finally:
                web.shut_down()
    finally:
        listener.close()


async def serve_a2a(options: ServeOptions, until: Callable[[], Awaitable[object]]) -> None:
    """Serve until ``until()`` returns (the command's stop signal)."""
    settings = load_settings(options.broker)
    authenticator = door_authenticator(settings)
    try:
        listener = bind(options.host, options.port)
    except OSError as exc:
        raise ListenError(cannot_listen(options.host, options.port, exc)) from None
    # Port 0 listens on a free port: the cards name the one taken.
    port = listener.getsockname()[1]
    public_url = options.public_url or f"http://{options.host}:{port}"
    async with authenticator, started_door(settings, options, public_url, authenticator) as door:
        found = await door.directory.wait_for(max(1, len(options.agents)), timeout=options.discover)
        async with anyio.create_task_group() as tasks:
            await tasks.start(_serve_http, door, options, listener)
            names = ", ".join(sorted(found)) or "none yet (they are served once they announce)"
            print(
                f"serving A2A on {public_url} via {redact_url(settings.broker)}; agents: {names}",
                file=sys.stderr,
                flush=True,
            )
            await until()
            tasks.cancel_scope.cancel()
