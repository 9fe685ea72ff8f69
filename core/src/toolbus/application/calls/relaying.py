"""Callers of tools that ask: relay the requests (:func:`relaying`), or bring the answers
(:func:`continuing`).

A tool that asks its caller for input (:mod:`toolbus.application.calls.asking`)
ends its call with an ``input-required`` answer: its requests and a sealed
state. Whoever makes the call decides what happens then:

* inside :func:`relaying`, the call's :class:`InputRelay` is asked. It answers
  (a person at a terminal, the caller's model, an MCP client over its
  session), and the tool is called again with the answers and the state, round
  after round, until it answers; the caller sees one call. A relay may also
  answer ``None``: the call then ends asking, and the
  :class:`~toolbus.domain.calls.input_requests.InputRequired` it raises (or the
  session's outcome, :attr:`~toolbus.application.agent.outcomes.CallOutcome.asked`)
  holds the requests and the state, for a caller that gets its answers later
  (an MCP client's next request, a task's update) and then calls again inside
  :func:`continuing`.
* without a relay, the caller says it can answer nothing (no ``input-kinds``),
  and the tool's request is an :class:`~toolbus.domain.calls.input_requests.InputUnavailable`
  error at once: a clear error, never a wait.

The relay's :attr:`InputRelay.kinds` travel with every call made in the block
(``input-kinds``), so a tool asks only for what its caller can give.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Protocol, TypeVar

from toolbus.domain.calls.input_requests import (
    InputAnswer,
    InputAsk,
    InputKind,
    InputReply,
    InputRequired,
    kinds_property,
)
from toolbus.domain.errors import ToolServiceError

#: Rounds of questions one call may take before it is given up.
MAX_ROUNDS = 10

T = TypeVar("T")


class InputRelay(Protocol):
    """Answers what tools ask, for the calls made inside :func:`relaying`."""

    @property
    def kinds(self) -> frozenset[InputKind]:
        """The kinds of request it can answer (``elicitation``, ``sampling``, ``roots``)."""
        ...

    async def answer(self, asked: InputAsk) -> Mapping[str, InputAnswer] | None:
        """Answers to ``asked.requests`` by key (those left out are asked again), or
        ``None`` to end the call asking, for a caller that answers later."""
        ...


class _Continued:
    """Answers a caller brings to the next call of a block: taken once."""

    __slots__ = ("kinds", "reply")

    def __init__(self, reply: InputReply | None, kinds: frozenset[str]) -> None:
        self.reply = reply
        self.kinds = kinds


_relay: ContextVar[InputRelay | None] = ContextVar("toolbus_input_relay", default=None)
_continued: ContextVar[_Continued | None] = ContextVar("toolbus_input_continued", default=None)


@contextmanager
def relaying(relay: InputRelay | None) -> Iterator[None]:
    """Tool calls made in this block relay what their tools ask to ``relay`` (``None``:
    to nobody, inside another block that relays)."""
    token = _relay.set(relay)
    try:
        yield
    finally:
        _relay.reset(token)


@contextmanager
def continuing(reply: InputReply, kinds: Iterable[InputKind] = ()) -> Iterator[None]:
    """The first tool call made in this block continues one that asked: it brings
    ``reply`` (the answers, and the state given back as it came). ``kinds`` are what
    the caller can answer should the tool ask again (besides the relay's, if any)."""
    token = _continued.set(_Continued(reply, frozenset(kinds)))
    try:
        yield
    finally:
        _continued.reset(token)


def current_relay() -> InputRelay | None:
    return _relay.get()


def continued_state() -> str | None:
    """The sealed state the next call made here brings back to a tool that asked (inside
    :func:`continuing`, until that call is made); ``None`` for a call that continues none.
    A front door's limits tell by it the call that asked, made again, from a new one."""
    continued = _continued.get()
    reply = None if continued is None else continued.reply
    return None if reply is None else reply.state


class InputRound:
    """How one call meets the questions of a tool that asks: what it says it can answer,
    the answers it brings, and the relay it asks. Made per call by :func:`input_round`."""

    __slots__ = ("kinds", "relay", "reply")

    def __init__(
        self, relay: InputRelay | None, reply: InputReply | None, kinds: frozenset[str]
    ) -> None:
        self.relay = relay
        self.reply = reply
        self.kinds = kinds

    @property
    def kinds_property(self) -> str:
        """The ``input-kinds`` property (``""``: the caller can answer nothing)."""
        return kinds_property(self.kinds)

    async def next(self, asked: InputRequired, rounds: int, tool: str) -> InputReply:
        """The reply to make the call again with; re-raises ``asked`` when nobody here
        answers (no relay, or the relay hands the call back)."""
        relay = self.relay
        if relay is None:
            raise asked
        if rounds >= MAX_ROUNDS:
            raise ToolServiceError(
                f"tool {tool!r} kept asking for input: {MAX_ROUNDS} rounds were answered and it "
                "asked again; check that the answers given fit what it asks"
            )
        answers = await relay.answer(asked.ask)
        if answers is None:
            raise asked
        self.reply = InputReply.of(answers, asked.ask.state)
        return self.reply


def input_round() -> InputRound | None:
    """The input side of the call about to be made, or ``None`` for the usual call (no
    relay, no answers brought). Takes the answers of :func:`continuing`: one call each."""
    relay = _relay.get()
    continued = _continued.get()
    if relay is None and continued is None:
        return None
    kinds: frozenset[str] = frozenset(relay.kinds) if relay is not None else frozenset()
    reply = None
    if continued is not None:
        kinds |= continued.kinds
        reply, continued.reply = continued.reply, None
    return InputRound(relay, reply, kinds)


async def answered(
    round_: InputRound, tool: str, call: Callable[[InputReply | None], Awaitable[T]]
) -> T:
    """``call`` made with the round's reply, and again with each answer the relay gives,
    until the tool answers."""
    rounds = 0
    reply = round_.reply
    while True:
        try:
            return await call(reply)
        except InputRequired as asked:
            reply = await round_.next(asked, rounds, tool)
            rounds += 1
