"""The operators' console: one server-rendered page that keeps itself current over SSE.

The page is plain HTML in panels (pending approvals, tasks, services, workflow,
tools, audit, call rates), of the whole gateway: with a state store, every
process sharing it (:mod:`toolbus_gateway.figures`). Each panel is also
served on its own as a fragment; the console's small script listens to
``/console/events`` and, when an event says a panel changed, fetches that
fragment again and swaps it in. Nothing is built on
the client, so the page works without a build step, and a thousand tools are
a thousand table rows, filtered in place.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from html import escape
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import parse_qs

from fastapi import APIRouter, Depends, Request
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse, Response
from sse_starlette import EventSourceResponse

from toolbus.application.identity.bearer import AuthFailure, Principal
from toolbus.application.identity.credentials import Secret
from toolbus.domain.errors import ApprovalClosed, ApprovalNotFound, NotAnApprover
from toolbus_gateway import console_tasks
from toolbus_gateway.asyncapi import CONSOLE_PATH as ASYNCAPI_PATH
from toolbus_gateway.console_sessions import (
    COOKIE_PATH,
    LOGIN_CSRF_COOKIE,
    SESSION_COOKIE,
    new_csrf_token,
    same_token,
)
from toolbus_gateway.events import Event
from toolbus_gateway.figures import counted
from toolbus_gateway.gateway import Gateway
from toolbus_gateway.http_auth import (
    ConsoleForbidden,
    authenticate,
    console_caller,
    console_session,
    console_sessions,
    gateway_of,
)
from toolbus_gateway.streams import open_stream, sse, take_stream
from toolbus_gateway.workflow import build_workflow, render_svg

router = APIRouter(prefix="/console", include_in_schema=False)
STATIC = Path(__file__).parent / "static"

ConsoleCaller = Annotated[Principal, Depends(console_caller)]


# ------------------------------------------------------------------ pages


@router.get("", response_class=HTMLResponse)
async def console_page(request: Request) -> Response:
    gateway = gateway_of(request)
    try:
        caller = await console_caller(request)
    except AuthFailure as failure:
        if failure.reason == "missing" and _wants_html(request):
            # A browser opening the console: the log-in page is the page, not a failure
            # (a 401 would be an error in its console on every visit).
            return _login(request, "", status_code=200)
        message = "" if failure.reason == "missing" else failure.message
        return _login(request, message)
    except ConsoleForbidden as refused:
        if not _wants_html(request):
            raise  # a program asking: the API's JSON answer
        return _login(request, refused.message, status_code=403)
    session = await console_session(request)
    await gateway.figures.refresh()
    # A bearer-header caller has no session, and so no log-out form to protect.
    return HTMLResponse(
        _page(
            gateway,
            caller,
            session.csrf if session is not None else "",
            await console_tasks.render(request),
        )
    )


def _wants_html(request: Request) -> bool:
    return "text/html" in request.headers.get("accept", "")


async def favicon() -> FileResponse:
    """The gateway's icon, at ``/favicon.ico`` too: browsers ask for it on any page."""
    return FileResponse(STATIC / "favicon.svg", media_type="image/svg+xml")


@router.post("/login")
async def login(request: Request) -> Response:
    form = parse_qs((await request.body()).decode("utf-8", "replace"))
    if not same_token(_field(form, "csrf"), request.cookies.get(LOGIN_CSRF_COOKIE)):
        return _login(request, "the log-in form expired; log in again", status_code=403)
    token = _field(form, "token").strip()
    try:
        caller = await authenticate(request, Secret(token) if token else None)
    except AuthFailure as failure:
        return _login(request, failure.message)
    if not gateway_of(request).may_use_console(caller.user):
        # A person at the log-in form: a page saying why, to log in as someone else.
        return _login(request, ConsoleForbidden(caller.user).message, status_code=403)
    sessions = console_sessions(request)
    cookie, _ = sessions.issue(caller)
    response = RedirectResponse("/console", status_code=303)
    response.set_cookie(
        SESSION_COOKIE,
        cookie,
        max_age=int(sessions.ttl),
        httponly=True,
        samesite="strict",
        secure=sessions.secure(request.url.scheme, request.headers),
        path=COOKIE_PATH,
    )
    response.delete_cookie(LOGIN_CSRF_COOKIE, path=COOKIE_PATH)
    return response


@router.post("/logout")
async def logout(request: Request) -> Response:
    form = parse_qs((await request.body()).decode("utf-8", "replace"))
    session = await console_session(request)
    if session is not None:
        if not same_token(_field(form, "csrf"), session.csrf):
            return HTMLResponse(_document("toolbus gateway", _FORBIDDEN), status_code=403)
        await console_sessions(request).revoke(session, gateway_of(request).state_store)
    response = RedirectResponse("/console", status_code=303)
    response.delete_cookie(SESSION_COOKIE, path=COOKIE_PATH)
    return response


_FORBIDDEN = (
    '<main class="login"><h1>toolbus gateway</h1><p class="error">That form did not come '
    'from this console; nothing was done. <a href="/console">Back to the console</a></p></main>'
)


def _field(form: dict[str, list[str]], name: str) -> str:
    return (form.get(name) or [""])[0]


def _login(request: Request, message: str, status_code: int = 401) -> HTMLResponse:
    """The log-in page, with a fresh CSRF token in its form and in a cookie of its own."""
    csrf = new_csrf_token()
    response = HTMLResponse(_login_page(message, csrf), status_code=status_code)
    response.set_cookie(
        LOGIN_CSRF_COOKIE,
        csrf,
        httponly=True,
        samesite="strict",
        secure=console_sessions(request).secure(request.url.scheme, request.headers),
        path=COOKIE_PATH,
    )
    return response


@router.get("/fragments/{name}", response_class=HTMLResponse)
async def fragment(request: Request, name: str, caller: ConsoleCaller) -> HTMLResponse:
    if name == "approvals":
        session = await console_session(request)
        csrf = session.csrf if session is not None else ""
        return HTMLResponse(_approvals(gateway_of(request), caller, csrf))
    if name == "tasks":
        return HTMLResponse(await console_tasks.render(request))
    render = FRAGMENTS.get(name)
    if render is None:
        return HTMLResponse(f"<p>no panel {escape(name)!r}</p>", status_code=404)
    gateway = gateway_of(request)
    await gateway.figures.refresh()
    return HTMLResponse(render(gateway))


@router.get("/events")
async def events(request: Request, caller: ConsoleCaller) -> EventSourceResponse:
    """Which panels changed: one event per change, named after the panel."""
    gateway = gateway_of(request)
    leave = take_stream(gateway, caller.user)

    async def changes() -> AsyncIterator[dict[str, Any]]:
        async with gateway.console.subscribe() as received:
            yield sse(Event("hello", {"user": caller.user}))
            async for event in received:
                yield sse(event)

    return open_stream(gateway, changes(), leave)


@router.post("/approvals/{approval_id}")
async def decide(request: Request, approval_id: str, caller: ConsoleCaller) -> Response:
    """An approve or deny button of the approvals panel (a form with the session's token)."""
    form = parse_qs((await request.body()).decode("utf-8", "replace"))
    session = await console_session(request)
    if session is None or not same_token(_field(form, "csrf"), session.csrf):
        return HTMLResponse(_document("toolbus gateway", _FORBIDDEN), status_code=403)
    gateway = gateway_of(request)
    book = None if gateway.door is None else gateway.door.book
    decision = _field(form, "decision")
    if book is None or decision not in ("approve", "deny"):
        return _decision_failed("that form did not say approve or deny", 400)
    try:
        await book.decide(
            approval_id,
            caller.user,
            decision == "approve",
            _field(form, "note") or None,
            via=f"console ({caller.method})",
        )
    except NotAnApprover as exc:
        return _decision_failed(str(exc), 403)
    except ApprovalClosed as exc:
        return _decision_failed(str(exc), 409)
    except ApprovalNotFound as exc:
        return _decision_failed(str(exc), 404)
    gateway.pending_approvals = await book.pending()
    gateway.changes.mark("approvals")
    return RedirectResponse("/console", status_code=303)


def _decision_failed(message: str, status_code: int) -> HTMLResponse:
    body = (
        f'<main class="login"><h1>toolbus gateway</h1><p class="error">{escape(message)}</p>'
        '<p><a href="/console">Back to the console</a></p></main>'
    )
    return HTMLResponse(_document("toolbus gateway", body), status_code=status_code)


# ------------------------------------------------------------------ panels


def _approvals(gateway: Gateway, caller: Principal, csrf: str) -> str:
    now = time.time()
    pending = [a for a in gateway.pending_approvals if a.open_at(now)]
    if not pending:
        return '<p class="empty">No call is waiting for approval.</p>'
    rows = []
    for approval in pending:
        arguments = json.dumps(approval.arguments, ensure_ascii=False)
        if approval.may_decide(caller.user):
            action = (
                f'<form method="post" action="/console/approvals/{escape(approval.id)}" '
                f'class="decide"><input type="hidden" name="csrf" value="{escape(csrf)}">'
                '<input name="note" maxlength="500" placeholder="note (optional)" '
                'aria-label="note">'
                '<button type="submit" name="decision" value="approve">approve</button> '
                '<button type="submit" name="decision" value="deny">deny</button></form>'
            )
        else:
            action = '<span class="empty" title="not among its approvers">not yours</span>'
        approvers = ", ".join(approval.approvers)
        if approval.team:
            approvers = f"{approval.team}: {approvers}"
        since = datetime.fromtimestamp(approval.created_at, UTC)
        # data-label: on a narrow window each approval is a card, its cells labelled.
        rows.append(
            f'<tr data-approval="{escape(approval.id)}" data-tool="{escape(approval.tool)}">'
            f'<td class="since" data-label="waiting since (UTC)">'
            f'<time datetime="{since.isoformat()}">{since:%H:%M:%S}</time> '
            f'<span class="waited" data-since="{int(approval.created_at * 1000)}">'
            f"({human_seconds(now - approval.created_at)})</span></td>"
            f'<td data-label="user">{escape(approval.user)}</td>'
            f'<td data-label="tool">{escape(approval.tool)}</td>'
            f'<td class="arguments" data-label="arguments">{escape(arguments)}</td>'
            f'<td data-label="why">{escape(approval.reason)}</td>'
            f'<td class="approvers" data-label="approvers">{escape(approvers)}</td>'
            f'<td class="expires" data-label="expires in" '
            f'data-expires="{int(approval.expires_at * 1000)}">'
            f"{human_seconds(approval.expires_at - now)}</td>"
            f'<td class="decision">{action}</td></tr>'
        )
    return (
        "<table><thead><tr><th>waiting since (UTC)</th><th>user</th><th>tool</th>"
        "<th>arguments</th><th>why</th><th>approvers</th><th>expires in</th>"
        "<th>decision</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table>"
    )


def human_seconds(seconds: float) -> str:
    """``42 s``, ``4 m 59 s``, ``2 h 5 m``: a duration as a person reads it (the
    console's script writes the same as it ticks)."""
    whole = max(0, int(seconds))
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} m {whole % 60} s"
    return f"{whole // 3600} h {whole % 3600 // 60} m"


def _services(gateway: Gateway) -> str:
    assert gateway.watch is not None
    now = time.time()
    live = gateway.watch.services()
    if not live:
        return '<p class="empty">No service has announced itself yet.</p>'
    rows = []
    for service in live:
        heard_ms = int((now - service.age) * 1000)
        replicas = ", ".join(escape(r) for r in service.replicas)
        rows.append(
            f'<tr data-service="{escape(service.service)}">'
            f'<td title="{escape(service.request_queue or "")}">{escape(service.service)}</td>'
            f'<td title="{replicas}">{len(service.replicas)}</td>'
            f'<td class="age" data-heard="{heard_ms}">{service.age:.0f} s ago</td>'
            f'<td title="{escape(", ".join(service.tools))}">{len(service.tools)}</td></tr>'
        )
    return (
        "<table><thead><tr><th>service</th><th>replicas</th><th>announced</th>"
        "<th>tools</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table>"
    )


def _workflow(gateway: Gateway) -> str:
    workflow = build_workflow(gateway.registry.tools.values())
    if not workflow.edges:
        note = '<p class="empty">No tool changes the state: every tool is offered as it is.</p>'
        return note + render_svg(workflow)
    return render_svg(workflow)


def _tools(gateway: Gateway) -> str:
    registry = gateway.registry
    groups = registry.groups()
    sections = []
    for group, tools in sorted(groups.items()):
        rows = "".join(
            f'<tr data-tool="{escape(t.name)}"><td>{escape(t.name)}</td>'
            f"<td>{escape(', '.join(t.applicable_states) if t.applicable_states else 'any')}</td>"
            f"<td>{escape(t.state or '-')}</td><td>{escape(t.service or '-')}</td></tr>"
            for t in tools
        )
        sections.append(
            f'<details class="group" data-group="{escape(group)}"'
            f"{' open' if len(groups) == 1 else ''}>"
            f"<summary>{escape(group)} "
            f'<span class="count">{counted(len(tools), "tool")}</span></summary>'
            "<table><thead><tr><th>tool</th><th>offered in</th><th>moves to</th>"
            f"<th>service</th></tr></thead><tbody>{rows}</tbody></table></details>"
        )
    total = len(registry.tools)
    return (
        f'<p class="summary">{counted(total, "tool")} in {counted(len(groups), "group")}, '
        # Configured, as the tools name them; the live panel lists those announcing.
        f"{counted(len(registry.services), 'configured service')}.</p>" + "".join(sections)
    )


def _audit(gateway: Gateway) -> str:
    rows = gateway.figures.audit_rows()
    if not rows:
        return '<p class="empty">No session has ended yet.</p>'
    body = "".join(
        f'<tr class="{escape(row.kind)}">'
        f"<td>{row.started_at:%H:%M:%S}</td><td>{escape(row.user)}</td>"
        f"<td>{escape(row.outcome)}</td><td>{escape(row.requested)}</td>"
        f"<td>{escape(row.detail)}</td></tr>"
        for row in rows
    )
    return (
        "<table><thead><tr><th>time (UTC)</th><th>user</th><th>outcome</th>"
        "<th>requested groups</th><th>detail</th></tr></thead><tbody>" + body + "</tbody></table>"
    )


def _rates(gateway: Gateway) -> str:
    rows = gateway.figures.rates()
    if not rows:
        return '<p class="empty">No calls through this gateway yet.</p>'
    body = "".join(
        f'<tr data-tool="{escape(r.tool)}"><td>{escape(r.tool)}</td><td>{r.per_minute:.0f}</td>'
        f"<td>{r.calls}</td><td>{r.errors}</td><td>{r.mean_ms:.1f}</td><td>{r.max_ms:.1f}</td></tr>"
        for r in rows
    )
    return (
        "<table><thead><tr><th>tool</th><th>calls/min</th><th>calls</th><th>errors</th>"
        "<th>mean ms</th><th>max ms</th></tr></thead><tbody>" + body + "</tbody></table>"
    )


def _status(gateway: Gateway) -> str:
    readiness = gateway.readiness()
    checks = " · ".join(f"{escape(k)}: {escape(v)}" for k, v in readiness.checks.items())
    state = "ready" if readiness.ready else "not-ready"
    # Several processes (workers, replicas sharing the state store): their figures added up.
    figures = gateway.figures
    processes = figures.processes
    named = counted(processes, "gateway process", "gateway processes")
    whole = f' · <span class="processes">{named}</span>'
    return (
        f'<span class="badge {state}">{"ready" if readiness.ready else "not ready"}</span> '
        f"{checks} · {counted(gateway.held_sessions(), 'open session')} · "
        f"{counted(figures.event_streams(), 'event stream')}" + (whole if processes > 1 else "")
    )


FRAGMENTS: dict[str, Callable[[Gateway], str]] = {
    "status": _status,
    "services": _services,
    "workflow": _workflow,
    "tools": _tools,
    "audit": _audit,
    "rates": _rates,
}
#: Which panels an event refreshes.
REFRESHES = {
    "approvals": ["approvals"],
    "tasks": ["tasks"],
    "services": ["services", "status"],
    "registry": ["workflow", "tools", "status"],
    "audit": ["audit"],
    "stats": ["rates"],
    "sessions": ["status"],
}


def _panel(title: str, name: str, body: str, wide: bool = False) -> str:
    return (
        f'<section class="panel{" wide" if wide else ""}"><h2>{escape(title)}</h2>'
        f'<div id="{name}" data-fragment="{name}">{body}</div></section>'
    )


def _page(gateway: Gateway, caller: Principal, csrf: str, tasks: str = "") -> str:
    panels = "".join(
        [
            _panel("Pending approvals", "approvals", _approvals(gateway, caller, csrf), wide=True),
            _panel("Tasks", "tasks", tasks, wide=True),
            _panel("Live services", "services", _services(gateway)),
            _panel("Call rates", "rates", _rates(gateway)),
            _panel("State workflow", "workflow", _workflow(gateway), wide=True),
            _panel("Recent audit records", "audit", _audit(gateway), wide=True),
        ]
    )
    tools_panel = (
        '<section class="panel wide"><h2>Tools by group and state</h2>'
        '<input id="tool-filter" type="search" placeholder="filter tools by name" '
        'aria-label="filter tools">'
        f'<div id="tools" data-fragment="tools">{_tools(gateway)}</div></section>'
    )
    return _document(
        "toolbus gateway",
        f'<header><h1>toolbus gateway</h1><div id="status" data-fragment="status">'
        f"{_status(gateway)}</div>"
        f'<nav><a href="{ASYNCAPI_PATH}" type="application/json">AsyncAPI document</a></nav>'
        f'<form method="post" action="/console/logout"><span>{escape(caller.user)}</span> '
        f'<input type="hidden" name="csrf" value="{escape(csrf)}">'
        f'<button type="submit">log out</button></form></header>'
        f'<main data-refreshes="{escape(json.dumps(REFRESHES))}">{panels}{tools_panel}</main>'
        '<script src="/console/static/console.js" defer></script>',
    )


def _login_page(message: str, csrf: str) -> str:
    error = f'<p class="error">{escape(message)}</p>' if message else ""
    return _document(
        "toolbus gateway: log in",
        '<main class="login"><h1>toolbus gateway</h1>'
        "<p>The console is for operators. Log in with your API key or token.</p>"
        f"{error}"
        '<form method="post" action="/console/login">'
        f'<input type="hidden" name="csrf" value="{escape(csrf)}">'
        '<label>API key or JWT <input type="password" name="token" autocomplete="off" '
        'required autofocus></label> <button type="submit">log in</button></form></main>',
    )


def _document(title: str, body: str) -> str:
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(title)}</title>"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<link rel="icon" href="/console/static/favicon.svg" type="image/svg+xml">'
        '<link rel="stylesheet" href="/console/static/console.css">'
        f"</head><body>{body}</body></html>"
    )
