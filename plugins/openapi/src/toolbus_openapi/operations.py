"""The operations of an OpenAPI document as tools: names, descriptions, arguments, plans.

Every operation becomes one tool named ``sanitize_toolname(f"{toolset}_{operationId}")``
(an operation with no ``operationId`` is named after its method and path,
``get_pets_petId``; operationIds that would share a name get a hash suffix,
see :mod:`toolbus_openapi.naming`). Its arguments are the operation's path,
query and header parameters and its request body: a JSON or form body that is an object is
flattened into one argument per property, any other body is one argument
``body``. Schemas are resolved into self-contained JSON Schemas
(:mod:`toolbus_openapi.schemas`), required flags kept; each operation also
keeps the JSON Schema of its arguments as one object (:attr:`Operation.schema`),
which every call's arguments are validated against before a request is built.
A parameter a credential fills (same header, any case; same query name) is
not an argument: the credential owns it.

A problem that makes the document unusable as a whole (colliding ids, a
``$ref`` that points nowhere, a filter that matches nothing, an operation that
was asked for by name but cannot be served) is collected with every other one
and raised as one :class:`~toolbus.ConfigError`. An operation this module
cannot serve (a required cookie, a body that is neither JSON, a form nor text)
is skipped with the reason, for one warning each.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from toolbus.domain.calls.naming import sanitize_toolname
from toolbus.domain.errors import ConfigError, Problem
from toolbus_openapi.credentials import Credential
from toolbus_openapi.document import Document
from toolbus_openapi.naming import operation_ids, operation_tool_names
from toolbus_openapi.schemas import Resolved, UnresolvableRef, json_schema, registry_for

HTTP_METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
LOCATIONS = ("path", "query", "header")
#: The config value each tool carries to tell the service which operation it is.
OPERATION_PARAM = "operation"
#: Tool descriptions longer than this are cut: some LLM APIs refuse longer ones.
MAX_DESCRIPTION = 1024
JSON_TYPES = frozenset({"string", "number", "integer", "boolean", "array", "object"})
# Headers a parameter may not set: OpenAPI ignores the first three; the others
# would let an argument change where or how the request is delivered.
_RESERVED_HEADERS = frozenset(
    {
        "accept",
        "content-type",
        "authorization",
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
    }
)
# Property names LLM tool APIs accept.
_ARGUMENT_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
FORM = "application/x-www-form-urlencoded"


@dataclass(frozen=True, slots=True)
class Parameter:
    """One path, query or header parameter, and the tool argument that carries it."""

    argument: str
    name: str
    location: str
    required: bool
    #: Query arrays: ``a=1&a=2`` (explode, the default) or ``a=1,2``.
    explode: bool = True
    #: Described with ``content: application/json``: sent as JSON text.
    as_json: bool = False
    #: Its schema's type is ``object``: only then may a value be expanded into pairs.
    object_typed: bool = False


@dataclass(frozen=True, slots=True)
class Body:
    """How an operation's request body is built from its arguments."""

    media_type: str
    required: bool
    #: Flattened object bodies: argument name -> property name.
    fields: Mapping[str, str] = field(default_factory=dict)
    #: The argument holding the whole body, when it is not flattened.
    argument: str | None = None


@dataclass(frozen=True, slots=True)
class Operation:
    """One operation as a tool, and what the executor needs to call it."""

    operation_id: str
    tool: str
    method: str
    path: str
    description: str
    tags: tuple[str, ...] = ()
    parameters: tuple[Parameter, ...] = ()
    body: Body | None = None
    arguments: tuple[Mapping[str, Any], ...] = ()
    #: The JSON Schema of the arguments as one object (closed: no other argument).
    schema: Mapping[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """``getPetById (GET /pet/{petId})``, for messages."""
        return f"{self.operation_id} ({self.method} {self.path})"

    def descriptor(self) -> dict[str, Any]:
        """The tool descriptor (without ``type`` and ``service``, filled in when announced)."""
        return {
            "name": self.tool,
            "description": self.description,
            OPERATION_PARAM: self.operation_id,
            "arguments": [dict(argument) for argument in self.arguments],
        }


@dataclass(frozen=True, slots=True)
class Skipped:
    """An operation that is not served, and why."""

    operation: str
    reason: str

    def __str__(self) -> str:
        return f"{self.operation}: {self.reason}"


@dataclass(frozen=True, slots=True)
class Catalog:
    """What a document offers as tools, and what it had to leave out."""

    operations: tuple[Operation, ...]
    skipped: tuple[Skipped, ...] = ()

    def by_id(self) -> dict[str, Operation]:
        return {operation.operation_id: operation for operation in self.operations}


class _Unsupported(Exception):
    """The operation cannot be served; the message says why."""


def read_operations(
    document: Document,
    toolset: str,
    *,
    include: Collection[str] = (),
    exclude: Collection[str] = (),
    credentials: Collection[Credential] = (),
) -> Catalog:
    """The operations of ``document`` as tools of ``toolset``, filtered.

    ``include`` and ``exclude`` name operationIds or tags: with ``include``, only
    operations it names (by id or by one of their tags) are kept; then those
    ``exclude`` names are dropped. Parameters that one of ``credentials``
    fills are left out of the arguments. Raises :class:`~toolbus.ConfigError`
    with every problem found.
    """
    where = f"OpenAPI document {document.source}"
    problems: list[Problem] = []
    resolved = Resolved.of(registry_for(document), document.uri)
    openapi_30 = document.version.startswith("3.0")
    found = list(_operations(document.contents))
    names = operation_ids(found, where, problems)
    tool_names = operation_tool_names(toolset, set(names.values()))

    known_filters = set(names.values()) | {tag for _, _, op in found for tag in _tags(op)}
    for option, given in (("--include", include), ("--exclude", exclude)):
        for name in sorted(set(given) - known_filters):
            problems.append(
                Problem(where, "", f"{option} {name!r} names no operationId or tag of it")
            )

    operations: list[Operation] = []
    skipped: list[Skipped] = []
    filled = _filled_by(credentials)
    for path, method, raw in found:
        operation_id = names[(path, method)]
        tags = _tags(raw)
        if include and operation_id not in include and not set(tags) & set(include):
            continue
        if operation_id in exclude or set(tags) & set(exclude):
            continue
        label = f"{operation_id} ({method.upper()} {path})"
        try:
            operation = _operation(
                document.contents["paths"][path],
                raw,
                path=path,
                method=method,
                operation_id=operation_id,
                tool=tool_names[operation_id],
                tags=tags,
                resolved=resolved,
                openapi_30=openapi_30,
                filled=filled,
            )
        except UnresolvableRef as exc:
            problems.append(Problem(where, "", f"operation {label}: {exc}"))
            continue
        except _Unsupported as exc:
            if operation_id in include:
                problems.append(
                    Problem(where, "", f"--include {operation_id!r} cannot be served: {exc}")
                )
            else:
                skipped.append(Skipped(label, str(exc)))
            continue
        operations.append(operation)
    if problems:
        raise ConfigError(problems)
    return Catalog(tuple(operations), tuple(skipped))


def _filled_by(credentials: Collection[Credential]) -> frozenset[tuple[str, str]]:
    """``(location, name)`` of the parameters credentials fill; header names lower-cased."""
    filled = set()
    for credential in credentials:
        if credential.kind == "query":
            filled.add(("query", credential.name))
        elif credential.kind == "header":
            filled.add(("header", credential.name.lower()))
    return frozenset(filled)


def _operations(contents: Mapping[str, Any]) -> Iterable[tuple[str, str, Mapping[str, Any]]]:
    paths = contents.get("paths") or {}
    for path, item in paths.items():
        if not isinstance(item, Mapping):
            continue
        for method in HTTP_METHODS:
            operation = item.get(method)
            if isinstance(operation, Mapping):
                yield str(path), method, operation


def _tags(operation: Mapping[str, Any]) -> tuple[str, ...]:
    tags = operation.get("tags")
    return tuple(str(tag) for tag in tags) if isinstance(tags, list) else ()


def _operation(
    item: Mapping[str, Any],
    raw: Mapping[str, Any],
    *,
    path: str,
    method: str,
    operation_id: str,
    tool: str,
    tags: tuple[str, ...],
    resolved: Resolved,
    openapi_30: bool,
    filled: frozenset[tuple[str, str]] = frozenset(),
) -> Operation:
    arguments: list[dict[str, Any]] = []
    parameters: list[Parameter] = []
    schemas: dict[str, Any] = {}
    taken: set[str] = set()
    for spec in _parameters(item, raw, resolved):
        location = spec.get("in")
        name = str(spec.get("name", ""))
        required = bool(spec.get("required")) or location == "path"
        if location == "cookie":
            if required:
                raise _Unsupported(f"cookie parameter {name!r} is required; cookies are not sent")
            continue
        if location not in LOCATIONS or not name:
            continue
        if location == "header" and name.lower() in _RESERVED_HEADERS:
            continue
        if (location, name.lower() if location == "header" else name) in filled:
            continue  # the credential sets it, once, whatever an argument says
        schema, as_json = _parameter_schema(spec, resolved, openapi_30)
        argument = _argument_name(name, location, taken)
        explode = spec.get("explode", spec.get("style", "form") == "form")
        object_typed = not as_json and json_type(schema) == "object"
        parameters.append(
            Parameter(argument, name, location, required, bool(explode), as_json, object_typed)
        )
        described = spec.get("description")
        arguments.append(
            _argument(argument, schema, described or f"{location} parameter {name}", required)
        )
        schemas[argument] = schema
    body = None
    request_body = raw.get("requestBody")
    if request_body is not None:
        body, body_arguments, body_schemas = _body(request_body, resolved, openapi_30, taken)
        arguments.extend(body_arguments)
        schemas.update(body_schemas)
    return Operation(
        operation_id=operation_id,
        tool=tool,
        method=method.upper(),
        path=path,
        description=_description(raw, method, path),
        tags=tags,
        parameters=tuple(parameters),
        body=body,
        arguments=tuple(arguments),
        schema={
            "type": "object",
            "properties": schemas,
            "required": [str(a["name"]) for a in arguments if a.get("required")],
            "additionalProperties": False,
        },
    )


def _parameters(
    item: Mapping[str, Any], raw: Mapping[str, Any], resolved: Resolved
) -> list[Mapping[str, Any]]:
    """Path-level parameters overridden by the operation's own (by name and location)."""
    merged: dict[tuple[str, str], Mapping[str, Any]] = {}
    for source in (item.get("parameters"), raw.get("parameters")):
        for entry in source if isinstance(source, list) else ():
            spec, _ = resolved.follow(entry)
            if isinstance(spec, Mapping):
                merged[(str(spec.get("name")), str(spec.get("in")))] = spec
    return list(merged.values())


def _parameter_schema(
    spec: Mapping[str, Any], resolved: Resolved, openapi_30: bool
) -> tuple[dict[str, Any], bool]:
    if "schema" in spec:
        return json_schema(spec["schema"], resolved, openapi_30=openapi_30), False
    content = spec.get("content")
    if isinstance(content, Mapping) and content:
        media_type, media = next(iter(content.items()))
        schema = media.get("schema", {}) if isinstance(media, Mapping) else {}
        return json_schema(schema, resolved, openapi_30=openapi_30), _is_json(str(media_type))
    return {"type": "string"}, False


def _argument_name(name: str, location: str, taken: set[str]) -> str:
    argument = name if _ARGUMENT_NAME.fullmatch(name) else sanitize_toolname(name)
    if argument in taken:
        argument = sanitize_toolname(f"{location}_{argument}")
    while argument in taken:
        argument = sanitize_toolname(f"{argument}_")
    taken.add(argument)
    return argument


def _body(
    raw: Any, resolved: Resolved, openapi_30: bool, taken: set[str]
) -> tuple[Body | None, list[dict[str, Any]], dict[str, Any]]:
    """How the body is built, its arguments, and each argument's JSON Schema."""
    spec, inner = resolved.follow(raw)
    if not isinstance(spec, Mapping):
        return None, [], {}
    content = spec.get("content")
    if not isinstance(content, Mapping) or not content:
        return None, [], {}
    required = bool(spec.get("required"))
    media_type = _supported_media_type(content)
    if media_type is None:
        raise _Unsupported(
            f"request body type(s) {', '.join(map(str, content))} not supported; "
            "JSON, application/x-www-form-urlencoded and text/plain are"
        )
    media = content[media_type] if isinstance(content[media_type], Mapping) else {}
    schema = json_schema(media.get("schema", {}), inner, openapi_30=openapi_30)
    if media_type.startswith("text/"):
        schema = {"type": "string", **{k: v for k, v in schema.items() if k != "type"}}
    properties = schema.get("properties")
    flat = (
        media_type != "text/plain"
        and schema.get("type", "object") == "object"
        and isinstance(properties, Mapping)
        and properties
        and all(_ARGUMENT_NAME.fullmatch(name) and name not in taken for name in properties)
    )
    if flat:
        assert isinstance(properties, Mapping)
        inner_required = set(schema.get("required") or ())
        arguments = []
        schemas = {}
        for name, sub in properties.items():
            if isinstance(sub, Mapping) and sub.get("readOnly") is True:
                continue  # the server sets it; sending it is at best ignored
            taken.add(name)
            field_required = required and name in inner_required
            arguments.append(_argument(name, sub, f"body field {name}", field_required))
            schemas[name] = sub
        fields = {argument["name"]: argument["name"] for argument in arguments}
        return Body(media_type, required, fields=fields), arguments, schemas
    name = _argument_name("body", "body", taken)
    description = str(spec.get("description") or "the request body")
    return (
        Body(media_type, required, argument=name),
        [_argument(name, schema, description, required)],
        {name: schema},
    )


def _supported_media_type(content: Mapping[str, Any]) -> str | None:
    types = [str(media_type) for media_type in content]
    for test in (_is_json, lambda t: t == FORM, lambda t: t.startswith("text/plain")):
        for media_type in types:
            if test(media_type.split(";", 1)[0].strip().lower()):
                return media_type
    return None


def _is_json(media_type: str) -> bool:
    base = media_type.split(";", 1)[0].strip().lower()
    return base == "application/json" or base.endswith("+json")


def _argument(name: str, schema: Any, description: str, required: bool) -> dict[str, Any]:
    """A toolbus argument descriptor: ``name``, ``type``, ``description``, ``required``, schema."""
    extras = dict(schema) if isinstance(schema, Mapping) else {}
    kind = json_type(extras)
    text = extras.pop("description", None)
    for key in ("type", "name", "title"):
        extras.pop(key, None)
    inner_required = extras.pop("required", None)
    if isinstance(inner_required, list) and inner_required:
        # An argument's own "required" is its flag; the object's required
        # properties say the same through allOf, which JSON Schema reads alike.
        extras["allOf"] = [*extras.get("allOf", ()), {"required": inner_required}]
    return {
        "name": name,
        "type": kind,
        "description": str(text or description),
        "required": required,
        **extras,
    }


def json_type(schema: Mapping[str, Any]) -> str:
    """The one JSON type an argument declares for ``schema`` (a guess where it has several)."""
    kind = schema.get("type")
    if isinstance(kind, str) and kind in JSON_TYPES:
        return kind
    if isinstance(kind, list):
        for option in kind:
            if option in JSON_TYPES:
                return str(option)
    if "properties" in schema or "additionalProperties" in schema:
        return "object"
    if "items" in schema:
        return "array"
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return _type_of(enum[0])
    for key in ("oneOf", "anyOf", "allOf"):
        options = schema.get(key)
        if isinstance(options, list):
            kinds = [json_type(option) for option in options if isinstance(option, Mapping)]
            if kinds:
                return kinds[0]
    return "string"


def _type_of(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, dict):
        return "object"
    return "array" if isinstance(value, list) else "string"


def _description(raw: Mapping[str, Any], method: str, path: str) -> str:
    summary = str(raw.get("summary") or "").strip()
    details = str(raw.get("description") or "").strip()
    parts = [summary] if summary else []
    if details and details != summary:
        parts.append(details)
    text = "\n\n".join(parts) or f"{method.upper()} {path}"
    if len(text) > MAX_DESCRIPTION:
        text = text[: MAX_DESCRIPTION - 1].rstrip() + "…"
    return text
