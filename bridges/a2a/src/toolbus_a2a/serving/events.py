"""A task's events for every replica of the door: :class:`BusTaskEventStream`.

a2a-sdk's :class:`~a2a.server.cluster.TaskEventStream` ("delivers task events
across replicas") on the bus: the replica running a task publishes each A2A
event (a status update, a chunk of the answer) on one non-persistent queue that
every replica subscribes to (fan-out), and a replica streaming the task to a
caller (``SendStreamingMessage``, ``SubscribeToTask``) reads those of its task.
The replica whose caller started the task may be another than the one its
caller's next request reaches, behind a load balancer.

Events are versioned by the time they were published (nanoseconds; replicas'
clocks agree closely enough for ordering one task's events, which one replica
publishes at a time). A subscriber that reconnects may miss events sent in
between, as A2A allows; the task's last events repeat its whole answer and its
final status, so no caller ends with less than the task holds.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import AsyncGenerator, Callable
from types import TracebackType

import anyio
import orjson
from a2a.server.cluster import TaskEventStream, TaskVersion, VersionedEvent
from a2a.server.events import Event
from a2a.types import StreamResponse
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from google.protobuf.json_format import MessageToDict, ParseDict

from toolbus.ports import Bus, Subscription

log = logging.getLogger("toolbus.a2a")

#: Where every replica publishes and reads task events.
EVENTS_QUEUE = "non-persistent://toolbus/a2a/task-events"


def _wrapped(event: Event) -> StreamResponse:
    response = StreamResponse()
    field = {
        "Task": "task",
        "Message": "message",
        "TaskStatusUpdateEvent": "status_update",
        "TaskArtifactUpdateEvent": "artifact_update",
    }[type(event).__name__]
    getattr(response, field).CopyFrom(event)
    return response


def _unwrapped(response: StreamResponse) -> Event:
    kind = response.WhichOneof("payload")
    if kind is None:
        raise ValueError("an empty stream response")
    event: Event = getattr(response, kind)
    return event


def encode(event: VersionedEvent) -> bytes:
    # TaskVersion shows its value to nobody but the store that made it: this stream made it.
    version = 0 if event.version.is_missing else event.version._value
    return orjson.dumps({"version": version, "event": MessageToDict(_wrapped(event.event))})


def decode(body: bytes) -> VersionedEvent:
    data = orjson.loads(body)
    response = ParseDict(data["event"], StreamResponse(), ignore_unknown_fields=True)
    return VersionedEvent(_unwrapped(response), TaskVersion(int(data["version"])))


def now_version() -> TaskVersion:
    """A version later than every earlier one of this clock."""
    return TaskVersion(time.time_ns())


class Listening:
    """One subscriber's events of one task (a context manager that stops listening)."""

    def __init__(
        self, receive: MemoryObjectReceiveStream[VersionedEvent], stop: Callable[[], None]
    ) -> None:
        self._receive = receive
        self._stop = stop

    def __enter__(self) -> MemoryObjectReceiveStream[VersionedEvent]:
        return self._receive

    def __exit__(self, *_: object) -> None:
        self._stop()
        self._receive.close()


class BusTaskEventStream(TaskEventStream):
    """Task events on the bus; use it in ``async with`` (it holds one subscription)."""

    def __init__(self, bus: Bus, *, queue: str = EVENTS_QUEUE) -> None:
        self.bus = bus
        self.queue = queue
        self._listeners: dict[str, set[MemoryObjectSendStream[VersionedEvent]]] = {}
        self._subscription: Subscription | None = None
        self._group: TaskGroup | None = None

    async def __aenter__(self) -> BusTaskEventStream:
        self._subscription = await self.bus.subscribe(self.queue)
        self._group = anyio.create_task_group()
        await self._group.__aenter__()
        self._group.start_soon(self._route, self._subscription)
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        assert self._group is not None and self._subscription is not None
        self._group.cancel_scope.cancel()
        await self._group.__aexit__(None, None, None)
        with anyio.CancelScope(shield=True):
            await self._subscription.close()
        for listeners in self._listeners.values():
            for listener in listeners:
                listener.close()

    async def _route(self, subscription: Subscription) -> None:
        async for delivery in subscription:
            listeners = self._listeners.get(delivery.properties.get("task", ""))
            if not listeners:
                continue
            try:
                event = decode(delivery.body)
            except (ValueError, KeyError, TypeError):
                log.warning("an unreadable A2A task event on %s was dropped", self.queue)
                continue
            for listener in list(listeners):
                listener.send_nowait(event)

    async def publish(self, task_id: str, event: VersionedEvent) -> None:
        await self.bus.publish(self.queue, encode(event), {"task": task_id})

    def listen(self, task_id: str) -> Listening:
        """The task's events from now on (live when this returns), for ``async with``."""
        if self._group is None:
            raise RuntimeError("use BusTaskEventStream in 'async with' before subscribing")
        send, receive = anyio.create_memory_object_stream[VersionedEvent](math.inf)
        self._listeners.setdefault(task_id, set()).add(send)

        def stop() -> None:
            listeners = self._listeners.get(task_id, set())
            listeners.discard(send)
            if not listeners:
                self._listeners.pop(task_id, None)
            send.close()

        return Listening(receive, stop)

    async def subscribe(
        self, task_id: str, *, after: TaskVersion
    ) -> AsyncGenerator[VersionedEvent, None]:
        with self.listen(task_id) as events:
            async for event in events:
                if event.version.is_after(after):
                    yield event

    async def destroy(self, task_id: str) -> None:
        """The task ended: its subscribers' streams end too."""
        for listener in self._listeners.pop(task_id, set()):
            listener.close()
