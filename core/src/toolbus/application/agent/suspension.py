"""Agent runs that wait for a person without holding a worker: the :class:`Suspensions` port.

An :class:`~toolbus.application.agent.loop.AgentLoop` given suspensions does
not wait in place when a tool call needs a person's approval: the call stops
waiting at once, the turn's other calls finish, and the run *suspends*. Its
:class:`~toolbus.application.agent.checkpoints.Checkpoint` (the chat, the turn's
calls with those answered, the session as plain data, the request) is handed
to :meth:`Suspensions.suspend`, which keeps it and makes the run a task that
waits for the approvals; the loop tells the asker (a ``waiting`` event naming
the task) and returns, its worker free for other requests.

Once an approval is decided (on any door, by any replica), whichever agent
replica takes the task goes on from the checkpoint
(:meth:`~toolbus.application.agent.loop.AgentLoop.resume`): the call finds its
approval decided and is made (or refused), and the run goes on to its answer,
which is the task's result. ``toolbus.application.doors.suspended_runs`` keeps
them in the door's state store.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from toolbus.application.agent.checkpoints import Checkpoint
from toolbus.domain.access.approvals import Approval


@dataclass(frozen=True, slots=True)
class Suspension:
    """A suspended run: the task it became, and what it waits for, in words."""

    task_id: str
    message: str


class Suspensions(Protocol):
    """Where an agent loop's runs wait for a person without holding a worker."""

    async def suspend(self, saved: Checkpoint, waiting: Sequence[Approval]) -> Suspension:
        """Keep the run ``saved`` describes until one of ``waiting`` is decided (or the first
        expires), as a task (``saved.task`` once it has one); the task and its message."""
        ...
