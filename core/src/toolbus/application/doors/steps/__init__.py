"""The checks every call passes at a front door, one step per concern, in order.

:func:`call_steps` builds a door's steps from the operator's files, and every
door gets them through it (``toolbus.runtime.opened_door``, or
:meth:`~toolbus.application.doors.door.FrontDoor.from_files`):

1. :mod:`~toolbus.application.doors.steps.policy`: the call policy ``[policy]``
   names, on the arguments: permit, forbid, or ask a person first;
2. :mod:`~toolbus.application.doors.steps.limits`: rate limits and quotas
   (``[[limits]]``), counted in the door's store;
3. :mod:`~toolbus.application.doors.steps.budgets`: budgets (``[[budgets]]``),
   what callers may spend, charged what each call cost (``[costs]``);
4. :mod:`~toolbus.application.doors.steps.approvals`: calls a person approves
   first (``[approvals]``), waiting in the door's store;
5. :mod:`~toolbus.application.doors.steps.cache`: answers of read-only tools
   (a descriptor's ``cache``), kept in the door's store: last, so that only a
   call every other step let through is answered from it.

The shape of a step and the runner are in
:mod:`toolbus.application.agent.steps` (docs/architecture.md, "Call steps").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from toolbus.application.agent.steps import CallStep
from toolbus.application.doors.approvals import ApprovalBook
from toolbus.application.doors.budgets import Budgets
from toolbus.application.doors.counters import Counters
from toolbus.application.doors.steps.approvals import ApprovalStep
from toolbus.application.doors.steps.budgets import BudgetStep
from toolbus.application.doors.steps.cache import CacheStep
from toolbus.application.doors.steps.limits import LimitStep
from toolbus.application.doors.steps.policy import PolicyStep
from toolbus.domain.access.approvals import SECTION as APPROVALS_SECTION
from toolbus.domain.access.approvals import parse_approval_settings
from toolbus.domain.errors import ConfigError, Problem
from toolbus.domain.limits.settings import parse_limit_settings
from toolbus.ports import PolicyEngine, StateStore


def call_steps(
    settings: Mapping[str, Any] | None,
    *,
    engine: PolicyEngine | None = None,
    store: StateStore | None = None,
) -> tuple[CallStep, ...]:
    """The steps ``settings`` (the parsed ``toolbus.toml``) describe, in the order they run.

    ``engine`` is the call policy ``[policy]`` names, loaded by the caller (its
    engine is a plugin); ``store`` is where approvals wait, limits and budgets
    are counted and cached answers kept (without one, calls that need approval
    are refused and cached tools are always called; limits and budgets need
    one). The approvals and cache steps are always there: a tool's descriptor
    may ask for approval, or for its answers to be cached, whatever
    ``toolbus.toml`` says. :class:`~toolbus.domain.errors.ConfigError` names
    every problem of ``[approvals]``, ``[[limits]]``, ``[[budgets]]`` and ``[costs]``.
    """
    approvals = parse_approval_settings((settings or {}).get(APPROVALS_SECTION))
    limits = parse_limit_settings(settings)
    book = (
        None
        if store is None
        else ApprovalBook(
            store,
            max_pending=approvals.max_pending,
            max_pending_per_user=approvals.pending_per_user,
        )
    )
    if store is None and (limits.limits or limits.budgets):
        raise ConfigError(
            [
                Problem(
                    "toolbus.toml",
                    "[[limits]]" if limits.limits else "[[budgets]]",
                    "limits and budgets are counted in a state store, and this door was "
                    "given none; open it with toolbus.runtime.opened_door (or give it a store)",
                )
            ]
        )
    steps: list[CallStep] = []
    if engine is not None:
        steps.append(PolicyStep(engine))
    approval = ApprovalStep(approvals, book, policy=engine)
    if limits.limits and store is not None:
        steps.append(LimitStep(limits.limits, Counters(store), approval))
    if limits.budgets and limits.prices is not None and store is not None:
        budgets = Budgets(limits.budgets, store, currency=limits.prices.currency)
        steps.append(BudgetStep(budgets))
    steps.append(approval)
    if store is not None:
        steps.append(CacheStep(store))
    return tuple(steps)
