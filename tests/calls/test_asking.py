"""Tools that ask their caller: the service's side (ask, the sealed state) and the caller's
(relaying, continuing), on the in-memory bus."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Mapping
from typing import Any

import anyio
import pytest

from toolbus import (
    Elicitation,
    ElicitationAnswer,
    InputRequired,
    InputUnavailable,
    Root,
    RootsAnswer,
    RootsRequest,
    Sampling,
    SamplingAnswer,
    ToolServiceClient,
    ToolServiceError,
    ask,
    ask_all,
    can_ask,
    carried,
    open_tools,
    running,
    tool_service,
)
from toolbus.application.calls.client import sending_input
from toolbus.application.calls.relaying import MAX_ROUNDS, continuing, relaying
from toolbus.application.sealing import SealKey, SealKeys
from toolbus.domain.calls import wire
from toolbus.domain.calls.input_requests import (
    InputAnswer,
    InputAsk,
    InputKind,
    InputReply,
    InvalidInputState,
)
from toolbus.memory.bus import MemoryBus, connect

pytestmark = pytest.mark.anyio

CONFIRM = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
KEYS = SealKeys((SealKey("test-seal", b"k" * 32),))
#: How often each tool ran, by name: a tool that asks runs again with the answers.
runs: dict[str, int] = {}


@tool_service("files")
async def delete_file(path: str) -> str:
    runs["delete"] = runs.get("delete", 0) + 1
    answer = await ask(Elicitation(f"Delete {path}?", CONFIRM), carry={"checked": path})
    if not (answer.accepted and answer.content.get("ok")):
        return f"{path} is kept"
    note = await ask(Sampling([f"Say goodbye to {path}"], max_tokens=20))
    roots = await ask(RootsRequest())
    where = ", ".join(root.uri for root in roots.roots)
    return f"{path} deleted under {where} ({note.text}); carried {carried()}"


@tool_service("survey")
async def survey() -> str:
    answers = await ask_all(
        {
            "name": Elicitation("Your name?", {"type": "object", "properties": {}}),
            "color": Elicitation("Your colour?", {"type": "object", "properties": {}}),
        }
    )
    name, color = answers["name"], answers["color"]
    assert isinstance(name, ElicitationAnswer) and isinstance(color, ElicitationAnswer)
    return f"{name.content.get('value')} likes {color.content.get('value')}"


@tool_service("polite")
async def polite() -> str:
    if not can_ask("elicitation"):
        return "asked nobody"
    try:
        answer = await ask(Elicitation("Shall I?", CONFIRM))
    except InputUnavailable:
        return "could not ask"
    return f"answered {answer.action}"


@tool_service("countdown")
async def countdown(start: int) -> AsyncIterator[str]:
    go = await ask(Elicitation("Count down?", CONFIRM))
    if go.content.get("ok"):
        for n in range(start, 0, -1):
            yield f"{n} "
    yield "done"


@tool_service("chatty")
async def chatty() -> AsyncIterator[str]:
    yield "first"
    await ask(Elicitation("Too late?", CONFIRM))


def tools_config(*services: Any) -> dict[str, Any]:
    return {
        "tool-service": {service.id: service.descriptor() for service in services},
        "tool": {
            service.id: {
                "type": "tool-service",
                "name": service.id,
                "description": f"the {service.id} tool",
                "service": service.id,
                "input-schema": service.arguments_schema,
            }
            for service in services
        },
    }


class Relay:
    """Answers everything as a cooperative person and model would; counts what it was asked."""

    def __init__(self, kinds: tuple[InputKind, ...] = ("elicitation", "sampling", "roots")) -> None:
        self.kinds = frozenset(kinds)
        self.asked: list[list[str]] = []

    async def answer(self, asked: InputAsk) -> Mapping[str, InputAnswer] | None:
        self.asked.append(list(asked.requests))
        answers: dict[str, InputAnswer] = {}
        for key, request in asked.requests.items():
            if isinstance(request, Elicitation):
                answers[key] = ElicitationAnswer("accept", {"ok": True, "value": key})
            elif isinstance(request, Sampling):
                answers[key] = SamplingAnswer("farewell", "test-model")
            else:
                answers[key] = RootsAnswer((Root("file:///work", "work"),))
        return answers


class HandBack:
    """Says it can answer, then hands every question back (as an MCP door does)."""

    kinds = frozenset({"elicitation", "sampling", "roots"})

    async def answer(self, asked: InputAsk) -> None:
        return None


@pytest.fixture
async def bus() -> AsyncIterator[MemoryBus]:
    bus = await connect(f"memory://asking-{uuid.uuid4().hex}")
    runs.clear()
    yield bus
    await bus.close()


async def test_a_relay_answers_round_after_round_and_the_caller_sees_one_call() -> None:
    relay = Relay()
    async with open_tools("memory://", tools_config(delete_file), serve=[delete_file]) as tools:
        runs.clear()
        with relaying(relay):
            answer = await tools.call("files", {"path": "a.txt"})

    assert answer == ("a.txt deleted under file:///work (farewell); carried {'checked': 'a.txt'}")
    # One round per question; the tool ran once more than it asked.
    assert relay.asked == [["elicitation-1"], ["sampling-2"], ["roots-3"]]
    assert runs["delete"] == 4


async def test_a_caller_that_cannot_answer_gets_a_clear_error_at_once(bus: MemoryBus) -> None:
    async with running(bus, delete_file), ToolServiceClient(bus) as client:
        with anyio.fail_after(5), pytest.raises(InputUnavailable) as raised:
            await client.call(
                request_queue=delete_file.request_queue,
                response_queue=delete_file.response_queue,
                arguments={"path": "a.txt"},
            )

    assert raised.value.error_type == "input-unavailable"
    assert raised.value.kinds == {"elicitation"}
    assert 'elicitation "Delete a.txt?"' in str(raised.value)
    assert "cannot give" in str(raised.value)


async def test_what_a_trustgraph_caller_reads_is_an_error_it_knows(bus: MemoryBus) -> None:
    # TrustGraph sends no input-kinds and reads error, response and end_of_stream only.
    replies = await bus.subscribe(delete_file.response_queue)
    async with running(bus, delete_file):
        body = wire.encode_request("alice", {}, {"path": "a.txt"}, "2.1")
        await bus.publish(delete_file.request_queue, body, {wire.PROP_ID: "tg-1"})
        with anyio.fail_after(5):
            delivery = await anext(aiter(replies))
    await replies.close()

    answer = json.loads(delivery.body)
    assert answer["error"]["type"] == "input-unavailable"
    assert "cannot give" in answer["error"]["message"]
    assert answer["response"] == "" and answer["end_of_stream"] is True


async def test_a_caller_that_answers_later_continues_with_the_state() -> None:
    async with open_tools("memory://", tools_config(delete_file), serve=[delete_file]) as tools:
        with relaying(HandBack()), pytest.raises(InputRequired) as first:
            await tools.call("files", {"path": "a.txt"})
        asked = first.value.ask
        assert list(asked.requests) == ["elicitation-1"]
        assert asked.state is not None
        reply = InputReply.of({"elicitation-1": ElicitationAnswer("decline")}, asked.state)
        with relaying(HandBack()), continuing(reply):
            answer = await tools.call("files", {"path": "a.txt"})

    assert answer == "a.txt is kept"


async def test_answers_of_earlier_rounds_travel_in_the_state() -> None:
    async with open_tools("memory://", tools_config(delete_file), serve=[delete_file]) as tools:
        with relaying(HandBack()), pytest.raises(InputRequired) as first:
            await tools.call("files", {"path": "a.txt"})
        yes = ElicitationAnswer("accept", {"ok": True})
        reply = InputReply.of({"elicitation-1": yes}, first.value.ask.state)
        with relaying(HandBack()), continuing(reply), pytest.raises(InputRequired) as second:
            await tools.call("files", {"path": "a.txt"})
        # Only the sampling answer now: the confirmation is in the state.
        reply = InputReply.of({"sampling-2": SamplingAnswer("bye")}, second.value.ask.state)
        with relaying(Relay()), continuing(reply):
            answer = await tools.call("files", {"path": "a.txt"})

    assert answer.startswith("a.txt deleted under file:///work (bye)")


async def test_a_continuation_lands_on_another_replica_with_the_same_key(bus: MemoryBus) -> None:
    route = {
        "request_queue": delete_file.request_queue,
        "response_queue": delete_file.response_queue,
        "properties": {wire.PROP_INPUT_KINDS: "elicitation"},
    }
    async with ToolServiceClient(bus) as client:
        async with running(bus, delete_file, seal_keys=KEYS):  # replica one
            with pytest.raises(InputRequired) as asked:
                await client.call(**route, arguments={"path": "a.txt"})
        decline = InputReply({"elicitation-1": {"action": "decline"}}, asked.value.ask.state)
        async with running(bus, delete_file, seal_keys=KEYS):  # replica two: same key
            with sending_input(decline):
                answer = await client.call(**route, arguments={"path": "a.txt"})
        other = SealKeys((SealKey("other", b"o" * 32),))
        async with running(bus, delete_file, seal_keys=other):  # a replica with another key
            with sending_input(decline), pytest.raises(InvalidInputState) as refused:
                await client.call(**route, arguments={"path": "a.txt"})

    assert answer == "a.txt is kept"
    assert "does not open" in str(refused.value)
    assert "sealed with a key this replica does not have" in str(refused.value)


async def test_a_state_does_not_open_for_another_call(bus: MemoryBus) -> None:
    route = {
        "request_queue": delete_file.request_queue,
        "response_queue": delete_file.response_queue,
        "properties": {wire.PROP_INPUT_KINDS: "elicitation,sampling,roots"},
    }
    yes = {"elicitation-1": {"action": "accept", "content": {"ok": True}}}
    async with running(bus, delete_file, seal_keys=KEYS), ToolServiceClient(bus) as client:
        with pytest.raises(InputRequired) as asked:
            await client.call(**route, user="alice", arguments={"path": "a.txt"})
        state = asked.value.ask.state
        assert state is not None
        refusals = []
        for user, arguments, given in [
            ("alice", {"path": "b.txt"}, state),  # a confirmation of a.txt, for b.txt
            ("mallory", {"path": "a.txt"}, state),  # alice's confirmation, for another user
            ("alice", {"path": "a.txt"}, state[:-4] + "AAAA"),  # altered
            ("alice", {"path": "a.txt"}, state + "!"),  # not even base64url
        ]:
            with sending_input(InputReply(yes, given)), pytest.raises(InvalidInputState) as bad:
                await client.call(**route, user=user, arguments=arguments)
            refusals.append(str(bad.value))
        with sending_input(InputReply(yes, state)), pytest.raises(InputRequired) as next_round:
            await client.call(**route, user="alice", arguments={"path": "a.txt"})

    assert all("call the tool again without it" in refusal for refusal in refusals)
    assert list(next_round.value.ask.requests) == ["sampling-2"]


async def test_a_state_expires(bus: MemoryBus) -> None:
    now = [1000.0]
    route = {
        "request_queue": delete_file.request_queue,
        "response_queue": delete_file.response_queue,
        "properties": {wire.PROP_INPUT_KINDS: "elicitation"},
    }
    options = {"seal_keys": KEYS, "input_state_ttl": 60.0, "clock": lambda: now[0]}
    async with running(bus, delete_file, **options), ToolServiceClient(bus) as client:
        with pytest.raises(InputRequired) as asked:
            await client.call(**route, arguments={"path": "a.txt"})
        now[0] += 61
        decline = InputReply({"elicitation-1": {"action": "decline"}}, asked.value.ask.state)
        with sending_input(decline), pytest.raises(InvalidInputState, match="expired"):
            await client.call(**route, arguments={"path": "a.txt"})


async def test_several_requests_in_one_round_and_a_partial_answer() -> None:
    async with open_tools("memory://", tools_config(survey), serve=[survey]) as tools:
        with relaying(HandBack()), pytest.raises(InputRequired) as first:
            await tools.call("survey")
        assert list(first.value.ask.requests) == ["name", "color"]
        partial = InputReply.of(
            {"name": ElicitationAnswer("accept", {"value": "Ada"})}, first.value.ask.state
        )
        with relaying(HandBack()), continuing(partial), pytest.raises(InputRequired) as second:
            await tools.call("survey")
        assert list(second.value.ask.requests) == ["color"]
        rest = InputReply.of(
            {"color": ElicitationAnswer("accept", {"value": "teal"})}, second.value.ask.state
        )
        with continuing(rest):
            answer = await tools.call("survey")

    assert answer == "Ada likes teal"


async def test_an_answer_that_is_no_answer_is_asked_for_again() -> None:
    async with open_tools("memory://", tools_config(survey), serve=[survey]) as tools:
        bad = InputReply({"name": 12345, "color": {"action": "maybe"}})
        with relaying(HandBack()), continuing(bad), pytest.raises(InputRequired) as again:
            await tools.call("survey")

    assert list(again.value.ask.requests) == ["name", "color"]


async def test_a_tool_asks_only_for_what_its_caller_can_give() -> None:
    async with open_tools("memory://", tools_config(polite), serve=[polite]) as tools:
        plain = await tools.call("polite")
        with relaying(Relay(kinds=("sampling",))):
            sampling_only = await tools.call("polite")
        with relaying(Relay()):
            full = await tools.call("polite")

    assert (plain, sampling_only, full) == ("asked nobody", "asked nobody", "answered accept")


async def test_a_streaming_tool_asks_before_its_first_chunk() -> None:
    config = tools_config(countdown, chatty)
    async with open_tools("memory://", config, serve=[countdown, chatty]) as tools:
        with relaying(Relay()):
            chunks = [chunk async for chunk in tools.stream("countdown", {"start": 3})]
            with pytest.raises(ToolServiceError) as late:
                _ = [chunk async for chunk in tools.stream("chatty")]

    assert chunks == ["3 ", "2 ", "1 ", "done"]
    assert late.value.error_type == "tool-service-error"  # the tool's mistake: a logged failure


async def test_a_tool_that_keeps_asking_is_given_up() -> None:
    class Refuser(Relay):
        async def answer(self, asked: InputAsk) -> Mapping[str, InputAnswer]:
            self.asked.append(list(asked.requests))
            return {key: ElicitationAnswer("accept", {"value": 1}) for key in ["unrelated"]}

    relay = Refuser()
    async with open_tools("memory://", tools_config(survey), serve=[survey]) as tools:
        with relaying(relay), pytest.raises(ToolServiceError, match="kept asking for input"):
            await tools.call("survey")

    assert len(relay.asked) == MAX_ROUNDS


async def test_a_question_from_a_tool_a_tool_called_does_not_travel_up() -> None:
    config = tools_config(survey)

    @tool_service("middle")
    async def middle() -> str:
        async with open_tools("memory://", config, serve=[survey]) as inner:
            with relaying(HandBack()):  # it could answer, it says: but it hands back
                return await inner.call("survey")

    async with open_tools("memory://", tools_config(middle), serve=[middle]) as tools:
        with relaying(Relay()), pytest.raises(InputUnavailable) as raised:
            await tools.call("middle")

    assert "called a tool that asks for input" in str(raised.value)


async def test_ask_outside_a_call_says_so() -> None:
    with pytest.raises(RuntimeError, match="only answered while a tool service is serving"):
        await ask(Elicitation("Anyone?"))
