"""The checks every call passes at a front door, one step per concern, in order.

:func:`call_steps` builds a door's steps from the operator's files, and every
door gets them through it (``toolbus.runtime.opened_door``, or
:meth:`~toolbus.application.doors.door.FrontDoor.from_files`):

1. :mod:`~toolbus.application.doors.steps.policy`: the call policy ``[policy]``
   names, on the arguments: permit, forbid, or ask a person first;
2. :mod:`~toolbus.application.doors.steps.approvals`: calls a person approves
   first (``[approvals]``), waiting in the door's store.

The shape of a step and the runner are in
:mod:`toolbus.application.agent.steps` (docs/architecture.md, "Call steps").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from toolbus.application.agent.steps import CallStep
from toolbus.application.doors.approvals import ApprovalBook
from toolbus.application.doors.steps.approvals import ApprovalStep
from toolbus.application.doors.steps.policy import PolicyStep
from toolbus.domain.access.approvals import SECTION as APPROVALS_SECTION
from toolbus.domain.access.approvals import parse_approval_settings
from toolbus.ports import PolicyEngine, StateStore


def call_steps(
    settings: Mapping[str, Any] | None,
    *,
    engine: PolicyEngine | None = None,
    store: StateStore | None = None,
) -> tuple[CallStep, ...]:
    """The steps ``settings`` (the parsed ``toolbus.toml``) describe, in the order they run.

    ``engine`` is the call policy ``[policy]`` names, loaded by the caller (its
    engine is a plugin); ``store`` is where approvals wait (without one, calls
    that need approval are refused). The approvals step is always there: a
    tool's descriptor may ask for approval whatever ``toolbus.toml`` says.
    :class:`~toolbus.domain.errors.ConfigError` names every problem of ``[approvals]``.
    """
    approvals = parse_approval_settings((settings or {}).get(APPROVALS_SECTION))
    book = (
        None
        if store is None
        else ApprovalBook(
            store,
            max_pending=approvals.max_pending,
            max_pending_per_user=approvals.pending_per_user,
        )
    )
    steps: list[CallStep] = []
    if engine is not None:
        steps.append(PolicyStep(engine))
    steps.append(ApprovalStep(approvals, book, policy=engine))
    return tuple(steps)
