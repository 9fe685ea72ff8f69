"""What a party with nothing but access to the shared store can do to a gateway: nothing.

A real gateway (uvicorn on 127.0.0.1) keeps its sessions and approvals in a real
NATS key-value bucket or a real Redis, sealed, and signs its calls; the tools
verify them. The attacker is a plain store client of their own (no seal key):
they rewrite what the gateway keeps, copy one user's records under another's
key, or approve a waiting call themselves. Every forgery is refused (logged,
counted, audited) and nothing runs on its strength.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.gateway.support import RunningGateway, authenticator, serving
from tests.identity.support import key_pair, raw_exchange, whoami
from tests.nats.server import NatsServer
from tests.redis.server import RedisServer
from toolbus import running, tool_service
from toolbus.application.agent.audit import ListAuditSink, RefusedRecordAudit
from toolbus.application.agent.held import HeldSession
from toolbus.application.doors.holding import HeldKey
from toolbus.application.doors.stored import _STORED, NAMESPACE, _Stored, session_key
from toolbus.application.identity import Caller, CallVerifier
from toolbus.application.identity.replays import NAMESPACE as NAMESPACE_REPLAYS
from toolbus.application.identity.replays import StoredReplays
from toolbus.application.sealing import SealKeys, load_seal_keys, new_seal_jwk
from toolbus.domain.access.approvals import Approval
from toolbus.domain.calls import wire
from toolbus.domain.identity import PROP_CALL_TOKEN, base64url
from toolbus.plugins import connect, connect_state
from toolbus.ports import StateStore
from toolbus_gateway import Gateway

pytestmark = [pytest.mark.anyio, pytest.mark.broker]


@pytest.fixture(params=["nats", "redis"])
def store_url(request: pytest.FixtureRequest) -> str:
    """A fresh place in a real shared store: a NATS bucket, or a Redis key prefix."""
    fresh = uuid.uuid4().hex[:8]
    if request.param == "nats":
        server: NatsServer = request.getfixturevalue("sealing_nats")
        return f"{server.url}?bucket=forgery-{fresh}"
    redis: RedisServer = request.getfixturevalue("sealing_redis")
    return f"{redis.url}/0?prefix=forgery-{fresh}"


@dataclass
class Shop:
    """The tools, and who each call of each was made for (as its call token says)."""

    calls: list[tuple[str, str]]
    snapshot: dict[str, Any]
    services: tuple[Any, ...]


def shop() -> Shop:
    calls: list[tuple[str, str]] = []
    tag = uuid.uuid4().hex[:8]

    def queue(name: str) -> str:
        return f"non-persistent://forgery/{name}/{tag}"

    @tool_service(f"store-{tag}", request_queue=queue("req"), response_queue=queue("resp"))
    async def store(action: str, caller: Caller) -> str:
        calls.append((action, caller.user))
        return f"{action} for {caller.user}"

    def tool(name: str, **extra: Any) -> dict[str, Any]:
        return {
            "type": "tool-service",
            "name": name,
            "description": name,
            "service": store.id,
            "arguments": [{"name": "action", "type": "string", "description": "what"}],
            **extra,
        }

    snapshot = {
        "tool-service": {store.id: store.descriptor()},
        "tool": {
            "browse": tool("browse"),
            "admin-reset": tool("admin-reset", group=["admin"]),
            "checkout": tool("checkout", **{"applicable-states": ["paid"]}),
            "refund": tool("refund"),
        },
        "permissions": {"users": {"alice": ["default"], "bob": ["default"], "ops": ["*"]}},
    }
    return Shop(calls, snapshot, (store,))


@dataclass
class Served:
    server: RunningGateway
    audit: ListAuditSink
    shop: Shop
    store_url: str


@asynccontextmanager
async def gateway(
    tmp_path: Path,
    store_url: str,
    *,
    approvals: dict[str, Any] | None = None,
    doors: dict[str, Any] | None = None,
) -> AsyncIterator[Served]:
    tools = shop()
    signing = key_pair()
    (tmp_path / "seal.jwk").write_text(json.dumps(new_seal_jwk("seal-test")))
    keys: SealKeys = load_seal_keys(["seal.jwk"], base_dir=tmp_path)
    bus = await connect(f"memory://forgery-{uuid.uuid4().hex[:8]}")
    audit = ListAuditSink()
    try:
        verifier = CallVerifier([signing.public])
        async with running(bus, *tools.services, verifier=verifier):
            served = Gateway(
                bus,
                authenticator=authenticator(),
                config=tools.snapshot,
                settings_file={"approvals": approvals or {}, "doors": doors or {}},
                signer=signing.signer(),
                state=store_url,
                seal_keys=keys,
            )
            async with serving(served) as server:
                assert served.door is not None
                served.door.audit = audit  # what the door audits, kept for the test
                yield Served(server, audit, tools, store_url)
    finally:
        await bus.close()


@asynccontextmanager
async def attacker(url: str) -> AsyncIterator[StateStore]:
    """A client of the store with no seal key: what anyone who reaches it has."""
    store = await connect_state(url)
    try:
        yield store
    finally:
        await store.close()


def forged_session(owner: str, session_id: str, **changes: Any) -> bytes:
    """A held session as a door without sealing would keep one, with ``changes``."""
    now = time.time()
    fields: dict[str, Any] = {
        "request_id": session_id,
        "user": owner,
        "requested_groups": None,
        "groups": ("default",),
        "initial_state": "undefined",
        "state": "undefined",
        "started_at": now,
        **changes,
    }
    held = HeldSession(**fields)
    return _STORED.dump_json(_Stored(held, now, 1, now + 600))


def refused_metric(metrics: str, namespace: str) -> float:
    name = f'toolbus_state_records_refused_total{{namespace="{namespace}"}}'
    for line in metrics.splitlines():
        if line.startswith(name):
            return float(line.split()[-1])
    return 0.0


FORGERIES: dict[str, Callable[[str], dict[str, Any]]] = {
    # The session made to say it is another user's, with every group.
    "another-user-every-group": lambda sid: {"user": "ops", "groups": ("*",)},
    # The session moved into a state its owner never reached.
    "another-state": lambda sid: {"state": "paid"},
}


@pytest.mark.parametrize("forgery", sorted(FORGERIES))
async def test_a_rewritten_session_is_refused_and_nothing_runs_on_its_strength(
    tmp_path: Path, store_url: str, forgery: str
) -> None:
    async with gateway(tmp_path, store_url) as served, served.server.client("alice") as http:
        sid = (await http.post("/v1/sessions", json={})).json()["session_id"]
        key = session_key(HeldKey("alice", "session", sid))
        async with attacker(store_url) as store:
            await store.put(NAMESPACE, key, forged_session("alice", sid, **FORGERIES[forgery](sid)))
        tool = "admin-reset" if forgery == "another-user-every-group" else "checkout"
        answer = await http.post(
            f"/v1/sessions/{sid}/calls", json={"name": tool, "arguments": {"action": "x"}}
        )
        metrics = (await http.get("/metrics")).text

    assert answer.status_code == 404, answer.text  # the session is gone: no call was made
    assert served.shop.calls == []
    refused = served.audit.events
    assert [(e.namespace, e.key) for e in refused] == [(NAMESPACE, key)]
    assert isinstance(refused[0], RefusedRecordAudit) and "not sealed" in refused[0].reason
    assert refused_metric(metrics, NAMESPACE) == 1


async def test_another_users_sealed_session_copied_under_a_key_does_not_open(
    tmp_path: Path, store_url: str
) -> None:
    async with (
        gateway(tmp_path, store_url) as served,
        served.server.client("ops") as ops,
        served.server.client("alice") as alice,
    ):
        ops_sid = (await ops.post("/v1/sessions", json={"groups": ["*"]})).json()["session_id"]
        alice_sid = (await alice.post("/v1/sessions", json={})).json()["session_id"]
        async with attacker(store_url) as store:
            genuine = await store.get(NAMESPACE, session_key(HeldKey("ops", "session", ops_sid)))
            assert genuine is not None
            await store.put(
                NAMESPACE, session_key(HeldKey("alice", "session", alice_sid)), genuine.value
            )
        answer = await alice.post(
            f"/v1/sessions/{alice_sid}/calls",
            json={"name": "admin-reset", "arguments": {"action": "wipe"}},
        )
        # ops's own session is untouched and works.
        own = await ops.post(
            f"/v1/sessions/{ops_sid}/calls",
            json={"name": "admin-reset", "arguments": {"action": "wipe"}},
        )
    assert answer.status_code == 404
    assert own.status_code == 200, own.text
    assert served.shop.calls == [("wipe", "ops")]  # signed as ops, for ops only


async def test_a_forged_record_never_blocks_its_owner(tmp_path: Path, store_url: str) -> None:
    """A per-user count skips what does not open: forged sessions take none of alice's places."""
    doors = {"max-sessions-per-user": 3}
    async with (
        gateway(tmp_path, store_url, doors=doors) as served,
        served.server.client("alice") as http,
    ):
        async with attacker(store_url) as store:
            for n in range(5):  # more than alice may hold
                sid = f"forged-{n}"
                await store.put(
                    NAMESPACE,
                    session_key(HeldKey("alice", "session", sid)),
                    forged_session("alice", sid),
                )
            # ... and listed as hers, where the door counts them
            await store.put(
                NAMESPACE,
                "owners/session/alice",
                json.dumps([f"forged-{n}" for n in range(5)]).encode(),
            )
        opened = await http.post("/v1/sessions", json={})
        assert opened.status_code == 201, opened.text
        sid = opened.json()["session_id"]
        called = await http.post(
            f"/v1/sessions/{sid}/calls", json={"name": "browse", "arguments": {"action": "a"}}
        )
    assert called.status_code == 200, called.text
    assert served.shop.calls == [("a", "alice")]


# ------------------------------------------------------------------ approvals


async def first_pending(served: Served) -> Approval:
    door = served.server.gateway.door
    assert door is not None and door.book is not None
    async for _ in door.book.changes():
        pending = await door.book.pending()
        if pending:
            return pending[0]
    raise AssertionError("no approval came")


async def test_an_approval_written_as_approved_by_the_attacker_runs_nothing(
    tmp_path: Path, store_url: str
) -> None:
    approvals = {"approvers": ["ops"], "tools": ["refund"], "timeout": 60}
    async with gateway(tmp_path, store_url, approvals=approvals) as served:
        answer: dict[str, Any] = {}

        async def call() -> None:
            async with served.server.client("alice") as http:
                made = await http.post("/v1/tools/refund/call", json={"arguments": {"action": "r"}})
                answer.update(status=made.status_code, body=made.json())

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(call)
            waiting = await first_pending(served)
            approved = waiting.model_copy(
                update={"status": "approved", "decided_by": "ops", "decided_at": time.time()}
            )
            async with attacker(store_url) as store:
                await store.put("approvals", waiting.id, approved.to_json())
    assert served.shop.calls == []
    observation = answer["body"].get("observation", "")
    assert "approval" in json.dumps(answer["body"]), answer
    assert "refund" not in [c[0] for c in served.shop.calls], observation
    assert [e.namespace for e in served.audit.events] == ["approvals"]
    call_record = served.audit.for_user("alice")[-1].calls[-1]
    assert call_record.status == "refused" and call_record.refusal == "approval"


async def test_an_approver_cannot_approve_their_own_call(tmp_path: Path, store_url: str) -> None:
    approvals = {"approvers": ["bob", "ops"], "tools": ["refund"], "callers-approve": False}
    async with gateway(tmp_path, store_url, approvals=approvals) as served:
        statuses: dict[str, Any] = {}

        async def call() -> None:
            async with served.server.client("bob") as http:
                made = await http.post("/v1/tools/refund/call", json={"arguments": {"action": "r"}})
                statuses["call"] = made.status_code

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(call)
            waiting = await first_pending(served)
            async with served.server.client("bob") as bob, served.server.client("ops") as ops:
                own = await bob.post(f"/v1/approvals/{waiting.id}/approve", json={})
                statuses["own"] = (own.status_code, own.json().get("message", ""))
                other = await ops.post(f"/v1/approvals/{waiting.id}/approve", json={})
                statuses["other"] = other.status_code
    assert statuses["own"][0] == 403 and "their own call" in statuses["own"][1]
    assert statuses["other"] == 200 and statuses["call"] == 200
    assert served.shop.calls == [("r", "bob")]
    note = served.audit.for_user("bob")[-1].calls[-1].approval
    assert note is not None and (note.decided_by, note.decided_via) == ("ops", "api-key")


# ------------------------------------------------------------------ replays


async def test_a_replay_is_refused_by_the_replica_that_ran_it_when_the_store_forgot(
    store_url: str,
) -> None:
    keys = key_pair()
    tool = whoami()
    bus = await connect(f"memory://replays-{uuid.uuid4().hex[:8]}")
    store = await connect_state(store_url)
    try:
        verifier = CallVerifier([keys.public], replays=StoredReplays(store))
        async with running(bus, tool.service, verifier=verifier):
            body = wire.encode_request("alice")
            token = keys.signer().sign(
                call_id="c-1", audience=tool.service.id, user="alice", body=body
            )
            issued = json.loads(base64url.decode(token.split(".")[1]))["iat"]
            async with raw_exchange(bus, tool.service) as send, attacker(store_url) as other:
                first = await send(body, {"id": "c-1", PROP_CALL_TOKEN: token})
                # The store's memory of the use is deleted by someone who can write it ...
                assert await other.get(NAMESPACE_REPLAYS, f"c-1 {issued} ") is not None
                await other.delete(NAMESPACE_REPLAYS, f"c-1 {issued} ")
                # ... and the captured call is sent again, to the same replica.
                again = await send(body, {"id": "c-1", PROP_CALL_TOKEN: token})
    finally:
        await store.close()
        await bus.close()
    assert first.error_type is None
    assert again.error_type == "unauthorized" and "used before" in again.error_message
    assert len(tool.served) == 1
