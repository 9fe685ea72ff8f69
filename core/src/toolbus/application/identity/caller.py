"""The caller of the tool call being served, for tool code to read.

The service host sets it for the length of each call: verified (user and
groups from a call token) on a service that verifies tokens, otherwise the
body's unverified ``user`` with no groups.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar

from toolbus.domain.identity import Caller

#: The call being served: its caller, and its caller's deadline (Unix seconds, or
#: None). The service host sets and resets it per call; one variable for both, as
#: each ``set``/``reset`` pair is a measurable share of an in-memory call.
serving: ContextVar[tuple[Caller, float | None] | None] = ContextVar(
    "toolbus_serving", default=None
)
_granted: ContextVar[tuple[str, ...] | None] = ContextVar("toolbus_granted", default=None)


def current_caller() -> Caller:
    """Who the call being served is for. Only inside a tool service's call."""
    served = serving.get()
    if served is None:
        raise RuntimeError("current_caller() is only known while a tool service is serving a call")
    return served[0]


@contextmanager
def granting(groups: Sequence[str]) -> Iterator[None]:
    """Sign the calls made inside this block with these granted groups.

    A gateway or agent runtime wraps the calls of one authenticated request:
    ``with granting(session.groups): await tools.call(...)``. Outside any such
    block a :class:`~toolbus.application.identity.CallSigner` signs its own
    default groups.
    """
    if isinstance(groups, str):
        raise TypeError(f"groups must be a list of group names, not the string {groups!r}")
    token = _granted.set(tuple(groups))
    try:
        yield
    finally:
        _granted.reset(token)


def granted_groups() -> tuple[str, ...] | None:
    """The groups of the innermost :func:`granting` block, or None outside one."""
    return _granted.get()
