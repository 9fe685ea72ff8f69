"""A held session's events on every replica: ``call``, ``task`` and ``closed`` go over the bus.

Replicas that share a state store serve any session's calls on any replica,
so a client listening to a session (``GET /v1/sessions/{id}/events``) on one
replica must see the calls made through another, and learn when another
closed it. Each event goes to this process's listeners at once, and, where
sessions are shared, onto the bus queue :data:`QUEUE` as a fan-out message
that every replica reads: a replica hands the events of other replicas to its
own listeners of that session (the same owner, the same id) and drops the
rest. A gateway holding sessions in its own process publishes locally only.

The queue is ``non-persistent``: a replica that is not listening misses
nothing it could use (its listeners would be gone too), and an event lost on
the way is lost as one is to a client that stops reading; the ``state`` a
stream starts with, and ``GET /v1/sessions/{id}``, always say where a
session stands.
"""

from __future__ import annotations

import json
import logging
import uuid
from typing import Any

from toolbus._internal.throttled_log import ThrottledLog
from toolbus.ports import Bus, Subscription
from toolbus_gateway.events import Event
from toolbus_gateway.sessions import SessionChannels

log = logging.getLogger("toolbus.gateway")

#: Where the replicas of a deployment tell each other of their sessions' events.
QUEUE = "non-persistent://toolbus/gateway/session-events"


class SessionEvents:
    """Publishes a held session's events here and, shared with ``bus``, on every replica.

    Args:
        channels: this process's session channels (their topics are what streams read).
        bus: where the replicas meet; ``None`` when sessions are this process's own.
    """

    def __init__(self, channels: SessionChannels, bus: Bus | None) -> None:
        self.channels = channels
        self.bus = bus
        #: Tells this process's own messages apart when they come back from the bus.
        self.origin = uuid.uuid4().hex
        self._warnings = ThrottledLog(log)

    async def call(self, owner: str, session_id: str, data: Any) -> None:
        """A call in the session finished; ``data`` is what it answered."""
        self._tell(owner, session_id, Event("call", data))
        await self._share({"owner": owner, "session": session_id, "call": data})

    async def task(self, owner: str, session_id: str, data: Any) -> None:
        """A task made in the session changed; ``data`` is the task as its owner reads it."""
        self._tell(owner, session_id, Event("task", data))
        await self._share({"owner": owner, "session": session_id, "task": data})

    async def ended(self, owner: str, session_id: str, reason: str) -> None:
        """The session closed (``closed``, ``idle``, ``gateway stopping``)."""
        self.channels.ended(owner, session_id, reason)
        await self._share({"owner": owner, "session": session_id, "closed": reason})

    async def subscribe(self) -> Subscription | None:
        """The replicas' messages, from now on (``None`` when sessions are not shared)."""
        if self.bus is None:
            return None
        return await self.bus.subscribe(QUEUE)

    async def follow(self, messages: Subscription) -> None:
        """Hand other replicas' events to this process's listeners, until ``messages`` ends."""
        async for delivery in messages:
            try:
                message = json.loads(delivery.body)
                origin, owner, session = message["origin"], message["owner"], message["session"]
            except (ValueError, TypeError, KeyError):
                self._warnings.warning(
                    "bad-event", "dropped a message on %s that is not a session event", QUEUE
                )
                continue
            if origin == self.origin:
                continue  # told to this process's listeners when it happened
            if "closed" in message:
                self.channels.ended(owner, session, str(message["closed"]))
            elif "task" in message:
                self._tell(owner, session, Event("task", message["task"]))
            else:
                self._tell(owner, session, Event("call", message.get("call")))

    def _tell(self, owner: str, session_id: str, event: Event) -> None:
        """To this process's listeners of the session, if it has any (a session closed
        meanwhile gets no channel again)."""
        channel = self.channels.get(owner, session_id)
        if channel is not None:
            channel.events.publish(event)

    async def _share(self, message: dict[str, Any]) -> None:
        if self.bus is None:
            return
        body = json.dumps({"origin": self.origin, **message}).encode()
        try:
            await self.bus.publish(QUEUE, body, {})
        except Exception as exc:  # the call was made: its answer must not fail for this
            self._warnings.warning(
                "unpublished",
                "could not tell the other replicas of a session event (%s); their listeners "
                "miss it",
                exc,
            )
