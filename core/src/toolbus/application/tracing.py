"""W3C trace context across hops, and OpenTelemetry spans when it is installed.

Every tool call carries ``traceparent`` (and ``tracestate`` when there is one) as
message properties. The caller sends a child of its current context (or starts a
trace); the service continues the trace it receives, or starts a new one when
the inbound ``traceparent`` is missing or invalid, as the W3C spec says. Inside
a tool the service's context is current, so calls the tool makes are children of
it: trace ids stay continuous across any number of hops.

When ``opentelemetry-api`` is importable, client calls and service handling are
also OpenTelemetry spans (kind CLIENT / SERVER) with tool and service attributes;
with an SDK configured, their span ids are the ones on the wire.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar, Token
from typing import Any

from toolbus.domain import wire
from toolbus.domain.trace_context import TraceContext, new_trace, parse_traceparent

try:  # optional: spans only when the API is installed
    from opentelemetry import trace as otel

    HAVE_OPENTELEMETRY = True
except ImportError:  # pragma: no cover - exercised where opentelemetry is absent
    HAVE_OPENTELEMETRY = False

_current: ContextVar[TraceContext | None] = ContextVar("toolbus_trace", default=None)


def current_trace() -> TraceContext | None:
    """The trace context of the code running now (inside a tool: the service's)."""
    return _current.get()


# Trace and span ids need to be unique, not secret: a fast PRNG seeded from the OS
# does, at a fraction of os.urandom's cost per call.
_random = random.Random(os.urandom(16))


def _span_id() -> str:
    return f"{_random.getrandbits(64) or 1:016x}"


def _trace_id() -> str:
    return f"{_random.getrandbits(128) or 1:032x}"


_sdk_seen = False
_next_sdk_check = 0.0
SDK_CHECK_INTERVAL = 1.0


def recording() -> bool:
    """Whether an OpenTelemetry SDK is configured (the API alone records nothing).

    Looking the provider up reads an environment variable, too slow for every
    call: a configured SDK is remembered (OpenTelemetry allows setting it once),
    and its absence is re-checked at most once a second.
    """
    global _sdk_seen, _next_sdk_check
    if _sdk_seen or not HAVE_OPENTELEMETRY:
        return _sdk_seen
    now = time.monotonic()
    if now < _next_sdk_check:
        return False
    _next_sdk_check = now + SDK_CHECK_INTERVAL
    _sdk_seen = not isinstance(
        otel.get_tracer_provider(), otel.ProxyTracerProvider | otel.NoOpTracerProvider
    )
    return _sdk_seen


def received(properties: Mapping[str, str]) -> TraceContext | None:
    """The caller's context from a request's properties; None when missing or invalid."""
    return parse_traceparent(
        properties.get(wire.PROP_TRACEPARENT), properties.get(wire.PROP_TRACESTATE)
    )


def as_properties(context: TraceContext) -> dict[str, str]:
    properties = {wire.PROP_TRACEPARENT: context.traceparent}
    if context.tracestate:
        properties[wire.PROP_TRACESTATE] = context.tracestate
    return properties


@contextmanager
def activated(context: TraceContext) -> Iterator[None]:
    """Make ``context`` current for the block (a tool's body, say)."""
    token = _current.set(context)
    try:
        yield
    finally:
        _current.reset(token)


def enter(context: TraceContext) -> Token[TraceContext | None]:
    """:func:`activated` without a context manager, for the per-call path."""
    return _current.set(context)


def leave(token: Token[TraceContext | None]) -> None:
    _current.reset(token)


@contextmanager
def span(
    name: str, parent: TraceContext | None, *, server: bool, attributes: Mapping[str, Any]
) -> Iterator[TraceContext]:
    """Open this hop's span under ``parent`` (None: start a trace); yields its context.

    With an OpenTelemetry SDK recording, the span id is the SDK's, so the ids on
    the wire and in the tracing backend agree; otherwise a fresh random one.
    """
    if not recording():
        yield child_of(parent)
        return
    kind = otel.SpanKind.SERVER if server else otel.SpanKind.CLIENT
    with otel.get_tracer("toolbus").start_as_current_span(
        name, context=_otel_context(parent), kind=kind, attributes=dict(attributes)
    ) as current:
        if current.is_recording():
            recorded = current.get_span_context()
            trace_id = parent.trace_id if parent else f"{recorded.trace_id:032x}"
            tracestate = parent.tracestate if parent else None
            flags = parent.flags if parent else "01"
            yield TraceContext(trace_id, f"{recorded.span_id:016x}", flags, tracestate)
        else:
            yield child_of(parent)


def child_of(parent: TraceContext | None) -> TraceContext:
    """A new span under ``parent``, or the first span of a new trace."""
    return new_trace(_trace_id(), _span_id()) if parent is None else parent.child(_span_id())


def _otel_context(parent: TraceContext | None) -> Any:
    if parent is None:
        return None
    return otel.set_span_in_context(
        otel.NonRecordingSpan(
            otel.SpanContext(
                trace_id=int(parent.trace_id, 16),
                span_id=int(parent.span_id, 16),
                is_remote=True,
                trace_flags=otel.TraceFlags(int(parent.flags, 16)),
            )
        )
    )
