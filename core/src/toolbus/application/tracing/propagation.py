"""W3C trace context across hops, and OpenTelemetry spans when an SDK is configured.

Every tool call carries ``traceparent`` (and ``tracestate`` when there is one) as
message properties. The caller sends its current context (or starts a trace);
the service continues the trace it receives with a span id of its own, or starts
a new trace when the inbound ``traceparent`` is missing or invalid, as the W3C
spec says. Inside a tool the service's context is current, so calls the tool
makes continue it: trace ids stay continuous across any number of hops, and
each service's span is the parent of the calls it makes.

When ``opentelemetry-api`` is importable, the current OpenTelemetry span counts
as the current trace when toolbus has none (a gateway's request span, say). When
an SDK tracer provider is configured, tool calls (``execute_tool``, INTERNAL),
client calls (CLIENT) and service handling (SERVER) are also OpenTelemetry
spans with tool and service attributes, and their span ids are the ones on the
wire. A span never records an exception's message, which may quote a secret:
only its type.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar, Token
from typing import Any, Literal

from toolbus.application.tracing import conventions
from toolbus.domain.calls import wire
from toolbus.domain.calls.trace_context import TraceContext, new_trace, parse_traceparent

try:  # optional: spans only when the API is installed
    from opentelemetry import trace as otel
    from opentelemetry.context import Context as OtelContext
    from opentelemetry.context import get_current as _otel_current

    HAVE_OPENTELEMETRY = True
    _KINDS = {
        "client": otel.SpanKind.CLIENT,
        "server": otel.SpanKind.SERVER,
        "internal": otel.SpanKind.INTERNAL,
    }
except ImportError:  # pragma: no cover - exercised where opentelemetry is absent
    HAVE_OPENTELEMETRY = False

SpanKind = Literal["client", "server", "internal"]


class _Deferred:
    """A service's trace context for one request, worked out only if asked for.

    Most tools never look at their trace (they call no other tool), and parsing
    the inbound ``traceparent`` or starting a trace costs more than the rest of
    the bookkeeping; so it happens on first use, once per request.
    """

    __slots__ = ("_context", "_properties", "_token")

    def __init__(self, properties: Mapping[str, str]) -> None:
        self._properties = properties
        self._context: TraceContext | None = None

    def resolve(self) -> TraceContext:
        if self._context is None:
            self._context = child_of(received(self._properties))
        return self._context

    # As a context manager: current for the block (a request being served, no span).
    def __enter__(self) -> None:
        self._token = _current.set(self)

    def __exit__(self, *exc_info: object) -> None:
        _current.reset(self._token)


_current: ContextVar[TraceContext | _Deferred | None] = ContextVar("toolbus_trace", default=None)
# The SDK makes a new tracer object per get_tracer(); one per provider is enough.
_tracer: tuple[Any, Any] | None = None


def current_trace() -> TraceContext | None:
    """The trace context of the code running now.

    Inside a tool: the service's. Elsewhere: the current OpenTelemetry span's,
    when there is a valid one; else None.
    """
    context = _current.get()
    if type(context) is _Deferred:
        return context.resolve()
    if context is not None or not HAVE_OPENTELEMETRY:
        return context  # type: ignore[return-value]
    current = _otel_current()
    if not current:  # the common case, and the cheapest check
        return None
    return _from_otel(otel.get_current_span(current).get_span_context())


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
    if _sdk_seen or not HAVE_OPENTELEMETRY or not conventions.HAVE_CONVENTIONS:
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


def outgoing(parent: TraceContext | None = None) -> TraceContext:
    """The context to send on a call when no span is recorded: the caller's own.

    As with OpenTelemetry's API without an SDK, an unrecorded client hop gets no
    span id of its own (nothing would report it), so the service's span is a
    child of the caller's. With no current trace, a new one starts here.
    """
    parent = parent if parent is not None else current_trace()
    return parent if parent is not None else child_of(None)


@contextmanager
def activated(context: TraceContext) -> Iterator[None]:
    """Make ``context`` current for the block (a tool's body, say)."""
    token = _current.set(context)
    try:
        yield
    finally:
        _current.reset(token)


def enter_served(properties: Mapping[str, str]) -> Token[TraceContext | _Deferred | None]:
    """What ``hop("server", ...)`` does without a span, for a caller that skips the
    ``with``: the request's context becomes current, worked out only if asked for.
    Undo with :func:`leave`."""
    return _current.set(_Deferred(properties))


def leave(token: Token[TraceContext | _Deferred | None]) -> None:
    _current.reset(token)


@contextmanager
def span(
    name: str,
    parent: TraceContext | None,
    *,
    server: bool = False,
    kind: SpanKind | None = None,
    attributes: Mapping[str, Any],
) -> Iterator[TraceContext]:
    """Open this hop's span under ``parent`` (None: start a trace); yields its context.

    ``kind`` is ``"client"`` unless ``server`` is true or ``kind`` says otherwise.
    With an OpenTelemetry SDK configured, the span id is the SDK's, so the ids
    on the wire and in the tracing backend agree. Without one, a server hop
    gets a fresh random span id and other kinds pass the parent through.
    """
    kind = kind or ("server" if server else "client")
    if not recording():
        yield child_of(parent) if kind == "server" else outgoing(parent)
        return
    with _tracer_now().start_as_current_span(
        name,
        context=_otel_context(parent),
        kind=_KINDS[kind],
        attributes=dict(attributes),
        # An exception's message may quote an injected secret: keep it out of spans.
        record_exception=False,
        set_status_on_exception=False,
    ) as current:
        recorded = current.get_span_context()
        context = _from_otel(recorded) if recorded.is_valid else None
        if context is None:  # a provider that makes no ids (not the SDK's)
            context = child_of(parent) if kind == "server" else outgoing(parent)
        elif parent is not None and context.tracestate is None:
            context = TraceContext(
                context.trace_id, context.span_id, context.flags, parent.tracestate
            )
        try:
            yield context
        except Exception as exc:
            error_type = getattr(exc, "error_type", None) or type(exc).__qualname__
            current.set_attribute(conventions.ERROR_TYPE, error_type)
            current.set_status(otel.Status(otel.StatusCode.ERROR, type(exc).__name__))
            raise


def annotate(attributes: Mapping[str, Any]) -> None:
    """Add ``attributes`` to the span current now (what a call used, say), if one records."""
    if recording():
        otel.get_current_span().set_attributes(dict(attributes))


def failed(error_type: str) -> None:
    """Mark the span current now as failed with ``error_type`` (never a message), if one records.

    For outcomes that end an operation without an exception (an agent request
    that stops at its iteration limit, say).
    """
    if recording():
        current = otel.get_current_span()
        current.set_attribute(conventions.ERROR_TYPE, error_type)
        current.set_status(otel.Status(otel.StatusCode.ERROR, error_type))


SpanDescription = Callable[..., tuple[str, Mapping[str, Any]]]


def hop(
    kind: SpanKind,
    properties: Mapping[str, str] | None,
    describe: SpanDescription,
    *details: Any,
) -> AbstractContextManager[TraceContext | None]:
    """One hop of a call, for the block it covers: the one place that picks traced or fast.

    With an OpenTelemetry SDK recording, it opens this hop's span (see
    :func:`span`; ``describe(*details)`` gives its name and attributes) and, for a tool
    call (``"internal"``) or a request being served (``"server"``), makes the
    span's context current for the block; it yields that context. Otherwise it
    does only what the trace needs, with no span machinery on the per-call path:

    * ``"server"``: the request's context (a child of its ``traceparent``)
      becomes current, worked out only if something asks; yields ``None``;
    * ``"internal"``: yields the context to send, the caller's (see
      :func:`parent_of`) or a new trace;
    * ``"client"``: yields ``None``: the client sends the current trace, if any.

    The parent is ``properties``' valid ``traceparent``; for a client or a tool
    call, the current trace when there is none.
    """
    if not recording():
        if kind == "client":
            return _NOTHING
        if kind == "server":
            return _Deferred(properties or {})
        return nullcontext(outgoing(parent_of(properties)))
    return _recorded_hop(kind, properties, describe(*details))


class _Nothing:
    """The client's hop without a recorded span: nothing to do, no state, one instance."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc_info: object) -> None:
        return None


_NOTHING = _Nothing()


@contextmanager
def _recorded_hop(
    kind: SpanKind,
    properties: Mapping[str, str] | None,
    description: tuple[str, Mapping[str, Any]],
) -> Iterator[TraceContext]:
    if kind == "server":
        parent = received(properties) if properties else None
    else:
        parent = parent_of(properties)
    name, attributes = description
    with span(name, parent, kind=kind, attributes=attributes) as context:
        if kind == "client":
            yield context
        else:
            with activated(context):
                yield context


def parent_of(properties: Mapping[str, str] | None) -> TraceContext | None:
    """The parent of an outgoing call: ``properties``' ``traceparent`` when valid, else
    the current trace."""
    if properties and wire.PROP_TRACEPARENT in properties:
        explicit = received(properties)
        if explicit is not None:
            return explicit
    return current_trace()


def child_of(parent: TraceContext | None) -> TraceContext:
    """A new span under ``parent``, or the first span of a new trace."""
    return new_trace(_trace_id(), _span_id()) if parent is None else parent.child(_span_id())


def _tracer_now() -> Any:
    global _tracer
    provider = otel.get_tracer_provider()
    if _tracer is None or _tracer[0] is not provider:
        _tracer = (provider, provider.get_tracer("toolbus"))
    return _tracer[1]


def _from_otel(context: Any) -> TraceContext | None:
    if not context.is_valid:
        return None
    tracestate = context.trace_state.to_header() if context.trace_state else ""
    return TraceContext(
        f"{context.trace_id:032x}",
        f"{context.span_id:016x}",
        f"{int(context.trace_flags):02x}",
        tracestate or None,
    )


def _otel_context(parent: TraceContext | None) -> Any:
    """The OpenTelemetry parent context for a span under ``parent``."""
    if parent is None:
        # A new trace, whatever happens to be current (a server task may have
        # inherited some unrelated span's context).
        return OtelContext()
    current = otel.get_current_span().get_span_context()
    if (
        current.is_valid
        and f"{current.span_id:016x}" == parent.span_id
        and f"{current.trace_id:032x}" == parent.trace_id
    ):
        return None  # the current (local) span: a plain child of it
    return otel.set_span_in_context(
        otel.NonRecordingSpan(
            otel.SpanContext(
                trace_id=int(parent.trace_id, 16),
                span_id=int(parent.span_id, 16),
                is_remote=True,
                trace_flags=otel.TraceFlags(int(parent.flags, 16)),
                trace_state=otel.TraceState.from_header([parent.tracestate])
                if parent.tracestate
                else None,
            )
        )
    )
