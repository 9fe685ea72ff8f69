"""The tool-service wire envelope, byte-compatible with TrustGraph's tool services.

TrustGraph writes bodies with Python's default ``json.dumps``: keys in
declaration order, ``", "`` / ``": "`` separators, non-ASCII escaped. We produce
the same bytes. ``config`` and ``arguments`` are JSON *strings* inside the JSON
body. Correlation and control data (``id``, trace context, deadline) travel as
message properties, never in the body.

Requests come in two generations: trustgraph-base 2.1 to 2.3 write
``{user, config, arguments}``; 2.4 and later write ``{config, arguments}``.
Either reads the other's (its decoder ignores unknown keys and fills missing
ones with ""), so the generation only decides which bytes a client writes. A
client of the newer generation sends a non-empty user as the ``user`` message
property, which TrustGraph ignores and toolbus services read. Responses are
the same in both.

Decoders ignore unknown keys, fill defaults for missing ones, and raise only
:class:`WireError` on malformed input.

One extension rides in the bodies, for tools that ask their caller for input
(:mod:`toolbus.domain.calls.input_requests`): a response whose error is
``input-required`` (or ``input-unavailable``) carries ``input``, the tool's
requests and sealed state; the request that answers them carries ``input``,
the answers and that state. TrustGraph ignores both keys: it reads such a
response as the error it also is, and never sends such a request.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import orjson
from pydantic_core import SchemaValidator, from_json
from pydantic_core import core_schema as schema

from toolbus.domain.calls._json_writing import encode_object, quote
from toolbus.domain.calls.input_requests import InputAsk, InputReply
from toolbus.domain.errors import WireError

# Message property names. ``id`` is TrustGraph's; the rest are optional extras
# that TrustGraph ignores.
PROP_ID = "id"
PROP_TRACEPARENT = "traceparent"
PROP_TRACESTATE = "tracestate"
PROP_DEADLINE = "deadline"  # absolute Unix time in seconds, as a decimal string
PROP_AFTER_EXECUTION = "after-execution"
#: What the call cost, as the service says on its last response: a decimal string,
#: in the currency the deployment's prices are in.
PROP_COST = "cost"
# Argument name -> environment variable name, resolved by the service (options.envs).
PROP_ENV_ARGS = "env-args"
#: Who the call is for, when the body has no ``user`` (the 2.4 generation's requests).
PROP_USER = "user"
#: Which try of a call this is, on a retry ("2", "3", ...; absent on the first).
PROP_ATTEMPT = "attempt"
#: The kinds of input the caller can give a tool that asks (``elicitation,sampling,roots``).
PROP_INPUT_KINDS = "input-kinds"

#: The request generations, named after the first trustgraph-base release that wrote each.
GENERATION_2_1 = "2.1"
GENERATION_2_4 = "2.4"
GENERATIONS = (GENERATION_2_1, GENERATION_2_4)
NEWEST_GENERATION = GENERATION_2_4

GENERIC_ERROR = "tool-service-error"


def cost_property(cost: float) -> str:
    """A cost as the ``cost`` property carries it (``repr``: no digit lost)."""
    return repr(float(cost))


def read_cost(text: str | None) -> float | None:
    """The cost a ``cost`` property says: a finite number, 0 or more; ``None`` otherwise."""
    if not text or len(text) > 64:
        return None
    try:
        cost = float(text)
    except ValueError:
        return None
    return cost if 0.0 <= cost < float("inf") else None


# Named tuples rather than frozen dataclasses: one of each is made per call, and
# a frozen dataclass takes several times longer to build.


class ToolRequest(NamedTuple):
    """A decoded request: ``config`` and ``arguments`` already parsed to dicts; ``input``
    the answers a caller brings to a tool that asked."""

    user: str
    config: dict[str, Any]
    arguments: dict[str, Any]
    input: InputReply | None = None


class ToolResponse(NamedTuple):
    """One response message; a stream is several, the last with ``end_of_stream``."""

    response: str = ""
    error_type: str | None = None
    error_message: str = ""
    end_of_stream: bool = True
    #: What a tool that asks its caller asked (with an ``input-required`` error).
    input: InputAsk | None = None

    @property
    def is_error(self) -> bool:
        return self.error_type is not None


_decode = json.JSONDecoder().decode
_EMPTY_OBJECT = "{}"


def _json_text(value: Mapping[str, Any] | str | None, what: str) -> str:
    if not value:  # None, "" and {} all mean "nothing"
        return _EMPTY_OBJECT
    if isinstance(value, str):
        return value
    try:
        return encode_object(value if isinstance(value, dict) else dict(value))
    except (TypeError, ValueError, RecursionError) as exc:
        raise WireError(f"{what} cannot be encoded as JSON: {exc}") from exc


# The bodies are built from templates rather than by encoding a dict: the bytes are
# identical to ``json.dumps`` of the dict with TrustGraph's key order (tests pin
# that), and building them is several times cheaper on the per-call path.


def generation_of(version: str) -> str:
    """The request generation a TrustGraph version speaks: ``"2.1"`` or ``"2.4"``.

    Accepts a generation or any 2.x release (``"2.3.21"`` → ``"2.1"``,
    ``"2.11.1"`` → ``"2.4"``); raises :class:`WireError` naming the fix otherwise.
    """
    text = str(version).strip()
    major, _, rest = text.partition(".")
    minor = rest.partition(".")[0]
    if major == "2" and minor.isdigit() and int(minor) >= 1:
        return GENERATION_2_4 if int(minor) >= 4 else GENERATION_2_1
    raise WireError(
        f"TrustGraph version {version!r} has no tool-service wire: use '2.1' (trustgraph-base "
        "2.1 to 2.3, requests carry 'user') or '2.4' (2.4 and later, no 'user'), or a 2.x release"
    )


def encode_request(
    user: str,
    config: Mapping[str, Any] | str | None = None,
    arguments: Mapping[str, Any] | str | None = None,
    generation: str = GENERATION_2_1,
    input: InputReply | None = None,
) -> bytes:
    """Encode a request as ``generation`` writes it (``"2.4"``: no ``user`` in the body).

    Mappings are JSON-encoded; strings are taken as JSON already. ``generation``
    may also be a TrustGraph release (see :func:`generation_of`). ``input``
    answers a tool that asked: it rides as the body's last key.
    """
    if generation != GENERATION_2_1 and generation != GENERATION_2_4:
        generation = generation_of(generation)
    tail = "}" if input is None else f', "input": {_extension(input.to_json())}}}'
    if generation == GENERATION_2_4:
        return (
            f'{{"config": {quote(_json_text(config, "config"))}, '
            f'"arguments": {quote(_json_text(arguments, "arguments"))}{tail}'
        ).encode()
    return (
        f'{{"user": {quote(user)}, '
        f'"config": {quote(_json_text(config, "config"))}, '
        f'"arguments": {quote(_json_text(arguments, "arguments"))}{tail}'
    ).encode()


def _extension(value: dict[str, Any]) -> str:
    try:
        return json.dumps(value)
    except (TypeError, ValueError, RecursionError) as exc:
        raise WireError(f"input cannot be encoded as JSON: {exc}") from exc


def encode_response(response: str, *, end_of_stream: bool = True) -> bytes:
    """Encode a successful response (or one chunk of a stream)."""
    end = "true" if end_of_stream else "false"
    return f'{{"error": null, "response": {quote(response)}, "end_of_stream": {end}}}'.encode()


def encode_error(error_type: str, message: str, input: InputAsk | None = None) -> bytes:
    """Encode an error response; it always ends the stream. ``input`` is what a tool that
    asks its caller asked (with ``input-required`` or ``input-unavailable``)."""
    body: dict[str, Any] = {
        "error": {"type": error_type, "message": message},
        "response": "",
        "end_of_stream": True,
    }
    if input is not None:
        body["input"] = input.to_json()
    return json.dumps(body).encode("utf-8")


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
        # pydantic-core's parser is several times faster than json's. Anything it
        # refuses goes to json, whose verdict (and error message) is the rule:
        # json also accepts a few texts it does not, such as lone surrogates.
        # Text goes in as UTF-8, which cannot hold surrogates: those take the
        # json path too, so that both parsers never see the same text differently.
        value = from_json(body.encode() if isinstance(body, str) else body)
    except (ValueError, TypeError):
        value = _load_strictly(body, what)
    if not isinstance(value, dict):
        raise WireError(f"{what} must be a JSON object, got {type(value).__name__}")
    return value


def _load_strictly(body: bytes | str, what: str) -> Any:
    try:
        # str(..., "utf-8") decodes bytes, bytearray and memoryview alike.
        text = body if isinstance(body, str) else str(body, "utf-8")
        value = _decode(text)
    except UnicodeDecodeError as exc:
        raise WireError(f"{what} is not valid UTF-8 ({exc.reason} at byte {exc.start})") from exc
    except (ValueError, TypeError, RecursionError) as exc:
        raise WireError(f"{what} is not valid JSON: {exc}") from exc
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


# The usual envelopes are read in one pass of pydantic-core, inner JSON strings
# included, or by orjson when they are large. Anything else (a missing or null
# field, an inline object, a text the fast parsers refuse) is read by the
# step-by-step decoders below, which define the rules and the error messages:
# the shortcuts only ever agree with them.


def _usual(**fields: schema.CoreSchema) -> Callable[[bytes | str], dict[str, Any]]:
    """A one-pass reader of an object whose fields, when present, have these types."""
    typed = {name: schema.typed_dict_field(kind, required=False) for name, kind in fields.items()}
    return SchemaValidator(schema.typed_dict_schema(typed, strict=True)).validate_json


def _json_object_text() -> schema.CoreSchema:
    return schema.json_schema(
        schema.dict_schema(schema.str_schema(strict=True), schema.any_schema(), strict=True)
    )


# Strict: a field of another JSON type goes to the stepwise decoder, which refuses it.
_read_usual_request = _usual(
    user=schema.str_schema(strict=True),
    config=_json_object_text(),
    arguments=_json_object_text(),
    input=schema.any_schema(),
)
_read_usual_response = _usual(
    error=schema.none_schema(),
    response=schema.str_schema(strict=True),
    end_of_stream=schema.bool_schema(strict=True),
)


#: Bodies of this size and more, dense with escapes, are read by orjson. On text
#: with many escapes (prose with quotes and line ends: a few in a hundred
#: characters) its parser is two to three times faster than pydantic-core's; on
#: text with few, pydantic-core's is faster still, at any size (measured from
#: 1 KB to 1 MB).
LARGE_BODY = 1024
#: How much of a body's start is looked at to tell, and the share of backslashes
#: from which orjson takes it.
_SAMPLE = 4096
_DENSE = 1 / 64


def _dense_with_escapes(body: bytes | str) -> bool:
    """Whether a large body looks dense with escapes, judged by its first few KB."""
    sample = min(len(body), _SAMPLE)
    if isinstance(body, str):
        return body.count("\\", 0, sample) >= sample * _DENSE
    return body.count(b"\\", 0, sample) >= sample * _DENSE


def _read_large_request(body: bytes | str) -> ToolRequest | None:
    """The usual request read by orjson, or None for anything unusual.

    Only a shortcut, like the one-pass read: whatever orjson refuses, or reads
    into other types than the usual ones, goes to the stepwise decoder.
    """
    try:
        fields = orjson.loads(body)
        if fields.__class__ is not dict:
            return None
        user = fields.get("user", "")
        config = fields.get("config", _EMPTY_OBJECT)
        arguments = fields.get("arguments", _EMPTY_OBJECT)
        if user.__class__ is not str or config.__class__ is not str:
            return None
        if arguments.__class__ is not str or "input" in fields:
            return None
        config, arguments = orjson.loads(config), orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return None
    if config.__class__ is not dict or arguments.__class__ is not dict:
        return None
    if not (_exact(config) and _exact(arguments)):
        return None
    return ToolRequest(user, config, arguments)


#: orjson reads integers up to 64 bits exactly and larger ones as floats, from here on.
_BEYOND_64_BITS = float(2**63)


def _exact(value: dict[str, Any]) -> bool:
    """Whether every number in ``value`` is as written: no float that could have
    been an integer too large for orjson (Python's parsers keep such integers)."""
    pending: list[Any] = [value]
    while pending:
        item = pending.pop()
        kind = item.__class__
        if kind is dict:
            pending.extend(item.values())
        elif kind is list:
            pending.extend(item)
        elif kind is float and abs(item) >= _BEYOND_64_BITS:
            return False
    return True


def decode_request(body: bytes | str) -> ToolRequest:
    """Decode a request body, raising :class:`WireError` with the reason when malformed."""
    if (
        len(body) >= LARGE_BODY
        and _dense_with_escapes(body)
        and (request := _read_large_request(body)) is not None
    ):
        return request
    try:
        fields = _read_usual_request(body)
    except (ValueError, TypeError):
        return _decode_request_stepwise(body)
    if "input" in fields:
        return _decode_request_stepwise(body)
    return ToolRequest(  # positionally: a named tuple builds faster so
        fields.get("user", ""), fields.get("config", {}), fields.get("arguments", {})
    )


def _decode_request_stepwise(body: bytes | str) -> ToolRequest:
    data = _load_object(body, "request body")
    user = data.get("user")
    if user is None:
        user = ""
    if not isinstance(user, str):
        raise WireError(f"request field 'user' must be a string, got {type(user).__name__}")
    given = data.get("input")
    return ToolRequest(
        user,
        _inner_object(data.get("config"), "request field 'config'"),
        _inner_object(data.get("arguments"), "request field 'arguments'"),
        None if given is None else InputReply.from_json(given),
    )


def _read_large_response(body: bytes | str) -> ToolResponse | None:
    """The usual response read by orjson, or None for anything unusual (see above)."""
    try:
        fields = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if fields.__class__ is not dict or fields.get("error") is not None:
        return None
    response = fields.get("response", "")
    end = fields.get("end_of_stream", False)
    if response.__class__ is not str or end.__class__ is not bool:
        return None
    return ToolResponse(response, None, "", end)


def decode_response(body: bytes | str) -> ToolResponse:
    """Decode a response body, raising :class:`WireError` with the reason when malformed.

    As in TrustGraph's client, any ``error`` object marks a failure, even ``{}``.
    """
    if (
        len(body) >= LARGE_BODY
        and _dense_with_escapes(body)
        and (response := _read_large_response(body)) is not None
    ):
        return response
    try:
        fields = _read_usual_response(body)
    except (ValueError, TypeError):
        return _decode_response_stepwise(body)
    return ToolResponse(fields.get("response", ""), None, "", fields.get("end_of_stream", False))


def _decode_response_stepwise(body: bytes | str) -> ToolResponse:
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
        return ToolResponse(response, None, "", end)
    if not isinstance(error, dict):
        raise WireError(f"response field 'error' must be an object, got {type(error).__name__}")
    error_type = error.get("type") or GENERIC_ERROR
    message = error.get("message") or ""
    if not isinstance(error_type, str) or not isinstance(message, str):
        raise WireError("response field 'error' must hold string 'type' and 'message'")
    asked = data.get("input")
    # An error always ends the exchange, whatever the flag says.
    return ToolResponse(
        "", error_type, message, True, None if asked is None else InputAsk.from_json(asked)
    )
