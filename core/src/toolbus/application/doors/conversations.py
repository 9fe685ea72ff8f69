"""Agent requests through a front door: each a session, conversations continued by id.

An agent request names its user, groups and state (TrustGraph's
``AgentRequest``). Through a door, the state must be an entry state; a request
that ends elsewhere is *held* as a conversation, and its last event names it
(``session``), so that the next request continues from the state it earned by
naming it, as the same user. Each request is still its own session with its
own audit record. A conversation left unused for ``session-idle-timeout``
seconds is forgotten; so is a user's least recently used conversation when
they hold ``max-sessions-per-user`` of them and start another: a user's
conversations never push out anyone else's.
"""

from __future__ import annotations

import time
import uuid

from toolbus.application.agent.held import HeldSession
from toolbus.application.agent.session import AgentSession
from toolbus.application.doors.door import FrontDoor
from toolbus.application.doors.holding import Held, HeldKey
from toolbus.application.doors.keeping import CONVERSATION
from toolbus.domain.agent.wire import AgentRequest
from toolbus.domain.errors import SessionNotFound


class DoorConversations:
    """The :class:`~toolbus.application.agent.session_sources.Sessions` of an agent
    service behind a door."""

    def __init__(self, door: FrontDoor, *, default_user: str = "anonymous") -> None:
        self.door = door
        self.default_user = default_user

    def _user(self, request: AgentRequest) -> str:
        return request.user or self.default_user

    async def open(self, request: AgentRequest, request_id: str) -> AgentSession:
        user = self._user(request)
        if not request.session:
            return self.door.open(user, request.group, request.state, request_id=request_id)
        held = await self.door.held.get(user, CONVERSATION, request.session)
        if held is None:
            raise SessionNotFound(
                request.session, "Ask again without a session to start a new conversation"
            )
        # A new request, a new record: continuing in the state and groups held.
        continued = held.session.restarted(request_id, time.time())
        return self.door.resumed(continued, counted=True)

    async def resume(self, request: AgentRequest, held: HeldSession) -> AgentSession:
        return self.door.resumed(held, counted=True)

    async def keep(self, request: AgentRequest, session: AgentSession) -> str | None:
        door = self.door
        user = self._user(request)
        if session.state in door.entry_states:
            if request.session:
                await door.holder.delete(HeldKey(user, CONVERSATION, request.session))
            return None
        if request.session:
            key = HeldKey(user, CONVERSATION, request.session)
            found = await door.holder.get(key)
            if found is not None:
                kept = Held(key, session.held(), door.holder.clock(), found.version + 1)
                if await door.holder.swap(kept, ttl=door.settings.session_idle_timeout):
                    return request.session
        owned = await door.held.owned(user, CONVERSATION)
        if len(owned) >= door.settings.max_sessions_per_user:
            oldest = min(owned, key=lambda held: held.last_used)
            await door.holder.delete(oldest.key)
        key = HeldKey(user, CONVERSATION, uuid.uuid4().hex)
        await door.holder.put(
            Held(key, session.held(), door.holder.clock()), ttl=door.settings.session_idle_timeout
        )
        return key.id
