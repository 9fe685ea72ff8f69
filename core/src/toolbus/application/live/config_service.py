"""The config service: the configuration snapshot, kept durable and changed over the bus.

It is a tool service like any other, hosted by
:class:`~toolbus.application.calls.host.ServiceHost` on well-known queues, and spoken
to with TrustGraph's request/response envelope (docs/wire-protocol.md). The operation
is in the request's ``arguments``; the answer is a JSON observation:

* ``put`` (``type``, ``key``, ``value``) and ``delete`` (``type``, ``key``)
  → ``{"version", "changed"}``;
* ``apply`` (``changes``: a list of put/delete objects; ``replace``: bool),
  several changes as one version → ``{"version", "changed"}``;
* ``get`` (``type``, ``key``) → ``{"version", "type", "key", "value"}``;
* ``list`` (``type``, optional) → ``{"version", "items": ["TYPE/KEY", ...]}``;
* ``snapshot`` → ``{"store", "version", "snapshot"}``.

Every change (put, delete, or an ``apply`` of several at once) is validated
as a whole snapshot before anything is stored; a change that would make the
snapshot invalid is answered with error type ``config-rejected`` and the
:class:`~toolbus.domain.errors.ConfigError` text, and nothing changes. An
accepted change is written to the :class:`ConfigStore` (atomically) under the
next version number, and only then answered. A change that changes nothing
(a put of the value already there) keeps the version. Missing items are
``not-found``; a malformed request is ``bad-request``.

:class:`ConfigPublisher` pushes every new version, with the full snapshot, on
:data:`CONFIG_CHANGES_QUEUE` (fan-out) for agents to reload from, repeats the
current one every ``interval`` seconds so that an agent that missed a push
(the queue is at-most-once) catches up, and pushes it at once when a starting
agent probes (:data:`~toolbus.application.live.announcements.PROBE_QUEUE`): an
agent learns the live configuration in one round trip, and that there is none
without sending a request that nobody would answer.

Run one config service per store: changes are serialised inside the service,
and the store's lock keeps a second process off the same file.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
from anyio.abc import TaskStatus

from toolbus.application.calls.host import running
from toolbus.application.calls.service import ToolService
from toolbus.application.calls.supervision import plain_errors
from toolbus.application.live.announcements import PROBE_QUEUE
from toolbus.application.live.config_store import ConfigStore
from toolbus.application.live.probes import (
    PROBE_COOLDOWN,
    PassingFailures,
    ProbeAnswers,
    publish_or_wait,
    subscribe_probes,
)
from toolbus.domain.config.descriptors import BUILTIN_TOOL_TYPES
from toolbus.domain.errors import BadRequest, BusClosed, ConfigError, NotFound, Problem
from toolbus.domain.live.items import (
    ConfigRejected,
    ConfigVersion,
    Delete,
    ItemMissing,
    Put,
    apply_changes,
    describe_changes,
    encode_version,
    get_item,
    items_of,
    parse_item,
    parse_type,
    same_value,
    validate_snapshot,
)
from toolbus.ports import Bus

log = logging.getLogger("toolbus.config")

CONFIG_SERVICE_ID = "config"
#: Persistent, so that a change sent while the service restarts is not lost.
#: The caller's deadline still applies: a change whose caller gave up is not made.
CONFIG_REQUEST_QUEUE = "persistent://toolbus/config/request"
CONFIG_RESPONSE_QUEUE = "non-persistent://toolbus/config/response"
#: Where every new version is pushed (fan-out), and the current one repeated.
CONFIG_CHANGES_QUEUE = "non-persistent://toolbus/config/changes"
DEFAULT_REPUBLISH_INTERVAL = 30.0
#: The most changes one ``apply`` may carry.
MAX_CHANGES = 10_000

_OPERATIONS = ("put", "delete", "apply", "get", "list", "snapshot")


class ConfigService(ToolService):
    """Serves one :class:`ConfigStore`. Host it like any tool service, or use `serving_config`.

    ``tool_types`` are the tool types changes are validated against (the
    built-in ``tool-service`` plus those of the installed plugins).
    """

    id = CONFIG_SERVICE_ID
    request_queue = CONFIG_REQUEST_QUEUE
    response_queue = CONFIG_RESPONSE_QUEUE

    def __init__(
        self, store: ConfigStore, *, tool_types: Iterable[str] = BUILTIN_TOOL_TYPES
    ) -> None:
        super().__init__()
        self.store = store
        self.tool_types = frozenset(tool_types)
        current = store.open()
        self._lock = anyio.Lock()
        self._changed = anyio.Event()
        try:
            validate_snapshot(current.snapshot, tool_types=self.tool_types)
        except ConfigError as exc:
            # Serving it would push an invalid configuration to every agent.
            store.close()
            where = f"config store '{store.path}' (version {current.version})"
            raise ConfigError(
                [
                    *exc.problems,
                    Problem(
                        where,
                        "",
                        "is not valid and is not served; install the plugins whose tool "
                        "types it uses, or fix the file (or move it aside and load a "
                        "valid configuration with 'toolbus config load')",
                    ),
                ]
            ) from None

    @classmethod
    def at(
        cls, path: str | os.PathLike[str], *, tool_types: Iterable[str] = BUILTIN_TOOL_TYPES
    ) -> ConfigService:
        """A config service on the store file at ``path`` (created when missing)."""
        return cls(ConfigStore(path), tool_types=tool_types)

    def close(self) -> None:
        """Release the store (its lock). The service cannot be used afterwards."""
        self.store.close()

    @property
    def current(self) -> ConfigVersion:
        """The version being served."""
        return self.store.current

    async def wait_for_change(self, after: int) -> ConfigVersion:
        """Wait until the version is above ``after``; returns the current version."""
        while self.store.current.version <= after:
            await self._changed.wait()
        return self.store.current

    # -- changes -------------------------------------------------------------------

    async def apply(
        self, changes: list[Put | Delete], *, replace: bool = False, user: str = ""
    ) -> tuple[ConfigVersion, bool]:
        """Validate and store ``changes`` as one version; returns it and whether anything changed.

        Raises :class:`ConfigRejected` (nothing stored) or :class:`NotFound`.
        """
        async with self._lock:
            current = self.store.current
            try:
                snapshot = apply_changes(current.snapshot, changes, replace=replace)
            except ItemMissing as exc:
                raise NotFound(str(exc)) from None
            if _same_snapshot(snapshot, current.snapshot):
                return current, False
            try:
                validate_snapshot(snapshot, tool_types=self.tool_types)
            except ConfigError as exc:
                log.info("refused %s from %r: %s", describe_changes(changes), user, exc)
                raise ConfigRejected(f"change refused, nothing stored: {exc}") from None
            # The write fsyncs: keep it off the event loop. Shielded, so that a caller
            # giving up mid-write cannot leave the file written but not current.
            with anyio.CancelScope(shield=True):
                version = await anyio.to_thread.run_sync(self.store.commit, snapshot)
            log.info(
                "version %d: %s%s by %r",
                version.version,
                "replace with " if replace else "",
                describe_changes(changes),
                user,
            )
            changed, self._changed = self._changed, anyio.Event()
            changed.set()
            return version, True

    # -- the request protocol --------------------------------------------------------

    async def invoke(
        self, user: str, config: dict[str, Any], arguments: dict[str, Any]
    ) -> dict[str, Any]:
        operation = arguments.get("operation")
        if operation not in _OPERATIONS:
            raise BadRequest(
                f"unknown config operation {operation!r}; use one of {', '.join(_OPERATIONS)}"
            )
        if operation in ("put", "delete", "apply"):
            if operation == "apply":
                changes = _changes(arguments.get("changes"))
                replace = arguments.get("replace", False)
                if not isinstance(replace, bool):
                    raise BadRequest("'replace' must be true or false")
            else:
                changes, replace = [_change(operation, arguments)], False
            version, changed = await self.apply(changes, replace=replace, user=user)
            return {"version": version.version, "changed": changed}
        current = self.store.current
        if operation == "get":
            name = _name(arguments)
            try:
                value = get_item(current.snapshot, name)
            except ItemMissing as exc:
                raise NotFound(str(exc)) from None
            return {"version": current.version, "type": name.type, "key": name.key, "value": value}
        if operation == "list":
            type_ = arguments.get("type")
            if type_ is not None:
                type_ = _parsed(parse_type, type_, "type")
            return {
                "version": current.version,
                "items": [str(name) for name in items_of(current.snapshot, type_)],
            }
        return {
            "store": current.store,
            "version": current.version,
            "snapshot": {name: dict(section) for name, section in current.snapshot.items()},
        }


def _same_snapshot(left: Mapping[str, Any], right: Mapping[str, Any]) -> bool:
    if list(left) != list(right):
        return False
    for name, section in left.items():
        other = right[name]
        if list(section) != list(other):
            return False
        if not all(same_value(section[key], other[key]) for key in section):
            return False
    return True


def _parsed(parse: Any, value: Any, what: str) -> Any:
    if not isinstance(value, str):
        raise BadRequest(f"'{what}' must be a string, not {type(value).__name__}")
    try:
        return parse(value)
    except ValueError as exc:
        raise BadRequest(str(exc)) from None


def _name(arguments: Mapping[str, Any]) -> Any:
    type_, key = arguments.get("type"), arguments.get("key")
    if not isinstance(type_, str) or not isinstance(key, str):
        raise BadRequest("give the item as 'type' and 'key' strings, e.g. 'tool' and 'tell-joke'")
    return _parsed(parse_item, f"{type_}/{key}", "type/key")


def _change(operation: str, arguments: Mapping[str, Any]) -> Put | Delete:
    name = _name(arguments)
    if operation == "delete":
        return Delete(name)
    if "value" not in arguments:
        raise BadRequest(f"put {name}: 'value' is missing")
    return Put(name, arguments["value"])


def _changes(value: Any) -> list[Put | Delete]:
    if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
        raise BadRequest('\'changes\' must be a list of {"operation", "type", "key"} objects')
    if len(value) > MAX_CHANGES:
        raise BadRequest(f"{len(value)} changes at once is more than {MAX_CHANGES}; split them")
    changes = []
    for item in value:
        operation = item.get("operation")
        if operation not in ("put", "delete"):
            raise BadRequest(f"a change's operation must be 'put' or 'delete', not {operation!r}")
        changes.append(_change(operation, item))
    return changes


# --------------------------------------------------------------------------- pushing


class ConfigPublisher:
    """Pushes the config service's versions to agents on :data:`CONFIG_CHANGES_QUEUE`.

    Publishes the current version when started, each new version as soon as it
    is stored, the current one again every ``interval`` seconds, and at once
    (at most once per ``probe_cooldown``) when an agent probes on
    ``probe_queue``. Failing to publish is logged and retried with the next
    change or interval; it never stops the service.
    """

    def __init__(
        self,
        bus: Bus,
        service: ConfigService,
        *,
        interval: float = DEFAULT_REPUBLISH_INTERVAL,
        queue: str = CONFIG_CHANGES_QUEUE,
        probe_queue: str = PROBE_QUEUE,
        probe_cooldown: float = PROBE_COOLDOWN,
    ) -> None:
        if interval <= 0:
            raise ValueError("interval must be positive")
        self.bus = bus
        self.service = service
        self.interval = interval
        self.queue = queue
        self.probe_queue = probe_queue
        #: Versions published so far (repeats included), for tests and metrics.
        self.published = 0
        self._probes = ProbeAnswers(self._publish_current, cooldown=probe_cooldown)
        self._stop = anyio.Event()
        self._failures = PassingFailures()

    def stop(self) -> None:
        """End :meth:`run`."""
        self._stop.set()

    async def publish(self, version: ConfigVersion) -> bool:
        """Publish one version now; False (logged) when the bus refused it or the broker
        is away."""
        body = encode_version(version)
        published = await publish_or_wait(
            lambda: self.bus.publish(self.queue, body, {"version": str(version.version)}),
            what=f"push config version {version.version}",
            failures=self._failures,
            retry_in=self.interval,
        )
        if not published:
            return False
        self.published += 1
        self._probes.answered()
        return True

    async def _publish_current(self) -> bool:
        return await self.publish(self.service.current)

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Publish until :meth:`stop` is called (or the bus closes)."""
        self._stop = anyio.Event()
        current = self.service.current
        probes = await subscribe_probes(
            self.bus, self.probe_queue, "the config service", self.interval
        )
        try:
            await self.publish(current)
            task_status.started()
            # A bus closed under a publication ends this as that error, not a group's.
            with plain_errors():
                async with anyio.create_task_group() as tasks:

                    async def until_stopped() -> None:
                        await self._stop.wait()
                        tasks.cancel_scope.cancel()

                    tasks.start_soon(until_stopped)
                    if probes is not None:
                        tasks.start_soon(self._probes.run, probes)
                    while True:
                        with anyio.move_on_after(self.interval):
                            current = await self.service.wait_for_change(current.version)
                        current = self.service.current
                        await self.publish(current)
        except BusClosed:
            log.info("config publisher stopped: the bus is closed")
        finally:
            if probes is not None:
                with anyio.CancelScope(shield=True), suppress(BusClosed):
                    await probes.close()


@asynccontextmanager
async def serving_config(
    bus: Bus,
    store: str | os.PathLike[str] | ConfigStore,
    *,
    tool_types: Iterable[str] = BUILTIN_TOOL_TYPES,
    interval: float = DEFAULT_REPUBLISH_INTERVAL,
    **host_options: Any,
) -> AsyncIterator[ConfigService]:
    """Serve a config service and push its versions until the block ends::

        async with serving_config(bus, "config-store.json") as service:
            ...

    The store is released when the block ends.
    """
    service = ConfigService(
        store if isinstance(store, ConfigStore) else ConfigStore(Path(store)),
        tool_types=tool_types,
    )
    try:
        publisher = ConfigPublisher(bus, service, interval=interval)
        failure: Exception | None = None
        with plain_errors():
            async with running(bus, service, **host_options), anyio.create_task_group() as tasks:
                await tasks.start(publisher.run)
                try:
                    yield service
                except Exception as exc:
                    # Re-raised outside the task group: the caller sees its own
                    # exception, not an ExceptionGroup wrapping it.
                    failure = exc
                finally:
                    publisher.stop()
        if failure is not None:
            raise failure
    finally:
        service.close()
