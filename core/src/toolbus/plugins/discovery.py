"""Finding plugins: the adapter a URL names, tool and command plugins, code hooks.

Only the adapter a URL names is imported; pluggy registers it for the call,
and is not used again on any per-call path.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import pluggy

from toolbus._internal.urls import redact_url
from toolbus.application.calls.service import ToolService
from toolbus.domain.asyncapi.brokers import AsyncApiBroker, PlainBroker
from toolbus.domain.errors import PluginError
from toolbus.plugins import installed as installation
from toolbus.plugins.hookspecs import (
    CODE_HOOKS,
    PROJECT,
    AdapterInfo,
    CommandLine,
    LLMInfo,
    PolicyEngineInfo,
    Spec,
    StateStoreInfo,
    ToolRegistrar,
)
from toolbus.plugins.installed import (
    ADAPTER_GROUP,
    COMMAND_GROUP,
    LLM_GROUP,
    PLUGIN_GROUP,
    POLICY_GROUP,
    STATE_GROUP,
)
from toolbus.ports import Bus, PolicyEngine, StateStore

if TYPE_CHECKING:
    from toolbus.application.agent.llm import LLM

log = logging.getLogger("toolbus.plugins")


#: The extra that installs each first-party adapter, for the "please install" message.
_EXTRAS = {
    "nats": "nats",
    "pulsar": "pulsar",
    "kafka": "kafka",
    "rabbitmq": "rabbitmq",
    "amqp": "rabbitmq",
    "amqps": "rabbitmq",
}
_LLM_EXTRAS = {"openai": "openai", "anthropic": "anthropic"}
_STATE_EXTRAS = {"nats": "nats", "redis": "redis"}
_POLICY_EXTRAS = {"cedar": "policy"}


@dataclass(frozen=True, slots=True)
class ToolPlugin:
    """What one tool plugin contributed."""

    name: str
    distribution: str
    services: tuple[ToolService, ...] = ()
    #: Default configuration: {"tool-service": {...}, "tool": {...}}
    snapshot: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    tool_types: tuple[str, ...] = ()


def _manager() -> pluggy.PluginManager:
    pm = pluggy.PluginManager(PROJECT)
    pm.add_hookspecs(Spec)
    return pm


@dataclass(frozen=True, slots=True)
class _AdapterKind:
    """What differs between looking up a broker adapter and an LLM adapter."""

    what: str  # "broker adapter", "LLM adapter", "state store"
    label: str  # what its URL is called: "broker URL", "state store URL"
    listed_as: str  # how the list of installed ones is headed in errors
    group: str
    extras: Mapping[str, str]
    url_forms: str
    register: Callable[[pluggy.PluginManager, Callable[[Any], None]], None]


_BROKERS = _AdapterKind(
    "broker adapter",
    "broker URL",
    "installed adapters",
    ADAPTER_GROUP,
    _EXTRAS,
    "memory://, nats://host:port, pulsar://host:port, kafka://host:port or amqp://host:port",
    lambda pm, register: pm.hook.toolbus_register_adapters(register=register),
)
_LLMS = _AdapterKind(
    "LLM adapter",
    "LLM URL",
    "installed LLM adapters",
    LLM_GROUP,
    _LLM_EXTRAS,
    "openai://MODEL, openai+http://HOST:PORT/PATH/MODEL, anthropic://MODEL or scripted://NAME",
    lambda pm, register: pm.hook.toolbus_register_llms(register=register),
)
_STATE_STORES = _AdapterKind(
    "state store",
    "state store URL",
    "installed state stores",
    STATE_GROUP,
    _STATE_EXTRAS,
    "memory://, nats://host:port or redis://host:port",
    lambda pm, register: pm.hook.toolbus_register_state_stores(register=register),
)


def _adapter_serving(kind: _AdapterKind, url: str) -> Any:
    """The ``kind`` of adapter serving ``url``'s scheme, importing that adapter only."""
    scheme = urlsplit(url).scheme
    if not scheme:
        raise PluginError(f"{kind.label} {redact_url(url)!r} has no scheme; use {kind.url_forms}")
    base = scheme.split("+", 1)[0]
    found = [ep for ep in installation.entry_points(kind.group) if ep.name == base]
    if not found:
        installed = sorted(ep.name for ep in installation.entry_points(kind.group))
        hint = (
            f"install it with: pip install 'toolbus[{kind.extras[base]}]'"
            if base in kind.extras
            else "install a plugin that provides it"
        )
        raise PluginError(
            f"no {kind.what} for {scheme}:// is installed; {hint} "
            f"({kind.listed_as}: {', '.join(installed) or 'none'})"
        )
    pm = _manager()
    try:
        pm.register(found[0].load(), name=found[0].name)
    except Exception as exc:
        raise PluginError(f"{kind.what} {base!r} failed to load: {exc}") from exc
    adapters: list[Any] = []
    kind.register(pm, adapters.append)
    for info in adapters:
        if scheme in info.schemes or base in info.schemes:
            return info
    raise PluginError(f"the {base!r} {kind.what} does not serve {scheme}:// URLs")


def adapter_for(url: str) -> AdapterInfo:
    """The broker adapter serving ``url``'s scheme, importing that adapter only."""
    info: AdapterInfo = _adapter_serving(_BROKERS, url)
    return info


async def connect(url: str, options: Mapping[str, Any] | None = None) -> Bus:
    """Connect to the broker at ``url`` with the adapter its scheme names."""
    return await adapter_for(url).connect(url, dict(options or {}))


def asyncapi_broker(url: str, options: Mapping[str, Any] | None = None) -> AsyncApiBroker:
    """The broker at ``url`` as an AsyncAPI document describes it.

    Its adapter's own description when it has one, else the URL's scheme and
    host with queue names as written. Raises :class:`PluginError` when no
    installed adapter serves the URL's scheme.
    """
    adapter = adapter_for(url)
    if adapter.asyncapi is None:
        return PlainBroker(url)
    return adapter.asyncapi(url, options or {})


def llm_adapter_for(url: str) -> LLMInfo:
    """The LLM adapter serving ``url``'s scheme, importing that adapter only."""
    info: LLMInfo = _adapter_serving(_LLMS, url)
    return info


async def connect_llm(url: str, options: Mapping[str, Any] | None = None) -> LLM:
    """The LLM ``url`` names, made by the adapter its scheme names."""
    return await llm_adapter_for(url).connect(url, dict(options or {}))


def state_store_for(url: str) -> StateStoreInfo:
    """The state store adapter serving ``url``'s scheme, importing that adapter only."""
    info: StateStoreInfo = _adapter_serving(_STATE_STORES, url)
    return info


async def connect_state(url: str, options: Mapping[str, Any] | None = None) -> StateStore:
    """Connect to the state store at ``url`` with the adapter its scheme names.

    ``memory://`` is in the core; ``nats://`` comes with ``toolbus[nats]`` and
    ``redis://`` with ``toolbus[redis]``. See docs/state-stores.md.
    """
    return await state_store_for(url).connect(url, dict(options or {}))


async def connect_state_beside_broker(
    url: str, options: Mapping[str, Any] | None = None
) -> StateStore | None:
    """The state store the broker at ``url`` carries on its own servers, if it has one
    (NATS: a JetStream key-value bucket), else ``None``; what a service host remembers
    token uses in when ``toolbus.toml`` names no ``state``."""
    try:
        info = state_store_for(url)
    except PluginError:
        return None
    if info.beside_broker is None:
        return None
    return await info.beside_broker(url, dict(options or {}))


def load_policy_engine(
    name: str,
    files: Sequence[Path],
    users: Mapping[str, Mapping[str, Any]],
    options: Mapping[str, Any] | None = None,
) -> PolicyEngine:
    """The policy engine ``name`` (``cedar``) on ``files``, importing that engine only.

    Raises :class:`PluginError` when no installed distribution provides it, and
    :class:`~toolbus.domain.errors.ConfigError` naming the file and line of
    every policy that does not read.
    """
    found = [ep for ep in installation.entry_points(POLICY_GROUP) if ep.name == name]
    if not found:
        installed = sorted(ep.name for ep in installation.entry_points(POLICY_GROUP))
        hint = (
            f"install it with: pip install 'toolbus[{_POLICY_EXTRAS[name]}]'"
            if name in _POLICY_EXTRAS
            else "install a plugin that provides it"
        )
        raise PluginError(
            f"no policy engine {name!r} is installed; {hint} "
            f"(installed policy engines: {', '.join(installed) or 'none'})"
        )
    pm = _manager()
    try:
        pm.register(found[0].load(), name=found[0].name)
    except Exception as exc:
        raise PluginError(f"policy engine {name!r} failed to load: {exc}") from exc
    engines: list[PolicyEngineInfo] = []
    pm.hook.toolbus_register_policy_engines(register=engines.append)
    for info in engines:
        if info.name == name:
            return info.load(files, users, dict(options or {}))
    raise PluginError(f"the {name!r} plugin registers no policy engine of that name")


def load_tool_plugins() -> list[ToolPlugin]:
    """Import every installed tool plugin and collect what it contributes.

    A plugin that fails to load is logged and skipped: one broken plugin must not
    take the others down.
    """
    plugins: list[ToolPlugin] = []
    for ep in installation.entry_points(PLUGIN_GROUP):
        distribution, _ = installation.distribution_of(ep)
        pm = _manager()
        try:
            pm.register(ep.load(), name=ep.name)
            registrar = ToolRegistrar()
            pm.hook.toolbus_register_tools(register=registrar)
        except Exception:
            log.exception("tool plugin %r (%s) failed to load; skipped", ep.name, distribution)
            continue
        plugins.append(
            ToolPlugin(
                name=ep.name,
                distribution=distribution,
                services=tuple(registrar.services),
                snapshot={
                    "tool-service": registrar.service_descriptors,
                    "tool": registrar.tools,
                },
                tool_types=tuple(registrar.tool_types),
            )
        )
    return plugins


def load_command_plugins(cli: CommandLine) -> None:
    """Let every installed ``toolbus.commands`` plugin add its commands to ``cli``.

    A plugin that fails to load is logged and skipped, so one broken
    distribution never takes the whole command line down.
    """
    for ep in sorted(installation.entry_points(COMMAND_GROUP), key=lambda ep: ep.name):
        pm = _manager()
        try:
            pm.register(ep.load(), name=ep.name)
            pm.hook.toolbus_register_commands(cli=cli)
        except Exception:
            distribution, _ = installation.distribution_of(ep)
            log.exception("command plugin %r (%s) failed to load; skipped", ep.name, distribution)


def load_hook_plugins() -> list[tuple[str, object]]:
    """``(entry-point name, module)`` for every installed tool plugin that has code hooks.

    Sorted by entry-point name, so that hooks run in the same order on every
    machine. A plugin that fails to import is logged and skipped, as by
    :func:`load_tool_plugins`.
    """
    found: list[tuple[str, object]] = []
    for ep in sorted(installation.entry_points(PLUGIN_GROUP), key=lambda ep: ep.name):
        try:
            module = ep.load()
        except Exception:
            distribution, _ = installation.distribution_of(ep)
            log.exception("tool plugin %r (%s) failed to load; skipped", ep.name, distribution)
            continue
        if any(_is_hookimpl(getattr(module, name, None)) for name in CODE_HOOKS):
            found.append((ep.name, module))
    return found


def _is_hookimpl(function: object) -> bool:
    return getattr(function, f"{PROJECT}_impl", None) is not None
