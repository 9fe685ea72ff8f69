# One job: ToolServiceClient, calling a tool service over the bus (a call, a stream,
# retries, signing, tracing). Waiting for answers is _responses, retrying retries; the
# per-call path is kept in one place on purpose: its cost is measured (performance.md).
"""Calling tool services over a bus.

One response subscription per response queue per client (use one client per
process), made *before* the first request goes out so that no early answer is
missed. Every call registers a waiter under a fresh UUID ``id``; the listener
routes answers to waiters and ignores ids it does not know (other clients share
the response queue). Waiters are removed in ``finally`` blocks, so timeouts and
cancellation never leak them: :attr:`ToolServiceClient.pending` returns to 0.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import anyio
from anyio.abc import TaskGroup

from toolbus.application.calls._responses import DeadlineAlarm, ResponseListener, Waiter
from toolbus.application.calls.metrics import ToolbusMetrics, default_metrics
from toolbus.application.calls.retries import RetryPolicy, error_type_of
from toolbus.application.identity.signing import CallSigner
from toolbus.application.tracing import conventions
from toolbus.application.tracing import propagation as tracing
from toolbus.domain.calls import wire
from toolbus.domain.calls.arguments import AppliedOptions
from toolbus.domain.calls.input_requests import InputReply
from toolbus.domain.config.descriptors import ServiceDescriptor
from toolbus.domain.errors import ToolTimeout
from toolbus.domain.identity import PROP_CALL_TOKEN
from toolbus.ports import Bus, PushBus

#: The call id the next tool call sends, inside :func:`sending_as`.
_given_call_id: ContextVar[str | None] = ContextVar("toolbus_call_id", default=None)


@contextmanager
def sending_as(call_id: str) -> Iterator[None]:
    """The tool call made in the block sends ``call_id`` rather than a fresh one.

    For a caller that may send one call again after a process died (an agent
    run resumed on another replica): the service sees the same call, and on a
    persistent queue answers it from memory instead of running it twice. One
    call per block: an id names one call.
    """
    token = _given_call_id.set(call_id)
    try:
        yield
    finally:
        _given_call_id.reset(token)


#: The answers the next request brings a tool that asked, inside :func:`sending_input`.
_given_input: ContextVar[InputReply | None] = ContextVar("toolbus_input_reply", default=None)


@contextmanager
def sending_input(reply: InputReply | None) -> Iterator[None]:
    """The tool call made in the block brings ``reply`` to a tool that asked (see
    :mod:`toolbus.application.calls.relaying`, which makes these calls)."""
    token = _given_input.set(reply)
    try:
        yield
    finally:
        _given_input.reset(token)


log = logging.getLogger("toolbus.client")

DEFAULT_TIMEOUT = 60.0
#: Of the calls answered inside their publish (a host answering inline, Python 3.12+),
#: every this many yields to the event loop once: with none, a task calling in a loop
#: would keep every other task from running; with every one, a call costs a sixth more.
YIELD_EVERY = 16


@dataclass(frozen=True, slots=True)
class CallResult:
    """What one tool call came to, on the calling side.

    From :meth:`ToolServiceClient.invoke`: the observation (chunks joined) and
    the service's per-response ``after_execution``, ``None`` if it set none.
    From :meth:`~toolbus.application.calls.tools.Tools.invoke`, which knows the
    tool: ``after_execution`` is always ``"suspend"`` or ``"terminate"`` (the
    service's override, else the tool's setting), ``applied`` says which
    argument keys the tool's options set, and ``trace_id`` is the W3C trace
    the call ran under.
    """

    observation: str
    after_execution: str | None = None
    #: Which argument keys the tool's options set (names only, never values).
    applied: AppliedOptions | None = None
    #: The W3C trace id the call ran under ("" when not known).
    trace_id: str = ""
    #: What the call cost, as the service said (its ``cost`` property); ``None``: it did not.
    cost: float | None = None


class ToolServiceClient:
    """Calls tool services. Use as ``async with ToolServiceClient(bus) as client``."""

    def __init__(
        self,
        bus: Bus,
        *,
        default_timeout: float = DEFAULT_TIMEOUT,
        clock: Callable[[], float] = time.time,
        signer: CallSigner | None = None,
        retry: RetryPolicy | None = None,
        metrics: ToolbusMetrics | None = None,
    ) -> None:
        self.bus = bus
        #: Signs a call token onto every request, for services that verify callers.
        self.signer = signer
        self.default_timeout = default_timeout
        self.clock = clock
        #: Sends failed calls again where that is safe (see RetryPolicy); off by default.
        self.retry = retry
        self._metrics = metrics
        self._listeners: dict[str, ResponseListener] = {}
        self._opening: dict[str, anyio.Lock] = {}
        #: Response listeners being made for calls that could not wait for them.
        self._made: dict[str, asyncio.Future[ResponseListener]] = {}
        self._task_group: TaskGroup | None = None
        # Call ids are UUID-shaped: a random (version 4) UUID per client whose last
        # 12 hex digits count calls. Unique across processes like uuid4(), at a
        # fraction of its cost on the per-call path.
        self._id_prefix = str(uuid.uuid4())[:24]
        self._call_count = itertools.count(int(uuid.uuid4().hex[:12], 16))
        self._alarm = DeadlineAlarm(self._listeners)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._deadline_millis = -1
        self._deadline = ""
        #: Calls answered inside their publish since one of them yielded (YIELD_EVERY).
        self._answered_at_once = 0

    async def __aenter__(self) -> ToolServiceClient:
        self._loop = asyncio.get_running_loop()
        self._task_group = await anyio.create_task_group().__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._task_group is not None
        with anyio.CancelScope(shield=True):
            for listener in self._listeners.values():
                await listener.close()
        self._alarm.cancel()
        self._task_group.cancel_scope.cancel()
        # The caller's own exception is not handed to the task group: it would come
        # back wrapped in an ExceptionGroup. It propagates unchanged instead.
        await self._task_group.__aexit__(None, None, None)
        self._task_group = None
        self._listeners.clear()

    @property
    def pending(self) -> int:
        """Calls waiting for an answer right now (0 when idle: nothing leaks)."""
        return sum(len(listener.waiters) for listener in self._listeners.values())

    async def _listener(self, response_queue: str) -> ResponseListener:
        listener = self._listeners.get(response_queue)
        if listener is not None:
            return listener
        if self._task_group is None:
            raise RuntimeError(
                "use the client as 'async with ToolServiceClient(bus) as client:' before calling"
            )
        lock = self._opening.setdefault(response_queue, anyio.Lock())
        async with lock:
            listener = self._listeners.get(response_queue)
            if listener is None:
                listener = ResponseListener(response_queue)
                if isinstance(self.bus, PushBus):
                    listener.source = await self.bus.listen(response_queue, listener)
                if listener.source is None:
                    subscription = await self.bus.subscribe(response_queue)
                    listener.source = subscription
                    self._task_group.start_soon(listener.pump, subscription)
                self._listeners[response_queue] = listener
        return listener

    async def _listener_within(
        self, response_queue: str, limit: float, label: str
    ) -> tuple[ResponseListener, float]:
        """The response listener for a call that may take ``limit`` seconds, and the time
        the call has left.

        Making it asks the broker for a subscription, which waits while the broker
        is away: the call's deadline bounds that wait too (:class:`ToolTimeout`),
        and the subscription is made all the same, in the background, for the
        calls after it.
        """
        listener = self._listeners.get(response_queue)
        if listener is not None or self._task_group is None:
            # Made already, or not in ``async with`` (which _listener says).
            return listener or await self._listener(response_queue), limit
        loop = asyncio.get_running_loop()
        started = loop.time()
        made = self._made.get(response_queue)
        if made is None:
            made = self._made[response_queue] = loop.create_future()
            # Its failure is each waiting call's; with none left, nobody's.
            made.add_done_callback(lambda done: done.cancelled() or done.exception())
            self._task_group.start_soon(self._make_listener, response_queue, made)
        try:
            listener = await asyncio.wait_for(asyncio.shield(made), limit)
        except TimeoutError:
            raise ToolTimeout(label, limit) from None
        return listener, max(0.0, limit - (loop.time() - started))

    async def _make_listener(
        self, response_queue: str, made: asyncio.Future[ResponseListener]
    ) -> None:
        try:
            made.set_result(await self._listener(response_queue))
        except Exception as exc:
            made.set_exception(exc)
        finally:
            self._made.pop(response_queue, None)
            if not made.done():
                made.cancel()  # the client closed meanwhile

    def _register(
        self,
        listener: ResponseListener,
        timeout: float,
        properties: Mapping[str, str] | None,
        *,
        watch: bool,
        call_id: str | None = None,
        deadline: str | None = None,
    ) -> tuple[str, Waiter, dict[str, str]]:
        """A waiter for a call that has ``timeout`` seconds left; ``deadline`` is its
        deadline property when the call began before now (default: now + ``timeout``)."""
        if call_id is None:
            call_id = self._new_call_id()
        props = {
            wire.PROP_ID: call_id,
            wire.PROP_DEADLINE: deadline or self._deadline_text(timeout),
        }
        if properties:
            props.update(properties)
        if wire.PROP_TRACEPARENT not in props:
            # Inside a trace (a tool calling a tool, an agent session): continue it.
            # Outside one, send none; the service starts the trace, as W3C says.
            parent = tracing.current_trace()
            if parent is not None:
                props.update(tracing.as_properties(tracing.outgoing(parent)))
        # Looked up once per client: each get_running_loop() asks the OS for the pid.
        loop = self._loop or asyncio.get_running_loop()
        if watch:
            waiter = Waiter(loop, loop.time() + timeout)
            alarm = self._alarm
            if waiter.deadline < alarm.at:
                alarm.set(loop, waiter.deadline)
        else:
            waiter = Waiter(loop)
        listener.waiters[call_id] = waiter
        return call_id, waiter, props

    def _new_call_id(self) -> str:
        return f"{self._id_prefix}{next(self._call_count) & 0xFFFFFFFFFFFF:012x}"

    def _deadline_text(self, timeout: float) -> str:
        """The deadline property: Unix seconds to the millisecond.

        Calls made within the same millisecond share one string: formatting a
        float is a good part of the cost of starting a call.
        """
        millis = int((self.clock() + timeout) * 1000)
        if millis != self._deadline_millis:
            self._deadline_millis = millis
            self._deadline = f"{millis // 1000}.{millis % 1000:03d}"
        return self._deadline

    async def invoke(
        self,
        *,
        service: str | ServiceDescriptor | None = None,
        request_queue: str = "",
        response_queue: str = "",
        user: str = "",
        config: Mapping[str, Any] | None = None,
        arguments: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        properties: Mapping[str, str] | None = None,
        generation: str | None = None,
    ) -> CallResult:
        """Call a tool service; its observation (chunks joined) and after-execution.

        ``service`` is the service's descriptor (its queues and id), or its id
        beside ``request_queue`` and ``response_queue``; the id names it in
        errors and spans. ``generation`` is the TrustGraph request generation
        to write, ``"2.1"`` (with ``user``) or ``"2.4"`` (without), or a 2.x
        release; by default the descriptor's (``trustgraph-wire``), else the
        newest. toolbus services read both.
        """
        waiter = await self._start(
            service, request_queue, response_queue, user, config, arguments, timeout, properties,
            generation,
        )  # fmt: skip
        return CallResult("".join(waiter.chunks), waiter.after_execution, cost=waiter.cost)

    async def call(
        self,
        *,
        service: str | ServiceDescriptor | None = None,
        request_queue: str = "",
        response_queue: str = "",
        user: str = "",
        config: Mapping[str, Any] | None = None,
        arguments: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        properties: Mapping[str, str] | None = None,
        generation: str | None = None,
    ) -> str:
        """Call a tool service and return its observation (stream chunks joined)."""
        waiter = await self._start(
            service, request_queue, response_queue, user, config, arguments, timeout, properties,
            generation,
        )  # fmt: skip
        return "".join(waiter.chunks)

    def _start(
        self,
        service: str | ServiceDescriptor | None,
        request_queue: str,
        response_queue: str,
        user: str,
        config: Mapping[str, Any] | None,
        arguments: Mapping[str, Any] | None,
        timeout: float | None,
        properties: Mapping[str, str] | None,
        generation: str | None,
    ) -> Coroutine[Any, Any, Waiter]:
        """The exchange of one call, as a CLIENT span when an OpenTelemetry SDK records.

        A plain function handing back the coroutine, so that the per-call path
        (no SDK) costs no extra coroutine frame and no span machinery. The call's
        arguments travel down positionally, not as one command object: building
        and reading even a named tuple per call measured 2-3% of the client's
        CPU per in-memory call (docs/performance.md).
        """
        # _route, inline: this is the per-call path.
        if isinstance(service, ServiceDescriptor):
            name: str | None = service.id
            request_queue = request_queue or service.request_queue
            response_queue = response_queue or service.response_queue
            generation = generation or service.generation
        elif request_queue and response_queue:
            name = service
        else:
            request_queue, response_queue, name = _route(service, request_queue, response_queue)
        generation = _generation(generation)
        label = name or request_queue
        if tracing.recording():
            return self._traced(
                request_queue, response_queue, user, config, arguments, timeout, label, name,
                properties, generation,
            )  # fmt: skip
        if self.retry is not None:
            return self._exchange_retrying(
                request_queue, response_queue, user, config, arguments, timeout, label, properties,
                generation,
            )  # fmt: skip
        return self._exchange(
            request_queue, response_queue, user, config, arguments, timeout, label, properties,
            generation, _given_call_id.get(),
        )  # fmt: skip

    async def _traced(
        self,
        request_queue: str,
        response_queue: str,
        user: str,
        config: Mapping[str, Any] | None,
        arguments: Mapping[str, Any] | None,
        timeout: float | None,
        label: str,
        name: str | None,
        properties: Mapping[str, str] | None,
        generation: str,
    ) -> Waiter:
        # The service's span is a child of this one: the span's own id goes on the wire.
        with tracing.hop(
            "client", properties, conventions.client_call, label, name, request_queue
        ) as context:
            if context is not None:
                properties = {**(properties or {}), **tracing.as_properties(context)}
            return await self._exchange_retrying(
                request_queue, response_queue, user, config, arguments, timeout, label, properties,
                generation,
            )  # fmt: skip

    async def _exchange_retrying(
        self,
        request_queue: str,
        response_queue: str,
        user: str,
        config: Mapping[str, Any] | None,
        arguments: Mapping[str, Any] | None,
        timeout: float | None,
        label: str,
        properties: Mapping[str, str] | None,
        generation: str,
    ) -> Waiter:
        """:meth:`_exchange`, sent again under the retry policy where that is safe.

        Every try carries the same call id, so a service on a persistent queue
        that did run the call answers again from memory instead of running it twice.
        A retry says which try it is (property ``attempt``), so that its fresh
        call token is not taken for a replay of the first one's.
        """
        policy = self.retry
        given = _given_call_id.get()
        if policy is None or not policy.applies_to(request_queue):
            return await self._exchange(
                request_queue, response_queue, user, config, arguments, timeout, label, properties,
                generation, given,
            )  # fmt: skip
        limit = self.default_timeout if timeout is None else timeout
        loop = asyncio.get_running_loop()
        end = loop.time() + limit
        call_id = given or self._new_call_id()
        metrics = self._metrics or default_metrics()

        def retried(error: BaseException) -> None:
            log.info("call %s of %s failed (%s); sending it again", call_id, label, error)
            metrics.call_retried(label, error_type_of(error))

        waiter: Waiter | None = None
        async for attempt in policy.retrying(limit, retried):
            with attempt:
                left = end - loop.time()
                if left <= 0:
                    raise ToolTimeout(label, limit)
                number = attempt.retry_state.attempt_number
                sent = (
                    properties
                    if number == 1
                    else {**(properties or {}), wire.PROP_ATTEMPT: str(number)}
                )
                waiter = await self._exchange(
                    request_queue, response_queue, user, config, arguments, left, label,
                    sent, generation, call_id,
                )  # fmt: skip
        assert waiter is not None
        return waiter

    async def _exchange(
        self,
        request_queue: str,
        response_queue: str,
        user: str,
        config: Mapping[str, Any] | None,
        arguments: Mapping[str, Any] | None,
        timeout: float | None,
        label: str,
        properties: Mapping[str, str] | None,
        generation: str,
        call_id: str | None = None,
    ) -> Waiter:
        """Send one request and wait for its whole answer; the waiter holds it.

        ``label`` names the service in a timeout's message.
        """
        limit = self.default_timeout if timeout is None else timeout
        listener = self._listeners.get(response_queue)
        left, deadline = limit, None
        if listener is None:
            deadline = self._deadline_text(limit)  # as of the call's start
            listener, left = await self._listener_within(response_queue, limit, label)
        body = wire.encode_request(user, config, arguments, generation, _given_input.get())
        call_id, waiter, props = self._register(
            listener, left, properties, watch=True, call_id=call_id, deadline=deadline
        )
        if user and generation == wire.GENERATION_2_4:
            props[wire.PROP_USER] = user
        if self.signer is not None:
            props[PROP_CALL_TOKEN] = self.signer.sign(
                call_id=call_id, audience=label, user=user, body=body, properties=props
            )
        task = asyncio.current_task(waiter.loop)
        try:
            waiter.sending = task
            try:
                await self.bus.publish(request_queue, body, props)
            finally:
                waiter.sending = None
            if waiter.finished:  # answered inside the publish: see YIELD_EVERY
                self._answered_at_once += 1
                if self._answered_at_once >= YIELD_EVERY:
                    self._answered_at_once = 0
                    await asyncio.sleep(0)
            while not waiter.finished:
                await waiter.wait()
        except asyncio.CancelledError:
            if waiter.interrupted and task is not None and task.uncancel() == 0:
                raise ToolTimeout(label, limit) from None
            raise
        finally:
            listener.waiters.pop(call_id, None)
        if waiter.timed_out:
            raise ToolTimeout(label, limit)
        if waiter.error is not None:
            raise waiter.error
        return waiter

    async def stream(
        self,
        *,
        service: str | ServiceDescriptor | None = None,
        request_queue: str = "",
        response_queue: str = "",
        user: str = "",
        config: Mapping[str, Any] | None = None,
        arguments: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        properties: Mapping[str, str] | None = None,
        generation: str | None = None,
    ) -> AsyncIterator[str]:
        """Call a tool service and yield its chunks as they arrive (empty ones skipped).

        ``service`` as for :meth:`invoke`. ``timeout`` bounds the whole stream.
        Raises the service's error, if any, after the chunks that came before it.
        """
        request_queue, response_queue, name = _route(service, request_queue, response_queue)
        if isinstance(service, ServiceDescriptor):
            generation = generation or service.generation
        generation = _generation(generation)
        label = name or request_queue
        limit = self.default_timeout if timeout is None else timeout
        deadline_text = self._deadline_text(limit)  # as of the stream's start
        listener, left = await self._listener_within(response_queue, limit, label)
        body = wire.encode_request(user, config, arguments, generation, _given_input.get())
        call_id, waiter, props = self._register(
            listener, left, properties, watch=False, deadline=deadline_text
        )
        if user and generation == wire.GENERATION_2_4:
            props[wire.PROP_USER] = user
        if self.signer is not None:
            props[PROP_CALL_TOKEN] = self.signer.sign(
                call_id=call_id, audience=label, user=user, body=body, properties=props
            )
        deadline = asyncio.get_running_loop().time() + left
        try:
            async with asyncio.timeout_at(deadline):
                await self.bus.publish(request_queue, body, props)
        except TimeoutError:
            listener.waiters.pop(call_id, None)
            raise ToolTimeout(label, limit) from None
        except BaseException:
            listener.waiters.pop(call_id, None)
            raise
        try:
            if waiter.finished:  # answered inside the publish: see YIELD_EVERY
                await self._yield_now_and_then()
            while True:
                while waiter.chunks:
                    yield waiter.chunks.popleft()
                if waiter.finished:
                    break
                try:
                    async with asyncio.timeout_at(deadline):
                        await waiter.wait()
                except TimeoutError:
                    raise ToolTimeout(label, limit) from None
        finally:
            listener.waiters.pop(call_id, None)
        if waiter.error is not None:
            raise waiter.error

    async def _yield_now_and_then(self) -> None:
        """A stream answered inside its publish: every YIELD_EVERY-th yields once."""
        self._answered_at_once += 1
        if self._answered_at_once >= YIELD_EVERY:
            self._answered_at_once = 0
            await asyncio.sleep(0)

    async def close(self) -> None:
        """Close every response subscription (also done on leaving ``async with``)."""
        for listener in list(self._listeners.values()):
            await listener.close()


def _route(
    service: str | ServiceDescriptor | None, request_queue: str, response_queue: str
) -> tuple[str, str, str | None]:
    """The request and response queues of a call, and the service's id if known."""
    if isinstance(service, ServiceDescriptor):
        return (
            request_queue or service.request_queue,
            response_queue or service.response_queue,
            service.id,
        )
    if not (request_queue and response_queue):
        raise TypeError(
            "say which service to call: pass service=<its ServiceDescriptor>, or "
            "request_queue= and response_queue="
        )
    return request_queue, response_queue, service


def _generation(requested: str | None) -> str:
    """The request generation to write: the newest unless asked; a release names its own."""
    if requested is None:
        return wire.NEWEST_GENERATION
    if requested == wire.GENERATION_2_4 or requested == wire.GENERATION_2_1:
        return requested
    return wire.generation_of(requested)
