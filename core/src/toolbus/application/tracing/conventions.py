"""Span names and attributes, by the OpenTelemetry semantic conventions.

* A tool call is ``execute_tool {gen_ai.tool.name}`` (INTERNAL): GenAI's
  execute-tool span, with ``gen_ai.tool.call.id`` when the model gave one.
* The agent loop's request is ``invoke_agent {gen_ai.agent.name}`` (INTERNAL),
  its model turns ``chat {gen_ai.request.model}`` (CLIENT), with the provider,
  the model, the tokens used and why the model stopped.
* An MCP request served by ``toolbus mcp serve`` is the MCP SDK's server span
  (``mcp.method.name``, ``mcp.protocol.version``, ...); toolbus adds
  ``mcp.session.id`` where the client has a session.
* The hops over the bus keep their toolbus names (``toolbus call {service}``,
  CLIENT; ``toolbus serve {service}``, SERVER) with the messaging attributes
  of a request sent and processed.

Every attribute name is a constant of the ``opentelemetry-semantic-conventions``
package (its incubating ``gen_ai``, ``mcp`` and ``messaging`` modules; the
GenAI ones are maintained in OpenTelemetry's GenAI conventions now, under the
same names). That package comes with the OpenTelemetry SDK, and spans are only
made where an SDK records them; without it, this module defines the functions
but nothing calls them.

Nothing here records a value that may be secret: no arguments, no results,
no error messages; tool and model names, ids and counts only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

try:
    from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
    from opentelemetry.semconv._incubating.attributes import mcp_attributes as mcp
    from opentelemetry.semconv._incubating.attributes import messaging_attributes as messaging
    from opentelemetry.semconv.attributes import error_attributes

    HAVE_CONVENTIONS = True
    ERROR_TYPE = error_attributes.ERROR_TYPE
    EXECUTE_TOOL = gen_ai.GenAiOperationNameValues.EXECUTE_TOOL.value
    INVOKE_AGENT = gen_ai.GenAiOperationNameValues.INVOKE_AGENT.value
    CHAT = gen_ai.GenAiOperationNameValues.CHAT.value
except ImportError:  # pragma: no cover - exercised where OpenTelemetry is absent
    # Then nothing records spans (propagation.recording() is False) and
    # nothing below is called.
    HAVE_CONVENTIONS = False

#: A tool the agent calls and the bus runs elsewhere: GenAI's "extension" kind.
TOOL_TYPE = "extension"
#: The name of toolbus's agent in ``invoke_agent`` spans.
AGENT_NAME = "toolbus"

# toolbus's own attributes, beside the conventions'.
TOOLBUS_TOOL = "toolbus.tool"
TOOLBUS_SERVICE = "toolbus.service"


def tool_call(
    llm_name: str,
    tool: str,
    service: str,
    description: str = "",
    call_id: str | None = None,
) -> tuple[str, dict[str, Any]]:
    """The ``execute_tool`` span of calling ``tool`` (``llm_name`` as the model names it)."""
    attributes: dict[str, Any] = {
        gen_ai.GEN_AI_OPERATION_NAME: EXECUTE_TOOL,
        gen_ai.GEN_AI_TOOL_NAME: llm_name,
        gen_ai.GEN_AI_TOOL_TYPE: TOOL_TYPE,
        TOOLBUS_TOOL: tool,
        TOOLBUS_SERVICE: service,
    }
    if description:
        attributes[gen_ai.GEN_AI_TOOL_DESCRIPTION] = description
    if call_id:
        attributes[gen_ai.GEN_AI_TOOL_CALL_ID] = call_id
    return f"{EXECUTE_TOOL} {llm_name}", attributes


def client_call(label: str, service: str | None, request_queue: str) -> tuple[str, dict[str, Any]]:
    """The CLIENT span of a call sent to ``request_queue`` and answered."""
    return f"toolbus call {label}", {
        TOOLBUS_SERVICE: service or "",
        messaging.MESSAGING_DESTINATION_NAME: request_queue,
        messaging.MESSAGING_OPERATION_TYPE: messaging.MessagingOperationTypeValues.SEND.value,
    }


def served(service: str, request_queue: str, group: str) -> tuple[str, dict[str, Any]]:
    """The SERVER span of a service host answering a request from ``request_queue``."""
    return f"toolbus serve {service}", {
        TOOLBUS_SERVICE: service,
        messaging.MESSAGING_DESTINATION_NAME: request_queue,
        messaging.MESSAGING_OPERATION_TYPE: messaging.MessagingOperationTypeValues.PROCESS.value,
        messaging.MESSAGING_CONSUMER_GROUP_NAME: group,
    }


def agent_request(model: str, provider: str, conversation: str) -> tuple[str, dict[str, Any]]:
    """The ``invoke_agent`` span of one agent request (``conversation``: its request id)."""
    return f"{INVOKE_AGENT} {AGENT_NAME}", {
        gen_ai.GEN_AI_OPERATION_NAME: INVOKE_AGENT,
        gen_ai.GEN_AI_AGENT_NAME: AGENT_NAME,
        gen_ai.GEN_AI_PROVIDER_NAME: provider,
        gen_ai.GEN_AI_REQUEST_MODEL: model,
        gen_ai.GEN_AI_CONVERSATION_ID: conversation,
    }


def model_turn(model: str, provider: str) -> tuple[str, dict[str, Any]]:
    """The ``chat`` span of one model turn."""
    return f"{CHAT} {model}", {
        gen_ai.GEN_AI_OPERATION_NAME: CHAT,
        gen_ai.GEN_AI_PROVIDER_NAME: provider,
        gen_ai.GEN_AI_REQUEST_MODEL: model,
    }


def usage(
    input_tokens: int, output_tokens: int, finish_reasons: Sequence[str] = ()
) -> dict[str, Any]:
    """What a model turn (or a whole request) used, and why the model stopped."""
    attributes: dict[str, Any] = {
        gen_ai.GEN_AI_USAGE_INPUT_TOKENS: input_tokens,
        gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS: output_tokens,
    }
    if finish_reasons:
        attributes[gen_ai.GEN_AI_RESPONSE_FINISH_REASONS] = list(finish_reasons)
    return attributes


def mcp_session(session_id: str) -> dict[str, Any]:
    """The MCP session a request belongs to (the ``Mcp-Session-Id`` of 2025 revisions)."""
    return {mcp.MCP_SESSION_ID: session_id}
