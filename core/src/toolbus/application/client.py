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
import logging
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping
from types import TracebackType
from typing import Any

import anyio
from anyio.abc import TaskGroup

from toolbus.domain import wire
from toolbus.domain.errors import ToolCallError, ToolServiceError, ToolTimeout, WireError, error_for
from toolbus.ports import Bus, Subscription

log = logging.getLogger("toolbus.client")

DEFAULT_TIMEOUT = 60.0


class _Waiter:
    """Collects the answer(s) to one call."""

    __slots__ = ("chunks", "error", "finished", "wakeup")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.chunks: deque[str] = deque()
        self.error: ToolCallError | None = None
        self.finished = False
        self.wakeup: asyncio.Future[None] = loop.create_future()

    def deliver(self, response: wire.ToolResponse) -> None:
        if self.finished:
            return
        if response.error_type is not None:
            self.error = error_for(response.error_type, response.error_message)
            self.finished = True
        else:
            if response.response:
                self.chunks.append(response.response)
            self.finished = response.end_of_stream
        self._wake()

    def fail(self, error: ToolCallError) -> None:
        if not self.finished:
            self.error = error
            self.finished = True
            self._wake()

    def _wake(self) -> None:
        if not self.wakeup.done():
            self.wakeup.set_result(None)

    async def wait(self) -> None:
        await self.wakeup
        self.wakeup = asyncio.get_running_loop().create_future()


class _ResponseListener:
    """The one subscription on a response queue, and the calls waiting on it."""

    def __init__(self, queue: str, subscription: Subscription) -> None:
        self.queue = queue
        self.subscription = subscription
        self.waiters: dict[str, _Waiter] = {}

    async def run(self) -> None:
        waiters = self.waiters
        try:
            async for delivery in self.subscription:
                waiter = waiters.get(delivery.properties.get(wire.PROP_ID, ""))
                if waiter is not None:
                    try:
                        response = wire.decode_response(delivery.body)
                    except WireError as exc:
                        waiter.fail(ToolServiceError(f"unreadable answer from the service: {exc}"))
                    else:
                        waiter.deliver(response)
                await delivery.ack()
        finally:
            for waiter in list(waiters.values()):
                waiter.fail(ToolServiceError(f"the response subscription on {self.queue} ended"))


class ToolServiceClient:
    """Calls tool services. Use as ``async with ToolServiceClient(bus) as client``."""

    def __init__(
        self,
        bus: Bus,
        *,
        default_timeout: float = DEFAULT_TIMEOUT,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.bus = bus
        self.default_timeout = default_timeout
        self.clock = clock
        self._listeners: dict[str, _ResponseListener] = {}
        self._opening: dict[str, anyio.Lock] = {}
        self._task_group: TaskGroup | None = None

    async def __aenter__(self) -> ToolServiceClient:
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
                await listener.subscription.close()
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

    async def _listener(self, response_queue: str) -> _ResponseListener:
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
                subscription = await self.bus.subscribe(response_queue)
                listener = _ResponseListener(response_queue, subscription)
                self._listeners[response_queue] = listener
                self._task_group.start_soon(listener.run)
        return listener

    async def _send(
        self,
        listener: _ResponseListener,
        request_queue: str,
        body: bytes,
        timeout: float,
        properties: Mapping[str, str] | None,
    ) -> tuple[str, _Waiter]:
        call_id = str(uuid.uuid4())
        waiter = _Waiter(asyncio.get_running_loop())
        props = {wire.PROP_ID: call_id, wire.PROP_DEADLINE: f"{self.clock() + timeout:.3f}"}
        if properties:
            props.update(properties)
        listener.waiters[call_id] = waiter
        try:
            await self.bus.publish(request_queue, body, props)
        except BaseException:
            del listener.waiters[call_id]
            raise
        return call_id, waiter

    async def call(
        self,
        *,
        request_queue: str,
        response_queue: str,
        user: str = "",
        config: Mapping[str, Any] | None = None,
        arguments: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        service: str | None = None,
        properties: Mapping[str, str] | None = None,
    ) -> str:
        """Call a tool service and return its observation (stream chunks joined)."""
        limit = self.default_timeout if timeout is None else timeout
        listener = await self._listener(response_queue)
        body = wire.encode_request(user, config, arguments)
        call_id, waiter = await self._send(listener, request_queue, body, limit, properties)
        try:
            async with asyncio.timeout(limit):
                while not waiter.finished:
                    await waiter.wait()
        except TimeoutError:
            raise ToolTimeout(service or request_queue, limit) from None
        finally:
            listener.waiters.pop(call_id, None)
        if waiter.error is not None:
            raise waiter.error
        return "".join(waiter.chunks)

    async def stream(
        self,
        *,
        request_queue: str,
        response_queue: str,
        user: str = "",
        config: Mapping[str, Any] | None = None,
        arguments: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        service: str | None = None,
        properties: Mapping[str, str] | None = None,
    ) -> AsyncIterator[str]:
        """Call a tool service and yield its chunks as they arrive (empty ones skipped).

        ``timeout`` bounds the whole stream. Raises the service's error, if any,
        after the chunks that came before it.
        """
        limit = self.default_timeout if timeout is None else timeout
        listener = await self._listener(response_queue)
        body = wire.encode_request(user, config, arguments)
        call_id, waiter = await self._send(listener, request_queue, body, limit, properties)
        deadline = asyncio.get_running_loop().time() + limit
        try:
            while True:
                while waiter.chunks:
                    yield waiter.chunks.popleft()
                if waiter.finished:
                    break
                try:
                    async with asyncio.timeout_at(deadline):
                        await waiter.wait()
                except TimeoutError:
                    raise ToolTimeout(service or request_queue, limit) from None
        finally:
            listener.waiters.pop(call_id, None)
        if waiter.error is not None:
            raise waiter.error

    async def close(self) -> None:
        """Close every response subscription (also done on leaving ``async with``)."""
        for listener in list(self._listeners.values()):
            await listener.subscription.close()
