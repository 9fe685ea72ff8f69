"""pulsar-client's threads and callbacks, bridged into asyncio without blocking the loop.

pulsar-client runs its own C++ threads. Two kinds of call reach us:

* **Blocking calls** (subscribe, create a producer, close): run on a worker
  thread with :func:`blocking`. They are rare, so a thread hop is cheap.
* **Callbacks** (a send was receipted, a message arrived): run on a
  pulsar-client thread, where they do nothing but hand over to the event loop
  through its :class:`Handoff`. They must never raise either: pulsar-client ends
  the process if a callback does.

Why not ``pulsar.asyncio``: its ``Consumer.receive()`` gives a message to the
future that asked for it, so a reader cancelled at the wrong moment loses a
message, and every receive is one more call into the client from the loop
thread. A message listener hands each message over once, and the subscription
queues it for whichever reader is waiting (see ``subscription``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


class Handoff:
    """Runs calls on one event loop, handed over from pulsar-client's threads.

    ``call_soon_threadsafe`` writes to the loop's wake-up pipe on every call: a
    system call, made while holding the GIL, for every message and every send
    receipt, and one more read for the loop. Under load most of those are
    redundant, the loop being about to run anyway. So calls are queued here and
    the loop is woken by the first call of a batch only; it then runs the whole
    batch in one go.
    """

    __slots__ = ("_armed", "_lock", "_loop", "_queue")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._queue: deque[tuple[Callable[..., None], tuple[Any, ...]]] = deque()
        self._lock = threading.Lock()
        self._armed = False  # a drain is scheduled and will see what is queued

    def call(self, function: Callable[..., None], *args: Any) -> None:
        """Run ``function(*args)`` on the loop soon; safe from any thread, never raises."""
        with self._lock:
            self._queue.append((function, args))
            if self._armed:
                return
            self._armed = True
        # A closed loop raises RuntimeError: nobody is left to run the call.
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
        with self._lock:
            batch, self._queue = self._queue, deque()
        for function, args in batch:
            try:
                function(*args)
            except Exception as exc:  # one bad call must not lose the rest of the batch
                self._loop.call_exception_handler(
                    {"message": "toolbus_pulsar: a hand-over failed", "exception": exc}
                )
        with self._lock:
            if self._queue:
                # More arrived meanwhile: run them after whatever else is ready.
                self._loop.call_soon(self._drain)
            else:
                self._armed = False


_handoffs: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Handoff] = (
    weakref.WeakKeyDictionary()
)


def handoff(loop: asyncio.AbstractEventLoop) -> Handoff:
    """The :class:`Handoff` of ``loop``, made on first use (call on the loop)."""
    found = _handoffs.get(loop)
    if found is None:
        found = _handoffs[loop] = Handoff(loop)
    return found


async def blocking(call: Callable[[], T], *, cleanup: Callable[[T], Any] | None = None) -> T:
    """Run a blocking pulsar-client ``call`` on a worker thread and await its result.

    If the caller is cancelled meanwhile, the call still completes on its thread;
    ``cleanup`` (itself blocking) then disposes of what it made, so that, say, a
    consumer nobody will read does not go on taking a group's messages.
    """
    loop = asyncio.get_running_loop()
    future = loop.run_in_executor(None, call)
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        future.add_done_callback(functools.partial(_abandoned, loop, cleanup))
        raise


def _abandoned(
    loop: asyncio.AbstractEventLoop,
    cleanup: Callable[[Any], Any] | None,
    future: asyncio.Future[Any],
) -> None:
    if future.cancelled():
        return
    if future.exception() is not None:  # retrieved, so asyncio does not report it
        return
    if cleanup is not None and not loop.is_closed():
        loop.run_in_executor(None, cleanup, future.result())
