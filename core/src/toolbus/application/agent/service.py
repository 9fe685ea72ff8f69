"""Agents on the bus: a service that answers agent requests, and a client that asks.

:class:`AgentService` reads :class:`~toolbus.domain.agent.wire.AgentRequest` bodies
from a request queue as a *competing consumer* (every replica subscribes with
the same group, so each request is answered once and agents scale out like
tool services) and publishes the :class:`~toolbus.domain.agent.wire.AgentEvent`
stream to the response queue, each event carrying the request's ``id``
property. :class:`AgentClient` sends requests and yields their events.

A run that suspends while a call waits for a person
(:mod:`~toolbus.application.agent.suspension`) frees its worker at once; the
replica that goes on with it later sends its events to the same response
queue under the same id (:meth:`AgentService.events_of`), taking one of the
service's places (:attr:`AgentService.places`) meanwhile, so that the asker
gets the rest of its answer from whichever replica.

A run whose tool asks its user (an ``input`` event) waits for the answers on
:data:`~toolbus.domain.agent.wire.ANSWERS_QUEUE`, which every replica hears:
the asker sends them there (:meth:`AgentClient.ask`'s ``answer``), naming the
request and its user, and the replica running it takes them.
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Mapping
from contextlib import aclosing
from types import TracebackType

import anyio
from anyio.abc import TaskGroup, TaskStatus
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from toolbus.application.agent.answering import AskUser
from toolbus.application.agent.checkpoints import Checkpoint
from toolbus.application.agent.loop import AgentLoop, AgentResult, Emit
from toolbus.domain.agent.wire import (
    ANSWERS_QUEUE,
    DEFAULT_REQUEST_QUEUE,
    DEFAULT_RESPONSE_QUEUE,
    AgentAnswers,
    AgentEvent,
    AgentRequest,
    BadAgentRequest,
    EventError,
    decode_answers,
    decode_event,
    decode_request,
    encode_answers,
    encode_event,
    encode_request,
)
from toolbus.domain.calls.input_requests import (
    InputAnswer,
    InputAsk,
    answer_from_json,
    answer_to_json,
)
from toolbus.domain.errors import StateStoreUnavailable
from toolbus.ports import Bus, Delivery, Subscription

log = logging.getLogger("toolbus.agent")

#: The competing-consumer group every agent replica joins.
AGENT_GROUP = "toolbus-agent"
DEFAULT_CONCURRENCY = 8
DEFAULT_DRAIN_TIMEOUT = 30.0


class AgentService:
    """Serves agent requests from ``request_queue`` with ``loop``, ``concurrency`` at a time.

    A request that cannot be read (bad JSON, no question) is answered with one
    ``error`` event of type ``bad-request``; one without an ``id`` property has
    nowhere to be answered and is logged and dropped. Nothing a request does
    stops the service.

    :meth:`stop` (SIGTERM in ``toolbus agent serve``) stops taking requests and
    lets those in flight finish for up to ``drain_timeout`` seconds.

    ``concurrency`` bounds the runs in progress here: those of requests, and those
    of suspended runs that go on here (:attr:`places`).
    """

    def __init__(
        self,
        bus: Bus,
        loop: AgentLoop,
        *,
        request_queue: str = DEFAULT_REQUEST_QUEUE,
        response_queue: str = DEFAULT_RESPONSE_QUEUE,
        concurrency: int = DEFAULT_CONCURRENCY,
        group: str = AGENT_GROUP,
        drain_timeout: float = DEFAULT_DRAIN_TIMEOUT,
        answers_queue: str = ANSWERS_QUEUE,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, not {concurrency}")
        self.bus = bus
        self.loop = loop
        self.request_queue = request_queue
        self.response_queue = response_queue
        self.answers_queue = answers_queue
        #: Runs waiting for their user's answers here: request id -> (user, where to put them).
        self._asked: dict[str, tuple[str, MemoryObjectSendStream[AgentAnswers]]] = {}
        self.concurrency = concurrency
        self.group = group
        self.drain_timeout = drain_timeout
        #: Requests answered so far (finished, whatever the outcome, or suspended).
        self.answered = 0
        #: One place per run in progress: a request read takes one, and so does a
        #: suspended run going on here (a request read meanwhile waits for its place).
        self.places = anyio.CapacityLimiter(concurrency)
        self._stopping = False
        self._busy = 0
        self._reading: set[anyio.CancelScope] = set()
        # Made by serve(): an event belongs to the event loop it is made in.
        self._stop_requested: anyio.Event | None = None
        self._drained: anyio.Event | None = None

    def stop(self) -> None:
        """Stop taking requests; ``serve`` returns once requests in flight are answered
        (or ``drain_timeout`` passed: then they are cancelled)."""
        self._stopping = True
        if self._stop_requested is not None:
            self._stop_requested.set()
        for reading in list(self._reading):
            reading.cancel()  # only workers waiting for a request; busy ones finish theirs
        if self._busy == 0 and self._drained is not None:
            self._drained.set()

    async def serve(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Serve until :meth:`stop` (which drains) or cancellation (which does not).

        Signals ``task_status`` once subscribed.
        """
        self._stopping = False
        stop_requested = self._stop_requested = anyio.Event()
        drained = self._drained = anyio.Event()
        answers = await self.bus.subscribe(self.answers_queue)
        subscription = await self.bus.subscribe(self.request_queue, group=self.group)
        requests = aiter(subscription)
        try:
            async with anyio.create_task_group() as workers:
                workers.start_soon(self._take_answers, answers)
                for _ in range(self.concurrency):
                    workers.start_soon(self._work, requests)
                task_status.started()
                await stop_requested.wait()
                with anyio.move_on_after(self.drain_timeout) as draining:
                    await drained.wait()
                if draining.cancelled_caught:
                    log.warning(
                        "%d agent request(s) still running after %g s were cancelled",
                        self._busy,
                        self.drain_timeout,
                    )
                workers.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                await subscription.close()
                await answers.close()

    async def _take_answers(self, answers: Subscription) -> None:
        """Hand each run waiting here the answers for it (from its own user only)."""
        async for delivery in answers:
            try:
                given = decode_answers(delivery.body)
            except BadAgentRequest as exc:
                log.warning("unreadable answers on %s dropped: %s", self.answers_queue, exc)
                continue
            waiting = self._asked.get(given.request_id)
            if waiting is None:
                continue  # a run on another replica, or one that ended
            user, into = waiting
            if given.user != user:
                log.warning(
                    "answers for agent request %s from a user it does not run for were dropped",
                    given.request_id,
                )
                continue
            into.send_nowait(given)

    def _asking_user_of(self, request_id: str, request: AgentRequest) -> AskUser | None:
        """How the run of ``request`` asks its user, if its asker answers forms."""
        if "elicitation" not in (request.answers or ()):
            return None
        return self._asking(request_id, request.user)

    def _asking(self, request_id: str, user: str) -> AskUser:
        """How the run of request ``request_id`` asks its user: it waits for their answers."""

        async def ask_user(asked: InputAsk) -> dict[str, InputAnswer] | None:
            send: MemoryObjectSendStream[AgentAnswers]
            receive: MemoryObjectReceiveStream[AgentAnswers]
            send, receive = anyio.create_memory_object_stream(math.inf)
            self._asked[request_id] = (user, send)
            try:
                with receive:
                    given = await receive.receive()
            finally:
                self._asked.pop(request_id, None)
                send.close()
            answers: dict[str, InputAnswer] = {}
            for key, request in asked.requests.items():
                if key in given.responses:
                    try:
                        answers[key] = answer_from_json(request, given.responses[key])
                    except ValueError:
                        continue  # asked again
            return answers

        return ask_user

    async def _work(self, requests: AsyncIterator[Delivery]) -> None:
        while not self._stopping:
            with anyio.CancelScope() as reading:
                self._reading.add(reading)
                try:
                    delivery = await anext(requests)
                except StopAsyncIteration:
                    self.stop()  # the subscription ended: nothing more will come
                    return
                finally:
                    self._reading.discard(reading)
            if reading.cancelled_caught:
                return  # stopped while waiting; the read is cancel-safe, nothing is lost
            self._busy += 1
            try:
                async with self.places:  # shared with the suspended runs going on here
                    await self.handle(delivery)
            finally:
                with anyio.CancelScope(shield=True):
                    await delivery.ack()
                self._finished_one()

    def _finished_one(self) -> None:
        self._busy -= 1
        if self._stopping and self._busy == 0 and self._drained is not None:
            self._drained.set()

    def events_of(self, request_id: str) -> Emit:
        """Where the events of request ``request_id`` go: the response queue, with its id."""

        async def emit(event: AgentEvent) -> None:
            await self.bus.publish(self.response_queue, encode_event(event), {"id": request_id})

        return emit

    async def handle(self, delivery: Delivery) -> None:
        """Answer one request delivery (never raises for anything the request did)."""
        request_id = delivery.properties.get("id")
        if not request_id:
            log.warning("agent request without an 'id' property on %s dropped", self.request_queue)
            return
        emit = self.events_of(request_id)
        try:
            request = decode_request(delivery.body)
        except BadAgentRequest as exc:
            await emit(failure_event("bad-request", str(exc)))
            return
        try:
            await self._reporting(
                request_id,
                emit,
                self.loop.run(
                    request,
                    emit=emit,
                    request_id=request_id,
                    ask_user=self._asking_user_of(request_id, request),
                ),
            )
        finally:
            self.answered += 1

    async def resume(self, saved: Checkpoint) -> AgentResult | None:
        """Go on here with a suspended run from ``saved``, in one of this service's places,
        its events to the response queue under its request id; how it ended (``None``
        when the bus or a tool host failed under it: its asker was told)."""
        request_id = saved.request_id
        emit = self.events_of(request_id)
        request = saved.request
        ask_user = None if request is None else self._asking_user_of(request_id, request)
        async with self.places:
            return await self._reporting(
                request_id, emit, self.loop.resume(saved, emit=emit, ask_user=ask_user)
            )

    async def _reporting(
        self, request_id: str, emit: Emit, run: Awaitable[AgentResult]
    ) -> AgentResult | None:
        """The run's result; ``None`` when it failed as a whole (the asker is told)."""
        try:
            return await run
        except StateStoreUnavailable as exc:
            # A passing outage, not a fault of this process: one line, no traceback.
            log.warning("agent request %s failed: the state store is away: %s", request_id, exc)
            await self._report(
                emit,
                request_id,
                failure_event(
                    "unavailable",
                    "the state store the agent keeps conversations and runs in cannot be "
                    "reached now; ask again in a few seconds",
                ),
            )
            return None
        except Exception as exc:
            # The bus or a tool host failed under the loop. The type only: a
            # message may quote arguments or configuration.
            log.exception("agent request %s failed", request_id)
            await self._report(
                emit,
                request_id,
                failure_event(
                    "agent-failed",
                    f"the agent failed ({type(exc).__name__}); see the agent service's log",
                ),
            )
            return None

    async def _report(self, emit: Emit, request_id: str, event: AgentEvent) -> None:
        try:
            await emit(event)
        except Exception:
            log.warning("could not report the failure of agent request %s", request_id)


def failure_event(kind: str, message: str) -> AgentEvent:
    """The one ``error`` event that ends a request which failed as a whole."""
    return AgentEvent(
        chunk_type="error",
        content=message,
        end_of_dialog=True,
        end_of_stream=True,
        error=EventError(type=kind, message=message),
    )


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
