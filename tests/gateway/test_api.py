"""The HTTP API on the in-memory bus: tools, calls, sessions, streams, limits, bad input."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest

from tests.gateway.support import KEYS, RunningGateway, metric

pytestmark = pytest.mark.anyio


async def sse_events(response: httpx.Response) -> AsyncIterator[tuple[str, str]]:
    """(event, data) pairs of a Server-Sent-Event stream, as they arrive."""
    event, data = "message", []
    async for line in response.aiter_lines():
        if line == "":
            if data:
                yield event, "\n".join(data)
            event, data = "message", []
        elif line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))


# ------------------------------------------------------------------ tools and calls


@pytest.mark.parametrize("door_settings", [{"entry-states": ["undefined", "shopping"]}])
@pytest.mark.parametrize(
    ("format", "name_of"),
    [
        ("openai", lambda t: t["function"]["name"]),
        ("anthropic", lambda t: t["name"]),
        ("mcp", lambda t: t["name"]),
    ],
)
async def test_tools_are_listed_in_each_format(
    served: RunningGateway, format: str, name_of: Any
) -> None:
    async with served.client("bob") as http:
        answer = await http.get(
            "/v1/tools",
            params={"format": format, "groups": "default,research", "state": "shopping"},
        )
    assert answer.status_code == 200
    body = answer.json()
    assert body["groups"] == ["default", "research"] and body["state"] == "shopping"
    assert [name_of(t) for t in body["tools"]] == [
        "echo", "research", "add-to-cart", "checkout", "find", "words",
    ]  # fmt: skip


async def test_absent_and_empty_groups_differ(served: RunningGateway) -> None:
    async with served.client("alice") as http:
        default = (await http.get("/v1/tools")).json()
        empty = (await http.get("/v1/tools", params={"groups": ""})).json()
    assert default["groups"] == ["default"] and default["tools"]
    assert empty["groups"] == [] and empty["tools"] == []


async def test_asking_for_more_groups_is_403_counted_and_audited(served: RunningGateway) -> None:
    async with served.client("alice") as http:
        listed = await http.get("/v1/tools", params={"groups": "default,admin"})
        called = await http.post(
            "/v1/tools/admin-reset/call", json={"groups": ["*"], "arguments": {"text": "x"}}
        )
        opened = await http.post("/v1/sessions", json={"groups": ["research"]})
        text = (await http.get("/metrics")).text
    for answer in (listed, called, opened):
        assert answer.status_code == 403
        assert answer.json()["error"] == "access-denied"
    assert listed.json()["denied_groups"] == ["admin"]
    assert called.json()["denied_groups"] == ["*"]
    denials = [r for r in served.gateway.audit.records if r.outcome == "denied"]
    assert len(denials) == 3 and {r.user for r in denials} == {"alice"}
    assert {tuple(r.access_denied.denied_groups) for r in denials if r.access_denied} == {
        ("admin",), ("*",), ("research",),
    }  # fmt: skip
    assert metric(text, "agent_privilege_escalation_attempts_total", {"reason": "groups"}) == 2
    assert metric(text, "agent_privilege_escalation_attempts_total", {"reason": "wildcard"}) == 1


async def test_a_call_answers_the_observation_and_is_audited(served: RunningGateway) -> None:
    async with served.client("alice") as http:
        answer = await http.post("/v1/tools/echo/call", json={"arguments": {"text": "hello"}})
    assert answer.status_code == 200
    assert answer.json()["observation"] == "hello" and answer.json()["status"] == "ok"
    record = served.gateway.audit.records[0]
    assert record.user == "alice" and [c.tool for c in record.calls] == ["echo"]


async def test_tool_errors_unknown_tools_and_states_get_their_statuses(
    served: RunningGateway,
) -> None:
    async with served.client("alice") as http:
        failed = await http.post(
            "/v1/tools/find/call", json={"arguments": {"action": "missing", "item": "hat"}}
        )
        unknown = await http.post("/v1/tools/nope/call", json={})
        hidden = await http.post("/v1/tools/research/call", json={})
        wrong_state = await http.post("/v1/tools/checkout/call", json={"arguments": {}})
    assert failed.status_code == 502
    assert failed.json()["error_type"] == "not-found" and "hat" in failed.json()["observation"]
    assert unknown.status_code == 404 and hidden.status_code == 404
    assert unknown.json()["refusal"] == "unknown"
    assert wrong_state.status_code == 409 and wrong_state.json()["refusal"] == "state"
    async with served.client("alice") as http:
        # The service refuses arguments it cannot use: the caller's to fix, so 422.
        missing = await http.post("/v1/tools/find/call", json={"arguments": {"item": "hat"}})
    assert missing.status_code == 422 and missing.json()["error_type"] == "bad-request"


# ------------------------------------------------------------------ sessions


async def test_a_session_moves_through_its_states_and_closes_with_its_audit_record(
    served: RunningGateway,
) -> None:
    async with served.client("alice") as http:
        opened = await http.post(
            "/v1/sessions",
            json={"messages": [{"role": "user", "content": "buy a hat"}], "format": "anthropic"},
        )
        assert opened.status_code == 201, opened.text
        session = opened.json()
        sid = session["session_id"]
        assert session["state"] == "undefined"
        assert "checkout" not in [t["name"] for t in session["tools"]]
        assert session["messages"] == [{"role": "user", "content": "buy a hat"}]

        early = await http.post(f"/v1/sessions/{sid}/calls", json={"name": "checkout"})
        assert early.json()["status"] == "refused" and early.json()["state"] == "undefined"

        added = await http.post(
            f"/v1/sessions/{sid}/calls",
            json={
                "name": "add-to-cart",
                "arguments": '{"action": "add", "item": "hat"}',
                "tool_call_id": "call-1",
            },
        )
        assert added.json()["observation"] == "add hat"
        assert added.json()["transition"] == {
            "tool": "add-to-cart", "from": "undefined", "to": "shopping",
        }  # fmt: skip
        now = (await http.get(f"/v1/sessions/{sid}")).json()
        assert now["state"] == "shopping"
        assert "checkout" in [t["function"]["name"] for t in now["tools"]]

        done = await http.post(
            f"/v1/sessions/{sid}/calls", json={"name": "checkout", "arguments": {"action": "pay"}}
        )
        assert done.json()["state"] == "done"

        closed = await http.delete(f"/v1/sessions/{sid}")
        assert closed.status_code == 200
        record = closed.json()["audit"]
        assert [(t["from"], t["to"]) for t in record["state_transitions"]] == [
            ("undefined", "shopping"), ("shopping", "done"),
        ]  # fmt: skip
        # The refusal was written at once, in a record of its own; the rest at the end.
        assert [c["status"] for c in record["calls"]] == ["ok", "ok"]
        assert (await http.get(f"/v1/sessions/{sid}")).status_code == 404
    first, last = [r for r in served.gateway.audit.records if r.request_id == sid][::-1]
    assert [c.refusal for c in first.calls] == ["state"]
    assert (first.initial_state, last.initial_state) == ("undefined", "undefined")
    assert served.gateway.held_sessions() == 0


async def test_a_session_is_invisible_to_other_users(served: RunningGateway) -> None:
    async with served.client("alice") as alice, served.client("bob") as bob:
        sid = (await alice.post("/v1/sessions", json={})).json()["session_id"]
        for answer in (
            await bob.get(f"/v1/sessions/{sid}"),
            await bob.post(f"/v1/sessions/{sid}/calls", json={"name": "echo"}),
            await bob.delete(f"/v1/sessions/{sid}"),
        ):
            assert answer.status_code == 404
            assert answer.json()["error"] == "no-such-session"
        assert (await alice.get(f"/v1/sessions/{sid}")).status_code == 200


async def test_a_request_id_names_one_open_session(served: RunningGateway) -> None:
    async with served.client("alice") as alice, served.client("bob") as bob:
        first = await alice.post("/v1/sessions", json={"request_id": "req-1"})
        again = await alice.post("/v1/sessions", json={"request_id": "req-1"})
        other = await bob.post("/v1/sessions", json={"request_id": "req-1"})
    assert first.status_code == 201 and other.status_code == 201
    assert again.status_code == 409 and again.json()["error"] == "session-exists"
    assert first.json()["session_id"] != other.json()["session_id"]
    assert len(await served.gateway.door.held.owned("alice", "session")) == 1
    assert len(served.gateway.audit.records) == 0  # the refused one never started


async def test_the_session_limit_answers_429_with_retry_after(served: RunningGateway) -> None:
    async with served.client("alice") as alice, served.client("bob") as bob:
        opened = [
            (await alice.post("/v1/sessions", json={})).json()["session_id"] for _ in range(3)
        ]
        refused = await alice.post("/v1/sessions", json={})
        assert refused.status_code == 429
        assert int(refused.headers["retry-after"]) >= 1
        assert refused.json()["error"] == "too-many-sessions"
        assert "already has 3 open" in refused.json()["message"]
        assert (await bob.post("/v1/sessions", json={})).status_code == 201  # others unaffected
        await alice.delete(f"/v1/sessions/{opened[0]}")
        assert (await alice.post("/v1/sessions", json={})).status_code == 201
        text = (await alice.get("/metrics")).text
    assert (
        metric(text, "toolbus_gateway_limited_requests_total", {"limit": "sessions-per-user"}) == 1
    )
    # A refused request leaves no half-open session behind.
    assert len(await served.gateway.door.held.owned("alice", "session")) == 3


@pytest.mark.parametrize("door_settings", [{"session-idle-timeout": 0.2}])
async def test_idle_sessions_are_closed(served: RunningGateway) -> None:
    async with served.client("alice") as http:
        sid = (await http.post("/v1/sessions", json={})).json()["session_id"]
        with anyio.fail_after(10):
            async with http.stream("GET", f"/v1/sessions/{sid}/events") as stream:
                async for event, data in sse_events(stream):
                    if event == "closed":
                        assert json.loads(data)["reason"] == "idle"
                        break
        assert (await http.get(f"/v1/sessions/{sid}")).status_code == 404
    record = served.gateway.audit.records[0]
    assert record.request_id == sid and record.outcome == "completed"


# ------------------------------------------------------------------ streams


async def test_a_tools_chunks_stream_as_server_sent_events(served: RunningGateway) -> None:
    async with (
        served.client("alice") as http,
        http.stream("POST", "/v1/tools/words/stream", json={"arguments": {"text": "a b c"}}) as s,
    ):
        assert s.headers["content-type"].startswith("text/event-stream")
        events = [e async for e in sse_events(s)]
    assert events == [("chunk", "a"), ("chunk", "b"), ("chunk", "c"), ("end", "")]
    assert served.gateway.open_streams == 0


async def test_a_stream_of_a_tool_not_offered_is_404_exactly_as_a_call(
    served: RunningGateway,
) -> None:
    async with served.client("alice") as http:
        streamed = await http.post("/v1/tools/research/stream", json={})
        called = await http.post("/v1/tools/research/call", json={})
        unknown = await http.post("/v1/tools/no-such/stream", json={})
    assert streamed.status_code == called.status_code == unknown.status_code == 404
    assert streamed.json() == called.json()
    assert streamed.json()["refusal"] == "unknown"
    assert unknown.text.replace("no-such", "research") == streamed.text
    assert served.gateway.open_streams == 0


async def test_a_sessions_events_follow_its_calls(served: RunningGateway) -> None:
    async with served.client("alice") as http:
        sid = (await http.post("/v1/sessions", json={})).json()["session_id"]
        seen: list[tuple[str, Any]] = []

        async with http.stream("GET", f"/v1/sessions/{sid}/events") as stream:
            events = sse_events(stream)
            assert await anext(events) == (
                "state",
                json.dumps({"session_id": sid, "state": "undefined"}),
            )
            await http.post(
                f"/v1/sessions/{sid}/calls",
                json={"name": "add-to-cart", "arguments": {"action": "add", "item": "hat"}},
            )
            await http.delete(f"/v1/sessions/{sid}")
            async for event, data in events:
                seen.append((event, json.loads(data)))
    assert [e for e, _ in seen] == ["call", "closed"]
    assert seen[0][1]["transition"]["to"] == "shopping"
    assert served.gateway.open_streams == 0


@pytest.mark.parametrize("gateway_settings", [{"max-event-streams": 1}])
async def test_the_event_stream_limit_answers_429(served: RunningGateway) -> None:
    async with served.client("alice") as http:
        sid = (await http.post("/v1/sessions", json={})).json()["session_id"]
        async with http.stream("GET", f"/v1/sessions/{sid}/events") as first:
            await anext(sse_events(first))
            second = await http.get(f"/v1/sessions/{sid}/events")
            assert second.status_code == 429 and second.headers["retry-after"] == "5"


# ------------------------------------------------------------------ bad input


async def test_malformed_json_is_400_and_wrong_shapes_are_422(served: RunningGateway) -> None:
    async with served.client("alice") as http:
        broken = await http.post(
            "/v1/sessions", content=b'{"groups": [', headers={"content-type": "application/json"}
        )
        wrong = await http.post("/v1/sessions", json={"groups": "default"})
        extra = await http.post("/v1/sessions", json={"group": ["default"]})
        posing = await http.post("/v1/sessions", json={"user": "ops", "groups": ["*"]})
        after = await http.post("/v1/tools/echo/call", json={"arguments": {"text": "still here"}})
    assert broken.status_code == 400 and broken.json()["error"] == "bad-json"
    assert wrong.status_code == 422 and "groups" in wrong.json()["message"]
    assert extra.status_code == 422 and "group" in extra.json()["message"]
    assert posing.status_code == 422 and "user" in posing.json()["message"]
    assert after.json()["observation"] == "still here"


async def test_a_huge_body_is_413_whether_declared_or_streamed(served: RunningGateway) -> None:
    huge = b'{"arguments": {"text": "' + b"x" * 200_000 + b'"}}'
    async with served.client("alice") as http:
        declared = await http.post(
            "/v1/tools/echo/call", content=huge, headers={"content-type": "application/json"}
        )
    assert declared.status_code == 413
    assert "65536 bytes" in declared.json()["message"]

    # Chunked, with no Content-Length: refused once the count passes the limit.
    host, port = served.url.removeprefix("http://").split(":")
    async with await anyio.connect_tcp(host, int(port)) as stream:
        await stream.send(
            b"POST /v1/tools/echo/call HTTP/1.1\r\nHost: gateway\r\n"
            b"Authorization: Bearer " + KEYS["alice"].encode() + b"\r\n"
            b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        for start in range(0, 80_000, 16_000):
            piece = huge[start : start + 16_000]
            await stream.send(b"%x\r\n%s\r\n" % (len(piece), piece))
        answer = b""
        with anyio.fail_after(10):
            while b"body-too-large" not in answer:
                answer += await stream.receive()
    assert answer.startswith(b"HTTP/1.1 413 ")

    async with served.client("alice") as http:
        after = await http.post("/v1/tools/echo/call", json={"arguments": {"text": "ok"}})
    assert after.status_code == 200


# ------------------------------------------------------------------ the rest


async def test_the_openapi_document_describes_the_api(served: RunningGateway) -> None:
    async with served.client() as http:
        document = (await http.get("/openapi.json")).json()
    paths = document["paths"]
    for path in (
        "/v1/tools", "/v1/tools/{name}/call", "/v1/tools/{name}/stream", "/v1/sessions",
        "/v1/sessions/{session_id}", "/v1/sessions/{session_id}/calls",
        "/v1/sessions/{session_id}/events", "/v1/services", "/healthz", "/readyz", "/metrics",
    ):  # fmt: skip
        assert path in paths, path
    assert "/console" not in paths
    assert document["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    assert {"bearer": []} in paths["/v1/tools"]["get"]["security"]


async def test_health_readiness_and_metrics(served: RunningGateway) -> None:
    async with served.client() as http:
        health = await http.get("/healthz")
        ready = await http.get("/readyz")
        text = (await http.get("/metrics")).text
    assert health.json()["status"] == "ok"
    assert ready.status_code == 200
    assert ready.json()["checks"]["broker"] == "connected"
    assert ready.json()["checks"]["config"].startswith("loaded (file): 7 tools")
    assert "toolbus_gateway_sessions_open 0.0" in text
    assert (
        metric(text, "toolbus_gateway_http_requests_total", {"route": "/readyz", "status": "200"})
        == 1
    )


async def test_services_list_the_announced_ones(served: RunningGateway, broker_url: str) -> None:
    from toolbus import Announcer
    from toolbus.plugins import connect
    from toolbus.testing.conformance import echo_service

    service = echo_service()
    bus = await connect(broker_url)
    try:
        async with served.gateway.console.subscribe() as changes:
            await Announcer(bus, service).announce()
            with anyio.fail_after(10):
                assert (await changes.receive()).name == "services"
        async with served.client("alice") as http:
            body = (await http.get("/v1/services")).json()
    finally:
        await bus.close()
    live = {s["service"]: s for s in body["live"]}
    assert service.id in live
    assert live[service.id]["replicas"] and live[service.id]["age_seconds"] < 60
    assert len(body["configured"]) == 3
