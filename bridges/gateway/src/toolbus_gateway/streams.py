"""Server-Sent-Event answers: the gateway's limits on open streams, and the SSE encoding.

Streams are limited in all (``max-event-streams`` in ``[gateway]``) and per user
(``max-streams-per-user`` in ``[doors]``); either answers 429 with
``Retry-After``. A place is held for as long as the stream is open.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from sse_starlette import EventSourceResponse

from toolbus_gateway.events import Event
from toolbus_gateway.gateway import Gateway

#: Seconds between SSE keep-alive comments.
PING_SECONDS = 15
#: Seconds a client is asked to wait when too many event streams are open.
STREAMS_RETRY_AFTER = 5


class StreamLimit(Exception):
    """Too many event streams are open in all (HTTP 429)."""

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"the gateway has {limit} event streams open, the most it allows "
            "(max-event-streams in [gateway]); retry later"
        )


def take_stream(gateway: Gateway, user: str) -> Callable[[], None]:
    """A stream place for ``user``: :class:`StreamLimit` or ``LimitReached`` when none is free."""
    if gateway.open_streams >= gateway.settings.max_event_streams:
        raise StreamLimit(gateway.settings.max_event_streams)
    assert gateway.door is not None
    return gateway.door.streams.take(user)


async def _counted(
    gateway: Gateway, events: AsyncIterator[dict[str, Any]], leave: Callable[[], None]
) -> AsyncIterator[dict[str, Any]]:
    """Count the stream while it is open (for the limits and the metrics)."""
    gateway.open_streams += 1
    try:
        async for event in events:
            yield event
    finally:
        gateway.open_streams -= 1
        leave()


def open_stream(
    gateway: Gateway,
    events: AsyncIterator[dict[str, Any]],
    leave: Callable[[], None],
) -> EventSourceResponse:
    """An SSE response of ``events``, holding a stream place (``leave`` gives it back)."""
    return EventSourceResponse(
        _counted(gateway, events, leave),
        ping=PING_SECONDS,
        # A client that stopped reading is dropped once a write waits this long.
        send_timeout=gateway.settings.stream_send_timeout,
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


def sse(event: Event) -> dict[str, Any]:
    return {"event": event.name, "data": json.dumps(event.data)}
