"""Sending spans to a collector, configured by the standard ``OTEL_*`` variables.

With the ``otel`` extra installed (``pip install 'toolbus[otel]'``), a process
that toolbus runs (``toolbus serve``, the config service) exports its spans
over OTLP/HTTP when the environment asks for it: ``OTEL_EXPORTER_OTLP_ENDPOINT``
or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set, or ``OTEL_TRACES_EXPORTER``
is ``otlp``. Everything else (headers, timeouts, protocol details, the service
name and resource attributes) is read by the OpenTelemetry SDK and exporter
from their own variables, as documented by OpenTelemetry. Nothing is done when
``OTEL_SDK_DISABLED`` is true, when ``OTEL_TRACES_EXPORTER`` is ``none``, or
when the program has set up a tracer provider of its own.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping

log = logging.getLogger("toolbus.tracing")

ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")


def wanted(environ: Mapping[str, str]) -> bool:
    """Whether the environment asks for spans to be exported."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter == "none":
        return False
    return exporter == "otlp" or any(environ.get(name) for name in ENDPOINT_VARIABLES)


def export_from_environment(
    service_name: str, environ: Mapping[str, str] | None = None
) -> Callable[[], None] | None:
    """Install an OTLP exporting tracer provider if the environment asks for one.

    ``service_name`` is the default ``service.name`` (``OTEL_SERVICE_NAME`` and
    ``OTEL_RESOURCE_ATTRIBUTES`` win). Returns the function that flushes and
    stops the export (call it on shutdown), or ``None`` when nothing was set
    up. Logs a warning, once, when the environment asks for export but the
    ``otel`` extra is not installed.
    """
    env = os.environ if environ is None else environ
    if not wanted(env):
        return None
    try:
        from opentelemetry import trace
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        log.warning(
            "OTEL_* variables ask for trace export, but the OpenTelemetry SDK and OTLP "
            "exporter are not installed; install them with: pip install 'toolbus[otel]'"
        )
        return None
    current = trace.get_tracer_provider()
    if not isinstance(current, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        return None  # the program configured OpenTelemetry itself
    # Resource.create reads OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES; without a
    # name there, it says "unknown_service", and ours is better.
    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: service_name}))
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    return provider.shutdown
