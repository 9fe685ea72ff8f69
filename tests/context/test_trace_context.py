"""W3C trace context over the bus: continuity across hops, invalid input, OpenTelemetry spans."""

from __future__ import annotations

import itertools
import uuid
from typing import Any

import anyio
import pytest
from opentelemetry import trace as otel

from toolbus.application.agent.audit import ListAuditSink
from toolbus.application.agent.session import AgentSession
from toolbus.application.calls.metrics import ToolbusMetrics
from toolbus.application.calls.tools import Tools
from toolbus.application.tracing import propagation as tracing
from toolbus.domain.calls import wire
from toolbus.domain.calls.trace_context import TraceContext, parse_traceparent
from toolbus.domain.errors import NotFound
from toolbus.testing.kit import ToolTestKit

from .support import Recorder, registry_for, tapped, tool

pytestmark = pytest.mark.anyio

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN = "00f067aa0ba902b7"


def two_hops(
    kit: ToolTestKit, *, nested_via_client: bool = False
) -> tuple[Recorder, Recorder, Tools]:
    """Tool "outer" (service A) calls tool "inner" (service B) from inside its body."""
    holder: dict[str, Tools] = {}

    async def call_inner(arguments: dict[str, Any]) -> str:
        if nested_via_client:
            answer = await kit.client.call(
                request_queue=inner.request_queue,
                response_queue=inner.response_queue,
                service=inner.id,
            )
        else:
            answer = await holder["tools"].call("inner")
        return f"outer({answer})"

    outer = Recorder("outer-service", answer=call_inner)
    inner = Recorder("inner-service")
    registry = registry_for(
        [outer, inner],
        {
            "outer": tool("outer", "outer-service"),
            "inner": tool("inner", "inner-service"),
        },
    )
    holder["tools"] = kit.tools(registry)
    return outer, inner, holder["tools"]


def sent_trace(message: Any) -> TraceContext:
    context = parse_traceparent(
        message.properties.get(wire.PROP_TRACEPARENT), message.properties.get(wire.PROP_TRACESTATE)
    )
    assert context is not None, message.properties
    return context


async def test_trace_ids_are_continuous_across_two_hops(toolbus: ToolTestKit) -> None:
    outer, inner, tools = two_hops(toolbus)
    await toolbus.serve(outer, inner)
    async with tapped(toolbus.bus, outer.request_queue, inner.request_queue) as tap:
        assert await tools.call("outer") == "outer(ok)"
    (to_a,) = tap.on(outer.request_queue)
    (to_b,) = tap.on(inner.request_queue)
    a, b = outer.last.trace, inner.last.trace
    assert a is not None and b is not None
    assert sent_trace(to_a).trace_id == a.trace_id == sent_trace(to_b).trace_id == b.trace_id
    # Each service has a span of its own; B's parent is A's span.
    assert a.span_id != sent_trace(to_a).span_id
    assert sent_trace(to_b).span_id == a.span_id
    assert b.span_id != a.span_id


async def test_a_caller_trace_is_continued_and_its_tracestate_kept(toolbus: ToolTestKit) -> None:
    outer, inner, tools = two_hops(toolbus)
    await toolbus.serve(outer, inner)
    caller = TraceContext(TRACE, SPAN, "01", "vendor=abc")
    with tracing.activated(caller):
        await tools.call("outer")
    a, b = outer.last.trace, inner.last.trace
    assert a is not None and b is not None
    assert (a.trace_id, b.trace_id) == (TRACE, TRACE)
    assert (a.tracestate, b.tracestate) == ("vendor=abc", "vendor=abc")
    assert SPAN not in (a.span_id, b.span_id)


async def test_an_explicit_traceparent_property_is_the_parent(toolbus: ToolTestKit) -> None:
    outer, inner, tools = two_hops(toolbus)
    await toolbus.serve(outer, inner)
    async with tapped(toolbus.bus, outer.request_queue) as tap:
        await tools.call("outer", properties={wire.PROP_TRACEPARENT: f"00-{TRACE}-{SPAN}-01"})
    assert sent_trace(tap.messages[0]).span_id == SPAN
    assert inner.last.trace is not None and inner.last.trace.trace_id == TRACE


async def test_a_nested_raw_client_call_continues_the_trace(toolbus: ToolTestKit) -> None:
    outer, inner, tools = two_hops(toolbus, nested_via_client=True)
    await toolbus.serve(outer, inner)
    await tools.call("outer")
    assert outer.last.trace is not None and inner.last.trace is not None
    assert inner.last.trace.trace_id == outer.last.trace.trace_id


async def test_a_nested_raw_client_call_has_the_service_span_as_parent(
    toolbus: ToolTestKit,
) -> None:
    outer, inner, tools = two_hops(toolbus, nested_via_client=True)
    await toolbus.serve(outer, inner)
    async with tapped(toolbus.bus, inner.request_queue) as tap:
        await tools.call("outer")
    assert outer.last.trace is not None
    assert sent_trace(tap.messages[0]).span_id == outer.last.trace.span_id


async def test_the_current_opentelemetry_span_is_the_parent(toolbus: ToolTestKit) -> None:
    # An incoming HTTP request's context, extracted with the OpenTelemetry API alone.
    outer, inner, tools = two_hops(toolbus)
    await toolbus.serve(outer, inner)
    remote = otel.NonRecordingSpan(
        otel.SpanContext(int(TRACE, 16), int(SPAN, 16), True, otel.TraceFlags(1))
    )
    async with tapped(toolbus.bus, outer.request_queue) as tap:
        with otel.use_span(remote):
            await tools.call("outer")
    assert sent_trace(tap.messages[0]).traceparent == f"00-{TRACE}-{SPAN}-01"
    assert inner.last.trace is not None and inner.last.trace.trace_id == TRACE


INVALID = [
    "",
    "garbage",
    f"00-{'0' * 32}-{SPAN}-01",  # all-zero trace id
    f"00-{TRACE}-{'0' * 16}-01",  # all-zero parent id
    f"ff-{TRACE}-{SPAN}-01",  # forbidden version
    f"00-{TRACE.upper()}-{SPAN}-01",  # upper-case hex
    f"00-{TRACE}-{SPAN}-01-extra",  # version 00 has exactly four fields
    f"00-{TRACE[:-1]}-{SPAN}-01",  # short trace id
    f"00_{TRACE}_{SPAN}_01",
]


async def _raw_call(kit: ToolTestKit, service: Recorder, properties: dict[str, str]) -> None:
    """Publish a request with exactly these properties (plus an id); wait for the answer."""
    call_id = str(uuid.uuid4())
    answers = await kit.bus.subscribe(service.response_queue)
    try:
        await kit.bus.publish(
            service.request_queue,
            wire.encode_request("u", {}, {}),
            {wire.PROP_ID: call_id, **properties},
        )
        with anyio.fail_after(5):
            async for delivery in answers:
                if delivery.properties.get(wire.PROP_ID) == call_id:
                    assert wire.decode_response(delivery.body).error_type is None
                    return
    finally:
        await answers.close()


@pytest.mark.parametrize("traceparent", INVALID)
async def test_an_invalid_traceparent_starts_a_new_trace(
    toolbus: ToolTestKit, traceparent: str
) -> None:
    service = Recorder("plain-service")
    await toolbus.serve(service)
    await _raw_call(
        toolbus,
        service,
        {wire.PROP_TRACEPARENT: traceparent, wire.PROP_TRACESTATE: "vendor=abc"},
    )
    context = service.last.trace
    assert context is not None
    assert context.trace_id not in (TRACE, "0" * 32)
    assert parse_traceparent(context.traceparent) == context  # itself valid
    # The spec: a tracestate without a valid traceparent is dropped too.
    assert context.tracestate is None


@pytest.mark.parametrize(
    "traceparent",
    [f"00-{TRACE}-{SPAN}-01", f"00-{TRACE}-{SPAN}-00", f"01-{TRACE}-{SPAN}-01-more-fields"],
)
async def test_a_valid_traceparent_is_continued(toolbus: ToolTestKit, traceparent: str) -> None:
    service = Recorder("plain-service")
    await toolbus.serve(service)
    await _raw_call(
        toolbus, service, {wire.PROP_TRACEPARENT: traceparent, wire.PROP_TRACESTATE: "v=1"}
    )
    context = service.last.trace
    assert context is not None
    assert (context.trace_id, context.tracestate) == (TRACE, "v=1")
    assert context.span_id != SPAN
    assert context.flags == traceparent.split("-")[3]


async def test_a_request_without_traceparent_starts_a_trace(toolbus: ToolTestKit) -> None:
    service = Recorder("plain-service")
    await toolbus.serve(service)
    await _raw_call(toolbus, service, {})
    assert service.last.trace is not None


# ------------------------------------------------------------------ OpenTelemetry


def by_name(finished: Any) -> dict[str, Any]:
    named = {span.name: span for span in finished}
    assert len(named) == len(finished), [span.name for span in finished]
    return named


async def test_spans_with_an_sdk_form_one_tree_whose_ids_are_on_the_wire(
    toolbus: ToolTestKit, spans: Any
) -> None:
    outer, inner, tools = two_hops(toolbus)
    await toolbus.serve(outer, inner)
    async with (
        tapped(toolbus.bus, outer.request_queue, inner.request_queue) as tap,
        AgentSession(
            tools, user="alice", audit=ListAuditSink(), metrics=ToolbusMetrics.disabled()
        ) as agent,
    ):
        outcome = await agent.call("outer", {}, tool_call_id="call-7")
    assert outcome.ok, outcome.observation
    named = by_name(spans.get_finished_spans())
    assert sorted(named) == [
        "execute_tool inner",
        "execute_tool outer",
        "toolbus call inner-service",
        "toolbus call outer-service",
        "toolbus serve inner-service",
        "toolbus serve outer-service",
    ]
    chain = [
        ("execute_tool outer", otel.SpanKind.INTERNAL),
        ("toolbus call outer-service", otel.SpanKind.CLIENT),
        ("toolbus serve outer-service", otel.SpanKind.SERVER),
        ("execute_tool inner", otel.SpanKind.INTERNAL),
        ("toolbus call inner-service", otel.SpanKind.CLIENT),
        ("toolbus serve inner-service", otel.SpanKind.SERVER),
    ]
    root = named["execute_tool outer"]
    assert root.parent is None
    for (parent_name, _), (child_name, _) in itertools.pairwise(chain):
        assert named[child_name].parent.span_id == named[parent_name].context.span_id
    for name, kind in chain:
        assert named[name].kind == kind
        assert named[name].context.trace_id == root.context.trace_id
    # The ids on the wire are the client spans'.
    for queue, client in [
        (outer.request_queue, "toolbus call outer-service"),
        (inner.request_queue, "toolbus call inner-service"),
    ]:
        (message,) = tap.on(queue)
        sent = sent_trace(message)
        assert sent.trace_id == f"{root.context.trace_id:032x}"
        assert sent.span_id == f"{named[client].context.span_id:016x}"
    # The tool body sees the server span as current.
    assert outer.last.trace is not None
    assert (
        outer.last.trace.span_id == f"{named['toolbus serve outer-service'].context.span_id:016x}"
    )
    # Attributes: which tool, which service.
    # The names OpenTelemetry's GenAI and messaging conventions give them.
    assert named["execute_tool outer"].attributes == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "outer",
        "gen_ai.tool.type": "extension",
        "gen_ai.tool.description": "the outer tool",
        "gen_ai.tool.call.id": "call-7",
        "toolbus.tool": "outer",
        "toolbus.service": "outer-service",
    }
    assert named["toolbus call outer-service"].attributes == {
        "toolbus.service": "outer-service",
        "messaging.destination.name": outer.request_queue,
        "messaging.operation.type": "send",
    }
    assert named["toolbus serve inner-service"].attributes == {
        "toolbus.service": "inner-service",
        "messaging.destination.name": inner.request_queue,
        "messaging.operation.type": "process",
        "messaging.consumer.group.name": "inner-service",
    }


async def test_a_traceparent_passed_to_the_client_is_continued(toolbus: ToolTestKit) -> None:
    service = Recorder("plain-service")
    await toolbus.serve(service)
    await toolbus.client.call(
        request_queue=service.request_queue,
        response_queue=service.response_queue,
        properties={wire.PROP_TRACEPARENT: f"00-{TRACE}-{SPAN}-01"},
    )
    assert service.last.trace is not None and service.last.trace.trace_id == TRACE


async def test_a_traceparent_passed_to_the_client_is_the_parent_of_its_span(
    toolbus: ToolTestKit, spans: Any
) -> None:
    service = Recorder("plain-service")
    await toolbus.serve(service)
    await toolbus.client.call(
        request_queue=service.request_queue,
        response_queue=service.response_queue,
        service=service.id,
        properties={wire.PROP_TRACEPARENT: f"00-{TRACE}-{SPAN}-01"},
    )
    assert service.last.trace is not None and service.last.trace.trace_id == TRACE
    client = by_name(spans.get_finished_spans())["toolbus call plain-service"]
    assert client.parent.span_id == int(SPAN, 16)


async def test_a_failed_call_marks_its_spans_with_the_error_type_only(
    toolbus: ToolTestKit, spans: Any
) -> None:
    async def fail(arguments: dict[str, Any]) -> str:
        raise NotFound("customer 'Ada Lovelace' does not exist")

    service = Recorder("failing-service", answer=fail)
    registry = registry_for([service], {"failing": tool("failing", "failing-service")})
    await toolbus.serve(service)
    with pytest.raises(NotFound):
        await toolbus.tools(registry).call("failing")
    finished = spans.get_finished_spans()
    assert len(finished) == 3
    for span in finished:
        assert span.status.status_code == otel.StatusCode.ERROR
        assert span.status.description == "NotFound"
        assert span.attributes["error.type"] == "not-found"
        assert span.events == ()  # no exception event: its message could hold a secret


async def test_a_plain_client_call_is_a_client_and_a_server_span(
    toolbus: ToolTestKit, spans: Any
) -> None:
    service = Recorder("plain-service")
    await toolbus.serve(service)
    await toolbus.call(service)
    named = by_name(spans.get_finished_spans())
    client, server = named["toolbus call plain-service"], named["toolbus serve plain-service"]
    assert server.parent.span_id == client.context.span_id
    assert client.parent is None


async def test_calls_under_an_application_span_are_its_children(
    toolbus: ToolTestKit, spans: Any
) -> None:
    outer, inner, tools = two_hops(toolbus)
    await toolbus.serve(outer, inner)
    with otel.get_tracer("app").start_as_current_span("handle request") as app:
        await tools.call("outer")
    named = by_name(spans.get_finished_spans())
    assert named["execute_tool outer"].parent.span_id == app.get_span_context().span_id
    assert {s.context.trace_id for s in named.values()} == {app.get_span_context().trace_id}


async def test_an_invalid_traceparent_is_a_new_root_span_even_inside_another_span(
    toolbus: ToolTestKit, spans: Any
) -> None:
    service = Recorder("plain-service")
    # The service's workers inherit whatever context was current when it started.
    with otel.get_tracer("app").start_as_current_span("start-up"):
        await toolbus.serve(service)
    await _raw_call(toolbus, service, {wire.PROP_TRACEPARENT: "garbage"})
    named = by_name(spans.get_finished_spans())
    server = named["toolbus serve plain-service"]
    assert server.parent is None
    assert server.context.trace_id != named["start-up"].context.trace_id


async def test_an_unsampled_caller_stays_unsampled(toolbus: ToolTestKit, spans: Any) -> None:
    service = Recorder("plain-service")
    await toolbus.serve(service)
    await _raw_call(toolbus, service, {wire.PROP_TRACEPARENT: f"00-{TRACE}-{SPAN}-00"})
    assert service.last.trace is not None
    assert (service.last.trace.trace_id, service.last.trace.flags) == (TRACE, "00")
    assert spans.get_finished_spans() == ()


async def test_streams_continue_the_trace(toolbus: ToolTestKit) -> None:
    service = Recorder("plain-service")
    registry = registry_for([service], {"plain": tool("plain", "plain-service")})
    await toolbus.serve(service)
    caller = TraceContext(TRACE, SPAN)
    with tracing.activated(caller):
        chunks = [chunk async for chunk in toolbus.tools(registry).stream("plain")]
    assert chunks == ["ok"]
    assert service.last.trace is not None and service.last.trace.trace_id == TRACE
