"""The gateway's running state: the broker connection, tools, sessions, audit and metrics.

A :class:`Gateway` is an async context manager; the ASGI app
(:func:`toolbus_gateway.app.create_app`) enters it in its lifespan, so that
uvicorn starting the app is what connects to the broker.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from pathlib import Path
from types import TracebackType
from typing import Any

import anyio
from prometheus_client import CollectorRegistry

from toolbus import LiveRegistry, Registry, Tools, ToolServiceClient, connect
from toolbus.application.agent.code_hooks import CompiledHooks
from toolbus.application.calls.health import Readiness
from toolbus.application.doors.door import FrontDoor
from toolbus.application.doors.holding import InProcessHolder, SessionHolder
from toolbus.application.doors.stored import StoredHolder
from toolbus.application.identity.bearer import Authenticator
from toolbus.application.identity.signing import CallSigner
from toolbus.application.live.registry import DEFAULT_FETCH_TIMEOUT
from toolbus.application.sealing import SealKeys
from toolbus.application.sealing.doors import door_seal_keys, door_store, shared_url
from toolbus.domain.access.approvals import Approval
from toolbus.domain.access.permissions import Permissions
from toolbus.domain.errors import ConfigError, Problem, ToolbusError
from toolbus.domain.tasks import parse_task_settings
from toolbus.domain.tasks.settings import SECTION as TASKS_SECTION
from toolbus.hooks import CodeHooks
from toolbus.plugins import load_tool_plugins
from toolbus.ports import Bus, StateStore
from toolbus.runtime import opened_door, private_store, registry_from, shared_state, tool_types
from toolbus_gateway.console_feed import ConsoleChanges, RecentAudit
from toolbus_gateway.events import Topic
from toolbus_gateway.figures import (
    AUDIT_ROWS,
    ProcessFigures,
    SharedFigures,
    WholeGateway,
    audit_row,
    counted,
)
from toolbus_gateway.metrics import GatewayMetrics
from toolbus_gateway.services import ServiceWatch
from toolbus_gateway.session_events import SessionEvents
from toolbus_gateway.sessions import SessionChannels
from toolbus_gateway.settings import GatewaySettings
from toolbus_gateway.stats import CallStats
from toolbus_gateway.tasks import GatewayTasks

log = logging.getLogger("toolbus.gateway")

ConfigSource = Path | Mapping[str, Any] | Registry | None


#: How the gateway names itself in start-up errors.
GATEWAY_DOOR = "toolbus gateway"


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
        seal_keys: the keys that seal what the gateway keeps in a shared store
            (``seal-keys``); a shared store without them stops the start.
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
        seal_keys: SealKeys | None = None,
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
        #: Their events, on every replica once sessions are shared (set when it starts).
        self.session_events = SessionEvents(self.channels, None)
        self.metrics.sessions_open.set_function(lambda: self.held_sessions())
        #: The console's figures of every process sharing the state store, this one's too.
        self.figures = WholeGateway(self.own_figures, clock)
        self.open_streams = 0
        self.metrics.event_streams.set_function(lambda: self.open_streams)
        self.started = clock()
        self.bus: Bus | None = None
        self.state = state
        self._state_options = dict(state_options or {})
        self.seal_keys = seal_keys
        #: The state store sessions are kept in, once connected (None: this process).
        self.state_store: StateStore | None = None
        self.tools: Tools | None = None
        self.live_registry: LiveRegistry | None = None
        self.watch: ServiceWatch | None = None
        self._stack: AsyncExitStack | None = None
        self._local: Registry | None = None
        #: Printed at start when access control is off (``--no-access-control``).
        self.warning: str | None = None
        #: The approvals pending now (every replica's), for the console.
        self.pending_approvals: list[Approval] = []
        #: The ``[tasks]`` table: how calls that wait become tasks.
        self.task_settings = parse_task_settings(self.settings_file.get(TASKS_SECTION))
        #: The calls that run as tasks (made when the gateway starts).
        self.tasks: GatewayTasks | None = None

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> Gateway:
        plugins = load_tool_plugins()
        if self._config is not None:
            self._local = registry_from(self._config, plugins)
        async with AsyncExitStack() as stack:
            # An identity provider's keys: fetched now, and kept fresh while serving.
            await stack.enter_async_context(self.authenticator)
            if isinstance(self.broker, str):
                self.bus = await connect(self.broker, self._broker_options)
                stack.push_async_callback(self.bus.close)
            else:
                self.bus = self.broker
            client = await stack.enter_async_context(
                ToolServiceClient(self.bus, signer=self.signer)
            )
            shared_store = False
            if isinstance(self.state, str):
                shared_store = shared_url(self.state)
                if self.seal_keys is None and shared_url(self.state):
                    door_seal_keys(GATEWAY_DOOR, self.state, ())  # stops, naming the fix
                connected = await stack.enter_async_context(
                    shared_state(self.state, self._state_options)
                )
                self.state_store = door_store(
                    GATEWAY_DOOR, connected, self.seal_keys, private=not shared_store
                )
            elif self.state is not None:
                shared_store = not private_store(self.state)
                self.state_store = door_store(
                    GATEWAY_DOOR, self.state, self.seal_keys, private=not shared_store
                )
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
            if self.state_store is not None:
                # Sessions are shared: so are their events.
                self.session_events = SessionEvents(self.channels, self.bus)
                shared = await self.session_events.subscribe()
                assert shared is not None
                stack.push_async_callback(shared.close)
                tasks.start_soon(self.session_events.follow, shared)
            self.warning = self.door.require_access_control(
                "toolbus gateway", allow_off=not self.access_control
            )
            tasks.start_soon(self._follow_approvals)
            self.tasks = await GatewayTasks.started(
                stack,
                self.door,
                self.state_store,
                self.task_settings,
                shared=shared_store,
                events=self.session_events,
                stats=self.stats,
                changed=self.changes.mark,
            )
            tasks.start_soon(self.tasks.follow)
            stack.push_async_callback(self._close_sessions)
            tasks.start_soon(self._expire_sessions)
            if self.state_store is not None:
                assert isinstance(self.door.holder, StoredHolder)
                self.figures.sharing(SharedFigures(self.state_store), self.door.holder)
                stack.push_async_callback(self.figures.withdraw)
                tasks.start_soon(self.figures.share, self._console_open, self.changes.mark)
            self._stack = stack.pop_all()
        return self

    async def stopping(self) -> None:
        """The gateway is told to stop: the callers waiting on a task, or in place for a
        person, are answered now (their tasks handed to another replica, or failed with
        no other replica, their approvals withdrawn), before requests in flight are waited
        for."""
        if self.tasks is not None:
            with anyio.CancelScope(shield=True):
                await self.tasks.stop()

    def _front_door(self, tools: Tools) -> AbstractAsyncContextManager[FrontDoor]:
        """Permissions, entry states, hooks, limits, the call policy and approvals, from
        the operator's local files; sessions and approvals in the gateway's store."""
        # Replicas sharing a store compare times: the store's holder counts on the
        # wall clock; one process keeps the gateway's own.
        holder: SessionHolder = (
            InProcessHolder(self.clock)
            if self.state_store is None
            else StoredHolder(self.state_store)
        )
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
            door_name=GATEWAY_DOOR,
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
        """The sessions the gateway holds: in this process, or in the state store for
        every process (as last counted: :meth:`WholeGateway.refresh`)."""
        holder = None if self.door is None else self.door.holder
        if isinstance(holder, InProcessHolder):
            return len(holder)
        return self.figures.stored_sessions

    def _console_open(self) -> bool:
        return len(self.console) > 0

    def own_figures(self) -> ProcessFigures:
        """This process's own figures, for the console (and, named, for the others')."""
        records = list(self.audit.records)[:AUDIT_ROWS]
        return ProcessFigures(
            process="",
            rates=tuple(self.stats.rates()),
            audit=tuple(audit_row(record) for record in records),
            event_streams=self.open_streams,
        )

    async def _expire_sessions(self) -> None:
        """Close the sessions left idle, ending their event streams."""
        assert self.door is not None
        every = max(0.05, min(self.door.settings.session_idle_timeout / 4, 30.0))
        while True:
            await anyio.sleep(every)
            for held in await self.door.held.expire():
                await self.session_events.ended(held.key.owner, held.key.id, "idle")
                self.changes.mark("sessions")

    async def _close_sessions(self) -> None:
        """Stopping: close the sessions this process holds, writing their records."""
        door = self.door
        if door is None or not isinstance(door.holder, InProcessHolder):
            return  # held elsewhere: another replica serves them on
        with anyio.CancelScope(shield=True):
            for held in door.holder.all():
                await door.held.release(held.key.owner, held.key.kind, held.key.id)
                self.channels.ended(held.key.owner, held.key.id, "gateway stopping")

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            await self.stopping()
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
        """Broker connected, configuration loaded and, with an identity provider's keys,
        keys at hand; each with a reason."""
        checks: dict[str, str] = {}
        ok = True
        if self.bus is None:
            checks["broker"] = "not connected yet"
            ok = False
        else:
            connected = getattr(self.bus, "is_connected", True)
            checks["broker"] = "connected" if connected else "disconnected; reconnecting"
            ok = ok and bool(connected)
        if self.tools is None:
            checks["config"] = "not loaded yet"
            ok = False
        else:
            registry = self.tools.registry
            source = "live" if self.live else "file"
            checks["config"] = (
                f"loaded ({source}): {counted(len(registry.tools), 'tool')}, "
                f"{counted(len(registry.services), 'service')}"
            )
        checks.update(self.authenticator.readiness())
        return Readiness(ok and self.authenticator.ready, checks)
