"""Plugins: broker adapters and tool plugins, found through entry points, run by pluggy.

Six entry-point groups:

* ``toolbus.adapters``: one entry point per broker, **named after its URL
  scheme** (``memory``, ``nats``, ``pulsar``, ``kafka``; RabbitMQ's adapter
  has one for each of ``amqp``, ``amqps`` and ``rabbitmq``). Only the adapter a
  URL names is imported, so ``pip install toolbus`` never loads a broker client
  it does not use. The module implements :meth:`Spec.toolbus_register_adapters`.
* ``toolbus.plugins``: tool plugins. Each implements
  :meth:`Spec.toolbus_register_tools` to contribute tool services with their
  default descriptors, and may add tool types. The same modules may implement
  the code hooks (``toolbus_on_request_start``, ``toolbus_on_pre_tool_use``,
  ``toolbus_on_post_tool_use``, ``toolbus_on_completion``); see
  :class:`toolbus.hooks.CodeHooks` and docs/hooks.md.
* ``toolbus.llms``: one entry point per LLM adapter, **named after its URL
  scheme** (``openai``, ``anthropic``, ``scripted``), found like broker
  adapters. The module implements :meth:`Spec.toolbus_register_llms`.
* ``toolbus.state_stores``: one entry point per state store, **named after its
  URL scheme** (``memory``, ``nats``, ``redis``), found like broker adapters. The
  module implements :meth:`Spec.toolbus_register_state_stores`.
* ``toolbus.policy_engines``: one entry point per call-policy engine, **named
  after the engine** (``cedar``); ``[policy] engine`` names the one to use. The
  module implements :meth:`Spec.toolbus_register_policy_engines`.
* ``toolbus.commands``: command-line commands. Each implements
  :meth:`Spec.toolbus_register_commands`; see :mod:`toolbus.cli.plugin_api`.

pluggy is used at start-up only; per-call paths never go through it.
"""

from __future__ import annotations

import copy
import importlib.metadata as metadata
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
from toolbus.domain.config.schemas import arguments_from_schema
from toolbus.domain.errors import PluginError
from toolbus.ports import (
    Bus,
    BusFactory,
    PolicyEngine,
    PolicyEngineFactory,
    StateStore,
    StateStoreFactory,
)

if TYPE_CHECKING:
    import typer

    from toolbus.application.agent.audit import AuditRecord
    from toolbus.application.agent.code_hooks import Deny, RewriteArguments
    from toolbus.application.agent.llm import LLM, LLMFactory
    from toolbus.application.agent.outcomes import CallOutcome
    from toolbus.application.agent.session import AgentSession
    from toolbus.domain.config.descriptors import ToolDescriptor

log = logging.getLogger("toolbus.plugins")

PROJECT = "toolbus"
ADAPTER_GROUP = "toolbus.adapters"
PLUGIN_GROUP = "toolbus.plugins"
COMMAND_GROUP = "toolbus.commands"
LLM_GROUP = "toolbus.llms"
STATE_GROUP = "toolbus.state_stores"
POLICY_GROUP = "toolbus.policy_engines"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

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
class AdapterInfo:
    """A broker adapter: the URL schemes it serves and how to connect.

    ``asyncapi`` describes the broker in AsyncAPI terms (``toolbus asyncapi``):
    ``asyncapi(url, options)`` gives its :class:`~toolbus.domain.asyncapi.brokers.AsyncApiBroker`.
    """

    schemes: tuple[str, ...]
    connect: BusFactory
    distribution: str
    asyncapi: Callable[[str, Mapping[str, Any]], AsyncApiBroker] | None = None


@dataclass(frozen=True, slots=True)
class ToolPlugin:
    """What one tool plugin contributed."""

    name: str
    distribution: str
    services: tuple[ToolService, ...] = ()
    #: Default configuration: {"tool-service": {...}, "tool": {...}}
    snapshot: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    tool_types: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class LLMInfo:
    """An LLM adapter: the URL schemes it serves and how to make a model from a URL."""

    schemes: tuple[str, ...]
    connect: LLMFactory
    distribution: str


@dataclass(frozen=True, slots=True)
class StateStoreInfo:
    """A state store adapter: the URL schemes it serves and how to connect."""

    schemes: tuple[str, ...]
    connect: StateStoreFactory
    distribution: str
    #: Connects to the store a broker of the same scheme carries on its own servers
    #: (NATS: a key-value bucket), given the *broker's* URL and options; ``None``
    #: where the broker has no store of its own.
    beside_broker: StateStoreFactory | None = None


@dataclass(frozen=True, slots=True)
class PolicyEngineInfo:
    """A call-policy engine: its name (``[policy] engine``) and how to load one."""

    name: str
    load: PolicyEngineFactory
    distribution: str


AdapterRegistrar = Callable[[AdapterInfo], None]
LLMRegistrar = Callable[[LLMInfo], None]
StateStoreRegistrar = Callable[[StateStoreInfo], None]
PolicyEngineRegistrar = Callable[[PolicyEngineInfo], None]


class ToolRegistrar:
    """Handed to ``toolbus_register_tools``; collects a plugin's contributions."""

    def __init__(self) -> None:
        self.services: list[ToolService] = []
        self.service_descriptors: dict[str, dict[str, Any]] = {}
        self.tools: dict[str, dict[str, Any]] = {}
        self.tool_types: list[str] = []

    def service(
        self, service: ToolService, *, tools: Mapping[str, Mapping[str, Any]] | None = None
    ) -> None:
        """Contribute a tool service and the default tool descriptors that use it.

        A tool that gives no ``arguments`` takes them from the service's
        arguments schema, when it has one (a typed tool function does): the
        function's parameters are then written once, in Python.
        """
        self.services.append(service)
        self.service_descriptors[service.id] = service.descriptor()
        derived = arguments_from_schema(service.arguments_schema or {})
        for key, descriptor in (tools or {}).items():
            tool = {"type": "tool-service", "service": service.id, **descriptor}
            if "arguments" not in tool and derived:
                tool["arguments"] = copy.deepcopy(derived)
            self.tools[key] = tool

    def tool_type(self, name: str) -> None:
        """Declare a tool ``type`` this plugin understands (beyond ``tool-service``)."""
        self.tool_types.append(name)


#: A command: its parameters are its arguments and options (declared the typer way),
#: its docstring its help.
Command = Callable[..., Any]


class CommandGroup:
    """``toolbus NAME SUBCOMMAND ...``: subcommands under one name (:meth:`CommandLine.group`)."""

    def __init__(self, group: typer.Typer) -> None:
        self._group = group

    def command(self, name: str, command: Command) -> None:
        """Add the subcommand ``name``, run by ``command``."""
        self._group.command(name)(command)


class CommandLine:
    """Handed to ``toolbus_register_commands``: where a distribution's commands go.

    Command plugins import it, with everything else they need, from
    :mod:`toolbus.cli.plugin_api`.
    """

    def __init__(self, app: typer.Typer, serve: typer.Typer) -> None:
        # Made by toolbus around its own command line (``toolbus`` and ``toolbus serve``).
        self._app = app
        self._serve = serve

    def command(self, name: str, command: Command) -> None:
        """Add ``toolbus name``, run by ``command``."""
        self._app.command(name)(command)

    def serve_command(self, name: str, command: Command) -> None:
        """Add ``toolbus serve name``: a kind of tools to serve, beside the default
        ``toolbus serve SERVICE...``; ``command`` usually ends in ``serve_until_signalled``."""
        self._serve.command(name)(command)

    def group(self, name: str, *, help: str) -> CommandGroup:
        """Add ``toolbus name``, a group of subcommands; add them to the group returned."""
        # The same kind of typer application as toolbus's own, so that help reads the same.
        group = type(self._app)(name=name, help=help, no_args_is_help=True)
        self._app.add_typer(group)
        return CommandGroup(group)


class Spec:
    """The hook specifications toolbus owns."""

    @hookspec
    def toolbus_register_adapters(self, register: AdapterRegistrar) -> None:
        """Register broker adapters by calling ``register(AdapterInfo(...))``."""

    @hookspec
    def toolbus_register_llms(self, register: LLMRegistrar) -> None:
        """Register LLM adapters by calling ``register(LLMInfo(...))``."""

    @hookspec
    def toolbus_register_state_stores(self, register: StateStoreRegistrar) -> None:
        """Register state store adapters by calling ``register(StateStoreInfo(...))``."""

    @hookspec
    def toolbus_register_policy_engines(self, register: PolicyEngineRegistrar) -> None:
        """Register call-policy engines by calling ``register(PolicyEngineInfo(...))``."""

    @hookspec
    def toolbus_register_tools(self, register: ToolRegistrar) -> None:
        """Register tool services (``register.service(...)``) and tool types."""

    @hookspec
    def toolbus_register_commands(self, cli: CommandLine) -> None:
        """Add commands with ``cli.command`` (``toolbus NAME``), ``cli.serve_command``
        (``toolbus serve KIND``) or ``cli.group`` (``toolbus NAME SUBCOMMAND``).

        Import heavy libraries inside the commands, not at module level, so that
        ``toolbus --help`` stays quick.
        """

    # Code hooks. Implementations may be ``async def`` and may take any subset of
    # the arguments. Sessions call them from lists compiled by toolbus.hooks.CodeHooks,
    # never through pluggy's hook calling, so hook wrappers are refused there.

    @hookspec
    def toolbus_on_request_start(
        self, session: AgentSession, messages: list[dict[str, Any]]
    ) -> list[dict[str, Any]] | None:
        """At :meth:`AgentSession.start`: return a new message list, or ``None`` to keep it."""

    @hookspec
    def toolbus_on_pre_tool_use(
        self, session: AgentSession, tool: ToolDescriptor, arguments: Mapping[str, Any]
    ) -> Deny | RewriteArguments | None:
        """Before a call runs: ``Deny(reason)``, ``RewriteArguments(...)`` or ``None``.

        ``arguments`` is read-only. Any deny wins over every other answer.
        """

    @hookspec
    def toolbus_on_post_tool_use(
        self,
        session: AgentSession,
        tool: ToolDescriptor,
        arguments: Mapping[str, Any],
        outcome: CallOutcome,
    ) -> str | None:
        """After a call ran (successfully or not): a new observation, or ``None`` to keep it."""

    @hookspec
    def toolbus_on_completion(self, session: AgentSession, record: AuditRecord) -> None:
        """When the session closes: observe its audit record."""


def _manager() -> pluggy.PluginManager:
    pm = pluggy.PluginManager(PROJECT)
    pm.add_hookspecs(Spec)
    return pm


def _entry_points(group: str) -> Sequence[metadata.EntryPoint]:
    return tuple(metadata.entry_points(group=group))


def _distribution(ep: metadata.EntryPoint) -> tuple[str, str]:
    dist = ep.dist
    if dist is None:
        return ("?", "?")
    return (dist.metadata["Name"], dist.version)


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
    found = [ep for ep in _entry_points(kind.group) if ep.name == base]
    if not found:
        installed = sorted(ep.name for ep in _entry_points(kind.group))
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
    found = [ep for ep in _entry_points(POLICY_GROUP) if ep.name == name]
    if not found:
        installed = sorted(ep.name for ep in _entry_points(POLICY_GROUP))
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
    for ep in _entry_points(PLUGIN_GROUP):
        distribution, _ = _distribution(ep)
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
    for ep in sorted(_entry_points(COMMAND_GROUP), key=lambda ep: ep.name):
        pm = _manager()
        try:
            pm.register(ep.load(), name=ep.name)
            pm.hook.toolbus_register_commands(cli=cli)
        except Exception:
            distribution, _ = _distribution(ep)
            log.exception("command plugin %r (%s) failed to load; skipped", ep.name, distribution)


#: The code-hook names of :class:`Spec`.
CODE_HOOKS = (
    "toolbus_on_request_start",
    "toolbus_on_pre_tool_use",
    "toolbus_on_post_tool_use",
    "toolbus_on_completion",
)


def load_hook_plugins() -> list[tuple[str, object]]:
    """``(entry-point name, module)`` for every installed tool plugin that has code hooks.

    Sorted by entry-point name, so that hooks run in the same order on every
    machine. A plugin that fails to import is logged and skipped, as by
    :func:`load_tool_plugins`.
    """
    found: list[tuple[str, object]] = []
    for ep in sorted(_entry_points(PLUGIN_GROUP), key=lambda ep: ep.name):
        try:
            module = ep.load()
        except Exception:
            distribution, _ = _distribution(ep)
            log.exception("tool plugin %r (%s) failed to load; skipped", ep.name, distribution)
            continue
        if any(_is_hookimpl(getattr(module, name, None)) for name in CODE_HOOKS):
            found.append((ep.name, module))
    return found


def _is_hookimpl(function: object) -> bool:
    return getattr(function, f"{PROJECT}_impl", None) is not None


@dataclass(frozen=True, slots=True)
class InstalledPlugin:
    kind: str  # "adapter", "llm", "state", "policy", "tools" or "commands"
    name: str
    distribution: str
    version: str


def installed_plugins() -> list[InstalledPlugin]:
    """Every installed adapter and tool plugin with its distribution and version (no imports)."""
    found = []
    groups = (
        ("adapter", ADAPTER_GROUP),
        ("llm", LLM_GROUP),
        ("state", STATE_GROUP),
        ("policy", POLICY_GROUP),
        ("tools", PLUGIN_GROUP),
        ("commands", COMMAND_GROUP),
    )
    for kind, group in groups:
        for ep in _entry_points(group):
            distribution, version = _distribution(ep)
            found.append(InstalledPlugin(kind, ep.name, distribution, version))
    return sorted(found, key=lambda p: (p.kind, p.name))
