"""Hosting a tool service on a bus: decode, invoke, answer, ack — and never crash.

Every request gets exactly one outcome. Bad input (not JSON, wrong shape, no
``id``, too large) is answered with a ``bad-request`` error where a reply target
exists, or logged and dropped where it does not; it is acked either way so that
a poison message cannot cause a redelivery storm. A tool that raises answers
with an error and the service goes on. Concurrency is bounded by a semaphore.

Stopping (``stop()``, SIGTERM in the CLI, or cancellation of ``serve``) first
stops taking new requests, then lets calls in flight finish for up to
``drain_timeout`` seconds, then closes the subscription; a call still running
after that is cancelled and, on a persistent queue, goes back to the broker.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
from anyio.abc import TaskStatus

from toolbus.application.service import ToolService
from toolbus.domain import wire
from toolbus.domain.errors import (
    BadRequest,
    DeadlineExceeded,
    ToolCallError,
    WireError,
)
from toolbus.ports import Bus, Delivery

log = logging.getLogger("toolbus.service")

DEFAULT_CONCURRENCY = 64
DEFAULT_MAX_REQUEST_BYTES = 16 * 1024 * 1024
DEFAULT_DRAIN_TIMEOUT = 30.0


class ServiceHost:
    """Serves one :class:`ToolService` from its request queue on ``bus``."""

    def __init__(
        self,
        bus: Bus,
        service: ToolService,
        *,
        concurrency: int = DEFAULT_CONCURRENCY,
        group: str | None = None,
        max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
        drain_timeout: float = DEFAULT_DRAIN_TIMEOUT,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.bus = bus
        self.service = service
        #: Replicas in one group compete for requests; by default the service id.
        self.group = group or service.id
        self.concurrency = concurrency
        self.max_request_bytes = max_request_bytes
        self.drain_timeout = drain_timeout
        self.clock = clock
        # A pool of ``concurrency`` workers, each reading the subscription and
        # handling a request inline: no task spawn, semaphore or cancel scope per
        # call, and the fewest event-loop hops per round trip.
        self._idle: set[asyncio.Task[None]] = set()
        self._busy = 0
        self._stopping = False
        self._stopped: asyncio.Event | None = None
        #: Requests handled so far (answered or dropped), for tests and metrics.
        self.handled = 0

    @property
    def in_flight(self) -> int:
        return self._busy

    def stop(self) -> None:
        """Stop taking requests; ``serve`` returns once calls in flight have drained."""
        self._stopping = True
        if self._stopped is not None:
            self._stopped.set()
        # Only workers waiting for a request are cancelled; busy ones finish their call.
        for worker in list(self._idle):
            worker.cancel()

    async def serve(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Serve until stopped or cancelled. Signals ``task_status`` once subscribed."""
        self._stopped = asyncio.Event()
        self._stopping = False
        subscription = await self.bus.subscribe(self.service.request_queue, group=self.group)
        requests = aiter(subscription)
        loop = asyncio.get_running_loop()
        # Workers are tasks outside any cancel scope of ours: cancelling ``serve``
        # must let calls in flight finish (the drain below).
        workers = [loop.create_task(self._worker(requests)) for _ in range(self.concurrency)]
        log.info("serving %r on %s", self.service.id, self.service.request_queue)
        try:
            task_status.started()
            await self._stopped.wait()
        finally:
            with anyio.CancelScope(shield=True):
                self.stop()
                await self._drain(workers)
                await subscription.close()
            log.info("stopped %r", self.service.id)

    async def _worker(self, requests: AsyncIterator[Delivery]) -> None:
        me = asyncio.current_task()
        assert me is not None
        idle = self._idle
        while not self._stopping:
            idle.add(me)
            try:
                delivery = await anext(requests)
            except (StopAsyncIteration, asyncio.CancelledError):
                # Subscription closed, or stop() while waiting (a cancel-safe read).
                if self._stopped is not None:
                    self._stopped.set()
                return
            finally:
                idle.discard(me)
            self._busy += 1
            try:
                await self.handle(delivery)
            except Exception:  # handle() answers every failure itself; a worker must not die
                log.exception("%r: unexpected failure handling a request", self.service.id)
            finally:
                self._busy -= 1
                self.handled += 1

    async def _drain(self, workers: list[asyncio.Task[None]]) -> None:
        _, late = await asyncio.wait(workers, timeout=self.drain_timeout)
        for worker in late:
            worker.cancel()
        if late:
            log.warning(
                "%r: call(s) still running after %g s were cut off and not acked",
                self.service.id,
                self.drain_timeout,
            )
            await asyncio.wait(late)

    async def handle(self, delivery: Delivery) -> None:
        """Answer one delivery. Never raises except on cancellation."""
        call_id = delivery.properties.get(wire.PROP_ID)
        try:
            if not call_id:
                log.warning(
                    "%r: dropped a request with no 'id' property: nobody could match the answer",
                    self.service.id,
                )
                await delivery.ack()
                return
            try:
                await self._answer(call_id, delivery)
            except ToolCallError as exc:
                await self._reply_error(call_id, exc.error_type, exc.message)
            except Exception as exc:
                log.exception("%r: tool raised for call %s", self.service.id, call_id)
                await self._reply_error(call_id, wire.GENERIC_ERROR, _describe(exc))
            await delivery.ack()
        except anyio.get_cancelled_exc_class():
            raise
        except Exception:
            # The answer could not be published (broker gone?). Leave the message
            # to the broker: nack makes a persistent queue redeliver it.
            log.exception("%r: could not answer call %s; handing it back", self.service.id, call_id)
            try:
                await delivery.nack()
            except Exception:
                log.debug("nack failed too", exc_info=True)

    async def _answer(self, call_id: str, delivery: Delivery) -> None:
        body = delivery.body
        if len(body) > self.max_request_bytes:
            raise BadRequest(
                f"request of {len(body):,} bytes exceeds this service's limit of "
                f"{self.max_request_bytes:,} bytes; send less, or start the service with a "
                "larger max_request_bytes"
            )
        deadline = delivery.properties.get(wire.PROP_DEADLINE)
        if deadline is not None and _expired(deadline, self.clock()):
            raise DeadlineExceeded(
                f"the caller's deadline passed before {self.service.id!r} could start the call"
            )
        try:
            request = wire.decode_request(body)
        except WireError as exc:
            raise BadRequest(str(exc)) from None
        result = await self.service.handle(request.user, request.config, request.arguments)
        if isinstance(result, str):  # the common case first: no further checks
            await self.bus.publish(
                self.service.response_queue, wire.encode_response(result), {wire.PROP_ID: call_id}
            )
        elif inspect.isasyncgen(result) or isinstance(result, AsyncIterator):
            await self._stream(call_id, result)
        else:
            await self._publish(call_id, wire.encode_response(wire.observation_text(result)))

    async def _stream(self, call_id: str, chunks: AsyncIterator[Any]) -> None:
        async for chunk in chunks:
            text = wire.observation_text(chunk)
            if text:
                await self._publish(call_id, wire.encode_response(text, end_of_stream=False))
        # The end is a message of its own: a generator cannot tell us its last chunk
        # in advance, and holding chunks back would defeat streaming.
        await self._publish(call_id, wire.encode_response("", end_of_stream=True))

    async def _reply_error(self, call_id: str, error_type: str, message: str) -> None:
        await self._publish(call_id, wire.encode_error(error_type, message))

    async def _publish(self, call_id: str, body: bytes) -> None:
        await self.bus.publish(self.service.response_queue, body, {wire.PROP_ID: call_id})


def _expired(deadline: str, now: float) -> bool:
    try:
        return float(deadline) <= now
    except ValueError:
        return False  # an unreadable deadline is ignored, not fatal


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


@asynccontextmanager
async def running(
    bus: Bus, *services: ToolService, **host_options: Any
) -> AsyncIterator[list[ServiceHost]]:
    """Serve ``services`` on ``bus`` for the duration of the ``async with`` block.

    Every service is subscribed (so requests cannot be missed) before the block
    starts; leaving the block stops them and drains calls in flight.
    """
    hosts = [ServiceHost(bus, service, **host_options) for service in services]
    failure: Exception | None = None
    async with anyio.create_task_group() as tasks:
        for host in hosts:
            await tasks.start(host.serve)
        try:
            yield hosts
        except Exception as exc:
            # Re-raised below, outside the task group, so that the caller sees its own
            # exception rather than an ExceptionGroup wrapping it.
            failure = exc
        finally:
            for host in hosts:
                host.stop()
    if failure is not None:
        raise failure
