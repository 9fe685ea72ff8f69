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
workflows, agent conversations) are its :attr:`FrontDoor.held`
(:mod:`toolbus.application.doors.keeping`), resumed per request.
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
    JsonLinesAuditSink,
    LoggingAuditSink,
    RefusedRecordAudit,
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
    InProcessHolder,
    SessionHolder,
)
from toolbus.application.doors.keeping import HeldSessions
from toolbus.application.doors.limits import UserPlaces
from toolbus.application.doors.policy import AccessPolicy
from toolbus.application.doors.settings import DoorSettings, parse_door_settings
from toolbus.application.doors.steps import call_steps
from toolbus.application.doors.steps.approvals import ApprovalStep
from toolbus.application.identity.documents import DocumentVerifier
from toolbus.application.sealing import RefusedRecord
from toolbus.domain.config.registry import Registry, normalize_state
from toolbus.domain.errors import AccessDenied, ConfigError, Problem
from toolbus.domain.hooks.configured import SECTION as HOOKS_SECTION
from toolbus.domain.hooks.configured import HookConfig, load_hooks

log = logging.getLogger("toolbus.doors")


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
        #: The sessions the door keeps between requests.
        self.held = HeldSessions(self)
        self.steps = CallSteps(call_steps(None) if steps is None else steps)
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

    def resumed(self, held: HeldSession, *, counted: bool = False) -> AgentSession:
        """The session ``held`` describes, on the configuration now (groups checked again)."""
        registry = self.tools.registry
        return AgentSession(
            self.tools, registry, resume=held, rules=self.rules(registry, places=counted)
        )

    async def closed(self, held: HeldSession) -> AuditRecord | None:
        """Write the audit record of a session no longer held; the record, or ``None`` when
        the user may no longer have the session's groups (the refusal is the record)."""
        records: list[AuditRecord] = []
        sink = _Keep(self.audit, records)
        registry = self.tools.registry
        rules = self.rules(registry, places=False)
        try:
            session = AgentSession(
                self.tools,
                registry,
                resume=held,
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
