"""Shared test configuration: every async test runs on asyncio (the brokers' clients need it)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


# The scripted model server (``model_server``), for every test that needs a model.
pytest_plugins = ["tests.support.model_server"]
