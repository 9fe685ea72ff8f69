"""``/v1/approvals``: calls waiting for a person, and deciding them.

A caller sees the approvals they may decide and those of their own calls;
any other approval's id does not exist for them (404, as an unknown one). An
approval is decided once: a second decision answers 409, naming who decided
first. Decisions reach the waiting call on whichever replica holds it, through
the state store approvals are kept in.
"""

from __future__ import annotations

from typing import Any

from fastapi import Request

from toolbus.application.doors.approvals import ApprovalBook
from toolbus.application.identity.bearer import Principal
from toolbus.domain.access.approvals import Approval
from toolbus.domain.errors import ApprovalNotFound
from toolbus_gateway.http_auth import gateway_of
from toolbus_gateway.models import ApprovalList, ApprovalView, Decision
from toolbus_gateway.routing import v1_router
from toolbus_gateway.tool_routes import CallerDep

router = v1_router()


def view(approval: Approval) -> ApprovalView:
    return ApprovalView.model_validate(approval.model_dump(exclude={"used"}))


def _book(request: Request, approval_id: str) -> ApprovalBook:
    door = gateway_of(request).door
    assert door is not None
    if door.book is None:
        raise ApprovalNotFound(approval_id)
    return door.book


async def _visible(book: ApprovalBook, user: str, approval_id: str) -> Approval:
    approval = await book.get(approval_id)
    if approval is None or not (approval.may_decide(user) or approval.user == user):
        raise ApprovalNotFound(approval_id)
    return approval


@router.get("/approvals", response_model=ApprovalList, summary="Pending approvals")
async def list_approvals(request: Request, caller: CallerDep) -> ApprovalList:
    """The pending approvals the caller may decide, or that its calls wait on."""
    door = gateway_of(request).door
    assert door is not None
    if door.book is None:
        return ApprovalList(approvals=[])
    pending = await door.book.pending(caller.user)
    return ApprovalList(approvals=[view(approval) for approval in pending])


@router.get(
    "/approvals/{approval_id}",
    response_model=ApprovalView,
    summary="One approval",
    responses={404: {"description": "No such approval for the caller"}},
)
async def get_approval(request: Request, caller: CallerDep, approval_id: str) -> ApprovalView:
    """An approval the caller may decide or asked for, pending or decided."""
    book = _book(request, approval_id)
    return view(await _visible(book, caller.user, approval_id))


async def _decide(
    request: Request, caller: Principal, approval_id: str, approve: bool, body: Decision | None
) -> ApprovalView:
    book = _book(request, approval_id)
    await _visible(book, caller.user, approval_id)
    decided = await book.decide(
        approval_id, caller.user, approve, None if body is None else body.note, via=caller.method
    )
    gateway_of(request).changes.mark("approvals")
    return view(decided)


_DECIDING: dict[int | str, dict[str, Any]] = {
    403: {"description": "The caller is not among the approval's approvers"},
    404: {"description": "No such approval for the caller"},
    409: {"description": "Decided already, or expired"},
}


@router.post(
    "/approvals/{approval_id}/approve",
    response_model=ApprovalView,
    summary="Approve a call",
    responses=_DECIDING,
)
async def approve(
    request: Request, caller: CallerDep, approval_id: str, body: Decision | None = None
) -> ApprovalView:
    """Approve: the waiting call is made, and audited with the caller as its approver."""
    return await _decide(request, caller, approval_id, True, body)


@router.post(
    "/approvals/{approval_id}/deny",
    response_model=ApprovalView,
    summary="Deny a call",
    responses=_DECIDING,
)
async def deny(
    request: Request, caller: CallerDep, approval_id: str, body: Decision | None = None
) -> ApprovalView:
    """Deny: the call is not made; its caller's model reads the denial and the note."""
    return await _decide(request, caller, approval_id, False, body)
