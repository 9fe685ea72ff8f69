"""What a front door fixes for every session it opens: :class:`SessionRules`.

A door (``toolbus.application.doors``) composes a caller's session from the
operator's configuration: the permissions, the states a caller may start in,
configured and code hooks, where audit records and metrics go, per-user
limits. Those parts are the same for every session the door opens, so the door
hands them over as one :class:`SessionRules`, and an
:class:`~toolbus.application.agent.session.AgentSession` takes each part it was
not given explicitly from there.

A door may also *govern* a :class:`~toolbus.application.calls.tools.Tools`
facade (:func:`govern`): a session started with those tools and no rules of
its own follows the door's, which is how ``AgentSession(tools, ...)`` with the
tools of :func:`toolbus.open_tools` keeps the door's promises in Python.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from toolbus.application.agent.audit import AuditSink, LoggingAuditSink
from toolbus.application.agent.caches import SNAPSHOT_HOOKS, SNAPSHOT_PERMISSIONS
from toolbus.application.agent.code_hooks import NO_HOOKS, CompiledHooks
from toolbus.application.agent.spending import Spending
from toolbus.application.agent.steps import CallSteps
from toolbus.application.calls.metrics import ToolbusMetrics, default_metrics
from toolbus.application.calls.tools import Tools
from toolbus.domain.access.permissions import Permissions, load_permissions
from toolbus.domain.config.registry import Registry
from toolbus.domain.hooks.configured import HookConfig, ToolCallHook, load_hooks
from toolbus.domain.limits.settings import Prices

#: Gives a place back (a session closed).
Leave = Callable[[], None]


class Places(Protocol):
    """Per-user places of one kind: :meth:`take` one, or ``LimitReached`` when none is free."""

    def take(self, user: str) -> Leave: ...


@dataclass(frozen=True, slots=True)
class SessionRules:
    """The parts of a session a front door decides, not the caller.

    ``None`` leaves a part to the session's own default: for ``permissions`` and
    ``hooks``, the configuration snapshot's sections; for ``entry_states``, any
    state; for ``places``, no limit.
    """

    permissions: Permissions | None = None
    #: The states a caller may ask to start in; any other is refused (``StateRefused``).
    entry_states: frozenset[str] | None = None
    hooks: tuple[HookConfig, ...] | None = None
    code_hooks: CompiledHooks | None = None
    audit: AuditSink | None = None
    metrics: ToolbusMetrics | None = None
    timeout: float | None = None
    #: Open sessions per user; a session takes a place while it is open.
    places: Places | None = None
    #: What each call passes before it is made, in order: a policy on its arguments,
    #: limits, budgets, approvals, a cache (``None``: nothing is checked per call).
    steps: CallSteps | None = None
    #: What calls and model turns cost (``[costs]``); ``None``: nothing is priced.
    prices: Prices | None = None
    #: The budgets a session's model turns pass and are charged to (its calls pass them
    #: as a step); ``None``: no budget.
    spending: Spending | None = None

    @staticmethod
    def states(states: Collection[str] | None) -> frozenset[str] | None:
        """``entry_states`` from configuration: ``None`` stays ``None``."""
        if isinstance(states, str):
            raise TypeError(f"entry states must be a collection of states, not {states!r}")
        return None if states is None else frozenset(states)


#: Rules for one configuration: a door recomputes them when the registry changes.
RulesSource = Callable[[Registry], SessionRules]

_governed: weakref.WeakKeyDictionary[Tools, RulesSource] = weakref.WeakKeyDictionary()


def govern(tools: Tools, source: RulesSource) -> Tools:
    """Sessions started with ``tools`` (and no rules of their own) follow ``source``'s rules."""
    _governed[tools] = source
    return tools


def rules_of(tools: Tools, registry: Registry) -> SessionRules | None:
    """The rules governing ``tools`` for ``registry``, or ``None`` if no door governs them."""
    source = _governed.get(tools)
    return None if source is None else source(registry)


_DEFAULT_SINK = LoggingAuditSink()


@dataclass(frozen=True, slots=True)
class SessionParts:
    """Every part of one session, each from where it was given, else its default."""

    permissions: Permissions
    entry_states: frozenset[str] | None
    hooks: tuple[HookConfig, ...]
    code_hooks: CompiledHooks
    audit: AuditSink
    metrics: ToolbusMetrics
    timeout: float | None
    places: Places | None
    steps: CallSteps | None
    prices: Prices | None
    spending: Spending | None


def session_parts(
    rules: SessionRules | None,
    registry: Registry,
    *,
    permissions: Permissions | None,
    entry_states: Collection[str] | None,
    hooks: Sequence[HookConfig] | None,
    code_hooks: CompiledHooks | None,
    audit: AuditSink | None,
    metrics: ToolbusMetrics | None,
    timeout: float | None,
) -> SessionParts:
    """A part given to the session wins, then the rules', then the default: the snapshot's
    ``permissions`` and ``hooks`` sections, the ``toolbus.audit`` log, the process's metrics."""
    # Every session runs this: plain comparisons, nothing allocated but the result.
    rules = rules or _NO_RULES
    if permissions is None:
        permissions = rules.permissions
    if permissions is None:
        permissions = SNAPSHOT_PERMISSIONS.get(registry, "", _snapshot_permissions)
    if hooks is not None:
        hooks = checked_hooks(hooks)
    elif rules.hooks is not None:
        hooks = rules.hooks
    else:
        hooks = SNAPSHOT_HOOKS.get(registry, "", _snapshot_hooks)
    if code_hooks is None:
        code_hooks = rules.code_hooks if rules.code_hooks is not None else NO_HOOKS
    if audit is None:
        audit = rules.audit if rules.audit is not None else _DEFAULT_SINK
    if metrics is None:
        metrics = rules.metrics if rules.metrics is not None else default_metrics()
    return SessionParts(
        permissions=permissions,
        entry_states=rules.entry_states
        if entry_states is None
        else SessionRules.states(entry_states),
        hooks=hooks,
        code_hooks=code_hooks,
        audit=audit,
        metrics=metrics,
        timeout=timeout if timeout is not None else rules.timeout,
        places=rules.places,
        steps=rules.steps,
        prices=rules.prices,
        spending=rules.spending,
    )


_NO_RULES = SessionRules()


def _snapshot_permissions(registry: Registry) -> Permissions:
    return load_permissions(registry.snapshot)


def _snapshot_hooks(registry: Registry) -> tuple[HookConfig, ...]:
    return load_hooks(registry.snapshot)


def checked_hooks(hooks: Sequence[HookConfig]) -> tuple[HookConfig, ...]:
    """Configured hooks given in code, checked to be parsed hook models."""
    if isinstance(hooks, str | bytes | Mapping):
        raise TypeError("hooks must be a sequence of hook models; build it with parse_hooks(...)")
    found = tuple(hooks)
    for hook in found:
        if not isinstance(hook, ToolCallHook):
            raise TypeError(
                f"hooks must be parsed hook models, not {type(hook).__name__}; "
                "build them with toolbus.hooks.parse_hooks(...)"
            )
    return found
