"""Live mode for ``toolbus call`` and ``toolbus tools``: the tools the broker knows.

Live, the commands see what an agent would: the configuration held by the
config service and the tools running services announce, on top of the local
configuration. It is on by default when the broker is a real one (not
``memory://``, where nothing outside this process can be), and ``--live`` /
``--no-live`` decide otherwise. The commands wait a bounded time (``--wait``)
for what they need, then go on with what they have.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AsyncExitStack
from typing import Annotated, Any

import anyio
import typer

from toolbus.application.live.registry import LiveRegistry
from toolbus.cli.plugin_api import fail, run
from toolbus.domain.config.loading import load_registry
from toolbus.domain.config.registry import Registry
from toolbus.domain.errors import ConfigError, PluginError, UnknownTool
from toolbus.plugins import ToolPlugin, connect, load_tool_plugins
from toolbus.ports import Bus
from toolbus.runtime import build_registry, tool_types
from toolbus.settings import Settings

DEFAULT_WAIT = 2.0

LiveOption = Annotated[
    bool | None,
    typer.Option(
        "--live/--no-live",
        help="Also use the config service's configuration and the tools running services "
        "announce. Default: on unless the broker is memory://.",
        show_default=False,
    ),
]
WaitOption = Annotated[
    float,
    typer.Option(
        "--wait",
        min=0.0,
        help="Live mode: seconds to wait for the config service and announcing services.",
    ),
]


def is_live(live: bool | None, broker: str) -> bool:
    """``--live``/``--no-live`` if given, else whether ``broker`` reaches other processes."""
    return not broker.startswith("memory:") if live is None else live


async def follow(
    stack: AsyncExitStack, bus: Bus, local: Mapping[str, Any], plugins: list[ToolPlugin]
) -> LiveRegistry:
    """A live registry over ``local``, started without waiting for the config service."""
    live = LiveRegistry(bus, local=local, tool_types=tool_types(plugins), wait_for_config=False)
    return await stack.enter_async_context(live)


async def registry_with(live: LiveRegistry, tool: str, wait: float, broker: str) -> Registry:
    """The live registry once it knows ``tool``; UnknownTool after ``wait`` seconds."""

    def knows(registry: Registry) -> bool:
        try:
            registry.tool(tool)
        except UnknownTool:
            return False
        return True

    try:
        return await live.wait_until(knows, timeout=wait)
    except TimeoutError:
        try:
            live.registry.tool(tool)
        except UnknownTool as exc:
            raise UnknownTool(
                f"{exc} (looked for {wait:g} s in the local configuration, the config "
                f"service and the tools announced on {broker}; start the service that "
                "offers it, or raise --wait)"
            ) from None
        return live.registry


def live_registry(settings: Settings, wait: float, *, local_layer: bool = True) -> Registry:
    """The registry an agent on ``settings.broker`` would have after ``wait`` seconds.

    ``local_layer=False`` leaves out the local configuration (and with none
    configured, the installed plugins' tools): only what the broker knows.
    """
    try:
        plugins = load_tool_plugins()
        local = build_registry(settings, plugins) if local_layer else load_registry({})
    except (ConfigError, PluginError) as exc:
        fail(str(exc))

    async def main() -> Registry:
        async with AsyncExitStack() as stack:
            bus = await connect(settings.broker, settings.broker_options)
            stack.push_async_callback(bus.close)
            live = await follow(stack, bus, local.snapshot, plugins)
            # Nothing says "every service has announced": listen for the whole wait.
            await anyio.sleep(wait)
            return live.registry

    return run(main)
