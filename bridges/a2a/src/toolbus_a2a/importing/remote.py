"""A remote A2A agent as a tool service: :class:`RemoteAgent` (``toolbus serve a2a URL``).

The agent's card is read once at start (a2a-sdk's card resolver), and the
agent is served on the bus as **one tool**, named
``sanitize_toolname(f"{toolset}_{agent}")``, that sends it a message: A2A has
no way to ask a given skill, so one tool per skill would be tools that all do
the same. The tool's description is the agent's, with its skills listed, so a
model knows what to ask. Its arguments:

* ``message`` (required): what to send the agent;
* ``context_id``: go on with a conversation an earlier answer named;
* ``task_id``: answer a task that asked for input (an earlier answer says so).

A call sends the message over the transport the card prefers that a2a-sdk
speaks (JSON-RPC or HTTP+JSON), streaming when the agent streams: the chunks
of the agent's answer go on the bus as the tool's streamed answer. The answer
is the text of the task's artifacts (or of the agent's message); a task that
asks for input answers with its question and the ids to answer it with; a
failed or rejected task is a tool error with the agent's message.

Bearer tokens and headers come from this process's environment, by variable
name (:class:`~toolbus_a2a.importing.address.AgentAddress`), never a flag.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import anyio
import httpx
from a2a.client import (
    A2ACardResolver,
    A2AClientError,
    Client,
    ClientConfig,
    ClientFactory,
)
from a2a.types import (
    AgentCard,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    Task,
    TaskState,
)
from a2a.utils.errors import A2AError
from google.protobuf.json_format import MessageToDict

from toolbus.application.calls.service import ToolService
from toolbus.application.live.announcements import Announcer
from toolbus.domain.calls.naming import sanitize_toolname
from toolbus.domain.errors import (
    BadRequest,
    DeadlineExceeded,
    ToolbusError,
    ToolServiceError,
    Unavailable,
)
from toolbus_a2a.importing.address import AgentAddress

log = logging.getLogger("toolbus.a2a")

#: Seconds a call may take unless told otherwise.
DEFAULT_CALL_TIMEOUT = 120.0
#: Seconds reading the card may take.
DEFAULT_CONNECT_TIMEOUT = 30.0
#: Skills a tool's description lists at most.
LISTED_SKILLS = 20

_WAITING = {TaskState.TASK_STATE_INPUT_REQUIRED, TaskState.TASK_STATE_AUTH_REQUIRED}


class AgentUnavailable(ToolbusError):
    """The remote agent's card could not be read."""


def tool_descriptor(toolset: str, card: AgentCard, groups: Sequence[str] | None) -> dict[str, Any]:
    """The one tool a remote agent is on the bus; see the module docs."""
    skills = "; ".join(
        f"{skill.name}: {' '.join(skill.description.split())}"
        for skill in card.skills[:LISTED_SKILLS]
    )
    description = " ".join(card.description.split()) or f"The A2A agent {card.name}"
    if skills:
        description = f"{description} Skills: {skills}"
    descriptor: dict[str, Any] = {
        "name": sanitize_toolname(f"{toolset}_{card.name}"),
        "description": description,
        "arguments": [
            {"name": "message", "type": "string", "description": f"What to ask {card.name}"},
            {
                "name": "context_id",
                "type": "string",
                "description": "Go on with the conversation an earlier answer named",
                "required": False,
            },
            {
                "name": "task_id",
                "type": "string",
                "description": "Answer the task an earlier answer said waits for input",
                "required": False,
            },
        ],
    }
    if groups is not None:
        descriptor["group"] = list(groups)
    return descriptor


def _text(parts: Sequence[Part]) -> str:
    texts = []
    for part in parts:
        kind = part.WhichOneof("content")
        if kind == "text":
            texts.append(part.text)
        elif kind == "data":
            texts.append(json.dumps(MessageToDict(part)["data"], ensure_ascii=False))
        elif kind == "url":
            texts.append(part.url)
    return "\n".join(texts)


def answer_of(task: Task) -> str:
    """The text of a task's artifacts (or, without any, of its status message)."""
    found = "\n".join(_text(artifact.parts) for artifact in task.artifacts)
    return found or _text(task.status.message.parts)


class _Answer:
    """What a stream has shown so far: the task (as aggregated by the client) or a message."""

    def __init__(self) -> None:
        self.task: Task | None = None
        self.message: Message | None = None

    def tracked(self, task_id: str, context_id: str) -> Task:
        """The task an update is for (a stream need not start with it)."""
        if self.task is None:
            self.task = Task(id=task_id, context_id=context_id)
        return self.task


class RemoteAgentService(ToolService):
    """Serves the remote agent's one tool."""

    def __init__(self, agent: RemoteAgent) -> None:
        self.id = agent.toolset
        self.agent = agent
        super().__init__()

    def announced_tools(self) -> Mapping[str, Mapping[str, Any]]:
        return self.agent.tools

    def announce_with(self, announcer: Announcer) -> None:
        """The card is read once: the tool does not change while the service runs."""

    async def invoke(
        self, user: str, config: dict[str, Any], arguments: dict[str, Any]
    ) -> AsyncIterator[str]:
        async for chunk in self.agent.ask(arguments):
            yield chunk


class RemoteAgent:
    """A remote A2A agent served on the bus as one tool; see the module docs.

    Args:
        toolset: the service id, and the prefix of the tool's name.
        address: where the agent is, and the headers to send it.
        groups: the tool's groups (default: ``default``).
        call_timeout: seconds one call may take.
        connect_timeout: seconds reading the card may take.
    """

    def __init__(
        self,
        toolset: str,
        address: AgentAddress,
        *,
        groups: Sequence[str] | None = None,
        call_timeout: float = DEFAULT_CALL_TIMEOUT,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    ) -> None:
        self.toolset = toolset
        self.address = address
        self.groups = None if groups is None else tuple(groups)
        self.call_timeout = call_timeout
        self.connect_timeout = connect_timeout
        self.service = RemoteAgentService(self)
        self.card: AgentCard | None = None
        self.tools: dict[str, dict[str, Any]] = {}
        self._client: Client | None = None

    @asynccontextmanager
    async def connected(self) -> AsyncIterator[None]:
        """Read the card and hold a client for the block."""
        async with AsyncExitStack() as stack:
            http = await stack.enter_async_context(
                httpx.AsyncClient(
                    headers=dict(self.address.headers),
                    timeout=httpx.Timeout(self.call_timeout, connect=self.connect_timeout),
                )
            )
            try:
                with anyio.fail_after(self.connect_timeout):
                    card = await A2ACardResolver(http, self.address.url).get_agent_card(
                        relative_card_path=self.address.card_path
                    )
            except (A2AClientError, httpx.HTTPError, TimeoutError, ValueError) as exc:
                raise AgentUnavailable(
                    f"cannot read the Agent Card of {self.address.describe()}: "
                    f"{type(exc).__name__}: {exc}; check the URL (and --card-path)"
                ) from None
            self.card = card
            config = ClientConfig(
                httpx_client=http,
                streaming=card.capabilities.streaming,
                supported_protocol_bindings=["JSONRPC", "HTTP+JSON"],
            )
            try:
                self._client = ClientFactory(config).create(card)
            except ValueError as exc:
                raise AgentUnavailable(
                    f"the agent at {self.address.describe()} offers no transport toolbus speaks "
                    f"(JSON-RPC or HTTP+JSON, A2A 1.0): {exc}"
                ) from None
            stack.push_async_callback(self._client.close)
            descriptor = tool_descriptor(self.toolset, card, self.groups)
            self.tools = {descriptor["name"]: descriptor}
            try:
                yield
            finally:
                self._client = None

    async def ask(self, arguments: Mapping[str, Any]) -> AsyncIterator[str]:
        """Send the message ``arguments`` name; yield the answer as it comes."""
        client = self._client
        if client is None:
            raise Unavailable(f"A2A agent {self.toolset!r} is not connected; try again shortly")
        text = arguments.get("message")
        if not isinstance(text, str) or not text.strip():
            raise BadRequest("the argument 'message' must be the text to send the agent")
        message = Message(role=Role.ROLE_USER, message_id=uuid.uuid4().hex, parts=[Part(text=text)])
        for field in ("context_id", "task_id"):
            given = arguments.get(field)
            if given is not None and not isinstance(given, str):
                raise BadRequest(f"the argument {field!r} must be a string")
            if given:
                setattr(message, field, given)
        answer = _Answer()
        streamed = False
        try:
            with anyio.fail_after(self.call_timeout):
                async for response in client.send_message(SendMessageRequest(message=message)):
                    for chunk in self._take(response, answer):
                        streamed = True
                        yield chunk
        except TimeoutError:
            raise DeadlineExceeded(
                f"A2A agent {self.toolset!r} did not answer within {self.call_timeout:g} s"
            ) from None
        except A2AError as exc:
            # The client's own errors, and the protocol errors the agent answered with.
            raise ToolServiceError(f"A2A agent {self.toolset!r} failed: {exc}") from None
        except httpx.HTTPError as exc:
            raise Unavailable(
                f"A2A agent {self.toolset!r} cannot be reached: {type(exc).__name__}"
            ) from None
        final, context = self._final(answer)
        if not streamed:
            yield final + context
        elif answer.task is not None and answer.task.status.state in _WAITING:
            yield "\n" + final + context
        elif context:
            yield context

    def _take(self, response: StreamResponse, answer: _Answer) -> list[str]:
        """Chunks of the answer a stream response brings (artifact text, as it comes)."""
        kind = response.WhichOneof("payload")
        if kind == "task":
            answer.task = response.task
        elif kind == "message":
            answer.message = response.message
        elif kind == "status_update":
            update_ = response.status_update
            task = answer.tracked(update_.task_id, update_.context_id)
            task.status.CopyFrom(update_.status)
        elif kind == "artifact_update":
            update = response.artifact_update
            answer.tracked(update.task_id, update.context_id)
            if answer.task is not None:
                if update.append:
                    for artifact in answer.task.artifacts:
                        if artifact.artifact_id == update.artifact.artifact_id:
                            artifact.parts.extend(update.artifact.parts)
                            break
                    else:
                        answer.task.artifacts.append(update.artifact)
                else:
                    kept = [
                        a
                        for a in answer.task.artifacts
                        if a.artifact_id != update.artifact.artifact_id
                    ]
                    del answer.task.artifacts[:]
                    answer.task.artifacts.extend([*kept, update.artifact])
            if update.append or not update.last_chunk:
                return [_text(update.artifact.parts)]
        return []

    def _final(self, answer: _Answer) -> tuple[str, str]:
        """The observation once the stream ended, and the line naming its context;
        raises for a failed task."""
        if answer.message is not None:
            context = answer.message.context_id
            return _text(answer.message.parts), f"\n(context_id: {context})" if context else ""
        task = answer.task
        if task is None:
            raise ToolServiceError(
                f"A2A agent {self.toolset!r} answered neither a task nor a message"
            )
        state = task.status.state
        said = _text(task.status.message.parts)
        if state in (TaskState.TASK_STATE_FAILED, TaskState.TASK_STATE_REJECTED):
            how = "refused the request" if state == TaskState.TASK_STATE_REJECTED else "failed"
            raise ToolServiceError(f"A2A agent {self.toolset!r} {how}: {said or 'no reason given'}")
        if state == TaskState.TASK_STATE_CANCELED:
            raise ToolServiceError(f"A2A agent {self.toolset!r} cancelled the task: {said}")
        if state in _WAITING:
            return (
                f"The agent needs more input: {said or 'it did not say what'}. Call again with "
                f"task_id={task.id!r} and context_id={task.context_id!r} and the answer as "
                "message.",
                "",
            )
        return answer_of(task), f"\n(context_id: {task.context_id})" if task.context_id else ""
