# One job: the run of one agent request, turn by turn, with its limits, to its answer,
# its error or its suspension (the run that goes on after a suspension or a hand-over is
# the same run); its events, checkpoints, streamed text and sessions are modules beside it.
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
wall clock for the whole request; either ends it with an ``error`` event. A
front door's budgets (``[[budgets]]``) are asked before every model turn: a
spent one ends the request with a ``budget-spent`` error. What each turn cost
(``[costs]``) is added up, in the audit record and the last event.
Cancelling ``run`` cancels the tool calls in flight; the audit record says
``cancelled``.

A call that needs a person's approval waits in place, unless the loop has
:class:`~toolbus.application.agent.suspension.Suspensions`: then the run
*suspends* (:mod:`~toolbus.application.agent.suspension`): it becomes a task,
says so in a ``waiting`` event, and ``run`` returns (``result.task``), its worker
free; :meth:`AgentLoop.resume` goes on with it from its checkpoint once the
approval is decided, on whichever replica.

Beside it: its checkpoints (:mod:`~toolbus.application.agent.checkpoints`), its
events (:mod:`~toolbus.application.agent.events`, ``turn_text``).
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
    checkpoint,
    run_call_id,
)
from toolbus.application.agent.code_hooks import CompiledHooks
from toolbus.application.agent.llm import LLM, LLMError, ToolCallStarted
from toolbus.application.agent.outcomes import CallOutcome
from toolbus.application.agent.session import AgentSession
from toolbus.application.agent.session_sources import PlainSessions, Sessions
from toolbus.application.agent.suspension import Suspension, Suspensions
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
    #: The task the run became when it suspended (it waits for a person; no answer yet).
    task: str | None = None
    #: What the request's model turns and tool calls cost (``None``: nothing priced).
    cost: float | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def suspended(self) -> bool:
        """Whether the run suspended: it goes on later, as its ``task``."""
        return self.task is not None and self.answer is None and self.error is None


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
        suspensions: where runs whose calls wait for a person are kept meanwhile
            (:mod:`~toolbus.application.agent.suspension`); without them such a call
            waits in place.
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
        suspensions: Suspensions | None = None,
        ask_user: AskUser | None = None,
        roots: Sequence[Root] = (),
    ) -> None:
        self.llm = llm
        self.ask_user = ask_user
        self.roots = tuple(roots)
        self.checkpoints = checkpoints
        self.suspensions = suspensions
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
        return await self._traced(request, request_id or str(uuid.uuid4()), emit, None, ask_user)

    async def resume(
        self, saved: Checkpoint, *, emit: Emit = _discard, ask_user: AskUser | None = None
    ) -> AgentResult:
        """Go on with a suspended run from ``saved`` (which holds its request), reporting
        each step through ``emit``; how it ended, or that it suspended again.

        The calls it suspended on are made again: each finds its approval (decided,
        or still pending: then the run suspends once more). ``ask_user`` asks its user
        what a tool asks (else the loop's).
        """
        request = _request_of(saved)
        return await self._traced(request, saved.request_id, emit, saved, ask_user)

    async def cancel_suspended(self, saved: Checkpoint, why: str, *, emit: Emit = _discard) -> None:
        """End a suspended run that will not go on (its task was cancelled): its asker gets
        the last event, an ``error`` of type ``cancelled`` saying ``why``, and its session's
        audit record says ``cancelled``."""
        request = _request_of(saved)
        run = _Run(self, request, emit, saved.request_id, saved)
        try:
            session = await self.sessions.resume(request, saved.session)
        except (AccessDenied, LimitReached, SessionNotFound):
            pass  # it can no longer be written as this session; the event still says why
        else:
            await session.close(cancelled=True)
        await run.stop(Stop("cancelled", why), state=saved.session.state)

    async def _traced(
        self,
        request: AgentRequest,
        request_id: str,
        emit: Emit,
        saved: Checkpoint | None,
        ask_user: AskUser | None = None,
    ) -> AgentResult:
        model, provider = self.llm.model, provider_of(self.llm)
        # One invoke_agent span per request, parent of its model turns and tool calls.
        with tracing.hop("internal", None, conventions.agent_request, model, provider, request_id):
            run = _Run(self, request, emit, request_id, saved, ask_user or self.ask_user)
            result = await self._run(run, request, request_id, saved)
            if tracing.recording():
                usage = result.usage
                tracing.annotate(conventions.usage(usage.input_tokens, usage.output_tokens))
                if result.error is not None:
                    tracing.failed(result.error.type)
        return result

    async def _run(
        self, run: _Run, request: AgentRequest, request_id: str, saved: Checkpoint | None
    ) -> AgentResult:
        state = request.state or "undefined"
        checkpoints = self.checkpoints
        if saved is None and checkpoints is not None:
            saved = await checkpoints.load(request_id)
            run.goes_on_from(saved)
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
        if checkpoints is not None and not result.suspended:
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
        saved: Checkpoint | None = None,
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
        #: What the model turns cost so far (``None``: the model has no price).
        self.model_cost: float | None = None
        #: What the whole request cost, once it ended.
        self.cost: float | None = None
        #: The session a later request continues this one with, once it ends.
        self.held: str | None = None
        #: The task the run became when it first suspended.
        self.task: str | None = None
        self._text = TurnText(emit, loop.limits.answer_hold)
        self._progress = (
            None
            if loop.checkpoints is None
            else RunProgress(loop.checkpoints, request_id, request=request)
        )
        self.goes_on_from(saved)

    def goes_on_from(self, saved: Checkpoint | None) -> None:
        """The run goes on from ``saved``: as far as it got, as the task it became."""
        if saved is None:
            return
        self.iterations = saved.iterations
        self.usage = Usage(saved.input_tokens, saved.output_tokens)
        agent = saved.session.agent
        self.model_cost = None if agent is None else agent.cost
        self.task = saved.task
        if self._progress is not None:
            self._progress.task = saved.task

    async def answer(self, session: AgentSession, saved: Checkpoint | None = None) -> AgentResult:
        outcome: Answer | Stop | _Suspended
        started = time.monotonic()
        with anyio.move_on_after(self.limits.time_limit) as deadline:
            try:
                if saved is None:
                    messages = await session.start(
                        initial_messages(self.request, self.loop.system_prompt)
                    )
                else:
                    messages = list(saved.messages)
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
        if isinstance(outcome, _Suspended):
            return await self._suspended(session, outcome)
        self.held = await self.loop.sessions.keep(self.request, session)
        self.cost = session.cost
        if isinstance(outcome, Stop):
            return await self.stop(outcome, state=session.state)
        unsent = self._text.unsent(outcome.text)
        await self.emit(self._final("answer", unsent, session.state))
        return self._result(session.state, answer=outcome.text)

    async def _suspended(self, session: AgentSession, suspended: _Suspended) -> AgentResult:
        """The run waits for a person, as its task: the session ends here without its
        record (the run goes on in another), and the asker is told."""
        session.suspend()
        task = suspended.suspension.task_id
        log.info("agent request %s suspended as task %s", self.request_id, task)
        await self.emit(
            events.suspended(task, suspended.suspension.message, suspended.first, session.state)
        )
        return AgentResult(
            request_id=self.request_id,
            state=session.state,
            model=self.llm.model,
            iterations=self.iterations,
            usage=self.usage,
            task=task,
        )

    async def stop(self, stop: Stop, *, state: str) -> AgentResult:
        log.info("agent request %s ended without an answer: %s", self.request_id, stop.reason)
        error = EventError(type=stop.reason, message=stop.message)
        event = self._final("error", stop.message, state)
        await self.emit(event.model_copy(update={"error": error}))
        return self._result(state, error=error)

    async def _iterate(
        self, session: AgentSession, messages: list[dict[str, Any]], saved: Checkpoint | None
    ) -> Answer | Stop | _Suspended:
        model, provider = self.llm.model, provider_of(self.llm)
        metrics = self.loop.metrics
        if saved is not None and saved.pending is not None:
            # The last turn's calls, as far as they were answered before the hand-over (or
            # the suspension: then the asker saw each call's action already).
            pending = RunProgress.pending_calls(saved)
            answered = await self._answer_calls(
                session, messages, pending, saved.answered, announced=saved.task is not None
            )
            if answered is not None:
                return answered
        for iteration in range(self.iterations + 1, self.limits.max_iterations + 1):
            refused = await session.turn_allowed()
            if refused is not None:
                self._record_run(session, limit=refused.limit)
                return Stop("budget-spent", refused.observation)
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
            cost = await session.turn_taken(self.llm.model, turn.usage)
            if cost is not None:
                self.model_cost = (self.model_cost or 0.0) + cost
            self._record_run(session)
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

    def _record_run(self, session: AgentSession, *, limit: str | None = None) -> None:
        session.record_agent_run(
            self.llm.model,
            self.iterations,
            input_tokens=self.usage.input_tokens,
            output_tokens=self.usage.output_tokens,
            cost=self.model_cost,
            limit=limit,
        )

    async def _answer_calls(
        self,
        session: AgentSession,
        messages: list[dict[str, Any]],
        calls: Sequence[ToolCall],
        answered: dict[str, CallOutcome],
        *,
        announced: bool = False,
    ) -> Answer | _Suspended | None:
        """Make a turn's calls (those not ``answered`` already) and add their observations
        to the chat, checkpointing before, after each call and after all of them; or
        suspend the run when calls wait for a person."""
        if self._progress is not None:
            self._progress.chat = messages
        await self._checkpoint(session, messages, calls, answered)
        outcomes, waiting = await self._call(session, calls, answered, announced=announced)
        if waiting:
            return await self._suspend(session, messages, calls, answered, waiting)
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

    async def _suspend(
        self,
        session: AgentSession,
        messages: list[dict[str, Any]],
        calls: Sequence[ToolCall],
        answered: dict[str, CallOutcome],
        waiting: Sequence[Approval],
    ) -> _Suspended:
        """Keep the run, its calls ``waiting`` for a person, as its task."""
        suspensions = self.loop.suspensions
        assert suspensions is not None
        saved = checkpoint(
            self.request_id,
            session.held(),
            messages,
            self.iterations,
            self.usage,
            calls,
            answered,
            request=self.request,
            task=self.task,
        )
        suspension = await suspensions.suspend(saved, waiting)
        self.task = suspension.task_id
        if self._progress is not None:
            self._progress.task = suspension.task_id
        first = min(waiting, key=lambda approval: approval.expires_at)
        return _Suspended(suspension, first)

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
        self,
        session: AgentSession,
        calls: Sequence[ToolCall],
        answered: dict[str, CallOutcome],
        *,
        announced: bool = False,
    ) -> tuple[list[CallOutcome], list[Approval]]:
        """Run one turn's calls concurrently; report actions first (unless ``announced``),
        observations in call order. The outcomes, and the approvals of the calls that
        stopped to wait for a person (when the run can suspend), in call order.

        Calls in ``answered`` (before a hand-over) are not made again; each new
        outcome is added to it and checkpointed as it comes.
        """
        fresh = [call for call in calls if call.id not in answered]
        if not announced:
            for call in fresh:
                await self.emit(events.action(call, session.state))
        outcomes: list[CallOutcome | None] = [answered.get(call.id) for call in calls]
        progress = self._progress
        suspends = self.loop.suspensions is not None
        waits: dict[str, Approval] = {}

        async def one(index: int, call: ToolCall) -> None:
            with anyio.CancelScope() as making:

                async def waiting(approval: Approval) -> ApprovalAnswer | None:
                    # The caller learns which approval the run waits on, and who may decide.
                    await self.emit(events.waiting(approval, session.state))
                    if suspends and approval.expires_at > time.time():
                        # Nothing stays waiting here: the run suspends once the turn's
                        # other calls are answered, and this call is made again later.
                        waits[call.id] = approval
                        making.cancel()
                    return None

                with listening(waiting):
                    if progress is None:
                        outcome = await session.call(call.name, call.arguments, call.id)
                    else:
                        # The same bus call id on any replica: a call sent again after a
                        # hand-over is the same call to the service.
                        with sending_as(run_call_id(self.request_id, self.iterations, call.id)):
                            outcome = await session.call(call.name, call.arguments, call.id)
                outcomes[index] = answered[call.id] = outcome
                if progress is not None:
                    await self._checkpoint(session, progress.chat, calls, answered)

        new = {call.id for call in fresh}
        with relaying(self._relay(session)):
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
        return done, [waits[call.id] for call in calls if call.id in waits]

    def _relay(self, session: AgentSession) -> RunRelay:
        """How this run answers what its tools ask (see answering.py)."""
        ask_user = self.ask_user
        asking: AskUser | None = None
        if ask_user is not None:

            async def asking(asked: InputAsk) -> Mapping[str, InputAnswer] | None:
                await self.emit(events.asking(asked, session.state))
                return await ask_user(asked)

        async def spent(usage: Usage) -> None:
            # A completion a tool asked for is a turn of the run's model: counted in its
            # usage, priced and charged to the budgets like the run's own turns.
            self.usage += usage
            cost = await session.turn_taken(self.llm.model, usage)
            if cost is not None:
                self.model_cost = (self.model_cost or 0.0) + cost

        return RunRelay(self.llm, ask_user=asking, roots=self.loop.roots, spent=spent)

    def _final(self, kind: Literal["answer", "error"], content: str, state: str) -> AgentEvent:
        return events.final(
            kind, content, state, self.llm.model, self.iterations, self.usage, self.held, self.cost
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
            cost=self.cost,
        )


@dataclass(frozen=True, slots=True)
class _Suspended:
    """How a run stops when calls wait for a person: the task it became, and the approval
    that expires first."""

    suspension: Suspension
    first: Approval


def _request_of(saved: Checkpoint) -> AgentRequest:
    if saved.request is None:
        raise ValueError(
            f"the checkpoint of agent request {saved.request_id} holds no request; only a "
            "run that suspended goes on from its checkpoint alone"
        )
    return saved.request


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
