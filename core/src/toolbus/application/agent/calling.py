# One job: making the calls a session allows, and writing down each way one ends (the
# tool's answer or error, a step's answer or refusal, the bus failing, a stream): the
# outcomes and the record must be written alike for every way, so they are written here.
"""Making the calls a session allows: :class:`CallRunner`, and :class:`ToolStream`.

An :class:`~toolbus.application.agent.session.AgentSession` decides what may
run (the tool is offered, the arguments are usable, no code hook said no) and
keeps the state; a :class:`CallRunner` makes the call: over the bus, signed
for the session's granted groups, with the placeholders of the tool's argument
options filled, timed, counted in the metrics and noted in the audit record,
and turned into a :class:`~toolbus.application.agent.outcomes.CallOutcome`
(a tool's failure is an outcome for the model; a bus failure propagates). It
also writes the outcomes of calls that did not run.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio

from toolbus.application.agent.audit import (
    ApprovalNote,
    CacheLookup,
    CallStatus,
    Refusal,
    StateTransition,
)
from toolbus.application.agent.observations import (
    failed,
    not_in_state,
    not_offered,
)
from toolbus.application.agent.outcomes import CallOutcome
from toolbus.application.agent.recording import SessionRecorder
from toolbus.application.agent.steps import (
    PERMITTED,
    CallAnswered,
    CallEnded,
    CallPermitted,
    CallStopped,
)
from toolbus.application.calls.client import CallResult
from toolbus.application.calls.metrics import ToolbusMetrics
from toolbus.application.calls.tools import Tools
from toolbus.application.identity.caller import granting
from toolbus.domain.calls.arguments import apply_options
from toolbus.domain.calls.input_requests import InputRequired, InputUnavailable
from toolbus.domain.config.descriptors import ToolDescriptor
from toolbus.domain.config.registry import Registry
from toolbus.domain.errors import ToolCallError
from toolbus.domain.limits.settings import Prices

# A model may invent any name; the audit record keeps a bounded prefix of it.
MAX_AUDITED_NAME = 64

#: A post-use seam: (tool, arguments, outcome) -> the outcome to answer.
PostUse = Callable[[ToolDescriptor, dict[str, Any], CallOutcome], Awaitable[CallOutcome]]


def _stays(tool: ToolDescriptor) -> None:
    """A closed session's state does not move."""
    return None


class CallRunner:
    """Runs one session's calls; see the module docs.

    ``state`` tells the session's state now; ``advance`` moves it after a
    successful call of a tool (and says the transition, if any).
    """

    def __init__(
        self,
        *,
        tools: Tools,
        registry: Registry,
        user: str,
        request_id: str,
        timeout: float | None,
        metrics: ToolbusMetrics,
        record: SessionRecorder,
        clock: Callable[[], float],
        timer: Callable[[], float],
        state: Callable[[], str],
        advance: Callable[[ToolDescriptor], StateTransition | None],
        prices: Prices | None = None,
    ) -> None:
        self.tools = tools
        self.prices = prices
        self.registry = registry
        self.user = user
        self.request_id = request_id
        self.timeout = timeout
        self.metrics = metrics
        self.record = record
        self.clock = clock
        self.timer = timer
        self.state = state
        self.advance = advance
        #: The groups calls are signed for: the session's, once granted.
        self.groups: tuple[str, ...] = ()

    def release(self, final_state: str) -> None:
        """Stop reaching into the session, closed in ``final_state``."""
        self.state = lambda: final_state
        self.advance = _stays

    def context(self, tool_call_id: str | None, state: str) -> dict[str, str]:
        """Values for the placeholders of a tool's argument options."""
        return {"request_id": self.request_id, "tool_call_id": tool_call_id or "", "state": state}

    async def invoke(
        self,
        tool: ToolDescriptor,
        arguments: dict[str, Any],
        tool_call_id: str | None,
        *,
        timeout: float | None = None,
        advance: bool = True,
        permitted: CallPermitted = PERMITTED,
    ) -> CallOutcome:
        state, at, started = self.state(), self.clock(), self.timer()
        approval = permitted.approval
        if approval is not None:
            self.metrics.call_checked(tool.name, approval.status)
        try:
            # A signing client vouches for the groups this session was granted.
            with granting(self.groups):
                invocation = await self.tools.invoke(
                    tool,
                    arguments,
                    user=self.user,
                    timeout=self.timeout if timeout is None else timeout,
                    context=self.context(tool_call_id, state),
                    registry=self.registry,
                )
        except ToolCallError as exc:
            outcome = self.failed(
                tool, arguments, tool_call_id, exc, state, at, started, approval, permitted.cache
            )
        except BaseException as exc:
            self.broke(tool, tool_call_id, exc, state, at, started, approval)
            raise
        else:
            outcome = self.succeeded(
                tool,
                tool_call_id,
                invocation,
                state,
                at,
                started,
                advance,
                approval,
                permitted.cache,
            )
        if permitted.after:
            await permitted.ended(ended(outcome))
        return outcome

    async def answered(
        self,
        tool: ToolDescriptor,
        answer: CallAnswered,
        tool_call_id: str | None,
        *,
        advance: bool = True,
    ) -> CallOutcome:
        """A step answered the call (the cache): no call made, an outcome as if it had been."""
        state = self.state()
        permitted = answer.permitted
        self.metrics.cache_lookup(tool.name, "hit")
        self.record.call(
            tool.name,
            tool_call_id,
            "ok",
            state,
            self.clock(),
            0.0,
            None,
            approval=permitted.approval,
            cache="hit",
        )
        transition = self.advance(tool) if advance else None
        outcome = CallOutcome(
            name=tool.llm_name,
            observation=answer.observation,
            after_execution=answer.after_execution or tool.after_execution,
            status="ok",
            state=self.state(),
            tool=tool.name,
            tool_call_id=tool_call_id,
            transition=transition,
            cached=True,
        )
        if permitted.after:
            await permitted.ended(ended(outcome))
        return outcome

    def stream(
        self,
        tool: ToolDescriptor,
        arguments: dict[str, Any],
        tool_call_id: str | None,
        post_use: PostUse | None,
        permitted: CallPermitted | CallAnswered = PERMITTED,
    ) -> ToolStream:
        return ToolStream(self, tool, arguments, tool_call_id, post_use, permitted)

    def cost(self, tool: ToolDescriptor, reported: float | None = None) -> float | None:
        """What a call of ``tool`` that reached it cost (``reported``: what it said), counted
        in the metrics; ``None`` when it has no price."""
        if self.prices is None:
            return None
        cost = self.prices.tool_call(tool.name, reported)
        if cost is not None:
            self.metrics.cost_spent("tool", tool.name, cost)
        return cost

    # ------------------------------------------------------------------ how calls end

    def failed(
        self,
        tool: ToolDescriptor,
        arguments: dict[str, Any],
        tool_call_id: str | None,
        exc: ToolCallError,
        state: str,
        at: float,
        started: float,
        approval: ApprovalNote | None = None,
        cache: CacheLookup | None = None,
    ) -> CallOutcome:
        """The tool answered with an error: an outcome the model can act on."""
        seconds = self.timer() - started
        self.metrics.tool_call(tool.name, tool.service or tool.type, seconds, exc.error_type)
        if cache is not None:
            self.metrics.cache_lookup(tool.name, cache)
        cost = self.cost(tool)
        applied = apply_options(arguments, tool.options, {})
        self.record.call(
            tool.name,
            tool_call_id,
            "error",
            state,
            at,
            seconds,
            exc.error_type,
            applied=applied,
            approval=approval,
            cost=cost,
            cache=cache,
        )
        return CallOutcome(
            name=tool.llm_name,
            observation=failed(tool, exc.error_type, exc.message),
            status="error",
            state=self.state(),
            tool=tool.name,
            tool_call_id=tool_call_id,
            error_type=exc.error_type,
            seconds=seconds,
            cost=cost,
            asked=exc.ask if isinstance(exc, InputRequired | InputUnavailable) else None,
        )

    def broke(
        self,
        tool: ToolDescriptor,
        tool_call_id: str | None,
        exc: BaseException,
        state: str,
        at: float,
        started: float,
        approval: ApprovalNote | None = None,
    ) -> None:
        """The bus failed under the call, or it was cancelled: noted, then it propagates."""
        seconds = self.timer() - started
        cancelled = isinstance(exc, anyio.get_cancelled_exc_class())
        if not cancelled:
            self.metrics.tool_call(
                tool.name, tool.service or tool.type, seconds, type(exc).__name__
            )
        status: CallStatus = "cancelled" if cancelled else "failed"
        self.record.call(
            tool.name,
            tool_call_id,
            status,
            state,
            at,
            seconds,
            type(exc).__name__,
            approval=approval,
        )

    def succeeded(
        self,
        tool: ToolDescriptor,
        tool_call_id: str | None,
        invocation: CallResult,
        state: str,
        at: float,
        started: float,
        advance: bool,
        approval: ApprovalNote | None = None,
        cache: CacheLookup | None = None,
    ) -> CallOutcome:
        seconds = self.timer() - started
        self.metrics.tool_call(tool.name, tool.service or tool.type, seconds, None)
        if cache is not None:
            self.metrics.cache_lookup(tool.name, cache)
        cost = self.cost(tool, invocation.cost)
        self.record.call(
            tool.name,
            tool_call_id,
            "ok",
            state,
            at,
            seconds,
            None,
            invocation=invocation,
            approval=approval,
            cost=cost,
            cache=cache,
        )
        # Another call of this session may have moved the state while this one
        # ran; the transition starts from the state as it is now.
        transition = self.advance(tool) if advance else None
        return CallOutcome(
            name=tool.llm_name,
            observation=invocation.observation,
            after_execution=invocation.after_execution,
            status="ok",
            state=self.state(),
            tool=tool.name,
            tool_call_id=tool_call_id,
            transition=transition,
            seconds=seconds,
            cost=cost,
        )

    # ------------------------------------------------------------------ calls that did not run

    def refused(
        self,
        name: str,
        tool: ToolDescriptor | None,
        refusal: Refusal,
        tool_call_id: str | None,
        available: tuple[ToolDescriptor, ...],
    ) -> CallOutcome:
        """A tool not offered now: no call, a refusal for the model, counted and recorded."""
        state = self.state()
        self.metrics.call_refused(None if tool is None else tool.name, refusal)
        audited = tool.name if tool is not None else name[:MAX_AUDITED_NAME]
        self.record.call(audited, tool_call_id, "refused", state, self.clock(), 0.0, None, refusal)
        if refusal == "state":
            assert tool is not None
            return CallOutcome(
                name=name,
                observation=not_in_state(tool, state, available),
                status="refused",
                state=state,
                tool=tool.name,
                tool_call_id=tool_call_id,
                refusal="state",
            )
        # Outside the session's groups looks exactly like unknown, to the model and
        # to whoever reads the outcome: only the audit record keeps the difference.
        return CallOutcome(
            name=name,
            observation=not_offered(name, available),
            status="refused",
            state=state,
            tool_call_id=tool_call_id,
            refusal="unknown",
        )

    def denied(self, tool: ToolDescriptor, reason: str, tool_call_id: str | None) -> CallOutcome:
        """A code hook denied the call: refused, with its reason as the observation."""
        state = self.state()
        self.record.call(tool.name, tool_call_id, "refused", state, self.clock(), 0.0, None, "hook")
        return CallOutcome(
            name=tool.llm_name,
            observation=reason,
            status="refused",
            state=state,
            tool=tool.name,
            tool_call_id=tool_call_id,
        )

    def stopped(
        self, tool: ToolDescriptor, stop: CallStopped, tool_call_id: str | None
    ) -> CallOutcome:
        """A door's call step stopped the call (the call policy forbade it, no person
        approved it, a limit...): refused, recorded under the step's name."""
        state = self.state()
        if stop.step == "policy":
            checked = "forbidden"
        elif stop.step == "approval":
            checked = "unavailable" if stop.approval is None else stop.approval.status
        else:
            checked = stop.step
        self.metrics.call_checked(tool.name, checked)
        if stop.limit is not None:
            self.metrics.limit_refused(stop.limit, "tool-call")
        self.record.call(
            tool.name,
            tool_call_id,
            "refused",
            state,
            self.clock(),
            0.0,
            None,
            stop.step,
            approval=stop.approval,
            policy=stop.policy,
            limit=stop.limit,
        )
        return CallOutcome(
            name=tool.llm_name,
            observation=stop.observation,
            status="refused",
            state=state,
            tool=tool.name,
            tool_call_id=tool_call_id,
            refusal=stop.step,
            limit=stop.limit,
            retry_after=stop.retry_after,
        )

    def unusable(
        self, tool: ToolDescriptor, observation: str, tool_call_id: str | None
    ) -> CallOutcome:
        """The model's arguments cannot be used (not a JSON object, or not what the tool
        takes): no call, an error it can fix, which ``observation`` explains."""
        state = self.state()
        self.record.call(tool.name, tool_call_id, "error", state, self.clock(), 0.0, "bad-request")
        return CallOutcome(
            name=tool.llm_name,
            observation=observation,
            status="error",
            state=state,
            tool=tool.name,
            tool_call_id=tool_call_id,
            error_type="bad-request",
        )


class ToolStream:
    """A streamed call that passed its session's checks; ``async for chunk in stream``.

    When the chunks end, :attr:`outcome` holds the call's outcome (the whole
    observation), as ``AgentSession.call`` would have returned it. A tool
    error raises its :class:`~toolbus.domain.errors.ToolCallError` after it is
    recorded; with post-use hooks installed, its message is what they made of it,
    and the answer comes as one chunk, rewritten by them. A call a step answered
    (a cached answer) streams that answer as one chunk.
    """

    def __init__(
        self,
        runner: CallRunner,
        tool: ToolDescriptor,
        arguments: dict[str, Any],
        tool_call_id: str | None,
        post_use: PostUse | None,
        permitted: CallPermitted | CallAnswered = PERMITTED,
    ) -> None:
        self._runner = runner
        self._permitted = permitted
        self.tool = tool
        self.arguments = arguments
        self.tool_call_id = tool_call_id
        self._post_use = post_use
        #: The outcome, once the stream has ended.
        self.outcome: CallOutcome | None = None

    def __aiter__(self) -> AsyncIterator[str]:
        if isinstance(self._permitted, CallAnswered):
            return self._answered(self._permitted)
        return self._chunks(self._permitted)

    async def _answered(self, answer: CallAnswered) -> AsyncIterator[str]:
        outcome = await self._runner.answered(self.tool, answer, self.tool_call_id)
        if self._post_use is not None:
            outcome = await self._post_use(self.tool, self.arguments, outcome)
        self.outcome = outcome
        yield outcome.observation

    async def _chunks(self, permitted: CallPermitted) -> AsyncIterator[str]:
        runner, tool, post = self._runner, self.tool, self._post_use
        approval, cache = permitted.approval, permitted.cache
        state, at, started = runner.state(), runner.clock(), runner.timer()
        chunks: list[str] = []
        try:
            stream = runner.tools.stream(
                tool.name,
                self.arguments,
                user=runner.user,
                timeout=runner.timeout,
                context=runner.context(self.tool_call_id, state),
                registry=runner.registry,
            )
            # The request, and the call token vouching for the granted groups, go
            # out with the first step; no yield inside the block keeps the context ours.
            with granting(runner.groups):
                first = await anext(stream, None)
            if first is not None:
                chunks.append(first)
                if post is None:
                    yield first
                async for chunk in stream:
                    chunks.append(chunk)
                    if post is None:
                        yield chunk
        except ToolCallError as exc:
            outcome = runner.failed(
                tool, self.arguments, self.tool_call_id, exc, state, at, started, approval, cache
            )
            if permitted.after:
                await permitted.ended(ended(outcome))
            self.outcome = outcome if post is None else await post(tool, self.arguments, outcome)
            if post is None:
                raise
            raise ToolCallError(self.outcome.observation, error_type=exc.error_type) from None
        except BaseException as exc:
            runner.broke(tool, self.tool_call_id, exc, state, at, started, approval)
            raise
        applied = apply_options(self.arguments, tool.options, {})
        answer = CallResult("".join(chunks), tool.after_execution, applied)
        outcome = runner.succeeded(
            tool, self.tool_call_id, answer, state, at, started, True, approval, cache
        )
        if permitted.after:
            await permitted.ended(ended(outcome))
        if post is not None:
            outcome = await post(tool, self.arguments, outcome)
            yield outcome.observation
        self.outcome = outcome


def ended(outcome: CallOutcome) -> CallEnded:
    """How a call that reached its tool (or the cache) ended, for the steps that asked."""
    ok = outcome.ok
    return CallEnded(
        status="ok" if ok else "error",
        observation=outcome.observation if ok else None,
        after_execution=outcome.after_execution if ok else None,
        cost=outcome.cost,
        cached=outcome.cached,
        asked=(
            outcome.asked.state
            if outcome.asked is not None and outcome.error_type == InputRequired.error_type
            else None
        ),
    )
