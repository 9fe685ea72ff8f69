"""The call policy on each call's arguments, as a door's step: :class:`PolicyStep`.

For each call (after the code hooks, with the tool's argument options
applied) the policy engine ``[policy]`` names decides: permit, forbid (the
call is refused; the model reads why, the audit record names the policy), or
ask a person first, which the approvals step after it acts on
(:mod:`toolbus.application.doors.steps.approvals`).
"""

from __future__ import annotations

from typing import Literal

from toolbus.application.agent.observations import forbidden
from toolbus.application.agent.steps import (
    PERMITTED,
    CallPermitted,
    CallStep,
    CallStopped,
    CheckedCall,
)
from toolbus.domain.access.policy import ApproveFirst, Forbid, PolicyRequest
from toolbus.domain.config.registry import Registry
from toolbus.domain.errors import Problem
from toolbus.ports import PolicyEngine


class PolicyStep(CallStep):
    """Asks ``engine`` about every call; see the module docs."""

    name: Literal["policy"] = "policy"

    def __init__(self, engine: PolicyEngine) -> None:
        self.engine = engine

    async def check(self, call: CheckedCall) -> CallPermitted | CallStopped:
        decision = self.engine.decide(
            call.registry,
            PolicyRequest(call.user, call.groups, call.tool, call.state, call.arguments),
        )
        if isinstance(decision, Forbid):
            return CallStopped(
                self.name, forbidden(call.tool, decision.reason), policy=decision.policy
            )
        if isinstance(decision, ApproveFirst):
            return CallPermitted(approve_first=decision)
        return PERMITTED

    def problems(self, registry: Registry) -> list[Problem]:
        return self.engine.check(registry)

    def close(self) -> None:
        self.engine.close()
