"""toolbus: agent tools behind message brokers.

The names a user needs, by job (docs/architecture.md has the table):

* call tools by name: :func:`open_tools` (the quickest start), or :class:`Tools`
  over a :class:`ToolServiceClient` on a bus from :func:`connect`;
* answer an agent request: :class:`AgentLoop` with a model from :func:`connect_llm`
  (served on the bus by :class:`AgentService`, asked with :class:`AgentClient`), or
  your own loop around :class:`AgentSession`, kept current by :class:`LiveRegistry`;
* write and serve tool services: :func:`tool_service` or :class:`ToolService`,
  served with :func:`running`, :class:`ServiceHost` or ``toolbus serve``; a tool
  asks its caller with :func:`ask` (or :func:`ask_all`) for an :class:`Elicitation`,
  a :class:`Sampling` or a :class:`RootsRequest` (callers answer through
  ``toolbus.application.calls.relaying``);
* configuration: :func:`registry_from` (a path, a snapshot dict, a Registry or the
  installed plugins), or the narrower :func:`load_registry` and
  :func:`load_registry_from_path`;
* errors: :class:`ToolbusError` and the kinds a caller catches: a tool call's
  (:class:`ToolCallError` and its wire types, :class:`InputRequired` and
  :class:`InputUnavailable` among them), :class:`UnknownTool`,
  :class:`BusClosed` (:class:`BrokerUnavailable` while the bus reconnects),
  :class:`MessageTooLarge` (:class:`MessageRefused` when the broker's own limit
  is lower), :class:`PluginError`, :class:`ConfigError`, :class:`AccessDenied`;
* state shared by replicas: :func:`connect_state` (``memory://``, ``nats://``,
  ``redis://``), raising :class:`StateStoreError` and :class:`StateStoreUnavailable`.

Everything else is importable from its concern package (``toolbus.application.calls``,
``.agent``, ``.live``, ``.identity`` for signed calls; ``toolbus.domain.*``). Brokers
are plugins picked by URL: ``memory://``, ``nats://``, ``pulsar://``, ``kafka://``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from toolbus._internal.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from toolbus.application.agent.client import AgentClient
    from toolbus.application.agent.llm import LLM, LLMError
    from toolbus.application.agent.loop import AgentLimits, AgentLoop, AgentResult
    from toolbus.application.agent.outcomes import CallOutcome
    from toolbus.application.agent.service import AgentService
    from toolbus.application.agent.session import AgentSession
    from toolbus.application.calls.asking import ask, ask_all, can_ask, carried
    from toolbus.application.calls.client import CallResult, ToolServiceClient
    from toolbus.application.calls.host import ServiceHost, running
    from toolbus.application.calls.retries import RetryPolicy
    from toolbus.application.calls.service import ToolResult, ToolService, tool_service
    from toolbus.application.calls.tools import Tools
    from toolbus.application.live.announcements import Announcer
    from toolbus.application.live.config_client import ConfigClient
    from toolbus.application.live.config_files import load_registry_from_path, read_snapshot
    from toolbus.application.live.registry import LiveRegistry
    from toolbus.domain.access.permissions import Permissions
    from toolbus.domain.agent.wire import AgentEvent, AgentRequest, AgentStep
    from toolbus.domain.calls.input_requests import (
        Elicitation,
        ElicitationAnswer,
        InputRequired,
        InputUnavailable,
        Root,
        RootsAnswer,
        RootsRequest,
        Sampling,
        SamplingAnswer,
    )
    from toolbus.domain.config.descriptors import ServiceDescriptor, ToolDescriptor
    from toolbus.domain.config.loading import load_registry
    from toolbus.domain.config.registry import Registry
    from toolbus.domain.errors import (
        AccessDenied,
        BadRequest,
        BrokerOptionError,
        BrokerUnavailable,
        BusClosed,
        ConfigError,
        DeadlineExceeded,
        InternalError,
        MessageRefused,
        MessageTooLarge,
        NotFound,
        PluginError,
        QueueNameError,
        StateStoreError,
        StateStoreUnavailable,
        ToolbusError,
        ToolCallError,
        ToolServiceError,
        ToolTimeout,
        Unauthorized,
        Unavailable,
        UnknownTool,
        WireError,
    )
    from toolbus.plugins import connect, connect_llm, connect_state
    from toolbus.runtime import open_tools, registry_from

# Each name is imported from its module on first use: ``import toolbus`` (and any
# ``toolbus.x.y``, which imports this package first) costs nothing more, so a command
# or a service pays only for what it uses (docs/performance.md, start-up).
_HOMES = {
    "LLM": "application.agent.llm",
    "LLMError": "application.agent.llm",
    "AgentLimits": "application.agent.loop",
    "AgentLoop": "application.agent.loop",
    "AgentResult": "application.agent.loop",
    "CallOutcome": "application.agent.outcomes",
    "AgentClient": "application.agent.client",
    "AgentService": "application.agent.service",
    "AgentSession": "application.agent.session",
    "ask": "application.calls.asking",
    "ask_all": "application.calls.asking",
    "can_ask": "application.calls.asking",
    "carried": "application.calls.asking",
    "CallResult": "application.calls.client",
    "ToolServiceClient": "application.calls.client",
    "ServiceHost": "application.calls.host",
    "running": "application.calls.host",
    "RetryPolicy": "application.calls.retries",
    "ToolResult": "application.calls.service",
    "ToolService": "application.calls.service",
    "tool_service": "application.calls.service",
    "Tools": "application.calls.tools",
    "Announcer": "application.live.announcements",
    "ConfigClient": "application.live.config_client",
    "load_registry_from_path": "application.live.config_files",
    "read_snapshot": "application.live.config_files",
    "LiveRegistry": "application.live.registry",
    "Permissions": "domain.access.permissions",
    "AgentEvent": "domain.agent.wire",
    "AgentRequest": "domain.agent.wire",
    "AgentStep": "domain.agent.wire",
    "Elicitation": "domain.calls.input_requests",
    "ElicitationAnswer": "domain.calls.input_requests",
    "InputRequired": "domain.calls.input_requests",
    "InputUnavailable": "domain.calls.input_requests",
    "Root": "domain.calls.input_requests",
    "RootsAnswer": "domain.calls.input_requests",
    "RootsRequest": "domain.calls.input_requests",
    "Sampling": "domain.calls.input_requests",
    "SamplingAnswer": "domain.calls.input_requests",
    "ServiceDescriptor": "domain.config.descriptors",
    "ToolDescriptor": "domain.config.descriptors",
    "load_registry": "domain.config.loading",
    "Registry": "domain.config.registry",
    "AccessDenied": "domain.errors",
    "BadRequest": "domain.errors",
    "BrokerOptionError": "domain.errors",
    "BrokerUnavailable": "domain.errors",
    "BusClosed": "domain.errors",
    "ConfigError": "domain.errors",
    "DeadlineExceeded": "domain.errors",
    "InternalError": "domain.errors",
    "MessageRefused": "domain.errors",
    "MessageTooLarge": "domain.errors",
    "NotFound": "domain.errors",
    "PluginError": "domain.errors",
    "QueueNameError": "domain.errors",
    "StateStoreError": "domain.errors",
    "StateStoreUnavailable": "domain.errors",
    "ToolbusError": "domain.errors",
    "ToolCallError": "domain.errors",
    "ToolServiceError": "domain.errors",
    "ToolTimeout": "domain.errors",
    "Unauthorized": "domain.errors",
    "Unavailable": "domain.errors",
    "UnknownTool": "domain.errors",
    "WireError": "domain.errors",
    "connect": "plugins",
    "connect_llm": "plugins",
    "connect_state": "plugins",
    "open_tools": "runtime",
    "registry_from": "runtime",
}

__getattr__ = lazy_exports(__name__, _HOMES)

__all__ = [
    "LLM",
    "AccessDenied",
    "AgentClient",
    "AgentEvent",
    "AgentLimits",
    "AgentLoop",
    "AgentRequest",
    "AgentResult",
    "AgentService",
    "AgentSession",
    "AgentStep",
    "Announcer",
    "BadRequest",
    "BrokerOptionError",
    "BrokerUnavailable",
    "BusClosed",
    "CallOutcome",
    "CallResult",
    "ConfigClient",
    "ConfigError",
    "DeadlineExceeded",
    "Elicitation",
    "ElicitationAnswer",
    "InputRequired",
    "InputUnavailable",
    "InternalError",
    "LLMError",
    "LiveRegistry",
    "MessageRefused",
    "MessageTooLarge",
    "NotFound",
    "Permissions",
    "PluginError",
    "QueueNameError",
    "Registry",
    "RetryPolicy",
    "Root",
    "RootsAnswer",
    "RootsRequest",
    "Sampling",
    "SamplingAnswer",
    "ServiceDescriptor",
    "ServiceHost",
    "StateStoreError",
    "StateStoreUnavailable",
    "ToolCallError",
    "ToolDescriptor",
    "ToolResult",
    "ToolService",
    "ToolServiceClient",
    "ToolServiceError",
    "ToolTimeout",
    "ToolbusError",
    "Tools",
    "Unauthorized",
    "Unavailable",
    "UnknownTool",
    "WireError",
    "ask",
    "ask_all",
    "can_ask",
    "carried",
    "connect",
    "connect_llm",
    "connect_state",
    "load_registry",
    "load_registry_from_path",
    "open_tools",
    "read_snapshot",
    "registry_from",
    "running",
    "tool_service",
]
