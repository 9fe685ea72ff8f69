"""Calls a person approves first: the ``[approvals]`` table, and the approvals themselves.

A call needs approval when its tool's descriptor says so (``"approval":
"always"``), when the operator lists the tool (``[approvals] tools``), or when
a call policy answers :class:`~toolbus.domain.access.policy.ApproveFirst`.
Such a call waits, as an :class:`Approval`, until one of its approvers
approves or denies it, or its time runs out; only an approved call is made.

::

    [approvals]
    timeout = 300                # seconds a call waits for a decision
    approvers = ["ops"]          # who decides, unless a team is named
    callers-approve = false      # the caller may decide its own calls (a person
                                 # confirming what their agent is about to do)
    tools = ["delete-account"]   # calls of these tools always need approval
    max-pending = 1000           # approvals waiting at once, at most
    max-pending-per-user = 20    # of those, one user's calls at most

    [approvals.teams]            # teams a tool's "approval" or a policy may name
    finance = ["fiona", "ops"]

What an approver sees of the arguments is :func:`redacted_arguments`:
arguments whose names say they are secret (``password``, ``token``, ``api_key``
...) or whose schema says ``"format": "password"`` or ``"writeOnly": true``
are replaced, and long values are cut. The values themselves are never kept
in an approval: a call that is approved goes ahead with the arguments its
caller holds, which :func:`approval_key` matches by digest.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from toolbus.domain.access.policy import ApproveFirst
from toolbus.domain.config.descriptors import ToolDescriptor
from toolbus.domain.errors import ApprovalClosed, ConfigError, NotAnApprover, Problem

SECTION = "approvals"
DEFAULT_TIMEOUT = 300.0
#: Pending approvals a door keeps at once; beyond it, calls needing one are refused.
DEFAULT_MAX_PENDING = 1000
#: Of those, how many one user's calls may take, so that one user cannot fill them.
DEFAULT_MAX_PENDING_PER_USER = 20
#: Characters of an approver's note that are kept.
MAX_NOTE = 500
#: Characters of one argument value an approver is shown.
MAX_SHOWN_VALUE = 200
REDACTED = "[redacted]"

ApprovalStatus = Literal["pending", "approved", "denied", "expired", "withdrawn"]

#: Words in an argument's name that say it holds a secret, whatever the tool says of it.
SECRET_WORDS = frozenset(
    {
        "password",
        "passwd",
        "passphrase",
        "secret",
        "token",
        "apikey",
        "credential",
        "credentials",
        "authorization",
        "auth",
        "cookie",
        "pin",
        "otp",
        "privatekey",
    }
)
_WORDS = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")


def secret_name(name: str) -> bool:
    """Whether an argument's name says it is a secret (``api_key``, ``userPassword``...)."""
    words = [word.lower() for word in _WORDS.findall(name)]
    joined = {a + b for a, b in itertools.pairwise(words)}
    return not SECRET_WORDS.isdisjoint(words) or not SECRET_WORDS.isdisjoint(joined)


class ApprovalSettings(BaseModel):
    """The ``[approvals]`` table; see the module docs."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    timeout: float = Field(DEFAULT_TIMEOUT, gt=0)
    approvers: tuple[str, ...] = ()
    callers_approve: bool = Field(False, alias="callers-approve")
    tools: tuple[str, ...] = ()
    teams: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    max_pending: int = Field(DEFAULT_MAX_PENDING, alias="max-pending", ge=1)
    max_pending_per_user: int | None = Field(None, alias="max-pending-per-user", ge=1)

    @model_validator(mode="after")
    def _share_within_the_whole(self) -> ApprovalSettings:
        given = self.max_pending_per_user
        if given is not None and given > self.max_pending:
            raise ValueError(
                f"max-pending-per-user ({given}) is more than max-pending ({self.max_pending}); "
                "one user's share must fit in the whole: lower it, or raise max-pending"
            )
        return self

    @property
    def pending_per_user(self) -> int:
        """How many of the pending approvals one user's calls may take."""
        if self.max_pending_per_user is not None:
            return self.max_pending_per_user
        return min(DEFAULT_MAX_PENDING_PER_USER, self.max_pending)

    def team(self, name: str | None) -> tuple[str, ...]:
        """The approvers of ``name`` (``None``: the default ``approvers``)."""
        if name is None:
            return self.approvers
        return self.teams.get(name, ())


def parse_approval_settings(
    table: Mapping[str, Any] | None, *, where: str = "toolbus.toml [approvals]"
) -> ApprovalSettings:
    """Validate the ``[approvals]`` table; :class:`ConfigError` lists every problem."""
    try:
        return ApprovalSettings.model_validate(dict(table or {}))
    except ValidationError as exc:
        raise ConfigError(
            Problem(
                where,
                ".".join(str(part) for part in error["loc"]),
                "is not an approvals setting; the settings are timeout, approvers, "
                "callers-approve, tools, teams, max-pending and max-pending-per-user"
                if error["type"] == "extra_forbidden"
                else str(error["msg"]).removeprefix("Value error, "),
            )
            for error in exc.errors()
        ) from None


class Demand(BaseModel):
    """Why a call needs approval, from whom, and for how long it may wait."""

    model_config = ConfigDict(frozen=True)

    team: str | None
    timeout: float
    reason: str


def demanded(
    tool: ToolDescriptor, decision: ApproveFirst | None, settings: ApprovalSettings
) -> Demand | None:
    """Whether a call of ``tool`` needs approval, given the policy's answer; ``None``: no.

    The tool's own ``approval`` names its team and timeout; a policy's answer
    names its team when the tool does not.
    """
    rule = tool.approval
    listed = tool.name in settings.tools
    if rule is None and not listed and decision is None:
        return None
    team = rule.approvers if rule is not None else None
    if team is None and decision is not None:
        team = decision.approvers
    timeout = rule.timeout if rule is not None and rule.timeout is not None else settings.timeout
    if rule is not None or listed:
        reason = f"calls of {tool.name!r} always need approval"
    else:
        assert decision is not None
        reason = (
            decision.reason
            or f"the access policy asks for approval of calls like this one of {tool.name!r}"
        )
    return Demand(team=team, timeout=timeout, reason=reason)


def teams_named(tools: list[ToolDescriptor]) -> dict[str, str]:
    """The teams tools' ``approval`` names, each with a tool naming it (for messages)."""
    return {
        tool.approval.approvers: tool.name
        for tool in tools
        if tool.approval is not None and tool.approval.approvers is not None
    }


def redacted_arguments(arguments: Mapping[str, Any], tool: ToolDescriptor) -> dict[str, Any]:
    """The arguments as an approver may see them: secrets replaced (in nested objects too),
    long values cut."""
    secret = {
        argument.name
        for argument in tool.arguments
        if argument.schema_extras.get("format") == "password"
        or argument.schema_extras.get("writeOnly") is True
    }
    shown: dict[str, Any] = {}
    for name, value in arguments.items():
        if name in secret or secret_name(name):
            shown[name] = REDACTED
        else:
            shown[name] = _cut(value)
    return shown


def _hidden(value: Any) -> Any:
    """``value`` with the secrets inside it (by their keys' names) replaced."""
    if isinstance(value, Mapping):
        return {
            key: REDACTED if secret_name(str(key)) else _hidden(inner)
            for key, inner in value.items()
        }
    if isinstance(value, list | tuple):
        return [_hidden(inner) for inner in value]
    return value


def _cut(value: Any) -> Any:
    value = _hidden(value)
    if isinstance(value, str):
        return value if len(value) <= MAX_SHOWN_VALUE else value[:MAX_SHOWN_VALUE] + "…"
    if isinstance(value, bool | int | float) or value is None:
        return value
    text = json.dumps(value, ensure_ascii=False, default=str)
    return value if len(text) <= MAX_SHOWN_VALUE else text[:MAX_SHOWN_VALUE] + "…"


def approval_key(
    user: str,
    request_id: str,
    tool_call_id: str | None,
    tool: str,
    arguments: Mapping[str, Any],
) -> str:
    """The id of the approval one call needs: the same call asks for the same approval.

    A run resumed elsewhere (another replica, an MCP client answering and
    asking again) finds the approval its call already has; a call with other
    arguments needs one of its own. The arguments enter only as a digest.
    """
    canonical = json.dumps(arguments, sort_keys=True, ensure_ascii=False, default=str)
    digest = hashlib.sha256(
        "\0".join((user, request_id, tool_call_id or "", tool, canonical)).encode()
    )
    return digest.hexdigest()[:32]


class Approval(BaseModel):
    """One call waiting for (or past) a person's decision, as every replica stores it.

    Times are Unix seconds. ``approvers`` are resolved when the approval is made
    (the caller among them when callers approve their own calls). The caller
    decides their own call only when ``callers_approve`` was set then: an
    approver who made the call otherwise cannot approve it. ``decided_via`` is
    how the door that took the decision authenticated ``decided_by``
    (``api-key``, ``jwt``, ``console``, ``mcp-client``, ``cli``...). ``used`` is
    set when an approved call was made: the same call again needs a new approval.
    """

    model_config = ConfigDict(frozen=True, extra="ignore")

    id: str
    user: str
    tool: str
    arguments: dict[str, Any]
    approvers: tuple[str, ...]
    team: str | None = None
    reason: str
    request_id: str
    tool_call_id: str | None = None
    created_at: float
    expires_at: float
    status: ApprovalStatus = "pending"
    decided_by: str | None = None
    decided_via: str | None = None
    decided_at: float | None = None
    note: str | None = None
    used: bool = False
    callers_approve: bool = False

    def to_json(self) -> bytes:
        return self.model_dump_json().encode()

    @classmethod
    def from_json(cls, data: bytes | str) -> Approval:
        return cls.model_validate_json(data)

    def open_at(self, now: float) -> bool:
        """Still waiting for a decision at ``now``."""
        return self.status == "pending" and now < self.expires_at

    def may_decide(self, person: str) -> bool:
        """Whether ``person`` may decide: one of its approvers, and not its caller unless
        callers approve their own calls."""
        return person in self.approvers and (person != self.user or self.callers_approve)

    def deciders(self) -> tuple[str, ...]:
        """Who may decide it."""
        return tuple(person for person in self.approvers if self.may_decide(person))

    def decided(
        self, approver: str, approve: bool, note: str | None, now: float, *, via: str
    ) -> Approval:
        """This approval approved or denied at ``now`` by ``approver``, authenticated ``via``.

        Raises :class:`NotAnApprover` for someone who may not decide it (not among
        its approvers, or its caller when callers do not approve their own calls),
        and :class:`ApprovalClosed` when it was decided already or its time ran out.
        """
        if not self.may_decide(approver):
            own = approver == self.user and approver in self.approvers
            raise NotAnApprover(approver, self.id, self.deciders(), own_call=own)
        if not self.open_at(now):
            status = "expired" if self.status == "pending" else self.status
            why = self.note if status == "withdrawn" else None
            raise ApprovalClosed(self.id, status, self.decided_by, why=why)
        return self.model_copy(
            update={
                "status": "approved" if approve else "denied",
                "decided_by": approver,
                "decided_via": via,
                "decided_at": now,
                "note": (note or "").strip()[:MAX_NOTE] or None,
            }
        )

    def expired(self, now: float) -> Approval:
        return self.model_copy(update={"status": "expired", "decided_at": now})

    def withdrawn(self, now: float, why: str) -> Approval:
        """This approval withdrawn at ``now``: its call will not be made (``why`` says what
        stopped it), so nobody may decide it any more."""
        return self.model_copy(
            update={"status": "withdrawn", "decided_at": now, "note": why[:MAX_NOTE]}
        )

    def spent(self) -> Approval:
        return self.model_copy(update={"used": True})
