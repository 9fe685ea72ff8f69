"""A call's answer as it comes: bus stream chunks as MCP progress notifications.

A client that sends a ``progressToken`` in a ``tools/call``'s ``_meta`` asks to
be told how the call goes. The call is then streamed over the bus, and each
chunk of the tool's answer reaches the client as a ``notifications/progress``
while the call runs: ``progress`` counts the chunks so far (so it only grows),
``message`` is the chunk. The result is the whole answer, as without a token
(a tool that answers in one piece sends one notification). Without a token the
call is made as before, in one piece.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from mcp.server.context import ServerRequestContext

from toolbus.application.agent.outcomes import CallOutcome
from toolbus.application.agent.session import AgentSession
from toolbus.domain.errors import ToolCallError

log = logging.getLogger("toolbus.mcp")


def wants_progress(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether the request's ``_meta`` carries a progress token."""
    meta = ctx.meta
    if not meta:  # most requests: no _meta, or none of this
        return False
    token = meta.get("progress_token", meta.get("progressToken"))
    return isinstance(token, str | int) and not isinstance(token, bool)


#: Told of each chunk of a streamed answer: how many so far, and the chunk.
OnChunk = Callable[[int, str], Awaitable[None]]


def notifying(ctx: ServerRequestContext[Any, Any]) -> OnChunk:
    """An :data:`OnChunk` telling the client of each chunk (``notifications/progress``
    against the request's progress token)."""

    async def notify(count: int, chunk: str) -> None:
        try:
            await ctx.session.report_progress(float(count), message=chunk)
        except Exception as exc:  # the client went away: the call still ends as it ends
            log.debug("could not send a progress notification: %s", exc)

    return notify


async def call_reporting(
    session: AgentSession,
    name: str,
    arguments: Mapping[str, Any],
    on_chunk: OnChunk,
    *,
    tool_call_id: str | None = None,
) -> CallOutcome:
    """``session.call(name, arguments)``, streamed: ``on_chunk`` hears each chunk as it comes."""
    stream = await session.stream(name, arguments, tool_call_id)
    if isinstance(stream, CallOutcome):  # refused, or denied before anything was sent
        return stream
    count = 0
    try:
        async for chunk in stream:
            count += 1
            await on_chunk(count, chunk)
    except ToolCallError:
        pass  # recorded as the stream's outcome, as session.call would
    outcome = stream.outcome
    assert outcome is not None  # set once the stream ended, by an answer or an error
    return outcome
