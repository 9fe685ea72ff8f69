"""Asking an MCP client's person to approve a call: elicitation, and input requests.

When a call waits for approval and its caller may decide it (``callers-approve``
in ``[approvals]``: a person confirming what their agent is about to do), the
server asks the client, the way its protocol revision says, if the client
declared it can be asked (the ``elicitation`` capability):

* 2025 revisions: an ``elicitation/create`` request during the ``tools/call``;
  the answer decides the approval, and the call goes on;
* 2026-07-28: the ``tools/call`` answers an ``input_required`` result holding
  the elicitation and, as its request state, the approval's id; the client
  asks its person and calls again with the answer, which decides the approval.

The form asks one yes or no (``approve``) and an optional ``note``. Declining
the form denies the call; dismissing it leaves the approval to the other
approvers, until it expires. A client that cannot be asked, or a caller who
may not decide, waits like any other caller.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import mcp_types as mcp
from mcp.server.context import ServerRequestContext
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from toolbus.application.agent.asking import ApprovalAnswer, ApprovalReply
from toolbus.domain.access.approvals import Approval
from toolbus_mcp.serving.asking import INPUT_STATE_PREFIX

#: The key of the elicitation in an ``input_required`` result and in its answers.
INPUT_KEY = "approval"
#: How a decision a client's person gave was taken (the approval's ``decided_via``).
VIA = "mcp-client"

_FORM: dict[str, Any] = {
    "type": "object",
    "properties": {
        "approve": {
            "type": "boolean",
            "title": "Approve",
            "description": "Let this call be made",
        },
        "note": {"type": "string", "title": "Note", "description": "Why (optional)"},
    },
    "required": ["approve"],
}


class InputNeeded(Exception):
    """The call's client must be asked first: answer its ``tools/call`` with this request."""

    def __init__(self, approval: Approval) -> None:
        super().__init__(approval.id)
        self.approval = approval

    def result(self) -> mcp.InputRequiredResult:
        return mcp.InputRequiredResult(
            input_requests={
                INPUT_KEY: mcp.ElicitRequest(
                    method="elicitation/create", params=form(self.approval)
                )
            },
            request_state=self.approval.id,
            result_type="input_required",
        )


def form(approval: Approval) -> mcp.ElicitRequestFormParams:
    arguments = json.dumps(approval.arguments, ensure_ascii=False)
    return mcp.ElicitRequestFormParams(
        message=(
            f"Approve the call {approval.tool}({arguments})? {approval.reason}. "
            "Nothing is done until you answer."
        ),
        requested_schema=_FORM,
    )


def answer_of(result: mcp.ElicitResult | None) -> ApprovalAnswer | None:
    """The decision a person's answer to the form makes, or ``None`` (dismissed)."""
    if result is None or result.action == "cancel":
        return None
    if result.action == "decline":
        return ApprovalAnswer(False, "declined by the caller", via=VIA)
    content: Mapping[str, Any] = result.content or {}
    note = content.get("note")
    return ApprovalAnswer(
        content.get("approve") is True, note if isinstance(note, str) else None, via=VIA
    )


def can_ask(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether the client declared it can be asked (elicitation)."""
    wanted = mcp.ClientCapabilities(elicitation=mcp.ElicitationCapability())
    return bool(ctx.session.check_client_capability(wanted))


class ClientAsker:
    """The :class:`~toolbus.application.agent.asking.ApprovalListener` of one ``tools/call``."""

    def __init__(self, ctx: ServerRequestContext[Any, Any], caller: str) -> None:
        self.ctx = ctx
        self.caller = caller

    async def __call__(self, approval: Approval) -> ApprovalAnswer | None:
        if not approval.may_decide(self.caller) or not can_ask(self.ctx):
            return None
        if self.ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            raise InputNeeded(approval)
        result = await self.ctx.session.elicit_form(
            form(approval).message, _FORM, related_request_id=self.ctx.request_id
        )
        return answer_of(result)


def reply_of(params: mcp.CallToolRequestParams) -> ApprovalReply | None:
    """The answer a client brings to an approval it was asked about (2026-07-28)."""
    if not params.request_state or params.request_state.startswith(INPUT_STATE_PREFIX):
        return None  # none, or the state of a tool's own questions
    responses = params.input_responses or {}
    given = responses.get(INPUT_KEY)
    answer = answer_of(given) if isinstance(given, mcp.ElicitResult) else None
    return ApprovalReply(params.request_state, answer)
