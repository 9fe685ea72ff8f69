"""A real HTTP API (and another host) for the OpenAPI toolset tests, and toolsets on it."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack
from dataclasses import dataclass

import pytest

from tests.openapi.api import Recorder, app, elsewhere_app, uvicorn_serving
from toolbus_openapi import Limits, OpenAPIService, ToolsetSettings, open_toolset


@dataclass
class Api:
    url: str
    hits: Recorder
    elsewhere_url: str
    elsewhere_hits: Recorder
    secret: str

    @property
    def spec_url(self) -> str:
        return f"{self.url}/openapi.json"

    def reset(self) -> None:
        self.hits.hits.clear()
        self.hits.hung_up.clear()
        self.elsewhere_hits.hits.clear()


@pytest.fixture(scope="session")
def api() -> Iterator[Api]:
    """The shop API and a second server on another port; the API wants ``api.secret``."""
    secret = f"s3cr3t-{uuid.uuid4().hex}"
    hits, elsewhere_hits = Recorder(), Recorder()
    with ExitStack() as stack:
        elsewhere = stack.enter_context(uvicorn_serving(elsewhere_app(elsewhere_hits)))
        url = stack.enter_context(uvicorn_serving(app(hits, elsewhere, secret)))
        yield Api(url, hits, elsewhere, elsewhere_hits, secret)


@pytest.fixture
def shop(api: Api) -> Iterator[Api]:
    api.reset()
    yield api


@pytest.fixture
async def make_toolset(shop: Api) -> AsyncIterator[object]:
    """``make_toolset(**settings)``: a toolset on the shop API, its client closed after the test."""
    made: list[OpenAPIService] = []

    def make(environ: dict[str, str] | None = None, **fields: object) -> OpenAPIService:
        fields.setdefault("limits", Limits(timeout=5.0))
        # The test API serves its document over plain http on 127.0.0.1.
        fields.setdefault("allow_insecure_spec", True)
        if fields.get("credentials") or fields.get("env_params"):
            # Secrets go only where the settings say, never where the document says.
            fields.setdefault("base_url", f"{shop.url}/api")
        settings = ToolsetSettings(
            **{"name": "shop", "spec": shop.spec_url, **fields}  # type: ignore[arg-type]
        )
        service = open_toolset(settings, environ=environ or {})
        made.append(service)
        return service

    yield make
    for service in made:
        await service.executor.aclose()
