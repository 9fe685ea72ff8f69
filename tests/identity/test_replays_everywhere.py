"""Replays refused on every replica: token uses taken in a state store the replicas share.

Two hosts of one service, each with a verifier of its own (as two processes
have), on one bus: a signed call replayed runs no second time, whichever
replica it reaches. The NATS key-value bucket on the broker's own servers and
Redis do the same through real replicas in tests/scaling/.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack

import pytest

from tests.identity.support import key_pair, raw_exchange, whoami
from toolbus.application.calls.host import running
from toolbus.application.identity import CallVerifier
from toolbus.application.identity.replays import PER_REPLICA_TOKEN_AGE, StoredReplays
from toolbus.domain.calls import wire
from toolbus.domain.errors import Unauthorized
from toolbus.domain.identity import PROP_CALL_TOKEN
from toolbus.memory.state import connect as connect_state
from toolbus.ports import Bus

pytestmark = pytest.mark.anyio


@pytest.fixture
async def stack() -> AsyncIterator[AsyncExitStack]:
    async with AsyncExitStack() as stack:
        yield stack


async def test_a_replay_runs_on_no_replica_when_they_share_a_store(
    bus: Bus, stack: AsyncExitStack
) -> None:
    keys = key_pair()
    tool = whoami()
    store = await connect_state("memory://replays")
    for _ in range(2):  # two replicas, competing for the queue
        verifier = CallVerifier([keys.public], replays=StoredReplays(store))
        await stack.enter_async_context(running(bus, tool.service, verifier=verifier))
    body = wire.encode_request("alice")
    token = keys.signer().sign(call_id="c-1", audience=tool.service.id, user="alice", body=body)

    async with raw_exchange(bus, tool.service) as send:
        answers = [await send(body, {"id": "c-1", PROP_CALL_TOKEN: token}) for _ in range(6)]

    assert answers[0].error_type is None
    assert {(a.error_type, "used before" in a.error_message) for a in answers[1:]} == {
        ("unauthorized", True)
    }
    assert len(tool.served) == 1


async def test_each_replica_alone_would_run_a_replay_once_more() -> None:
    """What the store is for: per-replica memories each take the token once."""
    keys = key_pair()
    body = wire.encode_request("alice")
    token = keys.signer().sign(call_id="c-1", audience="s", user="alice", body=body)
    left, right = CallVerifier([keys.public]), CallVerifier([keys.public])
    check = {"call_id": "c-1", "audiences": {"s"}, "user": "alice", "body": body, "once": True}

    await left.verify_call(token, **check)
    await right.verify_call(token, **check)  # another process: it has not seen it
    with pytest.raises(Unauthorized, match="used before"):
        await right.verify_call(token, **check)


async def test_a_per_replica_guard_takes_tokens_for_a_short_time_only() -> None:
    keys = key_pair()
    now = [1_000_000.0]
    signer = keys.signer(lifetime=3600, clock=lambda: now[0])
    verifier = CallVerifier(
        [keys.public], clock=lambda: now[0], max_token_age=PER_REPLICA_TOKEN_AGE
    )
    body = wire.encode_request("alice")
    check = {"audiences": {"s"}, "user": "alice", "body": body, "once": True}
    fresh = signer.sign(call_id="c-1", audience="s", user="alice", body=body)
    await verifier.verify_call(fresh, call_id="c-1", **check)

    old = signer.sign(call_id="c-2", audience="s", user="alice", body=body)
    now[0] += PER_REPLICA_TOKEN_AGE + 10  # its expiry is an hour away, but it is too old
    with pytest.raises(Unauthorized, match="remembers replays per replica"):
        await verifier.verify_call(old, call_id="c-2", **check)
