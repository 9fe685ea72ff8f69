"""What the agent loop does next: pure decisions over model turns and call outcomes.

The loop (:mod:`toolbus.application.agent.loop`) asks these functions and does
what they say; everything here is a plain function of its arguments.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from toolbus.domain.agent.turns import ModelTurn, ToolCall

#: Why an agent request ended without an answer.
StopReason = Literal[
    "max-iterations",
    "deadline",
    "model-error",
    "access-denied",
    "state-refused",
    "too-many-sessions",
    "no-such-session",
    "cancelled",
    "budget-spent",
]


@dataclass(frozen=True, slots=True)
class CallTools:
    """Run these calls (concurrently), append their observations, ask the model again."""

    calls: tuple[ToolCall, ...]


@dataclass(frozen=True, slots=True)
class Answer:
    """The request is answered with ``text``."""

    text: str


@dataclass(frozen=True, slots=True)
class Stop:
    """The request ends without an answer; ``message`` says why, for the caller."""

    reason: StopReason
    message: str


def after_turn(
    turn: ModelTurn, *, iteration: int, max_iterations: int
) -> CallTools | Answer | Stop:
    """What a model turn means. ``iteration`` counts model turns, from 1.

    A turn without tool calls is the answer. A turn with tool calls is run,
    unless it was the last turn allowed: then no call is made (the model would
    never see its result) and the request stops.
    """
    if not turn.tool_calls:
        return Answer(turn.text)
    if iteration >= max_iterations:
        return Stop(
            "max-iterations",
            f"the model still wanted to call tools after {max_iterations} iterations "
            f"(the limit); no answer was given. Raise max_iterations, or ask a narrower question",
        )
    return CallTools(turn.tool_calls)


@dataclass(frozen=True, slots=True)
class Observed:
    """What the loop needs to know about one call's outcome to decide what comes next."""

    ok: bool
    observation: str
    after_execution: str | None


def after_calls(outcomes: Sequence[Observed]) -> Answer | None:
    """The answer, when a successful call's ``after-execution`` is ``terminate``; else go on.

    With several such calls in one turn, the first (in the model's order) answers.
    ``suspend`` (and a failed or refused call) lets the loop go on.
    """
    for outcome in outcomes:
        if outcome.ok and outcome.after_execution == "terminate":
            return Answer(outcome.observation)
    return None


@dataclass(slots=True)
class TextRouting:
    """Decides whether a turn's streamed text is a *thought* or the *answer*.

    A model's text comes before it is known whether the turn will call tools.
    Text of a turn that calls tools is a thought; text of the last turn is the
    answer. Text is held back until the turn shows which it is: a tool call
    makes everything so far a thought; more than ``hold`` characters without
    one commits the turn to being the answer, and text then streams as it
    comes. (A turn that writes more than ``hold`` characters and then still
    calls a tool has sent that text as an answer message; its
    ``end_of_message`` closes it, and the dialog goes on.)
    """

    hold: int = 200
    kind: Literal["undecided", "thought", "answer"] = "undecided"
    held: str = ""

    def text(self, delta: str) -> tuple[Literal["thought", "answer"], str] | None:
        """Feed a text delta; returns ``(kind, text)`` to send now, or ``None`` to keep holding."""
        if self.kind != "undecided":
            return self.kind, delta
        self.held += delta
        if len(self.held) <= self.hold:
            return None
        self.kind = "answer"
        released, self.held = self.held, ""
        return "answer", released

    def tool_call(self) -> tuple[Literal["thought", "answer"], str] | None:
        """A tool call started: held text is a thought. Returns the text to send now, if any."""
        if self.kind == "undecided":
            self.kind = "thought"
            released, self.held = self.held, ""
            return ("thought", released) if released else None
        return None

    def end(self) -> tuple[Literal["thought", "answer"], str]:
        """The turn ended: what is still held, and what the turn's text turned out to be."""
        if self.kind == "undecided":
            self.kind = "answer"
        released, self.held = self.held, ""
        return self.kind, released
