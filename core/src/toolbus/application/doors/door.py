"""The one composition of a caller's session: :class:`FrontDoor`.

Every front door (the HTTP gateway, ``toolbus mcp serve``, the agent service
and ``toolbus ask``, ``open_tools`` in Python) builds one :class:`FrontDoor`
per process from the operator's local files, and opens every caller's session
through it::

    door = FrontDoor.from_files(tools, local=snapshot, settings=toolbus_toml, ...)
    session = door.open("alice", groups=["default"], state=None)   # an AgentSession

so that each session gets, the same way at every door: the permissions
(:mod:`toolbus.application.doors.policy`), the entry states, configured hooks
and code hooks, per-user limits, the audit sinks and the metrics, the steps
each call passes (the call policy on its arguments, approvals:
:mod:`toolbus.application.doors.steps`), and its calls signed by the door's
client. Sessions a door keeps between requests (gateway sessions, MCP
workflows, agent conversations) are held as plain data
(:mod:`toolbus.application.doors.holding`) and resumed per request.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from toolbus.application.agent.audit import (
    AuditEntry,
    AuditRecord,
    AuditSink,
    AuditSinks,
    CallRecord,
    JsonLinesAuditSink,
    LoggingAuditSink,
    RefusedRecordAudit,
    StateTransition,
    timestamp,
)
from toolbus.application.agent.code_hooks import CompiledHooks
from toolbus.application.agent.held import HeldSession
from toolbus.application.agent.rules import SessionRules, govern
from toolbus.application.agent.session import AgentSession
from toolbus.application.agent.steps import CallStep, CallSteps
from toolbus.application.calls.metrics import ToolbusMetrics, default_metrics
from toolbus.application.calls.tools import Tools
from toolbus.application.doors.approvals import ApprovalBook
from toolbus.application.doors.holding import (
    Held,
    HeldAlready,
    HeldKey,
    InProcessHolder,
    SessionHolder,
)
from toolbus.application.doors.limits import UserPlaces, check
from toolbus.application.doors.policy import AccessPolicy
from toolbus.application.doors.settings import DoorSettings, parse_door_settings
from toolbus.application.doors.steps import call_steps
from toolbus.application.doors.steps.approvals import ApprovalStep
from toolbus.application.doors.stored import MAX_CALLS_HELD, StoredHolder
from toolbus.application.identity.documents import DocumentVerifier
from toolbus.application.sealing import RefusedRecord
from toolbus.domain.config.registry import Registry, normalize_state
from toolbus.domain.errors import AccessDenied, ConfigError, Problem
from toolbus.domain.hooks.configured import SECTION as HOOKS_SECTION
from toolbus.domain.hooks.configured import HookConfig, load_hooks
from toolbus.ports import StateStore

log = logging.getLogger("toolbus.doors")

#: Tries at keeping a request's calls on a session other requests keep moving.
MERGE_TRIES = 8

#: Kinds of held sessions, and the setting that limits each.
SESSION = "session"
WORKFLOW = "workflow"
CONVERSATION = "conversation"


class AccessControlOff(ConfigError):
    """A door that accepts network callers was started with no permissions configured."""


class FrontDoor:
    """Opens, holds and resumes callers' sessions the same way at every door.

    Args:
        tools: the tools facade sessions call through (its client signs calls
            when it has a signer); its registry may follow live configuration.
        policy: the permissions (:class:`~toolbus.application.doors.policy.AccessPolicy`).
        settings: the ``[doors]`` table.
        code_hooks: compiled once at start-up (``CodeHooks.installed()``).
        hooks: configured hooks for every session (``toolbus.toml``'s ``[[hooks]]``);
            default each configuration snapshot's ``hooks`` section.
        audit: where audit records go, besides ``settings.audit_file``;
            default the ``toolbus.audit`` logger.
        metrics, timeout: for every session.
        holder: where held sessions are kept; default this process's memory
            (a :class:`~toolbus.application.doors.stored.StoredHolder` shares them
            between replicas). Its clock times idleness (monotonic in one process,
            the wall clock in a state store).
        steps: what every call passes, in order
            (:func:`~toolbus.application.doors.steps.call_steps` builds them from
            the operator's files); default the steps of no settings (approvals a
            tool's descriptor asks for are refused: there is no store). The door
            closes them.
    """

    def __init__(
        self,
        tools: Tools,
        *,
        policy: AccessPolicy,
        settings: DoorSettings | None = None,
        code_hooks: CompiledHooks | None = None,
        hooks: tuple[HookConfig, ...] | None = None,
        audit: AuditSink | None = None,
        metrics: ToolbusMetrics | None = None,
        timeout: float | None = None,
        holder: SessionHolder | None = None,
        steps: Sequence[CallStep] | None = None,
    ) -> None:
        self.tools = tools
        self.hooks = hooks
        self.policy = policy
        self.settings = settings or DoorSettings.model_validate({})
        self.code_hooks = code_hooks
        self.metrics = default_metrics() if metrics is None else metrics
        self.timeout = timeout
        # Not "holder or ...": an empty in-process holder is falsy (it has a length).
        self.holder: SessionHolder = InProcessHolder() if holder is None else holder
        self.clock = self.holder.clock
        #: Calls a held session's record takes before it is written (``calls-per-record``;
        #: a session held in a state store carries its record on every call, so there
        #: at most MAX_CALLS_HELD unless set lower).
        self.calls_per_record = self.settings.calls_per_record
        if isinstance(self.holder, StoredHolder) and "calls_per_record" not in (
            self.settings.model_fields_set
        ):
            self.calls_per_record = min(self.calls_per_record, MAX_CALLS_HELD)
        sinks: list[AuditSink] = [LoggingAuditSink() if audit is None else audit]
        self._file: JsonLinesAuditSink | None = None
        if self.settings.audit_file is not None:
            self._file = JsonLinesAuditSink(self.settings.audit_file)
            sinks.append(self._file)
        self.audit: AuditSink = sinks[0] if len(sinks) == 1 else AuditSinks(sinks)
        #: Sessions open in this process (agent requests, Python sessions), per user.
        self.sessions = UserPlaces("sessions", self.settings.max_sessions_per_user)
        #: Event streams open in this process, per user.
        self.streams = UserPlaces("streams", self.settings.max_streams_per_user)
        self._rules: tuple[Registry | None, SessionRules, SessionRules] | None = None
        #: The session objects this process last used for held sessions, by key:
        #: (the version they reached, the session), reused while nothing moves them.
        self._live: dict[HeldKey, tuple[int, AgentSession]] = {}
        self.steps = CallSteps(call_steps(None) if steps is None else steps)
        #: The state store the door keeps its state in (its tasks, approvals), when the
        #: operator's files opened one for it (:func:`toolbus.runtime.opened_door`).
        self.store: StateStore | None = None
        try:
            self._steps_on(tools.registry, starting=True)
        except ConfigError:
            self.steps.close()
            raise
        govern(tools, lambda registry: self.rules(registry))

    @classmethod
    def from_files(
        cls,
        tools: Tools,
        *,
        local: Mapping[str, Any] | None,
        settings: Mapping[str, Any] | None,
        base_dir: Path | None = None,
        environ: Mapping[str, str] | None = None,
        steps: Sequence[CallStep] | None = None,
        **options: Any,
    ) -> FrontDoor:
        """The door the operator's files describe: ``local`` is the configuration given
        locally (a snapshot), ``settings`` the parsed ``toolbus.toml``; paths in it are
        relative to ``base_dir``. ``steps`` default to those ``settings`` describe with
        no policy engine and no store (:func:`~toolbus.application.doors.steps.call_steps`).
        :class:`ConfigError` names every problem."""
        table = parse_door_settings((settings or {}).get("doors"))
        base = base_dir or Path.cwd()
        live_keys = None
        if table.live_permissions is not None:
            sources = [
                source if source.startswith("env:") else str(base / source)
                for source in table.live_permissions
            ]
            try:
                live_keys = DocumentVerifier.load(sources, environ)
            except ValueError as exc:
                raise ConfigError(
                    [Problem("toolbus.toml [doors]", "live-permissions", str(exc))]
                ) from None
        if table.audit_file is not None:
            table = table.model_copy(update={"audit_file": str(base / table.audit_file)})
        policy = AccessPolicy(local, settings, live_keys=live_keys)
        hooks = None
        if (settings or {}).get(HOOKS_SECTION) is not None:
            # toolbus.toml's [[hooks]]; checked now, so that a mistake stops the start.
            hooks = load_hooks(local, settings)
        if steps is None:
            steps = call_steps(settings)
        return cls(tools, policy=policy, settings=table, hooks=hooks, steps=steps, **options)

    def refused_record(self, refused: RefusedRecord) -> None:
        """A record of the door's store did not open: logged, counted and audited, never used."""
        log.error(
            "refused a record of the state store (%s %r) and set it aside: %s",
            refused.namespace,
            refused.key,
            refused.reason,
        )
        self.metrics.record_refused(refused.namespace)
        self.audit.emit(
            RefusedRecordAudit(
                namespace=refused.namespace,
                key=refused.key,
                reason=refused.reason,
                at=timestamp(time.time()),
            )
        )

    def close(self) -> None:
        """Close the audit file, if the door writes one, and its steps (policy files are
        no longer followed)."""
        if self._file is not None:
            self._file.close()
        self.steps.close()

    @property
    def book(self) -> ApprovalBook | None:
        """Where the door's approvals wait (its approvals step's), if it keeps any."""
        for step in self.steps.steps:
            if isinstance(step, ApprovalStep):
                return step.book
        return None

    # ------------------------------------------------------------------ rules

    @property
    def entry_states(self) -> frozenset[str]:
        return frozenset(self.settings.entry_states)

    def require_access_control(self, door: str, *, allow_off: bool) -> str | None:
        """For a door that accepts network callers: refuse to start with access control
        unconfigured unless ``allow_off`` (``--no-access-control``); returns the warning
        to print when it is off."""
        if self.policy.configured:
            return None
        if not allow_off:
            raise AccessControlOff(
                [
                    Problem(
                        door,
                        "",
                        "access control is not configured: every caller could use every "
                        "tool. Add a [permissions] table to toolbus.toml (or a permissions "
                        "section to the configuration), or pass --no-access-control to "
                        "serve without it",
                    )
                ]
            )
        return (
            f"{door}: access control is OFF (--no-access-control): every caller may use every tool"
        )

    def rules(self, registry: Registry, *, places: bool = True) -> SessionRules:
        """What every session on ``registry`` follows; worked out once per registry."""
        cached = self._rules
        if cached is None or cached[0] is not registry:
            base = SessionRules(
                permissions=self.policy.permissions(registry),
                entry_states=self.entry_states,
                hooks=self.hooks,
                code_hooks=self.code_hooks,
                audit=self.audit,
                metrics=self.metrics,
                timeout=self.timeout,
                steps=self._steps_on(registry, starting=False),
            )
            counted = dataclasses.replace(base, places=self.sessions)
            self.metrics.observe_registry(
                registry, extra_groups=_groups_of(base), extra_states=self.entry_states
            )
            cached = self._rules = (registry, base, counted)
        return cached[2] if places else cached[1]

    def _steps_on(self, registry: Registry, *, starting: bool) -> CallSteps | None:
        """The steps calls on ``registry`` pass; ``None`` when none applies.

        At start, a step's problem with the configuration (a policy that does not
        fit it, a team ``[approvals.teams]`` does not name) stops the door
        (:class:`ConfigError`); on a later configuration it is logged, and the
        step refuses the calls it cannot decide.
        """
        problems = self.steps.problems(registry)
        if problems:
            if starting:
                raise ConfigError(problems)
            log.error("the call steps on the new configuration: %s", ConfigError(problems))
        return self.steps.on(registry)

    # ------------------------------------------------------------------ sessions

    def open(
        self,
        user: str,
        groups: Sequence[str] | None = None,
        state: str | None = None,
        *,
        request_id: str | None = None,
        counted: bool = True,
    ) -> AgentSession:
        """A session for ``user``: checked, audited if refused, hooks installed.

        ``counted``: the session takes one of the user's places until it closes
        (agent requests, Python sessions); a door that holds the session as data
        counts held sessions instead (:meth:`hold`).
        """
        registry = self.tools.registry
        return AgentSession(
            self.tools,
            registry,
            user=user,
            groups=groups,
            state=state,
            request_id=request_id,
            rules=self.rules(registry, places=counted),
        )

    def admit(
        self, user: str, groups: Sequence[str] | None = None, state: str | None = None
    ) -> tuple[str, ...]:
        """The groups granted to a request that opens no session (a tool list, a gate).

        A refusal is counted and audited exactly as a session's: the session it
        would have been is opened to write the record, and refuses.
        """
        rules = self.rules(self.tools.registry, places=False)
        assert rules.permissions is not None
        try:
            granted = rules.permissions.check(user, groups)
        except AccessDenied:
            granted = None
        if granted is None or normalize_state(state) not in self.entry_states:
            self.open(user, groups, state, counted=False)  # raises, after auditing
        assert granted is not None
        return granted

    def resume(self, held: Held) -> AgentSession:
        """The session ``held`` describes, for one request.

        The session object this process used last for it, when nothing moved
        the session since (the same version, on the same configuration); else
        resumed from the data, as any process would.
        """
        live = self._live.get(held.key)
        if (
            live is not None
            and live[0] == held.version
            and live[1].registry is self.tools.registry
            and not live[1].closed
        ):
            return live[1]
        return self.resumed(held.session)

    def resumed(self, held: HeldSession, *, counted: bool = False) -> AgentSession:
        """The session ``held`` describes, on the configuration now (groups checked again)."""
        registry = self.tools.registry
        return AgentSession(
            self.tools, registry, resume=held, rules=self.rules(registry, places=counted)
        )

    # ------------------------------------------------------------------ held sessions

    def _limit(self, kind: str) -> int:
        if kind == WORKFLOW:
            return self.settings.max_workflows_per_user
        return self.settings.max_sessions_per_user

    async def check_room(self, user: str, kind: str) -> None:
        """:class:`~toolbus.domain.errors.LimitReached` when ``user`` holds the most of ``kind``."""
        owned = await self.holder.owned(user, kind)
        if len(owned) < self._limit(kind):
            return
        idlest = min(held.last_used for held in owned)
        wait = idlest + self.settings.session_idle_timeout - self.clock()
        check(kind + "s", user, len(owned), self._limit(kind), int(wait) + 1)

    async def hold(self, session: AgentSession, kind: str, key: str | None = None) -> Held:
        """Keep ``session`` (its data) for its user under ``key`` (default its request id)."""
        await self.check_room(session.user, kind)
        held = Held(
            HeldKey(session.user, kind, key or session.request_id),
            session.held(),
            self.clock(),
        )
        if not await self.holder.put(held, ttl=self.settings.session_idle_timeout):
            raise HeldAlready(held.key)
        return held

    async def get(self, user: str, kind: str, key: str) -> Held | None:
        """The session ``user`` holds under ``key``; another user's keys never match."""
        return await self.holder.get(HeldKey(user, kind, key))

    async def keep(self, held: Held, session: AgentSession) -> Held:
        """Store what ``session`` (resumed from ``held``) reached.

        The audit record so far is written, and a fresh one starts in the same
        state under the same request id, when a call was refused (a refusal is
        never kept waiting for the session to end) and every ``calls-per-record``
        calls (no record grows without bound).
        """
        data = session.held()
        # Only this request's calls: the earlier ones were looked at when they were made.
        made = data.calls[len(held.session.calls) :]
        moves = data.transitions[len(held.session.transitions) :]
        refused = any(call.status == "refused" for call in made)
        if refused or session.calls >= self.calls_per_record:
            await session.close()
            data = data.restarted(data.request_id, time.time())
            made, moves = (), ()  # in the record just written
        kept = Held(held.key, data, self.clock(), held.version + 1)
        if not await self.holder.swap(kept, ttl=self.settings.session_idle_timeout):
            self._live.pop(held.key, None)
            merged = await self._merge(held, data.state, made, moves)
            if merged is None:
                return held
            return merged
        if session.closed:  # its record was written: the next request resumes the data
            self._live.pop(held.key, None)
        else:
            self._live[held.key] = (kept.version, session)
        return kept

    async def _merge(
        self,
        held: Held,
        state: str,
        made: Sequence[CallRecord],
        moves: Sequence[StateTransition],
    ) -> Held | None:
        """Keep this request's calls on top of what another request kept meanwhile.

        Two requests of one session that ran at once (on two replicas, where no
        lock is shared) both started from ``held``; the one that finished first
        is kept, and this one's calls and transitions are added to it, its state
        taking over only if its calls moved the state. ``None``: the session was
        closed meanwhile.
        """
        for _ in range(MERGE_TRIES):
            current = await self.holder.get(held.key)
            if current is None:
                log.warning(
                    "held session %s was closed meanwhile; a call's record is lost", held.key
                )
                return None
            session = dataclasses.replace(
                current.session,
                state=state if moves else current.session.state,
                calls=current.session.calls + tuple(made),
                transitions=current.session.transitions + tuple(moves),
            )
            kept = Held(held.key, session, self.clock(), current.version + 1)
            if await self.holder.swap(kept, ttl=self.settings.session_idle_timeout):
                return kept
        log.warning(
            "held session %s is moved by too many requests at once; a call's record is lost",
            held.key,
        )
        return None

    async def touch(self, held: Held) -> Held:
        """Mark ``held`` as used now (a client listening for changes is not idle)."""
        kept = Held(held.key, held.session, self.clock(), held.version + 1)
        if await self.holder.swap(kept, ttl=self.settings.session_idle_timeout):
            return kept
        return held

    async def release(self, user: str, kind: str, key: str) -> AuditRecord | None:
        """Stop holding a session and write its audit record; ``None`` if none was held."""
        held = await self.holder.delete(HeldKey(user, kind, key))
        self._live.pop(HeldKey(user, kind, key), None)
        if held is None:
            return None
        return await self._closed(held)

    async def expire(self) -> list[Held]:
        """Close the held sessions whose idle time ran out, writing their audit records."""
        expired = await self.holder.expired()
        for held in expired:
            self._live.pop(held.key, None)
            log.info("closing %s: idle for %.0f s", held.key, self.settings.session_idle_timeout)
            await self._closed(held)
        return expired

    async def owned(self, user: str, kind: str) -> list[Held]:
        return await self.holder.owned(user, kind)

    async def _closed(self, held: Held) -> AuditRecord | None:
        records: list[AuditRecord] = []
        sink = _Keep(self.audit, records)
        registry = self.tools.registry
        rules = self.rules(registry, places=False)
        try:
            session = AgentSession(
                self.tools,
                registry,
                resume=held.session,
                rules=SessionRules(
                    permissions=rules.permissions,
                    code_hooks=rules.code_hooks,
                    audit=sink,
                    metrics=rules.metrics,
                ),
            )
        except Exception:  # revoked meanwhile: the refusal is the record
            return records[0] if records else None
        await session.close()
        return records[0] if records else None


class _Keep:
    """Passes records on, keeping a copy (the record a closed session answers with)."""

    def __init__(self, sink: AuditSink, kept: list[AuditRecord]) -> None:
        self._sink = sink
        self._kept = kept

    def emit(self, record: AuditEntry) -> None:
        if isinstance(record, AuditRecord):
            self._kept.append(record)
        self._sink.emit(record)


def _groups_of(rules: SessionRules) -> Collection[str]:
    permissions = rules.permissions
    if permissions is None:
        return ()
    found = set(permissions.fallback)
    for groups in permissions.users.values():
        found.update(groups)
    return found
