"""An imported MCP server's questions, passed on to the bus caller of the call they belong to.

An MCP tool may ask its client for input (elicitation, sampling, roots). The
bridge is that client, and the person or model who can answer is its bus
caller; so the bridge's tool asks its own caller in turn
(:func:`toolbus.ask_all`): the bus call ends with the server's requests, and
the caller calls again with the answers. How the server asked decides how the
answers go back:

* 2026-07-28 servers ask in their answer (``input_required``, SEP-2322): the
  bridge carries the server's ``requestState`` and requests to its next call
  (:func:`call_answering`), and sends the answers with that state, exactly as
  the server wrote it, on a new request;
* 2025 servers ask with requests of their own during the call, and cannot
  say which call they belong to: a call whose caller can answer gets a
  connection of its own (:class:`HeldCalls`; a session over HTTP, a process
  over stdio), held open while the caller answers. A caller's answer that
  reaches another replica of the bridge (or this one after the hold ended)
  makes the call again from the start, answering the server's questions with
  the answers given so far, in the order it asks them.

Calls whose caller cannot answer go on the toolset's shared connection; a
server asking there is told that its caller cannot answer, and an
``input_required`` answer becomes the caller's ``input-unavailable`` error.
Answers to an elicitation carry the form's defaults for what the person left
out (SEP-1034).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any

import anyio
import mcp_types as mcp
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp import Client

from toolbus import ask_all, carried
from toolbus.application.calls.asking import asking_call
from toolbus.domain.calls.input_requests import (
    InputAnswer,
    InputKind,
    InputRequest,
    answer_to_json,
    request_from_json,
    request_to_json,
)
from toolbus.domain.errors import ToolServiceError, WireError

log = logging.getLogger("toolbus.mcp")

#: Rounds of questions one call to a server may take.
MAX_ROUNDS = 10
_RESULTS: dict[InputKind, type[mcp.Result]] = {
    "elicitation": mcp.ElicitResult,
    "sampling": mcp.CreateMessageResult,
    "roots": mcp.ListRootsResult,
}

#: Sends one ``tools/call`` round: the answers and the state to send, or ``None``.
SendRound = Callable[
    [dict[str, Any] | None, str | None],
    Awaitable[mcp.CallToolResult | mcp.InputRequiredResult],
]


def can_answer() -> bool:
    """Whether the bus caller of the call being served can answer anything at all."""
    call = asking_call.get()
    return call is not None and bool(call.kinds)


def server_request(data: Any, where: str) -> InputRequest:
    """What an MCP server asks, as toolbus's request; a clear error for what it cannot pass on."""
    try:
        return request_from_json(data)
    except WireError as exc:
        raise ToolServiceError(f"{where} asks for input toolbus cannot pass on: {exc}") from None


def mcp_answer(request: InputRequest, answer: InputAnswer) -> mcp.Result:
    """The answer as the SDK's model of the result MCP's client sends."""
    return _RESULTS[request.kind].model_validate(answer_to_json(answer))


async def call_answering(send: SendRound, where: str) -> mcp.CallToolResult:
    """A 2026-07-28 ``tools/call``, its ``input_required`` rounds answered by the bus caller.

    The first call of a bus call sends no answers; each ``input_required`` the
    server answers is asked of the bus caller with the server's state carried
    to the caller's next call, which sends the answers with it (see the module docs).
    """
    given = carried()
    responses: dict[str, Any] | None = None
    state: str | None = None
    rounds = 0
    if isinstance(given, Mapping) and given.get("kind") == "mrtr":
        rounds = int(given["round"])
        requests = {key: server_request(value, where) for key, value in given["requests"].items()}
        answers = await ask_all({f"{rounds}.{key}": r for key, r in requests.items()}, carry=given)
        responses = {
            key: mcp_answer(request, answers[f"{rounds}.{key}"])
            for key, request in requests.items()
        }
        state = given["state"]
    delay = 0.05
    while True:
        result = await send(responses, state)
        if not isinstance(result, mcp.InputRequiredResult):
            return result
        rounds += 1
        if rounds > MAX_ROUNDS:
            raise ToolServiceError(f"{where} kept asking for input: {MAX_ROUNDS} rounds answered")
        state = result.request_state
        if not result.input_requests:  # only a state: the server wants to be asked again
            responses = None
            await anyio.sleep(delay)
            delay = min(delay * 2, 0.25)
            continue
        delay = 0.05
        asked = {
            key: server_request(
                value.model_dump(mode="json", by_alias=True, exclude_none=True), where
            )
            for key, value in result.input_requests.items()
        }
        carry = {
            "kind": "mrtr",
            "round": rounds,
            "state": state,
            "requests": {key: request_to_json(request) for key, request in asked.items()},
        }
        answers = await ask_all({f"{rounds}.{key}": r for key, r in asked.items()}, carry=carry)
        responses = {key: mcp_answer(r, answers[f"{rounds}.{key}"]) for key, r in asked.items()}


# ------------------------------------------------------------------ 2025 servers


class _Question:
    """One request a server sent during a held call, waiting for its answer."""

    def __init__(self, key: str, request: InputRequest) -> None:
        self.key = key
        self.request = request
        self.answered = anyio.Event()
        self.answer: InputAnswer | None = None


class HeldCall:
    """One call to a 2025 server on a connection of its own, its questions handed over as
    they come (:attr:`questions`), its end in :attr:`result` (or :attr:`error`)."""

    def __init__(self, call_id: str) -> None:
        self.id = call_id
        send: MemoryObjectSendStream[_Question | None]
        receive: MemoryObjectReceiveStream[_Question | None]
        send, receive = anyio.create_memory_object_stream(16)
        self._send = send
        self.questions = receive
        self.pending: _Question | None = None
        self.result: mcp.CallToolResult | None = None
        self.error: BaseException | None = None
        self.scope = anyio.CancelScope()
        self._count = 0

    def callbacks(self) -> dict[str, Any]:
        """The callbacks of this call's connection: each request becomes a question."""

        async def ask(kind: InputKind, params: Any) -> Any:
            self._count += 1
            request = server_request(
                {"method": METHODS_OF[kind], "params": params}, "the MCP server"
            )
            question = _Question(f"{kind}-{self._count}", request)
            await self._send.send(question)
            await question.answered.wait()
            assert question.answer is not None
            return mcp_answer(request, question.answer)

        async def elicit(context: Any, params: Any) -> Any:
            return await ask("elicitation", _dumped(params))

        async def sample(context: Any, params: Any) -> Any:
            return await ask("sampling", _dumped(params))

        async def roots(context: Any) -> Any:
            return await ask("roots", {})

        return {
            "elicitation_callback": elicit,
            "sampling_callback": sample,
            "list_roots_callback": roots,
        }

    async def ended(self, result: mcp.CallToolResult | None, error: BaseException | None) -> None:
        self.result, self.error = result, error
        await self._send.send(None)


METHODS_OF: dict[InputKind, str] = {
    "elicitation": "elicitation/create",
    "sampling": "sampling/createMessage",
    "roots": "roots/list",
}


def _dumped(params: Any) -> dict[str, Any]:
    dumped: dict[str, Any] = params.model_dump(mode="json", by_alias=True, exclude_none=True)
    return dumped


class HeldCalls:
    """A toolset's calls to a 2025 server whose callers can answer; see the module docs.

    Args:
        connect: a connection of a call's own to the server, with these callbacks.
        hold: seconds a held call may take, its caller's answers included.
    """

    def __init__(
        self,
        connect: Callable[[dict[str, Any]], AbstractAsyncContextManager[Client]],
        *,
        hold: float,
    ) -> None:
        self._connect = connect
        self.hold = hold
        self._held: dict[str, HeldCall] = {}
        #: Where held calls run (the toolset's connection's task group, while connected).
        self.group: TaskGroup | None = None

    @property
    def held(self) -> int:
        """Calls held now (waiting for their callers, or running)."""
        return len(self._held)

    async def call(
        self, tool: str, arguments: Mapping[str, Any], call: Callable[[Client], Awaitable[Any]]
    ) -> mcp.CallToolResult:
        """``call`` made on a connection of its own, its server's questions asked of the bus
        caller; resumed when the caller's answers come to this replica in time."""
        given = carried()
        held = None
        if isinstance(given, Mapping) and given.get("kind") == "held":
            held = self._held.get(str(given.get("call")))
        if held is None:
            held = self._start(call)
        carry = {"kind": "held", "call": held.id}
        while True:
            question = held.pending
            if question is None:
                with anyio.fail_after(self.hold):
                    question = await held.questions.receive()
                if question is None:  # the call ended
                    self._held.pop(held.id, None)
                    if held.error is not None:
                        raise held.error
                    assert held.result is not None
                    return held.result
                held.pending = question
            answers = await ask_all({question.key: question.request}, carry=carry)
            question.answer = answers[question.key]
            held.pending = None
            question.answered.set()

    def _start(self, call: Callable[[Client], Awaitable[Any]]) -> HeldCall:
        group = self.group
        if group is None:
            raise RuntimeError("calls are held only while the toolset is connected")
        held = HeldCall(uuid.uuid4().hex)
        self._held[held.id] = held

        async def run() -> None:
            result: mcp.CallToolResult | None = None
            error: BaseException | None = None
            with held.scope:
                held.scope.deadline = anyio.current_time() + self.hold
                try:
                    async with self._connect(held.callbacks()) as client:
                        result = await call(client)
                except Exception as exc:  # the caller's to hear, as from any call
                    error = exc
            if held.scope.cancelled_caught:
                self._held.pop(held.id, None)
                log.info("a call held for its caller's answers was given up after %g s", self.hold)
                return
            await held.ended(result, error)

        group.start_soon(run)
        return held
