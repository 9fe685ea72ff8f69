"""What a call policy is asked, and what it may answer.

Permissions decide which groups of tools a caller may *ask for*; a call
policy decides on each *call*, seeing who calls (the user and the groups
granted to the session), the tool (its groups, service and annotations), the
session's state and the call's arguments after the tool's argument options
were applied. It answers one of three things:

* :class:`Permit`: the call goes ahead;
* :class:`Forbid`: the call is refused, and the model reads why;
* :class:`ApproveFirst`: the call waits for a person to approve it.

A policy engine (the ``toolbus.policy_engines`` entry points; Cedar with
``toolbus[policy]``) implements :class:`toolbus.ports.PolicyEngine` and gives
these answers; the front door asks it for every call, after the code hooks
and before anything is sent.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from toolbus.domain.config.descriptors import ToolDescriptor


@dataclass(frozen=True, slots=True)
class PolicyRequest:
    """One call, as a policy sees it.

    ``groups`` are the groups granted to the session (after defaulting and the
    permission check); ``arguments`` are what the tool will be sent (argument
    options applied; values the service takes from its environment are never
    here).
    """

    user: str
    groups: tuple[str, ...]
    tool: ToolDescriptor
    state: str
    arguments: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Permit:
    """The call may go ahead."""


@dataclass(frozen=True, slots=True)
class Forbid:
    """The call is refused. ``reason`` is what the model is told (the operator's words,
    when the policy that forbade it gives some); ``policy`` names that policy, for the
    audit record and the log."""

    reason: str | None = None
    policy: str | None = None


@dataclass(frozen=True, slots=True)
class ApproveFirst:
    """The call waits for a person's approval.

    ``approvers`` names a team of ``[approvals.teams]`` (``None``: the default
    approvers); ``reason`` says why, for the approver.
    """

    approvers: str | None = None
    reason: str | None = None
    policy: str | None = None


PolicyDecision = Permit | Forbid | ApproveFirst

#: The answer of a door with no policy engine.
PERMIT = Permit()
