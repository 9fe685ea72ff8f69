"""Budgets (``[[budgets]]``), as a door's step: :class:`BudgetStep`.

A call whose caller has spent a budget counting it is refused, naming the
budget and when its period starts again (``retry_after``); any other call goes
on, and what it cost (``[costs]``) is added to the budgets once it has ended.
The counting is :class:`~toolbus.application.doors.budgets.Budgets`'s, which
the door's sessions also ask before each model turn.
"""

from __future__ import annotations

from functools import partial
from typing import Literal

from toolbus.application.agent.steps import (
    CallEnded,
    CallPermitted,
    CallStep,
    CallStopped,
    CheckedCall,
)
from toolbus.application.doors.budgets import Budgets
from toolbus.domain.config.registry import Registry


class BudgetStep(CallStep):
    """The budgets of a door; see the module docs."""

    name: Literal["budget"] = "budget"

    def __init__(self, budgets: Budgets) -> None:
        self.budgets = budgets

    def applies(self, registry: Registry) -> bool:
        return bool(self.budgets.budgets)

    async def check(self, call: CheckedCall) -> CallPermitted | CallStopped:
        stopped = await self.budgets.refusal(
            call.user, call.groups, f"the call of {call.tool.llm_name!r}"
        )
        if stopped is not None:
            return stopped
        return CallPermitted(after=(partial(self._charge, call.user, call.groups),))

    async def _charge(self, user: str, groups: tuple[str, ...], ended: CallEnded) -> None:
        if ended.cost:
            await self.budgets.charge(user, groups, ended.cost)
