"""The cases every door must pass: :class:`DoorConformance`."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack
from typing import Any

import anyio

try:
    import pytest
except ImportError as exc:  # the core does not depend on pytest; the extra does
    raise ImportError(
        "the front-door conformance suite needs pytest: pip install 'toolbus[testing]'"
    ) from exc

from toolbus.application.agent.audit import AuditRecord
from toolbus.application.calls.host import running
from toolbus.plugins import connect
from toolbus.testing.doors.deployment import (
    APPROVAL_TIMEOUT,
    CARD,
    CONFIG,
    DENY_REASON,
    MAX_PER_USER,
    POLICIES,
    POLICY_REASON,
    REDACTED,
    DoorSetup,
    ShopService,
    install_plugin,
    policy_engine_installed,
    toolbus_toml,
)
from toolbus.testing.doors.drivers import DoorAnswer, DoorCaller, DoorDriver, Occupied, normalized


def _audited(records: Sequence[AuditRecord], predicate: Any) -> bool:
    return any(predicate(record) for record in records)


async def eventually_audited(
    door: DoorDriver, user: str, predicate: Any, timeout: float = 10.0
) -> list[AuditRecord]:
    """The user's records once one matches ``predicate`` (doors write them as sessions end)."""
    with anyio.move_on_after(timeout):
        while True:
            records = door.audit(user)
            if _audited(records, predicate):
                return records
            # A door in another process writes the file when its session ends.
            await anyio.sleep(0.05)
    records = door.audit(user)
    raise AssertionError(f"{door.name}: no matching audit record for {user!r}; found {records}")


@pytest.mark.anyio
class DoorConformance:
    """Every front door's promises (docs/access-control.md), case by case.

    Bind it by subclassing and providing a class-scoped ``door`` fixture (a
    :class:`DoorDriver` over the door's real transport, built from
    ``door_setup``) and a class-scoped ``door_broker`` (a broker URL the door's
    process can reach).
    """

    @pytest.fixture(scope="class")
    @classmethod
    def door_broker(cls) -> str:
        raise NotImplementedError("bind the suite by overriding the 'door_broker' fixture")

    @pytest.fixture(scope="class")
    @classmethod
    async def door_setup(
        cls, door_broker: str, tmp_path_factory: pytest.TempPathFactory
    ) -> AsyncIterator[DoorSetup]:
        directory = tmp_path_factory.mktemp("door")
        site = directory / "site"
        install_plugin(site)
        (directory / "toolbus.toml").write_text(toolbus_toml(door_broker), encoding="utf-8")
        (directory / "config.json").write_text(json.dumps(CONFIG, indent=2), encoding="utf-8")
        (directory / "calls.cedar").write_text(POLICIES, encoding="utf-8")
        shop = ShopService()
        async with AsyncExitStack() as stack:
            bus = await connect(door_broker)
            stack.push_async_callback(bus.close)
            await stack.enter_async_context(running(bus, shop.service))
            stack.callback(shop.release)
            yield DoorSetup(directory, site, door_broker, shop)

    @pytest.fixture(scope="class")
    @classmethod
    def door(cls, door_setup: DoorSetup) -> DoorDriver:
        raise NotImplementedError("bind the suite by overriding the 'door' fixture")

    # ------------------------------------------------------------------ escalation

    async def test_asking_for_every_group_with_a_wildcard_is_denied_and_audited(
        self, door: DoorDriver, door_setup: DoorSetup
    ) -> None:
        caller = DoorCaller("alice", ("*",))
        listed = await door.tools(caller)
        called = await door.call(caller, "admin-reset")

        assert listed.outcome == "denied", f"{door.name} listed {listed.tools} for '*'"
        assert called.outcome == "denied", f"{door.name} answered {called}"
        assert door_setup.shop.reached("alice") == 0
        await eventually_audited(
            door, "alice", lambda r: r.access_denied is not None and r.access_denied.wildcard
        )

    async def test_asking_for_a_group_beyond_the_permissions_is_denied_and_audited(
        self, door: DoorDriver, door_setup: DoorSetup
    ) -> None:
        caller = DoorCaller("alice", ("default", "admin"))
        listed = await door.tools(caller)
        called = await door.call(caller, "admin-reset")

        assert listed.outcome == "denied", f"{door.name} listed {listed.tools}"
        assert called.outcome == "denied", f"{door.name} answered {called}"
        assert door_setup.shop.reached("alice", "reset") == 0
        await eventually_audited(
            door,
            "alice",
            lambda r: r.access_denied is not None and "admin" in r.access_denied.denied_groups,
        )

    async def test_the_permitted_groups_list_only_their_tools(self, door: DoorDriver) -> None:
        mine = await door.tools(DoorCaller("alice"))
        operator = await door.tools(DoorCaller("ops", ("*",)))

        assert mine.outcome == "ok", mine
        assert set(mine.tools) == {
            "lookup",
            "delete-account",
            "add-to-cart",
            "hold",
            "refund",
            "restock",
        }
        assert operator.outcome == "ok", operator
        assert "admin-reset" in operator.tools

    # ------------------------------------------------------------------ code hooks

    async def test_a_code_hook_deny_holds_and_the_refusal_is_audited(
        self, door: DoorDriver, door_setup: DoorSetup
    ) -> None:
        refused = await door.call(DoorCaller("bob"), "delete-account")
        allowed = await door.call(DoorCaller("ops"), "delete-account")

        assert refused.outcome == "refused", f"{door.name} answered {refused}"
        assert DENY_REASON in refused.text
        assert door_setup.shop.reached("bob", "delete") == 0
        assert allowed.outcome == "ok", allowed
        await eventually_audited(door, "bob", lambda r: any(c.refusal == "hook" for c in r.calls))

    async def test_a_post_use_hook_redacts_every_answer(self, door: DoorDriver) -> None:
        called = await door.call(DoorCaller("bob"), "lookup")
        streamed = await door.stream(DoorCaller("bob"), "lookup")

        assert called.outcome == "ok", called
        assert CARD not in called.wire and REDACTED in called.text
        if streamed is not None:
            assert streamed.outcome == "ok", streamed
            assert CARD not in streamed.wire and REDACTED in streamed.text

    # ------------------------------------------------------------------ call policy, approvals

    async def test_the_call_policy_decides_on_the_arguments_and_is_audited(
        self, door: DoorDriver, door_setup: DoorSetup
    ) -> None:
        if not policy_engine_installed():
            pytest.skip("no policy engine installed: pip install 'toolbus[policy]'")
        refused = await door.call(DoorCaller("heidi"), "lookup", {"item": "vault"})
        allowed = await door.call(DoorCaller("heidi"), "lookup", {"item": "socks"})

        assert refused.outcome == "refused", f"{door.name} answered {refused}"
        assert POLICY_REASON in refused.text
        assert allowed.outcome == "ok", allowed
        assert door_setup.shop.reached("heidi", "lookup") == 1
        await eventually_audited(
            door, "heidi", lambda r: any(c.refusal == "policy" for c in r.calls)
        )

    async def test_a_decision_holds_only_for_values_of_the_same_json_type(
        self, door: DoorDriver, door_setup: DoorSetup
    ) -> None:
        if not policy_engine_installed():
            pytest.skip("no policy engine installed: pip install 'toolbus[policy]'")
        caller = DoorCaller("judy")
        rehearsed = await door.call(caller, "restock", {"item": "tea", "dry_run": True})
        # Equal to true in Python, but a number, not a Boolean: not what was allowed.
        as_integer = await door.call(caller, "restock", {"item": "tea", "dry_run": 1})
        as_float = await door.call(caller, "restock", {"item": "tea", "dry_run": 1.0})

        assert rehearsed.outcome == "ok", rehearsed
        # Refused by the policy, or by a door that checks types first (MCP's input schema).
        assert as_integer.outcome != "ok", f"{door.name} answered {as_integer}"
        assert as_float.outcome != "ok", f"{door.name} answered {as_float}"
        assert door_setup.shop.reached("judy", "restock") == 1

    async def test_an_argument_the_tool_does_not_declare_is_refused_by_name(
        self, door: DoorDriver, door_setup: DoorSetup
    ) -> None:
        called = await door.call(
            DoorCaller("ken"), "lookup", {"item": "socks", "vault_code": "1234"}
        )
        streamed = await door.stream(DoorCaller("ken"), "lookup", {"vault_code": "1234"})

        assert called.outcome == "error", f"{door.name} answered {called}"
        assert "vault_code" in called.text
        if streamed is not None:
            assert streamed.outcome == "error", streamed
            assert "vault_code" in streamed.text
        assert door_setup.shop.reached("ken") == 0

    async def test_a_call_nobody_approves_is_not_made_and_expires_audited(
        self, door: DoorDriver, door_setup: DoorSetup
    ) -> None:
        answered = await door.call(DoorCaller("ivan"), "refund")

        assert answered.outcome == "refused", f"{door.name} answered {answered}"
        assert door_setup.shop.reached("ivan", "refund") == 0
        await eventually_audited(
            door,
            "ivan",
            lambda r: any(
                c.approval is not None and c.approval.status == "expired" for c in r.calls
            ),
            timeout=APPROVAL_TIMEOUT + 10,
        )

    async def test_a_stream_goes_through_the_session(
        self, door: DoorDriver, door_setup: DoorSetup
    ) -> None:
        refused = await door.stream(DoorCaller("bob"), "delete-account")
        if refused is None:
            pytest.skip(f"{door.name} has no streams")
        escalated = await door.stream(DoorCaller("bob", ("*",)), "admin-reset")

        assert refused.outcome == "refused", refused
        assert door_setup.shop.reached("bob", "delete") == 0
        assert escalated is not None and escalated.outcome == "denied", escalated

    # ------------------------------------------------------------------ refusals that do not reveal

    async def test_a_forbidden_tool_answers_exactly_as_an_unknown_one(
        self, door: DoorDriver, door_setup: DoorSetup
    ) -> None:
        forbidden = await door.call(DoorCaller("carol"), "admin-reset")
        unknown = await door.call(DoorCaller("carol"), "no-such-tool")

        assert forbidden.outcome == unknown.outcome == "refused", (forbidden, unknown)
        assert normalized(forbidden.wire, "admin-reset") == normalized(unknown.wire, "no-such-tool")
        # Neither reached a service: they take the same (short) time.
        assert door_setup.shop.reached("carol") == 0
        records = await eventually_audited(
            door, "carol", lambda r: any(c.refusal == "unknown" for c in r.calls)
        )
        refusals = {c.refusal for r in records for c in r.calls}
        assert {"group", "unknown"} <= refusals, f"the audit must keep the difference: {records}"

    # ------------------------------------------------------------------ state is earned

    async def test_a_state_that_is_not_an_entry_state_is_refused_and_audited(
        self, door: DoorDriver, door_setup: DoorSetup
    ) -> None:
        jumped = await door.call(DoorCaller("dave", state="shopping"), "checkout")

        assert jumped.outcome == "denied", f"{door.name} let a caller start in 'shopping': {jumped}"
        assert door_setup.shop.reached("dave", "checkout") == 0
        await eventually_audited(
            door,
            "dave",
            lambda r: r.access_denied is not None and r.initial_state == "shopping",
        )

    async def test_an_entry_state_may_be_asked_for(self, door: DoorDriver) -> None:
        browsing = await door.call(DoorCaller("dave", state="browsing"), "browse")

        assert browsing.outcome == "ok", browsing

    async def test_a_held_session_keeps_the_state_it_earned(self, door: DoorDriver) -> None:
        session = await door.session(DoorCaller("dave"))
        assert not isinstance(session, DoorAnswer), session
        try:
            early = await session.call("checkout")
            added = await session.call("add-to-cart", {"item": "tea"})
            checked_out = await session.call("checkout")
        finally:
            await session.close()

        assert early.outcome == "refused", early
        assert added.outcome == "ok", added
        assert checked_out.outcome == "ok", f"{door.name} lost the earned state: {checked_out}"

    # ------------------------------------------------------------------ per-user limits

    async def test_per_user_limits_refuse_without_evicting_anyone(self, door: DoorDriver) -> None:
        places: list[Occupied] = []
        try:
            for _ in range(MAX_PER_USER):
                taken = await door.occupy(DoorCaller("erin"))
                assert isinstance(taken, Occupied), f"{door.name} refused a place early: {taken}"
                places.append(taken)
            over = await door.occupy(DoorCaller("erin"))
            if isinstance(over, Occupied):
                places.append(over)
            other = await door.occupy(DoorCaller("frank"))
            if isinstance(other, Occupied):
                places.append(other)

            assert isinstance(over, DoorAnswer) and over.outcome == "limited", (
                f"{door.name} gave erin place {MAX_PER_USER + 1}: {over}"
            )
            assert isinstance(other, Occupied), f"{door.name} refused frank: {other}"
            for place in places:
                assert await place.alive(), f"{door.name} evicted a place"
        finally:
            # Newest first: a place may hold a connection opened after the others.
            for place in reversed(places):
                await place.release()

    # ------------------------------------------------------------------ every refusal is audited

    async def test_every_refusal_is_audited_with_its_reason(
        self, door: DoorDriver, door_setup: DoorSetup
    ) -> None:
        caller = DoorCaller("grace")
        await door.call(caller, "admin-reset")  # outside the groups
        await door.call(caller, "checkout")  # not offered in this state
        await door.call(caller, "nothing-like-it")  # unknown
        await door.call(caller, "delete-account")  # a code hook says no

        records = await eventually_audited(
            door,
            "grace",
            lambda r: (
                {"group", "state", "unknown", "hook"}
                <= {c.refusal for record in door.audit("grace") for c in record.calls}
            ),
        )
        assert door_setup.shop.reached("grace") == 0, records
