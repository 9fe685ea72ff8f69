"""``tools/call`` arguments checked against the tool's input schema, as the protocol asks.

The SDK's low-level server hands a call's arguments to the handler as they
came. A tool the caller's session offers is checked against the input schema
``tools/list`` showed for it; arguments that do not fit are answered with a
tool error result (``isError: true``, the reason in words for the model, as
the 2025-11-25 revision asks: a model can correct its arguments, which it
cannot do with a protocol error), and the tool is not called. A tool the session does not
offer is left to the session, whose refusal says no more than "not available
to you" (checking its arguments would tell what it takes).

Every call is checked by ``jsonschema-rs`` (compiled once per tool and
configuration, a microsecond per call where ``jsonschema`` took tens), and
``jsonschema`` words the error of arguments that do not fit. A schema
``jsonschema-rs`` cannot compile offline (a remote ``$ref``, a pattern its
regular expressions do not take) is checked by ``jsonschema`` alone, and
arguments ``jsonschema-rs`` refuses are refused only when ``jsonschema`` says
why.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jsonschema_rs
import mcp_types as mcp
from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match

from toolbus.application.agent.session import AgentSession
from toolbus.domain.config.registry import Registry
from toolbus.domain.config.schemas import json_schema

#: Characters of a schema error kept in the answer: it may quote the value.
_MESSAGE_LIMIT = 200


class _Schema:
    """One tool's input schema, compiled: the fast check, and the one that words errors."""

    __slots__ = ("_fast", "_worded", "schema")

    def __init__(self, schema: dict[str, Any]) -> None:
        #: The schema as ``tools/list`` shows it.
        self.schema = schema
        self._worded: Draft202012Validator | None = None
        try:
            # Offline: a schema is never a reason to fetch anything, as jsonschema does not.
            self._fast: jsonschema_rs.Validator | None = jsonschema_rs.Draft202012Validator(
                schema, offline=True
            )
        except Exception:  # whatever it cannot compile, jsonschema checks
            self._fast = None

    def error(self, arguments: Mapping[str, Any]) -> str | None:
        """Why ``arguments`` do not fit, or ``None`` when they do."""
        if self._fast is not None and self._fast.is_valid(arguments):
            return None
        worded = self._worded
        if worded is None:
            worded = self._worded = Draft202012Validator(self.schema)
        if self._fast is None and worded.is_valid(arguments):
            return None
        error = best_match(worded.iter_errors(arguments))
        if error is None:  # the two disagree: no reason to give, so no refusal
            return None
        where = ".".join(str(part) for part in error.absolute_path) or "arguments"
        message = error.message
        if len(message) > _MESSAGE_LIMIT:
            message = message[:_MESSAGE_LIMIT] + "…"
        return f"{where}: {message}"


class ArgumentCheck:
    """Validates the arguments of calls to offered tools; one compiled schema per tool."""

    def __init__(self) -> None:
        self._registry: Registry | None = None
        self._schemas: dict[str, _Schema] = {}

    def refusal(
        self, session: AgentSession, name: str, arguments: Mapping[str, Any]
    ) -> mcp.CallToolResult | None:
        """The tool error result answering arguments that do not fit the schema, if they do not."""
        registry = session.registry
        if not registry.is_available(name, session.groups, session.state):
            return None
        error = self.compiled(registry, name).error(arguments)
        if error is None:
            return None
        text = (
            f"Invalid arguments for tool {name!r}: {error}. Nothing was run; call it again "
            "with arguments that fit its input schema."
        )
        return mcp.CallToolResult(content=[mcp.TextContent(text=text)], is_error=True)

    def compiled(self, registry: Registry, name: str) -> _Schema:
        """The tool's input schema, built and compiled once per configuration.

        :class:`~toolbus.domain.errors.UnknownTool` when ``registry`` has no such tool.
        """
        if registry is not self._registry:
            self._registry, self._schemas = registry, {}
        schema = self._schemas.get(name)
        if schema is None:
            schema = self._schemas[name] = _Schema(json_schema(registry.tool(name)))
        return schema
