"""The tool-service wire envelope, byte-compatible with TrustGraph's tool services.

TrustGraph (trustgraph-base 2.1) writes bodies with Python's default
``json.dumps``: keys in declaration order, ``", "`` / ``": "`` separators,
non-ASCII escaped. We produce the same bytes. ``config`` and ``arguments`` are
JSON *strings* inside the JSON body. Correlation and control data (``id``,
trace context, deadline) travel as message properties, never in the body.

Decoders ignore unknown keys, fill defaults for missing ones, and raise only
:class:`WireError` on malformed input.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from toolbus.domain.errors import WireError

# Message property names. ``id`` is TrustGraph's; the rest are optional extras
# that TrustGraph ignores.
PROP_ID = "id"
PROP_TRACEPARENT = "traceparent"
PROP_TRACESTATE = "tracestate"
PROP_DEADLINE = "deadline"  # absolute Unix time in seconds, as a decimal string
PROP_AFTER_EXECUTION = "after-execution"
# Argument name -> environment variable name, resolved by the service (options.envs).
PROP_ENV_ARGS = "env-args"

GENERIC_ERROR = "tool-service-error"


@dataclass(frozen=True, slots=True)
class ToolRequest:
    """A decoded request: ``config`` and ``arguments`` already parsed to dicts."""

    user: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ToolResponse:
    """One response message; a stream is several, the last with ``end_of_stream``."""

    response: str = ""
    error_type: str | None = None
    error_message: str = ""
    end_of_stream: bool = True

    @property
    def is_error(self) -> bool:
        return self.error_type is not None


# Python's default encoder and decoder, called directly: ``json.dumps``/``loads``
# with default arguments use exactly these, minus the per-call argument checks.
_encode = json.JSONEncoder().encode
_decode = json.JSONDecoder().decode
_EMPTY_OBJECT = "{}"


def _json_text(value: Mapping[str, Any] | str | None, what: str) -> str:
    if not value:  # None, "" and {} all mean "nothing"
        return _EMPTY_OBJECT
    if isinstance(value, str):
        return value
    try:
        return _encode(value if isinstance(value, dict) else dict(value))
    except (TypeError, ValueError) as exc:
        raise WireError(f"{what} cannot be encoded as JSON: {exc}") from exc


# The bodies are built from templates rather than by encoding a dict: the bytes are
# identical to ``json.dumps`` of the dict with TrustGraph's key order (tests pin
# that), and building them is several times cheaper on the per-call path.


def encode_request(
    user: str,
    config: Mapping[str, Any] | str | None = None,
    arguments: Mapping[str, Any] | str | None = None,
) -> bytes:
    """Encode a request. Mappings are JSON-encoded; strings are taken as JSON already."""
    return (
        f'{{"user": {_encode(user)}, '
        f'"config": {_encode(_json_text(config, "config"))}, '
        f'"arguments": {_encode(_json_text(arguments, "arguments"))}}}'
    ).encode()


def encode_response(response: str, *, end_of_stream: bool = True) -> bytes:
    """Encode a successful response (or one chunk of a stream)."""
    end = "true" if end_of_stream else "false"
    return f'{{"error": null, "response": {_encode(response)}, "end_of_stream": {end}}}'.encode()


def encode_error(error_type: str, message: str) -> bytes:
    """Encode an error response; it always ends the stream."""
    return json.dumps(
        {"error": {"type": error_type, "message": message}, "response": "", "end_of_stream": True}
    ).encode("utf-8")


def observation_text(result: Any) -> str:
    """A tool's return value as the observation string (non-strings via ``json.dumps``)."""
    if isinstance(result, str):
        return result
    try:
        return json.dumps(result)
    except (TypeError, ValueError):
        return str(result)


def _load_object(body: bytes | str, what: str) -> dict[str, Any]:
    try:
        # str(..., "utf-8") decodes bytes, bytearray and memoryview alike.
        text = body if isinstance(body, str) else str(body, "utf-8")
        value = _decode(text)
    except UnicodeDecodeError as exc:
        raise WireError(f"{what} is not valid UTF-8 ({exc.reason} at byte {exc.start})") from exc
    except (ValueError, TypeError, RecursionError) as exc:
        raise WireError(f"{what} is not valid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise WireError(f"{what} must be a JSON object, got {type(value).__name__}")
    return value


def _inner_object(value: Any, what: str) -> dict[str, Any]:
    if value is None or value == "" or value == _EMPTY_OBJECT:
        return {}
    if isinstance(value, dict):
        # Not what TrustGraph sends, but unambiguous: accept an object given inline.
        return value
    if not isinstance(value, str):
        raise WireError(f"{what} must be a JSON string, got {type(value).__name__}")
    return _load_object(value, what)


def decode_request(body: bytes | str) -> ToolRequest:
    """Decode a request body, raising :class:`WireError` with the reason when malformed."""
    data = _load_object(body, "request body")
    user = data.get("user")
    if user is None:
        user = ""
    if not isinstance(user, str):
        raise WireError(f"request field 'user' must be a string, got {type(user).__name__}")
    return ToolRequest(
        user=user,
        config=_inner_object(data.get("config"), "request field 'config'"),
        arguments=_inner_object(data.get("arguments"), "request field 'arguments'"),
    )


def decode_response(body: bytes | str) -> ToolResponse:
    """Decode a response body, raising :class:`WireError` with the reason when malformed.

    As in TrustGraph's client, any ``error`` object marks a failure, even ``{}``.
    """
    data = _load_object(body, "response body")
    response = data.get("response")
    if response is None:
        response = ""
    if not isinstance(response, str):
        raise WireError(
            f"response field 'response' must be a string, got {type(response).__name__}"
        )
    end = data.get("end_of_stream", False)
    if not isinstance(end, bool):
        raise WireError(
            f"response field 'end_of_stream' must be a boolean, got {type(end).__name__}"
        )
    error = data.get("error")
    if error is None:
        return ToolResponse(response=response, end_of_stream=end)
    if not isinstance(error, dict):
        raise WireError(f"response field 'error' must be an object, got {type(error).__name__}")
    error_type = error.get("type") or GENERIC_ERROR
    message = error.get("message") or ""
    if not isinstance(error_type, str) or not isinstance(message, str):
        raise WireError("response field 'error' must hold string 'type' and 'message'")
    # An error always ends the exchange, whatever the flag says.
    return ToolResponse(error_type=error_type, error_message=message, end_of_stream=True)
