"""Calls a person approves first, as a door's step: :class:`ApprovalStep`.

A call needs approval when the call policy before it said so (its
``ApproveFirst`` reaches this step as :attr:`CheckedCall.permitted`), when its
tool's descriptor does (``"approval": "always"``), or when ``[approvals]
tools`` lists it. It then waits in the
:class:`~toolbus.application.doors.approvals.ApprovalBook` until one of its
approvers decides, or its time runs out. Whoever drives the session is told
(:func:`~toolbus.application.agent.asking.listening`) and may answer for the
caller when callers approve their own calls.

Only an approved call is made. A denied or expired one is refused with an
observation naming the approver and their reason; every one is audited with
the approval (who, how, how long it waited).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable

from toolbus.application.agent.asking import current_listener, current_reply
from toolbus.application.agent.audit import ApprovalNote, Refusal
from toolbus.application.agent.observations import (
    approval_denied,
    approval_expired,
    approval_unavailable,
)
from toolbus.application.agent.steps import (
    PERMITTED,
    CallPermitted,
    CallStep,
    CallStopped,
    CheckedCall,
)
from toolbus.application.doors.approvals import ApprovalBook, ApprovalsFull
from toolbus.domain.access.approvals import (
    Approval,
    ApprovalSettings,
    Demand,
    approval_key,
    demanded,
    redacted_arguments,
    teams_named,
)
from toolbus.domain.config.registry import Registry
from toolbus.domain.errors import (
    ApprovalClosed,
    ApprovalNotFound,
    NotAnApprover,
    Problem,
    StateStoreError,
)
from toolbus.ports import PolicyEngine

log = logging.getLogger("toolbus.approvals")

#: How many approvals one call id may have used before a new one is refused.
_MAX_ROUNDS = 1000


class ApprovalStep(CallStep):
    """The approvals of a door; see the module docs.

    Args:
        settings: the ``[approvals]`` table.
        book: where approvals wait; ``None``: calls that need approval are refused.
        policy: the call policy before this step, when there is one: it may ask
            for approval of any call, naming teams that must be configured.
        clock: Unix seconds.
    """

    name: Refusal = "approval"

    def __init__(
        self,
        settings: ApprovalSettings,
        book: ApprovalBook | None,
        *,
        policy: PolicyEngine | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.book = book
        self.policy = policy
        self.clock = clock

    def applies(self, registry: Registry) -> bool:
        return (
            self.policy is not None
            or bool(self.settings.tools)
            or any(tool.approval is not None for tool in registry.tools.values())
        )

    def problems(self, registry: Registry) -> list[Problem]:
        """Teams a tool's ``approval`` or a policy names that ``[approvals.teams]`` does not."""
        named = teams_named(list(registry.tools.values()))
        if self.policy is not None:
            named.update({team: "a policy's @approval" for team in self.policy.teams()})
        known = ", ".join(sorted(self.settings.teams)) or "none"
        return [
            Problem(
                "toolbus.toml [approvals.teams]",
                team,
                f"is named by {by}, but no such team is configured (teams: {known}); "
                f'add {team} = ["<user>", ...] to [approvals.teams]',
            )
            for team, by in sorted(named.items())
            if team not in self.settings.teams
        ]

    async def check(self, call: CheckedCall) -> CallPermitted | CallStopped:
        demand = demanded(call.tool, call.permitted.approve_first, self.settings)
        if demand is None:
            return PERMITTED
        if not call.wait:
            return _unavailable(call, "calls made for hooks do not wait for a person")
        if self.book is None:
            return _unavailable(call, "this door keeps no approvals (it was given no store)")
        try:
            return await self._approved(call, self.book, demand)
        except ApprovalsFull as exc:
            return _unavailable(call, str(exc))
        except ApprovalNotFound:
            return _unavailable(
                call, "its approval left the store while it waited (withdrawn, or refused)"
            )
        except StateStoreError as exc:
            log.warning("approvals cannot be reached: %s", exc)
            return _unavailable(call, "approvals cannot be reached now; try again later")

    async def _approved(
        self, call: CheckedCall, book: ApprovalBook, demand: Demand
    ) -> CallPermitted | CallStopped:
        approvers = self.settings.team(demand.team)
        if self.settings.callers_approve and call.user not in approvers:
            approvers = (*approvers, call.user)
        if not self.settings.callers_approve and approvers == (call.user,):
            return _unavailable(
                call,
                "its only approver is its caller, and callers do not approve their own calls "
                "(callers-approve in [approvals]); name another approver",
            )
        if not approvers:
            return _unavailable(
                call,
                "no one is named to approve it (approvers, or the team "
                f"{demand.team!r}, in [approvals] of toolbus.toml)"
                if demand.team
                else "no one is named to approve it (approvers in [approvals] of toolbus.toml)",
            )
        digest = approval_key(
            call.user, call.request_id, call.tool_call_id, call.tool.name, call.arguments
        )
        approval, free = await self._find(call, book, digest)
        if approval is None:
            approval = await book.add(self._new(call, demand, approvers, free))
        started = self.clock()
        if approval.status == "pending":
            approval = await self._decision(call, book, approval)
        status = approval.status
        if status == "pending":  # the book answers a decided or expired approval
            status = "expired"
        if status == "withdrawn":  # its call was cancelled meanwhile (another replica's task)
            return CallStopped(
                self.name,
                approval_unavailable(
                    call.tool, f"its approval was withdrawn ({approval.note or 'cancelled'})"
                ),
                ApprovalNote(
                    id=approval.id,
                    status="withdrawn",
                    team=approval.team,
                    waited_seconds=max(0.0, self.clock() - started),
                ),
            )
        note = ApprovalNote(
            id=approval.id,
            status=status,
            decided_by=approval.decided_by,
            decided_via=approval.decided_via,
            team=approval.team,
            waited_seconds=max(0.0, self.clock() - started),
        )
        if status == "approved":
            if not await book.spend(approval.id):
                return _unavailable(call, "its approval was used by another call already")
            return CallPermitted(approval=note)
        if status == "denied":
            return CallStopped(
                self.name,
                approval_denied(call.tool, approval.decided_by or "an approver", approval.note),
                note,
            )
        return CallStopped(
            self.name,
            approval_expired(call.tool, approval.expires_at - approval.created_at),
            note,
        )

    async def _find(
        self, call: CheckedCall, book: ApprovalBook, digest: str
    ) -> tuple[Approval | None, str]:
        """The approval this call has already, else the id a new one takes.

        The one it brings the caller's answer to (the same call, asked again);
        for a model's call, which has an id, the one a run resumed elsewhere was
        waiting on (a call made again after its approval was used needs a new
        one). Any other call asks anew, except one that waited on the approval it
        brings already (a task's): that approval gone, it is refused.
        """
        reply = current_reply()
        if reply is not None:
            brought = await book.get(reply.approval_id)
            if brought is not None and brought.id.startswith(digest) and not brought.used:
                return brought, brought.id
            if brought is None and reply.waited_on:
                raise ApprovalNotFound(reply.approval_id)
        if call.tool_call_id is None:
            return None, f"{digest}-{uuid.uuid4().hex}"
        for round_ in range(_MAX_ROUNDS):
            approval_id = digest if round_ == 0 else f"{digest}-{round_}"
            found = await book.get(approval_id)
            if found is None or not found.used:
                return found, approval_id
        raise ApprovalsFull(f"call {call.tool_call_id!r} was approved {_MAX_ROUNDS} times already")

    def _new(
        self, call: CheckedCall, demand: Demand, approvers: tuple[str, ...], approval_id: str
    ) -> Approval:
        now = self.clock()
        return Approval(
            id=approval_id,
            user=call.user,
            tool=call.tool.name,
            arguments=redacted_arguments(call.arguments, call.tool),
            approvers=approvers,
            team=demand.team,
            reason=demand.reason,
            request_id=call.request_id,
            tool_call_id=call.tool_call_id,
            created_at=now,
            expires_at=now + demand.timeout,
            callers_approve=self.settings.callers_approve,
        )

    async def _decision(
        self, call: CheckedCall, book: ApprovalBook, approval: Approval
    ) -> Approval:
        """Wait for the decision: the caller's, when it may give one, or an approver's."""
        reply = current_reply()
        answer = None
        if reply is not None and reply.approval_id == approval.id:
            answer = reply.answer
        else:
            listener = current_listener()
            if listener is not None:
                answer = await listener(approval)
        if answer is not None and approval.may_decide(call.user):
            try:
                return await book.decide(
                    approval.id, call.user, answer.approve, answer.note, via=answer.via
                )
            except (ApprovalClosed, NotAnApprover):
                pass  # decided meanwhile, or expired: what the book holds now says
        decided = await book.wait(approval.id, approval.expires_at)
        if decided is not None:
            return decided
        return await book.expire(approval.id)


def _unavailable(call: CheckedCall, why: str) -> CallStopped:
    return CallStopped(ApprovalStep.name, approval_unavailable(call.tool, why))
