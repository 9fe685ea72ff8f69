"""The service host's side of a tool that asks its caller: the call's input side, and the
answer that asks.

Before the tool runs, :func:`asking_of` reads what the caller can answer
(``input-kinds``) and the answers it brings, with those its sealed state holds
(:mod:`toolbus.application.calls._input_state`); the tool sees them through
:mod:`toolbus.application.calls.asking`. When the tool asks, :func:`answer_asking`
answers the call with its questions and a newly sealed state, which the call made
again with the answers brings back.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from toolbus.application.calls._input_state import InputStates
from toolbus.application.calls._replies import Reply
from toolbus.application.calls.asking import AskingCall
from toolbus.domain.calls import wire
from toolbus.domain.calls.input_requests import (
    InputAsk,
    InputRequired,
    InputUnavailable,
    describe,
    kinds_of,
)


def asking_of(
    states: InputStates, user: str, request: wire.ToolRequest, properties: Mapping[str, str]
) -> AskingCall:
    """The input side of a call: what its caller can answer, and the answers it brings
    (with those its state holds, which must open: :class:`InvalidInputState`)."""
    answers: dict[str, Any] = {}
    carried = None
    given = request.input
    if given is not None:
        if given.state is not None:
            opened = states.open(user, request.config, request.arguments, given.state)
            answers, carried = opened.answers, opened.carried
        answers.update(given.responses)
    kinds = kinds_of(properties.get(wire.PROP_INPUT_KINDS))
    return AskingCall(states.service, kinds, answers, carried)


async def answer_asking(
    states: InputStates,
    reply: Reply,
    asking: AskingCall | None,
    asked: InputRequired,
    user: str,
    request: wire.ToolRequest,
) -> None:
    """Answer with the tool's questions and the sealed state its next call brings back."""
    if asking is None or asked is not asking.pending:
        # Not this tool's question: a tool it called asked, and such questions do not
        # travel further up.
        raise InputUnavailable(
            f"tool service {states.service!r} called a tool that asks for input "
            f"({describe(asked.ask.requests)}); questions are not passed further up"
        )
    state = states.seal(user, request.config, request.arguments, asking.answers, asking.carry)
    await reply.error(asked.error_type, str(asked), InputAsk(asked.ask.requests, state))
