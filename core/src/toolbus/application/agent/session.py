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
from collections.abc import AsyncIterator, Callable, Collection, Mapping, Sequence
from types import TracebackType
from typing import Any

import anyio

from toolbus.application.agent.audit import (
    AccessDenial,
    AgentRun,
    AuditRecord,
    AuditSink,
    CallStatus,
    LoggingAuditSink,
    Refusal,
    SessionOutcome,
    StateTransition,
    timestamp,
)
from toolbus.application.agent.caches import SNAPSHOT_HOOKS, SNAPSHOT_PERMISSIONS, tool_list
from toolbus.application.agent.code_hooks import NO_HOOKS, CompiledHooks, Deny
from toolbus.application.agent.configured_hooks import run_request_start_hooks
from toolbus.application.agent.held import HeldSession
from toolbus.application.agent.observations import (
    failed,
    not_in_state,
    not_offered,
    parse_arguments,
    unusable_arguments,
)
from toolbus.application.agent.outcomes import CallOutcome
from toolbus.application.agent.recording import SessionRecorder
from toolbus.application.agent.rules import Leave, SessionRules, rules_of
from toolbus.application.calls.client import CallResult, ToolServiceClient
from toolbus.application.calls.metrics import ToolbusMetrics, default_metrics
from toolbus.application.calls.tools import Tools
from toolbus.application.identity.caller import granting
from toolbus.domain.access.permissions import Permissions, load_permissions
from toolbus.domain.calls.arguments import apply_options
from toolbus.domain.config.descriptors import ToolDescriptor
from toolbus.domain.config.registry import WILDCARD, Availability, Registry, normalize_state
from toolbus.domain.config.schemas import ExportFormat
from toolbus.domain.errors import AccessDenied, StateRefused, ToolCallError, UnknownTool
from toolbus.domain.hooks.configured import HookConfig, ToolCallHook, load_hooks

# A model may invent any name; the audit record keeps a bounded prefix of it.
_MAX_AUDITED_NAME = 64

_DEFAULT_SINK = LoggingAuditSink()


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
        rules = rules or _NO_RULES
        if resume is not None:
            user, state, request_id = resume.user, resume.state, resume.request_id
            groups = resume.requested_groups
        if user is None:
            raise TypeError("AgentSession needs the user the request is for: user=...")
        if isinstance(groups, str):
            raise TypeError(f"groups must be a list of group names, not the string {groups!r}")
        self.registry: Registry = registry
        self.user = user
        self.request_id = request_id or str(uuid.uuid4())
        #: The groups as requested: ``None`` (absent) and ``()`` (empty) differ.
        self.requested_groups: tuple[str, ...] | None = None if groups is None else tuple(groups)
        self.initial_state = normalize_state(state if resume is None else resume.initial_state)
        self.permissions = (
            permissions
            if permissions is not None
            else rules.permissions
            if rules.permissions is not None
            else SNAPSHOT_PERMISSIONS.get(registry, "", lambda r: load_permissions(r.snapshot))
        )
        self.timeout = timeout if timeout is not None else rules.timeout
        #: The configured hooks :meth:`start` runs, in order.
        self.hooks: tuple[HookConfig, ...] = (
            _checked_hooks(hooks)
            if hooks is not None
            else rules.hooks
            if rules.hooks is not None
            else SNAPSHOT_HOOKS.get(registry, "", lambda r: load_hooks(r.snapshot))
        )
        code = code_hooks if code_hooks is not None else rules.code_hooks
        self._code = NO_HOOKS if code is None else code
        # Every call names this session's registry, so a Tools given is used as it is.
        self._tools = tools
        self._metrics = metrics if metrics is not None else rules.metrics or default_metrics()
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
            sink=audit if audit is not None else rules.audit or _DEFAULT_SINK,
            timer=timer,
            calls=() if resume is None else resume.calls,
            transitions=() if resume is None else resume.transitions,
            agent=None if resume is None else resume.agent,
        )

        # Every label a refusal or a call records is one the configuration names.
        self._metrics.observe_registry(registry)
        try:
            #: The groups tools are filtered with: the request after defaulting.
            self.groups: tuple[str, ...] = self.permissions.check(user, self.requested_groups)
        except AccessDenied as exc:
            self._deny(exc)
            raise
        current = normalize_state(state)
        entries = entry_states if entry_states is not None else rules.entry_states
        if resume is None and entries is not None and current not in entries:
            refused = StateRefused(user, current, sorted(entries))
            # The record keeps a bounded prefix: the caller chose the state, any length.
            self._deny(refused, state=current[:_MAX_AUDITED_NAME])
            raise refused
        self._initial = registry.availability(self.groups, self.initial_state)
        self._enter(current, registry.availability(self.groups, current))
        if rules.places is not None:
            self._leave = rules.places.take(user)  # last: nothing to undo if refused
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
        if self._code.on_pre_tool_use:
            decision = await self._code.pre_tool_use(self, tool, parsed)
            if isinstance(decision, Deny):
                return self._denied(tool, decision.reason, tool_call_id)
            parsed = decision
        return ToolStream(self, tool, parsed, tool_call_id)

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
            return self._refuse(name, tool, refusal, tool_call_id)
        assert tool is not None
        parsed = parse_arguments(arguments)
        if isinstance(parsed, str):
            return self._unusable_arguments(tool, parsed, tool_call_id)
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
        """Pre-use code hooks, the call, post-use code hooks. Each seam costs nothing when empty."""
        code = self._code
        if code.on_pre_tool_use:
            decision = await code.pre_tool_use(self, tool, arguments)
            if isinstance(decision, Deny):
                return self._denied(tool, decision.reason, tool_call_id)
            arguments = decision
        outcome = await self._execute(
            tool, arguments, tool_call_id, timeout=timeout, advance=advance
        )
        if code.on_post_tool_use:
            outcome = await code.post_tool_use(self, tool, arguments, outcome)
        return outcome

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

    async def _execute(
        self,
        tool: ToolDescriptor,
        arguments: dict[str, Any],
        tool_call_id: str | None,
        *,
        timeout: float | None = None,
        advance: bool = True,
    ) -> CallOutcome:
        state, at, started = self._state, self._clock(), self._timer()
        try:
            # A signing client vouches for the groups this session was granted.
            with granting(self.groups):
                invocation = await self._tools.invoke(
                    tool,
                    arguments,
                    user=self.user,
                    timeout=self.timeout if timeout is None else timeout,
                    context=self._context(tool_call_id, state),
                    registry=self.registry,
                )
        except ToolCallError as exc:
            return self._failed(tool, arguments, tool_call_id, exc, state, at, started)
        except BaseException as exc:
            self._broke(tool, tool_call_id, exc, state, at, started)
            raise
        return self._succeeded(tool, tool_call_id, invocation, state, at, started, advance)

    def _context(self, tool_call_id: str | None, state: str) -> dict[str, str]:
        return {"request_id": self.request_id, "tool_call_id": tool_call_id or "", "state": state}

    def _failed(
        self,
        tool: ToolDescriptor,
        arguments: dict[str, Any],
        tool_call_id: str | None,
        exc: ToolCallError,
        state: str,
        at: float,
        started: float,
    ) -> CallOutcome:
        seconds = self._timer() - started
        self._metrics.tool_call(tool.name, tool.service or tool.type, seconds, exc.error_type)
        applied = apply_options(arguments, tool.options, {})
        self._record.call(
            tool.name, tool_call_id, "error", state, at, seconds, exc.error_type, applied=applied
        )
        return CallOutcome(
            name=tool.llm_name,
            observation=failed(tool, exc.error_type, exc.message),
            status="error",
            state=self._state,
            tool=tool.name,
            tool_call_id=tool_call_id,
            error_type=exc.error_type,
        )

    def _broke(
        self,
        tool: ToolDescriptor,
        tool_call_id: str | None,
        exc: BaseException,
        state: str,
        at: float,
        started: float,
    ) -> None:
        seconds = self._timer() - started
        cancelled = isinstance(exc, anyio.get_cancelled_exc_class())
        if not cancelled:
            self._metrics.tool_call(
                tool.name, tool.service or tool.type, seconds, type(exc).__name__
            )
        status: CallStatus = "cancelled" if cancelled else "failed"
        self._record.call(tool.name, tool_call_id, status, state, at, seconds, type(exc).__name__)

    def _succeeded(
        self,
        tool: ToolDescriptor,
        tool_call_id: str | None,
        invocation: CallResult,
        state: str,
        at: float,
        started: float,
        advance: bool,
    ) -> CallOutcome:
        seconds = self._timer() - started
        self._metrics.tool_call(tool.name, tool.service or tool.type, seconds, None)
        self._record.call(
            tool.name, tool_call_id, "ok", state, at, seconds, None, invocation=invocation
        )
        # Another call of this session may have moved the state while this one
        # ran; the transition starts from the state as it is now.
        transition = self._advance(tool) if advance else None
        return CallOutcome(
            name=tool.llm_name,
            observation=invocation.observation,
            after_execution=invocation.after_execution,
            status="ok",
            state=self._state,
            tool=tool.name,
            tool_call_id=tool_call_id,
            transition=transition,
        )

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

    def _refuse(
        self, name: str, tool: ToolDescriptor | None, refusal: Refusal, tool_call_id: str | None
    ) -> CallOutcome:
        self._metrics.call_refused(None if tool is None else tool.name, refusal)
        audited = tool.name if tool is not None else name[:_MAX_AUDITED_NAME]
        self._record.call(
            audited, tool_call_id, "refused", self._state, self._clock(), 0.0, None, refusal
        )
        if refusal == "state":
            assert tool is not None
            return CallOutcome(
                name=name,
                observation=not_in_state(tool, self._state, self.available),
                status="refused",
                state=self._state,
                tool=tool.name,
                tool_call_id=tool_call_id,
                refusal="state",
            )
        # Outside the session's groups looks exactly like unknown, to the model and
        # to whoever reads the outcome: only the audit record keeps the difference.
        return CallOutcome(
            name=name,
            observation=not_offered(name, self.available),
            status="refused",
            state=self._state,
            tool_call_id=tool_call_id,
            refusal="unknown",
        )

    def _denied(self, tool: ToolDescriptor, reason: str, tool_call_id: str | None) -> CallOutcome:
        """A code hook denied the call: refused, with its reason as the observation."""
        self._record.call(
            tool.name, tool_call_id, "refused", self._state, self._clock(), 0.0, None, "hook"
        )
        return CallOutcome(
            name=tool.llm_name,
            observation=reason,
            status="refused",
            state=self._state,
            tool=tool.name,
            tool_call_id=tool_call_id,
        )

    def _unusable_arguments(
        self, tool: ToolDescriptor, problem: str, tool_call_id: str | None
    ) -> CallOutcome:
        self._record.call(
            tool.name, tool_call_id, "error", self._state, self._clock(), 0.0, "bad-request"
        )
        return CallOutcome(
            name=tool.llm_name,
            observation=unusable_arguments(tool, problem),
            status="error",
            state=self._state,
            tool=tool.name,
            tool_call_id=tool_call_id,
            error_type="bad-request",
        )

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
        if self._leave is not None:
            self._leave()
        self._metrics.session_closed(self._state, self._timer() - self._entered)
        initial = self._initial
        return self._record.emit(
            outcome=outcome,
            error=error,
            granted=list(self.groups),
            allowed=list(self.permissions.allowed(self.user)),
            final_state=self._state,
            available=[t.name for t in initial.available],
            by_group=list(initial.filtered_by_group),
            by_state=list(initial.filtered_by_state),
        )

    def _deny(self, exc: AccessDenied, *, state: str | None = None) -> None:
        if state is None:
            self._metrics.access_denied_for(exc.denied)
        self._closed = True
        self._state = self.initial_state if state is None else state
        self.groups = ()
        self._record.initial_state = self._state
        self._record.emit(
            outcome="denied",
            error=None,
            granted=[],
            allowed=list(self.permissions.allowed(self.user)),
            final_state=self._state,
            available=[],
            by_group=[],
            by_state=[],
            denial=AccessDenial(
                denied_groups=list(exc.denied), wildcard=WILDCARD in exc.denied, state=state
            ),
        )


class ToolStream:
    """A streamed call that passed its session's checks; ``async for chunk in stream``.

    When the chunks end, :attr:`outcome` holds the call's outcome (the whole
    observation), as :meth:`AgentSession.call` would have returned it. A tool
    error raises its :class:`~toolbus.domain.errors.ToolCallError` after it is
    recorded; with post-use hooks installed, its message is what they made of it.
    """

    def __init__(
        self,
        session: AgentSession,
        tool: ToolDescriptor,
        arguments: dict[str, Any],
        tool_call_id: str | None,
    ) -> None:
        self.session = session
        self.tool = tool
        self.arguments = arguments
        self.tool_call_id = tool_call_id
        #: The outcome, once the stream has ended.
        self.outcome: CallOutcome | None = None

    def __aiter__(self) -> AsyncIterator[str]:
        return self._chunks()

    async def _chunks(self) -> AsyncIterator[str]:
        session, tool = self.session, self.tool
        post = session._code.post_tool_use if session._code.on_post_tool_use else None
        state, at, started = session._state, session._clock(), session._timer()
        chunks: list[str] = []
        try:
            stream = session._tools.stream(
                tool.name,
                self.arguments,
                user=session.user,
                timeout=session.timeout,
                context=session._context(self.tool_call_id, state),
                registry=session.registry,
            )
            # The request, and the call token vouching for the granted groups, go
            # out with the first step; no yield inside the block keeps the context ours.
            with granting(session.groups):
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
            outcome = session._failed(
                tool, self.arguments, self.tool_call_id, exc, state, at, started
            )
            if post is not None:
                outcome = await post(session, tool, self.arguments, outcome)
                self.outcome = outcome
                raise ToolCallError(outcome.observation, error_type=exc.error_type) from None
            self.outcome = outcome
            raise
        except BaseException as exc:
            session._broke(tool, self.tool_call_id, exc, state, at, started)
            raise
        answer = CallResult(
            "".join(chunks),
            tool.after_execution,
            apply_options(self.arguments, tool.options, {}),
            "",
        )
        outcome = session._succeeded(tool, self.tool_call_id, answer, state, at, started, True)
        if post is not None:
            outcome = await post(session, tool, self.arguments, outcome)
            yield outcome.observation
        self.outcome = outcome


_NO_RULES = SessionRules()


def _checked_hooks(hooks: Sequence[HookConfig]) -> tuple[HookConfig, ...]:
    if isinstance(hooks, str | bytes | Mapping):
        raise TypeError("hooks must be a sequence of hook models; build it with parse_hooks(...)")
    found = tuple(hooks)
    for hook in found:
        if not isinstance(hook, ToolCallHook):
            raise TypeError(
                f"hooks must be parsed hook models, not {type(hook).__name__}; "
                "build them with toolbus.hooks.parse_hooks(...)"
            )
    return found
