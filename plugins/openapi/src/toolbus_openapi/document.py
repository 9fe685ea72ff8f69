"""Reading an OpenAPI document from a file or a URL, as JSON or YAML.

The document is parsed only: what it means is worked out by
:mod:`toolbus_openapi.operations`. Problems are :class:`~toolbus.ConfigError`s
that name the document and say what to fix.

A document fetched over plain ``http://`` (or redirected there) could be
changed on the way, and with it every operation and server it names: it is
refused unless the caller allows it (``--allow-insecure-spec``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import yaml

from toolbus._internal.urls import redact_url
from toolbus.domain.errors import ConfigError, Problem

#: How long fetching a document by URL may take.
FETCH_TIMEOUT = 30.0
SUPPORTED_VERSIONS = ("3.0", "3.1")


@dataclass(frozen=True, slots=True)
class Document:
    """A parsed OpenAPI document and where it came from."""

    contents: dict[str, Any]
    #: The file path or URL, for messages.
    source: str
    #: Base URI its relative references (``$ref``, relative server URLs) resolve against.
    uri: str

    @property
    def version(self) -> str:
        return str(self.contents.get("openapi", ""))

    @property
    def title(self) -> str:
        info = self.contents.get("info")
        return str(info.get("title", "")) if isinstance(info, dict) else ""


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """YAML's safe loader, minus timestamps: ``example: 2024-01-31`` stays a string.

    A date object would not survive the JSON the tools are announced in.
    """


_Loader.yaml_implicit_resolvers = {
    first: [entry for entry in entries if entry[0] != "tag:yaml.org,2002:timestamp"]
    for first, entries in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def load_yaml(text: str) -> Any:
    """Parse YAML (or JSON, a subset of it) with :class:`_Loader`."""
    return yaml.load(text, Loader=_Loader)


def is_url(source: str) -> bool:
    return urlsplit(source).scheme in ("http", "https")


def read_document(source: str | Path, *, allow_insecure: bool = False) -> Document:
    """Read and parse the document at ``source`` (a path, or an http(s) URL).

    An ``http://`` URL, or a redirect to one, is refused unless ``allow_insecure``.
    """
    text_source = str(source)
    if is_url(text_source):

        def secure_only(request: httpx.Request) -> None:
            if request.url.scheme != "https" and not allow_insecure:
                raise _InsecureSpec(str(request.url.copy_with(query=None)))

        try:
            with httpx.Client(
                timeout=FETCH_TIMEOUT,
                follow_redirects=True,
                event_hooks={"request": [secure_only]},
                trust_env=False,
            ) as client:
                response = client.get(text_source)
            response.raise_for_status()
        except _InsecureSpec as exc:
            raise _problem(
                text_source,
                f"would be fetched over plain http ({exc}), where anyone on the way could "
                "change the operations and servers it names; serve it over https, read it "
                "from a file, or allow this with --allow-insecure-spec "
                "(allow-insecure-spec = true)",
            ) from None
        except httpx.HTTPError as exc:
            raise _problem(text_source, f"cannot be fetched: {exc}") from None
        return parse_document(response.text, text_source, str(response.url))
    path = Path(source)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise _problem(text_source, f"cannot be read: {exc}") from None
    return parse_document(text, text_source, path.resolve().as_uri())


def parse_document(text: str, source: str, uri: str) -> Document:
    """Parse ``text`` as JSON or YAML and check that it is an OpenAPI 3.0/3.1 document."""
    contents: Any
    if text.lstrip().startswith("{"):
        try:
            contents = json.loads(text)
        except ValueError as exc:
            raise _problem(source, f"is not valid JSON: {exc}") from None
    else:
        try:
            contents = load_yaml(text)
        except yaml.YAMLError as exc:
            raise _problem(source, f"is not valid YAML: {exc}") from None
    if not isinstance(contents, dict):
        raise _problem(source, "is not an OpenAPI document: expected a JSON or YAML object")
    version = contents.get("openapi")
    if "swagger" in contents:
        raise _problem(
            source,
            "is a Swagger 2.0 document; convert it to OpenAPI 3 first "
            "(for example with swagger2openapi)",
        )
    if not isinstance(version, str) or not version.startswith(SUPPORTED_VERSIONS):
        raise _problem(
            source,
            f"says openapi: {version!r}; OpenAPI {' and '.join(SUPPORTED_VERSIONS)} are supported",
        )
    if not isinstance(contents.get("paths", {}), dict):
        raise _problem(source, "'paths' must be an object of path -> operations")
    return Document(contents, source, uri)


class _InsecureSpec(Exception):
    """A request for the document would go over plain http."""


def _problem(source: str, message: str) -> ConfigError:
    shown = redact_url(source) if is_url(source) else source
    return ConfigError([Problem(f"OpenAPI document {shown}", "", message)])
