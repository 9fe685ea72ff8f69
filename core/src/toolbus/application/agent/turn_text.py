"""A model turn's text, sent while it streams: thought or answer chunks, the last one marked.

The text of a turn comes before it is known whether the turn will call tools;
:class:`~toolbus.domain.agent.decisions.TextRouting` decides what it is, and
:class:`TurnText` sends what it releases as ``thought`` or ``answer``
:class:`~toolbus.domain.agent.wire.AgentEvent` chunks. The last chunk is held
until the next one comes or the turn ends, so that a message's last chunk can
say it is the last; the answer text already sent is remembered, and the final
event carries only the rest.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Literal

from toolbus.domain.agent.decisions import TextRouting
from toolbus.domain.agent.wire import AgentEvent

TextKind = Literal["thought", "answer"]


class TurnText:
    """The streamed text of one request's turns, one turn at a time; see the module docs."""

    def __init__(self, emit: Callable[[AgentEvent], Awaitable[None]], hold: int) -> None:
        self._emit = emit
        self._hold = hold
        self._routing = TextRouting(hold=hold)
        self._pending: tuple[TextKind, str] | None = None
        #: Answer text of the current turn already sent in chunks.
        self.streamed = ""

    def start(self) -> None:
        """A new turn: nothing held, nothing sent."""
        self._routing = TextRouting(hold=self._hold)
        self._pending = None
        self.streamed = ""

    async def text(self, delta: str, state: str) -> None:
        await self._chunk(self._routing.text(delta), state)

    async def tool_call(self, state: str) -> None:
        await self._chunk(self._routing.tool_call(), state)

    async def calls_made(self, state: str) -> None:
        """The turn ended calling tools: what is held goes out, its message closed."""
        await self._chunk(self._routing.tool_call(), state)
        await self._chunk(self._routing.end(), state)
        if self._pending is not None:
            kind, text = self._pending
            await self._send(kind, text, state, last=True)
        self.streamed = ""

    async def thought(self, text: str, state: str) -> None:
        """A whole thought at once (a request that does not stream)."""
        await self._send("thought", text, state, last=True)

    def unsent(self, answer: str) -> str:
        """What of ``answer`` was not streamed yet (all of it, if what was sent differs)."""
        return answer[len(self.streamed) :] if answer.startswith(self.streamed) else answer

    async def _chunk(self, released: tuple[TextKind, str] | None, state: str) -> None:
        """Hold a piece of streamed text, sending the piece held before it."""
        if released is None or not released[1]:
            return
        if self._pending is not None:
            kind, text = self._pending
            await self._send(kind, text, state, last=False)
        self._pending = released

    async def _send(self, kind: TextKind, text: str, state: str, *, last: bool) -> None:
        if kind == "answer":
            self.streamed += text
        self._pending = None
        await self._emit(
            AgentEvent(chunk_type=kind, content=text, end_of_message=last, state=state)
        )
