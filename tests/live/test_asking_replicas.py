"""A tool that asks, served by ``toolbus serve`` replicas on NATS: the answer to a question
one replica asked is taken by another, when they share a seal key (``--seal-key``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.live.test_processes import started
from toolbus import InputRequired, ToolServiceClient
from toolbus.application.calls.client import sending_input
from toolbus.application.sealing import new_seal_jwk
from toolbus.domain.calls import wire
from toolbus.domain.calls.input_requests import InputReply, InvalidInputState
from toolbus.plugins import connect

pytestmark = [pytest.mark.anyio, pytest.mark.broker, pytest.mark.slow]

TOOLBUS = str(Path(sys.executable).with_name("toolbus"))
REPOSITORY = Path(__file__).resolve().parents[2]
SERVICE = "tests.calls.test_asking:delete_file"
ROUTE = {
    "request_queue": "non-persistent://tg/request/files",
    "response_queue": "non-persistent://tg/response/files",
    "properties": {wire.PROP_INPUT_KINDS: "elicitation"},
}


def replica(broker: str, key: Path) -> list[str]:
    argv = [TOOLBUS, "serve", SERVICE, "--broker", broker, "--no-announce"]
    return [*argv, "--drain-timeout", "0", "--seal-key", str(key)]


async def test_another_replica_with_the_same_key_takes_the_answer(
    live_nats: str, tmp_path: Path
) -> None:
    shared, other = tmp_path / "seal.jwk", tmp_path / "other.jwk"
    shared.write_text(json.dumps(new_seal_jwk("files-1")))
    other.write_text(json.dumps(new_seal_jwk("files-2")))
    bus = await connect(live_nats)
    decline = ""
    try:
        async with ToolServiceClient(bus, default_timeout=20) as client:
            async with started(
                replica(live_nats, shared), "serving", cwd=tmp_path, path=REPOSITORY
            ):
                with pytest.raises(InputRequired) as asked:
                    await client.call(**ROUTE, arguments={"path": "a.txt"})
            # That replica is gone: another one, with the same key, takes the answer.
            reply = InputReply({"elicitation-1": {"action": "decline"}}, asked.value.ask.state)
            async with started(
                replica(live_nats, shared), "serving", cwd=tmp_path, path=REPOSITORY
            ):
                with sending_input(reply):
                    decline = await client.call(**ROUTE, arguments={"path": "a.txt"})
            async with started(replica(live_nats, other), "serving", cwd=tmp_path, path=REPOSITORY):
                with sending_input(reply), pytest.raises(InvalidInputState) as refused:
                    await client.call(**ROUTE, arguments={"path": "a.txt"})
    finally:
        await bus.close()

    assert decline == "a.txt is kept"
    assert "sealed with a key this replica does not have" in str(refused.value)
