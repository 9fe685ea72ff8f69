"""``notifications/tasks``: a ``subscriptions/listen`` stream that names ``taskIds`` is sent
each of the caller's tasks among them as it changes, as ``tasks/get`` would show it, until
it ended (:func:`follow_tasks`, for :class:`~toolbus_mcp.serving.tasks.McpTasks`).

The stream's acknowledgement names the tasks followed: another's task, or none, is
left out, as ``tasks/get`` refuses it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any, Literal, cast

import anyio
import mcp_types as mcp
from mcp.server.context import ServerRequestContext
from mcp.server.session import ServerSession
from mcp.server.subscriptions import SUBSCRIPTION_ID_META_KEY
from mcp.shared.exceptions import MCPError

from toolbus.application.tasks import TaskBook
from toolbus.domain.tasks import Task

#: Tasks one ``subscriptions/listen`` stream follows at most.
MAX_FOLLOWED = 100

#: A ``subscriptions/listen`` handler.
Listen = Callable[
    [ServerRequestContext[Any, Any], mcp.SubscriptionsListenRequestParams],
    Awaitable[mcp.SubscriptionsListenResult],
]
#: How a task is shown to the request's client (``tasks/get``'s ``DetailedTask``).
Shown = Callable[[Task, ServerRequestContext[Any, Any] | None], Awaitable[dict[str, Any]]]


async def follow_tasks(
    ctx: ServerRequestContext[Any, Any],
    params: mcp.SubscriptionsListenRequestParams,
    inner: Listen,
    wanted: object,
    book: TaskBook,
    owner: str,
    shown: Shown,
) -> mcp.SubscriptionsListenResult:
    """The stream ``inner`` serves, and ``notifications/tasks`` for ``owner``'s tasks among
    ``wanted`` (the ``taskIds`` asked for), at each change of theirs."""
    if not isinstance(wanted, list) or not all(isinstance(i, str) for i in wanted):
        raise MCPError(mcp.INVALID_PARAMS, "notifications.taskIds must be a list of task ids")
    # Another's task, or none, is left out of the acknowledgement, as tasks/get refuses it.
    followed = [
        task_id
        for task_id in dict.fromkeys(wanted[:MAX_FOLLOWED])
        if (task := await book.get(task_id)) is not None and task.owner == owner
    ]
    acknowledged = anyio.Event()
    session = _NamingTasks(ctx.session, followed, acknowledged)
    async with anyio.create_task_group() as tasks:
        for task_id in followed:
            tasks.start_soon(_tell, ctx, task_id, acknowledged, book, shown)
        try:
            result = await inner(replace(ctx, session=cast(ServerSession, session)), params)
        finally:
            tasks.cancel_scope.cancel()
    return result


async def _tell(
    ctx: ServerRequestContext[Any, Any],
    task_id: str,
    acknowledged: anyio.Event,
    book: TaskBook,
    shown: Shown,
) -> None:
    """Send the task as it changes, on the listen stream, until it ended."""
    await acknowledged.wait()  # the acknowledgement is the stream's first frame
    meta = {SUBSCRIPTION_ID_META_KEY: ctx.request_id}
    async for task in book.changes(task_id):
        if task is None:
            return
        notification = TaskStatusNotification(params={**await shown(task, ctx), "_meta": meta})
        await ctx.session.send_notification(
            cast(Any, notification), related_request_id=ctx.request_id
        )
        if task.final:
            return


class TaskStatusNotification(mcp.Notification[dict[str, Any], Literal["notifications/tasks"]]):
    """``notifications/tasks``: a task as ``tasks/get`` would show it now."""

    method: Literal["notifications/tasks"] = "notifications/tasks"


class _NamingTasks:
    """The listen request's session, whose acknowledgement also names the tasks followed."""

    def __init__(
        self, session: ServerSession, task_ids: list[str], acknowledged: anyio.Event
    ) -> None:
        self._session = session
        self._task_ids = task_ids
        self._acknowledged = acknowledged

    def __getattr__(self, name: str) -> Any:
        return getattr(self._session, name)

    async def send_notification(self, notification: Any, related_request_id: Any = None) -> None:
        if isinstance(notification, mcp.SubscriptionsAcknowledgedNotification):
            honored = notification.params.notifications.model_dump(by_alias=True, exclude_none=True)
            params = notification.params.model_copy(
                update={
                    "notifications": mcp.SubscriptionFilter.model_validate(
                        {**honored, "taskIds": self._task_ids}
                    )
                }
            )
            notification = notification.model_copy(update={"params": params})
            await self._session.send_notification(notification, related_request_id)
            self._acknowledged.set()
            return
        await self._session.send_notification(notification, related_request_id)
