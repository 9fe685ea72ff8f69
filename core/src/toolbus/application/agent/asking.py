"""A call that waits for a person's approval asks whoever drives its session.

A front door's approvals step
(:mod:`toolbus.application.doors.steps.approvals`) tells the
:class:`ApprovalListener` current in the call's context (:func:`listening`)
when a call starts waiting: the agent loop sends an event, an MCP server asks
its client, and a listener may answer for the caller, when callers may approve
their own calls. A caller that was asked earlier brings its answer with the
call made again (:func:`replying`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Protocol

from toolbus.domain.access.approvals import Approval


@dataclass(frozen=True, slots=True)
class ApprovalAnswer:
    """A decision a listener got from the caller: approve or deny, with a note; ``via``
    says how the caller was asked (the agent run's events, an MCP client's form)."""

    approve: bool
    note: str | None = None
    via: str = "caller"


class ApprovalListener(Protocol):
    """Told when a call starts waiting for approval; may answer for the caller."""

    async def __call__(self, approval: Approval) -> ApprovalAnswer | None: ...


_listener: ContextVar[ApprovalListener | None] = ContextVar("toolbus_approvals", default=None)
_reply: ContextVar[ApprovalReply | None] = ContextVar("toolbus_approval_reply", default=None)


@dataclass(frozen=True, slots=True)
class ApprovalReply:
    """The caller's answer to an approval it was asked about earlier, brought with the
    call made again (MCP's input requests: the client answers, then asks again)."""

    approval_id: str
    answer: ApprovalAnswer | None
    #: The call waited on this approval already (a task going on with its call): if it
    #: left the store meanwhile (withdrawn, or refused as not sealed by a door), the call
    #: is refused for it rather than asked anew.
    waited_on: bool = False


@contextmanager
def listening(listener: ApprovalListener) -> Iterator[None]:
    """Calls made in this block (and the tasks it starts) tell ``listener`` when they wait."""
    token = _listener.set(listener)
    try:
        yield
    finally:
        _listener.reset(token)


def current_listener() -> ApprovalListener | None:
    return _listener.get()


@contextmanager
def replying(reply: ApprovalReply) -> Iterator[None]:
    """The call made in this block is the one ``reply`` answers (if it is the same call)."""
    token = _reply.set(reply)
    try:
        yield
    finally:
        _reply.reset(token)


def current_reply() -> ApprovalReply | None:
    return _reply.get()
