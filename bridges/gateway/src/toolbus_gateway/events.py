"""Fan-out of events to Server-Sent-Event streams, bounded per subscriber.

A :class:`Topic` hands each event to every subscriber's own small buffer and
never waits: a subscriber whose buffer is full (a client that stopped
reading) is dropped, told so by a last ``overflow`` event, so one slow client
cannot hold up the others or make the gateway keep events for it forever.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

#: Events kept for a subscriber that has not read them yet.
DEFAULT_BUFFER = 256


@dataclass(frozen=True, slots=True)
class Event:
    """One event: its SSE ``event`` name and JSON-ready ``data``."""

    name: str
    data: Any = field(default=None)


OVERFLOW = Event("overflow", {"message": "this stream fell behind and was closed; reconnect"})


class Topic:
    """Where events of one kind go (the console's, one session's)."""

    def __init__(self, buffer: int = DEFAULT_BUFFER) -> None:
        self._buffer = buffer
        self._subscribers: set[MemoryObjectSendStream[Event]] = set()
        self._closed = False

    def __len__(self) -> int:
        """How many subscribers are listening now."""
        return len(self._subscribers)

    @property
    def closed(self) -> bool:
        return self._closed

    def publish(self, event: Event) -> None:
        """Hand ``event`` to every subscriber without waiting."""
        for send in list(self._subscribers):
            try:
                send.send_nowait(event)
            except anyio.WouldBlock:
                self._drop(send, OVERFLOW)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                self._subscribers.discard(send)

    def close(self, last: Event | None = None) -> None:
        """End every subscription (after ``last``, if given); later subscribers end at once."""
        self._closed = True
        for send in list(self._subscribers):
            self._drop(send, last)

    @asynccontextmanager
    async def subscribe(self) -> AsyncIterator[MemoryObjectReceiveStream[Event]]:
        """A stream of the events published from now on, until the block ends."""
        send, receive = anyio.create_memory_object_stream[Event](self._buffer)
        if self._closed:
            send.close()
        else:
            self._subscribers.add(send)
        try:
            async with receive:
                yield receive
        finally:
            self._subscribers.discard(send)
            send.close()

    def _drop(self, send: MemoryObjectSendStream[Event], last: Event | None) -> None:
        self._subscribers.discard(send)
        if last is not None:
            # The buffer may be full: the last word is then lost, but the stream
            # still ends, which is what the client needs to notice.
            with suppress(anyio.WouldBlock, anyio.BrokenResourceError, anyio.ClosedResourceError):
                send.send_nowait(last)
        send.close()
