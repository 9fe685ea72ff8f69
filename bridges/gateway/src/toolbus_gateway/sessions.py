"""What this gateway process keeps beside each held session: a lock and an event topic.

The session itself is held by the front door, as plain data
(:mod:`toolbus.application.doors.holding`); here live the parts that belong to
this process's connections: a lock, so that calls in one session run one at a
time and its state moves in order, and the :class:`~toolbus_gateway.events.Topic`
its event streams listen to. They are kept per owner and session id, as the
door keeps sessions; events of calls other replicas make reach the topic
through :mod:`toolbus_gateway.session_events`.
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
    """One :class:`Channel` per held session (its owner and id), made on first use."""

    def __init__(self) -> None:
        self._channels: dict[tuple[str, str], Channel] = {}

    def __getitem__(self, key: tuple[str, str]) -> Channel:
        found = self._channels.get(key)
        if found is None:
            found = self._channels[key] = Channel()
        return found

    def __contains__(self, key: tuple[str, str]) -> bool:
        return key in self._channels

    def get(self, owner: str, session_id: str) -> Channel | None:
        """The channel of ``owner``'s session ``session_id``, if this process has one."""
        return self._channels.get((owner, session_id))

    def ended(self, owner: str, session_id: str, reason: str) -> None:
        """The session closed: end its event streams with a ``closed`` event."""
        channel = self._channels.pop((owner, session_id), None)
        if channel is not None:
            channel.events.close(Event("closed", {"session_id": session_id, "reason": reason}))
