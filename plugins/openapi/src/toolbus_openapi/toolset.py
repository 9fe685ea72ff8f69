"""A toolset's settings (from Python, the command line or ``toolbus.toml``) and its service.

In ``toolbus.toml``, one table per toolset::

    [openapi.toolsets.petstore]
    spec = "petstore.yaml"              # a path (relative to this file) or an https URL
    allow-insecure-spec = false         # true: an http:// spec URL is read too
    base-url = "http://127.0.0.1:8080/api/v3"   # required with credentials or env-params
    allow-hosts = ["cdn.example.com"]
    include = ["pet"]                   # operationIds or tags
    exclude = ["deletePet"]
    bearer-env = "PETSTORE_TOKEN"       # or header-env / query-env = {NAME = "VARIABLE"}
    timeout = 10
    max-response-bytes = 65536
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

import httpx

from toolbus._internal.urls import redact_url
from toolbus.domain.errors import ConfigError, Problem
from toolbus.ports import Bus
from toolbus_openapi.credentials import Credential
from toolbus_openapi.document import Document, is_url, read_document
from toolbus_openapi.executor import HTTPExecutor, Limits
from toolbus_openapi.operations import read_operations
from toolbus_openapi.service import TOOLSET_NAME, OpenAPIService

log = logging.getLogger("toolbus.openapi")

SETTINGS_TABLE = "openapi"
_VARIABLE = re.compile(r"\{([^{}]+)\}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True, slots=True)
class ToolsetSettings:
    """Everything that makes an OpenAPI document a toolset."""

    name: str
    #: A file path or an http(s) URL of the OpenAPI 3.0/3.1 document.
    spec: str
    #: Where requests go; default the document's first ``servers`` URL, except
    #: with credentials or ``env_params``: then it must be given.
    base_url: str | None = None
    allow_hosts: tuple[str, ...] = ()
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    credentials: tuple[Credential, ...] = ()
    #: Environment variables tools may have injected as arguments (``options.envs``).
    env_params: tuple[str, ...] = ()
    limits: Limits = field(default_factory=Limits)
    request_queue: str = ""
    response_queue: str = ""
    #: Read a ``spec`` URL over plain http (or a redirect there) too.
    allow_insecure_spec: bool = False


def open_toolset(
    settings: ToolsetSettings,
    *,
    environ: Mapping[str, str] | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
    require_credentials: bool = True,
) -> OpenAPIService:
    """Read the document and make the toolset's service (its HTTP client opens on first call).

    Raises :class:`~toolbus.ConfigError` listing every problem: with the
    document, the filters, the base URL or the credentials. Each operation
    that cannot be served is logged as one warning and skipped. With
    ``require_credentials`` (the default) every credential's variable must be
    set now; either way each call reads it again, and fails clearly without it.
    """
    env = os.environ if environ is None else environ
    problems = []
    where = f"OpenAPI toolset {settings.name!r}"
    if not TOOLSET_NAME.fullmatch(settings.name):
        problems.append(
            Problem(where, "", "a toolset name is letters, digits, '_' and '-' (it names queues)")
        )
    for credential in settings.credentials:
        if not _ENV_NAME.fullmatch(credential.env):
            problems.append(
                Problem(where, "", f"{credential.env!r} is not an environment variable name")
            )
        elif require_credentials and not env.get(credential.env):
            problems.append(
                Problem(
                    where,
                    "",
                    f"environment variable {credential.env} ({credential}) is not set; "
                    "export it before starting the service",
                )
            )
    if not settings.base_url and (settings.credentials or settings.env_params):
        secrets = "credentials" if settings.credentials else "env-params"
        problems.append(
            Problem(
                where,
                "base-url",
                f"with {secrets} configured, give --base-url URL: the document's servers "
                "must not choose where a secret is sent",
            )
        )
    document = read_document(settings.spec, allow_insecure=settings.allow_insecure_spec)
    try:
        catalog = read_operations(
            document,
            settings.name,
            include=settings.include,
            exclude=settings.exclude,
            credentials=settings.credentials,
        )
    except ConfigError as exc:
        problems.extend(exc.problems)
        catalog = None
    base_url = settings.base_url or (
        None
        if settings.credentials or settings.env_params
        else _server_url(document, problems, where)
    )
    executor = None
    if base_url is not None:
        try:
            executor = HTTPExecutor(
                base_url,
                allow_hosts=settings.allow_hosts,
                credentials=settings.credentials,
                limits=settings.limits,
                environ=env,
                transport=transport,
            )
        except ValueError as exc:
            problems.append(Problem(where, "base-url", str(exc)))
    if problems or catalog is None or executor is None:
        raise ConfigError(problems)
    for skipped in catalog.skipped:
        log.warning("toolset %r: skipped operation %s", settings.name, skipped)
    return OpenAPIService(
        settings.name,
        catalog,
        executor,
        request_queue=settings.request_queue,
        response_queue=settings.response_queue,
        env_params=settings.env_params,
        description=f"The {document.title or settings.name} HTTP API",
    )


def _server_url(document: Document, problems: list[Problem], where: str) -> str | None:
    servers = document.contents.get("servers")
    server = servers[0] if isinstance(servers, list) and servers else None
    url = server.get("url") if isinstance(server, Mapping) else None
    if not isinstance(url, str) or not url:
        problems.append(
            Problem(where, "base-url", "the document names no server; give --base-url URL")
        )
        return None
    variables = server.get("variables") if isinstance(server, Mapping) else None

    def fill(match: re.Match[str]) -> str:
        variable = variables.get(match.group(1)) if isinstance(variables, Mapping) else None
        default = variable.get("default") if isinstance(variable, Mapping) else None
        return str(default) if default is not None else match.group(0)

    url = _VARIABLE.sub(fill, url)
    if "://" not in url:
        if not is_url(document.uri):
            problems.append(
                Problem(
                    where,
                    "base-url",
                    f"the document's server URL {redact_url(url)!r} is relative to where it is "
                    "served; give --base-url URL",
                )
            )
            return None
        url = urljoin(document.uri, url)
    return url


@asynccontextmanager
async def serving(bus: Bus, *services: OpenAPIService, **options: Any) -> AsyncIterator[None]:
    """Serve and announce toolsets for the duration of the block; close their clients after.

    ``options`` go to :func:`toolbus.application.live.companions.alongside`
    (``announce``, ``interval``).
    """
    from toolbus import running
    from toolbus.application.live.companions import alongside

    tools = {service.id: service.tools() for service in services}
    defaults = {"tool": {k: {**t, "service": s} for s, ts in tools.items() for k, t in ts.items()}}
    async with AsyncExitStack() as stack:
        for service in services:
            stack.push_async_callback(service.executor.aclose)
        await stack.enter_async_context(running(bus, *services))
        await stack.enter_async_context(alongside(bus, services, defaults=defaults, **options))
        yield


# --------------------------------------------------------------------------- toolbus.toml


def toolsets_from_file(
    file: Mapping[str, Any], base: Path, *, where: str = "toolbus.toml"
) -> dict[str, ToolsetSettings]:
    """The ``[openapi.toolsets.NAME]`` tables of a settings file, every problem at once."""
    table = file.get(SETTINGS_TABLE, {})
    toolsets = table.get("toolsets", {}) if isinstance(table, Mapping) else None
    if not isinstance(toolsets, Mapping):
        raise ConfigError([Problem(where, "openapi.toolsets", "must be a table of tables")])
    problems: list[Problem] = []
    found = {}
    for name, raw in toolsets.items():
        at = f"{where} [openapi.toolsets.{name}]"
        if not isinstance(raw, Mapping):
            problems.append(Problem(at, "", "must be a table"))
            continue
        before = len(problems)
        settings = _toolset(str(name), raw, base, at, problems)
        if len(problems) == before:
            found[str(name)] = settings
    if problems:
        raise ConfigError(problems)
    return found


_KEYS = frozenset(
    {
        "spec",
        "base-url",
        "allow-hosts",
        "include",
        "exclude",
        "bearer-env",
        "header-env",
        "query-env",
        "env-params",
        "timeout",
        "max-response-bytes",
        "request-queue",
        "response-queue",
        "allow-insecure-spec",
    }
)


def _toolset(
    name: str, raw: Mapping[str, Any], base: Path, at: str, problems: list[Problem]
) -> ToolsetSettings:
    for key in sorted(set(raw) - _KEYS):
        problems.append(Problem(at, key, f"is not a toolset setting; use one of {sorted(_KEYS)}"))
    spec = raw.get("spec")
    if not isinstance(spec, str) or not spec:
        problems.append(Problem(at, "spec", "needs the OpenAPI document's path or URL"))
        spec = ""
    elif not is_url(spec):
        spec = str(base / spec)

    def strings(key: str) -> tuple[str, ...]:
        value = raw.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            problems.append(Problem(at, key, "must be a list of strings"))
            return ()
        return tuple(value)

    def text(key: str) -> str | None:
        value = raw.get(key)
        if value is not None and not isinstance(value, str):
            problems.append(Problem(at, key, "must be a string"))
            return None
        return value

    credentials = list(credentials_from(raw.get("bearer-env"), "bearer", at, problems))
    for kind in ("header", "query"):
        value = raw.get(f"{kind}-env", {})
        if not isinstance(value, Mapping):
            problems.append(Problem(at, f"{kind}-env", "must be a table of NAME = VARIABLE"))
            continue
        for key, variable in value.items():
            credentials.extend(credentials_from(variable, kind, at, problems, name=str(key)))
    limits = Limits()
    timeout = raw.get("timeout", limits.timeout)
    if not isinstance(timeout, int | float) or isinstance(timeout, bool) or timeout <= 0:
        problems.append(Problem(at, "timeout", "must be a positive number of seconds"))
        timeout = limits.timeout
    insecure = raw.get("allow-insecure-spec", False)
    if not isinstance(insecure, bool):
        problems.append(Problem(at, "allow-insecure-spec", "must be true or false"))
        insecure = False
    size = raw.get("max-response-bytes", limits.max_response_bytes)
    if not isinstance(size, int) or isinstance(size, bool) or size < 1:
        problems.append(Problem(at, "max-response-bytes", "must be a positive whole number"))
        size = limits.max_response_bytes
    return ToolsetSettings(
        name=name,
        spec=spec,
        base_url=text("base-url"),
        allow_hosts=strings("allow-hosts"),
        include=strings("include"),
        exclude=strings("exclude"),
        credentials=tuple(credentials),
        env_params=strings("env-params"),
        limits=replace(limits, timeout=float(timeout), max_response_bytes=size),
        request_queue=text("request-queue") or "",
        response_queue=text("response-queue") or "",
        allow_insecure_spec=insecure,
    )


def credentials_from(
    variable: Any,
    kind: str,
    at: str,
    problems: list[Problem],
    *,
    name: str = "",
) -> Sequence[Credential]:
    """One credential, or none (and a problem) when ``variable`` is not a variable name."""
    if variable is None:
        return ()
    if not isinstance(variable, str) or not _ENV_NAME.fullmatch(variable):
        key = f"{kind}-env" + (f".{name}" if name else "")
        problems.append(Problem(at, key, f"{variable!r} is not an environment variable name"))
        return ()
    return (Credential(kind, variable, name),)  # type: ignore[arg-type]
