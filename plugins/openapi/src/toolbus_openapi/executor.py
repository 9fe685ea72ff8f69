"""Calling an operation over HTTP with httpx: safely, within limits, secrets kept out of sight.

Safety rules, each enforced here:

* Requests go to the base URL's host and port, or to a host given in
  ``allow_hosts``; a redirect anywhere else is refused before it is sent
  (httpx follows redirects and asks :meth:`HTTPExecutor._check_host` first).
* Path parameters are percent-encoded whole, and values that could move the
  request elsewhere (``/``, ``\\``, ``.``, ``..``, an absolute URL) are refused;
  the final URL must still lie under the base URL.
* Credentials are read from the environment at call time and added by the
  transport, on the way out, to requests for the base URL's own origin only: they
  are never part of the URL httpx logs, never sent to another host a redirect
  names, and are replaced by ``***`` in anything the executor returns or raises.
* Answers are read up to a byte limit; a longer one is cut, with a marker.
"""

from __future__ import annotations

import codecs
import json
import logging
import os
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import quote

import httpx

from toolbus.domain.errors import (
    BadRequest,
    NotFound,
    ToolAccessDenied,
    ToolCallError,
    ToolServiceError,
    Unavailable,
)
from toolbus_openapi.operations import FORM, Operation

log = logging.getLogger("toolbus.openapi")

CredentialKind = Literal["bearer", "header", "query"]
_DEFAULT_PORTS = {"http": 80, "https": 443}
_ABSOLUTE_URL = re.compile(r"^(?:[A-Za-z][A-Za-z0-9+.-]*:)?//")
_JSON_TYPE = re.compile(r"^application/(?:[\w.+-]+\+)?json\b", re.IGNORECASE)
_TEXT_TYPE = re.compile(
    r"^(?:text/|application/(?:[\w.+-]+\+)?(?:json|xml|yaml|javascript)\b)", re.IGNORECASE
)


@dataclass(frozen=True, slots=True)
class Credential:
    """An API credential read from the environment variable ``env`` at call time.

    * ``bearer``: ``Authorization: Bearer <value>``;
    * ``header``: header ``name: <value>`` (e.g. ``X-API-Key``);
    * ``query``: query parameter ``name=<value>``.
    """

    kind: CredentialKind
    env: str
    name: str = ""

    def __post_init__(self) -> None:
        if self.kind not in ("bearer", "header", "query"):
            raise ValueError(f"credential kind {self.kind!r}: use bearer, header or query")
        if self.kind != "bearer" and not self.name:
            raise ValueError(f"a {self.kind} credential needs the {self.kind} name")

    def __str__(self) -> str:
        where = {"bearer": "bearer token", "header": f"header {self.name}"}.get(
            self.kind, f"query parameter {self.name}"
        )
        return f"{where} from ${self.env}"


@dataclass(frozen=True, slots=True)
class Limits:
    """How long a call may take and how much of an answer is kept."""

    #: Seconds for connecting, and for each read or write.
    timeout: float = 30.0
    #: Bytes of a successful answer returned; the rest is cut, with a marker.
    max_response_bytes: int = 64 * 1024
    #: Bytes of an error answer quoted in the error message.
    max_error_bytes: int = 1024
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

    def __post_init__(self) -> None:
        base = httpx.URL(self.base_url)
        if base.scheme not in _DEFAULT_PORTS or not base.host:
            raise ValueError(
                f"base URL {self.base_url!r} must be an absolute http:// or https:// URL"
            )
        if base.query or base.fragment:
            raise ValueError(f"base URL {self.base_url!r} may not have a query or fragment")
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
                transport=_CredentialTransport(inner, self),
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
        try:
            response = await self.client().send(request, stream=True)
            # Method, path template and status only: arguments and URLs may hold secrets.
            log.debug("%s answered HTTP %d", operation.label, response.status_code)
            try:
                if response.is_success:
                    return _redact(await self._observation(response), secrets)
                raise _error_for(
                    response.status_code,
                    _redact(await self._error_message(operation, response), secrets),
                )
            finally:
                await response.aclose()
        except _HostRefused as exc:
            raise ToolAccessDenied(
                f"{operation.label}: refused to follow a redirect to {_Origin.of(exc.url)}; "
                f"requests may go only to {self._allowed_description()}"
            ) from None
        except httpx.TimeoutException:
            raise Unavailable(
                f"{operation.label}: no answer from {self._origin} within {self.limits.timeout:g} s"
            ) from None
        except httpx.TooManyRedirects:
            raise ToolServiceError(
                f"{operation.label}: more than {self.limits.max_redirects} redirects"
            ) from None
        except httpx.HTTPError as exc:
            detail = _redact(str(exc) or type(exc).__name__, secrets)
            raise Unavailable(f"{operation.label}: cannot reach {self._origin}: {detail}") from None

    def build(self, operation: Operation, arguments: Mapping[str, Any]) -> httpx.Request:
        """The request for ``operation``; :class:`BadRequest` for arguments it cannot take."""
        _check_arguments(operation, arguments)
        path = operation.path
        params: list[tuple[str, str]] = []
        headers: dict[str, str] = {}
        for parameter in operation.parameters:
            value = arguments.get(parameter.argument)
            if value is None:
                continue
            if parameter.as_json:
                value = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
            if parameter.location == "path":
                segment = _path_segment(operation, parameter.argument, value)
                path = path.replace("{" + parameter.name + "}", segment)
            elif parameter.location == "query":
                params.extend(_query_pairs(parameter.name, value, parameter.explode))
            else:
                headers[parameter.name] = _header_value(operation, parameter.argument, value)
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

    # ------------------------------------------------------------------ answers

    async def _observation(self, response: httpx.Response) -> str:
        data, cut = await _read(response, self.limits.max_response_bytes)
        content_type = response.headers.get("content-type", "")
        if not data:
            return f"HTTP {response.status_code} {response.reason_phrase}: no content"
        if content_type and not _TEXT_TYPE.match(content_type):
            return (
                f"HTTP {response.status_code}: {len(data)}{'+' if cut else ''} bytes of "
                f"{content_type.split(';', 1)[0]} (not text; not shown)"
            )
        text = _decode(data, response.encoding or "utf-8", final=not cut)
        if cut:
            return f"{text}\n[response truncated at {self.limits.max_response_bytes} bytes]"
        if _JSON_TYPE.match(content_type):
            try:
                document = json.loads(text)
            except ValueError:
                return text
            return json.dumps(document, ensure_ascii=False, separators=(",", ":"))
        return text

    async def _error_message(self, operation: Operation, response: httpx.Response) -> str:
        data, cut = await _read(response, self.limits.max_error_bytes)
        excerpt = " ".join(_decode(data, response.encoding or "utf-8", final=not cut).split())
        return (
            f"{operation.label} answered HTTP {response.status_code} {response.reason_phrase}"
            + (f": {excerpt}{' …' if cut else ''}" if excerpt else "")
        )

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

    def credential_headers(self) -> tuple[dict[str, str], list[tuple[str, str]]]:
        """The credentials as headers and query parameters, read from the environment now."""
        headers: dict[str, str] = {}
        params: list[tuple[str, str]] = []
        for credential in self.credentials:
            value = self.environ.get(credential.env, "")
            if credential.kind == "bearer":
                headers["Authorization"] = f"Bearer {value}"
            elif credential.kind == "header":
                headers[credential.name] = value
            else:
                params.append((credential.name, value))
        return headers, params

    def is_own_origin(self, url: httpx.URL) -> bool:
        return _Origin.of(url) == self._origin and url.scheme == self._base.scheme


class _CredentialTransport(httpx.AsyncBaseTransport):
    """Adds the credentials to requests for the API's own origin, as they leave.

    httpx logs each request's URL after it is answered: the request it logs is
    the one it built, so a query-parameter credential added to a copy here is
    never part of a log line. A redirect to another allowed host gets no
    credentials.
    """

    def __init__(self, inner: httpx.AsyncBaseTransport, executor: HTTPExecutor) -> None:
        self._inner = inner
        self._executor = executor

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self._executor.credentials and self._executor.is_own_origin(request.url):
            headers, params = self._executor.credential_headers()
            outgoing = httpx.Request(
                request.method,
                request.url.copy_merge_params(tuple(params)) if params else request.url,
                headers={**request.headers, **headers},
                stream=request.stream,
                extensions=request.extensions,
            )
            return await self._inner.handle_async_request(outgoing)
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


# --------------------------------------------------------------------------- helpers


def _check_arguments(operation: Operation, arguments: Mapping[str, Any]) -> None:
    known = {str(argument["name"]) for argument in operation.arguments}
    unknown = sorted(set(arguments) - known)
    if unknown:
        raise BadRequest(
            f"{operation.tool}: unknown argument(s) {', '.join(unknown)}; "
            f"it takes {', '.join(sorted(known)) or 'no arguments'}"
        )
    missing = [
        str(argument["name"])
        for argument in operation.arguments
        if argument.get("required") and arguments.get(str(argument["name"])) is None
    ]
    if missing:
        raise BadRequest(f"{operation.tool}: missing required argument(s) {', '.join(missing)}")


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return str(value)


def _path_segment(operation: Operation, argument: str, value: Any) -> str:
    text = _scalar(value)
    if text in ("", ".", "..") or "/" in text or "\\" in text or _ABSOLUTE_URL.match(text):
        raise BadRequest(
            f"{operation.tool}: path parameter {argument} may not be empty, '.' or '..', nor "
            f"contain '/' or '\\' or be a URL; got {text[:80]!r}"
        )
    return quote(text, safe="")


def _query_pairs(name: str, value: Any, explode: bool) -> list[tuple[str, str]]:
    if isinstance(value, list):
        items = [_scalar(item) for item in value]
        return [(name, item) for item in items] if explode else [(name, ",".join(items))]
    if isinstance(value, dict):
        if explode:
            return [(str(key), _scalar(item)) for key, item in value.items()]
        flat = [part for key, item in value.items() for part in (str(key), _scalar(item))]
        return [(name, ",".join(flat))]
    return [(name, _scalar(value))]


def _header_value(operation: Operation, argument: str, value: Any) -> str:
    text = _scalar(value)
    if "\r" in text or "\n" in text:
        raise BadRequest(f"{operation.tool}: header parameter {argument} may not span lines")
    return text


async def _read(response: httpx.Response, limit: int) -> tuple[bytes, bool]:
    """Up to ``limit`` bytes of the body, and whether there was more (not downloaded)."""
    data = bytearray()
    async for chunk in response.aiter_bytes():
        data += chunk
        if len(data) > limit:
            return bytes(data[:limit]), True
    return bytes(data), False


def _decode(data: bytes, encoding: str, *, final: bool) -> str:
    try:
        decoder = codecs.getincrementaldecoder(encoding)(errors="replace")
    except LookupError:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    # A cut answer may end inside a character: leave that partial character out.
    return str(decoder.decode(data, final=final))


def _redact(text: str, secrets: list[str]) -> str:
    for secret in secrets:
        for form in {secret, json.dumps(secret)[1:-1], quote(secret, safe="")}:
            if form:
                text = text.replace(form, "***")
    return text


def _error_for(status: int, message: str) -> ToolCallError:
    if status in (400, 405, 409, 412, 413, 415, 422):
        return BadRequest(message)
    if status in (401, 403):
        return ToolAccessDenied(message)
    if status in (404, 410):
        return NotFound(message)
    if status in (408, 429, 502, 503, 504):
        return Unavailable(message)
    return ToolServiceError(message)
