"""``toolbus call`` held to the operator's rate limits and budgets: :func:`limited_calls`.

``toolbus call`` is no front door (it holds the broker's credentials, so
permissions are not its to apply), but a script that calls a paid API in a loop
from the command line must not escape the limits the operator set for that
API: when ``toolbus.toml`` has ``[[limits]]`` or ``[[budgets]]``, each call is
counted in them for its ``--user`` (and ``--group`` s), in the configured state
store, as a door's would be. A refused call exits with :data:`EXIT_LIMITED`
and says which limit and when to try again. Cached answers are not used: the
command shows what the tool says now.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolbus.application.agent.steps import (
    CallAnswered,
    CallEnded,
    CallPermitted,
    CallSteps,
    CallStopped,
    CheckedCall,
)
from toolbus.application.doors.steps import call_steps
from toolbus.application.doors.steps.budgets import BudgetStep
from toolbus.application.doors.steps.limits import LimitStep
from toolbus.domain.calls.arguments import apply_options
from toolbus.domain.config.registry import UNDEFINED_STATE, Registry
from toolbus.domain.limits.settings import Prices, parse_limit_settings
from toolbus.runtime import door_state, seal_keys_of
from toolbus.settings import Settings

#: ``toolbus call``'s exit status for a call a rate limit or a spent budget refused:
#: sysexits' EX_TEMPFAIL, "try again later".
EXIT_LIMITED = 75


@dataclass(frozen=True, slots=True)
class LimitedCalls:
    """The limits and budgets calls of ``user`` with ``groups`` pass."""

    steps: CallSteps
    prices: Prices | None
    user: str
    groups: tuple[str, ...]

    async def check(
        self, registry: Registry, tool: str, arguments: Mapping[str, Any]
    ) -> CallPermitted | CallStopped:
        """Count a call of ``tool`` in every limit and budget that counts it."""
        descriptor = registry.tool(tool)
        applied = apply_options(arguments, descriptor.options, {"user": self.user})
        verdict = await self.steps.check(
            CheckedCall(
                user=self.user,
                groups=self.groups,
                state=UNDEFINED_STATE,
                request_id=str(uuid.uuid4()),
                tool_call_id=None,
                tool=descriptor,
                arguments=applied.arguments,
                registry=registry,
                wait=False,
            )
        )
        if isinstance(verdict, CallAnswered):  # no cache step is among them: never so
            return verdict.permitted
        return verdict

    async def ended(
        self, permitted: CallPermitted, tool: str, ok: bool, reported: float | None
    ) -> None:
        """Charge the budgets what the call of ``tool`` cost."""
        cost = None if self.prices is None else self.prices.tool_call(tool, reported)
        await permitted.ended(CallEnded("ok" if ok else "error", cost=cost))


@asynccontextmanager
async def limited_calls(
    settings: Settings, user: str, groups: tuple[str, ...]
) -> AsyncIterator[LimitedCalls | None]:
    """The limits and budgets ``toolbus.toml`` sets, counted in its state store (sealed with
    its seal keys; in memory, counting this command's calls only, when none is set);
    ``None`` when it sets neither."""
    parsed = parse_limit_settings(settings.file)
    if not parsed.limits and not parsed.budgets:
        yield None
        return
    base = settings.file_path.parent if settings.file_path is not None else Path.cwd()
    keys = seal_keys_of(settings, base, door="toolbus call", url=settings.state)
    async with door_state(
        settings.state, settings.state_options, keys, door="toolbus call"
    ) as store:
        steps = [
            step
            for step in call_steps(settings.file, store=store)
            if isinstance(step, LimitStep | BudgetStep)
        ]
        yield LimitedCalls(CallSteps(steps), parsed.prices, user, groups)
