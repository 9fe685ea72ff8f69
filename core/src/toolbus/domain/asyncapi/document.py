"""The AsyncAPI 3.0 document of a deployment, built from its configuration (pure).

:func:`asyncapi_document` describes what a registry configures, seen from the
tool services (they *receive* requests and reply):

* one channel per request queue and per response queue, at the address the
  broker knows it by, with the broker's channel bindings;
* one ``receive`` operation per tool served over the bus, on its service's
  request channel, replying on the response channel, tagged with the tool's
  groups, with the broker's operation bindings (the competing consumers'
  group);
* one request message per tool: the TrustGraph envelope in both request
  generations (2.4 and later: ``config`` and ``arguments``; 2.1 to 2.3: also
  ``user``), whose ``config`` and ``arguments`` are JSON text; the JSON
  Schema of what that text holds is given under ``x-contentSchema`` (the
  meaning of JSON Schema's ``contentSchema``, which the AsyncAPI schema
  format, a superset of draft 07, lacks), built from the service's config
  parameters and the tool's arguments;
* one response message, shared: ``error``, ``response``, ``end_of_stream``;
* the message properties as headers, with ``id`` the correlation id.

The wire protocol itself is described in docs/wire-protocol.md.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from toolbus.domain.asyncapi.brokers import AsyncApiBroker
from toolbus.domain.calls import wire
from toolbus.domain.calls.queues import parse_queue
from toolbus.domain.config.descriptors import (
    AFTER_EXECUTION_VALUES,
    ServiceDescriptor,
    ToolDescriptor,
)
from toolbus.domain.config.registry import Registry
from toolbus.domain.config.schemas import json_schema
from toolbus.domain.identity.claims import PROP_CALL_TOKEN

ASYNCAPI_VERSION = "3.0.0"
SERVER = "broker"
RESPONSE_MESSAGE = "toolbus.response"
REQUEST_HEADERS = "toolbus.request-properties"
RESPONSE_HEADERS = "toolbus.response-properties"
RESPONSE_PAYLOAD = "toolbus.response"
CALL_ID = "call-id"
_NOT_AN_ID = re.compile(r"[^A-Za-z0-9._-]+")


def asyncapi_document(
    registry: Registry,
    broker: AsyncApiBroker | None = None,
    *,
    title: str = "toolbus deployment",
    version: str = "0.0.0",
    groups: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The AsyncAPI 3.0 document of ``registry``'s tool services on ``broker``.

    ``broker`` (None: no ``servers``, queue names as written) gives the server,
    channel addresses and bindings; ``version`` is the document's own version
    (the deployment's, or toolbus's); ``groups`` maps a service id to its
    competing consumers' group when it is not the service id.
    """
    ids = _Ids()
    channels: dict[str, Any] = {}
    operations: dict[str, Any] = {}
    messages: dict[str, Any] = {RESPONSE_MESSAGE: _response_message()}
    tools_by_service: dict[str, list[ToolDescriptor]] = {}
    for configured in registry.tools.values():
        service_id = configured.service
        if configured.type == "tool-service" and service_id and service_id in registry.services:
            tools_by_service.setdefault(service_id, []).append(configured)
    for service_id, service in sorted(registry.services.items()):
        group = (groups or {}).get(service_id, service_id)
        base = ids.unique(service_id)
        requests, responses = f"{base}.requests", f"{base}.responses"
        # A service with no tool configured still gets one operation: calls of it.
        tools: list[ToolDescriptor | None] = [
            *sorted(tools_by_service.get(service_id, ()), key=lambda t: t.key)
        ] or [None]
        request_messages: dict[str, Any] = {}
        for tool in tools:
            key = ids.unique(tool.key if tool else service_id, "message")
            messages[f"{key}.request"] = _request_message(service, tool)
            request_messages[key] = _ref("components", "messages", f"{key}.request")
        channels[requests] = _channel(
            broker,
            service.request_queue,
            f"Requests to tool service {service_id!r}",
            request_messages,
        )
        channels[responses] = _channel(
            broker,
            service.response_queue,
            f"Answers of tool service {service_id!r}, to every caller; each keeps its own ids",
            {"answer": _ref("components", "messages", RESPONSE_MESSAGE)},
        )
        queue = parse_queue(service.request_queue)
        bindings = broker.operation_bindings(queue, group) if broker is not None else {}
        for tool, message_key in zip(tools, request_messages, strict=True):
            operation_id = ids.unique(tool.key if tool else service_id, "operation")
            operations[operation_id] = _operation(
                service, tool, requests, message_key, responses, bindings
            )
    document: dict[str, Any] = {
        "asyncapi": ASYNCAPI_VERSION,
        "info": {
            "title": title,
            "version": version,
            "description": (
                "Tool services behind a message broker. Each tool service receives "
                "requests on its request queue and answers on its response queue, "
                "correlated by the `id` message property; a streamed answer is several "
                "responses, the last with `end_of_stream`."
            ),
        },
        "defaultContentType": "application/json",
    }
    if broker is not None:
        document["servers"] = {SERVER: broker.server()}
    document["channels"] = channels
    document["operations"] = operations
    document["components"] = {
        "messages": messages,
        "schemas": {
            REQUEST_HEADERS: _request_headers(),
            RESPONSE_HEADERS: _response_headers(),
            RESPONSE_PAYLOAD: _response_payload(),
        },
        "correlationIds": {
            CALL_ID: {
                "description": "The caller's fresh id for a call; every answer carries it.",
                "location": f"$message.header#/{wire.PROP_ID}",
            }
        },
    }
    return document


class _Ids:
    """AsyncAPI component keys (``[A-Za-z0-9._-]+``), each used once per kind."""

    def __init__(self) -> None:
        self._taken: set[tuple[str, str]] = set()

    def unique(self, name: str, kind: str = "channel") -> str:
        base = _NOT_AN_ID.sub("_", name).strip("_") or "service"
        key, n = base, 1
        while (kind, key) in self._taken:
            n += 1
            key = f"{base}-{n}"
        self._taken.add((kind, key))
        return key


def _ref(*path: str) -> dict[str, str]:
    return {"$ref": "#/" + "/".join(p.replace("~", "~0").replace("/", "~1") for p in path)}


def _channel(
    broker: AsyncApiBroker | None, queue_name: str, description: str, messages: dict[str, Any]
) -> dict[str, Any]:
    queue = parse_queue(queue_name)
    channel: dict[str, Any] = {
        "address": broker.address(queue) if broker is not None else queue.raw,
        "title": queue.raw,
        "description": f"{description}. toolbus queue `{queue.raw}` "
        + ("(persistent: at least once)." if queue.persistent else "(at most once)."),
        "messages": messages,
    }
    if broker is not None:
        channel["servers"] = [_ref("servers", SERVER)]
        bindings = broker.channel_bindings(queue)
        if bindings:
            channel["bindings"] = bindings
    return channel


def _operation(
    service: ServiceDescriptor,
    tool: ToolDescriptor | None,
    requests: str,
    message_key: str,
    responses: str,
    bindings: Mapping[str, Any],
) -> dict[str, Any]:
    operation: dict[str, Any] = {
        "action": "receive",
        "channel": _ref("channels", requests),
        "messages": [_ref("channels", requests, "messages", message_key)],
        "reply": {
            "channel": _ref("channels", responses),
            "messages": [_ref("channels", responses, "messages", "answer")],
        },
    }
    if tool is None:
        operation["title"] = service.id
        operation["summary"] = f"Calls of tool service {service.id!r} (no tool configured)"
    else:
        operation["title"] = tool.name
        if tool.description:
            operation["summary"] = _first_line(tool.description)
            operation["description"] = tool.description
        operation["tags"] = [{"name": group} for group in tool.groups]
    if bindings:
        operation["bindings"] = dict(bindings)
    return operation


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def _json_text(description: str, content_schema: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "type": "string",
        "contentMediaType": "application/json",
        "description": description,
        "x-contentSchema": content_schema,
        **extra,
    }


def _request_message(service: ServiceDescriptor, tool: ToolDescriptor | None) -> dict[str, Any]:
    params = service.config_params
    config_schema: dict[str, Any] = {
        "type": "object",
        "properties": {param.name: {} for param in params},
        "required": [param.name for param in params if param.required],
    }
    config_extra: dict[str, Any] = {}
    if tool is not None:
        config_extra["examples"] = [json.dumps(dict(tool.config), sort_keys=True)]
        arguments_schema = json_schema(tool)
        name, summary = tool.name, _first_line(tool.description) or tool.name
    else:
        arguments_schema = {"type": "object"}
        name, summary = service.id, f"A call of tool service {service.id!r}"
    config = _json_text(
        "The tool's config values (what the service declares in config-params), as JSON text.",
        config_schema,
        **config_extra,
    )
    arguments = _json_text(
        "The call's arguments, as JSON text (`{}` when there are none).", arguments_schema
    )
    user = {"type": "string", "description": "Who the call is for."}
    newest = service.generation == wire.GENERATION_2_4
    return {
        "name": name,
        "title": f"{name} request",
        "summary": summary,
        "contentType": "application/json",
        "correlationId": _ref("components", "correlationIds", CALL_ID),
        "headers": _ref("components", "schemas", REQUEST_HEADERS),
        "payload": {
            "description": "A request, in either generation (services read both); callers of "
            f"this service write the {'2.4' if newest else '2.1'} generation.",
            "anyOf": [
                {
                    "title": "TrustGraph 2.4 and later",
                    "type": "object",
                    "required": ["config", "arguments"],
                    "properties": {"config": config, "arguments": arguments},
                },
                {
                    "title": "TrustGraph 2.1 to 2.3",
                    "type": "object",
                    "required": ["user", "config", "arguments"],
                    "properties": {"user": user, "config": config, "arguments": arguments},
                },
            ],
        },
    }


def _response_message() -> dict[str, Any]:
    return {
        "name": "response",
        "title": "Tool service answer",
        "summary": "An observation, one chunk of a streamed one, or an error.",
        "contentType": "application/json",
        "correlationId": _ref("components", "correlationIds", CALL_ID),
        "headers": _ref("components", "schemas", RESPONSE_HEADERS),
        "payload": _ref("components", "schemas", RESPONSE_PAYLOAD),
    }


def _properties(names: Iterable[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    return {name: {"type": "string", **schema} for name, schema in names}


def _request_headers() -> dict[str, Any]:
    return {
        "type": "object",
        "description": "Message properties (NATS and Kafka headers, Pulsar properties).",
        "required": [wire.PROP_ID],
        "properties": _properties(
            [
                (wire.PROP_ID, {"description": "A fresh UUID per call; answers carry it."}),
                (wire.PROP_USER, {"description": "Who the call is for (2.4 generation)."}),
                (wire.PROP_TRACEPARENT, {"description": "W3C trace context."}),
                (wire.PROP_TRACESTATE, {"description": "W3C trace context."}),
                (
                    wire.PROP_DEADLINE,
                    {"description": "Unix seconds after which the caller no longer waits."},
                ),
                (
                    wire.PROP_ENV_ARGS,
                    {
                        "description": "JSON object of argument name to environment variable "
                        "the service fills it from."
                    },
                ),
                (PROP_CALL_TOKEN, {"description": "A signed call token (verified callers)."}),
            ]
        ),
    }


def _response_headers() -> dict[str, Any]:
    return {
        "type": "object",
        "required": [wire.PROP_ID],
        "properties": _properties(
            [
                (wire.PROP_ID, {"description": "The id of the call this answers."}),
                (
                    wire.PROP_AFTER_EXECUTION,
                    {
                        "enum": list(AFTER_EXECUTION_VALUES),
                        "description": "On the last message: whether the agent goes on.",
                    },
                ),
            ]
        ),
    }


def _response_payload() -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["error", "response", "end_of_stream"],
        "properties": {
            "error": {
                "description": "null on success.",
                "anyOf": [
                    {"type": "null"},
                    {
                        "type": "object",
                        "required": ["type", "message"],
                        "properties": {
                            "type": {"type": "string", "examples": [wire.GENERIC_ERROR]},
                            "message": {"type": "string"},
                        },
                    },
                ],
            },
            "response": {"type": "string", "description": "The observation (or a chunk)."},
            "end_of_stream": {"type": "boolean"},
        },
    }
