"""Which asyncio event loop a process runs on: the standard one, or uvloop.

uvloop (``pip install 'toolbus[uvloop]'``) is a drop-in asyncio loop written on
libuv; it makes the loop's own work (sockets, callbacks, timers) cheaper, which
shows on brokers whose round trip is short. Installing the extra is the opt-in:
``auto``, the default of the long-running commands, picks uvloop when it can be
imported and the standard loop otherwise, as uvicorn's ``--loop auto`` does.
"""

from __future__ import annotations

import asyncio
import importlib
import sys
from collections.abc import Callable
from enum import StrEnum
from typing import Any

from toolbus.domain.errors import PluginError

INSTALL_HINT = "install it with: pip install 'toolbus[uvloop]' (Linux and macOS only)"


class EventLoop(StrEnum):
    """A choice of event loop, as ``--loop`` takes it."""

    AUTO = "auto"
    ASYNCIO = "asyncio"
    UVLOOP = "uvloop"


class EventLoopUnavailable(PluginError):
    """uvloop was asked for by name but cannot be imported."""


def _uvloop() -> Any | None:
    """The uvloop module, or None when it is not installed (or not built for this OS)."""
    if sys.platform == "win32":
        return None
    try:
        return importlib.import_module("uvloop")
    except ImportError:
        return None


def resolve(choice: EventLoop | str) -> EventLoop:
    """The loop ``choice`` stands for here: ``auto`` becomes uvloop or asyncio.

    Raises :class:`EventLoopUnavailable` when uvloop is asked for by name and is
    missing: a process that was told to run on uvloop must not quietly run on
    something else.
    """
    try:
        choice = EventLoop(choice)
    except ValueError:
        names = ", ".join(e.value for e in EventLoop)
        raise EventLoopUnavailable(
            f"unknown event loop {choice!r}: choose one of {names}"
        ) from None
    if choice is EventLoop.ASYNCIO:
        return choice
    available = _uvloop() is not None
    if choice is EventLoop.UVLOOP and not available:
        raise EventLoopUnavailable(f"--loop uvloop: uvloop is not installed; {INSTALL_HINT}")
    return EventLoop.UVLOOP if available else EventLoop.ASYNCIO


def backend_options(choice: EventLoop | str) -> dict[str, Any]:
    """``anyio.run(..., backend="asyncio", backend_options=...)`` for ``choice``."""
    return {"use_uvloop": resolve(choice) is EventLoop.UVLOOP}


def loop_factory(choice: EventLoop | str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """``asyncio.Runner(loop_factory=...)`` for ``choice`` (None: the standard loop)."""
    if resolve(choice) is EventLoop.ASYNCIO:
        return None
    module = _uvloop()
    assert module is not None  # resolve() checked
    factory: Callable[[], asyncio.AbstractEventLoop] = module.new_event_loop
    return factory


def running_loop_name() -> str:
    """``uvloop`` or ``asyncio``: what the running loop actually is, for start-up lines."""
    loop = asyncio.get_running_loop()
    return "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"
