"""What a front door's budgets are to a session: :class:`Spending`.

A door with ``[[budgets]]`` counts what its sessions spend, in its state store,
so that every replica counts the same money. A session asks before each model
turn whether its user may still spend (:meth:`Spending.check`), and adds what
each turn cost (:meth:`Spending.charge`); its tool calls pass the same budgets
as a call step (``budget``), which charges what each call cost.
"""

from __future__ import annotations

from typing import Protocol

from toolbus.application.agent.steps import CallStopped


class Spending(Protocol):
    """A door's budgets, as a session sees them."""

    async def check(self, user: str, groups: tuple[str, ...]) -> CallStopped | None:
        """``None`` while ``user`` (with ``groups``) may spend; else the refusal, naming the
        budget that is spent and when it starts again."""
        ...

    async def charge(self, user: str, groups: tuple[str, ...], amount: float) -> None:
        """Add ``amount`` to what ``user`` (with ``groups``) spent in every budget counting it."""
        ...
