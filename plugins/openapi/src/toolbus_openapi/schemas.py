"""OpenAPI schemas as the self-contained JSON Schemas an LLM's tool list needs.

An LLM sees one tool's argument schema on its own, so every ``$ref`` is
resolved and inlined (through :mod:`referencing`, the jsonschema project's
resolver: JSON pointers, escaping and relative files are its business). A
schema that refers to itself (a tree node, say) is inlined once; the inner
reference becomes an open schema that says what it was, so the result is
finite. OpenAPI 3.0's own keywords are turned into JSON Schema (``nullable``)
or dropped where JSON Schema has no meaning for them (``discriminator``,
``xml``, ``externalDocs``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import yaml
from referencing import Registry, Resource, Specification
from referencing.exceptions import NoSuchResource, PointerToNowhere, Unresolvable

from toolbus_openapi.document import Document, load_yaml

if TYPE_CHECKING:
    # Public through Registry.resolver(), but exported by no public module.
    from referencing._core import Resolver

#: References this deep are cut like recursive ones: a tool schema is for reading.
MAX_DEPTH = 12
_DROPPED = frozenset({"discriminator", "xml", "externalDocs", "nullable", "example"})


class UnresolvableRef(Exception):
    """A ``$ref`` that points nowhere."""

    def __init__(self, ref: str, reason: str) -> None:
        super().__init__(f"$ref {ref!r} does not resolve: {reason}")
        self.ref = ref


class Resolved:
    """Resolves ``$ref``s of one document (and the files it refers to)."""

    def __init__(self, resolver: Resolver[Any]) -> None:
        self._resolver = resolver

    @classmethod
    def of(cls, registry: Registry[Any], uri: str) -> Resolved:
        return cls(registry.resolver(base_uri=uri))

    def follow(self, node: Any) -> tuple[Any, Resolved]:
        """``node`` with its ``$ref`` (chain) followed; the resolver for what it contains."""
        current, here, seen = node, self, set()
        while isinstance(current, Mapping) and isinstance(current.get("$ref"), str):
            ref = current["$ref"]
            if ref in seen:
                raise UnresolvableRef(ref, "it refers to itself")
            seen.add(ref)
            current, here = here.lookup(ref)
        return current, here

    def lookup(self, ref: str) -> tuple[Any, Resolved]:
        try:
            resolved = self._resolver.lookup(ref)
        except Unresolvable as exc:
            raise UnresolvableRef(ref, _reason(exc)) from None
        return resolved.contents, Resolved(resolved.resolver)


def json_schema(schema: Any, resolved: Resolved, *, openapi_30: bool) -> dict[str, Any]:
    """``schema`` as a self-contained JSON Schema (a new dict). Raises :class:`UnresolvableRef`."""
    result = _convert(schema, resolved, openapi_30, (), 0)
    return result if isinstance(result, dict) else {}


def _convert(
    node: Any, resolved: Resolved, openapi_30: bool, stack: tuple[int, ...], depth: int
) -> Any:
    if isinstance(node, list):
        return [_convert(item, resolved, openapi_30, stack, depth) for item in node]
    if not isinstance(node, Mapping):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str):
        target, inner = resolved.lookup(ref)
        # The target's identity, not the $ref's text: two files may spell one schema two ways.
        key = id(target)
        if key in stack or depth >= MAX_DEPTH:
            name = ref.rsplit("/", 1)[-1]
            return {"description": f"a {name} (the same shape as the enclosing {name})"}
        converted = _convert(target, inner, openapi_30, (*stack, key), depth + 1)
        # In OpenAPI 3.1 a $ref may have siblings (description, say); they win.
        siblings = {k: v for k, v in node.items() if k != "$ref"}
        if siblings and isinstance(converted, dict):
            converted = {**converted, **_convert(siblings, resolved, openapi_30, stack, depth)}
        return converted
    result: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROPPED:
            continue
        if key in ("properties", "patternProperties", "$defs", "definitions") and isinstance(
            value, Mapping
        ):
            # Property names are data, not keywords: never drop or convert them.
            result[key] = {
                name: _convert(sub, resolved, openapi_30, stack, depth)
                for name, sub in value.items()
            }
        else:
            result[key] = _convert(value, resolved, openapi_30, stack, depth)
    if openapi_30:
        if "example" in node:
            result["examples"] = [node["example"]]
        if node.get("nullable") is True:
            kind = result.get("type")
            if isinstance(kind, str):
                result["type"] = [kind, "null"]
    return result


def _reason(exc: Unresolvable) -> str:
    # referencing's own messages quote the whole document: say it shortly instead.
    if isinstance(exc, PointerToNowhere):
        return "nothing is there"
    if isinstance(exc, NoSuchResource):
        return "the document it names cannot be read (only files next to a local document are)"
    return type(exc).__name__


def registry_for(document: Document) -> Registry[Any]:
    """A registry holding the document, able to read the local files it refers to."""
    resource: Resource[Any] = Specification.OPAQUE.create_resource(document.contents)
    # referencing's classes are attrs classes behind a wrapper mypy cannot see through.
    registry: Registry[Any] = Registry(retrieve=_retrieve_file)  # type: ignore[call-arg]
    with_document: Registry[Any] = registry.with_resource(document.uri, resource)
    return with_document


def _retrieve_file(uri: str) -> Resource[Any]:
    # Only files next to a local document: a document must not make its reader
    # fetch from hosts nobody allowed.
    parts = urlsplit(uri)
    if parts.scheme != "file":
        raise NoSuchResource(ref=uri)  # type: ignore[call-arg]
    try:
        text = Path(parts.path).read_text(encoding="utf-8")
        contents = json.loads(text) if text.lstrip().startswith("{") else load_yaml(text)
    except (OSError, ValueError, yaml.YAMLError):
        raise NoSuchResource(ref=uri) from None  # type: ignore[call-arg]
    return Specification.OPAQUE.create_resource(contents)
