"""Tool-service descriptors: the immutable models a validated snapshot becomes.

A snapshot is ``{"tool-service": {id: descriptor}, "tool": {key: descriptor}}``;
:func:`~toolbus.domain.config.loading.load_registry` validates one and builds
these. The constants name the snapshot's sections and the fields a tool may have.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from toolbus.domain.calls.arguments import NO_OPTIONS, ArgumentOptions
from toolbus.domain.calls.naming import sanitize_toolname
from toolbus.domain.calls.wire import NEWEST_GENERATION

DEFAULT_GROUP = "default"
SERVICES = "tool-service"
TOOLS = "tool"
TOOL_SERVICE_TYPE = "tool-service"
#: Tool-service key: which TrustGraph request generation the service reads
#: ("2.1": with ``user``; "2.4", the default: without), or a 2.x release.
TRUSTGRAPH_WIRE = "trustgraph-wire"
BUILTIN_TOOL_TYPES: frozenset[str] = frozenset({TOOL_SERVICE_TYPE})

# The canonical key comes first: it is the one TrustGraph's code and CLI write.
APPLICABLE_STATES_KEYS = ("applicable-states", "available_in_states", "available-in-states")
JSON_SCHEMA_TYPES = frozenset({"string", "number", "integer", "boolean", "array", "object", "null"})
TOOL_FIELDS = frozenset(
    {
        "type",
        "name",
        "description",
        "service",
        "arguments",
        "group",
        "state",
        "options",
        "after-execution",
        "approval",
        "annotations",
        "task-support",
        "additional-arguments",
    }
    | set(APPLICABLE_STATES_KEYS)
)
AFTER_EXECUTION_VALUES = ("suspend", "terminate")
#: ``task-support``: whether a call of the tool may run as a task (``optional``: when
#: its caller asks, or when it waits for a person), must (``required``: every call is a
#: task), or never does (``forbidden``: its caller waits in place). MCP's
#: ``execution.taskSupport`` says the same of a tool.
TASK_SUPPORT_VALUES = ("optional", "required", "forbidden")
#: The hints of MCP's tool annotations a descriptor's ``annotations`` may give.
ANNOTATION_HINTS = ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")


@dataclass(frozen=True, slots=True)
class ConfigParam:
    """A configuration value a tool service accepts from each tool that uses it."""

    name: str
    required: bool = False


@dataclass(frozen=True, slots=True)
class ServiceDescriptor:
    """Tier 1: where a tool service listens and which config values it accepts."""

    id: str
    request_queue: str
    response_queue: str
    config_params: tuple[ConfigParam, ...] = ()
    #: The request generation callers write for it (``trustgraph-wire``).
    generation: str = NEWEST_GENERATION


@dataclass(frozen=True, slots=True)
class ToolArgument:
    """One argument the LLM supplies, described the way JSON Schema describes a property."""

    name: str
    type: str
    description: str = ""
    required: bool = True
    # Further JSON-Schema keywords (enum, default, minimum, items, ...), passed to the LLM as is.
    schema_extras: Mapping[str, Any] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        _freeze(self, "schema_extras")


@dataclass(frozen=True, slots=True)
class ApprovalRule:
    """A tool's ``approval``: every call waits for a person's decision.

    ``approvers`` names a team of ``[approvals.teams]`` (``None``: the default
    approvers); ``timeout`` is seconds a call waits (``None``: the default).
    """

    approvers: str | None = None
    timeout: float | None = None


@dataclass(frozen=True, slots=True)
class ToolDescriptor:
    """Tier 2: a tool as the agent and the LLM see it.

    ``llm_name`` is derived from ``name`` (:func:`~toolbus.domain.calls.naming.sanitize_toolname`),
    so it always is a valid function name. ``groups`` is ``("default",)`` when the
    descriptor has no ``group`` and ``()`` for an explicit empty list; those differ.
    ``applicable_states`` is ``None`` when the tool is offered in every state.
    ``config`` holds only the values the tool's service declares in
    ``config-params``; ``raw`` is the whole descriptor, for tool types added by
    plugins that read keys of their own.
    """

    key: str
    type: str
    name: str
    llm_name: str = field(init=False)
    description: str
    service: str | None = None
    arguments: tuple[ToolArgument, ...] = ()
    groups: tuple[str, ...] = (DEFAULT_GROUP,)
    state: str | None = None
    applicable_states: tuple[str, ...] | None = None
    config: Mapping[str, Any] = field(default_factory=dict, hash=False)
    raw: Mapping[str, Any] = field(default_factory=dict, hash=False)
    #: ``options``: argument defaults, fixed values and environment values.
    options: ArgumentOptions = field(default=NO_OPTIONS, hash=False)
    #: ``after-execution``: "suspend" (the agent goes on) or "terminate" (final answer).
    after_execution: str = "suspend"
    #: ``approval``: every call needs a person's approval; ``None``: only when a
    #: policy or the operator's rules say so.
    approval: ApprovalRule | None = None
    #: ``annotations``: MCP's hints about the tool (``readOnlyHint``, ``destructiveHint``...).
    annotations: Mapping[str, bool] = field(default_factory=dict, hash=False)
    #: ``task-support``: whether its calls may (``optional``), must (``required``) or never
    #: (``forbidden``) run as tasks.
    task_support: str = "optional"
    #: ``additional-arguments``: calls may give arguments the tool does not declare.
    additional_arguments: bool = False
    #: The argument names a call may give: the declared ones and those ``options``
    #: names; ``None`` with ``additional_arguments`` (any name).
    accepted_arguments: frozenset[str] | None = field(init=False, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "llm_name", sanitize_toolname(self.name))
        accepted = None
        if not self.additional_arguments:
            options = self.options
            accepted = frozenset(argument.name for argument in self.arguments).union(
                options.defaults, options.fixed, options.envs
            )
        object.__setattr__(self, "accepted_arguments", accepted)
        _freeze(self, "config")
        _freeze(self, "raw")
        _freeze(self, "annotations")

    def undeclared(self, arguments: Mapping[str, Any]) -> list[str]:
        """The names in ``arguments`` this tool does not take, in their order (often none).

        What the call policy and an approver are shown is checked by name against
        the declared arguments; an argument the tool does not declare would reach
        it unseen, so front doors refuse a call that has one.
        """
        accepted = self.accepted_arguments
        if accepted is None or accepted.issuperset(arguments):
            return []
        return [name for name in arguments if name not in accepted]


def _freeze(instance: object, attribute: str) -> None:
    # Descriptors are shared by every request that uses a registry: give out
    # read-only views so one caller cannot change what the next one sees.
    value = getattr(instance, attribute)
    if not isinstance(value, MappingProxyType):
        object.__setattr__(instance, attribute, MappingProxyType(dict(value)))
