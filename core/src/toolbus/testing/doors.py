"""The front-door conformance suite: one set of cases every door must pass.

A *front door* is how a caller outside the bus reaches its tools: the HTTP
gateway, ``toolbus mcp serve`` (stdio and HTTP), the agent service asked with
``toolbus ask``, ``open_tools`` in Python. Every door promises the same
(docs/access-control.md): a caller sees and runs only what its user, groups
and state allow; code hooks and configured hooks run on every call; a refusal
tells the caller no more than "not available to you", and is audited.

The cases are written once against a small driver interface
(:class:`DoorDriver`) and bound to each door through its real transport, as
:class:`~toolbus.testing.conformance.BusConformance` is bound to each broker::

    class TestMyDoor(DoorConformance):
        @pytest.fixture(scope="class")
        async def door(self, door_setup):
            async with my_driver(door_setup) as driver:
                yield driver

What every door is given (:class:`DoorSetup`): a directory holding
``toolbus.toml`` (permissions, per-user limits, entry states, an audit file,
API keys read from environment variables) and ``config.json`` (the tools);
a ``site`` directory holding a tool plugin with two code hooks (a ``Deny`` for
``delete-account`` unless the user is ``ops``, and a post-use hook redacting
card numbers), to put on ``PYTHONPATH``; the broker, where the suite serves
the tools' service itself, so that it sees every call that reaches it.

The suite is pytest tests: install it with ``pip install 'toolbus[testing]'``.
"""

from __future__ import annotations

import importlib.util
import json
import re
import textwrap
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import anyio

try:
    import pytest
except ImportError as exc:  # the core does not depend on pytest; the extra does
    raise ImportError(
        "the front-door conformance suite needs pytest: pip install 'toolbus[testing]'"
    ) from exc

from toolbus.application.agent.audit import AuditRecord
from toolbus.application.calls.host import running
from toolbus.application.calls.service import ToolService, tool_service
from toolbus.plugins import connect

#: How a door answered, as the suite compares answers.
Outcome = Literal["ok", "refused", "denied", "limited", "error"]

#: The users of the suite's ``toolbus.toml``: each case uses its own, so that
#: cases never share a user's sessions, workflows or limits.
USERS = (
    "alice",
    "bob",
    "carol",
    "dave",
    "erin",
    "frank",
    "grace",
    "heidi",
    "ivan",
    "judy",
    "ken",
    "ops",
)
#: Groups each user may request; ``ops`` may request every group.
PERMITTED = {user: ["default"] for user in USERS if user != "ops"} | {"ops": ["*"]}
#: States a caller may ask to start in; any other is reached only through a held session.
ENTRY_STATES = ("undefined", "browsing")
#: Held sessions (gateway sessions, agent sessions) and MCP workflows per user.
MAX_PER_USER = 2
#: A card number the redaction hook must remove from every answer.
CARD = "4111-1111-1111-1111"
REDACTED = "[redacted]"
DENY_REASON = "Only administrators may delete accounts"
#: What the call policy's forbid says (with ``toolbus[policy]``).
POLICY_REASON = "Nobody may look up the vault"
#: Seconds a call of ``refund`` waits for an approver before it expires.
APPROVAL_TIMEOUT = 1
#: What the call policy says of a ``restock`` that is not a dry run.
REHEARSAL_REASON = "Restocking is rehearsed first"
#: The call policy every door reads, when Cedar is installed: all calls, but the
#: vault's, and restocking only as a dry run (``true``, a JSON Boolean).
POLICIES = f"""permit(principal, action == Action::"call", resource);

@reason("{POLICY_REASON}")
forbid(principal, action, resource)
when {{ context.arguments has item && context.arguments.item == "vault" }};

@reason("{REHEARSAL_REASON}")
forbid(principal, action, resource == Tool::"restock")
unless {{ context.arguments has dry_run && context.arguments.dry_run }};
"""

_SERVICE = "door-conformance-shop"
_REQUEST_QUEUE = "non-persistent://door-conformance/request/shop"
_RESPONSE_QUEUE = "non-persistent://door-conformance/response/shop"

PLUGIN_MODULE = "toolbus_door_conformance_hooks"
PLUGIN_SOURCE = f'''
"""Code hooks of the front-door conformance suite."""

import re

from toolbus.hooks import Deny, hookimpl

CARD = re.compile(r"\\b\\d{{4}}(?:-\\d{{4}}){{3}}\\b")


@hookimpl
def toolbus_on_pre_tool_use(session, tool):
    if tool.name == "delete-account" and session.user != "ops":
        return Deny({DENY_REASON!r})


@hookimpl
def toolbus_on_post_tool_use(outcome):
    return CARD.sub({REDACTED!r}, outcome.observation)
'''


def api_key(user: str) -> str:
    """The API key of ``user`` in the suite's ``toolbus.toml`` (test material, not a secret)."""
    return f"door-conformance-{user}-key-0123456789"


def key_variable(user: str) -> str:
    """The environment variable ``toolbus.toml`` reads ``user``'s API key from."""
    return f"DOOR_KEY_{user.upper()}"


def _tool(name: str, action: str, **extra: Any) -> dict[str, Any]:
    return {
        "type": "tool-service",
        "name": name,
        "description": f"The shop's {name} tool",
        "service": _SERVICE,
        "action": action,
        "arguments": [
            {"name": "item", "type": "string", "description": "An item", "required": False}
        ],
        **extra,
    }


#: The tools every door serves: one per case, all on one service.
CONFIG: dict[str, Any] = {
    "tool-service": {
        _SERVICE: {
            "id": _SERVICE,
            "request-queue": _REQUEST_QUEUE,
            "response-queue": _RESPONSE_QUEUE,
            "config-params": [{"name": "action", "required": True}],
        }
    },
    "tool": {
        "lookup": _tool("lookup", "lookup"),
        "delete-account": _tool("delete-account", "delete"),
        "admin-reset": _tool("admin-reset", "reset", group=["admin"]),
        "add-to-cart": _tool("add-to-cart", "add", state="shopping"),
        "checkout": _tool(
            "checkout", "checkout", state="done", **{"applicable-states": ["shopping"]}
        ),
        "browse": _tool("browse", "browse", **{"applicable-states": ["browsing"]}),
        "hold": _tool("hold", "hold"),
        # Needs approval ([approvals] tools); nobody gives it in time.
        "refund": _tool("refund", "refund"),
        "restock": _tool("restock", "restock")
        | {
            "arguments": [
                {"name": "item", "type": "string", "description": "An item"},
                {"name": "dry_run", "type": "boolean", "description": "Rehearse only"},
            ]
        },
    },
}


def policy_engine_installed() -> bool:
    """Whether Cedar (``toolbus[policy]``) is installed: the doors then read :data:`POLICIES`."""
    return importlib.util.find_spec("toolbus_cedar") is not None


def toolbus_toml(broker: str) -> str:
    """The operator's ``toolbus.toml`` every door reads: no secret in it, keys by variable."""
    users = "\n".join(f"{user} = {json.dumps(groups)}" for user, groups in PERMITTED.items())
    keys = "\n".join(
        f'[[credentials.api-keys]]\nuser = "{user}"\nenv = "{key_variable(user)}"\n'
        for user in USERS
    )
    return (
        textwrap.dedent(
            f"""\
        broker = {json.dumps(broker)}
        config = "config.json"

        [doors]
        entry-states = {json.dumps(list(ENTRY_STATES))}
        max-sessions-per-user = {MAX_PER_USER}
        max-workflows-per-user = {MAX_PER_USER}
        audit-file = "audit.jsonl"

        [approvals]
        approvers = ["ops"]
        tools = ["refund"]
        timeout = {APPROVAL_TIMEOUT}

        [permissions]
        fallback = []

        [permissions.users]
        """
        )
        + f"{users}\n\n{keys}"
        + ('\n[policy]\nfiles = ["calls.cedar"]\n' if policy_engine_installed() else "")
    )


class ShopService:
    """The one service behind every tool: counts the calls that reach it, by user and action.

    ``hold`` calls wait until :meth:`release` (a door's caller holding a session
    open while the suite checks the per-user limits).
    """

    def __init__(self) -> None:
        self.calls: Counter[tuple[str, str]] = Counter()
        self._released = anyio.Event()
        self._holding: dict[str, int] = {}
        self._arrived = anyio.Event()

        @tool_service(
            _SERVICE,
            request_queue=_REQUEST_QUEUE,
            response_queue=_RESPONSE_QUEUE,
            config_params=[{"name": "action", "required": True}],
        )
        async def shop(user: str, config: dict[str, Any], arguments: dict[str, Any]) -> str:
            action = str(config.get("action"))
            self.calls[(user, action)] += 1
            if action == "hold":
                self._holding[user] = self._holding.get(user, 0) + 1
                self._arrived.set()
                await self._released.wait()
                return f"held for {user}"
            if action == "lookup":
                return f"{user}: card {CARD} on file"
            return f"{action} done for {user}"

        self.service: ToolService = shop

    def reached(self, user: str, action: str | None = None) -> int:
        """Calls of ``user`` (of one ``action``) that reached the service."""
        return sum(
            n for (who, what), n in self.calls.items() if who == user and action in (None, what)
        )

    async def holding(self, user: str, count: int, timeout: float = 30.0) -> None:
        """Wait until ``count`` ``hold`` calls of ``user`` are waiting in the service."""
        with anyio.fail_after(timeout):
            while self._holding.get(user, 0) < count:
                self._arrived = anyio.Event()
                await self._arrived.wait()

    def release(self) -> None:
        """Let every waiting ``hold`` call answer, and later ones answer at once."""
        self._released.set()


@dataclass
class DoorSetup:
    """What every door of one test class is given; see the module docs."""

    directory: Path
    site: Path
    broker: str
    shop: ShopService

    @property
    def settings_file(self) -> Path:
        return self.directory / "toolbus.toml"

    @property
    def config_file(self) -> Path:
        return self.directory / "config.json"

    @property
    def audit_file(self) -> Path:
        return self.directory / "audit.jsonl"

    def environment(self) -> dict[str, str]:
        """Variables a door's process needs: the API keys, and the plugin on the path."""
        keys = {key_variable(user): api_key(user) for user in USERS}
        return {**keys, "PYTHONPATH": str(self.site)}

    def audit(self, user: str) -> list[AuditRecord]:
        """The audit records written so far for ``user``'s sessions."""
        if not self.audit_file.exists():
            return []
        records = []
        for line in self.audit_file.read_text(encoding="utf-8").splitlines():
            if line.strip():
                record = AuditRecord.model_validate_json(line)
                if record.user == user:
                    records.append(record)
        return records


@dataclass(frozen=True)
class Caller:
    """Who calls, with which groups (``None``: none named) and in which state (``None``: none)."""

    user: str
    groups: tuple[str, ...] | None = None
    state: str | None = None


@dataclass(frozen=True)
class Answer:
    """What a door answered, as the suite compares it.

    ``wire`` is the answer exactly as the caller received it (an HTTP status
    and body, an MCP result, an agent event), with the tool's name replaced by
    ``{tool}``: two refusals that must not be told apart have equal ``wire``.
    """

    outcome: Outcome
    text: str = ""
    wire: str = ""
    tools: tuple[str, ...] = ()


def normalized(wire: str, tool: str) -> str:
    """``wire`` with every mention of ``tool`` replaced by ``{tool}``."""
    return re.sub(re.escape(tool), "{tool}", wire)


class DoorSession(ABC):
    """A conversation a door holds for its caller: calls in it keep the state they reach."""

    @abstractmethod
    async def call(self, tool: str, arguments: Mapping[str, Any] | None = None) -> Answer: ...

    @abstractmethod
    async def close(self) -> None: ...


class Occupied(ABC):
    """One of a user's limited places at a door (a held session, a workflow, a request)."""

    @abstractmethod
    async def alive(self) -> bool:
        """Whether the place still works for its holder."""

    @abstractmethod
    async def release(self) -> None: ...


class DoorDriver(ABC):
    """What the suite needs of a door; bindings implement it over the door's real transport."""

    #: The door's name, for messages.
    name: str = "door"

    def __init__(self, setup: DoorSetup) -> None:
        self.setup = setup

    @abstractmethod
    async def tools(self, caller: Caller) -> Answer:
        """The tools offered to ``caller`` (``Answer.tools``), or the refusal."""

    @abstractmethod
    async def call(
        self, caller: Caller, tool: str, arguments: Mapping[str, Any] | None = None
    ) -> Answer:
        """Call ``tool`` once for ``caller``, outside any held session."""

    @abstractmethod
    async def session(self, caller: Caller) -> DoorSession | Answer:
        """Open a session the door holds for ``caller``, or the refusal."""

    async def occupy(self, caller: Caller) -> Occupied | Answer:
        """Take one of ``caller``'s limited places; by default, an open session."""
        opened = await self.session(caller)
        if isinstance(opened, Answer):
            return opened
        return _OpenSession(opened)

    async def stream(
        self, caller: Caller, tool: str, arguments: Mapping[str, Any] | None = None
    ) -> Answer | None:
        """Call ``tool``, its streamed answer joined; ``None`` if the door has no streams."""
        return None

    def audit(self, user: str) -> list[AuditRecord]:
        """The audit records of ``user``'s sessions at this door."""
        return self.setup.audit(user)


class _OpenSession(Occupied):
    def __init__(self, session: DoorSession) -> None:
        self._session = session

    async def alive(self) -> bool:
        answer = await self._session.call("lookup")
        return answer.outcome == "ok"

    async def release(self) -> None:
        await self._session.close()


def install_plugin(site: Path) -> None:
    """The suite's code hooks as an installed tool plugin on ``site`` (a path entry)."""
    site.mkdir(parents=True, exist_ok=True)
    (site / f"{PLUGIN_MODULE}.py").write_text(PLUGIN_SOURCE, encoding="utf-8")
    info = site / f"{PLUGIN_MODULE}-0.1.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {PLUGIN_MODULE}\nVersion: 0.1\n", encoding="utf-8"
    )
    (info / "entry_points.txt").write_text(
        f"[toolbus.plugins]\ndoor-conformance = {PLUGIN_MODULE}\n", encoding="utf-8"
    )


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
        caller = Caller("alice", ("*",))
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
        caller = Caller("alice", ("default", "admin"))
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
        mine = await door.tools(Caller("alice"))
        operator = await door.tools(Caller("ops", ("*",)))

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
        refused = await door.call(Caller("bob"), "delete-account")
        allowed = await door.call(Caller("ops"), "delete-account")

        assert refused.outcome == "refused", f"{door.name} answered {refused}"
        assert DENY_REASON in refused.text
        assert door_setup.shop.reached("bob", "delete") == 0
        assert allowed.outcome == "ok", allowed
        await eventually_audited(door, "bob", lambda r: any(c.refusal == "hook" for c in r.calls))

    async def test_a_post_use_hook_redacts_every_answer(self, door: DoorDriver) -> None:
        called = await door.call(Caller("bob"), "lookup")
        streamed = await door.stream(Caller("bob"), "lookup")

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
        refused = await door.call(Caller("heidi"), "lookup", {"item": "vault"})
        allowed = await door.call(Caller("heidi"), "lookup", {"item": "socks"})

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
        caller = Caller("judy")
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
        called = await door.call(Caller("ken"), "lookup", {"item": "socks", "vault_code": "1234"})
        streamed = await door.stream(Caller("ken"), "lookup", {"vault_code": "1234"})

        assert called.outcome == "error", f"{door.name} answered {called}"
        assert "vault_code" in called.text
        if streamed is not None:
            assert streamed.outcome == "error", streamed
            assert "vault_code" in streamed.text
        assert door_setup.shop.reached("ken") == 0

    async def test_a_call_nobody_approves_is_not_made_and_expires_audited(
        self, door: DoorDriver, door_setup: DoorSetup
    ) -> None:
        answered = await door.call(Caller("ivan"), "refund")

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
        refused = await door.stream(Caller("bob"), "delete-account")
        if refused is None:
            pytest.skip(f"{door.name} has no streams")
        escalated = await door.stream(Caller("bob", ("*",)), "admin-reset")

        assert refused.outcome == "refused", refused
        assert door_setup.shop.reached("bob", "delete") == 0
        assert escalated is not None and escalated.outcome == "denied", escalated

    # ------------------------------------------------------------------ refusals that do not reveal

    async def test_a_forbidden_tool_answers_exactly_as_an_unknown_one(
        self, door: DoorDriver, door_setup: DoorSetup
    ) -> None:
        forbidden = await door.call(Caller("carol"), "admin-reset")
        unknown = await door.call(Caller("carol"), "no-such-tool")

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
        jumped = await door.call(Caller("dave", state="shopping"), "checkout")

        assert jumped.outcome == "denied", f"{door.name} let a caller start in 'shopping': {jumped}"
        assert door_setup.shop.reached("dave", "checkout") == 0
        await eventually_audited(
            door,
            "dave",
            lambda r: r.access_denied is not None and r.initial_state == "shopping",
        )

    async def test_an_entry_state_may_be_asked_for(self, door: DoorDriver) -> None:
        browsing = await door.call(Caller("dave", state="browsing"), "browse")

        assert browsing.outcome == "ok", browsing

    async def test_a_held_session_keeps_the_state_it_earned(self, door: DoorDriver) -> None:
        session = await door.session(Caller("dave"))
        assert not isinstance(session, Answer), session
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
                taken = await door.occupy(Caller("erin"))
                assert isinstance(taken, Occupied), f"{door.name} refused a place early: {taken}"
                places.append(taken)
            over = await door.occupy(Caller("erin"))
            if isinstance(over, Occupied):
                places.append(over)
            other = await door.occupy(Caller("frank"))
            if isinstance(other, Occupied):
                places.append(other)

            assert isinstance(over, Answer) and over.outcome == "limited", (
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
        caller = Caller("grace")
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


__all__ = [
    "APPROVAL_TIMEOUT",
    "CARD",
    "CONFIG",
    "DENY_REASON",
    "ENTRY_STATES",
    "MAX_PER_USER",
    "PERMITTED",
    "POLICIES",
    "POLICY_REASON",
    "REDACTED",
    "REHEARSAL_REASON",
    "USERS",
    "Answer",
    "Caller",
    "DoorConformance",
    "DoorDriver",
    "DoorSession",
    "DoorSetup",
    "Occupied",
    "ShopService",
    "api_key",
    "install_plugin",
    "key_variable",
    "normalized",
    "policy_engine_installed",
    "toolbus_toml",
]
