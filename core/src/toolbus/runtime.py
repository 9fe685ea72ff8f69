"""Putting the parts together for a process: plugins, configuration, services."""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import uuid
import weakref
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolbus.application.calls.client import ToolServiceClient
from toolbus.application.calls.host import running
from toolbus.application.calls.service import ToolService
from toolbus.application.calls.supervision import plain_errors
from toolbus.application.calls.tools import Tools
from toolbus.application.doors.door import FrontDoor
from toolbus.application.doors.settings import POLICY_SECTION, parse_policy_settings
from toolbus.application.doors.steps import call_steps
from toolbus.application.doors.stored import StoredHolder
from toolbus.application.identity import CallSigner, CallVerifier, public_jwk
from toolbus.application.live.config_files import read_snapshot
from toolbus.application.live.registry import LiveRegistry
from toolbus.application.sealing import SealedStore, SealKeys
from toolbus.application.sealing.doors import door_seal_keys, door_store, shared_url
from toolbus.domain.config.descriptors import BUILTIN_TOOL_TYPES
from toolbus.domain.config.loading import load_registry
from toolbus.domain.config.registry import Registry
from toolbus.domain.errors import ConfigError, PluginError, Problem
from toolbus.hooks import CodeHooks
from toolbus.memory.state import MemoryStateStore
from toolbus.plugins import (
    ToolPlugin,
    connect,
    connect_state,
    load_policy_engine,
    load_tool_plugins,
)
from toolbus.ports import Bus, PolicyEngine, StateStore
from toolbus.settings import SETTINGS_FILE, Settings, read_settings_file


def merged_snapshot(snapshots: Iterable[Mapping[str, Mapping[str, Any]]]) -> dict[str, Any]:
    """Merge snapshots section by section; later ones win on the same key."""
    merged: dict[str, dict[str, Any]] = {"tool-service": {}, "tool": {}}
    for snapshot in snapshots:
        for section, entries in snapshot.items():
            merged.setdefault(section, {}).update(entries)
    return merged


def tool_types(plugins: Sequence[ToolPlugin]) -> frozenset[str]:
    return BUILTIN_TOOL_TYPES | {t for plugin in plugins for t in plugin.tool_types}


def build_registry(settings: Settings, plugins: Sequence[ToolPlugin] | None = None) -> Registry:
    """The configured registry, or the installed plugins' defaults when none is configured."""
    return registry_from(settings.config, plugins)


#: The services of toolbus's own example plugins, and the distribution of each:
#: named when one is asked for but not installed.
_FIRST_PARTY_SERVICES = {"calculator": "toolbus-calculator", "joke-service": "toolbus-joke"}


def resolve_service(name: str, plugins: Sequence[ToolPlugin] | None = None) -> ToolService:
    """A service by plugin service id (``joke-service``) or import path (``pkg.mod:obj``).

    An import path may name a :class:`ToolService` instance or subclass.
    """
    if ":" in name:
        module_name, _, attribute = name.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise PluginError(
                f"cannot import tool service {name!r}: {exc}; run the command in the folder "
                f"that holds {module_name.replace('.', '/')}.py (or its package), or make the "
                "module importable: pip install -e . in its project, or add its folder to "
                "PYTHONPATH"
            ) from exc
        try:
            target: Any = getattr(module, attribute)
        except AttributeError as exc:
            raise PluginError(
                f"cannot import tool service {name!r}: module {module_name!r} has no "
                f"attribute {attribute!r}; name the @tool_service function or ToolService after ':'"
            ) from exc
        if isinstance(target, type) and issubclass(target, ToolService):
            target = target()
        if not isinstance(target, ToolService):
            raise PluginError(
                f"{name!r} is a {type(target).__name__}, not a tool service; point at a "
                "@tool_service function or a ToolService subclass or instance"
            )
        return target
    plugins = load_tool_plugins() if plugins is None else plugins
    services = {service.id: service for plugin in plugins for service in plugin.services}
    if name in services:
        return services[name]
    known = (
        f"the installed ones provide {', '.join(sorted(services))}"
        if services
        else "no tool plugin is installed"
    )
    distribution = _FIRST_PARTY_SERVICES.get(name)
    fix = (
        f"{name!r} is the example service of {distribution}, which the examples extra "
        "brings (with toolbus-calculator and toolbus-joke, the services of toolbus demo): "
        "pip install --find-links DIR 'toolbus[examples]', DIR holding the wheels built "
        "from a checkout (see the README's set-up)"
        if distribution is not None
        else "pip install the plugin, or give an import path like 'my_package.tools:my_service'"
    )
    raise PluginError(f"no installed tool plugin provides a service {name!r} ({known}); {fix}")


@asynccontextmanager
async def plugins_in_process(
    bus: Bus, broker: str, plugins: Sequence[ToolPlugin], *, signer: CallSigner | None = None
) -> AsyncIterator[None]:
    """On ``memory://``, serve the installed plugins' services in this process for the block.

    Nothing outside the process can reach an in-memory broker, so a command that
    calls tools there (``toolbus call``, ``ask``, ``mcp serve``) would otherwise
    wait for services that cannot exist. ``drain_timeout=0``: once the command is
    done, nothing they still do matters. Calls ``signer`` signs are verified with
    its own key, as a service that verifies would. Elsewhere it does nothing.
    """
    if not broker.startswith("memory:"):
        yield
        return
    services = [service for plugin in plugins for service in plugin.services]
    verifier = None if signer is None else CallVerifier([public_jwk(signer.key)])
    async with running(bus, *services, drain_timeout=0, verifier=verifier):
        yield


RegistrySource = Registry | Mapping[str, Any] | str | os.PathLike[str] | None


def registry_from(source: RegistrySource, plugins: Sequence[ToolPlugin] | None = None) -> Registry:
    """A registry from a Registry, a snapshot dict, a config path, or (None) the plugins."""
    if isinstance(source, Registry):
        return source
    plugins = load_tool_plugins() if plugins is None else plugins
    if source is None:
        snapshot: Mapping[str, Any] = merged_snapshot(plugin.snapshot for plugin in plugins)
    elif isinstance(source, Mapping):
        snapshot = source
    else:
        snapshot = read_snapshot(source)
    return load_registry(snapshot, tool_types=tool_types(plugins))


def policy_engine(settings: Mapping[str, Any], base_dir: Path) -> PolicyEngine | None:
    """The call-policy engine ``[policy]`` of ``toolbus.toml`` names, on its files; ``None``
    without a ``[policy]`` table. Paths are relative to ``base_dir``.

    :class:`ConfigError` names a missing file, and every policy that does not read
    (its file and line, and the fix); :class:`PluginError` an engine not installed.
    """
    table = parse_policy_settings(settings.get(POLICY_SECTION))
    if table is None:
        return None
    paths = [base_dir / name for name in table.files]
    missing = [
        Problem(
            "toolbus.toml [policy]",
            "files",
            f"{str(path)!r} does not exist; name a policy file or a folder of .cedar files "
            "(relative to toolbus.toml)",
        )
        for path in paths
        if not path.exists()
    ]
    if missing:
        raise ConfigError(missing)
    return load_policy_engine(table.engine, paths, table.users, {"reload": table.reload})


@dataclass(eq=False)
class _SharedStore:
    """One connection every part of this process uses, and how many use it now."""

    connected: asyncio.Future[StateStore]
    users: int = 0


#: Per event loop (a connection serves the loop it was made on): (URL, options) -> store.
_SHARED: weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop, dict[tuple[str, str], _SharedStore]
] = weakref.WeakKeyDictionary()


@asynccontextmanager
async def shared_state(
    url: str, options: Mapping[str, Any] | None = None
) -> AsyncIterator[StateStore]:
    """The connection to the state store at ``url`` that every part of this process
    shares (a door's held sessions and approvals, the agent's checkpoints, a service's
    replay guard), for the life of the block.

    The first user connects (:func:`~toolbus.plugins.connect_state`); the others
    get the same store, also while it is still connecting; the last one to leave
    closes it. Parts must not close it themselves. ``options`` count: the same URL
    with other options is another connection.
    """
    loop = asyncio.get_running_loop()
    opened = _SHARED.setdefault(loop, {})
    key = (url, json.dumps(dict(options or {}), sort_keys=True, default=str))
    while True:
        shared = opened.get(key)
        if shared is None:
            shared = opened[key] = _SharedStore(loop.create_future())
            try:
                shared.connected.set_result(await connect_state(url, options))
            except BaseException as exc:
                del opened[key]
                if isinstance(exc, Exception):
                    shared.connected.set_exception(exc)
                    shared.connected.exception()  # retrieved: nobody else may be waiting
                else:  # cancelled: whoever waits connects for themselves
                    shared.connected.cancel()
                raise
        # Counted before waiting: a user who leaves meanwhile must not close it.
        shared.users += 1
        try:
            store = await asyncio.shield(shared.connected)
            break
        except asyncio.CancelledError:
            await _leave(opened, key, shared)
            if not shared.connected.cancelled():
                raise  # this task was cancelled, not the one connecting
        except BaseException:
            await _leave(opened, key, shared)
            raise
    try:
        yield store
    finally:
        await _leave(opened, key, shared)


async def _leave(
    opened: dict[tuple[str, str], _SharedStore], key: tuple[str, str], shared: _SharedStore
) -> None:
    """One user less; the last closes the connection."""
    shared.users -= 1
    if shared.users:
        return
    if opened.get(key) is shared:
        del opened[key]
    connected = shared.connected
    if connected.done() and not connected.cancelled() and connected.exception() is None:
        await connected.result().close()


@asynccontextmanager
async def door_state(
    url: str | None,
    options: Mapping[str, Any] | None = None,
    keys: SealKeys | None = None,
    *,
    door: str = "the front door",
) -> AsyncIterator[StateStore]:
    """The state store a front door keeps its state in: the configured one (``state`` in
    ``toolbus.toml``, shared with this process's other parts), so that every replica
    shares it, sealed with ``keys`` (a shared store without them is refused:
    :class:`~toolbus.application.sealing.doors.SealKeysMissing`); else one in this
    process's memory."""
    if keys is None and shared_url(url):
        door_seal_keys(door, url, ())  # raises, naming the fix
    async with shared_state(url or f"memory://door-{uuid.uuid4().hex}", options) as store:
        yield door_store(door, store, keys, private=not shared_url(url))


def private_store(store: StateStore) -> bool:
    """Whether ``store`` lives in this process (no other process can write it)."""
    return isinstance(store, MemoryStateStore)


def seal_keys_of(
    settings: Settings | Mapping[str, Any], base_dir: Path, *, door: str, url: str | None
) -> SealKeys | None:
    """The seal keys the settings name for ``door`` (``seal-keys``, ``TOOLBUS_SEAL_KEYS``):
    :class:`ConfigError` for a key that cannot be read, or none given for a shared store."""
    if isinstance(settings, Settings):
        sources: Sequence[str] = settings.seal_keys
    else:
        given = settings.get("seal-keys")
        sources = tuple(given) if isinstance(given, list) else ()
    return door_seal_keys(door, url, sources, base_dir=base_dir)


@asynccontextmanager
async def opened_door(
    tools: Tools,
    *,
    local: Mapping[str, Any] | None,
    settings: Settings | Mapping[str, Any],
    base_dir: Path | None = None,
    store: StateStore | None = None,
    door_name: str = "the front door",
    **options: Any,
) -> AsyncIterator[FrontDoor]:
    """The front door the operator's files describe, for the life of the block.

    Besides :meth:`FrontDoor.from_files`: the door's call steps
    (:func:`~toolbus.application.doors.steps.call_steps`), with the call policy
    ``[policy]`` names and the state store approvals wait in (``store``, a
    connected one the caller closes; else ``state`` in ``toolbus.toml``; else
    memory), both closed with the door. A shared store (given, or configured) holds the
    door's held sessions too, unless ``holder`` is given, and is sealed with the
    seal keys the settings name (``seal-keys``; a shared store without them
    stops the door, naming the fix: ``door_name`` names the door in that message).
    ``settings`` is the loaded :class:`~toolbus.settings.Settings` (its ``state``
    honours ``TOOLBUS_STATE``) or the parsed ``toolbus.toml``.
    """
    if isinstance(settings, Settings):
        table: Mapping[str, Any] = settings.file
        url, state_options = settings.state, settings.state_options
        if base_dir is None and settings.file_path is not None:
            base_dir = settings.file_path.parent
    else:
        table = settings
        url = _state_of(settings)
        given = settings.get("state-options")
        state_options = given if isinstance(given, Mapping) else {}
    base = base_dir or Path.cwd()
    keys = seal_keys_of(settings, base, door=door_name, url=url if store is None else None)
    async with AsyncExitStack() as stack:
        if store is not None:
            state = door_store(door_name, store, keys, private=private_store(store))
        else:
            state = await stack.enter_async_context(
                door_state(url, state_options, keys, door=door_name)
            )
        if (store is not None or url is not None) and "holder" not in options:
            # Held sessions in the configured store too: any replica serves any request.
            options["holder"] = StoredHolder(state)
        engine = policy_engine(table, base)
        try:
            door = FrontDoor.from_files(
                tools,
                local=local,
                settings=table,
                base_dir=base,
                steps=call_steps(table, engine=engine, store=state),
                **options,
            )
        except BaseException:
            if engine is not None:  # the door did not start: nobody else stops its watch
                engine.close()
            raise
        if isinstance(state, SealedStore) and state.on_refused is None:
            state.on_refused = door.refused_record
        try:
            yield door
        finally:
            door.close()


SettingsSource = Settings | Mapping[str, Any] | str | os.PathLike[str] | None


def _settings(source: SettingsSource) -> tuple[Settings | Mapping[str, Any], Path]:
    """The settings (loaded, or the parsed ``toolbus.toml``) and the folder its paths are
    relative to."""
    if isinstance(source, Settings):
        base = source.file_path.parent if source.file_path is not None else Path.cwd()
        return source, base
    if isinstance(source, Mapping):
        return source, Path.cwd()
    path = Path(source) if source is not None else Path.cwd() / SETTINGS_FILE
    if source is None and not path.is_file():
        return {}, Path.cwd()
    return read_settings_file(path), path.parent


def _state_of(table: Mapping[str, Any]) -> str | None:
    state = table.get("state")
    return state if isinstance(state, str) and state else None


@asynccontextmanager
async def open_tools(
    broker: str = "memory://",
    config: RegistrySource = None,
    *,
    serve: Iterable[ToolService] = (),
    options: Mapping[str, Any] | None = None,
    live: bool = False,
    signer: CallSigner | None = None,
    settings: SettingsSource = None,
) -> AsyncIterator[Tools]:
    """Connect to ``broker`` and call configured tools by name; the quickest start.

    ``config`` is a config file or directory, a snapshot dict, a Registry, or None
    for the installed plugins' default tools. ``serve`` hosts services in this
    process for the duration of the block (handy with ``memory://``)::

        async with open_tools("memory://", "config.json", serve=[weather]) as tools:
            print(await tools.call("weather-us", {"city": "Boston"}, user="alice"))

    The tools are Python's front door (docs/access-control.md): an
    ``AgentSession(tools, user=...)`` started with them follows the operator's
    ``toolbus.toml`` (``settings``: a path, the parsed table, or by default
    ``toolbus.toml`` in the working directory, if there is one) and ``config``:
    permissions, entry states, the installed plugins' code hooks, per-user
    limits, the audit file. ``tools.call`` makes a call of the program's own,
    outside any session.

    With ``live=True`` the tools follow the config service and the tool
    services announcing on the broker, ``config`` being the local layer beneath
    them (docs/configuration.md); ``tools.registry`` is swapped on every change.

    ``signer`` signs every call for services that verify callers (docs/security.md).
    """
    registry = registry_from(config)
    table, base = _settings(settings)
    async with AsyncExitStack() as stack:
        with plain_errors():
            bus = await connect(broker, options)
            stack.push_async_callback(bus.close)
            services = tuple(serve)
            if services:
                await stack.enter_async_context(running(bus, *services))
            client = await stack.enter_async_context(ToolServiceClient(bus, signer=signer))
            tools = Tools(client, registry)
            if live:
                types = tool_types(load_tool_plugins())
                follower = LiveRegistry(bus, local=registry.snapshot, tool_types=types)
                await stack.enter_async_context(follower)
                tools = follower.tools(client)
            await stack.enter_async_context(
                opened_door(
                    tools,
                    local=registry.snapshot,
                    settings=table,
                    base_dir=base,
                    code_hooks=CodeHooks.installed(),
                )
            )
        yield tools
