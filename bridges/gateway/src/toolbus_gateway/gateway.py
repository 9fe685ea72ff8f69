"""The gateway's running state: the broker connection, tools, sessions, audit and metrics.

A :class:`Gateway` is an async context manager; the ASGI app
(:func:`toolbus_gateway.app.create_app`) enters it in its lifespan, so that
uvicorn starting the app is what connects to the broker.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import anyio
from prometheus_client import CollectorRegistry, Counter, Gauge

from toolbus import LiveRegistry, Registry, Tools, ToolServiceClient, connect, connect_state
from toolbus.application.agent.audit import AuditRecord, LoggingAuditSink
from toolbus.application.agent.code_hooks import CompiledHooks
from toolbus.application.calls.metrics import ToolbusMetrics
from toolbus.application.doors.door import FrontDoor
from toolbus.application.doors.holding import InProcessHolder, SessionHolder
from toolbus.application.doors.store_health import StoreHealth
from toolbus.application.doors.stored import StoredHolder
from toolbus.application.identity.signing import CallSigner
from toolbus.application.live.registry import DEFAULT_FETCH_TIMEOUT
from toolbus.domain.access.approvals import Approval
from toolbus.domain.access.permissions import Permissions
from toolbus.domain.errors import ConfigError, Problem, ToolbusError
from toolbus.hooks import CodeHooks
from toolbus.plugins import load_tool_plugins
from toolbus.ports import Bus, StateStore, broker_known_gone
from toolbus.runtime import opened_door, registry_from, tool_types
from toolbus_gateway.auth import Authenticator
from toolbus_gateway.events import Event, Topic
from toolbus_gateway.services import ServiceWatch
from toolbus_gateway.sessions import SessionChannels
from toolbus_gateway.settings import GatewaySettings
from toolbus_gateway.stats import CallStats

log = logging.getLogger("toolbus.gateway")

#: Audit records the console keeps for its "recent" table.
RECENT_AUDIT = 200

ConfigSource = Path | Mapping[str, Any] | Registry | None


@dataclass(frozen=True, slots=True)
class Readiness:
    """Whether the gateway can serve calls now, and why not."""

    ready: bool
    checks: dict[str, str]


class ConsoleChanges:
    """Tells the console which panels changed, at most once per panel per ``interval``.

    Changes are marked as they happen and sent by :meth:`run`: a busy gateway
    (a hundred calls a second) then costs each open console one event per
    panel per interval, not one per call.
    """

    def __init__(self, topic: Topic, interval: float = 0.5) -> None:
        self.topic = topic
        self.interval = interval
        self._dirty: dict[str, None] = {}
        self._wake = anyio.Event()

    def mark(self, panel: str) -> None:
        self._dirty[panel] = None
        self._wake.set()

    async def run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake = anyio.Event()
            changed, self._dirty = list(self._dirty), {}
            for panel in changed:
                self.topic.publish(Event(panel))
            await anyio.sleep(self.interval)


class RecentAudit:
    """The audit sink of the gateway: the log, and the console's recent records."""

    def __init__(self, changes: ConsoleChanges, keep: int = RECENT_AUDIT) -> None:
        self.records: deque[AuditRecord] = deque(maxlen=keep)
        self._log = LoggingAuditSink()
        self._changes = changes

    def emit(self, record: AuditRecord) -> None:
        self._log.emit(record)
        self.records.appendleft(record)
        self._changes.mark("audit")


class GatewayMetrics:
    """The toolbus metrics and the gateway's own, in one registry that ``/metrics`` serves."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.toolbus = ToolbusMetrics(self.registry)
        self.auth_failures = Counter(
            "toolbus_gateway_auth_failures_total",
            "Requests refused for a missing or invalid credential, by reason",
            ["reason"],
            registry=self.registry,
        )
        self.requests = Counter(
            "toolbus_gateway_http_requests_total",
            "HTTP requests answered, by route and status code",
            ["route", "status"],
            registry=self.registry,
        )
        self.sessions_open = Gauge(
            "toolbus_gateway_sessions_open", "Agent sessions held open", registry=self.registry
        )
        self.event_streams = Gauge(
            "toolbus_gateway_event_streams_open",
            "Server-Sent-Event streams open",
            registry=self.registry,
        )
        self.limited = Counter(
            "toolbus_gateway_limited_requests_total",
            "Requests answered 429, by limit",
            ["limit"],
            registry=self.registry,
        )


class Gateway:
    """What one gateway process holds while it serves.

    Args:
        broker: a broker URL (``nats://...``) or a connected bus.
        config: the tool configuration (a path, a snapshot or a registry);
            None with ``live`` means only what the bus provides.
        live: follow the config service and announced tools, ``config`` being
            the local layer beneath them.
        authenticator: API keys and/or JWTs.
        settings: the ``[gateway]`` table.
        settings_file: the whole ``toolbus.toml`` (``[permissions]``, ``[doors]``).
        broker_options: adapter options.
        metrics_registry: where metrics go; default a registry of this gateway's own.
        config_fetch_timeout: with ``live``, how long starting waits for the config
            service before going on without it.
        signer: signs every call with the authenticated user and the groups granted
            to the request, for services that verify callers (docs/security.md).
        code_hooks: the code hooks every session runs; default the installed
            plugins' (``CodeHooks.installed()``).
        access_control: refuse to start without configured permissions (the
            default); ``False`` is ``--no-access-control``.
        base_dir: the folder paths in ``settings_file`` are relative to.
        state: a state store URL (``nats://...``, ``redis://...``) or a connected
            store: sessions, their limits, console log-outs and pending approvals
            are kept there, so that replicas behind a load balancer serve any
            request. ``None`` keeps them in this process (one replica only).
        state_options: the store's options (``[state-options]``).
    """

    def __init__(
        self,
        broker: str | Bus,
        *,
        authenticator: Authenticator,
        config: ConfigSource = None,
        live: bool = False,
        settings: GatewaySettings | None = None,
        settings_file: Mapping[str, Any] | None = None,
        broker_options: Mapping[str, Any] | None = None,
        metrics_registry: CollectorRegistry | None = None,
        clock: Callable[[], float] = time.monotonic,
        config_fetch_timeout: float = DEFAULT_FETCH_TIMEOUT,
        signer: CallSigner | None = None,
        code_hooks: CompiledHooks | None = None,
        access_control: bool = True,
        base_dir: Path | None = None,
        state: str | StateStore | None = None,
        state_options: Mapping[str, Any] | None = None,
    ) -> None:
        if config is None and not live:
            raise ConfigError(
                [
                    Problem(
                        "gateway",
                        "",
                        "no tool configuration: pass --config PATH, or --live to take tools "
                        "from the config service and announcing services",
                    )
                ]
            )
        self.broker = broker
        self.authenticator = authenticator
        self.settings = settings or GatewaySettings.model_validate({})
        self.settings_file = dict(settings_file or {})
        self.live = live
        self._config = config
        self._broker_options = dict(broker_options or {})
        self._fetch_timeout = config_fetch_timeout
        self.signer = signer
        self.clock = clock
        self.metrics = GatewayMetrics(metrics_registry)
        self.console = Topic(buffer=64)
        self.changes = ConsoleChanges(self.console)
        self.audit = RecentAudit(self.changes)
        self.stats = CallStats(clock)
        self.code_hooks = code_hooks
        self.access_control = access_control
        self.base_dir = base_dir or Path.cwd()
        #: The front door every session is opened through (made when the gateway starts).
        self.door: FrontDoor | None = None
        #: Locks and event topics of the held sessions, in this process.
        self.channels = SessionChannels()
        self.metrics.sessions_open.set_function(lambda: self.held_sessions())
        self.open_streams = 0
        self.metrics.event_streams.set_function(lambda: self.open_streams)
        self.started = clock()
        self.bus: Bus | None = None
        self.state = state
        self._state_options = dict(state_options or {})
        #: The state store sessions are kept in, once connected (None: this process).
        self.state_store: StateStore | None = None
        #: Whether that store answers (None without one).
        self.store_health: StoreHealth | None = None
        self.tools: Tools | None = None
        self.live_registry: LiveRegistry | None = None
        self.watch: ServiceWatch | None = None
        self._stack: AsyncExitStack | None = None
        self._local: Registry | None = None
        #: Printed at start when access control is off (``--no-access-control``).
        self.warning: str | None = None
        #: The approvals pending now (every replica's), for the console.
        self.pending_approvals: list[Approval] = []

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> Gateway:
        plugins = load_tool_plugins()
        if self._config is not None:
            self._local = registry_from(self._config, plugins)
        async with AsyncExitStack() as stack:
            if isinstance(self.broker, str):
                self.bus = await connect(self.broker, self._broker_options)
                stack.push_async_callback(self.bus.close)
            else:
                self.bus = self.broker
            client = await stack.enter_async_context(
                ToolServiceClient(self.bus, signer=self.signer)
            )
            if isinstance(self.state, str):
                self.state_store = await connect_state(self.state, self._state_options)
                stack.push_async_callback(self.state_store.close)
            else:
                self.state_store = self.state
            if self.state_store is not None:
                self.store_health = StoreHealth(self.state_store)
            tasks = await stack.enter_async_context(anyio.create_task_group())
            stack.callback(tasks.cancel_scope.cancel)
            stack.callback(self.console.close)
            tasks.start_soon(self.changes.run)
            self.watch = ServiceWatch(
                self.bus,
                clock=self.clock,
                on_change=lambda: self.changes.mark("services"),
            )
            heard = await self.watch.subscribe()
            stack.push_async_callback(heard.close)
            tasks.start_soon(self.watch.follow, heard)
            if self.live:
                follower = LiveRegistry(
                    self.bus,
                    local=None if self._local is None else self._local.snapshot,
                    tool_types=tool_types(plugins),
                    fetch_timeout=self._fetch_timeout,
                )
                follower.on_change(lambda _: self.changes.mark("registry"))
                self.live_registry = await stack.enter_async_context(follower)
                self.tools = follower.tools(client)
            else:
                assert self._local is not None
                self.tools = Tools(client, self._local)
                await self.watch.probe()
            self.door = await stack.enter_async_context(self._front_door(self.tools))
            self.warning = self.door.require_access_control(
                "toolbus gateway", allow_off=not self.access_control
            )
            tasks.start_soon(self._follow_approvals)
            stack.push_async_callback(self._close_sessions)
            tasks.start_soon(self._expire_sessions)
            self._stack = stack.pop_all()
        return self

    def _front_door(self, tools: Tools) -> AbstractAsyncContextManager[FrontDoor]:
        """Permissions, entry states, hooks, limits, the call policy and approvals, from
        the operator's local files; sessions and approvals in the gateway's store."""
        holder: SessionHolder | None = None
        if self.state_store is not None:
            holder = StoredHolder(self.state_store)
        return opened_door(
            tools,
            local=None if self._local is None else self._local.snapshot,
            settings=self.settings_file,
            base_dir=self.base_dir,
            store=self.state_store,
            code_hooks=CodeHooks.installed() if self.code_hooks is None else self.code_hooks,
            audit=self.audit,
            metrics=self.metrics.toolbus,
            timeout=self.settings.call_timeout,
            holder=holder,
            # Replicas sharing a store compare times: the store's holder counts on the
            # wall clock; one process keeps the gateway's own.
            clock=self.clock if holder is None else None,
        )

    async def _follow_approvals(self) -> None:
        """The console's approvals panel changes whenever any replica's approvals do."""
        assert self.door is not None
        book = self.door.book
        if book is None:
            return
        try:
            async for _ in book.changes():
                self.pending_approvals = await book.pending()
                self.changes.mark("approvals")
        except ToolbusError as exc:  # the store went away: the panel shows the last it read
            log.warning("stopped following approvals: %s", exc)

    def held_sessions(self) -> int:
        holder = None if self.door is None else self.door.holder
        return len(holder) if isinstance(holder, InProcessHolder) else 0

    async def _expire_sessions(self) -> None:
        """Close the sessions left idle, ending their event streams."""
        assert self.door is not None
        every = max(0.05, min(self.door.settings.session_idle_timeout / 4, 30.0))
        while True:
            await anyio.sleep(every)
            for held in await self.door.expire():
                self.channels.ended(held.key.id, "idle")
                self.changes.mark("sessions")

    async def _close_sessions(self) -> None:
        """Stopping: close the sessions this process holds, writing their records."""
        door = self.door
        if door is None or not isinstance(door.holder, InProcessHolder):
            return  # held elsewhere: another replica serves them on
        with anyio.CancelScope(shield=True):
            for held in door.holder.all():
                await door.release(held.key.owner, held.key.kind, held.key.id)
                self.channels.ended(held.key.id, "gateway stopping")

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            await stack.aclose()

    # ------------------------------------------------------------------ what is served

    @property
    def registry(self) -> Registry:
        """The configuration now (a live one follows every change)."""
        if self.tools is None:
            raise RuntimeError("the gateway is not running")
        return self.tools.registry

    @property
    def broker_options(self) -> Mapping[str, Any]:
        """The adapter options the broker was connected with."""
        return self._broker_options

    def permissions(self) -> Permissions:
        """The permissions the gateway applies now (its front door's)."""
        if self.door is None:
            raise RuntimeError("the gateway is not running")
        permissions = self.door.rules(self.registry, places=False).permissions
        assert permissions is not None
        return permissions

    def is_operator(self, user: str) -> bool:
        """Operators: the users listed in ``console-users``, else those allowed ``"*"``."""
        if self.settings.console_users is not None:
            return user in self.settings.console_users
        return "*" in self.permissions().allowed(user)

    def may_use_console(self, user: str) -> bool:
        """Operators only (:meth:`is_operator`)."""
        return self.is_operator(user)

    def readiness(self) -> Readiness:
        """Broker connected, configuration loaded and the state store answering (as last
        found: :meth:`StoreHealth.refresh` looks again), each with a reason."""
        checks: dict[str, str] = {}
        ok = True
        if self.bus is None:
            checks["broker"] = "not connected yet"
            ok = False
        else:
            gone = broker_known_gone(self.bus)
            checks["broker"] = "disconnected; reconnecting" if gone else "connected"
            ok = ok and not gone
        if self.store_health is not None:
            checks["state"] = self.store_health.check()
            ok = ok and self.store_health.down is None
        if self.tools is None:
            checks["config"] = "not loaded yet"
            ok = False
        else:
            registry = self.tools.registry
            source = "live" if self.live else "file"
            checks["config"] = (
                f"loaded ({source}): {len(registry.tools)} tools, {len(registry.services)} services"
            )
        return Readiness(ok, checks)
