"""A tool that asks its caller, called over the gateway's HTTP API.

A caller that says what it can answer (``can_answer``) gets the question as a
task, ``input-required`` with its ``input_requests``, and answers it at
``POST /v1/tasks/{id}/input``. One that says nothing is never held: the tool's
question is the call's answer at once, an ``input-unavailable`` error naming
what was asked; a task's call fails so too, rather than wait for an answer
nobody could give.
"""

from __future__ import annotations

import uuid
from typing import Any

import anyio
import pytest

from tests.gateway.support import RunningGateway, authenticator, services, serving, snapshot
from toolbus import Elicitation, InputUnavailable, ask, can_ask, running, tool_service
from toolbus.plugins import connect
from toolbus_gateway import Gateway, parse_gateway_settings

pytestmark = pytest.mark.anyio

CONFIRM = {"type": "object", "properties": {"sure": {"type": "boolean"}}, "required": ["sure"]}


@pytest.fixture
def tool_services() -> tuple[Any, ...]:
    """The gateway's test tools, with ``echo`` served by a tool that asks first."""
    echo, shop, words = services()
    tag = uuid.uuid4().hex[:8]
    queues = {
        "request_queue": f"non-persistent://gateway-tests/asking/{tag}",
        "response_queue": f"non-persistent://gateway-tests/asked/{tag}",
    }

    @tool_service(echo.id, **queues)
    async def asking_echo(text: str = "") -> str:
        if text == "careful":  # a tool that can do without the answer
            try:
                await ask(Elicitation("Shout it?", CONFIRM))
            except InputUnavailable:
                return f"{text} (quietly: can ask {can_ask('elicitation')})"
        answer = await ask(Elicitation(f"Echo {text!r}?", CONFIRM))
        return text if answer.content.get("sure") else "not echoed"

    return asking_echo, shop, words


async def test_a_tool_that_asks_is_answered_at_once_with_the_question_named(
    served: RunningGateway,
) -> None:
    async with served.client("alice") as http:
        # A held request (a question waiting for someone to answer) fails here, not
        # at the client's 30 s timeout.
        with anyio.fail_after(20):
            asked = await http.post("/v1/tools/echo/call", json={"arguments": {"text": "hi"}})
            careful = await http.post(
                "/v1/tools/echo/call", json={"arguments": {"text": "careful"}}
            )

    assert asked.status_code == 502
    body = asked.json()
    assert body["status"] == "error" and body["error_type"] == "input-unavailable"
    assert body["observation"] == (
        "Error: tool 'echo' failed (input-unavailable): this tool asks its caller for "
        "elicitation \"Echo 'hi'?\", which its caller cannot give (it answers no input "
        "requests); call it through a door that relays such requests (MCP, the agent loop, "
        "toolbus call, the gateway with can_answer), or answer them in code"
    )
    assert careful.status_code == 200
    assert careful.json()["observation"] == "careful (quietly: can ask False)"


async def test_a_task_whose_tool_asks_fails_naming_the_question(served: RunningGateway) -> None:
    tasks = served.gateway.tasks
    assert tasks is not None
    async with served.client("alice") as http:
        started = await http.post(
            "/v1/tools/echo/call",
            json={"arguments": {"text": "later"}},
            headers={"Prefer": "respond-async"},
        )
        assert started.status_code == 202, started.text
        task_id = started.json()["id"]
        # The gateway's tasks record no way to answer: the task ends, it does not wait
        # in input-required for an answer nobody could give.
        with anyio.fail_after(20):
            async for task in tasks.book.changes(task_id):
                if task is not None and task.final:
                    break
        shown = (await http.get(f"/v1/tasks/{task_id}")).json()

    assert shown["status"] == "failed"
    assert shown.get("input_requests") is None
    assert shown["error"]["type"] == "input-unavailable"
    assert (
        "elicitation \"Echo 'later'?\", which its caller cannot give" in shown["error"]["message"]
    )


async def final_task(served: RunningGateway, task_id: str) -> Any:
    tasks = served.gateway.tasks
    assert tasks is not None
    with anyio.fail_after(20):
        async for task in tasks.book.changes(task_id):
            if task is not None and task.final:
                return task
    raise AssertionError(f"task {task_id} went away")


async def test_a_caller_that_can_answer_gets_the_question_as_a_task_and_answers_it(
    served: RunningGateway,
) -> None:
    async with served.client("alice") as http, served.client("bob") as other:
        asked = await http.post(
            "/v1/tools/echo/call",
            json={"arguments": {"text": "hi"}, "can_answer": ["elicitation"]},
        )
        assert asked.status_code == 202, asked.text
        task = asked.json()
        task_id = task["id"]
        path = f"/v1/tasks/{task_id}/input"
        shown = (await http.get(f"/v1/tasks/{task_id}")).json()
        # Only its owner answers: to anyone else the task does not exist.
        foreign = await other.post(path, json={"responses": {"q": {"action": "accept"}}})
        [key] = shown["input_requests"]
        unknown = await http.post(path, json={"responses": {"nope": {"action": "accept"}}})
        unfit = await http.post(path, json={"responses": {key: {"action": "maybe"}}})
        unwanted = await http.post(
            path, json={"responses": {key: {"action": "accept", "content": {"sure": "yes"}}}}
        )
        empty = await http.post(path, json={"responses": {}})
        still = (await http.get(f"/v1/tasks/{task_id}")).json()
        answered = await http.post(
            path, json={"responses": {key: {"action": "accept", "content": {"sure": True}}}}
        )
        assert answered.status_code == 200, answered.text
        done = await final_task(served, task_id)
        late = await http.post(path, json={"responses": {key: {"action": "decline"}}})

    assert asked.headers["location"] == f"/v1/tasks/{task_id}"
    assert task["status"] == "input-required"
    assert task["input_requests"] == shown["input_requests"]
    assert shown["input_requests"][key] == {
        "method": "elicitation/create",
        "params": {"message": "Echo 'hi'?", "requestedSchema": CONFIRM},
    }
    assert foreign.status_code == 404
    assert unknown.status_code == 422
    assert unknown.json()["error"] == "unfit-answers"
    assert (
        f"responses['nope']: task {task_id} does not ask that; it asks {key!r}"
        in (unknown.json()["message"])
    )
    assert unfit.status_code == 422
    assert f"responses[{key!r}]: an elicitation answer needs 'action'" in unfit.json()["message"]
    assert unwanted.status_code == 422
    assert unwanted.json()["message"] == (
        f"responses[{key!r}].content: 'sure' must be true or false, not \"yes\""
    )
    assert empty.status_code == 422  # no answers at all is a malformed body
    assert still["status"] == "input-required" and still["input_requests"] == task["input_requests"]
    assert answered.json()["input_requests"] == {}
    assert done.status == "completed" and done.result == "hi"
    assert late.status_code == 409 and late.json()["error"] == "task-closed"


async def test_a_declined_question_is_the_tools_to_handle(served: RunningGateway) -> None:
    async with served.client("alice") as http:
        asked = await http.post(
            "/v1/tools/echo/call",
            json={"arguments": {"text": "hi"}, "can_answer": ["elicitation"]},
        )
        task_id = asked.json()["id"]
        [key] = asked.json()["input_requests"]
        await http.post(
            f"/v1/tasks/{task_id}/input", json={"responses": {key: {"action": "decline"}}}
        )
        done = await final_task(served, task_id)

    assert done.status == "completed" and done.result == "not echoed"


async def test_a_caller_that_can_answer_a_tool_that_does_not_ask_is_answered_as_a_call(
    served: RunningGateway,
) -> None:
    async with served.client("alice") as http:
        answered = await http.post(
            "/v1/tools/add-to-cart/call",
            json={"arguments": {"action": "add", "item": "tea"}, "can_answer": ["elicitation"]},
        )
        not_asking = await http.post(
            "/v1/tools/add-to-cart/call",
            json={"arguments": {"action": "add"}, "can_answer": ["elicitation"]},
            headers={"Prefer": "respond-async"},
        )
        task_id = not_asking.json()["id"]
        await final_task(served, task_id)
        after_the_end = await http.post(
            f"/v1/tasks/{task_id}/input", json={"responses": {"q": {"action": "accept"}}}
        )
        bad_kind = await http.post(
            "/v1/tools/echo/call", json={"arguments": {"text": "hi"}, "can_answer": ["telepathy"]}
        )

    assert answered.status_code == 200 and answered.json()["observation"] == "add tea"
    assert not_asking.status_code == 202
    assert after_the_end.status_code == 409 and after_the_end.json()["error"] == "task-closed"
    assert bad_kind.status_code == 422 and "can_answer" in bad_kind.text


async def test_a_sessions_call_whose_tool_asks_waits_for_its_answer(
    served: RunningGateway,
) -> None:
    async with served.client("alice") as http:
        opened = await http.post("/v1/sessions", json={})
        assert opened.status_code in (200, 201), opened.text
        session_id = opened.json()["session_id"]
        asked = await http.post(
            f"/v1/sessions/{session_id}/calls",
            json={"name": "echo", "arguments": {"text": "there"}, "can_answer": ["elicitation"]},
        )
        assert asked.status_code == 202, asked.text
        task_id = asked.json()["id"]
        [key] = asked.json()["input_requests"]
        await http.post(
            f"/v1/tasks/{task_id}/input",
            json={"responses": {key: {"action": "accept", "content": {"sure": True}}}},
        )
        done = await final_task(served, task_id)

    assert done.status == "completed" and done.result == "there"


async def test_a_tool_that_forbids_tasks_is_asked_nothing_whatever_its_caller_can_answer(
    broker_url: str, tool_services: tuple[Any, ...]
) -> None:
    config = snapshot(*tool_services)
    config["tool"]["echo"]["task-support"] = "forbidden"
    bus = await connect(broker_url)
    try:
        async with running(bus, *tool_services):
            gateway = Gateway(
                broker_url,
                authenticator=authenticator(),
                config=config,
                settings=parse_gateway_settings({}),
            )
            async with serving(gateway) as server, server.client("alice") as http:
                with anyio.fail_after(20):
                    asked = await http.post(
                        "/v1/tools/echo/call",
                        json={"arguments": {"text": "hi"}, "can_answer": ["elicitation"]},
                    )
    finally:
        await bus.close()

    assert asked.status_code == 502, asked.text
    assert asked.json()["error_type"] == "input-unavailable"
