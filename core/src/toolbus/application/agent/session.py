# One job: the AgentSession class, one agent request as the core keeps it. Its parts
# are modules beside it (calling, recording, rules, caches, outcomes, held); what stays
# is the one object every door, loop and bridge holds, and its seams in call order.
"""Agent sessions: one agent request's tools, calls, state, access check and audit record.

An :class:`AgentSession` is what an agent loop holds while it answers one
request::

    async with AgentSession(tools, user="alice", groups=["read-only"]) as session:
        offered = session.tools("openai")           # for the LLM request
        outcome = await session.call(name, arguments, tool_call_id=call_id)
        messages.append(outcome.as_openai_message())  # the observation, for the LLM

It applies docs/groups-and-states.md and docs/access-control.md: the requested
groups are checked against the user's permissions before anything runs
(:class:`~toolbus.domain.errors.AccessDenied`), so is the requested state
against the entry states a front door allows
(:class:`~toolbus.domain.errors.StateRefused`); only tools offered for (groups,
current state) can be called, and a *successful* call moves the session to the
tool's ``state``.

What reaches the caller, and how:

* a tool not offered now (unknown, outside the groups, or not in this state):
  a refusal observation for the LLM; no call is made and the state is unchanged.
  Unknown and outside the groups read the same; the audit record tells them apart;
* a tool error, a timeout included (any :class:`~toolbus.domain.errors.ToolCallError`):
  an error observation for the LLM, state unchanged. The model can retry or
  choose another tool, as it would with a human-facing API;
* the bus itself failing (:class:`~toolbus.domain.errors.BusClosed`, connection
  errors) or a tool the bus cannot serve: the exception propagates. No
  observation could help the model there; the caller's error handling must.

The registry (configuration snapshot) is captured when the session starts, so
a configuration reload never changes a running session's tools or rules.

Hooks (docs/hooks.md): :meth:`AgentSession.start` runs the configured
``on_request_start`` hooks and returns the history with their results
injected; code hooks (:class:`~toolbus.application.agent.code_hooks.CompiledHooks`)
act around every executed call, streamed ones included, and see the audit
record when the session ends.

A session a front door keeps between requests is plain data
(:class:`~toolbus.application.agent.held.HeldSession`, from :meth:`held`);
``AgentSession(tools, resume=held)`` continues it where it stood.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from types import TracebackType
from typing import Any

import anyio

from toolbus.application.agent.audit import (
    AgentRun,
    AuditRecord,
    AuditSink,
    Refusal,
    SessionOutcome,
    StateTransition,
    timestamp,
)
from toolbus.application.agent.caches import tool_list
from toolbus.application.agent.calling import MAX_AUDITED_NAME, CallRunner, ToolStream
from toolbus.application.agent.code_hooks import CompiledHooks, Deny
from toolbus.application.agent.configured_hooks import run_request_start_hooks
from toolbus.application.agent.held import HeldSession
from toolbus.application.agent.observations import (
    parse_arguments,
    undeclared_arguments,
    unusable_arguments,
)
from toolbus.application.agent.outcomes import CallOutcome
from toolbus.application.agent.recording import SessionRecorder
from toolbus.application.agent.rules import Leave, SessionRules, rules_of, session_parts
from toolbus.application.agent.steps import PERMITTED, CallPermitted, CallStopped, CheckedCall
from toolbus.application.calls.client import ToolServiceClient
from toolbus.application.calls.metrics import ToolbusMetrics
from toolbus.application.calls.tools import Tools
from toolbus.domain.access.permissions import Permissions
from toolbus.domain.calls.arguments import apply_options
from toolbus.domain.config.descriptors import ToolDescriptor
from toolbus.domain.config.registry import WILDCARD, Availability, Registry, normalize_state
from toolbus.domain.config.schemas import ExportFormat
from toolbus.domain.errors import AccessDenied, StateRefused, UnknownTool
from toolbus.domain.hooks.configured import HookConfig


class AgentSession:
    """One agent request: its user, groups, state, tool calls and audit record.

    Args:
        tools: a :class:`Tools` facade, or a :class:`ToolServiceClient` with ``registry``.
        registry: the configuration to use; default ``tools.registry``. Captured
            now: later reloads do not affect this session.
        user: who the request is for; passed to every tool service.
        groups: requested tool groups. ``None`` means ``["default"]``; ``[]``
            means no tools at all. ``"*"`` asks for every tool.
        state: initial state; ``None`` or ``""`` mean ``"undefined"``.
        request_id: the agent request's id; a UUID when not given.
        rules: what a front door fixes (:class:`~toolbus.application.agent.rules.SessionRules`);
            default the rules of the door governing ``tools``, if any. The
            arguments below, when given, take precedence over them.
        permissions: who may request which groups. Default: the rules', else the
            snapshot's ``permissions`` section, or no restriction if it has none.
        entry_states: the states a caller may ask to start in; default the
            rules', else any state.
        audit: where the audit record goes; default the ``toolbus.audit`` logger.
        metrics: default :func:`~toolbus.application.calls.metrics.default_metrics`.
        timeout: per-call time limit in seconds; default the client's.
        clock: Unix time, for timestamps and hook TTLs. timer: monotonic
            seconds, for durations.
        hooks: configured hooks (:func:`~toolbus.domain.hooks.configured.parse_hooks`,
            :func:`~toolbus.domain.hooks.configured.load_hooks`) for :meth:`start`.
            Default: the rules', else the snapshot's ``hooks`` section, or none.
        code_hooks: code hooks, compiled once at start-up
            (:class:`toolbus.hooks.CodeHooks`); default the rules', else none.
        resume: a :class:`~toolbus.application.agent.held.HeldSession` to continue:
            its user, groups, state and record so far (``user``, ``groups``,
            ``state`` and ``request_id`` are then taken from it). Its groups are
            checked against the permissions again; its state is not an entry
            state question, since the session earned it.

    Raises :class:`AccessDenied` (after counting and auditing the denial) when
    the groups exceed the user's permissions, :class:`StateRefused` (audited)
    for a state that is not an entry state,
    :class:`~toolbus.domain.errors.LimitReached` when the user holds as many
    sessions as the rules allow, and :class:`~toolbus.domain.errors.ConfigError`
    when the snapshot's ``hooks`` section is invalid.
    """

    def __init__(
        self,
        tools: Tools | ToolServiceClient,
        registry: Registry | None = None,
        *,
        user: str | None = None,
        groups: Sequence[str] | None = None,
        state: str | None = None,
        request_id: str | None = None,
        rules: SessionRules | None = None,
        permissions: Permissions | None = None,
        entry_states: Collection[str] | None = None,
        audit: AuditSink | None = None,
        metrics: ToolbusMetrics | None = None,
        timeout: float | None = None,
        clock: Callable[[], float] = time.time,
        timer: Callable[[], float] = time.perf_counter,
        hooks: Sequence[HookConfig] | None = None,
        code_hooks: CompiledHooks | None = None,
        resume: HeldSession | None = None,
    ) -> None:
        if isinstance(tools, Tools):
            registry = tools.registry if registry is None else registry
            if rules is None:
                rules = rules_of(tools, registry)
        elif registry is None:
            raise TypeError(
                "AgentSession needs the configuration: pass registry=... with a "
                "ToolServiceClient, or pass a Tools facade"
            )
        else:
            tools = Tools(tools, registry)
        if resume is not None:
            user, state, request_id = resume.user, resume.state, resume.request_id
            groups = resume.requested_groups
        if user is None:
            raise TypeError("AgentSession needs the user the request is for: user=...")
        if isinstance(groups, str):
            raise TypeError(f"groups must be a list of group names, not the string {groups!r}")
        parts = session_parts(
            rules,
            registry,
            permissions=permissions,
            entry_states=entry_states,
            hooks=hooks,
            code_hooks=code_hooks,
            audit=audit,
            metrics=metrics,
            timeout=timeout,
        )
        self.registry: Registry = registry
        self.user = user
        self.request_id = request_id or str(uuid.uuid4())
        #: The groups as requested: ``None`` (absent) and ``()`` (empty) differ.
        self.requested_groups: tuple[str, ...] | None = None if groups is None else tuple(groups)
        self.initial_state = normalize_state(state if resume is None else resume.initial_state)
        self.permissions = parts.permissions
        self.timeout = parts.timeout
        #: The configured hooks :meth:`start` runs, in order.
        self.hooks: tuple[HookConfig, ...] = parts.hooks
        self._code = parts.code_hooks
        self._steps = parts.steps
        self._metrics = parts.metrics
        self._clock = clock
        self._timer = timer
        self._closed = False
        self._lists: dict[str, list[dict[str, Any]]] = {}
        self._leave: Leave | None = None
        self._record = SessionRecorder(
            request_id=self.request_id,
            user=user,
            requested_groups=self.requested_groups,
            initial_state=self.initial_state,
            started_at=clock() if resume is None else resume.started_at,
            sink=parts.audit,
            timer=timer,
            calls=() if resume is None else resume.calls,
            transitions=() if resume is None else resume.transitions,
            agent=None if resume is None else resume.agent,
        )

        # Every label a refusal or a call records is one the configuration names.
        self._metrics.observe_registry(registry)
        self._calls = CallRunner(
            tools=tools,
            registry=registry,
            user=user,
            request_id=self.request_id,
            timeout=self.timeout,
            metrics=self._metrics,
            record=self._record,
            clock=clock,
            timer=timer,
            state=lambda: self._state,
            advance=self._advance,
        )
        try:
            #: The groups tools are filtered with: the request after defaulting.
            self.groups: tuple[str, ...] = self.permissions.check(user, self.requested_groups)
        except AccessDenied as exc:
            self._deny(exc)
            raise
        current = normalize_state(state)
        entries = parts.entry_states
        if resume is None and entries is not None and current not in entries:
            refused = StateRefused(user, current, sorted(entries))
            # The record keeps a bounded prefix: the caller chose the state, any length.
            self._deny(refused, state=current[:MAX_AUDITED_NAME])
            raise refused
        self._calls.groups = self.groups
        self._initial = registry.availability(self.groups, self.initial_state)
        now = self._initial if current == self.initial_state else None
        self._enter(current, now or registry.availability(self.groups, current))
        if parts.places is not None:
            self._leave = parts.places.take(user)  # last: nothing to undo if refused
        if resume is None:
            self._metrics.session_started(self.groups, len(self._availability.available))

    def __repr__(self) -> str:
        return (
            f"<AgentSession {self.request_id} user={self.user!r} groups={list(self.groups)!r} "
            f"state={self._state!r}{' closed' if self._closed else ''}>"
        )

    # ------------------------------------------------------------- what is offered

    @property
    def state(self) -> str:
        """The current state (``"undefined"`` until a tool moves it)."""
        return self._state

    @property
    def transitions(self) -> tuple[StateTransition, ...]:
        """State changes so far, oldest first."""
        return tuple(self._record.transitions)

    @property
    def availability(self) -> Availability:
        """The tools offered now, and those filtered out by group and by state."""
        return self._availability

    @property
    def available(self) -> tuple[ToolDescriptor, ...]:
        """The tools offered now, in configuration order."""
        return self._availability.available

    @property
    def closed(self) -> bool:
        """True once the audit record has been written."""
        return self._closed

    @property
    def calls(self) -> int:
        """Calls the session was asked to make so far (its record holds each)."""
        return len(self._record.calls)

    def tools(self, format: ExportFormat = "openai") -> list[dict[str, Any]]:
        """The tools offered now, as an LLM API takes them: ``openai``, ``mcp`` or ``anthropic``.

        Call it before every LLM turn: after a state change the list changes.
        The list is yours; the tool dicts in it are shared with other sessions
        (building them for every turn would be slow), so copy before changing one.
        """
        found = self._lists.get(format)
        if found is None:
            found = self._lists[format] = tool_list(self._availability, format)
        return list(found)

    def held(self) -> HeldSession:
        """The session as plain data, to keep between requests and resume later."""
        return HeldSession(
            request_id=self.request_id,
            user=self.user,
            requested_groups=self.requested_groups,
            groups=self.groups,
            initial_state=self.initial_state,
            state=self._state,
            started_at=self._record.started_at,
            transitions=tuple(self._record.transitions),
            calls=tuple(self._record.calls),
            agent=self._record.agent,
        )

    # ------------------------------------------------------------- starting

    async def start(self, messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Run the ``on_request_start`` hooks; return the history with their results injected.

        Call it once per request, with the history the client sent, before the
        model's first turn. Configured hooks run first (their tools called
        concurrently, results injected in configured order), then the
        ``on_request_start`` code hooks, in order. ``messages`` is not changed.

        Hook calls are made like the model's calls (only tools offered to this
        request, argument options, code hooks, metrics, audit record) but never
        move the session's state. A hook that fails is logged and skipped: this
        raises only ``RuntimeError`` once the session is closed.
        """
        self._check_open()
        history = [m if isinstance(m, dict) else dict(m) for m in messages]
        if self.hooks:
            history = await run_request_start_hooks(
                self.hooks,
                history,
                resolve=self._resolve,
                call=self._call_for_hook,
                clock=self._clock,
            )
        if self._code.on_request_start:
            history = await self._code.request_start(self, history)
        return history

    async def _call_for_hook(
        self, tool: ToolDescriptor, arguments: dict[str, Any], timeout: float | None
    ) -> CallOutcome:
        # A hook fetches context; if it moved the state, which tools the model is
        # offered would depend on whether a TTL happened to be fresh.
        return await self._run(tool, arguments, None, timeout=timeout, advance=False)

    # ------------------------------------------------------------- calling

    async def call(
        self,
        name: str,
        arguments: Mapping[str, Any] | str | None = None,
        tool_call_id: str | None = None,
    ) -> CallOutcome:
        """Call tool ``name`` if it is offered now, and return the outcome.

        ``name`` is the tool's LLM name (as in :meth:`tools`) or its configured
        name. ``arguments`` is a mapping or the JSON text an LLM produced (as
        in OpenAI's ``function.arguments``). ``tool_call_id`` is the LLM's id
        for this call, echoed in the outcome and the audit record.

        Never raises for a refused or failed tool call: the outcome holds an
        observation for the LLM. Raises when the bus fails (see the module
        docs), and ``RuntimeError`` once the session is closed.
        """
        checked = self._checked(name, arguments, tool_call_id)
        if isinstance(checked, CallOutcome):
            return checked
        return await self._run(checked[0], checked[1], tool_call_id)

    async def stream(
        self,
        name: str,
        arguments: Mapping[str, Any] | str | None = None,
        tool_call_id: str | None = None,
    ) -> CallOutcome | ToolStream:
        """Call tool ``name`` and stream its answer: a :class:`ToolStream`, or why not.

        The checks of :meth:`call` come first, then the ``on_pre_tool_use`` code
        hooks: a refusal or a hook's ``Deny`` is returned as a
        :class:`CallOutcome` before anything is sent. The stream is recorded,
        counted and moves the state like a call. With ``on_post_tool_use`` hooks
        installed, the answer is gathered and comes as one chunk, rewritten by
        them: a hook must see the whole answer to redact it.
        """
        checked = self._checked(name, arguments, tool_call_id)
        if isinstance(checked, CallOutcome):
            return checked
        tool, parsed = checked
        code = self._code
        if code.on_pre_tool_use:
            decision = await code.pre_tool_use(self, tool, parsed)
            if isinstance(decision, Deny):
                return self._calls.denied(tool, decision.reason, tool_call_id)
            parsed = decision
        permitted = PERMITTED
        if self._steps is not None:
            verdict = await self._checked_call(tool, parsed, tool_call_id, wait=True)
            if isinstance(verdict, CallStopped):
                return self._calls.stopped(tool, verdict, tool_call_id)
            permitted = verdict

        async def post_use(
            tool: ToolDescriptor, arguments: dict[str, Any], outcome: CallOutcome
        ) -> CallOutcome:
            rewritten: CallOutcome = await code.post_tool_use(self, tool, arguments, outcome)
            return rewritten

        return self._calls.stream(
            tool,
            parsed,
            tool_call_id,
            post_use if code.on_post_tool_use else None,
            permitted.approval,
        )

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(
                f"agent session {self.request_id} is closed; start a new AgentSession"
            )

    def _checked(
        self, name: str, arguments: Mapping[str, Any] | str | None, tool_call_id: str | None
    ) -> CallOutcome | tuple[ToolDescriptor, dict[str, Any]]:
        """The tool and its arguments when the call may go ahead, else the refusal."""
        self._check_open()
        # The single path every call takes: resolve, check, then execute. Code
        # hooks (pre/post tool use) run around _execute (in _run), so that
        # refusals stay out of their reach and every executed call is audited
        # the same way.
        tool, refusal = self._resolve(name)
        if refusal is not None:
            return self._calls.refused(name, tool, refusal, tool_call_id, self.available)
        assert tool is not None
        parsed = parse_arguments(arguments)
        if isinstance(parsed, str):
            return self._calls.unusable(tool, unusable_arguments(tool, parsed), tool_call_id)
        # What the policy and an approver see is what the tool gets: nothing unnamed.
        undeclared = tool.undeclared(parsed)
        if undeclared:
            observation = undeclared_arguments(tool, undeclared)
            return self._calls.unusable(tool, observation, tool_call_id)
        return tool, parsed

    async def _run(
        self,
        tool: ToolDescriptor,
        arguments: dict[str, Any],
        tool_call_id: str | None,
        *,
        timeout: float | None = None,
        advance: bool = True,
    ) -> CallOutcome:
        """Pre-use code hooks, the door's call steps, the call, post-use code hooks. Each seam
        costs nothing when empty."""
        code = self._code
        if code.on_pre_tool_use:
            decision = await code.pre_tool_use(self, tool, arguments)
            if isinstance(decision, Deny):
                return self._calls.denied(tool, decision.reason, tool_call_id)
            arguments = decision
        approval = None
        if self._steps is not None:
            # A hook's call (advance=False) fetches context: it never waits for a person.
            verdict = await self._checked_call(tool, arguments, tool_call_id, wait=advance)
            if isinstance(verdict, CallStopped):
                return self._calls.stopped(tool, verdict, tool_call_id)
            approval = verdict.approval
        outcome = await self._calls.invoke(
            tool, arguments, tool_call_id, timeout=timeout, advance=advance, approval=approval
        )
        if code.on_post_tool_use:
            outcome = await code.post_tool_use(self, tool, arguments, outcome)
        return outcome

    async def _checked_call(
        self,
        tool: ToolDescriptor,
        arguments: dict[str, Any],
        tool_call_id: str | None,
        *,
        wait: bool,
    ) -> CallPermitted | CallStopped:
        """The door's steps for one call, on the arguments the tool would be sent."""
        assert self._steps is not None
        state = self._state
        applied = apply_options(
            arguments,
            tool.options,
            {**self._calls.context(tool_call_id, state), "user": self.user},
        )
        return await self._steps.check(
            CheckedCall(
                user=self.user,
                groups=self.groups,
                state=state,
                request_id=self.request_id,
                tool_call_id=tool_call_id,
                tool=tool,
                arguments=applied.arguments,
                registry=self.registry,
                wait=wait,
            )
        )

    def _resolve(self, name: str) -> tuple[ToolDescriptor | None, Refusal | None]:
        if self.registry.is_available(name, self.groups, self._state):
            return self.registry.tool(name), None
        try:
            tool = self.registry.tool(name)
        except UnknownTool:
            return None, "unknown"
        if WILDCARD not in self.groups and set(tool.groups).isdisjoint(self.groups):
            return tool, "group"
        return tool, "state"

    def _advance(self, tool: ToolDescriptor) -> StateTransition | None:
        current = self._state
        following = self.registry.next_state(tool, current)
        if following == current:
            return None
        transition = StateTransition(
            tool=tool.name,
            from_state=current,
            to_state=following,
            timestamp=timestamp(self._clock()),
        )
        self._record.transitions.append(transition)
        seconds_in_state = self._timer() - self._entered
        self._enter(following, self.registry.availability(self.groups, following))
        self._metrics.state_changed(
            tool.name, current, following, seconds_in_state, len(self.available)
        )
        return transition

    def _enter(self, state: str, availability: Availability) -> None:
        self._state = state
        self._availability = availability
        self._entered = self._timer()
        self._lists = {}

    # ------------------------------------------------------------- ending

    def record_agent_run(
        self, model: str, iterations: int, *, input_tokens: int = 0, output_tokens: int = 0
    ) -> None:
        """Note the agent loop's model, turns and token usage for the audit record.

        An agent loop calls it after every model turn, so that a session that is
        cancelled or times out still records what it cost.
        """
        self._record.agent = AgentRun(
            model=model,
            iterations=iterations,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
        )

    async def close(self) -> None:
        """End the session and write its audit record (once; later calls do nothing)."""
        await self._completed(self._finish("completed", None))

    async def __aenter__(self) -> AgentSession:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None:
            record = self._finish("completed", None)
        elif isinstance(exc, anyio.get_cancelled_exc_class()):
            record = self._finish("cancelled", None)
        else:
            # The type only: an exception's message may quote arguments or secrets.
            record = self._finish("failed", type(exc).__name__)
        await self._completed(record)

    async def _completed(self, record: AuditRecord | None) -> None:
        if record is not None and self._code.on_completion:
            await self._code.completion(self, record)

    def _finish(self, outcome: SessionOutcome, error: str | None) -> AuditRecord | None:
        if self._closed:
            return None
        self._closed = True
        # The runner reads the state through the session, a reference cycle; closed,
        # the state is final, so the runner keeps that instead and the session goes
        # with its last reference rather than waiting for the cycle collector.
        self._calls.release(self._state)
        if self._leave is not None:
            self._leave()
        self._metrics.session_closed(self._state, self._timer() - self._entered)
        return self._record.completed(
            outcome,
            error,
            granted=self.groups,
            allowed=self.permissions.allowed(self.user),
            final_state=self._state,
            initial=self._initial,
        )

    def _deny(self, exc: AccessDenied, *, state: str | None = None) -> None:
        if state is None:
            self._metrics.access_denied_for(exc.denied)
        self._closed = True
        self._state = self.initial_state if state is None else state
        self.groups = ()
        self._record.denied(exc, allowed=self.permissions.allowed(self.user), state=state)
