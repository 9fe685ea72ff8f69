"""Asking agents on the bus: :class:`AgentClient`.

It sends :class:`~toolbus.domain.agent.wire.AgentRequest` bodies to an agent
service's request queue and yields the events that come back on the response
queue, routed by the request's ``id``; it follows a run another process asked
for (:meth:`AgentClient.follow`), and answers what a run's tools ask its user
(:meth:`AgentClient.send_answers`, on
:data:`~toolbus.domain.agent.wire.ANSWERS_QUEUE`).
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from contextlib import aclosing
from types import TracebackType

import anyio
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from toolbus.application.agent.answering import AskUser
from toolbus.domain.agent.wire import (
    ANSWERS_QUEUE,
    DEFAULT_REQUEST_QUEUE,
    DEFAULT_RESPONSE_QUEUE,
    AgentAnswers,
    AgentEvent,
    AgentRequest,
    decode_event,
    encode_answers,
    encode_request,
)
from toolbus.domain.calls.input_requests import (
    InputAnswer,
    InputAsk,
    answer_to_json,
)
from toolbus.ports import Bus, Subscription

log = logging.getLogger("toolbus.agent")


class AgentClient:
    """Asks agent services: one response subscription, events routed by request id.

    >>> async with AgentClient(bus) as agents:
    ...     async for event in agents.ask(AgentRequest(question="...", user="alice")):
    ...         print(event.chunk_type, event.content)
    """

    def __init__(
        self,
        bus: Bus,
        *,
        request_queue: str = DEFAULT_REQUEST_QUEUE,
        response_queue: str = DEFAULT_RESPONSE_QUEUE,
        answers_queue: str = ANSWERS_QUEUE,
    ) -> None:
        self.bus = bus
        self.request_queue = request_queue
        self.response_queue = response_queue
        self.answers_queue = answers_queue
        self._waiting: dict[str, MemoryObjectSendStream[AgentEvent]] = {}
        self._group: TaskGroup | None = None
        self._subscription: Subscription | None = None

    @property
    def pending(self) -> int:
        """Requests still waiting for their last event."""
        return len(self._waiting)

    async def __aenter__(self) -> AgentClient:
        self._subscription = await self.bus.subscribe(self.response_queue)
        self._group = anyio.create_task_group()
        await self._group.__aenter__()
        self._group.start_soon(self._route, self._subscription)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._group is not None and self._subscription is not None
        self._group.cancel_scope.cancel()
        await self._group.__aexit__(exc_type, exc, tb)
        await self._subscription.close()

    async def _route(self, subscription: Subscription) -> None:
        async for delivery in subscription:
            waiting = self._waiting.get(delivery.properties.get("id", ""))
            if waiting is None:
                continue  # another client's request
            try:
                event = decode_event(delivery.body)
            except ValueError:
                log.warning("unreadable agent event on %s dropped", self.response_queue)
                continue
            waiting.send_nowait(event)

    async def ask(
        self,
        request: AgentRequest,
        *,
        timeout: float | None = None,
        request_id: str | None = None,
        answer: AskUser | None = None,
    ) -> AsyncGenerator[AgentEvent, None]:
        """Send ``request``; yield its events up to and including the last.

        ``timeout`` bounds the wait for each event (a ``TimeoutError`` naming the
        agent queue when it passes); ``None`` waits as long as the agent runs. After an
        ``approval`` or ``waiting`` event (a call waits for a person), the next event is
        waited for until the approval it names expires, and ``timeout`` beyond.
        ``answer`` answers what a tool asks the user (each ``input`` event, after it
        is yielded), as the request's user; without it such a run waits for answers
        sent otherwise (:meth:`send_answers`), until its time limit.
        """
        request_id = request_id or str(uuid.uuid4())
        answered = request.answers or []
        if answer is not None and "elicitation" not in answered:
            request = request.model_copy(update={"answers": [*answered, "elicitation"]})
        body = encode_request(request)
        answering = None if answer is None else (request.user, answer)
        async with aclosing(self._events(request_id, timeout, body, answering)) as events:
            async for event in events:
                yield event

    async def follow(
        self,
        request_id: str,
        *,
        timeout: float | None = None,
        user: str = "",
        answer: AskUser | None = None,
    ) -> AsyncIterator[AgentEvent]:
        """Yield the events of request ``request_id``, sent earlier (by this process or
        another), from now on up to and including the last: how a door goes on with a
        run another replica started. Events sent before are not seen again. ``answer``
        answers what its tools ask from now on, as ``user`` (the request's), as in
        :meth:`ask`."""
        answering = None if answer is None else (user, answer)
        async with aclosing(self._events(request_id, timeout, None, answering)) as events:
            async for event in events:
                yield event

    async def _events(
        self,
        request_id: str,
        timeout: float | None,
        body: bytes | None,
        answering: tuple[str, AskUser] | None,
    ) -> AsyncGenerator[AgentEvent]:
        """The events of ``request_id``, after sending ``body`` (when given); ``answering``:
        the request's user and who answers what its tools ask that user."""
        if self._group is None:
            raise RuntimeError("use AgentClient in 'async with' before asking")
        send: MemoryObjectSendStream[AgentEvent]
        receive: MemoryObjectReceiveStream[AgentEvent]
        send, receive = anyio.create_memory_object_stream(math.inf)
        self._waiting[request_id] = send
        try:
            if body is not None:
                await self.bus.publish(self.request_queue, body, {"id": request_id})
            wait = math.inf if timeout is None else timeout
            while True:
                with anyio.move_on_after(wait) as waited:
                    event = await receive.receive()
                if waited.cancelled_caught:
                    raise TimeoutError(
                        f"no event from the agent on {self.request_queue!r} for {wait:g} s; "
                        "check that an agent service is running on this broker"
                    )
                yield event
                if event.last:
                    return
                wait = math.inf if timeout is None else timeout
                if event.approval is not None:
                    # A person decides first: as long as the approval may wait for them.
                    wait += max(0.0, event.approval.expires_at - time.time())
                if event.chunk_type == "input" and event.input_requests and answering:
                    user, answer = answering
                    asked = InputAsk.from_json({"requests": event.input_requests})
                    answers = await answer(asked) or {}
                    await self.send_answers(request_id, user, answers)
        finally:
            del self._waiting[request_id]
            send.close()
            receive.close()

    async def send_answers(
        self, request_id: str, user: str, answers: Mapping[str, InputAnswer]
    ) -> None:
        """Answer what a tool of request ``request_id`` (run for ``user``) asks."""
        given = AgentAnswers(
            request_id=request_id,
            user=user,
            responses={key: answer_to_json(value) for key, value in answers.items()},
        )
        await self.bus.publish(self.answers_queue, encode_answers(given), {"id": request_id})
