"""Agents on the bus: :class:`AgentService` answers agent requests.

It reads :class:`~toolbus.domain.agent.wire.AgentRequest` bodies
from a request queue as a *competing consumer* (every replica subscribes with
the same group, so each request is answered once and agents scale out like
tool services) and publishes the :class:`~toolbus.domain.agent.wire.AgentEvent`
stream to the response queue, each event carrying the request's ``id``
property. :class:`~toolbus.application.agent.client.AgentClient` sends requests
and yields their events.

A run that suspends while a call waits for a person
(:mod:`~toolbus.application.agent.suspension`) frees its worker at once; the
replica that goes on with it later sends its events to the same response
queue under the same id (:meth:`AgentService.events_of`), taking one of the
service's places (:attr:`AgentService.places`) meanwhile, so that the asker
gets the rest of its answer from whichever replica.

A run whose tool asks its user (an ``input`` event) waits for the answers on
:data:`~toolbus.domain.agent.wire.ANSWERS_QUEUE`, which every replica hears:
the asker sends them there (``AgentClient.ask``'s ``answer``), naming the
request and its user, and the replica running it takes them.
"""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncIterator, Awaitable

import anyio
from anyio.abc import TaskStatus
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
    decode_request,
    encode_event,
)
from toolbus.domain.calls.input_requests import (
    InputAnswer,
    InputAsk,
    answer_from_json,
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
