"""Tools that ask their caller: :func:`ask`, :func:`ask_all`, :func:`can_ask`, :func:`carried`.

A tool that needs something only its caller has (a person's confirmation or a
missing detail, a completion from the caller's model, the caller's workspace
roots) asks for it inside its call::

    answer = await ask(Elicitation("Delete a.txt?", CONFIRM))
    if not (answer.accepted and answer.content.get("ok")):
        return "a.txt is kept"

A call is stateless on the bus, so asking *ends* it: the service answers with
the requests (an ``input-required`` answer) and a sealed state, and the caller
calls again with the answers and that state. The tool runs again from the
start, and now :func:`ask` returns the answer at once; so write the code before
an ask to be safe to run twice (read, don't write), or carry what it made to
the next call (``carry=``, read back with :func:`carried`). Answers given in
earlier rounds are kept in the state: a tool asking step by step sees every
earlier answer again on each call. Requests without a ``key`` are keyed by
kind and order (``elicitation-1``, ``sampling-2``), the same on every call
as long as the tool asks in the same order.

A caller says which kinds it can answer (the ``input-kinds`` property); asking
for another kind raises :class:`~toolbus.domain.calls.input_requests.InputUnavailable`
at once, which a tool may catch to do without (:func:`can_ask` tells
beforehand). Uncaught, the caller gets it as its answer: a clear error, never a
wait. A TrustGraph caller, or any that declares no kinds, can answer none.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextvars import ContextVar
from typing import Any, overload

from toolbus.application.identity.caller import serving
from toolbus.domain.calls.input_requests import (
    MAX_KEY,
    Elicitation,
    ElicitationAnswer,
    InputAnswer,
    InputAsk,
    InputKind,
    InputRequest,
    InputRequired,
    InputUnavailable,
    RootsAnswer,
    RootsRequest,
    Sampling,
    SamplingAnswer,
    answer_from_json,
    describe,
)


class _Keep:
    """No new carried value: keep what the tool carried before."""


_KEEP: Any = _Keep()


class AskingCall:
    """The input side of one call being served: what the caller can answer, the answers
    so far, what the tool carries. The service host makes one per call that may ask."""

    __slots__ = ("answers", "carried", "carry", "count", "kinds", "pending", "service", "streaming")

    def __init__(
        self,
        service: str,
        kinds: frozenset[InputKind],
        answers: Mapping[str, Any] | None = None,
        carried: Any = None,
    ) -> None:
        self.service = service
        self.kinds = kinds
        #: The caller's answers so far, as MCP's JSON, by key.
        self.answers: dict[str, Any] = dict(answers or {})
        #: What the tool carried from its last call, and what it carries to its next.
        self.carried = carried
        self.carry = carried
        #: Requests asked without a key, so far in this call.
        self.count = 0
        #: The question the tool asked and did not catch: the host answers with it.
        self.pending: InputRequired | None = None
        #: The tool sent a chunk of its answer: too late to ask.
        self.streaming = False


#: The call being served, when its caller can answer or brings answers (set by the host).
asking_call: ContextVar[AskingCall | None] = ContextVar("toolbus_asking", default=None)


@overload
async def ask(
    request: Elicitation, *, key: str | None = None, carry: Any = _KEEP
) -> ElicitationAnswer: ...
@overload
async def ask(
    request: Sampling, *, key: str | None = None, carry: Any = _KEEP
) -> SamplingAnswer: ...
@overload
async def ask(
    request: RootsRequest, *, key: str | None = None, carry: Any = _KEEP
) -> RootsAnswer: ...
async def ask(request: InputRequest, *, key: str | None = None, carry: Any = _KEEP) -> InputAnswer:
    """The caller's answer to ``request``; see the module docs.

    Returns at once when this call brought the answer (under ``key``, or the
    request's place among those asked without a key); otherwise ends the call
    with the request (raising :class:`InputRequired`, which the service host
    turns into the answer: do not catch it). ``carry`` is JSON the tool wants
    back on its next call (:func:`carried`).

    Raises :class:`InputUnavailable` when the caller cannot answer this kind,
    and :class:`RuntimeError` outside a call or after the first chunk of a
    streamed answer.
    """
    call = _current()
    if key is None:
        call.count += 1
        key = f"{request.kind}-{call.count}"
    answers = await ask_all({key: request}, carry=carry)
    return answers[key]


async def ask_all(
    requests: Mapping[str, InputRequest], *, carry: Any = _KEEP
) -> dict[str, InputAnswer]:
    """The caller's answers to several requests at once, by key: one round for all.

    The caller answers them together (MCP shows them at once). Answers this
    call brought are returned at once; if any is missing, the call ends asking
    for the missing ones. Raises as :func:`ask` does.
    """
    call = _current()
    if call.streaming:
        raise RuntimeError(
            "a tool asks its caller before it streams: ask() after the first chunk was sent "
            "cannot be answered (the chunks are out); ask first, then yield"
        )
    if not requests:
        raise ValueError("ask_all() needs at least one request")
    for key in requests:
        if not isinstance(key, str) or not key or len(key) > MAX_KEY:
            raise ValueError(f"a request's key must be 1 to {MAX_KEY} characters, not {key!r}")
    if carry is not _KEEP:
        call.carry = carry
    answered: dict[str, InputAnswer] = {}
    missing: dict[str, InputRequest] = {}
    for key, request in requests.items():
        given = call.answers.get(key)
        if given is None:
            missing[key] = request
            continue
        try:
            answered[key] = answer_from_json(request, given)
        except ValueError:
            missing[key] = request  # an answer that is no answer to this: asked again
    if not missing:
        return answered
    lacking = {key: r for key, r in missing.items() if r.kind not in call.kinds}
    if lacking:
        raise InputUnavailable(_cannot(call.kinds, lacking), InputAsk(lacking))
    question = InputRequired(
        f"tool service {call.service!r} asks its caller for input before it answers: "
        f"{describe(missing)}",
        InputAsk(missing),
    )
    call.pending = question
    raise question


def can_ask(kind: InputKind | InputRequest) -> bool:
    """Whether the caller of the call being served can answer this kind of request
    (``"elicitation"``, ``"sampling"``, ``"roots"``, or a request of that kind)."""
    call = asking_call.get()
    wanted = kind if isinstance(kind, str) else kind.kind
    return call is not None and wanted in call.kinds


def carried() -> Any:
    """What the tool carried to this call from the one that asked (``carry=``); ``None``
    on a first call."""
    call = asking_call.get()
    return None if call is None else call.carried


def _current() -> AskingCall:
    call = asking_call.get()
    if call is not None:
        return call
    if serving.get() is None:
        raise RuntimeError("ask() is only answered while a tool service is serving a call")
    # A call whose caller said it can answer nothing: asking fails, clearly.
    return AskingCall("this tool", frozenset())


def _cannot(kinds: frozenset[InputKind], lacking: Mapping[str, InputRequest]) -> str:
    can = ", ".join(sorted(kinds)) if kinds else "no input requests"
    return (
        f"this tool asks its caller for {describe(lacking)}, which its caller cannot give "
        f"(it answers {can}); call it through a door that relays such requests (MCP, the "
        "agent loop, toolbus call, the gateway with can_answer), or answer them in code"
    )
