"""Calling an operation over HTTP with httpx: safely, within limits, secrets kept out of sight.

Safety rules, each enforced here:

* Arguments are validated against the operation's JSON Schema before a
  request is built (:mod:`toolbus_openapi.arguments`).
* Requests go to the base URL's host and port, or to a host given in
  ``allow_hosts``; a redirect anywhere else is refused before it is sent
  (httpx follows redirects and asks :meth:`HTTPExecutor._check_host` first).
* Path parameters are percent-encoded whole, and values that could move the
  request elsewhere (``/``, ``\\``, ``.``, ``..``, an absolute URL) are refused;
  the final URL must still lie under the base URL.
* Credentials are read from the environment at call time and added by the
  transport, on the way out, to requests under the base URL only (its scheme,
  host and port, and its path): they are never part of the URL httpx logs,
  never sent to another host or another path a redirect names, set exactly
  once each, and replaced by ``***`` in anything the executor returns or raises.
* A call ends by its deadline: the toolset's ``timeout`` for the whole call
  (connecting, sending, every byte of the answer), or the caller's own
  deadline when that comes first. A call that ends early, or is cancelled,
  closes its response, so its connection is not held.
* Answers are read up to a byte limit; a longer one is cut, with a marker.
  Error answers and transport errors reach the caller (and so the model) as a
  bounded excerpt, with secrets redacted before it is cut.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx

from toolbus._internal.urls import redact_url
from toolbus.application.calls.deadline import call_deadline
from toolbus.domain.errors import (
    AccessDenied,
    BadRequest,
    DeadlineExceeded,
    ToolServiceError,
    Unavailable,
)
from toolbus_openapi.answers import error_for, error_message, excerpt, observation
from toolbus_openapi.arguments import ArgumentValidator, header_value, path_segment, query_pairs
from toolbus_openapi.credentials import Credential, CredentialTransport
from toolbus_openapi.operations import FORM, Operation

log = logging.getLogger("toolbus.openapi")

_DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True, slots=True)
class Limits:
    """How long a call may take and how much of an answer is kept."""

    #: Seconds a whole call may take (connecting, sending, reading every byte);
    #: a caller's earlier deadline ends it sooner.
    timeout: float = 30.0
    #: Bytes of a successful answer returned; the rest is cut, with a marker.
    max_response_bytes: int = 64 * 1024
    #: Bytes of an error answer quoted in the error message.
    max_error_bytes: int = 1024
    #: Characters of a transport error's text (httpx's) quoted in the error message.
    max_error_text: int = 300
    max_redirects: int = 5
    #: Connections kept open to the API.
    max_connections: int = 100


class _HostRefused(Exception):
    def __init__(self, url: httpx.URL) -> None:
        super().__init__(str(url.host))
        self.url = url


@dataclass(frozen=True, slots=True)
class _Origin:
    host: str
    port: int

    @classmethod
    def of(cls, url: httpx.URL) -> _Origin:
        return cls(url.host.lower(), url.port or _DEFAULT_PORTS.get(url.scheme, 0))

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


class _QueryValuesHidden(logging.Filter):
    """Leaves query values out of httpx's request log lines for the toolsets' APIs.

    A value there may be a secret a tool's ``options.envs`` injected (an API
    key as a query argument, say); the names stay, for debugging.
    """

    def __init__(self) -> None:
        super().__init__()
        self.origins: set[_Origin] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) > 1 and isinstance(args[1], httpx.URL):
            url = args[1]
            if url.query and _Origin.of(url) in self.origins:
                hidden = "&".join(f"{name}=***" for name in url.params)
                record.args = (args[0], url.copy_with(query=hidden.encode()), *args[2:])
        return True


_HIDE_QUERY_VALUES = _QueryValuesHidden()
logging.getLogger("httpx").addFilter(_HIDE_QUERY_VALUES)


@dataclass(slots=True)
class HTTPExecutor:
    """Calls the operations of one API at ``base_url``.

    ``allow_hosts`` adds hosts (``name``, any port, or ``name:port``) that
    redirects may lead to. ``environ`` is where credentials are read, at each
    call. Close it with :meth:`aclose` (or ``async with``).
    """

    base_url: str
    allow_hosts: Collection[str] = ()
    credentials: Collection[Credential] = ()
    limits: Limits = field(default_factory=Limits)
    environ: Mapping[str, str] = field(default_factory=lambda: os.environ)
    #: The transport under the credentials (tests and benchmarks may pass their own).
    transport: httpx.AsyncBaseTransport | None = None
    _client: httpx.AsyncClient | None = field(default=None, init=False, repr=False)
    _base: httpx.URL = field(init=False, repr=False)
    #: The base URL's path without its trailing "/" ("" for the root).
    _base_path: str = field(init=False, repr=False)
    _origin: _Origin = field(init=False, repr=False)
    _allowed: frozenset[_Origin] = field(init=False, repr=False)
    _allowed_any_port: frozenset[str] = field(init=False, repr=False)
    _arguments: ArgumentValidator = field(init=False, repr=False)

    def __post_init__(self) -> None:
        base = httpx.URL(self.base_url)
        if base.scheme not in _DEFAULT_PORTS or not base.host:
            raise ValueError(
                f"base URL {redact_url(self.base_url)!r} must be an absolute http:// or "
                "https:// URL"
            )
        if base.query or base.fragment:
            raise ValueError(
                f"base URL {redact_url(self.base_url)!r} may not have a query or fragment"
            )
        self._base = base
        self._base_path = base.path.rstrip("/")
        self._origin = _Origin.of(base)
        allowed, any_port = {self._origin}, set()
        for entry in self.allow_hosts:
            host, _, port = entry.strip().lower().rpartition(":")
            if host and port.isdigit():
                allowed.add(_Origin(host.strip("[]"), int(port)))
            elif entry.strip():
                any_port.add(entry.strip().lower().strip("[]"))
        self._allowed = frozenset(allowed)
        self._allowed_any_port = frozenset(any_port)
        self._arguments = ArgumentValidator()
        _HIDE_QUERY_VALUES.origins.update(self._allowed)

    # ------------------------------------------------------------------ lifecycle

    def client(self) -> httpx.AsyncClient:
        """The pooled client, made on first use (inside the event loop that uses it)."""
        if self._client is None:
            limits = self.limits
            inner = self.transport or httpx.AsyncHTTPTransport(
                limits=httpx.Limits(
                    max_connections=limits.max_connections,
                    max_keepalive_connections=limits.max_connections,
                )
            )
            self._client = httpx.AsyncClient(
                transport=CredentialTransport(
                    inner, self.credentials, self.environ, self.is_under_base
                ),
                timeout=httpx.Timeout(limits.timeout),
                follow_redirects=True,
                max_redirects=limits.max_redirects,
                event_hooks={"request": [self._check_host]},
                trust_env=False,  # no proxies or .netrc from the environment
            )
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.aclose()

    async def __aenter__(self) -> HTTPExecutor:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # ------------------------------------------------------------------ calls

    async def call(self, operation: Operation, arguments: Mapping[str, Any]) -> str:
        """Call ``operation`` with ``arguments``; the observation, or a typed error."""
        secrets = self._secrets(operation)
        request = self.build(operation, arguments)
        seconds, callers = self._time_left()
        try:
            with anyio.fail_after(seconds):
                return await self._exchange(operation, request, secrets)
        except TimeoutError:
            if callers:
                raise DeadlineExceeded(
                    f"{operation.label}: the caller's deadline passed before {self._origin} "
                    "answered in full"
                ) from None
            raise Unavailable(
                f"{operation.label}: no complete answer from {self._origin} within "
                f"{self.limits.timeout:g} s"
            ) from None
        except _HostRefused as exc:
            raise AccessDenied(
                f"{operation.label}: refused to follow a redirect to {_Origin.of(exc.url)}; "
                f"requests may go only to {self._allowed_description()}"
            ) from None
        except httpx.TooManyRedirects:
            raise ToolServiceError(
                f"{operation.label}: more than {self.limits.max_redirects} redirects"
            ) from None
        except httpx.HTTPError as exc:
            detail = excerpt(str(exc) or type(exc).__name__, secrets, self.limits.max_error_text)
            raise Unavailable(f"{operation.label}: cannot reach {self._origin}: {detail}") from None

    async def _exchange(
        self, operation: Operation, request: httpx.Request, secrets: list[str]
    ) -> str:
        response = await self.client().send(request, stream=True)
        try:
            # Method, path template and status only: arguments and URLs may hold secrets.
            log.debug("%s answered HTTP %d", operation.label, response.status_code)
            limits = self.limits
            if response.is_success:
                return await observation(response, limits.max_response_bytes, secrets)
            message = await error_message(
                operation.label, response, limits.max_error_bytes, secrets
            )
            raise error_for(response.status_code, message)
        finally:
            # Shielded: a call that is cancelled or runs out of time still gives
            # its connection back rather than leaving it to a trickling server.
            with anyio.CancelScope(shield=True):
                await response.aclose()

    def _time_left(self) -> tuple[float, bool]:
        """Seconds this call may take, and whether the caller's deadline is what limits it."""
        limit = self.limits.timeout
        deadline = call_deadline()
        if deadline is None:
            return limit, False
        left = deadline - time.time()
        return (max(left, 0.0), True) if left < limit else (limit, False)

    def build(self, operation: Operation, arguments: Mapping[str, Any]) -> httpx.Request:
        """The request for ``operation``; :class:`BadRequest` for arguments it cannot take."""
        arguments = self._arguments.check(operation, arguments)
        path = operation.path
        params: list[tuple[str, str]] = []
        headers: dict[str, str] = {}
        reserved = self._query_names(operation)
        for parameter in operation.parameters:
            value = arguments.get(parameter.argument)
            if value is None:
                continue
            if parameter.as_json:
                value = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
            if parameter.location == "path":
                segment = path_segment(operation, parameter.argument, value)
                path = path.replace("{" + parameter.name + "}", segment)
            elif parameter.location == "query":
                others = reserved - {parameter.name}
                params.extend(query_pairs(operation, parameter, value, others))
            else:
                headers[parameter.name] = header_value(operation, parameter.argument, value)
        url = self._base.copy_with(path=self._base_path + path, params=params or None)
        if _Origin.of(url) != self._origin or not url.path.startswith(f"{self._base_path}/"):
            raise BadRequest(f"{operation.label}: the arguments lead outside {self.base_url}")
        content: dict[str, Any] = {}
        body = operation.body
        if body is not None:
            value = self._body_value(operation, arguments)
            if value is not None:
                media_type = body.media_type.split(";", 1)[0].strip().lower()
                if media_type == FORM:
                    content["data"] = value if isinstance(value, Mapping) else {"value": value}
                elif media_type.startswith("text/"):
                    content["content"] = str(value).encode("utf-8")
                    headers["Content-Type"] = body.media_type
                else:
                    content["content"] = json.dumps(
                        value, ensure_ascii=False, separators=(",", ":")
                    ).encode("utf-8")
                    headers["Content-Type"] = body.media_type
        return self.client().build_request(operation.method, url, headers=headers, **content)

    @staticmethod
    def _body_value(operation: Operation, arguments: Mapping[str, Any]) -> Any:
        body = operation.body
        assert body is not None
        if body.argument is not None:
            return arguments.get(body.argument)
        fields = {
            name: arguments[argument]
            for argument, name in body.fields.items()
            if argument in arguments
        }
        return fields if fields or body.required else None

    # ------------------------------------------------------------------ safety

    async def _check_host(self, request: httpx.Request) -> None:
        """httpx calls this before each request it sends, redirects included."""
        origin = _Origin.of(request.url)
        if origin not in self._allowed and origin.host not in self._allowed_any_port:
            raise _HostRefused(request.url)

    def _allowed_description(self) -> str:
        hosts = sorted(str(origin) for origin in self._allowed) + sorted(self._allowed_any_port)
        return ", ".join(hosts)

    def _secrets(self, operation: Operation) -> list[str]:
        secrets = []
        for credential in self.credentials:
            value = self.environ.get(credential.env)
            if not value:
                raise Unavailable(
                    f"{operation.label}: environment variable {credential.env} ({credential}) "
                    "is not set in the tool service's environment"
                )
            secrets.append(value)
        return secrets

    def _query_names(self, operation: Operation) -> frozenset[str]:
        """Query names an expanded object may not set: the operation's and the credentials'."""
        names = {p.name for p in operation.parameters if p.location == "query"}
        names.update(c.name for c in self.credentials if c.kind == "query")
        return frozenset(names)

    def is_own_origin(self, url: httpx.URL) -> bool:
        """Whether ``url`` is on the base URL's scheme, host and port."""
        return _Origin.of(url) == self._origin and url.scheme == self._base.scheme

    def is_under_base(self, url: httpx.URL) -> bool:
        """Whether ``url`` lies under the base URL (origin and path): credentials go there only."""
        return self.is_own_origin(url) and (
            not self._base_path
            or url.path == self._base_path
            or url.path.startswith(f"{self._base_path}/")
        )
