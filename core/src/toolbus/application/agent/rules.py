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
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Protocol

from toolbus.application.agent.audit import AuditSink
from toolbus.application.agent.code_hooks import CompiledHooks
from toolbus.application.calls.metrics import ToolbusMetrics
from toolbus.application.calls.tools import Tools
from toolbus.domain.access.permissions import Permissions
from toolbus.domain.config.registry import Registry
from toolbus.domain.hooks.configured import HookConfig

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


def entry_state_allowed(state: str, entry_states: Sequence[str] | frozenset[str] | None) -> bool:
    """Whether a caller may ask to start in ``state`` (``None``: every state)."""
    return entry_states is None or state in entry_states
