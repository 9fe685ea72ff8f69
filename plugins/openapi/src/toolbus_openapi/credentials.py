"""API credentials: read from the service's environment, added on the way out, under one URL.

A :class:`Credential` names an environment variable, never holds its value.
:class:`CredentialTransport` reads the values at each request and sets them
on the requests under the API's base URL only, as they leave: httpx logs the
request it built, not the copy sent here, so a query-parameter credential is
never part of a log line, and a redirect to another allowed host, or to
another path of the same host, gets none. Each credential is *set*: a header
or query parameter of the same name already on the request is replaced, so
the API sees it exactly once.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Literal

import httpx

CredentialKind = Literal["bearer", "header", "query"]


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


def credential_parts(
    credentials: Collection[Credential], environ: Mapping[str, str]
) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """The credentials as headers and query parameters, read from ``environ`` now."""
    headers: dict[str, str] = {}
    params: list[tuple[str, str]] = []
    for credential in credentials:
        value = environ.get(credential.env, "")
        if credential.kind == "bearer":
            headers["Authorization"] = f"Bearer {value}"
        elif credential.kind == "header":
            headers[credential.name] = value
        else:
            params.append((credential.name, value))
    return headers, params


class CredentialTransport(httpx.AsyncBaseTransport):
    """Sets ``credentials`` on the requests ``under_base`` accepts, as they leave."""

    def __init__(
        self,
        inner: httpx.AsyncBaseTransport,
        credentials: Collection[Credential],
        environ: Mapping[str, str],
        under_base: Callable[[httpx.URL], bool],
    ) -> None:
        self._inner = inner
        self._credentials = credentials
        self._environ = environ
        self._under_base = under_base

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self._credentials and self._under_base(request.url):
            headers, params = credential_parts(self._credentials, self._environ)
            url = request.url
            for name, value in params:
                url = url.copy_remove_param(name).copy_add_param(name, value)
            sent = httpx.Headers(request.headers)
            for name, value in headers.items():
                sent[name] = value  # replaces every header of that name, whatever its case
            request = httpx.Request(
                request.method,
                url,
                headers=sent,
                stream=request.stream,
                extensions=request.extensions,
            )
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()
