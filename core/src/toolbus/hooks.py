"""One import for hooks: configured hooks and code hooks.

* configured hooks: :func:`parse_hooks` / :func:`load_hooks` validate them,
  :func:`inject` and :func:`ttl_is_fresh` put a result into a chat history, and
  :meth:`~toolbus.application.agent.session.AgentSession.start` runs them;
* code hooks: :class:`CodeHooks` compiles plugins' hook implementations
  (:class:`Deny`, :class:`RewriteArguments` and the rest are what they return).

How to write each, every field and the id format: docs/hooks.md (its examples
run in the test suite, so they stay true).
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
