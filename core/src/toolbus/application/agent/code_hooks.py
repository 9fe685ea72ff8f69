"""Code hooks, compiled: what an agent session runs at each seam, as plain async callables.

Plugins write code hooks as pluggy hook implementations (see
:class:`toolbus.hooks.CodeHooks`); pluggy is used once, at start-up, to find and
order them. What a session holds is a :class:`CompiledHooks`: for each seam a
tuple of :class:`CodeHook` (a name for logs, and an async callable taking the
seam's arguments by keyword). Sessions test a tuple for emptiness before doing
anything, so a seam with no hooks costs a truth test.

The seams and how several answers combine:

* ``on_request_start(session, messages)``: return a new message list, or
  ``None`` to leave it. Hooks run in order, each seeing the list the previous
  one returned.
* ``on_pre_tool_use(session, tool, arguments)``: return ``None`` (no
  objection), :class:`RewriteArguments` or :class:`Deny`. Hooks run in order,
  each seeing the arguments as rewritten so far; the first :class:`Deny` ends the
  round and wins, whatever the others said (the most restrictive answer wins).
* ``on_post_tool_use(session, tool, arguments, outcome)``: return a new
  observation (``str``), or ``None`` to leave it. Rewrites compose in order.
* ``on_completion(session, record)``: observe the audit record; the return
  value is ignored.

A hook that raises is logged and, where it guards something, fails closed: a
failing pre-use hook refuses the call, a failing post-use hook withholds the
observation. Elsewhere it is skipped. Nothing a code hook does fails the request.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, Protocol

import anyio

if TYPE_CHECKING:
    from toolbus.application.agent.audit import AuditRecord
    from toolbus.application.agent.outcomes import CallOutcome
    from toolbus.domain.config.descriptors import ToolDescriptor

log = logging.getLogger("toolbus.hooks")


class HookSession(Protocol):
    """What the seams need of the session they run in: hooks are handed the whole
    :class:`~toolbus.application.agent.session.AgentSession`, but naming only this
    keeps the session (which runs the hooks) and the hooks free of an import circle.
    """

    @property
    def request_id(self) -> str: ...


#: How long ``on_completion`` hooks may take together. They run shielded from
#: the request's cancellation (so they see cancelled sessions too), hence bounded.
COMPLETION_SECONDS: Final = 5.0


@dataclass(frozen=True, slots=True)
class Deny:
    """A pre-tool-use answer: do not make this call. ``reason`` becomes the observation."""

    reason: str


@dataclass(frozen=True, slots=True)
class RewriteArguments:
    """A pre-tool-use answer: make the call with these arguments instead."""

    arguments: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class CodeHook:
    """One compiled hook: a name for logs, and an async callable taking keyword arguments."""

    name: str
    call: Callable[..., Awaitable[object]]


def _hooks(hooks: Iterable[CodeHook]) -> tuple[CodeHook, ...]:
    found = tuple(hooks)
    for hook in found:
        if not isinstance(hook, CodeHook):
            raise TypeError(f"expected CodeHook objects, got {type(hook).__name__}")
    return found


class CompiledHooks:
    """Code hooks ready to run: one tuple of :class:`CodeHook` per seam, in calling order.

    Build it with :class:`toolbus.hooks.CodeHooks` from pluggy plugins, or
    directly from async callables. Immutable and shared by every session that
    uses it: compile once at start-up.
    """

    __slots__ = ("on_completion", "on_post_tool_use", "on_pre_tool_use", "on_request_start")

    def __init__(
        self,
        *,
        on_request_start: Iterable[CodeHook] = (),
        on_pre_tool_use: Iterable[CodeHook] = (),
        on_post_tool_use: Iterable[CodeHook] = (),
        on_completion: Iterable[CodeHook] = (),
    ) -> None:
        self.on_request_start: tuple[CodeHook, ...] = _hooks(on_request_start)
        self.on_pre_tool_use: tuple[CodeHook, ...] = _hooks(on_pre_tool_use)
        self.on_post_tool_use: tuple[CodeHook, ...] = _hooks(on_post_tool_use)
        self.on_completion: tuple[CodeHook, ...] = _hooks(on_completion)

    def __bool__(self) -> bool:
        """False when no seam has a hook."""
        return any(
            (self.on_request_start, self.on_pre_tool_use, self.on_post_tool_use, self.on_completion)
        )

    def __repr__(self) -> str:
        seams = ("on_request_start", "on_pre_tool_use", "on_post_tool_use", "on_completion")
        counts = ", ".join(f"{seam}={len(getattr(self, seam))}" for seam in seams)
        return f"<{type(self).__name__} {counts}>"

    # ------------------------------------------------------------- dispatch

    async def request_start(
        self, session: HookSession, messages: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        """Run the ``on_request_start`` hooks; a hook that fails is logged and skipped."""
        for hook in self.on_request_start:
            try:
                result = await hook.call(session=session, messages=messages)
            except Exception:
                log.exception("on_request_start hook %s failed; skipped", hook.name)
                continue
            if result is None:
                continue
            if not isinstance(result, list):
                log.error(
                    "on_request_start hook %s returned %s, not a list of messages or None; ignored",
                    hook.name,
                    type(result).__name__,
                )
                continue
            messages = result
        return messages

    async def pre_tool_use(
        self, session: HookSession, tool: ToolDescriptor, arguments: dict[str, Any]
    ) -> Deny | dict[str, Any]:
        """Ask the ``on_pre_tool_use`` hooks: a :class:`Deny`, or the arguments to send."""
        for hook in self.on_pre_tool_use:
            try:
                answer = await hook.call(
                    session=session, tool=tool, arguments=MappingProxyType(arguments)
                )
            except Exception:
                log.exception(
                    "on_pre_tool_use hook %s failed; the call of %r is refused",
                    hook.name,
                    tool.name,
                )
                return _blocked(tool)
            if answer is None:
                continue
            if isinstance(answer, Deny):
                return answer
            if isinstance(answer, RewriteArguments) and isinstance(answer.arguments, Mapping):
                arguments = dict(answer.arguments)
                continue
            log.error(
                "on_pre_tool_use hook %s returned %s; expected None, Deny or RewriteArguments. "
                "The call of %r is refused",
                hook.name,
                type(answer).__name__,
                tool.name,
            )
            return _blocked(tool)
        return arguments

    async def post_tool_use(
        self,
        session: HookSession,
        tool: ToolDescriptor,
        arguments: dict[str, Any],
        outcome: CallOutcome,
    ) -> CallOutcome:
        """Let the ``on_post_tool_use`` hooks rewrite the observation, in order."""
        view = MappingProxyType(arguments)
        for hook in self.on_post_tool_use:
            try:
                answer = await hook.call(
                    session=session, tool=tool, arguments=view, outcome=outcome
                )
            except Exception:
                log.exception(
                    "on_post_tool_use hook %s failed; the observation of %r is withheld",
                    hook.name,
                    tool.name,
                )
                return _withheld(outcome)
            if answer is None:
                continue
            if not isinstance(answer, str):
                log.error(
                    "on_post_tool_use hook %s returned %s, not a str or None; "
                    "the observation of %r is withheld",
                    hook.name,
                    type(answer).__name__,
                    tool.name,
                )
                return _withheld(outcome)
            outcome = dataclasses.replace(outcome, observation=answer)
        return outcome

    async def completion(self, session: HookSession, record: AuditRecord) -> None:
        """Show the ``on_completion`` hooks the audit record; failures are logged."""
        with anyio.move_on_after(COMPLETION_SECONDS, shield=True) as scope:
            for hook in self.on_completion:
                try:
                    await hook.call(session=session, record=record)
                except Exception:
                    log.exception("on_completion hook %s failed", hook.name)
        if scope.cancelled_caught:
            log.error(
                "on_completion hooks of agent session %s did not finish within %g s; "
                "the rest were not run",
                session.request_id,
                COMPLETION_SECONDS,
            )


#: No code hooks at all; what a session uses when given none.
NO_HOOKS: Final = CompiledHooks()


def _blocked(tool: ToolDescriptor) -> Deny:
    # What the model reads: nothing about the failure, which is the operator's business.
    return Deny(
        f"The call of tool {tool.llm_name!r} was blocked because a policy check failed. "
        "No call was made."
    )


def _withheld(outcome: CallOutcome) -> CallOutcome:
    return dataclasses.replace(
        outcome,
        observation=f"The result of tool {outcome.name!r} was withheld because "
        "post-processing failed.",
    )
