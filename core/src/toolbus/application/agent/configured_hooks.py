"""Configured hooks at the start of a request: call each hook's tool, inject what it returned.

This is the runtime half of docs/hooks.md; the pure half (ids, placement, TTL)
is :mod:`toolbus.domain.hooks.injection`. :meth:`AgentSession.start
<toolbus.application.agent.session.AgentSession.start>` hands in the session's way of
resolving and calling tools, so hook calls take the same path as the model's:
access rules, argument options, code hooks, metrics and the audit record.

What happens to each ``on_request_start`` hook, in configured order:

1. its call name is resolved among the tools the request is *offered*; a tool
   that is not configured, or configured but not offered to this request
   (outside its groups, or not in its state), counts as missing;
2. with a TTL, while the latest pair of that tool and arguments is fresh, the
   tool is not called and the history is left alone;
3. the tool is called, with the hook's ``timeout_seconds`` (else the session's
   limit) as the time limit;
4. its observation is injected with :func:`~toolbus.domain.hooks.injection.inject`.

The calls of step 3 run concurrently, and the results are injected in
configured order, so the history reads as if the hooks had run one after
another, but the request waits for the slowest tool only, not for the sum.

A hook whose tool is missing, raises, answers with an error, is denied by a
code hook or exceeds its time limit is logged (hook, tool, reason; never the
arguments, which may carry user data or secrets) and skipped.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Final

import anyio

from toolbus.application.agent.audit import Refusal
from toolbus.domain.config.descriptors import ToolDescriptor
from toolbus.domain.hooks.configured import HookConfig
from toolbus.domain.hooks.injection import inject, ttl_is_fresh

if TYPE_CHECKING:
    from toolbus.application.agent.outcomes import CallOutcome

log = logging.getLogger("toolbus.hooks")

#: Find a tool among those offered now: (tool, None), or (tool or None, why not).
ResolveTool = Callable[[str], tuple[ToolDescriptor | None, Refusal | None]]
#: Call a tool for a hook: (tool, arguments, time limit or None) -> outcome.
CallTool = Callable[[ToolDescriptor, dict[str, Any], float | None], Awaitable["CallOutcome"]]

_NOT_OFFERED: Final[dict[str, str]] = {
    "unknown": "is not configured",
    "group": "is not in the request's tool groups",
    "state": "is not offered in the request's state",
}


async def run_request_start_hooks(
    hooks: Sequence[HookConfig],
    messages: list[dict[str, Any]],
    *,
    resolve: ResolveTool,
    call: CallTool,
    clock: Callable[[], float],
) -> list[dict[str, Any]]:
    """Run the ``on_request_start`` hooks of ``hooks`` and return the new history.

    ``messages`` is not changed. ``clock`` gives Unix seconds: read once to judge
    freshness, and again when each result arrives, to stamp its expiry.
    """
    now = clock()
    due: list[tuple[int, HookConfig, ToolDescriptor]] = []
    # Every hook fires at request start today; the filter is for the events to come.
    starting = [(i, hook) for i, hook in enumerate(hooks) if hook.event == "on_request_start"]
    for index, hook in starting:
        tool, refusal = resolve(hook.call_name)
        if tool is None or refusal is not None:
            _skip(hook, _NOT_OFFERED[refusal or "unknown"])
            continue
        if hook.refresh_condition is not None and ttl_is_fresh(
            messages, tool_name=hook.call_name, arguments=hook.arguments, now=now
        ):
            log.debug("hook %r: the result of %r is still fresh", hook.display_name, tool.name)
            continue
        due.append((index, hook, tool))

    results: dict[int, tuple[str, int | None]] = {}

    async def run(index: int, hook: HookConfig, tool: ToolDescriptor) -> None:
        content = await _call(hook, tool, call)
        if content is not None:
            results[index] = (content, hook.ttl_expiry(clock()))

    if len(due) == 1:
        await run(*due[0])
    elif due:
        async with anyio.create_task_group() as group:
            for entry in due:
                group.start_soon(run, *entry)

    for index, hook, _ in due:
        if index in results:
            content, expiry = results[index]
            messages = inject(
                messages,
                tool_name=hook.call_name,
                arguments=hook.arguments,
                content=content,
                frequency=hook.frequency,
                ttl_expiry=expiry,
            )
    return messages


async def _call(hook: HookConfig, tool: ToolDescriptor, call: CallTool) -> str | None:
    """The observation, or ``None`` after logging why there is none."""
    try:
        outcome = await call(tool, dict(hook.arguments), hook.timeout_seconds)
    except Exception as exc:
        # The type only: a message may quote the arguments.
        _skip(hook, f"could not be called ({type(exc).__name__})")
        return None
    if outcome.status == "ok":
        return outcome.observation
    if outcome.status == "refused":
        _skip(hook, "was refused by an on_pre_tool_use code hook")
    elif outcome.error_type == "deadline-exceeded":
        limit = hook.timeout_seconds
        in_time = "in time" if limit is None else f"within {limit:g} s"
        _skip(hook, f"did not answer {in_time}")
    else:
        _skip(hook, f"answered with an error ({outcome.error_type})")
    return None


def _skip(hook: HookConfig, reason: str) -> None:
    log.warning(
        "hook %r skipped: tool %r %s; the request goes on without it",
        hook.display_name,
        hook.call_name,
        reason,
        extra={"hook": hook.display_name, "tool": hook.call_name, "reason": reason},
    )
