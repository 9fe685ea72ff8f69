"""Running long-lived parts (service hosts, announcers) for the length of a block."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import Any, TypeVar

import anyio

from toolbus.domain.errors import ToolbusError

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
    with plain_errors():
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


@contextmanager
def plain_errors() -> Iterator[None]:
    """Re-raise an ExceptionGroup from a task group as the error it is about.

    Callers catch ``ToolbusError``, not groups: a group holding a toolbus error
    is replaced by its first one, and a group holding a single error of any kind
    by that error. Anything else (several foreign errors) stays a group.
    """
    try:
        yield
    except BaseExceptionGroup as group:
        error = _the_error(group)
        if error is None:
            raise
        # The group was only the task group's wrapping: leave it out of the traceback.
        error.__suppress_context__ = True
        raise error from error.__cause__


def _the_error(group: BaseExceptionGroup[BaseException]) -> BaseException | None:
    leaves = list(_leaves(group))
    for leaf in leaves:
        if isinstance(leaf, ToolbusError):
            return leaf
    return leaves[0] if len(leaves) == 1 else None


def _leaves(error: BaseException) -> Iterator[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            yield from _leaves(inner)
    else:
        yield error
