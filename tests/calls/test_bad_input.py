"""Bad input never takes a service down.

Each case sends something wrong over the in-memory bus and then shows that the
same service answers the next call. Requests that cannot be made with the client
(broken bodies, no ``id``) are published raw, as a foreign or buggy caller would.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Mapping
from typing import Annotated, Any

import anyio
import anyio.from_thread
import pydantic
import pytest

from toolbus import ServiceHost, ToolService, running, tool_service
from toolbus._internal.throttled_log import ThrottledLog
from toolbus.domain.calls import wire
from toolbus.domain.errors import BadRequest, NotFound, ToolServiceError, ToolTimeout
from toolbus.memory.bus import connect
from toolbus.ports import Delivery, Subscription
from toolbus.testing import ToolTestKit

pytestmark = pytest.mark.anyio

WAIT = 5.0  # the most any single expected event may take; never slept


def echo_service(service_id: str = "echo", queue_kind: str = "non-persistent") -> ToolService:
    @tool_service(
        service_id,
        request_queue=f"{queue_kind}://test/request/{service_id}",
        response_queue=f"non-persistent://test/response/{service_id}",
    )
    async def echo(text: str) -> str:
        return text

    return echo


async def next_reply(replies: Subscription) -> Delivery:
    with anyio.fail_after(WAIT):
        async for delivery in replies:
            return delivery
    raise AssertionError("the response subscription ended")


async def send_raw(
    kit: ToolTestKit, service: ToolService, body: bytes, properties: Mapping[str, str]
) -> Subscription:
    """Publish ``body`` as a request; returns a subscription that sees every reply."""
    replies = await kit.bus.subscribe(service.response_queue)
    await kit.bus.publish(service.request_queue, body, properties)
    return replies


async def still_serving(kit: ToolTestKit, service: ToolService) -> None:
    text = f"still here {uuid.uuid4().hex[:6]}"
    assert await kit.call(service, {"text": text}) == text
    assert kit.client.pending == 0


BAD_BODIES = [
    pytest.param(b"this is not json", "not valid JSON", id="not-json"),
    pytest.param(b"", "not valid JSON", id="empty"),
    pytest.param(b"\xff\xfe\xfa", "not valid UTF-8", id="not-utf8"),
    pytest.param(b"[" * 100_000, "not valid JSON", id="nested-too-deep"),
    pytest.param(b"[1, 2, 3]", "must be a JSON object", id="array"),
    pytest.param(b'"a string"', "must be a JSON object", id="string"),
    pytest.param(b"null", "must be a JSON object", id="null"),
    pytest.param(b'{"user": 42}', "'user' must be a string", id="user-not-string"),
    pytest.param(
        b'{"user": "a", "config": "{not json", "arguments": "{}"}',
        "'config' is not valid JSON",
        id="config-not-json",
    ),
    pytest.param(
        b'{"user": "a", "config": "{}", "arguments": "text=hello"}',
        "'arguments' is not valid JSON",
        id="arguments-not-json",
    ),
    pytest.param(
        b'{"user": "a", "config": "[1]", "arguments": "{}"}',
        "'config' must be a JSON object",
        id="config-not-object",
    ),
    pytest.param(
        b'{"user": "a", "arguments": 7}', "'arguments' must be a JSON string", id="arguments-int"
    ),
    # Well-formed, but not what this tool takes.
    pytest.param(b'{"unexpected": true}', "text", id="no-arguments"),
    pytest.param(b'{"user": "a", "arguments": "{\\"txt\\": \\"hi\\"}"}', "text", id="wrong-key"),
]


@pytest.mark.parametrize(("body", "fragment"), BAD_BODIES)
async def test_a_bad_body_is_answered_with_bad_request_and_the_service_goes_on(
    toolbus: ToolTestKit, body: bytes, fragment: str
) -> None:
    service = echo_service()
    await toolbus.serve(service)
    call_id = str(uuid.uuid4())

    replies = await send_raw(toolbus, service, body, {wire.PROP_ID: call_id})
    reply = await next_reply(replies)

    assert reply.properties[wire.PROP_ID] == call_id
    response = wire.decode_response(reply.body)
    assert response.error_type == "bad-request"
    assert fragment in response.error_message
    assert response.end_of_stream
    await still_serving(toolbus, service)


@pytest.mark.parametrize("properties", [{}, {wire.PROP_ID: ""}, {"traceparent": "00-x"}])
async def test_a_request_with_no_id_is_logged_and_dropped_without_a_reply(
    toolbus: ToolTestKit, caplog: pytest.LogCaptureFixture, properties: dict[str, str]
) -> None:
    service = echo_service()
    # One at a time, so the dropped request is settled before the next is read.
    (host,) = await toolbus.serve(service, concurrency=1)
    good_id = str(uuid.uuid4())
    good = wire.encode_request("alice", {}, {"text": "after"})

    with caplog.at_level(logging.WARNING, logger="toolbus"):
        replies = await send_raw(toolbus, service, wire.encode_request("a", {}, {}), properties)
        await toolbus.bus.publish(service.request_queue, good, {wire.PROP_ID: good_id})
        # The first reply on the queue is the second request's: the first got none.
        reply = await next_reply(replies)

    assert reply.properties[wire.PROP_ID] == good_id
    assert wire.decode_response(reply.body).response == "after"
    assert host.handled == 2
    dropped = [r for r in caplog.records if "no 'id'" in r.getMessage()]
    assert len(dropped) == 1
    assert dropped[0].levelno == logging.WARNING
    assert service.id in dropped[0].getMessage()
    await still_serving(toolbus, service)


@pytest.mark.parametrize(
    ("body", "properties"),
    [
        pytest.param(b"not json", {wire.PROP_ID: "bad-json"}, id="bad-json"),
        pytest.param(b"{}", {wire.PROP_ID: "bad-arguments"}, id="bad-arguments"),
        pytest.param(wire.encode_request("a", {}, {"text": "x"}), {}, id="no-id"),
    ],
)
async def test_bad_input_on_a_persistent_queue_is_settled_not_redelivered(
    toolbus: ToolTestKit, body: bytes, properties: dict[str, str]
) -> None:
    service = echo_service("durable", queue_kind="persistent")
    (host,) = await toolbus.serve(service)

    await toolbus.bus.publish(service.request_queue, body, properties)
    await still_serving(toolbus, service)
    # A nacked poison message would come straight back, again and again, and the
    # loop would never go quiet.
    with anyio.fail_after(WAIT):
        await anyio.wait_all_tasks_blocked()

    assert host.handled == 2


async def test_an_oversized_body_is_refused_naming_the_limit(toolbus: ToolTestKit) -> None:
    service = echo_service()
    (host,) = await toolbus.serve(service, max_request_bytes=1024)

    with pytest.raises(BadRequest) as caught:
        await toolbus.call(service, {"text": "x" * 2000})

    assert f"{host.max_request_bytes:,} bytes" in caught.value.message
    assert "max_request_bytes" in caught.value.message
    assert toolbus.client.pending == 0
    await still_serving(toolbus, service)


async def test_a_body_just_under_the_limit_is_served(toolbus: ToolTestKit) -> None:
    service = echo_service()
    (host,) = await toolbus.serve(service, max_request_bytes=1024)
    overhead = len(wire.encode_request("test-user", {}, {"text": ""}))
    text = "y" * (host.max_request_bytes - overhead)

    assert await toolbus.call(service, {"text": text}) == text


# --- tools that fail ---------------------------------------------------------------


def fragile_service() -> ToolService:
    @tool_service("fragile")
    async def fragile(mode: str) -> str:
        if mode == "boom":
            raise RuntimeError("the tool blew up")
        if mode == "missing":
            raise NotFound("no customer 42")
        if mode == "bare":
            raise ValueError
        return "fine"

    return fragile


@pytest.mark.parametrize(
    ("mode", "error", "error_type", "fragment"),
    [
        # Unexpected exceptions: a generic message; their text stays in the log.
        (
            "boom",
            ToolServiceError,
            "tool-service-error",
            "internal error in tool service 'fragile'",
        ),
        (
            "bare",
            ToolServiceError,
            "tool-service-error",
            "internal error in tool service 'fragile'",
        ),
        ("missing", NotFound, "not-found", "no customer 42"),
    ],
)
async def test_a_tool_that_raises_answers_with_an_error_and_keeps_serving(
    toolbus: ToolTestKit,
    caplog: pytest.LogCaptureFixture,
    mode: str,
    error: type[Exception],
    error_type: str,
    fragment: str,
) -> None:
    service = fragile_service()
    await toolbus.serve(service)

    with caplog.at_level(logging.ERROR, logger="toolbus"), pytest.raises(error) as caught:
        await toolbus.call(service, {"mode": mode})

    assert getattr(caught.value, "error_type", None) == error_type
    assert fragment in str(caught.value)
    assert await toolbus.call(service, {"mode": "ok"}) == "fine"
    assert toolbus.client.pending == 0


async def test_a_stream_that_raises_delivers_its_chunks_then_the_error(
    toolbus: ToolTestKit,
) -> None:
    @tool_service("ticker")
    async def ticker(count: int) -> Any:
        for n in range(count):
            yield f"{n};"
        raise RuntimeError("ran out of ticks")

    await toolbus.serve(ticker)
    chunks: list[str] = []

    with pytest.raises(ToolServiceError, match="internal error in tool service 'ticker'"):
        async for chunk in toolbus.client.stream(
            request_queue=ticker.request_queue,
            response_queue=ticker.response_queue,
            arguments={"count": 3},
            timeout=WAIT,
        ):
            chunks.append(chunk)

    assert chunks == ["0;", "1;", "2;"]
    assert toolbus.client.pending == 0


async def test_a_tool_that_hangs_past_the_timeout_times_out_while_others_are_served(
    toolbus: ToolTestKit,
) -> None:
    started, release = anyio.Event(), anyio.Event()

    @tool_service("sleepy")
    async def sleepy(text: str) -> str:
        if text == "hang":
            started.set()
            await release.wait()
            return "too late"
        return text

    (host,) = await toolbus.serve(sleepy, concurrency=4)
    timeouts: list[ToolTimeout] = []

    async def hanging_call() -> None:
        with pytest.raises(ToolTimeout) as caught:
            await toolbus.call(sleepy, {"text": "hang"}, timeout=0.3)
        timeouts.append(caught.value)

    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(hanging_call)
            with anyio.fail_after(WAIT):
                await started.wait()
            # The hung call holds one slot; the others keep answering meanwhile.
            for n in range(3):
                assert await toolbus.call(sleepy, {"text": f"quick {n}"}) == f"quick {n}"
                assert host.in_flight == 1
    finally:
        release.set()

    (timeout,) = timeouts
    assert timeout.service == "sleepy"
    assert timeout.seconds == 0.3
    assert "'sleepy'" in str(timeout)
    assert "0.3 s" in str(timeout)
    assert toolbus.client.pending == 0
    # The late answer to the abandoned call is ignored; the next call gets its own.
    assert await toolbus.call(sleepy, {"text": "after"}) == "after"
    assert toolbus.client.pending == 0


# --- typed functions ---------------------------------------------------------------


async def test_typed_arguments_are_validated_naming_the_field_not_echoing_the_value(
    toolbus: ToolTestKit,
) -> None:
    @tool_service("typed")
    async def typed(count: int, label: str = "items") -> str:
        return f"{count} {label}"

    await toolbus.serve(typed)
    secret = "hunter2-do-not-log"

    with pytest.raises(BadRequest) as wrong_type:
        await toolbus.call(typed, {"count": secret})
    with pytest.raises(BadRequest) as nested:
        await toolbus.call(typed, {"count": 1, "label": {"password": secret}})
    with pytest.raises(BadRequest) as missing:
        await toolbus.call(typed, {"label": secret})

    assert "count" in wrong_type.value.message
    assert "label" in nested.value.message
    assert "count" in missing.value.message
    assert "'typed'" in missing.value.message
    for caught in (wrong_type, nested, missing):
        assert secret not in caught.value.message
        assert caught.value.error_type == "bad-request"
    assert await toolbus.call(typed, {"count": "3"}) == "3 items"  # lax, as pydantic is
    assert typed.arguments_schema is not None
    assert typed.arguments_schema["properties"]["count"]["type"] == "integer"
    assert typed.arguments_schema["required"] == ["count"]


class Point(pydantic.BaseModel):
    x: int
    y: int = 0


async def test_typed_arguments_get_every_kind_of_default_and_constraint(
    toolbus: ToolTestKit,
) -> None:
    @tool_service("kinds")
    async def kinds(
        point: Point,
        tags: list[str] = pydantic.Field(default_factory=list),
        scale: Annotated[float, pydantic.Field(gt=0)] = 1.5,
        label: str = pydantic.Field("items", description="what is counted"),
    ) -> str:
        tags.append("seen")  # a fresh list per call, not one shared default
        return f"{point.x},{point.y} {tags} {scale} {label}"

    await toolbus.serve(kinds)

    assert await toolbus.call(kinds, {"point": {"x": "2"}}) == "2,0 ['seen'] 1.5 items"
    assert await toolbus.call(kinds, {"point": {"x": 1}, "unknown": 1}) == "1,0 ['seen'] 1.5 items"
    assert (
        await toolbus.call(kinds, {"point": {"x": 1, "y": 2}, "tags": ["a"], "scale": 3})
        == "1,2 ['a', 'seen'] 3.0 items"
    )
    with pytest.raises(BadRequest, match=r"scale: Input should be greater than 0"):
        await toolbus.call(kinds, {"point": {"x": 1}, "scale": 0})
    with pytest.raises(BadRequest, match=r"point\.x: Field required"):
        await toolbus.call(kinds, {"point": {}})
    assert kinds.arguments_schema is not None
    assert kinds.arguments_schema["properties"]["label"]["description"] == "what is counted"


async def test_a_sync_tool_runs_in_a_worker_thread_and_the_loop_stays_responsive(
    toolbus: ToolTestKit,
) -> None:
    gate = threading.Event()
    entered = anyio.Event()
    threads: list[int] = []

    @tool_service("blocking")
    def blocking(text: str) -> str:
        threads.append(threading.get_ident())
        # Only possible from a worker thread: on the loop's thread this raises.
        anyio.from_thread.run_sync(entered.set)
        if not gate.wait(timeout=WAIT):
            raise TimeoutError("the gate was never opened: the event loop was blocked")
        return f"unblocked {text}"

    echo = echo_service()
    await toolbus.serve(blocking, echo)
    answers: list[str] = []

    async def blocked_call() -> None:
        answers.append(await toolbus.call(blocking, {"text": "at last"}))

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(blocked_call)
        with anyio.fail_after(WAIT):
            await entered.wait()
        # The sync tool is blocked in its thread; the loop still serves another call.
        assert await toolbus.call(echo, {"text": "meanwhile"}) == "meanwhile"
        assert answers == []
        gate.set()

    assert answers == ["unblocked at last"]
    assert threads and threads[0] != threading.get_ident()


async def test_concurrency_is_bounded_a_third_call_waits_for_a_free_slot(
    toolbus: ToolTestKit,
) -> None:
    gates = {name: anyio.Event() for name in ("a", "b", "c")}
    third_started = anyio.Event()
    events: list[tuple[str, str]] = []
    active = peak = 0

    @tool_service("narrow")
    async def narrow(name: str) -> str:
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        events.append(("start", name))
        if sum(kind == "start" for kind, _ in events) == 3:
            third_started.set()
        try:
            await gates[name].wait()
        finally:
            active -= 1
            events.append(("end", name))
        return name.upper()

    (host,) = await toolbus.serve(narrow, concurrency=2)
    answers: dict[str, str] = {}

    async def call(name: str) -> None:
        answers[name] = await toolbus.call(narrow, {"name": name})

    async with anyio.create_task_group() as tasks:
        for name in gates:
            tasks.start_soon(call, name)
        # Every task is now waiting: the three requests are out, two are running.
        with anyio.fail_after(WAIT):
            await anyio.wait_all_tasks_blocked()
        started = [name for kind, name in events if kind == "start"]
        assert len(started) == 2
        assert host.in_flight == 2
        waiting = (set(gates) - set(started)).pop()

        gates[started[0]].set()
        with anyio.fail_after(WAIT):
            await third_started.wait()
        for gate in gates.values():
            gate.set()

    assert answers == {name: name.upper() for name in gates}
    assert peak == 2
    assert events.index(("start", waiting)) > events.index(("end", started[0]))
    assert toolbus.client.pending == 0


async def test_concurrency_below_one_is_refused(toolbus: ToolTestKit) -> None:
    with pytest.raises(ValueError, match="at least 1"):
        ServiceHost(toolbus.bus, echo_service(), concurrency=0)


async def test_a_burst_of_id_less_requests_logs_one_line_and_a_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    service = echo_service()
    bus = await connect(f"memory://burst-{uuid.uuid4().hex}")
    burst = 500
    good_id = str(uuid.uuid4())

    with caplog.at_level(logging.WARNING, logger="toolbus"):
        async with running(bus, service, concurrency=1) as (host,):
            replies = await bus.subscribe(service.response_queue)
            for _ in range(burst):
                await bus.publish(service.request_queue, wire.encode_request("a", {}, {}))
            good = wire.encode_request("alice", {}, {"text": "after"})
            await bus.publish(service.request_queue, good, {wire.PROP_ID: good_id})
            assert (await next_reply(replies)).properties[wire.PROP_ID] == good_id
            during = [r.getMessage() for r in caplog.records]
        # Stopping the host reports what it held back.
    await bus.close()

    assert host.handled == burst + 1
    assert sum("no 'id'" in line for line in during) == 1
    suppressed = [r.getMessage() for r in caplog.records if "suppressed" in r.getMessage()]
    assert suppressed == [f"{burst - 1} more warning(s) like the last no-id one suppressed"]


def test_a_warning_of_a_kind_is_repeated_after_the_interval_with_the_count() -> None:
    now = [0.0]
    records: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record.getMessage())

    logger = logging.getLogger(f"toolbus.test.throttle.{uuid.uuid4().hex}")
    logger.addHandler(Collect())
    throttled = ThrottledLog(logger, interval=60, clock=lambda: now[0])

    for _ in range(3):
        throttled.warning("no-id", "dropped %s", "x")
    throttled.warning("other", "another kind")
    now[0] = 61.0
    throttled.warning("no-id", "dropped %s", "y")

    assert records == [
        "dropped x",
        "another kind",
        "dropped y (2 more like this in the last 60 s suppressed)",
    ]


async def test_a_burst_of_asks_for_undeclared_variables_logs_one_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    service = echo_service()
    bus = await connect(f"memory://burst-{uuid.uuid4().hex}")
    burst = 200

    with caplog.at_level(logging.WARNING, logger="toolbus"):
        async with running(bus, service, concurrency=1):
            replies = await bus.subscribe(service.response_queue)
            body = wire.encode_request("a", {}, {"text": "t"})
            for n in range(burst):
                properties = {wire.PROP_ID: str(n), wire.PROP_ENV_ARGS: '{"key": "HOME"}'}
                await bus.publish(service.request_queue, body, properties)
            for _ in range(burst):
                await next_reply(replies)
    await bus.close()

    asked = [r.getMessage() for r in caplog.records if "does not offer" in r.getMessage()]
    assert len(asked) == 1
    assert any(f"{burst - 1} more warning(s)" in r.getMessage() for r in caplog.records)
