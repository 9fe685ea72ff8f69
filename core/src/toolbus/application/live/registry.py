"""Live configuration for agents: follow the config service and announcements, swap atomically.

A :class:`LiveRegistry` holds an agent's current :class:`~toolbus.domain.config.registry.Registry`
and replaces it, whole, whenever one of its sources changes:

* the **config service** pushes a new version (on
  :data:`~toolbus.application.live.config_service.CONFIG_CHANGES_QUEUE`);
* a tool service **announces** itself, **withdraws**, or its announcement
  **expires** (no renewal within its TTL, by the injected clock).

Starting, it probes: running services announce themselves and the config
service pushes its current version at once, so an agent learns what there is
in one round trip, and sends no request to a config service that may not
exist.

Precedence (see :mod:`toolbus.domain.live.layers`): config service over the local
configuration over announcements; configured entries win every clash. That is
what configuration is for, so such a clash (and an announcement that does not
fit the service as configured) is logged once, at DEBUG; a clash between two
announcing services, or an announcement that is invalid in itself, is a
warning, once while it lasts.

Reloading never disturbs work in progress. The registry is an immutable value
and replacing it is one attribute assignment: an
:class:`~toolbus.application.agent.session.AgentSession` captures the registry it
starts with and finishes on it, while sessions started afterwards get the new
one. :meth:`LiveRegistry.attach` keeps a :class:`~toolbus.application.calls.tools.Tools`
facade's ``registry`` current the same way.

A new configuration that is invalid (which the config service prevents, but
the local layer or this agent's tool types might not agree) is logged and the
live registry stays as it was: a bad snapshot never replaces a good one.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AsyncExitStack, contextmanager, suppress
from types import TracebackType
from typing import Any

import anyio

from toolbus._internal.throttled_log import ThrottledLog
from toolbus.application.calls.client import ToolServiceClient
from toolbus.application.calls.supervision import plain_errors
from toolbus.application.calls.tools import Tools
from toolbus.application.live.announcements import ANNOUNCEMENTS_QUEUE, PROBE_QUEUE
from toolbus.application.live.config_service import CONFIG_CHANGES_QUEUE
from toolbus.domain.config.descriptors import BUILTIN_TOOL_TYPES, SERVICES
from toolbus.domain.config.registry import Registry
from toolbus.domain.errors import BusClosed, ConfigError
from toolbus.domain.live import announcements as messages
from toolbus.domain.live.announcements import (
    DEFAULT_TTL,
    MAX_TTL,
    MIN_TTL,
    Announcement,
    AnnouncementTable,
    Probe,
    Withdrawal,
)
from toolbus.domain.live.items import ConfigVersion, decode_version
from toolbus.domain.live.layers import CONFIGURATION, Clash, Composition, compose, overlay
from toolbus.ports import Bus, Subscription

log = logging.getLogger("toolbus.live")

#: Seconds starting waits for the config service's version (``wait_for_config``). A
#: running config service answers the start's probe at once (within a second, when it
#: has just published); only a deployment without one waits this long.
DEFAULT_FETCH_TIMEOUT = 2.0

RegistryListener = Callable[[Registry], None]


class LiveRegistry:
    """An agent's registry, kept current from the bus. Use it as an async context manager::

        async with ToolServiceClient(bus) as client, LiveRegistry(bus) as live:
            tools = live.tools(client)          # tools.registry follows every change
            async with AgentSession(tools, user="alice") as session:
                ...                             # this session keeps its snapshot

    Args:
        bus: where the config service and the tool services are.
        local: the local configuration layer (a snapshot), e.g. read from a file;
            it must be valid on its own. Default: nothing.
        follow_config: follow the config service (apply every version it pushes).
        announcements: merge tools announced by running services.
        tool_types: tool types to accept (the plugins' as well as ``tool-service``).
        clock: monotonic seconds; announcements expire by it.
        default_ttl: lifetime of an announcement that does not state its own.
        min_ttl, max_ttl: the shortest and longest lifetime an announcement is
            given, whatever it states (default 0.1 s and an hour).
        fetch_timeout: how long starting waits for the config service's version
            (with ``wait_for_config``). When none comes, the agent starts on what
            it has and takes the service's first push.
        probe: ask running services (the config service too) to say what they
            have at once on start, rather than at their next interval.
        wait_for_config: start only once the config service's version arrived
            (or ``fetch_timeout`` passed). False starts at once and takes the
            version when it comes, for a caller that waits for something
            specific (:meth:`wait_until`) from whichever source brings it, or
            that must not wait for a config service that may not exist.

    Raises :class:`ConfigError` when ``local`` is invalid.
    """

    def __init__(
        self,
        bus: Bus,
        *,
        local: Mapping[str, Any] | None = None,
        follow_config: bool = True,
        announcements: bool = True,
        tool_types: Iterable[str] = BUILTIN_TOOL_TYPES,
        clock: Callable[[], float] = time.monotonic,
        default_ttl: float = DEFAULT_TTL,
        min_ttl: float = MIN_TTL,
        max_ttl: float = MAX_TTL,
        fetch_timeout: float = DEFAULT_FETCH_TIMEOUT,
        probe: bool = True,
        wait_for_config: bool = True,
        changes_queue: str = CONFIG_CHANGES_QUEUE,
        announcements_queue: str = ANNOUNCEMENTS_QUEUE,
        probe_queue: str = PROBE_QUEUE,
    ) -> None:
        self.bus = bus
        self.follow_config = follow_config
        self.follow_announcements = announcements
        self.tool_types = frozenset(tool_types)
        self.clock = clock
        if not 0 < min_ttl <= max_ttl:
            raise ValueError(f"need 0 < min_ttl <= max_ttl, got {min_ttl} and {max_ttl}")
        self.default_ttl = default_ttl
        self.min_ttl = min_ttl
        self.max_ttl = max_ttl
        self.fetch_timeout = fetch_timeout
        self.probe = probe
        self.wait_for_config = wait_for_config
        self.changes_queue = changes_queue
        self.announcements_queue = announcements_queue
        self.probe_queue = probe_queue
        self._local: dict[str, Any] = overlay(local or {})
        #: The config service's version this agent has, ``None`` before the first.
        self.config: ConfigVersion | None = None
        self._table = AnnouncementTable()
        self.composition: Composition = compose(self._local, tool_types=self.tool_types)
        self._targets: list[Tools] = []
        self._listeners: list[RegistryListener] = []
        self._clashes: set[Clash] = set()
        self._rejected: dict[str, str] = {}
        self._changed = anyio.Event()
        self._configured = anyio.Event()
        self._rescheduled = anyio.Event()
        #: Warnings about bad messages: a burst of them must not flood the log.
        self._warnings = ThrottledLog(log)
        self._stack: AsyncExitStack | None = None
        #: How many times the registry was replaced, for tests and metrics.
        self.swaps = 0

    def __repr__(self) -> str:
        version = "no config service" if self.config is None else f"config v{self.version}"
        return f"<LiveRegistry {version}, {len(self._table)} announcements: {self.registry!r}>"

    # -- what agents use -------------------------------------------------------------

    @property
    def registry(self) -> Registry:
        """The current registry. Take it once per request; it never changes under you."""
        return self.composition.registry

    @property
    def version(self) -> int | None:
        """The config service's version in use, ``None`` before one arrived."""
        return None if self.config is None else self.config.version

    @property
    def announced(self) -> tuple[Announcement, ...]:
        """The live announcements, one per service (its latest)."""
        return self._table.current()

    def attach(self, tools: Tools) -> Tools:
        """Keep ``tools.registry`` equal to the live registry from now on; returns ``tools``."""
        tools.registry = self.registry
        self._targets.append(tools)
        return tools

    def detach(self, tools: Tools) -> None:
        """Stop updating ``tools``."""
        self._targets = [t for t in self._targets if t is not tools]

    def tools(self, client: ToolServiceClient) -> Tools:
        """A :class:`Tools` facade over ``client`` that follows this registry."""
        return self.attach(Tools(client, self.registry))

    def on_change(self, listener: RegistryListener) -> None:
        """Call ``listener(registry)`` after every swap (synchronously; keep it quick)."""
        self._listeners.append(listener)

    async def wait_until(
        self, predicate: Callable[[Registry], bool], *, timeout: float | None = None
    ) -> Registry:
        """Wait until ``predicate(registry)`` holds (checked now and after every swap).

        Raises ``TimeoutError`` after ``timeout`` seconds.
        """
        with anyio.fail_after(timeout):
            while not predicate(self.registry):
                await self._changed.wait()
        return self.registry

    def expire(self) -> list[str]:
        """Drop announcements whose TTL has run out by the clock now; returns the services gone.

        Runs by itself when the next announcement is due to expire; tests with
        a fake clock call it after moving the clock.
        """
        changed = self._table.expire(self.clock())
        if changed:
            log.info("announcements expired: %s", ", ".join(changed))
            self._rebuild()
        return changed

    # -- lifecycle -------------------------------------------------------------------

    async def __aenter__(self) -> LiveRegistry:
        with plain_errors():
            await self._start()
        return self

    async def _start(self) -> None:
        async with AsyncExitStack() as stack:
            tasks = await stack.enter_async_context(anyio.create_task_group())
            stack.callback(tasks.cancel_scope.cancel)
            if self.follow_config:
                changes = await self._subscribe(stack, self.changes_queue)
                tasks.start_soon(self._follow_config, changes)
            if self.follow_announcements:
                heard = await self._subscribe(stack, self.announcements_queue)
                tasks.start_soon(self._listen, heard)
                tasks.start_soon(self._expire_when_due)
            if self.probe and (self.follow_config or self.follow_announcements):
                await self._send_probe()
            if self.follow_config and self.wait_for_config:
                await self._wait_for_config()
            self._stack = stack.pop_all()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            # Not shielded as a whole: the task group's cancel scope must be exited
            # from where it was entered. Closing each subscription is shielded.
            with plain_errors():
                await stack.aclose()

    async def _subscribe(self, stack: AsyncExitStack, queue: str) -> Subscription:
        subscription = await self.bus.subscribe(queue)
        stack.push_async_callback(_close_quietly, subscription)
        return subscription

    async def _send_probe(self) -> None:
        try:
            await self.bus.publish(self.probe_queue, messages.encode(Probe()))
        except Exception as exc:  # announcements still arrive at their interval
            log.warning("could not ask services to announce themselves: %s", exc)

    async def _wait_for_config(self) -> None:
        with anyio.move_on_after(self.fetch_timeout):
            await self._configured.wait()
        if self.config is None:
            # Many deployments run no config service: that is no warning.
            log.info(
                "no config service answered within %g s; going on with %s and taking its "
                "first push",
                self.fetch_timeout,
                "the local configuration" if self._local else "no configured tools",
            )

    # -- sources ---------------------------------------------------------------------

    def offer_config(self, version: ConfigVersion) -> bool:
        """Take a config-service version unless this agent has it or a newer one already.

        Returns whether it was taken. (The bus listener calls this; so can a test
        or an embedding that gets versions some other way.)
        """
        if not version.supersedes(self.config):
            return False
        if self.config is not None and version.store != self.config.store:
            log.warning(
                "the config service now serves another store (%s, version %d; was %s); "
                "switching to it. Two config services on one bus would do this back and forth",
                version.store,
                version.version,
                self.config.store,
            )
        self.config = version
        self._configured.set()
        self._rebuild()
        return True

    def offer(self, message: Announcement | Withdrawal) -> bool:
        """Take an announcement or a withdrawal; returns whether the registry changed."""
        if isinstance(message, Announcement):
            changed = self._table.receive(message, self.clock())
            self._rescheduled.set()
        else:
            changed = self._table.withdraw(message)
            if changed:
                log.info("%r withdrew (instance %s)", message.service, message.instance)
        return self._rebuild() if changed else False

    async def _follow_config(self, subscription: Subscription) -> None:
        with _guarded("following the config service"):
            await self._read_versions(subscription)

    async def _read_versions(self, subscription: Subscription) -> None:
        async for delivery in subscription:
            await delivery.ack()
            try:
                version = decode_version(delivery.body, where=f"a message on {self.changes_queue}")
            except ConfigError as exc:
                self._warnings.warning("bad-config-message", "ignored %s", exc)
                continue
            self.offer_config(version)

    async def _listen(self, subscription: Subscription) -> None:
        with _guarded("hearing announcements"):
            await self._read_announcements(subscription)

    async def _read_announcements(self, subscription: Subscription) -> None:
        async for delivery in subscription:
            await delivery.ack()
            try:
                message = messages.decode(
                    delivery.body,
                    default_ttl=self.default_ttl,
                    min_ttl=self.min_ttl,
                    max_ttl=self.max_ttl,
                )
            except ValueError as exc:
                self._warnings.warning(
                    "bad-announcement", "ignored a message on %s: %s", self.announcements_queue, exc
                )
                continue
            if not isinstance(message, Probe):
                self.offer(message)

    async def _expire_when_due(self) -> None:
        with _guarded("expiring announcements"):
            await self._expiry_loop()

    async def _expiry_loop(self) -> None:
        while True:
            self._rescheduled = wake = anyio.Event()
            due = self._table.next_expiry()
            if due is None:
                await wake.wait()
                continue
            delay = due - self.clock()
            if delay > 0:
                with anyio.move_on_after(delay):
                    await wake.wait()
                continue
            self.expire()

    # -- rebuilding ------------------------------------------------------------------

    def _configured_layer(self) -> dict[str, Any]:
        if self.config is None:
            return self._local
        return overlay(self._local, self.config.snapshot)

    def _rebuild(self) -> bool:
        try:
            composition = compose(
                self._configured_layer(), self._table.current(), tool_types=self.tool_types
            )
        except ConfigError as exc:
            where = "" if self.config is None else f" (config service version {self.version})"
            log.error("configuration%s not applied; the previous one stays live: %s", where, exc)
            return False
        self._report(composition)
        self.composition = composition
        registry = composition.registry
        for tools in self._targets:
            tools.registry = registry
        self.swaps += 1
        for listener in list(self._listeners):
            try:
                listener(registry)
            except Exception:
                log.exception("a registry listener failed")
        changed, self._changed = self._changed, anyio.Event()
        changed.set()
        return True

    def _report(self, composition: Composition) -> None:
        clashes = set(composition.clashes)
        for clash in sorted(clashes - self._clashes, key=str):
            if clash.winner == CONFIGURATION:
                log.debug("%s (configured entries take precedence)", clash)
            else:
                log.warning("%s", clash)
        self._clashes = clashes
        rejected = {service: str(exc) for service, exc in composition.rejected.items()}
        services = self._configured_layer().get(SERVICES)
        configured = services if isinstance(services, Mapping) else {}
        for service, text in rejected.items():
            if self._rejected.get(service) == text:
                continue
            if service in configured:
                # Its tools do not fit the service as configured: the configuration rules.
                log.debug(
                    "announcement of %r ignored: the configuration has the service; %s",
                    service,
                    text,
                )
            else:
                log.warning("announcement of %r ignored: %s", service, text)
        self._rejected = rejected


@contextmanager
def _guarded(what: str) -> Iterator[None]:
    # A listener runs in the task group the agent's own code runs in: letting an
    # error out would cancel the agent. The registry just stops changing.
    try:
        yield
    except BusClosed:
        log.info("stopped %s: the bus is closed", what)
    except Exception:
        log.exception("stopped %s after an unexpected error; the registry stays as it is", what)


async def _close_quietly(subscription: Subscription) -> None:
    with anyio.CancelScope(shield=True), suppress(BusClosed):
        await subscription.close()
