"""Shared test configuration: every async test runs on asyncio (the brokers' clients need it)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from toolbus.application.tracing import propagation as tracing


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """An OpenTelemetry SDK tracer provider for one test; yields its in-memory exporter.

    Swapped in under the API's global (and restored after), because the API lets a
    process set its provider only once.
    """
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", provider)
    # toolbus remembers whether it saw an SDK; make it look again, now and after.
    monkeypatch.setattr(tracing, "_sdk_seen", False)
    monkeypatch.setattr(tracing, "_next_sdk_check", 0.0)
    assert tracing.recording()
    yield exporter
    provider.shutdown()


pytest_plugins = [
    # The scripted model server (``model_server``), for every test that needs a model.
    "tests.support.model_server",
    # Tests that need a real part the machine lacks: skipped here, failed in CI.
    "tests.support.real_parts",
    # CI's rules: no skip that tests/ci_allowed_skips.txt does not list, no Hypothesis deadline.
    "tests.support.ci",
    # A test that hangs fails alone, with its traceback.
    "tests.support.hangs",
]
