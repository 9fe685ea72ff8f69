"""What this gateway process keeps beside each held session: a lock and an event topic.

The session itself is held by the front door, as plain data
(:mod:`toolbus.application.doors.holding`); here live the parts that belong to
this process's connections: a lock, so that calls in one session run one at a
time and its state moves in order, and the :class:`~toolbus_gateway.events.Topic`
its event streams listen to.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import anyio

from toolbus_gateway.events import Event, Topic


class SessionExists(Exception):
    """A session with this request id is open already (HTTP 409)."""

    def __init__(self, session_id: str) -> None:
        super().__init__(
            f"a session with request id {session_id!r} is open already; "
            "use it, close it, or choose another request_id"
        )


@dataclass(eq=False)
class Channel:
    # fast_acquire: an uncontended lock costs no trip round the event loop.
    lock: anyio.Lock = field(default_factory=lambda: anyio.Lock(fast_acquire=True))
    events: Topic = field(default_factory=Topic)


class SessionChannels:
    """One :class:`Channel` per held session id, made on first use."""

    def __init__(self) -> None:
        self._channels: dict[str, Channel] = {}

    def __getitem__(self, session_id: str) -> Channel:
        found = self._channels.get(session_id)
        if found is None:
            found = self._channels[session_id] = Channel()
        return found

    def __contains__(self, session_id: str) -> bool:
        return session_id in self._channels

    def ended(self, session_id: str, reason: str) -> None:
        """The session closed: end its event streams with a ``closed`` event."""
        channel = self._channels.pop(session_id, None)
        if channel is not None:
            channel.events.close(Event("closed", {"session_id": session_id, "reason": reason}))
