"""The agent loop: a model, a session's tools, and turns until there is an answer.

One :meth:`AgentLoop.run` answers one :class:`~toolbus.domain.agent.wire.AgentRequest`::

    loop = AgentLoop(llm, tools)
    result = await loop.run(AgentRequest(question="...", user="alice"), emit=send)

Each request gets its own :class:`~toolbus.application.agent.session.AgentSession`
(access check, groups and states, audit record), opened by the loop's
:class:`~toolbus.application.agent.session_sources.Sessions`: a front door's
(``toolbus.application.doors``), which also continues a conversation an earlier
request ended in, or :class:`~toolbus.application.agent.session_sources.PlainSessions`
over a tools facade. The configured ``on_request_start`` hooks run once,
before the first turn. Every iteration
offers the model the session's tools *for the current state*, so a transition
made by one call changes what the model sees on the next turn. The tool calls
of one turn run concurrently; their observations go back to the model in the
order it made the calls. A successful call whose ``after-execution`` is
``terminate`` answers the request with its observation.

Every step is reported through ``emit`` as an
:class:`~toolbus.domain.agent.wire.AgentEvent` (thought, action, observation,
answer, error); the last one has ``end_of_stream`` set and carries the final
state, so that a caller can continue the workflow with its next request.

With an OpenTelemetry SDK recording, a request is an ``invoke_agent`` span and
each model turn a ``chat`` span under it, beside the tool calls' ``execute_tool``
spans (see :mod:`toolbus.application.tracing.conventions`).

A tool that asks its caller for input is answered by the run
(:mod:`~toolbus.application.agent.answering`): a completion by the loop's
model, a person's answer by the run's user, asked through an ``input`` event
and ``ask_user``, the workspace roots by ``roots``.

Limits: at most ``max_iterations`` model turns, and ``time_limit`` seconds of
wall clock for the whole request; either ends it with an ``error`` event.
Cancelling ``run`` cancels the tool calls in flight; the audit record says
``cancelled``.

Beside the loop: where a run's progress is written, so that another replica
goes on with it (:mod:`~toolbus.application.agent.checkpoints`), the events it
reports (:mod:`~toolbus.application.agent.events`) and a turn's streamed text
(:mod:`~toolbus.application.agent.turn_text`).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio

from toolbus.application.agent import events
from toolbus.application.agent.answering import AskUser, RunRelay
from toolbus.application.agent.asking import ApprovalAnswer, listening
from toolbus.application.agent.audit import AuditSink
from toolbus.application.agent.checkpoints import (
    Checkpoint,
    RunCheckpoints,
    RunProgress,
    run_call_id,
)
from toolbus.application.agent.code_hooks import CompiledHooks
from toolbus.application.agent.llm import LLM, LLMError, ToolCallStarted
from toolbus.application.agent.outcomes import CallOutcome
from toolbus.application.agent.session import AgentSession
from toolbus.application.agent.session_sources import PlainSessions, Sessions
from toolbus.application.agent.turn_text import TurnText
from toolbus.application.calls.client import sending_as
from toolbus.application.calls.metrics import ToolbusMetrics, default_metrics
from toolbus.application.calls.relaying import relaying
from toolbus.application.calls.tools import Tools
from toolbus.application.tracing import conventions
from toolbus.application.tracing import propagation as tracing
from toolbus.domain.access.approvals import Approval
from toolbus.domain.access.permissions import Permissions
from toolbus.domain.agent.conversation import assistant_message, initial_messages
from toolbus.domain.agent.decisions import (
    Answer,
    CallTools,
    Observed,
    Stop,
    StopReason,
    after_calls,
    after_turn,
)
from toolbus.domain.agent.turns import ModelTurn, TextDelta, ToolCall, Usage
from toolbus.domain.agent.wire import (
    AgentEvent,
    AgentRequest,
    EventError,
)
from toolbus.domain.calls.input_requests import InputAnswer, InputAsk, Root
from toolbus.domain.errors import AccessDenied, LimitReached, SessionNotFound

log = logging.getLogger("toolbus.agent")

#: Where events go: a bus publisher, a list, a terminal.
Emit = Callable[[AgentEvent], Awaitable[None]]

DEFAULT_MAX_ITERATIONS = 10
DEFAULT_TIME_LIMIT = 300.0


@dataclass(frozen=True, slots=True)
class AgentLimits:
    """How far one request may go.

    ``max_iterations``: model turns per request. ``time_limit``: seconds of wall
    clock per request, model and tools included. ``answer_hold``: characters of
    streamed text held back until a turn shows whether it is a thought or the
    answer (see :class:`~toolbus.domain.agent.decisions.TextRouting`).
    """

    max_iterations: int = DEFAULT_MAX_ITERATIONS
    time_limit: float = DEFAULT_TIME_LIMIT
    answer_hold: int = 200

    def __post_init__(self) -> None:
        if self.max_iterations < 1:
            raise ValueError(f"max_iterations must be at least 1, not {self.max_iterations}")
        if not self.time_limit > 0:
            raise ValueError(
                f"time_limit must be a positive number of seconds, not {self.time_limit}"
            )
        if self.answer_hold < 0:
            raise ValueError(f"answer_hold must not be negative, not {self.answer_hold}")


@dataclass(slots=True)
class AgentResult:
    """How a request ended: the answer or the error, the final state, and what it cost."""

    request_id: str
    state: str
    answer: str | None = None
    error: EventError | None = None
    model: str = ""
    iterations: int = 0
    usage: Usage = field(default_factory=Usage)

    @property
    def ok(self) -> bool:
        return self.error is None


async def _discard(event: AgentEvent) -> None:
    return None


class AgentLoop:
    """Answers agent requests with ``llm`` and the sessions ``sessions`` opens.

    Args:
        llm: the model (any :class:`~toolbus.application.agent.llm.LLM`).
        sessions: a front door's :class:`Sessions`, or a tools facade (then
            :class:`PlainSessions` with the options below).
        limits: iterations, wall-clock limit, held-back text.
        system_prompt: sent first in every chat, when given.
        metrics: the loop records its own metrics (requests, iterations, tokens) here.
        audit, permissions, code_hooks, tool_timeout, default_user: with a tools
            facade, for :class:`PlainSessions` (a door has its own).
        checkpoints: where each request's progress is written after every step
            (:class:`~toolbus.application.agent.checkpoints.RunCheckpoints`), so that
            a request delivered again after its replica died goes on from there.
        ask_user: how a run asks its user what a tool asks (a form): told the
            requests after the ``input`` event went out, it returns the answers.
            Without it (here or per run), tools learn the user cannot be asked.
        roots: the workspace roots a tool may ask the run for.
    """

    def __init__(
        self,
        llm: LLM,
        sessions: Sessions | Tools,
        *,
        limits: AgentLimits | None = None,
        system_prompt: str | None = None,
        audit: AuditSink | None = None,
        metrics: ToolbusMetrics | None = None,
        permissions: Permissions | None = None,
        code_hooks: CompiledHooks | None = None,
        tool_timeout: float | None = None,
        default_user: str = "anonymous",
        checkpoints: RunCheckpoints | None = None,
        ask_user: AskUser | None = None,
        roots: Sequence[Root] = (),
    ) -> None:
        self.llm = llm
        self.ask_user = ask_user
        self.roots = tuple(roots)
        self.checkpoints = checkpoints
        self.limits = limits or AgentLimits()
        self.system_prompt = system_prompt
        self.metrics = default_metrics() if metrics is None else metrics
        self.metrics.know_models(llm.model, provider_of(llm))
        if isinstance(sessions, Tools):
            sessions = PlainSessions(
                sessions,
                audit=audit,
                metrics=self.metrics,
                permissions=permissions,
                code_hooks=code_hooks,
                timeout=tool_timeout,
                default_user=default_user,
            )
        self.sessions: Sessions = sessions

    async def run(
        self,
        request: AgentRequest,
        *,
        emit: Emit = _discard,
        request_id: str | None = None,
        ask_user: AskUser | None = None,
    ) -> AgentResult:
        """Answer ``request``, reporting each step through ``emit``; returns how it ended.

        ``ask_user`` asks this run's user what a tool asks (else the loop's).

        Refused access or state, too many sessions, an unknown session, model
        failures, the iteration and time limits all end in an ``error`` event
        (and ``result.error``), never an exception. Failures of the bus itself
        propagate, as from :meth:`AgentSession.call`.
        """
        request_id = request_id or str(uuid.uuid4())
        model, provider = self.llm.model, provider_of(self.llm)
        # One invoke_agent span per request, parent of its model turns and tool calls.
        with tracing.hop("internal", None, conventions.agent_request, model, provider, request_id):
            run = _Run(self, request, emit, request_id, ask_user or self.ask_user)
            result = await self._run(run, request, request_id)
            if tracing.recording():
                usage = result.usage
                tracing.annotate(conventions.usage(usage.input_tokens, usage.output_tokens))
                if result.error is not None:
                    tracing.failed(result.error.type)
        return result

    async def _run(self, run: _Run, request: AgentRequest, request_id: str) -> AgentResult:
        state = request.state or "undefined"
        checkpoints = self.checkpoints
        saved = None if checkpoints is None else await checkpoints.load(request_id)
        try:
            if saved is None:
                session = await self.sessions.open(request, request_id)
            else:
                log.info(
                    "agent request %s goes on from its checkpoint after %d iteration(s)",
                    request_id,
                    saved.iterations,
                )
                session = await self.sessions.resume(request, saved.session)
        except AccessDenied as exc:
            reason: StopReason = (
                "state-refused" if exc.error_type == "state-refused" else "access-denied"
            )
            return await run.stop(Stop(reason, str(exc)), state=state)
        except LimitReached as exc:
            return await run.stop(Stop("too-many-sessions", str(exc)), state=state)
        except SessionNotFound as exc:
            return await run.stop(Stop("no-such-session", str(exc)), state=state)
        async with session:
            result = await run.answer(session, saved)
        if checkpoints is not None:
            # Answered: nothing for another replica to go on with. (A run cut off by an
            # exception keeps its checkpoint, for the request delivered again.)
            with anyio.CancelScope(shield=True):
                await checkpoints.finish(request_id)
        return result


class _Run:
    """One request's run of the loop: its chat, counters and events."""

    def __init__(
        self,
        loop: AgentLoop,
        request: AgentRequest,
        emit: Emit,
        request_id: str,
        ask_user: AskUser | None = None,
    ) -> None:
        self.loop = loop
        self.ask_user = ask_user
        self.llm = loop.llm
        self.limits = loop.limits
        self.request = request
        self.emit = emit
        self.request_id = request_id
        self.iterations = 0
        self.usage = Usage()
        #: The session a later request continues this one with, once it ends.
        self.held: str | None = None
        self._text = TurnText(emit, loop.limits.answer_hold)
        self._progress = (
            None if loop.checkpoints is None else RunProgress(loop.checkpoints, request_id)
        )

    async def answer(self, session: AgentSession, saved: Checkpoint | None = None) -> AgentResult:
        outcome: Answer | Stop
        started = time.monotonic()
        with anyio.move_on_after(self.limits.time_limit) as deadline:
            try:
                if saved is None:
                    messages = await session.start(
                        initial_messages(self.request, self.loop.system_prompt)
                    )
                else:
                    messages = list(saved.messages)
                    self.iterations = saved.iterations
                    self.usage = Usage(saved.input_tokens, saved.output_tokens)
                outcome = await self._iterate(session, messages, saved)
            except LLMError as exc:
                outcome = Stop("model-error", f"the model {self.llm.model!r} failed: {exc}")
        if deadline.cancelled_caught:
            seconds = time.monotonic() - started
            outcome = Stop(
                "deadline",
                f"the request ran out of time after {seconds:.1f} s (the limit is "
                f"{self.limits.time_limit:g} s); tool calls in flight were cancelled",
            )
        self.held = await self.loop.sessions.keep(self.request, session)
        if isinstance(outcome, Stop):
            return await self.stop(outcome, state=session.state)
        unsent = self._text.unsent(outcome.text)
        await self.emit(self._final("answer", unsent, session.state))
        return self._result(session.state, answer=outcome.text)

    async def stop(self, stop: Stop, *, state: str) -> AgentResult:
        log.info("agent request %s ended without an answer: %s", self.request_id, stop.reason)
        error = EventError(type=stop.reason, message=stop.message)
        event = self._final("error", stop.message, state)
        await self.emit(event.model_copy(update={"error": error}))
        return self._result(state, error=error)

    async def _iterate(
        self, session: AgentSession, messages: list[dict[str, Any]], saved: Checkpoint | None
    ) -> Answer | Stop:
        model, provider = self.llm.model, provider_of(self.llm)
        metrics = self.loop.metrics
        if saved is not None and saved.pending is not None:
            # The last turn's calls, as far as they were answered before the hand-over.
            pending = RunProgress.pending_calls(saved)
            answered = await self._answer_calls(session, messages, pending, saved.answered)
            if answered is not None:
                return answered
        for iteration in range(self.iterations + 1, self.limits.max_iterations + 1):
            with tracing.hop("client", None, conventions.model_turn, model, provider):
                started = time.monotonic()
                try:
                    turn = await self._turn(session, messages)
                except LLMError:
                    metrics.model_turn(
                        provider, model, time.monotonic() - started, error_type="model-error"
                    )
                    raise
                metrics.model_turn(
                    provider,
                    model,
                    time.monotonic() - started,
                    turn.usage.input_tokens,
                    turn.usage.output_tokens,
                )
                if tracing.recording():
                    reasons = [turn.stop_reason] if turn.stop_reason else []
                    tracing.annotate(
                        conventions.usage(
                            turn.usage.input_tokens, turn.usage.output_tokens, reasons
                        )
                    )
            self.iterations = iteration
            self.usage += turn.usage
            session.record_agent_run(
                self.llm.model,
                iteration,
                input_tokens=self.usage.input_tokens,
                output_tokens=self.usage.output_tokens,
            )
            decision = after_turn(
                turn, iteration=iteration, max_iterations=self.limits.max_iterations
            )
            if not isinstance(decision, CallTools):
                return decision
            messages.append(assistant_message(turn))
            answered = await self._answer_calls(session, messages, decision.calls, {})
            if answered is not None:
                return answered
        # Only a run resumed after its last allowed turn's calls gets here.
        return Stop(
            "max-iterations",
            f"the run used its {self.limits.max_iterations} iterations before it was "
            "handed over; no answer was given",
        )

    async def _answer_calls(
        self,
        session: AgentSession,
        messages: list[dict[str, Any]],
        calls: Sequence[ToolCall],
        answered: dict[str, CallOutcome],
    ) -> Answer | None:
        """Make a turn's calls (those not ``answered`` already) and add their observations
        to the chat, checkpointing before, after each call and after all of them."""
        if self._progress is not None:
            self._progress.chat = messages
        await self._checkpoint(session, messages, calls, answered)
        outcomes = await self._call(session, calls, answered)
        messages.extend(outcome.as_openai_message() for outcome in outcomes)
        await self._checkpoint(session, messages)
        return after_calls([Observed(o.ok, o.observation, o.after_execution) for o in outcomes])

    async def _checkpoint(
        self,
        session: AgentSession,
        messages: list[dict[str, Any]],
        pending: Sequence[ToolCall] | None = None,
        answered: dict[str, CallOutcome] | None = None,
    ) -> None:
        if self._progress is not None:
            await self._progress.save(
                session.held(), messages, self.iterations, self.usage, pending, answered
            )

    async def _turn(self, session: AgentSession, messages: list[dict[str, Any]]) -> ModelTurn:
        """One model turn; streamed text goes out as thought or answer chunks as it comes."""
        streaming = self.request.streaming
        text = self._text
        text.start()
        turn: ModelTurn | None = None
        async for item in self.llm.stream(messages, session.tools(self.llm.tool_format)):
            if isinstance(item, ModelTurn):
                turn = item
            elif not streaming:
                continue
            elif isinstance(item, TextDelta):
                await text.text(item.text, session.state)
            elif isinstance(item, ToolCallStarted):
                await text.tool_call(session.state)
        if turn is None:
            raise LLMError(f"the {self.llm.model!r} adapter ended a turn without a result")
        if not turn.tool_calls:
            return turn  # the answer: the final event sends what was not streamed yet
        if streaming:
            await text.calls_made(session.state)
        elif turn.text:
            await text.thought(turn.text, session.state)
        return turn

    async def _call(
        self, session: AgentSession, calls: Sequence[ToolCall], answered: dict[str, CallOutcome]
    ) -> list[CallOutcome]:
        """Run one turn's calls concurrently; report actions first, observations in call order.

        Calls in ``answered`` (before a hand-over) are not made again; each new
        outcome is added to it and checkpointed as it comes.
        """
        fresh = [call for call in calls if call.id not in answered]
        for call in fresh:
            await self.emit(events.action(call, session.state))
        outcomes: list[CallOutcome | None] = [answered.get(call.id) for call in calls]
        progress = self._progress

        async def waiting(approval: Approval) -> ApprovalAnswer | None:
            # The caller learns which approval the run waits on, and who may decide it.
            await self.emit(events.waiting(approval, session.state))
            return None

        async def one(index: int, call: ToolCall) -> None:
            if progress is None:
                outcomes[index] = await session.call(call.name, call.arguments, call.id)
                return
            # The same bus call id on any replica: a call sent again after a hand-over
            # is the same call to the service.
            with sending_as(run_call_id(self.request_id, self.iterations, call.id)):
                outcome = await session.call(call.name, call.arguments, call.id)
            outcomes[index] = answered[call.id] = outcome
            await self._checkpoint(session, progress.chat, calls, answered)

        new = {call.id for call in fresh}
        with listening(waiting), relaying(self._relay(session)):
            if len(fresh) == 1:
                await one(calls.index(fresh[0]), fresh[0])
            elif fresh:
                async with anyio.create_task_group() as group:
                    for index, call in enumerate(calls):
                        if call.id in new:
                            group.start_soon(one, index, call)
        done = [outcome for outcome in outcomes if outcome is not None]
        for outcome in done:
            if outcome.tool_call_id not in new:
                continue  # reported before the hand-over
            await self.emit(events.observation(outcome))
        return done

    def _relay(self, session: AgentSession) -> RunRelay:
        """How this run answers what its tools ask (see answering.py)."""
        ask_user = self.ask_user
        asking: AskUser | None = None
        if ask_user is not None:

            async def asking(asked: InputAsk) -> Mapping[str, InputAnswer] | None:
                await self.emit(events.asking(asked, session.state))
                return await ask_user(asked)

        def spent(usage: Usage) -> None:
            self.usage += usage

        return RunRelay(self.llm, ask_user=asking, roots=self.loop.roots, spent=spent)

    def _final(self, kind: Literal["answer", "error"], content: str, state: str) -> AgentEvent:
        return events.final(
            kind, content, state, self.llm.model, self.iterations, self.usage, self.held
        )

    def _result(
        self, state: str, *, answer: str | None = None, error: EventError | None = None
    ) -> AgentResult:
        self.loop.metrics.agent_request_ended(
            "answer" if error is None else error.type, self.iterations
        )
        return AgentResult(
            request_id=self.request_id,
            state=state,
            answer=answer,
            error=error,
            model=self.llm.model,
            iterations=self.iterations,
            usage=self.usage,
        )


def provider_of(llm: LLM) -> str:
    """The GenAI provider name of ``llm``: its own ``provider`` when it says, else the API it
    speaks (``openai`` for any OpenAI-compatible server, as the conventions say)."""
    provider = getattr(llm, "provider", None)
    return provider if isinstance(provider, str) and provider else llm.tool_format


__all__ = [
    "AgentLimits",
    "AgentLoop",
    "AgentResult",
    "Emit",
    "StopReason",
]
