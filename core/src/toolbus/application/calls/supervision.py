"""Running long-lived parts (service hosts, announcers) for the length of a block."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import anyio

T = TypeVar("T")


@asynccontextmanager
async def supervised(
    parts: Sequence[T],
    start: Callable[[T], Callable[..., Coroutine[Any, Any, Any]]],
    stop: Callable[[T], None],
) -> AsyncIterator[Sequence[T]]:
    """Start every part with ``tasks.start(start(part))`` (so each has signalled it
    is ready before the block begins), and ``stop`` each when the block ends.

    The block's own exception is re-raised as itself, outside the task group,
    rather than wrapped in an ExceptionGroup.
    """
    failure: Exception | None = None
    async with anyio.create_task_group() as tasks:
        for part in parts:
            await tasks.start(start(part))
        try:
            yield parts
        except Exception as exc:
            failure = exc
        finally:
            for part in parts:
                stop(part)
    if failure is not None:
        raise failure
