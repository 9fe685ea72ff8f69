"""``tools/call`` arguments checked against the tool's input schema, as the protocol asks.

The SDK's low-level server hands a call's arguments to the handler as they
came. A tool the caller's session offers is checked against the input schema
``tools/list`` showed for it (``jsonschema``); arguments that do not fit are the
protocol's invalid-params error, and the tool is not called. A tool the session
does not offer is left to the session, whose refusal says no more than "not
available to you" (checking its arguments would tell what it takes).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import mcp_types as mcp
from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match
from mcp.shared.exceptions import MCPError

from toolbus.application.agent.session import AgentSession
from toolbus.domain.config.registry import Registry
from toolbus.domain.config.schemas import json_schema

#: Characters of a schema error kept in the answer: it may quote the value.
_MESSAGE_LIMIT = 200


class ArgumentCheck:
    """Validates the arguments of calls to offered tools; one compiled schema per tool."""

    def __init__(self) -> None:
        self._registry: Registry | None = None
        self._validators: dict[str, Draft202012Validator] = {}

    def check(self, session: AgentSession, name: str, arguments: Mapping[str, Any]) -> None:
        """Raise the invalid-params :class:`MCPError` when the arguments do not fit the schema."""
        registry = session.registry
        if not registry.is_available(name, session.groups, session.state):
            return
        if registry is not self._registry:
            self._registry, self._validators = registry, {}
        validator = self._validators.get(name)
        if validator is None:
            schema = json_schema(registry.tool(name))
            validator = self._validators[name] = Draft202012Validator(schema)
        if validator.is_valid(arguments):  # the usual case first: no error objects made
            return
        error = best_match(validator.iter_errors(arguments))
        assert error is not None
        where = ".".join(str(part) for part in error.absolute_path) or "arguments"
        message = error.message
        if len(message) > _MESSAGE_LIMIT:
            message = message[:_MESSAGE_LIMIT] + "…"
        raise MCPError(
            mcp.INVALID_PARAMS, f"Invalid arguments for tool {name!r}: {where}: {message}"
        )
