"""Tools that ask their caller, relayed to the MCP client: elicitation, sampling, roots.

A bus tool may answer a call with input requests (docs/tool-services.md#tools-that-ask).
The door says which kinds its client can answer, from the capabilities the
client declared (``elicitation`` with form mode, ``sampling``, ``roots``), and
relays what the tool asks the way the client's protocol revision says:

* 2025 revisions, which have a session: the door sends the client
  ``elicitation/create``, ``sampling/createMessage`` and ``roots/list``
  requests during the ``tools/call``, calls the tool again with the answers,
  and answers the ``tools/call`` once the tool does (:class:`SessionRelay`);
* 2026-07-28, which has none: the ``tools/call`` answers an ``input_required``
  result (SEP-2322) holding the tool's requests, as the tool wrote them, and
  its sealed state as the ``requestState``; the client calls again with its
  ``inputResponses`` and that state, and the door continues the call with them
  (:func:`continuation_of`).

A tool asking for a kind the client did not declare is refused with ``-32021``
(missing required client capability, HTTP 400), naming the capability; a state
that does not open (altered, another call's, expired) with ``-32602``. Tasks
relay through the task instead (:mod:`toolbus_mcp.serving.tasks`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import anyio
import mcp_types as mcp
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp.shared.message import ServerMessageMetadata
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import TypeAdapter

from toolbus.application.agent.outcomes import CallOutcome
from toolbus.domain.calls.input_requests import (
    InputAnswer,
    InputAsk,
    InputKind,
    InputReply,
    InputUnavailable,
    InvalidInputState,
    answer_from_json,
    request_to_json,
)

#: What a door's ``requestState`` for a tool's input starts with (an approval's is its id).
INPUT_STATE_PREFIX = "input."

_CAPABILITIES: dict[InputKind, mcp.ClientCapabilities] = {
    "elicitation": mcp.ClientCapabilities(elicitation=mcp.ElicitationCapability()),
    "sampling": mcp.ClientCapabilities(sampling=mcp.SamplingCapability()),
    "roots": mcp.ClientCapabilities(roots=mcp.RootsCapability()),
}
_RESULTS: dict[InputKind, type[mcp.Result]] = {
    "elicitation": mcp.ElicitResult,
    "sampling": mcp.CreateMessageResult,
    "roots": mcp.ListRootsResult,
}
_SERVER_REQUEST: TypeAdapter[Any] = TypeAdapter(mcp.ServerRequest)


def client_kinds(ctx: ServerRequestContext[Any, Any]) -> frozenset[InputKind]:
    """The kinds of input the request's client declared it can give."""
    kinds = {
        kind
        for kind, wanted in _CAPABILITIES.items()
        if ctx.session.check_client_capability(wanted)
    }
    declared = ctx.session.client_capabilities
    elicitation = declared.elicitation if declared is not None else None
    if elicitation is not None and elicitation.form is None and elicitation.url is not None:
        kinds.discard("elicitation")  # URL mode only: no forms
    return frozenset(kinds)


class HandBack:
    """The 2026-07-28 door's relay: it says what the client can answer, and hands each
    question back, to be answered with the ``tools/call``'s ``input_required`` result."""

    def __init__(self, kinds: frozenset[InputKind]) -> None:
        self.kinds = kinds

    async def answer(self, asked: InputAsk) -> None:
        return None


class SessionRelay:
    """The 2025 door's relay: each question goes to the client as a request of its own
    during the ``tools/call``, all of a round at once."""

    def __init__(self, ctx: ServerRequestContext[Any, Any], kinds: frozenset[InputKind]) -> None:
        self.ctx = ctx
        self.kinds = kinds

    async def answer(self, asked: InputAsk) -> Mapping[str, InputAnswer]:
        answers: dict[str, InputAnswer] = {}
        refusals: list[str] = []

        async def one(key: str, cancel: anyio.CancelScope) -> None:
            request = asked.requests[key]
            sent = _SERVER_REQUEST.validate_python(request_to_json(request))
            metadata = ServerMessageMetadata(related_request_id=self.ctx.request_id)
            try:
                result = await self.ctx.session.send_request(
                    sent, _RESULTS[request.kind], metadata=metadata
                )
            except MCPError as exc:
                # Raised here it would reach the caller wrapped in the task group's
                # exception group; the round stops, and the refusal is raised after it.
                refusals.append(
                    f"the MCP client did not answer the tool's {request.kind} request: {exc}"
                )
                cancel.cancel()
                return
            given = result.model_dump(mode="json", by_alias=True, exclude_none=True)
            answers[key] = answer_from_json(request, given)

        async with anyio.create_task_group() as group:
            for key in asked.requests:
                group.start_soon(one, key, group.cancel_scope)
        if refusals:
            raise InputUnavailable(refusals[0])
        return answers


def relay_for(ctx: ServerRequestContext[Any, Any]) -> HandBack | SessionRelay | None:
    """How this request's questions reach its client (see the module docs); ``None`` for a
    client that can answer none (a tool that asks then hears so at once)."""
    kinds = client_kinds(ctx)
    if not kinds:
        return None
    if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
        return HandBack(kinds)
    if not ctx.session.can_send_request:
        # One JSON body per request (--json-response): no channel to ask on mid-call.
        return SessionRelay(ctx, frozenset())
    return SessionRelay(ctx, kinds)


def continuation_of(params: mcp.CallToolRequestParams) -> InputReply | None:
    """The answers a 2026-07-28 client brings to what a tool asked, with its state; ``None``
    for a call that brings none (or answers an approval: its state is the approval's id)."""
    state = params.request_state
    if state is not None and not state.startswith(INPUT_STATE_PREFIX):
        return None
    responses = params.input_responses or {}
    if state is None and not responses:
        return None
    return InputReply(
        {
            key: value.model_dump(mode="json", by_alias=True, exclude_none=True)
            for key, value in responses.items()
        },
        None if state is None else state.removeprefix(INPUT_STATE_PREFIX),
    )


def asked_result(
    outcome: CallOutcome, ctx: ServerRequestContext[Any, Any]
) -> dict[str, Any] | None:
    """What the ``tools/call`` answers when the call ended asking: an ``input_required``
    result; ``None`` when it did not. Raises the protocol errors of the module docs."""
    if outcome.error_type == InvalidInputState.error_type:
        raise MCPError(
            mcp.INVALID_PARAMS,
            f"requestState: {outcome.observation}",
        )
    asked = outcome.asked
    if asked is None:
        return None
    if outcome.error_type == InputUnavailable.error_type:
        missing = asked.kinds - client_kinds(ctx)
        if not missing:
            return None  # declared, but no way to ask mid-call: the tool's error result
        names = ", ".join(sorted(missing))
        raise MCPError(
            mcp.MISSING_REQUIRED_CLIENT_CAPABILITY,
            f"tool {outcome.tool!r} asks its caller for {names}, which this client did not "
            f"declare; declare the {names} capability to use it",
            data={"requiredCapabilities": {kind: {} for kind in sorted(missing)}},
        )
    result: dict[str, Any] = {
        "resultType": "input_required",
        "inputRequests": {key: request_to_json(r) for key, r in asked.requests.items()},
    }
    if asked.state is not None:
        result["requestState"] = INPUT_STATE_PREFIX + asked.state
    return result
