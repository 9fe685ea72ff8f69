"""The console's tasks panel: the calls running as tasks now, on every replica.

Operators see every owner's open tasks (``working`` or ``input-required``),
what each waits for, and may cancel one (a form with the console session's
token, like the approvals panel's buttons). The panel is refreshed whenever
the store's index of open tasks changes.
"""

from __future__ import annotations

import time
from html import escape
from urllib.parse import parse_qs

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from toolbus.domain.errors import TaskClosed, TaskNotFound
from toolbus.domain.tasks import Task
from toolbus_gateway.console_sessions import same_token
from toolbus_gateway.http_auth import console_caller, console_session, gateway_of

router = APIRouter(prefix="/console", include_in_schema=False)
#: Tasks shown at most (the oldest first).
TASK_ROWS = 100


def tasks_panel(open_tasks: list[Task], csrf: str) -> str:
    """The panel's HTML: one row per open task, with a cancel button."""
    if not open_tasks:
        return '<p class="empty">No call is running as a task.</p>'
    now = time.time()
    rows = []
    for task in open_tasks[:TASK_ROWS]:
        waits = task.message or ""
        rows.append(
            f'<tr data-task="{escape(task.id)}" data-status="{escape(task.status)}">'
            f"<td>{escape(task.owner)}</td><td>{escape(task.tool)}</td>"
            f"<td>{escape(task.door)}</td><td>{escape(task.status)}</td>"
            f"<td>{escape(waits)}</td><td>{max(0, int(now - task.created_at))} s</td>"
            f'<td><form method="post" action="/console/tasks/{escape(task.id)}" '
            f'class="cancel"><input type="hidden" name="csrf" value="{escape(csrf)}">'
            '<button type="submit">cancel</button></form></td></tr>'
        )
    more = len(open_tasks) - TASK_ROWS
    note = f'<p class="summary">and {more} more</p>' if more > 0 else ""
    return (
        "<table><thead><tr><th>user</th><th>tool</th><th>door</th><th>status</th>"
        "<th>waiting for</th><th>started</th><th></th></tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table>"
        + note
    )


async def render(request: Request) -> str:
    """The panel for the console's caller (their session's token in its forms)."""
    gateway = gateway_of(request)
    session = await console_session(request)
    csrf = session.csrf if session is not None else ""
    if gateway.tasks is None:
        return tasks_panel([], csrf)
    return tasks_panel(await gateway.tasks.book.open(), csrf)


@router.post("/tasks/{task_id}")
async def cancel(request: Request, task_id: str) -> Response:
    """A cancel button of the tasks panel."""
    caller = await console_caller(request)
    form = parse_qs((await request.body()).decode("utf-8", "replace"))
    session = await console_session(request)
    if session is None or not same_token((form.get("csrf") or [""])[0], session.csrf):
        return _failed("that form did not come from this console; nothing was done", 403)
    gateway = gateway_of(request)
    if gateway.tasks is None:
        return _failed("the gateway is not running", 503)
    try:
        await gateway.tasks.cancel(caller.user, task_id, operator=True)
    except TaskNotFound as exc:
        return _failed(str(exc), 404)
    except TaskClosed as exc:
        return _failed(str(exc), 409)
    return RedirectResponse("/console", status_code=303)


def _failed(message: str, status_code: int) -> HTMLResponse:
    body = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8"><title>toolbus gateway'
        '</title><link rel="stylesheet" href="/console/static/console.css"></head><body>'
        f'<main class="login"><h1>toolbus gateway</h1><p class="error">{escape(message)}</p>'
        '<p><a href="/console">Back to the console</a></p></main></body></html>'
    )
    return HTMLResponse(body, status_code=status_code)
