"""What a call passes after its session allowed it: a policy on its arguments, a person's yes.

A session decides whether a tool is *offered* (groups, state); a front door
may also check each *call*, once the code hooks had their say and the tool's
argument options are applied: a call policy that sees the arguments, and the
approval of a person for calls that need one. The door gives the session a
:class:`CallChecks` (in its :class:`~toolbus.application.agent.rules.SessionRules`);
the session asks it before every call, and a call it stops is refused with an
observation the model reads, and recorded.

A call waiting for approval tells whoever drives the session through the
:class:`ApprovalListener` current in its context (:func:`listening`): the
agent loop sends an event, an MCP server asks its client, and a listener may
answer for the caller, when callers may approve their own calls.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol

from toolbus.application.agent.audit import ApprovalNote, Refusal
from toolbus.domain.access.approvals import Approval
from toolbus.domain.config.descriptors import ToolDescriptor
from toolbus.domain.config.registry import Registry


@dataclass(frozen=True, slots=True)
class CheckedCall:
    """One call, as the checks see it. ``arguments`` have the argument options applied.

    ``wait``: the call may wait for a person (calls made for configured hooks
    may not: a request does not start with a question to somebody).
    """

    user: str
    groups: tuple[str, ...]
    state: str
    request_id: str
    tool_call_id: str | None
    tool: ToolDescriptor
    arguments: Mapping[str, Any]
    registry: Registry
    wait: bool = True


@dataclass(frozen=True, slots=True)
class CallPermitted:
    """The call goes ahead; ``approval`` is the approval it waited for, if any."""

    approval: ApprovalNote | None = None


@dataclass(frozen=True, slots=True)
class CallStopped:
    """The call is refused: ``refusal`` says why, ``observation`` is what the model reads."""

    refusal: Refusal
    observation: str
    approval: ApprovalNote | None = None
    policy: str | None = None


PERMITTED = CallPermitted()


class CallChecks(Protocol):
    """What a front door checks of each call; see the module docs."""

    async def check(self, call: CheckedCall) -> CallPermitted | CallStopped: ...


@dataclass(frozen=True, slots=True)
class ApprovalAnswer:
    """A decision a listener got from the caller: approve or deny, with a note."""

    approve: bool
    note: str | None = None


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
