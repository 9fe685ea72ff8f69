"""The hook specifications toolbus owns (:class:`Spec`), and what each hook is handed.

A plugin implements the hooks with :data:`hookimpl`; the registration hooks
(``toolbus_register_*``) are called with a registrar (a callable taking an
:class:`AdapterInfo`, :class:`LLMInfo`, ... or a :class:`ToolRegistrar` or
:class:`CommandLine`), the code hooks by sessions (:mod:`toolbus.hooks`).
Finding and loading the plugins is :mod:`toolbus.plugins.discovery`'s job.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pluggy

from toolbus.application.calls.service import ToolService
from toolbus.domain.asyncapi.brokers import AsyncApiBroker
from toolbus.domain.config.schemas import arguments_from_schema
from toolbus.ports import BusFactory, PolicyEngineFactory, StateStoreFactory

if TYPE_CHECKING:
    import typer

    from toolbus.application.agent.audit import AuditRecord
    from toolbus.application.agent.code_hooks import Deny, RewriteArguments
    from toolbus.application.agent.llm import LLMFactory
    from toolbus.application.agent.outcomes import CallOutcome
    from toolbus.application.agent.session import AgentSession
    from toolbus.domain.config.descriptors import ToolDescriptor


PROJECT = "toolbus"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


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


#: The code-hook names of :class:`Spec`.
CODE_HOOKS = (
    "toolbus_on_request_start",
    "toolbus_on_pre_tool_use",
    "toolbus_on_post_tool_use",
    "toolbus_on_completion",
)
