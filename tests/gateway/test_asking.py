"""A tool that asks its caller, called over the gateway's HTTP API.

The gateway's plain calls have no way to put a question to their caller, so it
says it can answer nothing: the tool's question is the call's answer at once,
an ``input-unavailable`` error naming what was asked, never a held request; a
task's call fails so too, rather than wait for an answer nobody could give.
"""

from __future__ import annotations

import uuid
from typing import Any

import anyio
import pytest

from tests.gateway.support import RunningGateway, services
from toolbus import Elicitation, InputUnavailable, ask, can_ask, tool_service

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
        "toolbus call), or answer them in code"
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
