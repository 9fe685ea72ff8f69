"""The front door in one process: where permissions come from, held sessions, limits.

The conformance suite (test_doors.py) holds every door to the same promises
through its transport; these tests pin down the composition underneath, on
the in-memory bus with the tool-group spec's workflow tools served for real.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest

from tests.session.support import SERVICES, workflow_snapshot
from toolbus.application.agent.audit import ListAuditSink
from toolbus.application.agent.held import HeldSession
from toolbus.application.calls.metrics import ToolbusMetrics
from toolbus.application.calls.tools import Tools
from toolbus.application.doors.door import AccessControlOff, FrontDoor
from toolbus.application.doors.holding import Held, HeldKey, InProcessHolder
from toolbus.application.doors.keeping import SESSION
from toolbus.application.doors.settings import parse_door_settings
from toolbus.application.identity import generate_key, public_jwk
from toolbus.application.identity.documents import (
    PERMISSIONS_PURPOSE,
    DocumentVerifier,
    sign_document,
)
from toolbus.domain.config.loading import load_registry
from toolbus.domain.errors import (
    AccessDenied,
    ConfigError,
    LimitReached,
    StateRefused,
    Unauthorized,
)
from toolbus.testing.kit import ToolTestKit

pytestmark = pytest.mark.anyio

LOCAL = {"users": {"carol": ["read-only", "knowledge"], "ops": ["*"]}, "fallback": []}


@pytest.fixture
async def kit() -> AsyncIterator[ToolTestKit]:
    async with AsyncExitStack() as stack:
        kit = await ToolTestKit.open(stack)
        await kit.serve(*SERVICES)
        yield kit


def door_for(
    tools: Tools,
    *,
    settings: dict[str, Any] | None = None,
    local: dict[str, Any] | None = None,
    audit: ListAuditSink | None = None,
    **options: Any,
) -> FrontDoor:
    return FrontDoor.from_files(
        tools,
        local=local,
        settings=settings,
        audit=audit if audit is not None else ListAuditSink(),
        metrics=ToolbusMetrics.disabled(),
        **options,
    )


# ------------------------------------------------------------------ where permissions come from


async def test_permissions_come_from_toolbus_toml(kit: ToolTestKit) -> None:
    tools = kit.tools(load_registry(workflow_snapshot()))
    audit = ListAuditSink()
    door = door_for(tools, settings={"permissions": LOCAL}, audit=audit)

    with pytest.raises(AccessDenied):
        door.open("carol", ["*"])
    async with door.open("carol", ["read-only"]) as session:
        outcome = await session.call("knowledge-query", {"question": "who?"})

    assert outcome.ok
    assert [r.outcome for r in audit.records] == ["denied", "completed"]


async def test_a_permissions_section_on_the_bus_is_ignored_without_the_opt_in(
    kit: ToolTestKit, caplog: pytest.LogCaptureFixture
) -> None:
    local = workflow_snapshot(permissions=LOCAL)
    tools = kit.tools(load_registry(local))
    door = door_for(tools, local=local)
    # What any publisher may put: every user gets every group.
    tools.registry = load_registry(workflow_snapshot(permissions={"fallback": ["*"]}))

    with caplog.at_level(logging.WARNING, "toolbus.doors"), pytest.raises(AccessDenied):
        door.open("mallory", ["*"])
    door.open("carol", ["read-only"])

    assert "permissions section on the bus is ignored" in caplog.text


async def test_signed_live_permissions_are_taken_from_the_operator_key_only(
    kit: ToolTestKit, tmp_path: Path
) -> None:
    operator = generate_key("Ed25519", kid="operator-1")
    stranger = generate_key("Ed25519", kid="operator-1")  # the same kid, another key
    (tmp_path / "operator.pub.jwk").write_text(json.dumps(public_jwk(operator)))
    local = workflow_snapshot(permissions=LOCAL)
    tools = kit.tools(load_registry(local))
    opted_in = {"doors": {"live-permissions": ["operator.pub.jwk"]}}
    door = door_for(tools, local=local, settings=opted_in, base_dir=tmp_path)

    def put(section: dict[str, Any]) -> None:
        tools.registry = load_registry(workflow_snapshot(permissions=section))

    dave = {"users": {"dave": ["read-only"]}, "fallback": []}
    put({"signed": sign_document(dave, stranger, purpose=PERMISSIONS_PURPOSE)})
    with pytest.raises(AccessDenied):
        door.open("dave", ["read-only"])  # not the operator's: the local ones apply

    put({"signed": sign_document(dave, operator, purpose="something-else")})
    with pytest.raises(AccessDenied):
        door.open("dave", ["read-only"])  # signed, but not as permissions

    put({"signed": sign_document(dave, operator, purpose=PERMISSIONS_PURPOSE, issued_at=200)})
    door.open("dave", ["read-only"])
    with pytest.raises(AccessDenied):
        door.open("carol", ["read-only"])  # the signed section replaced the local one

    older = {"users": {"carol": ["*"]}, "fallback": []}
    put({"signed": sign_document(older, operator, purpose=PERMISSIONS_PURPOSE, issued_at=100)})
    with pytest.raises(AccessDenied):
        door.open("carol", ["*"])  # an older signed section put back changes nothing
    door.open("dave", ["read-only"])


def test_a_signed_document_verifies_only_untouched() -> None:
    key = generate_key("Ed25519", kid="op")
    token = sign_document({"fallback": []}, key, purpose=PERMISSIONS_PURPOSE, issued_at=5)
    verifier = DocumentVerifier([public_jwk(key)])

    signed = verifier.verify(token, purpose=PERMISSIONS_PURPOSE)
    header, payload, signature = token.split(".")
    tampered = ".".join([header, payload[:-4] + "AAAA", signature])

    assert (signed.document, signed.key_id, signed.issued_at) == ({"fallback": []}, "op", 5.0)
    with pytest.raises(Unauthorized):
        verifier.verify(tampered, purpose=PERMISSIONS_PURPOSE)
    with pytest.raises(Unauthorized, match="a JWS compact string"):
        verifier.verify({"fallback": ["*"]}, purpose=PERMISSIONS_PURPOSE)


async def test_a_door_for_network_callers_needs_access_control(kit: ToolTestKit) -> None:
    tools = kit.tools(load_registry(workflow_snapshot()))
    door = door_for(tools)

    with pytest.raises(AccessControlOff, match="--no-access-control"):
        door.require_access_control("the test door", allow_off=False)
    warning = door.require_access_control("the test door", allow_off=True)
    configured = door_for(tools, settings={"permissions": {}})

    assert warning is not None and "access control is OFF" in warning
    assert configured.require_access_control("the test door", allow_off=False) is None


async def test_configured_hooks_of_toolbus_toml_run_at_the_door(kit: ToolTestKit) -> None:
    tools = kit.tools(load_registry(workflow_snapshot()))
    hook = {
        "kind": "tool_call",
        "event": "on_request_start",
        "tool_name": "text-completion",
        "arguments": {"prompt": "the day"},
    }
    door = door_for(tools, settings={"permissions": LOCAL, "hooks": [hook]})

    session = door.open("carol", ["read-only"])
    history = await session.start([{"role": "user", "content": "hello"}])

    assert [m["role"] for m in history] == ["user", "assistant", "tool"]
    assert history[2]["content"] == "[carol] Once upon a time, the day"


# ------------------------------------------------------------------ state is earned


async def test_a_state_is_asked_for_only_when_it_is_an_entry_state(kit: ToolTestKit) -> None:
    tools = kit.tools(load_registry(workflow_snapshot()))
    audit = ListAuditSink()
    settings = {"permissions": LOCAL, "doors": {"entry-states": ["undefined", "research"]}}
    door = door_for(tools, settings=settings, audit=audit)

    with pytest.raises(StateRefused) as refused:
        door.open("carol", ["read-only"], "analysis")
    door.open("carol", ["read-only"], "research")

    assert "entry states are 'research', 'undefined'" in str(refused.value)
    [record] = audit.records
    assert record.outcome == "denied" and record.initial_state == "analysis"
    assert record.access_denied is not None and record.access_denied.state == "analysis"


async def test_a_held_session_is_plain_data_another_door_resumes(kit: ToolTestKit) -> None:
    snapshot = workflow_snapshot(permissions=LOCAL)
    first = door_for(kit.tools(load_registry(snapshot)), local=snapshot)
    second_audit = ListAuditSink()
    second = door_for(kit.tools(load_registry(snapshot)), local=snapshot, audit=second_audit)

    session = first.open("carol", ["read-only", "knowledge"], counted=False)
    await session.call("knowledge-query", {"question": "who?"}, "c1")
    stored = HeldSession.from_json(session.held().to_json())  # as a store would keep it
    resumed = second.resumed(stored)
    outcome = await resumed.call("graph-update", {"entity": "x", "operation": "add"}, "c2")
    await resumed.close()

    assert stored == session.held()
    assert outcome.ok, outcome.observation
    [record] = second_audit.records
    assert [c.tool_call_id for c in record.calls] == ["c1", "c2"]
    assert [(t.from_state, t.to_state) for t in record.state_transitions] == [
        ("undefined", "analysis")
    ]


# ------------------------------------------------------------------ holding and limits


async def test_the_holder_compares_and_sets_and_forgets_after_the_time_to_live() -> None:
    now = [0.0]
    holder = InProcessHolder(lambda: now[0])
    data = HeldSession("r", "carol", None, ("default",), "undefined", "undefined", 0.0)
    held = Held(HeldKey("carol", SESSION, "r"), data, 0.0)

    assert await holder.put(held, ttl=10)
    assert not await holder.put(held, ttl=10)  # the key is taken
    moved = Held(held.key, data, 1.0, version=1)
    assert await holder.swap(moved, ttl=10)
    assert not await holder.swap(moved, ttl=10)  # a second writer of version 1 loses
    assert [h.key for h in await holder.owned("carol", SESSION)] == [held.key]
    assert await holder.owned("dave", SESSION) == []
    now[0] = 11.0
    assert await holder.get(held.key) is None
    assert [h.version for h in await holder.expired()] == [1]


async def test_held_sessions_are_limited_per_user_and_nobody_is_evicted(
    kit: ToolTestKit,
) -> None:
    tools = kit.tools(load_registry(workflow_snapshot()))
    settings = {"permissions": LOCAL, "doors": {"max-sessions-per-user": 2}}
    door = door_for(tools, settings=settings)

    for _ in range(2):
        await door.held.hold(door.open("carol", ["read-only"], counted=False), SESSION)
    with pytest.raises(LimitReached) as refused:
        await door.held.hold(door.open("carol", ["read-only"], counted=False), SESSION)
    await door.held.hold(door.open("ops", ["*"], counted=False), SESSION)

    assert refused.value.kind == "sessions" and refused.value.retry_after >= 1
    assert len(await door.held.owned("carol", SESSION)) == 2


async def test_open_sessions_take_a_place_until_they_close(kit: ToolTestKit) -> None:
    tools = kit.tools(load_registry(workflow_snapshot()))
    door = door_for(tools, settings={"doors": {"max-sessions-per-user": 1}})

    first = door.open("carol")
    with pytest.raises(LimitReached, match="too many sessions"):
        door.open("carol")
    other = door.open("dave")
    await first.close()
    again = door.open("carol")

    assert not again.closed and not other.closed


def test_door_settings_name_every_problem() -> None:
    with pytest.raises(ConfigError) as error:
        parse_door_settings({"max-sesions-per-user": 3, "entry-states": "undefined"})
    text = str(error.value)
    assert "max-sesions-per-user" in text and "entry-states" in text
