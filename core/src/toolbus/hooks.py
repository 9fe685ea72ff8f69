"""Hooks: put a tool's output into the chat history before the agent starts.

Configure hooks the way a DIAL Quick Apps manifest does, and validate them::

    from toolbus.hooks import parse_hooks

    hooks = parse_hooks([
        {
            "kind": "tool_call",
            "event": "on_request_start",
            "toolset_name": "memory_server",
            "tool_name": "get_memories",
            "arguments": {"user_id": "current"},
            "refresh_condition": {"kind": "ttl", "ttl_minutes": 60},
        }
    ])  # raises ConfigError listing every problem of every hook

Inject a result as a synthetic tool call (pure: the input list is untouched)::

    from toolbus.hooks import inject, ttl_is_fresh

    hook = hooks[0]
    args = hook.arguments
    if not ttl_is_fresh(messages, tool_name=hook.call_name, arguments=args, now=now):
        observation = ...  # call the tool
        messages = inject(
            messages,
            tool_name=hook.call_name,
            arguments=args,
            content=observation,
            frequency=hook.frequency,
            ttl_expiry=hook.ttl_expiry(now),
        )

Run them in an agent session: ``await session.start(messages)`` calls each
hook's tool and returns the history with the results injected (see
:meth:`~toolbus.application.agent.session.AgentSession.start`).

Code hooks are pluggy hook implementations, compiled once into plain async
callables by :class:`CodeHooks`::

    from toolbus.hooks import CodeHooks, Deny
    from toolbus.plugins import hookimpl

    class NoDeletes:
        @hookimpl
        def toolbus_on_pre_tool_use(self, tool):
            if tool.name == "delete-everything":
                return Deny("Deleting everything is not allowed.")

    session = AgentSession(tools, user="alice", code_hooks=CodeHooks([NoDeletes()]))

``docs/hooks.md`` describes every field, both frequencies, the id format, the
runtime and code hooks.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import pluggy

from toolbus.application.agent.code_hooks import (
    CodeHook,
    CompiledHooks,
    Deny,
    RewriteArguments,
)
from toolbus.domain.calls.naming import sanitize_toolname
from toolbus.domain.errors import PluginError
from toolbus.domain.hooks.configured import (
    HookConfig,
    HookEvent,
    RefreshCondition,
    ToolCallHook,
    TTLRefresh,
    load_hooks,
    parse_hooks,
)
from toolbus.domain.hooks.injection import (
    InjectionFrequency,
    SyntheticPair,
    find_latest_pair,
    identity_prefix,
    inject,
    make_call_id,
    parse_ttl_expiry,
    ttl_is_fresh,
)
from toolbus.plugins import CODE_HOOKS, PROJECT, Spec, hookimpl, load_hook_plugins

__all__ = [
    "CodeHook",
    "CodeHooks",
    "CompiledHooks",
    "Deny",
    "HookConfig",
    "HookEvent",
    "InjectionFrequency",
    "RefreshCondition",
    "RewriteArguments",
    "SyntheticPair",
    "TTLRefresh",
    "ToolCallHook",
    "find_latest_pair",
    "hookimpl",
    "identity_prefix",
    "inject",
    "load_hooks",
    "make_call_id",
    "parse_hooks",
    "parse_ttl_expiry",
    "sanitize_toolname",
    "ttl_is_fresh",
]


class CodeHooks(CompiledHooks):
    """Code hooks from pluggy plugins, compiled into plain async callables.

    ``plugins`` are objects with :data:`~toolbus.plugins.hookimpl`-marked
    methods or functions (instances, classes, modules), or ``(name, object)``
    pairs to name them in logs. Hooks run in the order the plugins are given
    (pluggy's ``tryfirst``/``trylast`` still move a hook to the front or back).
    Implementations may be ``async def`` or plain functions, and may take any
    subset of the hook's arguments.

    Raises :class:`~toolbus.domain.errors.PluginError` for a plugin pluggy
    rejects (an argument the hook does not have), a misspelt ``toolbus_*`` hook
    name, or a hook wrapper (wrappers need pluggy at call time, which sessions
    never use).
    """

    __slots__ = ("plugins",)

    def __init__(self, plugins: Iterable[object | tuple[str, object]] = ()) -> None:
        named = [_named(plugin) for plugin in plugins]
        pm = pluggy.PluginManager(PROJECT)
        pm.add_hookspecs(Spec)
        # pluggy calls the last registered first; registering in reverse makes
        # the calling order the order given.
        for name, plugin in reversed(named):
            _check_names(pm, name, plugin)
            try:
                pm.register(plugin, name=name)
            except Exception as exc:
                raise PluginError(f"code-hook plugin {name!r} is invalid: {exc}") from exc
        super().__init__(
            on_request_start=_compile(pm, "toolbus_on_request_start"),
            on_pre_tool_use=_compile(pm, "toolbus_on_pre_tool_use"),
            on_post_tool_use=_compile(pm, "toolbus_on_post_tool_use"),
            on_completion=_compile(pm, "toolbus_on_completion"),
        )
        #: The plugins' names, in the order given.
        self.plugins: tuple[str, ...] = tuple(name for name, _ in named)

    @classmethod
    def installed(cls) -> CodeHooks:
        """The code hooks of every installed tool plugin (entry-point group ``toolbus.plugins``).

        Plugins run in entry-point name order. Call it once at start-up and
        share the result between sessions.
        """
        return cls(load_hook_plugins())


def _named(plugin: object) -> tuple[str, object]:
    if isinstance(plugin, tuple) and len(plugin) == 2 and isinstance(plugin[0], str):
        return plugin[0], plugin[1]
    name = getattr(plugin, "__name__", None)
    if not isinstance(name, str):
        name = f"{type(plugin).__qualname__}@{id(plugin):x}"
    return name, plugin


def _check_names(pm: pluggy.PluginManager, name: str, plugin: object) -> None:
    """A misspelt hook would never run; pluggy would accept it without a word."""
    known = [attribute for attribute in dir(Spec) if attribute.startswith(f"{PROJECT}_")]
    for attribute in dir(plugin):
        if attribute in known or not attribute.startswith(f"{PROJECT}_"):
            continue
        if pm.parse_hookimpl_opts(plugin, attribute) is None:
            continue
        close = difflib.get_close_matches(attribute, known, n=1)
        hint = (
            f"did you mean {close[0]!r}?"
            if close
            else f"the code hooks are {', '.join(CODE_HOOKS)}"
        )
        raise PluginError(
            f"code-hook plugin {name!r} implements {attribute!r}, which is not a toolbus hook; "
            + hint
        )


def _compile(pm: pluggy.PluginManager, hook_name: str) -> list[CodeHook]:
    caller = getattr(pm.hook, hook_name)
    compiled = []
    for impl in reversed(caller.get_hookimpls()):  # pluggy's calling order
        name = f"{impl.plugin_name}.{getattr(impl.function, '__name__', hook_name)}"
        if impl.hookwrapper or impl.wrapper:
            raise PluginError(
                f"code hook {name} is a hook wrapper; write a plain (or async) hook instead"
            )
        compiled.append(CodeHook(name, _as_async(impl.function, impl.argnames, impl.kwargnames)))
    return compiled


def _as_async(
    function: Callable[..., Any], argnames: Sequence[str], kwargnames: Sequence[str]
) -> Callable[..., Any]:
    """An async callable taking the hook's arguments by keyword, passing on those it wants."""
    names = tuple(argnames)
    keywords = tuple(kwargnames)

    async def call(**arguments: Any) -> object:
        result = function(
            *[arguments[name] for name in names],
            **{name: arguments[name] for name in keywords if name in arguments},
        )
        if inspect.isawaitable(result):
            result = await result
        return result

    call.__qualname__ = getattr(function, "__qualname__", "code_hook")
    return call
