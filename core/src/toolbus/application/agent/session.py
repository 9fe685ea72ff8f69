"""Agent sessions: one agent request's tools, calls, state, access check and audit record.

An :class:`AgentSession` is what an agent loop holds while it answers one
request::

    async with AgentSession(tools, user="alice", groups=["read-only"]) as session:
        offered = session.tools("openai")           # for the LLM request
        outcome = await session.call(name, arguments, tool_call_id=call_id)
        messages.append(outcome.as_openai_message())  # the observation, for the LLM

It applies docs/groups-and-states.md and docs/access-control.md: the requested
groups are checked against the user's permissions before anything runs
(:class:`~toolbus.domain.errors.AccessDenied`), only tools offered for (groups,
current state) can be called, and a *successful* call moves the session to the tool's ``state``.

What reaches the caller, and how:

* a tool not offered now (unknown, outside the groups, or not in this state):
  a refusal observation for the LLM; no call is made and the state is unchanged;
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
act around every executed call and see the audit record when the session ends.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any

import anyio

from toolbus.application.agent.audit import (
    AUDIT_LOGGER,
    AccessDenial,
    AgentRun,
    AuditRecord,
    AuditSink,
    CallRecord,
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
from toolbus.application.agent.outcomes import CallOutcome
from toolbus.application.calls.client import CallResult, ToolServiceClient
from toolbus.application.calls.metrics import ToolbusMetrics, default_metrics
from toolbus.application.calls.tools import Tools
from toolbus.application.identity.caller import granting
from toolbus.domain.access.permissions import Permissions, load_permissions
from toolbus.domain.calls.arguments import AppliedOptions, apply_options
from toolbus.domain.config.descriptors import ToolDescriptor
from toolbus.domain.config.registry import WILDCARD, Availability, Registry, normalize_state
from toolbus.domain.config.schemas import ExportFormat
from toolbus.domain.errors import AccessDenied, ToolCallError, UnknownTool
from toolbus.domain.hooks.configured import HookConfig, ToolCallHook, load_hooks

_audit_log = logging.getLogger(AUDIT_LOGGER)

#: How many tool names a refusal observation lists before "and N more".
MAX_NAMES_IN_OBSERVATION = 20
# A model may invent any name; the audit record keeps a bounded prefix of it.
_MAX_AUDITED_NAME = 64


_DEFAULT_SINK = LoggingAuditSink()


# ------------------------------------------------------------------ the session


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
        permissions: who may request which groups. Default: the snapshot's
            ``permissions`` section, or no restriction if it has none.
        audit: where the audit record goes; default the ``toolbus.audit`` logger.
        metrics: default :func:`~toolbus.application.calls.metrics.default_metrics`.
        timeout: per-call time limit in seconds; default the client's.
        clock: Unix time, for timestamps and hook TTLs. timer: monotonic
            seconds, for durations.
        hooks: configured hooks (:func:`~toolbus.domain.hooks.configured.parse_hooks`,
            :func:`~toolbus.domain.hooks.configured.load_hooks`) for :meth:`start`.
            Default: the snapshot's ``hooks`` section, or none.
        code_hooks: code hooks, compiled once at start-up
            (:class:`toolbus.hooks.CodeHooks`); default none.

    Raises :class:`AccessDenied` (after counting and auditing the denial) when
    the groups exceed the user's permissions, and
    :class:`~toolbus.domain.errors.ConfigError` when the snapshot's ``hooks``
    section is invalid.
    """

    def __init__(
        self,
        tools: Tools | ToolServiceClient,
        registry: Registry | None = None,
        *,
        user: str,
        groups: Sequence[str] | None = None,
        state: str | None = None,
        request_id: str | None = None,
        permissions: Permissions | None = None,
        audit: AuditSink | None = None,
        metrics: ToolbusMetrics | None = None,
        timeout: float | None = None,
        clock: Callable[[], float] = time.time,
        timer: Callable[[], float] = time.perf_counter,
        hooks: Sequence[HookConfig] | None = None,
        code_hooks: CompiledHooks | None = None,
    ) -> None:
        if isinstance(tools, Tools):
            registry = tools.registry if registry is None else registry
        elif registry is None:
            raise TypeError(
                "AgentSession needs the configuration: pass registry=... with a "
                "ToolServiceClient, or pass a Tools facade"
            )
        else:
            tools = Tools(tools, registry)
        if isinstance(groups, str):
            raise TypeError(f"groups must be a list of group names, not the string {groups!r}")
        self.registry: Registry = registry
        self.user = user
        self.request_id = request_id or str(uuid.uuid4())
        #: The groups as requested: ``None`` (absent) and ``()`` (empty) differ.
        self.requested_groups: tuple[str, ...] | None = None if groups is None else tuple(groups)
        self.initial_state = normalize_state(state)
        self.permissions = (
            permissions
            if permissions is not None
            else SNAPSHOT_PERMISSIONS.get(registry, "", lambda r: load_permissions(r.snapshot))
        )
        self.timeout = timeout
        #: The configured hooks :meth:`start` runs, in order.
        self.hooks: tuple[HookConfig, ...] = (
            SNAPSHOT_HOOKS.get(registry, "", lambda r: load_hooks(r.snapshot))
            if hooks is None
            else _checked_hooks(hooks)
        )
        self._code = NO_HOOKS if code_hooks is None else code_hooks
        # Every call names this session's registry, so a Tools given is used as it is.
        self._tools = tools
        self._audit = _DEFAULT_SINK if audit is None else audit
        self._metrics = default_metrics() if metrics is None else metrics
        self._clock = clock
        self._timer = timer
        self._started_at = clock()
        self._started = timer()
        self._closed = False
        self._transitions: list[StateTransition] = []
        self._calls: list[CallRecord] = []
        self._lists: dict[str, list[dict[str, Any]]] = {}
        self._agent_run: tuple[str, int, int, int] | None = None

        try:
            #: The groups tools are filtered with: the request after defaulting.
            self.groups: tuple[str, ...] = self.permissions.check(user, self.requested_groups)
        except AccessDenied as exc:
            self._deny(exc)
            raise
        self._initial = registry.availability(self.groups, self.initial_state)
        self._enter(self.initial_state, self._initial)
        self._metrics.observe_registry(registry)
        self._metrics.session_started(self.groups, len(self._initial.available))

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
        return tuple(self._transitions)

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
        if self._closed:
            raise RuntimeError(
                f"agent session {self.request_id} is closed; start a new AgentSession"
            )
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
        if self._closed:
            raise RuntimeError(
                f"agent session {self.request_id} is closed; start a new AgentSession"
            )
        # The single path every call takes: resolve, check, then execute. Code
        # hooks (pre/post tool use) run around _execute (in _run), so that
        # refusals stay out of their reach and every executed call is audited
        # the same way.
        tool, refusal = self._resolve(name)
        if refusal is not None:
            return self._refuse(name, tool, refusal, tool_call_id)
        assert tool is not None
        parsed = _parse_arguments(arguments)
        if isinstance(parsed, str):
            return self._unusable_arguments(tool, parsed, tool_call_id)
        return await self._run(tool, parsed, tool_call_id)

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
        state = self._state
        at = self._clock()
        started = self._timer()
        service = tool.service or tool.type
        context = {
            "request_id": self.request_id,
            "tool_call_id": tool_call_id or "",
            "state": state,
        }
        try:
            # A signing client vouches for the groups this session was granted.
            with granting(self.groups):
                invocation = await self._tools.invoke(
                    tool,
                    arguments,
                    user=self.user,
                    timeout=self.timeout if timeout is None else timeout,
                    context=context,
                    registry=self.registry,
                )
        except ToolCallError as exc:
            seconds = self._timer() - started
            self._metrics.tool_call(tool.name, service, seconds, exc.error_type)
            self._record(
                tool.name,
                tool_call_id,
                "error",
                state,
                at,
                seconds,
                exc.error_type,
                applied=apply_options(arguments, tool.options, {}),
            )
            return CallOutcome(
                name=tool.llm_name,
                observation=f"Error: tool {tool.llm_name!r} failed ({exc.error_type}): "
                f"{exc.message}",
                status="error",
                state=self._state,
                tool=tool.name,
                tool_call_id=tool_call_id,
                error_type=exc.error_type,
            )
        except BaseException as exc:
            seconds = self._timer() - started
            cancelled = isinstance(exc, anyio.get_cancelled_exc_class())
            if not cancelled:
                self._metrics.tool_call(tool.name, service, seconds, type(exc).__name__)
            status: CallStatus = "cancelled" if cancelled else "failed"
            self._record(tool.name, tool_call_id, status, state, at, seconds, type(exc).__name__)
            raise
        seconds = self._timer() - started
        self._metrics.tool_call(tool.name, service, seconds, None)
        self._record(tool.name, tool_call_id, "ok", state, at, seconds, None, invocation=invocation)
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
        self._transitions.append(transition)
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
        self._record(
            audited, tool_call_id, "refused", self._state, self._clock(), 0.0, None, refusal
        )
        if refusal == "state":
            assert tool is not None
            why = (
                f"The tool {tool.llm_name!r} cannot be used in the current state ({self._state!r})."
            )
        else:
            # Outside the session's groups looks exactly like unknown: the model
            # learns nothing about tools it was not offered.
            why = f"There is no tool named {name!r} available to you."
        observation = f"{why} No call was made. {self._offer_text()}"
        return CallOutcome(
            name=name,
            observation=observation,
            status="refused",
            state=self._state,
            tool=tool.name if tool is not None and refusal == "state" else None,
            tool_call_id=tool_call_id,
            refusal=refusal,
        )

    def _denied(self, tool: ToolDescriptor, reason: str, tool_call_id: str | None) -> CallOutcome:
        """A code hook denied the call: refused, with its reason as the observation."""
        self._record(
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
        self._record(
            tool.name, tool_call_id, "error", self._state, self._clock(), 0.0, "bad-request"
        )
        return CallOutcome(
            name=tool.llm_name,
            observation=f"Error: the arguments for tool {tool.llm_name!r} {problem}. No call was "
            "made; call it again with a JSON object of arguments.",
            status="error",
            state=self._state,
            tool=tool.name,
            tool_call_id=tool_call_id,
            error_type="bad-request",
        )

    def _offer_text(self) -> str:
        names = [tool.llm_name for tool in self.available]
        if not names:
            return "No tools are available now."
        shown = ", ".join(names[:MAX_NAMES_IN_OBSERVATION])
        more = len(names) - MAX_NAMES_IN_OBSERVATION
        return f"Tools you can use now: {shown}{f', and {more} more' if more > 0 else ''}."

    def _record(
        self,
        tool: str,
        tool_call_id: str | None,
        status: CallStatus,
        state: str,
        at: float,
        seconds: float,
        error_type: str | None,
        refusal: Refusal | None = None,
        *,
        invocation: CallResult | None = None,
        applied: AppliedOptions | None = None,
    ) -> None:
        if invocation is not None:
            applied = invocation.applied
        self._calls.append(
            CallRecord(
                tool=tool,
                tool_call_id=tool_call_id,
                status=status,
                refusal=refusal,
                error_type=error_type,
                state=state,
                timestamp=timestamp(at),
                duration_seconds=seconds,
                defaulted_arguments=list(applied.defaulted) if applied else [],
                fixed_arguments=list(applied.fixed) if applied else [],
                env_arguments=list(applied.env) if applied else [],
                after_execution=invocation.after_execution if invocation else None,
            )
        )

    # ------------------------------------------------------------- ending

    def record_agent_run(
        self, model: str, iterations: int, *, input_tokens: int = 0, output_tokens: int = 0
    ) -> None:
        """Note the agent loop's model, turns and token usage for the audit record.

        An agent loop calls it after every model turn, so that a session that is
        cancelled or times out still records what it cost.
        """
        # Kept as plain values: this runs every turn, the record is built once.
        self._agent_run = (model, iterations, input_tokens, output_tokens)

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
        self._metrics.session_closed(self._state, self._timer() - self._entered)
        initial = self._initial
        return self._emit(
            outcome=outcome,
            error=error,
            granted=list(self.groups),
            final_state=self._state,
            available=[t.name for t in initial.available],
            by_group=list(initial.filtered_by_group),
            by_state=list(initial.filtered_by_state),
        )

    def _deny(self, exc: AccessDenied) -> None:
        self._metrics.access_denied_for(exc.denied)
        self._closed = True
        self._state = self.initial_state
        self.groups = ()
        self._emit(
            outcome="denied",
            error=None,
            granted=[],
            final_state=self.initial_state,
            available=[],
            by_group=[],
            by_state=[],
            denial=AccessDenial(denied_groups=list(exc.denied), wildcard=WILDCARD in exc.denied),
        )

    def _emit(
        self,
        *,
        outcome: SessionOutcome,
        error: str | None,
        granted: list[str],
        final_state: str,
        available: list[str],
        by_group: list[str],
        by_state: list[str],
        denial: AccessDenial | None = None,
    ) -> AuditRecord:
        record = AuditRecord(
            request_id=self.request_id,
            user=self.user,
            requested_groups=None if self.requested_groups is None else list(self.requested_groups),
            granted_groups=granted,
            allowed_groups=list(self.permissions.allowed(self.user)),
            initial_state=self.initial_state,
            final_state=final_state,
            available_tools=available,
            filtered_by_group=by_group,
            filtered_by_state=by_state,
            state_transitions=list(self._transitions),
            calls=list(self._calls),
            access_denied=denial,
            agent=None
            if self._agent_run is None
            else AgentRun(
                model=self._agent_run[0],
                iterations=self._agent_run[1],
                input_tokens=self._agent_run[2],
                output_tokens=self._agent_run[3],
            ),
            outcome=outcome,
            error=error,
            started_at=timestamp(self._started_at),
            duration_seconds=self._timer() - self._started,
        )
        try:
            self._audit.emit(record)
        except Exception:
            # The request has run (or been refused) already; failing it now would
            # hide its result without undoing anything. Make the loss loud instead.
            _audit_log.exception(
                "could not write the audit record of agent session %s", self.request_id
            )
        return record


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


def _parse_arguments(arguments: Mapping[str, Any] | str | None) -> dict[str, Any] | str:
    """The arguments as a dict, or a description of what is wrong with them."""
    if arguments is None:
        return {}
    if isinstance(arguments, str):
        if not arguments.strip():
            return {}  # some models send "" for a call without arguments
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError as exc:
            return f"are not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})"
    if not isinstance(arguments, Mapping):
        return f"must be a JSON object, not {type(arguments).__name__}"
    return dict(arguments)
