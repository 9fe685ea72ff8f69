"""toolbus: agent tools behind message brokers.

Write a tool service as a decorated function or a :class:`ToolService`
subclass, serve it with :class:`ServiceHost` (or ``toolbus serve``), and call it
with :class:`ToolServiceClient`, or by tool name through :class:`Tools`.
Brokers are plugins picked by URL: ``memory://``, ``nats://``, ``pulsar://``,
``kafka://``.
"""

from toolbus.application.agent.outcomes import CallOutcome
from toolbus.application.agent.session import AgentSession
from toolbus.application.calls.client import CallResult, ToolServiceClient
from toolbus.application.calls.host import ServiceHost, running
from toolbus.application.calls.service import ToolResult, ToolService, tool_service
from toolbus.application.calls.tools import ToolInvocation, Tools
from toolbus.application.live.announcements import Announcer
from toolbus.application.live.config_client import ConfigClient
from toolbus.application.live.config_files import load_registry_from_path, read_snapshot
from toolbus.application.live.registry import LiveRegistry
from toolbus.domain.access.permissions import Permissions
from toolbus.domain.config.descriptors import ServiceDescriptor, ToolDescriptor
from toolbus.domain.config.loading import load_registry
from toolbus.domain.config.registry import Registry
from toolbus.domain.errors import (
    AccessDenied,
    BadRequest,
    ConfigError,
    DeadlineExceeded,
    InternalError,
    NotFound,
    ToolAccessDenied,
    ToolbusError,
    ToolCallError,
    ToolServiceError,
    ToolTimeout,
    Unavailable,
)
from toolbus.plugins import connect
from toolbus.runtime import open_tools

__all__ = [
    "AccessDenied",
    "AgentSession",
    "Announcer",
    "BadRequest",
    "CallOutcome",
    "CallResult",
    "ConfigClient",
    "ConfigError",
    "DeadlineExceeded",
    "InternalError",
    "LiveRegistry",
    "NotFound",
    "Permissions",
    "Registry",
    "ServiceDescriptor",
    "ServiceHost",
    "ToolAccessDenied",
    "ToolCallError",
    "ToolDescriptor",
    "ToolInvocation",
    "ToolResult",
    "ToolService",
    "ToolServiceClient",
    "ToolServiceError",
    "ToolTimeout",
    "ToolbusError",
    "Tools",
    "Unavailable",
    "connect",
    "load_registry",
    "load_registry_from_path",
    "open_tools",
    "read_snapshot",
    "running",
    "tool_service",
]
