"""Announcement messages, derived tools, and the table of live announcements (pure)."""

from __future__ import annotations

import json

import pytest

from tests.live.support import FakeClock, echo
from toolbus.domain.config.loading import load_registry
from toolbus.domain.live import announcements as messages
from toolbus.domain.live.announcements import (
    MIN_TTL,
    Announcement,
    AnnouncementTable,
    Probe,
    Withdrawal,
    derived_tool,
    tools_of,
)


def heard(instance: str = "i1", ttl: float = 30.0, description: str = "d") -> Announcement:
    return Announcement(
        "echo",
        instance,
        {"request-queue": "q-req", "response-queue": "q-resp"},
        {
            "echo": {
                "type": "tool-service",
                "service": "echo",
                "name": "echo",
                "description": description,
            }
        },
        ttl,
    )


@pytest.mark.parametrize("message", [heard(), Withdrawal("echo", "i1"), Probe()])
def test_messages_round_trip(message: messages.Message) -> None:
    assert messages.decode(messages.encode(message)) == message


def test_an_announcement_is_a_small_json_document() -> None:
    document = json.loads(messages.encode(heard()))
    assert document["kind"] == "announce"
    assert document["tool-service"] == {
        "echo": {"request-queue": "q-req", "response-queue": "q-resp"}
    }
    assert list(document["tool"]) == ["echo"]


@pytest.mark.parametrize(
    ("body", "complaint"),
    [
        (b"nope", "not a JSON message"),
        (b"[1]", "not a JSON object"),
        (b'{"kind": "shout"}', "unknown kind"),
        (b'{"kind": "withdraw", "service": ""}', "'service' must be"),
        (b'{"kind": "withdraw", "service": "s"}', "'instance' must be"),
        (b'{"kind": "announce", "service": "s", "instance": "i", "tool-service": {}}', "exactly"),
        (
            b'{"kind": "announce", "service": "s", "instance": "i", "tool-service": {"s": {}},'
            b' "tool": {"t": 1}}',
            "must map keys to objects",
        ),
    ],
)
def test_bad_messages_are_refused_with_a_reason(body: bytes, complaint: str) -> None:
    with pytest.raises(ValueError, match=complaint):
        messages.decode(body)


def test_a_missing_or_silly_ttl_is_replaced() -> None:
    body = json.loads(messages.encode(heard()))
    del body["ttl"]
    decoded = messages.decode(json.dumps(body).encode(), default_ttl=12.0)
    assert isinstance(decoded, Announcement)
    assert decoded.ttl == 12.0
    body["ttl"] = 0
    decoded = messages.decode(json.dumps(body).encode())
    assert isinstance(decoded, Announcement)
    assert decoded.ttl == MIN_TTL


def test_a_typed_service_gets_a_tool_derived_from_its_signature() -> None:
    tool = derived_tool(echo.id, echo.__doc__, echo.arguments_schema)

    assert tool["name"] == "echo"
    assert tool["description"] == "Say the text back."
    assert tool["arguments"] == [
        {"name": "text", "type": "string", "description": "Text"},
        {
            "name": "times",
            "type": "integer",
            "description": "Times",
            "required": False,
            "default": 1,
        },
    ]
    load_registry({"tool-service": {"echo": echo.descriptor()}, "tool": {"echo": tool}})


def test_a_derived_tool_takes_undeclared_arguments_only_where_its_service_reads_them() -> None:
    typed = derived_tool(echo.id, echo.__doc__, echo.arguments_schema)
    untyped = derived_tool("raw", "Reads any arguments.", None)
    schema = {"properties": {"q": {"type": "string"}}}
    opened = derived_tool("mcp", None, {**schema, "additionalProperties": True})
    closed = derived_tool("mcp", None, {**schema, "additionalProperties": False})
    silent = derived_tool("mcp", None, {"type": "object", "properties": {}})

    assert "additional-arguments" not in typed  # the signature says what it reads
    assert untyped["additional-arguments"] is True and "arguments" not in untyped
    assert opened["additional-arguments"] is True
    assert "additional-arguments" not in closed and "additional-arguments" not in silent


def test_optional_and_nested_arguments_get_usable_types() -> None:
    schema = {
        "properties": {
            "maybe": {"anyOf": [{"type": "null"}, {"type": "number"}], "title": "Maybe"},
            "model": {"$ref": "#/$defs/Model"},
            "odd": {},
        },
        "required": ["model"],
    }
    arguments = derived_tool("s", None, schema)["arguments"]
    assert [(a["name"], a["type"]) for a in arguments] == [
        ("maybe", "number"),
        ("model", "object"),
        ("odd", "string"),
    ]
    assert derived_tool("s", None, None)["description"] == "Call the s tool service"


def test_tools_of_a_service_come_from_a_snapshot() -> None:
    snapshot = {"tool": {"a": {"service": "x"}, "b": {"service": "y"}, "c": "text"}}
    assert tools_of("x", snapshot) == {"a": {"service": "x"}}
    assert tools_of("x", {}) == {}


def test_an_announcement_lives_for_its_ttl_and_heartbeats_renew_it() -> None:
    clock = FakeClock()
    table = AnnouncementTable()

    assert table.receive(heard(ttl=30), clock())  # new: a change
    clock.advance(20)
    assert not table.receive(heard(ttl=30), clock())  # a heartbeat: no change
    clock.advance(20)
    assert table.expire(clock()) == []  # renewed 20 s ago
    assert table.next_expiry() == clock() + 10
    clock.advance(10)
    assert table.expire(clock()) == ["echo"]
    assert table.current() == ()
    assert table.next_expiry() is None


def test_a_changed_announcement_is_a_change() -> None:
    table = AnnouncementTable()
    table.receive(heard(), 0)
    assert table.receive(heard(description="new"), 1)
    (current,) = table.current()
    assert current.tools["echo"]["description"] == "new"


def test_replicas_keep_a_service_alive_until_the_last_one_goes() -> None:
    table = AnnouncementTable()
    table.receive(heard("a", ttl=10), 0)
    table.receive(heard("b", ttl=100), 0)

    assert table.instances("echo") == ["a", "b"]
    assert table.expire(50) == []  # a expired, b still there: nothing offered changed
    assert not table.withdraw(Withdrawal("echo", "zzz"))  # unknown instance
    assert table.withdraw(Withdrawal("echo", "b"))
    assert table.services() == []
    assert len(table) == 0


def test_the_latest_replica_describes_the_service() -> None:
    table = AnnouncementTable()
    table.receive(heard("old", description="v1"), 0)
    table.receive(heard("new", description="v2"), 1)
    assert table.current()[0].tools["echo"]["description"] == "v2"
    # The newer replica goes: the service is described by the older one again.
    assert table.withdraw(Withdrawal("echo", "new"))
    assert table.current()[0].tools["echo"]["description"] == "v1"


def test_messages_describe_themselves_for_logs() -> None:
    assert messages.describe([heard()]) == "echo (echo)"
