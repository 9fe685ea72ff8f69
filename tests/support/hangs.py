"""A test that hangs fails alone, with the traceback of where it waited; the run goes on.

pytest-timeout gives each test a limit (``timeout`` in pyproject.toml: the quick
suite's; :data:`SLOW_TIMEOUT` for tests marked slow) covering its set-up, call
and tear-down, and ends it with SIGALRM (``timeout_method = "signal"``): a test
blocked in a system call (a subprocess's wait, a socket) fails with its stack.

An async test is given its own deadline inside its event loop first, a little
before that limit: it is cancelled where it waits, its ``async with`` blocks clean
up, and the loop is left fit for the next test. SIGALRM landing in the loop
instead would leave the test pending in the runner task that the next async test
needs. The deadline is asyncio's (:func:`asyncio.timeout`), not an anyio cancel
scope: a test may enter contexts that its fixtures leave (``ToolTestKit.serve``),
which a scope around the test would not allow.

Where neither can reach Python (a call in a client's C code that no signal
interrupts), pytest's ``faulthandler_timeout`` is the last resort: it ends the
run, printing every thread's stack, rather than letting it hang until CI's own
time limit (pyproject.toml sets it a minute past :data:`SLOW_TIMEOUT`).

Loaded by ``tests/conftest.py`` as a plugin.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import time
from collections.abc import Callable, Generator
from typing import Any

import pytest

#: The limit of a test marked slow (seconds): clusters, broker restarts and the
#: benchmarks' smoke runs add their servers' own start-up limits (a RabbitMQ node
#: may take 90 s to start on a loaded machine, and a restart test starts it twice).
SLOW_TIMEOUT = 300.0
#: Seconds before the test's limit at which an async test is cancelled in its loop,
#: left for its clean-up, as a share of the limit (at least :data:`MIN_CLEAN_UP`).
CLEAN_UP_SHARE = 0.1
MIN_CLEAN_UP = 5.0


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("slow") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(SLOW_TIMEOUT))


@pytest.hookimpl(tryfirst=True)
def pytest_timeout_set_timer(item: pytest.Item, settings: Any) -> None:
    """Note when the test's limit started (pytest-timeout's own hook then sets the timer,
    as this one returns nothing)."""
    item.stash[_LIMIT] = (time.monotonic(), float(settings.timeout))


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> Generator[None, object, object]:
    original = pyfuncitem.obj
    limit = pyfuncitem.stash.get(_LIMIT, None)
    # Hypothesis drives its async tests itself (anyio wraps their inner test).
    if limit is not None and _is_async(original) and not hasattr(original, "hypothesis"):
        started, timeout = limit
        left = timeout - (time.monotonic() - started)
        pyfuncitem.obj = _within(original, left - max(MIN_CLEAN_UP, CLEAN_UP_SHARE * timeout))
    try:
        return (yield)
    finally:
        pyfuncitem.obj = original


_LIMIT = pytest.StashKey[tuple[float, float]]()


def _is_async(function: object) -> bool:
    return inspect.iscoroutinefunction(function)


def _within(test: Callable[..., Any], seconds: float) -> Callable[..., Any]:
    """``test`` cancelled after ``seconds``, failing with where it waited."""

    @functools.wraps(test)
    async def within_its_time(*args: Any, **kwargs: Any) -> Any:
        deadline = asyncio.timeout(max(seconds, 0.0))
        try:
            async with deadline:
                return await test(*args, **kwargs)
        except TimeoutError as exc:
            if deadline.expired():
                exc.add_note(
                    f"the test did not end within its time ({seconds:.0f} s left after its "
                    "set-up, less time to clean up): see above where it waited"
                )
            raise

    return within_its_time
